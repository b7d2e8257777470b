"""Reading ONNX files: the one loader (a one-line error for anything that is not a whole model) and the one
reader of a graph's inputs and outputs. check, prepare, compile, validate, the bundle manifest and the EPContext
wrappers all read models through it, without their weights.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base.errors import BadInput, first_line
from qnndeploy.model.onnxwire import without_weights

if TYPE_CHECKING:
    import onnx
    from google.protobuf.message import Message

CONTROL_FLOW_OPS = {"If", "Loop", "Scan"}
# Ops whose outputs are not a function of their inputs: folding or copying them would change the draws.
RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
_GRAPH, _GRAPHS = 5, 10  # onnx.AttributeProto.GRAPH and GRAPHS (onnx is imported only where needed)


@dataclass
class TensorInfo:
    name: str
    dtype: str  # numpy name (float32, int64…), "unknown" when not given, or "sequence"/"map"/"optional"
    shape: list[int | str] | None  # None: rank unknown; a str is a dynamic dim (its symbol, or "?")

    @property
    def dynamic(self) -> bool:
        return self.shape is None or any(isinstance(d, str) for d in self.shape)

    @property
    def static_shape(self) -> list[int]:
        """The shape of a tensor known to be static (check `dynamic` first)."""
        if self.shape is None or self.dynamic:
            raise ValueError(f"{self.name} has dynamic size {self.shape_text()}")
        return [d for d in self.shape if isinstance(d, int)]

    def shape_text(self) -> str:
        return "[?]" if self.shape is None else "[" + ", ".join(str(d) for d in self.shape) + "]"


# --- loading --------------------------------------------------------------------------------------

# Sanity limits: a dim or element count above them is damage or a hostile file, not a model. Checked before any
# allocation or ONNX Runtime session (whose size arithmetic aborts the process on overflow).
MAX_TENSOR_ELEMENTS = 2**31  # per tensor
MAX_FOLDED_BYTES = 64 << 20  # a constant result folding may materialise (fold.py keeps bigger ones as nodes)
_MAX_LOCATION = 4096  # characters in an external-data location (PATH_MAX); one name part at most 255
_SHAPE_OPS = {"ConstantOfShape": 0, "Expand": 1}  # op -> the input holding the output's shape
_CHECKED_OPS = {"Constant", "Tile", *_SHAPE_OPS}


def load_model(path: Path, check_external: bool = True, weights: bool = True) -> onnx.ModelProto:
    """Parse an ONNX file with a one-line error for anything that is not a whole, sane model. External-data
    weights are not read, only checked to lie inside the model's folder, to exist and to be long enough (unless not
    `check_external`: `bundle verify` judges the data files a model names itself, before anything is read from
    them). Names must be UTF-8, element types known, and dims and constant shapes within MAX_TENSOR_ELEMENTS.
    Without `weights`, big initializers inside the file come without their data (onnxwire): for the stages that
    read the graph and never run or write the model, whose memory then follows the graph."""
    import onnx

    path = Path(path)
    require_model_file(path)
    try:
        if weights:
            # Always binary protobuf: onnx.load would otherwise pick a JSON or text parser from the file's suffix.
            model = onnx.load(str(path), format="protobuf", load_external_data=False)
        else:
            model = onnx.ModelProto()
            model.ParseFromString(without_weights(path))
    except OSError as e:
        raise BadInput(f"cannot read {path}: {e.strerror or e}") from None
    except MemoryError:
        raise BadInput(f"{path} is too large to read into memory") from None
    except Exception as e:  # noqa: BLE001 protobuf and onnx raise DecodeError, ValueError, RuntimeError…
        kind = {".json": "JSON", ".txtpb": "text protobuf", ".pbtxt": "text protobuf", ".txt": "text"}.get(
            path.suffix.lower())
        hint = f" (a {kind} file is not read as a model: give the binary .onnx file)" if kind else ""
        raise BadInput(f"{path} is not a readable ONNX model ({type(e).__name__}: {first_line(e)[:200]}): "
                       f"the file is not an ONNX model or is truncated{hint}; re-export or re-download it"
                       ) from None
    missing = [part for part, gone in (("graph outputs", not model.graph.output), ("nodes", not model.graph.node),
                                       ("opset", not model.opset_import), ("IR version", model.ir_version <= 0))
               if gone]
    if missing:
        listed = ", ".join(missing[:-1]) + " or " + missing[-1] if len(missing) > 1 else missing[0]
        raise BadInput(f"{path} is not an ONNX model: it has no {listed} (an empty or damaged file); "
                       "re-export or re-download it")
    damage = model_damage(model)
    if damage:
        raise BadInput(f"{path} is a damaged or hostile ONNX model: {damage}; re-export or re-download it")
    if not check_external:
        return model
    for location in sorted(external_locations(model)):
        bad = location_problem(location, path.parent)
        if bad:
            raise BadInput(f"{path} names external data {_clip(location)}: {bad}; keep the data file in the "
                           "model's folder and re-export, or re-download the model")
        try:
            present = (path.parent / location).is_file()
        except OSError as e:
            raise BadInput(f"cannot read the external data {_clip(location)} of {path}: "
                           f"{e.strerror or e}") from None
        if not present:
            raise BadInput(f"{path} keeps its weights in {_clip(location)}, which is missing next to it; "
                           "copy the model together with its data file")
    _check_external_sizes(path, model)
    return model


def _clip(text: str, keep: int = 80) -> str:
    """A name from the file, as it can be shown in a one-line message: quoted when not printable, cut when long."""
    shown = text if text.isprintable() else repr(text)
    return shown if len(shown) <= keep else shown[:keep] + f"… ({len(text)} characters)"


def location_problem(location: str, folder: Path) -> str | None:
    """Why an external-data location is refused (it must name a file inside the model's `folder`, compared by
    name: symlinks inside the folder, as the Hugging Face cache makes, are kept), else None."""
    if not location or "\0" in location:
        return "an empty name or one with a NUL byte"
    if len(location) > _MAX_LOCATION or any(len(part.encode("utf-8", "surrogatepass")) > 255
                                             for part in location.split("/")):
        return f"a name longer than any file system takes ({len(location)} characters)"
    if location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
        return "an absolute path, outside the model's folder"
    base = os.path.normpath(Path(folder).absolute())
    full = os.path.normpath(Path(base) / location.replace("\\", "/"))
    if not full.startswith(base.rstrip(os.sep) + os.sep):
        return "a path outside the model's folder ('..')"
    return None


def model_damage(model: onnx.ModelProto) -> str | None:
    """What makes a parsed model unsafe to hand to onnx or ONNX Runtime, or None: a name that is not UTF-8 (protobuf
    hands such strings over as bytes), an unknown element type, a negative or oversized dim, a constant shape or
    repeat count whose product overflows. One pass over every (sub)graph. (An EPContext node's ep_cache_context
    is bundle verify's to judge: it says what the phone would do with it.)"""
    import onnx

    known = set(onnx.TensorProto.DataType.values())
    for g in _all_graphs(model.graph):
        for v in (*g.input, *g.output, *g.value_info):
            if not _text(v.name):
                return f"a value name is not UTF-8 ({_clip(repr(v.name))})"
            if v.type.WhichOneof("value") != "tensor_type":
                continue
            tt = v.type.tensor_type
            if tt.elem_type and tt.elem_type not in known:
                return f"{_clip(v.name)} has the unknown element type {tt.elem_type}"
            dims = [d.dim_value for d in tt.shape.dim if d.HasField("dim_value")]
            if (why := _dims_problem(dims, any_size_ok=True)) is not None:
                return f"{_clip(v.name)} declares dims {_short(dims)}: {why}"
        consts: dict[str, onnx.TensorProto] = {}
        for t in g.initializer:
            if (why := _tensor_problem(t, known)) is not None:
                return why
            consts[t.name] = t
        for i, node in enumerate(g.node):
            if not (_text(node.op_type) and _text(node.domain) and _text(node.name)
                    and all(_text(x) for x in node.input) and all(_text(x) for x in node.output)):
                return f"node {i} has an op type, domain or name that is not UTF-8"
            op = node.op_type
            if op not in _CHECKED_OPS:
                continue
            label = f"node {_clip(node.name)} ({op})" if node.name else f"node #{i} ({op})"
            attrs = {a.name: a for a in node.attribute}
            if op == "Constant" and "value" in attrs:
                if (why := _tensor_problem(attrs["value"].t, known)) is not None:
                    return why
                consts[node.output[0] if node.output else ""] = attrs["value"].t
            slot = _SHAPE_OPS.get(op, 1 if op == "Tile" else None)
            if slot is not None and len(node.input) > slot and node.input[slot] in consts:
                values = _small_ints(consts[node.input[slot]])
                if values is not None and (why := _dims_problem(values, any_size_ok=True)) is not None:
                    return f"{label} is given the constant shape {_short(values)}: {why}"
    return None


def oversized_constants(graph: onnx.GraphProto, limit: int = MAX_FOLDED_BYTES) -> list[str]:
    """The ConstantOfShape, Expand and Tile nodes computed from constants alone whose result would exceed `limit`
    bytes: folding (or an ONNX Runtime session, which folds too) would materialise them. One line per node."""
    import numpy as np
    import onnx

    consts: dict[str, onnx.TensorProto] = {t.name: t for t in graph.initializer}
    consts.update({n.output[0]: a.t for n in graph.node if n.op_type == "Constant" and n.output
                   for a in n.attribute if a.name == "value"})
    found = []
    for i, node in enumerate(graph.node):
        slot = _SHAPE_OPS.get(node.op_type, 1 if node.op_type == "Tile" else None)
        if slot is None or len(node.input) <= slot or not all(x in consts for x in node.input if x):
            continue
        values = _small_ints(consts[node.input[slot]])
        if values is None or any(v < 0 for v in values):
            continue
        if node.op_type == "ConstantOfShape":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            elem, numel = (value.data_type if value is not None else onnx.TensorProto.FLOAT), math.prod(values)
        else:
            data = consts[node.input[0]]
            elem, dims = data.data_type, list(data.dims)
            if node.op_type == "Tile":
                numel = math.prod(dims) * math.prod(values)
            else:  # Expand: the two shapes broadcast, right-aligned
                width = max(len(dims), len(values))
                a, b = [1] * (width - len(dims)) + dims, [1] * (width - len(values)) + values
                numel = math.prod(max(x, y) for x, y in zip(a, b, strict=True))
        try:
            itemsize = np.dtype(dtype_name(elem)).itemsize
        except TypeError:
            itemsize = 1
        if numel * itemsize > limit:
            label = f"node {_clip(node.name)}" if node.name else f"node #{i}"
            found.append(f"{label} ({node.op_type}) makes a constant of {numel * itemsize / 2**20:,.0f} MiB")
    return found


def _text(value: object) -> bool:
    """Whether protobuf decoded a string field: it hands over bytes that are not UTF-8 as bytes."""
    return isinstance(value, str)


def _short(dims: list[int]) -> str:
    return str(dims) if len(dims) <= 8 else str(dims[:8])[:-1] + f", … ({len(dims)} dims)]"


def _dims_problem(dims: list[int], any_size_ok: bool = False) -> str | None:
    """A negative dim (unless `any_size_ok`: declared dims and shape operands use 0 or -1 for "any"), or more than
    MAX_TENSOR_ELEMENTS elements."""
    if not any_size_ok and any(d < 0 for d in dims):
        return "a negative size"
    total = 1
    for d in dims:
        total *= max(d, 1)
        if total > MAX_TENSOR_ELEMENTS:
            return f"over {MAX_TENSOR_ELEMENTS:,} elements in one tensor"
    return None


def _tensor_problem(t: onnx.TensorProto, known: set[int]) -> str | None:
    if not _text(t.name):
        return "a tensor name is not UTF-8"
    if t.data_type not in known:
        return f"tensor {_clip(t.name)} has the unknown element type {t.data_type}"
    if (why := _dims_problem(list(t.dims))) is not None:
        return f"tensor {_clip(t.name)} has dims {_short(list(t.dims))}: {why}"
    return None


def _small_ints(t: onnx.TensorProto) -> list[int] | None:
    """The values of a small integer constant (a shape or repeat count) held in the file, else None."""
    import onnx
    from onnx import numpy_helper

    if t.data_type not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) or len(t.dims) > 1 or \
            math.prod(t.dims) > 64 or t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        return [int(v) for v in numpy_helper.to_array(t).reshape(-1)]
    except Exception:  # noqa: BLE001 a value that does not match its dims: the loader of the runtime says so
        return None


_FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def require_model_file(path: Path) -> None:
    """A one-line error unless `path` is a regular file; says what it is instead (a folder, a FIFO, /dev/null…).
    Only stat()s: opening a FIFO would block."""
    try:
        mode = Path(path).stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise BadInput(f"{path}: no such file") from None
    except OSError as e:
        raise BadInput(f"cannot read {path}: {e.strerror or e}") from None
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
    raise BadInput(f"{path} is {kind}, not an ONNX model file: give the path of the .onnx file")


def _check_external_sizes(path: Path, model: onnx.ModelProto) -> None:
    """Every external tensor must lie inside its data file: a truncated copy is named here, not deep in a loader."""
    import onnx

    sizes: dict[str, int] = {}
    for t in all_tensors(model.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        if location not in sizes:
            try:
                sizes[location] = (path.parent / location).stat().st_size
            except OSError as e:
                raise BadInput(f"cannot read the external data {_clip(location)} of {path}: "
                               f"{e.strerror or e}") from None
        try:
            offset = int(info.get("offset") or 0)
            length = int(info["length"]) if info.get("length") else tensor_nbytes(t)
            if offset < 0 or (length is not None and length < 0):
                raise ValueError
        except ValueError:
            raise BadInput(f"{path}: tensor {_clip(t.name)} has a damaged external data entry "
                           f"({_clip(str(info))}); "
                           "re-export the model") from None
        if length is not None and offset + length > sizes[location]:
            raise BadInput(
                f"the external data file {path.parent / location} is truncated or damaged: tensor {t.name} needs "
                f"bytes {offset}-{offset + length}, the file has {sizes[location]}; copy the model together with "
                "its complete data file, or re-export it")


def tensor_nbytes(t: onnx.TensorProto) -> int | None:
    """The bytes a tensor's data takes as the model stores it (None: a packed type such as int4)."""
    import numpy as np

    try:
        itemsize = np.dtype(dtype_name(t.data_type)).itemsize
    except TypeError:
        return None  # 4-bit and other packed types: leave the check to the loader
    return math.prod(t.dims) * itemsize


def external_locations(model: onnx.ModelProto) -> set[str]:
    import onnx

    return {e.value for t in all_tensors(model.graph) if t.data_location == onnx.TensorProto.EXTERNAL
            for e in t.external_data if e.key == "location"}


# --- walking the graph ----------------------------------------------------------------------------

def _all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and every subgraph, depth first, without recursion."""
    todo = [graph]
    while todo:
        g = todo.pop()
        yield g
        subgraphs = []
        for node in g.node:
            if not node.attribute:
                continue
            for attr in node.attribute:
                if attr.type == _GRAPH:
                    subgraphs.append(attr.g)
                elif attr.type == _GRAPHS:
                    subgraphs.extend(attr.graphs)
        todo.extend(reversed(subgraphs))


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for g in _all_graphs(graph):
        yield from g.node


def outer_reads(node: onnx.NodeProto) -> Iterator[str]:
    """Every tensor a node reads, those its subgraphs read from the outer graph included."""
    yield from (i for i in node.input if i)
    for attr in node.attribute:
        for g in ([attr.g] if attr.type == _GRAPH else list(attr.graphs)):
            inner = {o for n in all_nodes(g) for o in n.output} | {i.name for i in g.input} \
                | {t.name for t in g.initializer}
            yield from (i for n in all_nodes(g) for i in n.input if i and i not in inner)


def constant_tensors(graph: onnx.GraphProto) -> set[str]:
    """The tensors of the main graph computed from no graph input and no random draw (nodes in topological
    order): a Constant node's, a Cast of one. A split copies them into each part rather than cutting there."""
    fed = {i.name for i in graph.input} - {t.name for t in graph.initializer}
    constant: set[str] = set()
    for node in graph.node:
        if node.op_type not in RANDOM_OPS and not any(u in fed for u in outer_reads(node)):
            constant.update(o for o in node.output if o)
        else:
            fed.update(o for o in node.output if o)
    return constant


def all_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Initializers and Constant values of every (sub)graph."""
    for g in _all_graphs(graph):
        yield from g.initializer
        for node in g.node:
            if node.op_type == "Constant":
                for attr in node.attribute:
                    if attr.HasField("t"):
                        yield attr.t


# --- inputs and outputs ---------------------------------------------------------------------------

def dtype_name(elem_type: int) -> str:
    import onnx

    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name
    except (KeyError, TypeError, ValueError):
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def tensor_info(value: onnx.ValueInfoProto, written: bool = False) -> TensorInfo:
    """A graph input or output. A dim value of 0 or -1 (some exporters' "any size") reads as "?", unless `written`:
    the bundle manifest keeps dims as the file writes them, and calls a value that is no tensor
    "unknown"."""
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        return TensorInfo(value.name, "unknown" if written else (kind or "unknown").replace("_type", ""), None)
    tt = value.type.tensor_type
    dtype = dtype_name(tt.elem_type) if tt.elem_type else "unknown"
    if not tt.HasField("shape"):
        return TensorInfo(value.name, dtype, None)
    dims: list[int | str] = [d.dim_value if d.HasField("dim_value") and (written or d.dim_value > 0)
                             else (d.dim_param or "?") for d in tt.shape.dim]
    return TensorInfo(value.name, dtype, dims)


def inferred_values(model: onnx.ModelProto, data_prop: bool = False) -> dict[str, onnx.ValueInfoProto]:
    """Every value of the main graph with its type as shape inference gives it under the model's own opsets (inputs,
    intermediates, outputs); the declared ones alone where inference cannot follow the graph. One pass, for the
    readers that need the types or shapes of intermediate tensors (`data_prop`: also shapes computed by Shape ops).
    Run on the model without its large weights (weightless; inference reads their dims): onnx copies the model
    in and out of one protobuf, which held 6x a 0.9 GB encoder at once and refuses 2 GB."""
    import onnx

    graph = model.graph
    values = {v.name: v for v in (*graph.input, *graph.value_info, *graph.output)}
    try:
        inferred = onnx.shape_inference.infer_shapes(weightless(model), data_prop=data_prop).graph
    except Exception:  # noqa: BLE001 onnx raises InferenceError, ValueError… for graphs it cannot follow
        return values
    values.update({v.name: v for v in (*inferred.input, *inferred.value_info, *inferred.output)})
    return values


def real_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs the caller feeds (old exports also list every initializer as an input)."""
    inits = {t.name for t in graph.initializer}
    return [v for v in graph.input if v.name not in inits]


def model_inputs(path: Path) -> list[TensorInfo]:
    """The inputs a caller feeds the model at `path` (read without its weights)."""
    return [tensor_info(v) for v in real_inputs(load_model(Path(path), weights=False).graph)]


def model_outputs(path: Path) -> list[TensorInfo]:
    """The outputs of the model at `path` (read without its weights)."""
    return [tensor_info(v) for v in load_model(Path(path), weights=False).graph.output]


INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})

# Ops that pass integer values through unchanged (only moved, reshaped or re-typed): an index fed through them
# still indexes the same table.
_VALUE_PRESERVING = {"Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand", "Transpose",
                     "Slice", "Tile", "Concat"}
_INDEXING = {"Gather": 1, "GatherElements": 1}  # op -> which input holds the indices


def scalar_constant(graph: onnx.GraphProto, name: str) -> float | None:
    """The value of a one-element initializer or Constant output, else None."""
    from onnx import numpy_helper

    for t in graph.initializer:
        if t.name == name and list(t.dims) in ([], [1]):
            return float(numpy_helper.to_array(t).reshape(-1)[0])
    for node in graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            for attr in node.attribute:
                if attr.name == "value" and list(attr.t.dims) in ([], [1]):
                    return float(numpy_helper.to_array(attr.t).reshape(-1)[0])
                if attr.name == "value_float":
                    return attr.f
    return None


def _mask_use(graph: onnx.GraphProto, node: onnx.NodeProto, name: str) -> str | None:
    """Why `name` must be 0 or 1 where `node` uses it: cast to bool, or taken from 1 (an attention mask's
    (1 - mask) * large_negative, where any other value overflows)."""
    import onnx

    if node.op_type == "Cast" and any(a.name == "to" and a.i == onnx.TensorProto.BOOL for a in node.attribute):
        return f"it is cast to bool in {node.name or '(unnamed)'}"
    if node.op_type == "Sub" and node.input[1:2] == [name] and scalar_constant(graph, node.input[0]) == 1.0:
        return f"it is a 0/1 mask (1 - it, in {node.name or '(unnamed)'})"
    return None


def int_input_ranges(graph: onnx.GraphProto) -> dict[str, tuple[int, int, str]]:
    """For each integer input that indexes a table (an embedding, a lookup), serves as a 0/1 mask or is a length
    (compared with a Range's positions), the range [lo, hi) its values must lie in, and why: random samples drawn
    there run the model as the app does, instead of failing in a Gather, overflowing a mask's
    (1 - mask) * -3.4e38 into NaN, or masking out every position."""

    sizes = {t.name: list(t.dims) for t in graph.initializer}
    sizes.update({v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in (*graph.value_info,
                  *graph.input) if v.type.tensor_type.shape.dim and all(d.dim_value > 0 for d in
                                                                         v.type.tensor_type.shape.dim)})
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    producers = {o: n for n in graph.node for o in n.output}
    ranges: dict[str, tuple[int, int, str]] = {}
    for value in real_inputs(graph):
        if tensor_info(value).dtype not in INT_DTYPES:
            continue
        found: list[tuple[int, int, str]] = []
        seen, todo = set(), [value.name]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for node in consumers.get(name, []):
                index_slot = _INDEXING.get(node.op_type)
                if index_slot is not None and len(node.input) > index_slot and node.input[index_slot] == name:
                    table = sizes.get(node.input[0])
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    if table and -len(table) <= axis < len(table):
                        rows = table[axis]
                        why = f"it indexes {node.input[0]} ({rows} rows) in {node.op_type} {node.name or '(unnamed)'}"
                        found.append((0, rows, why))
                elif (mask := _mask_use(graph, node, name)) is not None:
                    found.append((0, 2, mask))
                elif (length := _length_use(graph, node, name, producers)) is not None:
                    found.append((1, length[0] + 1, length[1]))
                elif node.op_type in _VALUE_PRESERVING:
                    todo.extend(node.output)
        if found:
            ranges[value.name] = min(found, key=lambda r: r[1] - r[0])  # the narrowest: every use must hold
    return ranges


_COMPARES = ("Less", "LessOrEqual", "Greater", "GreaterOrEqual")


def _length_use(graph: onnx.GraphProto, node: onnx.NodeProto, name: str, producers: dict[str, onnx.NodeProto]
                ) -> tuple[int, str] | None:
    """(n, why) when `node` compares `name` with the n positions of a Range of constants: a sequence mask
    (positions < length), so `name` is a length from 1 to n. A length outside that range makes the mask empty or
    full and the model computes what it never does for the app (a softmax over nothing, a negative size)."""
    if node.op_type not in _COMPARES or len(node.input) != 2 or name not in node.input:
        return None
    other = node.input[1] if node.input[0] == name else node.input[0]
    source = producers.get(other)
    while source is not None and source.op_type in _VALUE_PRESERVING and source.input:
        source = producers.get(source.input[0])
    if source is None or source.op_type != "Range" or len(source.input) != 3:
        return None
    start, limit, delta = (scalar_constant(graph, i) for i in source.input)
    if start is None or limit is None or not delta:
        return None
    n = max(0, math.ceil((limit - start) / delta))
    if n < 1:
        return None
    return n, (f"it is a length, compared with the {n} positions of Range {source.name or '(unnamed)'} in "
               f"{node.op_type} {node.name or '(unnamed)'}: 1 to {n}")


def class_axes(path: Path) -> dict[str, int]:
    """The outputs that hold class scores, with their class axis: an output made by Softmax or LogSoftmax (its
    axis), a [batch, classes] output of rank 2, or one row of scores ([1, 1, vocab]: a decoder's logits). Argmax
    agreement means something only for these: over a feature map, an embedding or a detector's boxes it compares
    arbitrary positions."""
    model = load_model(Path(path), weights=False)
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    opset = default_opset(model, 13)
    axes = {}
    for value in graph.output:
        info = tensor_info(value)
        node = producers.get(value.name)
        if node is not None and node.op_type in ("Softmax", "LogSoftmax"):
            axes[value.name] = next((a.i for a in node.attribute if a.name == "axis"), -1 if opset >= 13 else 1)
        elif info.shape is not None and len(info.shape) == 2 and isinstance(info.shape[1], int) and info.shape[1] > 1:
            axes[value.name] = 1
        elif info.shape is not None and len(info.shape) > 2 and all(d == 1 for d in info.shape[:-1]) \
                and isinstance(info.shape[-1], int) and info.shape[-1] > 1:
            axes[value.name] = len(info.shape) - 1  # one row of scores, a decoder's next-token logits [1, 1, vocab]
    return axes


ASIDE_BYTES = 1 << 16  # smaller constants stay: a converted op may read their values


def weightless(model: onnx.ModelProto, keep_dims: bool = True) -> onnx.ModelProto:
    """A copy of `model` whose large weights hold no bytes, for onnx's checker, version converter and shape
    inference: they pass the whole model through one protobuf, which refuses 2 GB and more, and read no weight's
    values. A copy, not the model emptied and filled again: protobuf keeps a message's cleared bytes until the message
    goes, and each refill cost one model size (measured: +0.9 GB a call on a 0.9 GB encoder). The converter infers
    shapes from the weights' dims (keep_dims); the checker refuses a tensor without its data unless it is empty."""
    import onnx

    skeleton = onnx.ModelProto()
    _copy_fields(model, skeleton, "graph")
    _copy_fields(model.graph, skeleton.graph, "initializer")
    for tensor in model.graph.initializer:
        if _large(tensor):
            skeleton.graph.initializer.add(name=tensor.name, data_type=tensor.data_type,
                                           dims=list(tensor.dims) if keep_dims else [0])
            if not keep_dims:
                skeleton.graph.initializer[-1].raw_data = b""
        else:
            skeleton.graph.initializer.append(tensor)
    return skeleton


def _large(tensor: onnx.TensorProto) -> bool:
    return tensor.HasField("raw_data") and (tensor_nbytes(tensor) or 0) > ASIDE_BYTES


def _copy_fields(source: Message, target: Message, skip: str) -> None:
    """Every set field of `source` but `skip` into `target`, an empty message of the same type."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if field.is_repeated:
            getattr(target, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def check_model(model: onnx.ModelProto) -> None:
    """onnx's checker, on a model of any size (weightless)."""
    import onnx

    onnx.checker.check_model(weightless(model, keep_dims=False))


def convert_opset(model: onnx.ModelProto, opset: int) -> None:
    """Convert `model` in place to `opset` when it is older (onnx's version converter rewrites the ops whose form
    changed), of any size (weightless): all but the large weights is replaced by the converter's; those stay
    as they are (the converter changes only small constants)."""
    from onnx import version_converter

    if default_opset(model) >= opset:
        return
    converted = version_converter.convert_version(weightless(model), opset)
    large = {t.name for t in model.graph.initializer if _large(t)}
    for field, _ in model.ListFields():
        if field.name != "graph":
            model.ClearField(field.name)
    _copy_fields(converted, model, "graph")
    graph = model.graph
    for field, _ in graph.ListFields():
        if field.name != "initializer":
            graph.ClearField(field.name)
    _copy_fields(converted.graph, graph, "initializer")
    kept = {t.name for t in converted.graph.initializer}
    drop_initializers(graph, lambda name: name in large and name in kept)
    graph.initializer.extend(t for t in converted.graph.initializer if t.name not in large)


def drop_initializers(graph: onnx.GraphProto, keep: Callable[[str], bool]) -> None:
    """Delete the initializers whose name `keep` refuses, in place: clearing the field and refilling it would leave
    protobuf holding every kept weight twice."""
    for i in reversed(range(len(graph.initializer))):
        if not keep(graph.initializer[i].name):
            del graph.initializer[i]


def save_model(model: onnx.ModelProto, path: Path, external: bool) -> None:
    """Write `model` at `path`; `external`: its tensors of 1 kB and more in PATH.data, which is replaced (onnx appends
    to a data file that is there). onnx's own external-data option refuses when a file of that name is in the working
    folder (it checks the name there, not beside the model)."""
    import onnx
    from onnx.external_data_helper import set_external_data

    if external:
        data = path.with_name(path.name + ".data")
        data.unlink(missing_ok=True)
        for graph in _all_graphs(model.graph):
            for tensor in graph.initializer:
                if tensor.HasField("raw_data") and (tensor_nbytes(tensor) or 0) >= 1024:
                    set_external_data(tensor, data.name)
    onnx.save_model(model, str(path))


def default_opset(model: onnx.ModelProto, missing: int = 0) -> int:
    """The model's opset of the default (ai.onnx) domain; `missing` when it imports none."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), missing)

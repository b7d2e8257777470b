"""Reading ONNX files: the one loader (a one-line error for anything that is not a whole model) and the one
reader of a graph's inputs and outputs. check, prepare, compile, validate, the bundle manifest and the EPContext
wrappers all read models through it, without their weights.
"""

from __future__ import annotations

import math
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.errors import QnnDeployError, first_line

if TYPE_CHECKING:
    import onnx

CONTROL_FLOW_OPS = {"If", "Loop", "Scan"}


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

def load_model(path: Path, check_external: bool = True) -> onnx.ModelProto:
    """Parse an ONNX file with a one-line error for anything that is not a whole model. External-data weights
    are not read, only checked to exist and to be long enough (unless not `check_external`: `bundle verify` judges
    the data files a model names itself, before anything is read from them)."""
    import onnx
    from google.protobuf.message import DecodeError

    path = Path(path)
    require_model_file(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except OSError as e:
        raise QnnDeployError(f"cannot read {path}: {e.strerror or e}") from None
    except (DecodeError, ValueError, RuntimeError) as e:
        raise QnnDeployError(f"{path} is not a readable ONNX model ({type(e).__name__}: {first_line(e)}): the file "
                             "is not an ONNX model or is truncated; re-export or re-download it") from None
    missing = [part for part, gone in (("graph outputs", not model.graph.output), ("nodes", not model.graph.node),
                                       ("opset", not model.opset_import), ("IR version", model.ir_version <= 0))
               if gone]
    if missing:
        listed = ", ".join(missing[:-1]) + " or " + missing[-1] if len(missing) > 1 else missing[0]
        raise QnnDeployError(f"{path} is not an ONNX model: it has no {listed} (an empty or damaged file); "
                             "re-export or re-download it")
    if not check_external:
        return model
    for location in sorted(external_locations(model)):
        if not (path.parent / location).is_file():
            raise QnnDeployError(f"{path} keeps its weights in {location}, which is missing next to it; "
                                 "copy the model together with its data file")
    _check_external_sizes(path, model)
    return model


_FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def require_model_file(path: Path) -> None:
    """A one-line error unless `path` is a regular file; says what it is instead (a folder, a FIFO, /dev/null…).
    Only stat()s: opening a FIFO would block."""
    try:
        mode = Path(path).stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise QnnDeployError(f"{path}: no such file") from None
    except OSError as e:
        raise QnnDeployError(f"cannot read {path}: {e.strerror or e}") from None
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
    raise QnnDeployError(f"{path} is {kind}, not an ONNX model file: give the path of the .onnx file")


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
            sizes[location] = (path.parent / location).stat().st_size
        try:
            offset = int(info.get("offset") or 0)
            length = int(info["length"]) if info.get("length") else _tensor_nbytes(t)
        except ValueError:
            raise QnnDeployError(f"{path}: tensor {t.name} has a damaged external data entry ({info}); "
                                 "re-export the model") from None
        if length is not None and offset + length > sizes[location]:
            raise QnnDeployError(
                f"the external data file {path.parent / location} is truncated or damaged: tensor {t.name} needs "
                f"bytes {offset}-{offset + length}, the file has {sizes[location]}; copy the model together with "
                "its complete data file, or re-export it")


def _tensor_nbytes(t: onnx.TensorProto) -> int | None:
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
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _all_graphs(attr.g)
            for g in attr.graphs:
                yield from _all_graphs(g)


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for g in _all_graphs(graph):
        yield from g.node


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
    the bundle manifest (format v1) keeps dims as the file writes them, and calls a value that is no tensor
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


def real_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs the caller feeds (old exports also list every initializer as an input)."""
    inits = {t.name for t in graph.initializer}
    return [v for v in graph.input if v.name not in inits]


def model_inputs(path: Path) -> list[TensorInfo]:
    """The inputs a caller feeds the model at `path` (read without its weights)."""
    return [tensor_info(v) for v in real_inputs(load_model(Path(path)).graph)]


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
    """For each integer input that indexes a table (an embedding, a lookup) or serves as a 0/1 mask, the range
    [lo, hi) its values must lie in, and why: random samples drawn there run the model as the app does, instead of
    failing in a Gather or overflowing a mask's (1 - mask) * -3.4e38 into NaN."""

    sizes = {t.name: list(t.dims) for t in graph.initializer}
    sizes.update({v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in (*graph.value_info,
                  *graph.input) if v.type.tensor_type.shape.dim and all(d.dim_value > 0 for d in
                                                                         v.type.tensor_type.shape.dim)})
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    ints = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
    ranges = {}
    for value in real_inputs(graph):
        if tensor_info(value).dtype not in ints:
            continue
        bound: tuple[int, str] | None = None
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
                        if bound is None or rows < bound[0]:
                            bound = (rows, (f"it indexes {node.input[0]} ({rows} rows) in {node.op_type} "
                                            f"{node.name or '(unnamed)'}"))
                elif (why := _mask_use(graph, node, name)) is not None:
                    if bound is None or bound[0] > 2:
                        bound = (2, why)
                elif node.op_type in _VALUE_PRESERVING:
                    todo.extend(node.output)
        if bound is not None:
            ranges[value.name] = (0, bound[0], bound[1])
    return ranges


def class_axes(path: Path) -> dict[str, int]:
    """The outputs that hold class scores, with their class axis: an output made by Softmax or LogSoftmax (its
    axis), or a [batch, classes] output of rank 2. Argmax agreement means something only for these: over a feature
    map, an embedding or a detector's boxes it compares arbitrary positions."""
    model = load_model(Path(path))
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    axes = {}
    for value in graph.output:
        info = tensor_info(value)
        node = producers.get(value.name)
        if node is not None and node.op_type in ("Softmax", "LogSoftmax"):
            axes[value.name] = next((a.i for a in node.attribute if a.name == "axis"), -1 if opset >= 13 else 1)
        elif info.shape is not None and len(info.shape) == 2 and isinstance(info.shape[1], int) and info.shape[1] > 1:
            axes[value.name] = 1
    return axes

"""Make an ONNX model NPU-ready without re-exporting it, and prove the result computes the same thing.

Fixes input dims to static sizes, wraps int64 inputs/outputs as int32 (a Cast inside the graph, names
unchanged), freezes setting inputs to constants, simplifies (onnxsim) and re-infers shapes. Then runs the
original and the prepared model on onnxruntime CPU with the same inputs and compares every output. The work
happens in a temporary folder beside the output: OUT.onnx (and OUT.onnx.data for external-data models) and
OUT.prepare.json appear only when everything passed.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnndeploy import __version__, fold, metrics, onnxio, samples
from qnndeploy import fuse as fusing
from qnndeploy.errors import EXIT_CHECK_FAILED, QnnDeployError, first_line
from qnndeploy.fileio import sha256_file, write_json
from qnndeploy.onnxio import TensorInfo, real_inputs, tensor_info
from qnndeploy.shapes import suggest_shapes

if TYPE_CHECKING:
    import numpy as np
    import onnx
    import onnxruntime as ort

DEFAULT_TOLERANCE = 1e-4
# Above this many bytes of weights the output keeps them in an external data file (protobuf stops at 2 GB; the
# margin is for the graph itself). Below it, external data is inlined: one file is what bundle and apps handle best.
EXTERNAL_ABOVE = (1 << 31) - (1 << 26)
RECORD_FORMAT = 2


@dataclass
class OutputDiff:
    name: str
    shape: list[int]
    max_abs_diff: float
    rel_l2: float
    ok: bool


@dataclass
class PrepareResult:
    source: str
    source_sha256: str
    output: str
    output_sha256: str
    external_data: str | None  # the weights file beside the output, for models kept in external data
    record: str
    changes: list[str]
    shapes: dict[str, list[int]]
    frozen: dict[str, Any]
    int32_wrapped: list[str]
    simplified: bool
    folded_by: str | None  # the folding tool whose result was kept (a name in fold.TOOLS), None: none
    folding: list[str]  # each tool tried, and what became of it
    nodes_before: int
    nodes_after: int
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    notes: list[str]  # what prepare left for `check` to flag (int64 kept, dims still dynamic, control flow)
    equivalence_inputs: str  # "random (seed N)" or the --inputs folder
    tolerance: float
    equivalence: list[OutputDiff]
    tools: dict[str, str]
    seconds: float = 0.0
    format: int = RECORD_FORMAT
    kind: str = field(default="qnndeploy-prepare")


# --- option parsing (shared by the CLI and library callers) -----------------------------------------

def parse_assignment(text: str, option: str) -> tuple[str, str]:
    name, sep, value = text.rpartition("=")
    if not sep or not name or not value:
        raise QnnDeployError(f"{option} {text}: expected NAME=VALUE")
    return name, value


def parse_shape(text: str) -> tuple[str, list[int]]:
    """'x=1,3,640,640' or 'x=1x3x640x640' -> ('x', [1, 3, 640, 640])."""
    name, value = parse_assignment(text, "--shape")
    dims = []
    for token in value.replace("x", ",").split(","):
        if not token.strip().isdigit() or int(token) < 1:
            raise QnnDeployError(f"--shape {text}: '{token}' is not a size; give every dim as a positive number "
                                 "(the fixed size your app feeds)")
        dims.append(int(token))
    return name, dims


def _input_names(inputs: Mapping[str, onnx.ValueInfoProto]) -> str:
    return ", ".join(inputs) or "(none)"


def _check_shapes(shapes: Mapping[str, Sequence[int]], inputs: Mapping[str, onnx.ValueInfoProto]
                  ) -> dict[str, list[int]]:
    checked = {}
    for name, given in shapes.items():
        if name not in inputs:
            raise QnnDeployError(f"--shape {name}: the model has no input {name}; its inputs: {_input_names(inputs)}")
        dims = [int(d) for d in given]
        if any(d < 1 for d in dims):
            raise QnnDeployError(f"--shape {name}: every dim must be a positive size, got {dims}")
        info = tensor_info(inputs[name])
        if info.shape is not None:
            if len(info.shape) != len(dims):
                raise QnnDeployError(f"--shape {name}: {len(dims)} dims given, but input {name} has rank "
                                     f"{len(info.shape)} {info.shape_text()}")
            for i, (model_dim, dim) in enumerate(zip(info.shape, dims, strict=True)):
                if isinstance(model_dim, int) and model_dim != dim:
                    raise QnnDeployError(f"--shape {name}: dim {i} is fixed at {model_dim} in the model, "
                                         f"not {dim} ({info.shape_text()})")
        checked[name] = dims
    return checked


def _symbols(shapes: Mapping[str, list[int]], inputs: Mapping[str, onnx.ValueInfoProto]) -> dict[str, int]:
    """The value --shape gives each of the exporter's dim symbols; one symbol must get one value everywhere."""
    symbols: dict[str, int] = {}
    where: dict[str, str] = {}
    for name, dims in shapes.items():
        declared = tensor_info(inputs[name]).shape or []
        for symbol, dim in zip(declared, dims, strict=False):  # declared is [] when the input has no shape
            if not isinstance(symbol, str) or symbol == "?":
                continue
            if symbols.setdefault(symbol, dim) != dim:
                raise QnnDeployError(f"--shape {name}: dim '{symbol}' is {dim} here but {symbols[symbol]} in "
                                     f"--shape {where[symbol]}; one symbol is one size in the whole graph")
            where.setdefault(symbol, name)
    return symbols


def _implied_shapes(symbols: Mapping[str, int], inputs: Mapping[str, onnx.ValueInfoProto],
                    freeze: Mapping[str, Any]) -> dict[str, list[int]]:
    """Inputs whose every dynamic dim is a symbol --shape already fixed on another input: no --shape needed."""
    implied = {}
    for name, value in inputs.items():
        info = tensor_info(value)
        if name in freeze or not info.dynamic or info.shape is None:
            continue
        if all(isinstance(d, int) or (d != "?" and d in symbols) for d in info.shape):
            implied[name] = [d if isinstance(d, int) else symbols[d] for d in info.shape]
    return implied


def _freeze_values(freeze: Mapping[str, Any], inputs: Mapping[str, onnx.ValueInfoProto],
                   shapes: Mapping[str, list[int]]) -> dict[str, np.ndarray]:
    """Turn each --freeze value into an array of the input's dtype and shape, or say why it does not fit."""
    import numpy as np

    values = {}
    for name, raw in freeze.items():
        if name not in inputs:
            raise QnnDeployError(f"--freeze {name}: the model has no input {name}; its inputs: "
                                 f"{_input_names(inputs)}")
        info = tensor_info(inputs[name])
        try:
            dtype = np.dtype(info.dtype)
        except TypeError:
            raise QnnDeployError(f"--freeze {name}: inputs of type {info.dtype} cannot be frozen") from None
        array = _parse_values(name, raw, dtype, info.dtype)
        shape = shapes.get(name)
        if shape is None and info.shape is not None:
            if not info.dynamic:
                shape = info.static_shape
            elif len(info.shape) == 1:  # a list of any length
                shape = [array.size]
        if shape is None:
            raise QnnDeployError(f"--freeze {name}: input {name} has dynamic dims {info.shape_text()}; "
                                 f"give its size with --shape {name}=... too")
        if array.size != math.prod(shape):
            raise QnnDeployError(f"--freeze {name}: {array.size} value(s) given, input {name} {list(shape)} "
                                 f"holds {math.prod(shape)}")
        values[name] = array.reshape(shape)
    return values


def _parse_values(name: str, raw: Any, dtype: np.dtype, dtype_label: str) -> np.ndarray:
    import numpy as np

    if not isinstance(raw, str):  # library callers may pass numbers or arrays
        array = np.asarray(raw)
        cast = array.astype(dtype)
        if not np.array_equal(cast.astype(array.dtype), array):
            raise QnnDeployError(f"--freeze {name}: the value does not fit input {name} ({dtype_label})")
        return cast
    out: list[bool | int | float] = []
    for token in (t.strip() for t in raw.split(",")):
        try:
            if dtype.kind == "b":
                if token.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                out.append(token.lower() in ("true", "1"))
            elif dtype.kind in "iu":
                number = int(token)
                info = np.iinfo(dtype)
                if not info.min <= number <= info.max:
                    raise ValueError
                out.append(number)
            elif dtype.kind == "f":
                out.append(float(token))
            else:
                raise ValueError
        except ValueError:
            raise QnnDeployError(f"--freeze {name}={raw}: '{token}' is not a valid {dtype_label} value "
                                 f"(input {name} is {dtype_label})") from None
    return np.array(out, dtype=dtype)


# --- graph edits ----------------------------------------------------------------------------------

def _set_static(value: onnx.ValueInfoProto, dims: Sequence[int]) -> None:
    shape = value.type.tensor_type.shape
    shape.ClearField("dim")
    for d in dims:
        shape.dim.add().dim_value = int(d)


def _freeze(graph: onnx.GraphProto, values: Mapping[str, np.ndarray]) -> None:
    from onnx import numpy_helper

    keep = [v for v in graph.input if v.name not in values]
    graph.ClearField("input")
    graph.input.extend(keep)
    for name, array in values.items():
        graph.initializer.append(numpy_helper.from_array(array, name))


def _unique(graph: onnx.GraphProto, base: str) -> str:
    used = {n for node in onnxio.all_nodes(graph) for n in (*node.input, *node.output)}
    used |= {v.name for v in (*graph.input, *graph.output)} | {t.name for t in graph.initializer}
    name, i = base, 1
    while name in used:
        name, i = f"{base}_{i}", i + 1
    return name


def _rename_uses(graph: onnx.GraphProto, old: str, new: str, outputs_too: bool = False) -> None:
    """Point every consumer (in subgraphs too) of tensor `old` at `new`; with outputs_too, its producer as well."""
    for node in onnxio.all_nodes(graph):
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        if outputs_too:
            for i, name in enumerate(node.output):
                if name == old:
                    node.output[i] = new


def _wrap_int64(graph: onnx.GraphProto) -> list[str]:
    """int64 graph inputs become int32 inputs cast to int64 inside; int64 outputs are cast to int32 at the end."""
    from onnx import TensorProto, helper

    wrapped = []
    casts_in = []
    for value in real_inputs(graph):
        if value.type.tensor_type.elem_type == TensorProto.INT64:
            inner = _unique(graph, f"{value.name}_int64")
            _rename_uses(graph, value.name, inner)
            casts_in.append(helper.make_node("Cast", [value.name], [inner], to=TensorProto.INT64,
                                             name=_unique(graph, f"{value.name}_to_int64")))
            value.type.tensor_type.elem_type = TensorProto.INT32
            wrapped.append(value.name)
    graph_inputs = {v.name for v in graph.input}
    for value in graph.output:
        if value.type.tensor_type.elem_type == TensorProto.INT64 and value.name not in graph_inputs:
            inner = _unique(graph, f"{value.name}_int64")
            _rename_uses(graph, value.name, inner, outputs_too=True)
            for init in graph.initializer:
                if init.name == value.name:
                    init.name = inner
            graph.node.append(helper.make_node("Cast", [inner], [value.name], to=TensorProto.INT32,
                                               name=_unique(graph, f"{value.name}_to_int32")))
            value.type.tensor_type.elem_type = TensorProto.INT32
            wrapped.append(value.name)
    for i, cast in enumerate(casts_in):
        graph.node.insert(i, cast)
    return wrapped


def _clear_inferred(graph: onnx.GraphProto) -> None:
    """Drop stale intermediate shapes and unknown output dims, so shape inference fills them from the inputs."""
    graph.ClearField("value_info")
    for value in graph.output:
        for d in value.type.tensor_type.shape.dim:
            if not (d.HasField("dim_value") and d.dim_value > 0):
                d.Clear()


def _tensor_bytes(model: onnx.ModelProto) -> int:
    import numpy as np

    total = 0
    for t in model.graph.initializer:
        with contextlib.suppress(TypeError):
            total += math.prod(t.dims) * np.dtype(onnxio.dtype_name(t.data_type)).itemsize
    return total


def _save(model: onnx.ModelProto, path: Path, external: bool) -> None:
    import onnx

    if external:
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=path.name + ".data", size_threshold=1024)
    else:
        onnx.save(model, str(path))


def _infer_shapes(src: Path, dst: Path, external: bool) -> None:
    """Re-infer every shape from the now static inputs, outputs included (their declared shapes are dropped: some
    exporters declare wrong ones), then write the model."""
    import onnx

    model = onnx.load(str(src), load_external_data=False)
    _clear_inferred(model.graph)
    for value in model.graph.output:
        value.type.tensor_type.ClearField("shape")
    shaped = src.with_name(src.stem + ".shaped.onnx")  # beside src, so its external data references resolve
    onnx.save(model, str(shaped))
    for kwargs in ({"data_prop": True}, {}):
        try:
            onnx.shape_inference.infer_shapes_path(str(shaped), str(shaped), **kwargs)
            break
        except Exception:  # noqa: BLE001 custom-domain ops can stop onnx's inference; the CPU run gives the shapes
            continue
    model = onnx.load(str(shaped))
    _save(model, dst, external)


def _set_output_shapes(path: Path, actual: Mapping[str, tuple[int, ...]], external: bool) -> None:
    """Write the shapes the CPU run produced as the outputs' shapes: what the graph computes, not what was declared."""
    import onnx

    model = onnx.load(str(path))
    for value in model.graph.output:
        _set_static(value, actual[value.name])
    _save(model, path, external)


def _control_flow(graph: onnx.GraphProto) -> list[str]:
    return [f"{n.op_type} {n.name or '(unnamed)'}" for n in graph.node if n.op_type in onnxio.CONTROL_FLOW_OPS]


# --- equivalence ----------------------------------------------------------------------------------

def _cpu_session(path: Path, what: str, hint: str = "") -> ort.InferenceSession:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 onnxruntime's exception types are not exported
        raise QnnDeployError(f"{what} does not load in onnxruntime: {first_line(e)}{hint}") from None


def _compare(name: str, want: np.ndarray, got: np.ndarray, tolerance: float) -> OutputDiff:
    """Max abs diff and rel L2 by validate's metrics; NaNs in the same places of both outputs count as equal."""
    import numpy as np

    if want.shape != got.shape:
        raise QnnDeployError(f"the prepared model's output {name} has shape {list(got.shape)}, the original's "
                             f"{list(want.shape)}; nothing written", EXIT_CHECK_FAILED)
    a, b = want.astype(np.float64), got.astype(np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return OutputDiff(name, list(got.shape), math.inf, math.inf, False)
    m = metrics.metrics(np.nan_to_num(a, nan=0.0), np.nan_to_num(b, nan=0.0))
    max_abs, rel = m["max_abs_diff"], m["rel_l2"]
    if rel is None:  # an all-zero reference
        rel = 0.0 if max_abs == 0 else math.inf
    return OutputDiff(name, list(got.shape), max_abs, rel, max_abs <= tolerance or rel <= tolerance)


Ranges = Mapping[str, tuple[int, int, str]]  # onnxio.int_input_ranges


def _feeds(live: list[TensorInfo], inputs_dir: Path | None, seed: int, ranges: Ranges) -> dict[str, np.ndarray]:
    """One sample for the equivalence run: --inputs DIR, else seeded random values that fit the graph."""

    if inputs_dir is not None:
        return {spec.name: samples.read_one(Path(inputs_dir), spec) for spec in live}
    return samples.random_samples(live, 1, seed, {k: (lo, hi) for k, (lo, hi, _) in ranges.items()})[0]


def _reference(original: Path, feeds: Mapping[str, np.ndarray], frozen: Mapping[str, np.ndarray], ranges: Ranges,
               random: bool) -> dict[str, np.ndarray]:
    """The original model's outputs; when it fails on random inputs, say which integer inputs were drawn where."""
    session = _cpu_session(original, f"the original model {original.name}")
    try:
        got = session.run(None, {**feeds, **frozen})
    except Exception as e:  # noqa: BLE001 onnxruntime raises its own, unexported types
        hint = ""
        if random:
            drawn = [f"{name} in [{ranges[name][0]}, {ranges[name][1]}) ({ranges[name][2]})" if name in ranges
                     else f"{name} in [0, 10)" for name, v in feeds.items() if v.dtype.kind in "iu"]
            hint = ("; integer inputs were drawn " + ", ".join(drawn) + ": if one needs other values, freeze it "
                    "(--freeze NAME=VALUE) or give real inputs with --inputs DIR") if drawn \
                else "; give real inputs with --inputs DIR"
        raise QnnDeployError(f"the original model fails on these inputs: {first_line(e)}{hint}") from None
    return dict(zip([o.name for o in session.get_outputs()], got, strict=True))


def _run_prepared(prepared: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    import numpy as np

    session = _cpu_session(prepared, "the prepared model")
    types = {i.name: i.type for i in session.get_inputs()}
    cast = {"tensor(int32)": np.int32}
    got = session.run(None, {k: v.astype(cast.get(types[k], v.dtype)) for k, v in feeds.items()})
    return dict(zip([o.name for o in session.get_outputs()], got, strict=True))


# --- the stage ------------------------------------------------------------------------------------

def record_path(out: Path) -> Path:
    """OUT.onnx -> OUT.prepare.json"""
    return out.with_name(out.name.removesuffix(".onnx") + ".prepare.json")


def prepare_model(src: Path, out: Path, *, shapes: Mapping[str, Sequence[int]] | None = None,
                  int32_inputs: bool = False, freeze: Mapping[str, Any] | None = None, simplify: bool = True,
                  inputs_dir: Path | None = None, tolerance: float = DEFAULT_TOLERANCE, force: bool = False,
                  seed: int = 0, fuse: bool = False) -> PrepareResult:
    """Write OUT.onnx (+ OUT.prepare.json) from SRC with static shapes, int32 I/O and frozen settings.

    Raises QnnDeployError (nothing written) on bad options or when an output differs beyond `tolerance`
    (max abs diff and rel L2 both above it).
    """
    import onnx


    start = time.monotonic()
    src, out = Path(src), Path(out)
    _check_output(src, out, force)
    if not tolerance >= 0:  # NaN fails this test too
        raise QnnDeployError(f"--tolerance {tolerance}: give a number of 0 or more, e.g. {DEFAULT_TOLERANCE:g}")
    if inputs_dir is not None and not Path(inputs_dir).is_dir():
        raise QnnDeployError(f"--inputs {inputs_dir}: no such folder")

    model = onnxio.load_model(src)
    source_external = bool(onnxio.external_locations(model))
    ranges = onnxio.int_input_ranges(model.graph)
    declared = {v.name: tensor_info(v) for v in model.graph.output}
    edits = _edit(model.graph, shapes or {}, freeze or {}, int32_inputs)
    if fuse:
        fused = fusing.fuse_gelu(model)
        edits.changes.append(f"{fused} erf GELU pattern(s) fused into Gelu nodes (opset {fusing.GELU_OPSET})"
                             if fused else "--fuse: no unfused GELU pattern found")
    if source_external:
        try:
            onnx.load_external_data_for_model(model, str(src.parent))
        except (OSError, ValueError) as e:
            raise QnnDeployError(f"cannot read the external data of {src}: {first_line(e)}; copy the model "
                                 "together with its complete data file, or re-export it") from None
    weights = _tensor_bytes(model)
    external = weights > EXTERNAL_ABOVE
    if source_external and not external:
        edits.changes.append(f"external data inlined ({weights / 1e6:.1f} MB of weights, under 2 GB): the output "
                             "is one self-contained file")

    made = _first_missing(out.parent)  # folders -o creates are removed again when nothing is written
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        # A short name: OUT's own name may already be near the file system's limit.
        work = Path(tempfile.mkdtemp(prefix=".prepare.partial-", dir=out.parent))
    except OSError as e:
        _remove_empty(out.parent, made)
        raise QnnDeployError(f"cannot write in {out.parent}: {e.strerror or e}") from None
    written = False
    try:
        stage = work / "edited.onnx"
        _save(model, stage, external)
        del model
        feeds = _feeds(edits.live, inputs_dir, seed, ranges)
        want = _reference(src, feeds, edits.frozen, ranges, random=inputs_dir is None)
        final, folded_by, folding, diffs = _fold_chain(stage, work, out.name, simplify, external, feeds, want,
                                                       tolerance)
        prepared = onnxio.load_model(final).graph
        nodes_after = sum(1 for n in prepared.node if n.op_type != "Constant")
        if folded_by:
            edits.changes.append(f"folded with {folded_by}: {edits.nodes_before} -> {nodes_after} nodes")
        p_inputs = [tensor_info(v) for v in real_inputs(prepared)]
        p_outputs = [tensor_info(v) for v in prepared.output]
        edits.changes += [f"output {o.name}: declared {declared[o.name].shape_text()}, the graph computes "
                          f"{o.shape_text()} (CPU run): declaration replaced" for o in p_outputs
                          if _disagrees(declared[o.name], o)]

        data, out_data = final.with_name(final.name + ".data"), out.with_name(out.name + ".data")
        result = PrepareResult(
            source=str(src), source_sha256=sha256_file(src), output=str(out), output_sha256=sha256_file(final),
            external_data=str(out_data) if data.is_file() else None, record=str(record_path(out)),
            changes=edits.changes, shapes=edits.shapes, frozen={k: v.tolist() for k, v in edits.frozen.items()},
            int32_wrapped=edits.wrapped, simplified=folded_by is not None, folded_by=folded_by, folding=folding,
            nodes_before=edits.nodes_before, nodes_after=nodes_after, inputs=p_inputs, outputs=p_outputs,
            notes=_notes(prepared, p_inputs, p_outputs),
            equivalence_inputs=str(inputs_dir) if inputs_dir else f"random (seed {seed})", tolerance=tolerance,
            equivalence=diffs, tools=_tool_versions(__version__), seconds=round(time.monotonic() - start, 2))
        write_json(work / "record.json", asdict(result))  # a short temporary name, renamed below
        _publish(final, data, work / "record.json", out, force)
        written = True
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not written:
            _remove_empty(out.parent, made)
    return result


def _disagrees(declared: TensorInfo, actual: TensorInfo) -> bool:
    """A declared output shape the graph does not compute (a dynamic dim that got its size is no disagreement)."""
    if declared.shape is None or actual.shape is None:
        return False
    return len(declared.shape) != len(actual.shape) or any(
        isinstance(d, int) and d != a for d, a in zip(declared.shape, actual.shape, strict=True))


def _fold_chain(stage: Path, work: Path, name: str, simplify: bool, external: bool, feeds: Mapping[str, np.ndarray],
                want: Mapping[str, np.ndarray], tolerance: float
                ) -> tuple[Path, str | None, list[str], list[OutputDiff]]:
    """Fold with each tool in turn (fold.TOOLS, then no folding at all) and keep the first result that computes the
    same outputs and has no control flow left; else the first that computes the same outputs. Every result gets its
    shapes re-inferred and its output shapes from a CPU run. Returns (model, tool or None, what each tool did,
    its equivalence)."""

    tried: list[str] = []
    kept: tuple[Path, str | None, list[OutputDiff]] | None = None
    first_bad: list[OutputDiff] | None = None
    for tool in [*fold.TOOLS, None] if simplify else [None]:
        label = tool or "no folding"
        folder = work / (tool or "unfolded")
        folder.mkdir()
        candidate = folder / name
        try:
            source = stage
            if tool:
                source = folder / "folded.onnx"
                fold.fold(tool, stage, source, external)
            _infer_shapes(source, candidate, external)
            got = _run_prepared(candidate, feeds)
        except fold.FoldError as e:
            tried.append(f"{label}: failed ({e})")
            continue
        except QnnDeployError as e:
            tried.append(f"{label}: its result does not load ({e})")
            continue
        except Exception as e:  # noqa: BLE001 onnxruntime's and onnx's exception types are not exported
            tried.append(f"{label}: its result does not run ({first_line(e)})")
            continue
        diffs = [_compare(n, w, got[n], tolerance) for n, w in want.items()]
        if not all(d.ok for d in diffs):
            first_bad = first_bad or diffs
            tried.append(f"{label}: its result differs from the original")
            continue
        _set_output_shapes(candidate, {n: a.shape for n, a in got.items()}, external)
        left = _control_flow(onnxio.load_model(candidate).graph)
        tried.append(f"{label}: ok" + (f", but {', '.join(left)} left in the graph" if left else ""))
        kept = kept or (candidate, tool, diffs)
        if not left:
            kept = (candidate, tool, diffs)
            break
    if kept is None and first_bad is not None:
        bad = [d for d in first_bad if not d.ok]
        raise QnnDeployError(
            "the prepared model differs from the original: "
            + "; ".join(f"{d.name} max abs diff {d.max_abs_diff:.3g}, rel L2 {d.rel_l2:.3g}" for d in bad)
            + f" (tolerance {tolerance:g}); nothing written", EXIT_CHECK_FAILED)
    if kept is None:
        raise QnnDeployError("the prepared model fails where the original ran: " + "; ".join(tried))
    return kept[0], kept[1], tried, kept[2]


def _first_missing(folder: Path) -> Path | None:
    """The outermost ancestor of `folder` (or itself) that does not exist yet."""
    missing = None
    for p in (folder.absolute(), *folder.absolute().parents):
        if p.exists():
            break
        missing = p
    return missing


def _remove_empty(folder: Path, top: Path | None) -> None:
    """Remove `folder` and its parents up to `top`, as far as they are empty."""
    if top is None:
        return
    for p in (folder.absolute(), *folder.absolute().parents):
        try:
            p.rmdir()
        except OSError:
            return
        if p == top:
            return


def _check_output(src: Path, out: Path, force: bool) -> None:
    """Refuse an OUT that cannot receive the model, its data file and its record, before any work."""
    if out.suffix != ".onnx":
        raise QnnDeployError(f"-o {out}: the output name must end in .onnx")
    longest, limit = max(len(out.name) + len(".data"), len(record_path(out).name)), _name_max(out.parent)
    if longest > limit:
        raise QnnDeployError(f"-o {out.name}: with its .data and .prepare.json files the name is too long for the "
                             f"file system ({longest} > {limit} characters); give a shorter name")
    if out.exists() and out.resolve() == src.resolve():
        raise QnnDeployError(f"-o {out} is the source model; write the prepared model to a new file")
    for path in (out, out.with_name(out.name + ".data"), record_path(out)):
        if path.exists() and not path.is_file():
            raise QnnDeployError(f"{path} exists and is not a file (a folder?): give -o another name, e.g. "
                                 f"{out.parent / 'model.npu.onnx'}")
    if out.exists() and not force:
        raise QnnDeployError(f"{out} already exists; remove it or pass --force")


def _name_max(folder: Path) -> int:
    """The longest file name the file system takes in `folder` (or its nearest existing parent)."""
    folder = folder.absolute()
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _publish(final: Path, data: Path, record: Path, out: Path, force: bool) -> None:
    """Move the data file, the record, then the model into place: a present OUT.onnx always has its data and
    record. If a move fails, the files this run already moved are taken back out."""
    out_data = out.with_name(out.name + ".data")
    moved: list[Path] = []
    try:
        if data.is_file():
            data.chmod(final.stat().st_mode & 0o777)  # onnx creates external data files owner-only
            data.replace(out_data)
            moved.append(out_data)
        elif force and out_data.is_file():
            out_data.unlink()  # left over from an earlier external-data output of the same name
        record.replace(record_path(out))
        moved.append(record_path(out))
        final.replace(out)
    except OSError as e:
        for path in moved:
            path.unlink(missing_ok=True)
        raise QnnDeployError(f"cannot write {out}: {e.strerror or e}; nothing written") from None


@dataclass
class _Edits:
    changes: list[str]
    shapes: dict[str, list[int]]
    frozen: dict[str, np.ndarray]
    wrapped: list[str]
    live: list[TensorInfo]  # every input still fed, with its static shape and original dtype
    nodes_before: int


def _edit(graph: onnx.GraphProto, shapes: Mapping[str, Sequence[int]], freeze: Mapping[str, Any],
          int32_inputs: bool) -> _Edits:
    """Validate the options against the graph, then fix shapes, freeze inputs and wrap int64, in place."""
    inputs = {v.name: v for v in real_inputs(graph)}
    given = _check_shapes(shapes, inputs)
    symbols = _symbols(given, inputs)
    implied = {name: dims for name, dims in _implied_shapes(symbols, inputs, freeze).items() if name not in given}
    fixed = {**given, **implied}
    frozen = _freeze_values(freeze, inputs, fixed)
    nodes_before = sum(1 for n in graph.node if n.op_type != "Constant")
    changes = []
    for name, dims in fixed.items():
        how = " (its symbols fixed by --shape)" if name in implied else ""
        changes.append(f"input {name}: {tensor_info(inputs[name]).shape_text()} -> {dims}{how}")
        _set_static(inputs[name], dims)
    changes += [f"input {name} frozen to {value.tolist()} (now a constant)" for name, value in frozen.items()]
    _freeze(graph, frozen)
    live = [tensor_info(v) for v in real_inputs(graph)]
    suggested = suggest_shapes(live, symbols)
    for info in live:
        if info.dynamic:
            raise QnnDeployError(f"input {info.name} has dynamic dims {info.shape_text()}: give its fixed size, "
                                 f"e.g. --shape {info.name}={','.join(suggested[info.name])}")
    wrapped = _wrap_int64(graph) if int32_inputs else []
    changes += [f"{'input' if n in inputs else 'output'} {n}: int64 -> int32 (Cast inside the graph)"
                for n in wrapped]
    _clear_inferred(graph)
    return _Edits(changes, fixed, frozen, wrapped, live, nodes_before)


def _notes(graph: onnx.GraphProto, inputs: list[TensorInfo], outputs: list[TensorInfo]) -> list[str]:
    """What prepare left for `check` to flag."""
    notes = [f"{t.name} is still int64: pass --int32-inputs" for t in inputs + outputs if t.dtype == "int64"]
    notes += [f"output {t.name} still has dynamic dims {t.shape_text()}" for t in outputs if t.dynamic]
    return notes + [f"{n.op_type} node {n.name} is still in the graph: run check" for n in graph.node
                    if n.op_type in onnxio.CONTROL_FLOW_OPS]


def _tool_versions(own: str) -> dict[str, str]:
    tools = {"qnndeploy": own}
    for name in ("onnx", "onnxruntime", "onnxsim", "onnxslim"):
        with contextlib.suppress(PackageNotFoundError):
            tools[name] = version(name)
    return tools

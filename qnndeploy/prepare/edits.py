"""prepare's graph edits: the options checked against the graph (shapes, symbols, frozen values), then the
edits themselves, in place: static input dims, frozen inputs, int64 inputs and outputs wrapped as int32."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qnndeploy.base.errors import BadInput
from qnndeploy.model import onnxio
from qnndeploy.model.onnxio import TensorInfo, real_inputs, tensor_info
from qnndeploy.model.shapes import suggest_shapes

if TYPE_CHECKING:
    import numpy as np
    import onnx


def parse_assignment(text: str, option: str) -> tuple[str, str]:
    name, sep, value = text.rpartition("=")
    if not sep or not name or not value:
        raise BadInput(f"{option} {text}: expected NAME=VALUE")
    return name, value


_SIZE = re.compile(r"[0-9]{1,12}")  # ASCII digits only (str.isdigit takes '²' and other scripts' digits)
_INT = re.compile(r"[+-]?[0-9]{1,20}")


def parse_shape(text: str) -> tuple[str, list[int]]:
    """'x=1,3,640,640' or 'x=1x3x640x640' -> ('x', [1, 3, 640, 640])."""
    name, value = parse_assignment(text, "--shape")
    dims = []
    for token in value.replace("x", ",").split(","):
        if not _SIZE.fullmatch(token.strip()) or int(token) < 1:
            raise BadInput(f"--shape {_short(text)}: {_short(token)!r} is not a size; give every dim as a "
                           "positive number in ASCII digits (the fixed size your app feeds)")
        dims.append(int(token))
    return name, dims


def _short(text: str, keep: int = 60) -> str:
    return text if len(text) <= keep else text[:keep] + "…"


def _input_names(inputs: Mapping[str, onnx.ValueInfoProto]) -> str:
    return ", ".join(inputs) or "(none)"


def _check_shapes(shapes: Mapping[str, Sequence[int]], inputs: Mapping[str, onnx.ValueInfoProto]
                  ) -> dict[str, list[int]]:
    checked = {}
    for name, given in shapes.items():
        if name not in inputs:
            raise BadInput(f"--shape {name}: the model has no input {name}; its inputs: {_input_names(inputs)}")
        dims = [int(d) for d in given]
        if any(d < 1 for d in dims):
            raise BadInput(f"--shape {name}: every dim must be a positive size, got {dims}")
        if math.prod(dims) > onnxio.MAX_TENSOR_ELEMENTS:
            raise BadInput(f"--shape {name}: {dims} is {math.prod(dims):,} elements, over the limit of "
                           f"{onnxio.MAX_TENSOR_ELEMENTS:,} per tensor; give the size your app feeds")
        info = tensor_info(inputs[name])
        if info.shape is not None:
            if len(info.shape) != len(dims):
                raise BadInput(f"--shape {name}: {len(dims)} dims given, but input {name} has rank "
                               f"{len(info.shape)} {info.shape_text()}")
            for i, (model_dim, dim) in enumerate(zip(info.shape, dims, strict=True)):
                if isinstance(model_dim, int) and model_dim != dim:
                    raise BadInput(f"--shape {name}: dim {i} is fixed at {model_dim} in the model, "
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
                raise BadInput(f"--shape {name}: dim '{symbol}' is {dim} here but {symbols[symbol]} in "
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
            raise BadInput(f"--freeze {name}: the model has no input {name}; its inputs: "
                           f"{_input_names(inputs)}")
        info = tensor_info(inputs[name])
        try:
            dtype = np.dtype(info.dtype)
        except TypeError:
            raise BadInput(f"--freeze {name}: inputs of type {info.dtype} cannot be frozen") from None
        array = _parse_values(name, raw, dtype, info.dtype)
        shape = shapes.get(name)
        if shape is None and info.shape is not None:
            if not info.dynamic:
                shape = info.static_shape
            elif len(info.shape) == 1:  # a list of any length
                shape = [array.size]
        if shape is None:
            raise BadInput(f"--freeze {name}: input {name} has dynamic dims {info.shape_text()}; "
                           f"give its size with --shape {name}=... too")
        if array.size != math.prod(shape):
            raise BadInput(f"--freeze {name}: {array.size} value(s) given, input {name} {list(shape)} "
                           f"holds {math.prod(shape)}")
        values[name] = array.reshape(shape)
    return values


def _parse_values(name: str, raw: Any, dtype: np.dtype, dtype_label: str) -> np.ndarray:
    import numpy as np

    if not isinstance(raw, str):  # library callers may pass numbers or arrays
        array = np.asarray(raw)
        cast = array.astype(dtype)
        if not np.array_equal(cast.astype(array.dtype), array):
            raise BadInput(f"--freeze {name}: the value does not fit input {name} ({dtype_label})")
        return cast
    out: list[bool | int | float] = []
    for token in (t.strip() for t in raw.split(",")):
        try:
            if dtype.kind == "b":
                if token.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                out.append(token.lower() in ("true", "1"))
            elif dtype.kind in "iu":
                if not _INT.fullmatch(token):
                    raise ValueError
                number = int(token)
                info = np.iinfo(dtype)
                if not info.min <= number <= info.max:
                    raise ValueError
                out.append(number)
            elif dtype.kind == "f":
                if not token.isascii() or "_" in token:
                    raise ValueError
                out.append(float(token))
            else:
                raise ValueError
        except ValueError:
            raise BadInput(f"--freeze {name}={_short(raw)}: {_short(token)!r} is not a valid {dtype_label} "
                           f"value (input {name} is {dtype_label})") from None
    return np.array(out, dtype=dtype)


def set_static(value: onnx.ValueInfoProto, dims: Sequence[int]) -> None:
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


def clear_inferred(graph: onnx.GraphProto) -> None:
    """Drop stale intermediate shapes and unknown output dims, so shape inference fills them from the inputs."""
    graph.ClearField("value_info")
    for value in graph.output:
        for d in value.type.tensor_type.shape.dim:
            if not (d.HasField("dim_value") and d.dim_value > 0):
                d.Clear()


@dataclass
class Edits:
    changes: list[str]
    shapes: dict[str, list[int]]
    frozen: dict[str, np.ndarray]
    wrapped: list[str]
    live: list[TensorInfo]  # every input still fed, with its static shape and original dtype
    nodes_before: int


def edit(graph: onnx.GraphProto, shapes: Mapping[str, Sequence[int]], freeze: Mapping[str, Any],
          int32_inputs: bool) -> Edits:
    """Validate the options against the graph, then fix shapes, freeze inputs and wrap int64, in place."""
    oversized = onnxio.oversized_constants(graph)
    if oversized:
        raise BadInput(f"{oversized[0]} (over {onnxio.MAX_FOLDED_BYTES >> 20} MiB): folding or running it "
                       "would materialise it; re-export so that the graph does not build it from constants")
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
        set_static(inputs[name], dims)
    changes += [f"input {name} frozen to {value.tolist()} (now a constant)" for name, value in frozen.items()]
    _freeze(graph, frozen)
    live = [tensor_info(v) for v in real_inputs(graph)]
    suggested = suggest_shapes(live, symbols)
    for info in live:
        if info.dynamic:
            raise BadInput(f"input {info.name} has dynamic dims {info.shape_text()}: give its fixed size, "
                           f"e.g. --shape {info.name}={','.join(suggested[info.name])}")
    wrapped = _wrap_int64(graph) if int32_inputs else []
    changes += [f"{'input' if n in inputs else 'output'} {n}: int64 -> int32 (Cast inside the graph)"
                for n in wrapped]
    clear_inferred(graph)
    return Edits(changes, fixed, frozen, wrapped, live, nodes_before)

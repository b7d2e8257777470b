"""`prepare --rewrite KIND`: rewrite ONNX ops the HTP leaves to the CPU into equal forms made of ops it runs.

Each kind matches only where the new form computes the same thing (exactly, or, for where-mask, the same after the
Softmax it feeds); prepare then proves the whole model equal on the CPU before it writes anything. Only ONNX-standard
ops are written, so the CPU fallback stays a plain ONNX model. `fixable` names the nodes each kind would replace, for
check to offer the rewrite when they are among the nodes the HTP refused.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qnndeploy.base.errors import BadInput
from qnndeploy.model.onnxio import check_model, default_opset, inferred_values

if TYPE_CHECKING:
    import numpy as np
    import onnx

# What each kind changes, as `prepare --help` and check say it.
KINDS: dict[str, str] = {
    "dft": "a DFT of a real signal with a constant length becomes a MatMul with constant cos/sin matrices",
    "einsum": "an Einsum that contracts the trailing axes of one input with the leading axes of the other (e.g. "
              "abcd,cde->abe) becomes Reshape, MatMul, Reshape",
    "layernorm-axes": "a LayerNormalization over several trailing axes becomes Reshape, LayerNormalization over the "
                      "last axis, Reshape back",
    "rank": "a Reshape or Gather, Transpose, Reshape chain through tensors above 5-D is done at 5-D or less (dims that "
            "stay adjacent through the Transpose merged)",
    "reshape-allowzero": "a Reshape with allowzero=1 whose shape has no 0 gets allowzero=0 (the same result)",
    "where-mask": "a Where(cond, -inf, x) feeding a Softmax becomes x + Where(cond, -1000, 0): masked scores are "
                  "lowered by 1000 instead of set to -inf, the same after the Softmax",
}
# Large enough that exp(x + MASK_NEG - max) underflows to 0 in fp16 and fp32 (below about -104 it does) for any scores
# within 896 of each other; small enough that x + MASK_NEG stays finite in fp16 (65504) and that a 16-bit quantized
# activation over [MASK_NEG, max] keeps a step of about 0.015 (with -65504 it would be about 1).
MASK_NEG = -1000.0
HUGE_NEGATIVE = -1e4  # a masked_fill value at or below this is a mask (-inf, finfo.min, -1e9...)
MAX_RANK = 5


@dataclass
class _Match:
    kind: str
    nodes: list[onnx.NodeProto]  # the nodes replaced (the names check compares with the CPU nodes)
    apply: Callable[[_Graph], str]  # rewrites the graph, returns what it did


@dataclass
class _Graph:
    """The graph with its static shapes, constants and readers, and a way to add nodes and initializers."""

    graph: onnx.GraphProto
    shapes: dict[str, list[int]]
    elem: dict[str, int]
    opset: int
    consumers: dict[str, list[onnx.NodeProto]] = field(default_factory=dict)
    producer: dict[str, onnx.NodeProto] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    replace: dict[int, list[onnx.NodeProto]] = field(default_factory=dict)  # id(node) -> the nodes in its place

    def const(self, name: str) -> np.ndarray | None:
        from onnx import numpy_helper

        for t in self.graph.initializer:
            if t.name == name:
                return numpy_helper.to_array(t) if _has_data(t) else None
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
        return None

    def is_const(self, name: str) -> bool:
        node = self.producer.get(name)
        return any(t.name == name for t in self.graph.initializer) or (node is not None and node.op_type == "Constant")

    def only_reader(self, name: str) -> onnx.NodeProto | None:
        users = self.consumers.get(name, [])
        outputs = {v.name for v in self.graph.output}
        return users[0] if len(users) == 1 and name not in outputs else None

    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self.names:
            i += 1
            name = f"{base}_{i}"
        self.names.add(name)
        return name

    def initializer(self, base: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self.fresh(base)
        self.graph.initializer.append(numpy_helper.from_array(value, name))
        return name


def _has_data(t: onnx.TensorProto) -> bool:
    return bool(t.raw_data or t.float_data or t.int64_data or t.int32_data or t.double_data or t.data_location)


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    from onnx import helper

    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def graph_view(model: onnx.ModelProto) -> _Graph:
    from onnx import TensorProto

    values = inferred_values(model, data_prop=True)
    shapes, elem = {}, {}
    for name, v in values.items():
        t = v.type.tensor_type
        if t.elem_type:
            elem[name] = t.elem_type
        if t.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in t.shape.dim):
            shapes[name] = [d.dim_value for d in t.shape.dim]
    for init in model.graph.initializer:
        shapes[init.name] = list(init.dims)
        elem[init.name] = init.data_type or TensorProto.FLOAT
    g = model.graph
    view = _Graph(g, shapes, elem, default_opset(model))
    for n in g.node:
        for i in n.input:
            view.consumers.setdefault(i, []).append(n)
        for o in n.output:
            view.producer[o] = n
        view.names.update([*n.input, *n.output, n.name])
    view.names.update(t.name for t in g.initializer)
    view.names.update(v.name for v in (*g.input, *g.output))
    return view


# --- dft --------------------------------------------------------------------------------------------

def _dft(v: _Graph) -> list[_Match]:
    """DFT of a real signal ([..., N, 1]) along the axis before the last, forward, with a constant length."""
    import numpy as np
    from onnx import TensorProto, helper

    found = []
    for node in v.graph.node:
        if node.op_type != "DFT" or _attr(node, "inverse", 0):
            continue
        x = node.input[0]
        shape = v.shapes.get(x)
        if shape is None or shape[-1] != 1 or len(shape) < 2 or v.elem.get(x) != TensorProto.FLOAT:
            continue
        rank = len(shape)
        if v.opset >= 20:
            axis_value = v.const(node.input[2]) if len(node.input) > 2 and node.input[2] else np.array(-2)
            if axis_value is None:
                continue
            axis = int(axis_value.reshape(-1)[0])
        else:
            axis = int(_attr(node, "axis", 1))
        axis %= rank
        if axis != rank - 2:
            continue
        n_in = shape[axis]
        if len(node.input) > 1 and node.input[1]:
            length_value = v.const(node.input[1])
            if length_value is None:
                continue
            length = int(length_value.reshape(-1)[0])
        else:
            length = n_in
        onesided = bool(_attr(node, "onesided", 0))

        def apply(g: _Graph, node: onnx.NodeProto = node, shape: list[int] = shape, n_in: int = n_in,
                  length: int = length, onesided: bool = onesided) -> str:
            bins = length // 2 + 1 if onesided else length
            n = np.arange(min(n_in, length))[:, None]
            angle = 2 * np.pi * ((n * np.arange(bins)[None, :]) % length) / length
            matrix = np.zeros((n_in, bins, 2), np.float64)
            matrix[: len(n), :, 0] = np.cos(angle)
            matrix[: len(n), :, 1] = -np.sin(angle)
            base = node.name or "dft"
            w = g.initializer(f"{base}_cos_sin", matrix.reshape(n_in, 2 * bins).astype(np.float32))
            flat = g.initializer(f"{base}_signal_shape", np.array(shape[:-1], np.int64))
            out = g.initializer(f"{base}_spectrum_shape", np.array([*shape[:-2], bins, 2], np.int64))
            signal, product = g.fresh(f"{base}_signal"), g.fresh(f"{base}_matmul")
            g.replace[id(node)] = [
                helper.make_node("Reshape", [node.input[0], flat], [signal], name=g.fresh(f"{base}_squeeze")),
                helper.make_node("MatMul", [signal, w], [product], name=g.fresh(f"{base}_as_matmul")),
                helper.make_node("Reshape", [product, out], [node.output[0]], name=g.fresh(f"{base}_complex"))]
            return (f"DFT {node.name or '(unnamed)'} (length {length}{', onesided' if onesided else ''}) -> MatMul "
                    f"with a constant [{n_in}, {2 * bins}] cos/sin matrix")
        found.append(_Match("dft", [node], apply))
    return found


# --- layernorm-axes ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerNormOver:
    """A layer normalization of x (dims `shape`) over the axes from `axis` on into y, with its constant weights:
    what layernorm_last_axis writes (a LayerNormalization node over several axes, or a decomposed one fuse found)."""

    x: str
    y: str
    shape: list[int]
    axis: int
    scale: np.ndarray
    bias: np.ndarray | None
    epsilon: float


def layernorm_last_axis(g: _Graph, norm: LayerNormOver, base: str) -> list[onnx.NodeProto]:
    """Reshape x to merge the axes from `axis` on, LayerNormalization over the last axis, Reshape back to `shape`:
    the same normalization the HTP runs (it refuses one over several axes)."""
    import numpy as np
    from onnx import helper

    kept, normed = norm.shape[:norm.axis], norm.shape[norm.axis:]
    size = math.prod(normed)
    gamma = g.initializer(f"{base}_scale", np.broadcast_to(norm.scale, normed).reshape(size).astype(np.float32))
    inputs = [gamma]
    if norm.bias is not None:
        inputs.append(g.initializer(f"{base}_bias",
                                    np.broadcast_to(norm.bias, normed).reshape(size).astype(np.float32)))
    merged = g.initializer(f"{base}_merged_shape", np.array([*kept, size], np.int64))
    back = g.initializer(f"{base}_shape", np.array(norm.shape, np.int64))
    flat, normal = g.fresh(f"{base}_merged"), g.fresh(f"{base}_normalized")
    return [helper.make_node("Reshape", [norm.x, merged], [flat], name=g.fresh(f"{base}_merge")),
            helper.make_node("LayerNormalization", [flat, *inputs], [normal], axis=-1, epsilon=norm.epsilon,
                             name=g.fresh(f"{base}_last_axis")),
            helper.make_node("Reshape", [normal, back], [norm.y], name=g.fresh(f"{base}_unmerge"))]


def _layernorm_axes(v: _Graph) -> list[_Match]:
    found = []
    for node in v.graph.node:
        if node.op_type != "LayerNormalization" or any(o for o in node.output[1:]):
            continue
        x = node.input[0]
        shape = v.shapes.get(x)
        if shape is None:
            continue
        axis = int(_attr(node, "axis", -1)) % len(shape)
        if len(shape) - axis < 2 or _attr(node, "stash_type", 1) != 1:
            continue
        if not all(v.is_const(t) for t in node.input[1:3] if t):
            continue

        def apply(g: _Graph, node: onnx.NodeProto = node, x: str = x, shape: list[int] = shape,
                  axis: int = axis) -> str:
            scale = g.const(node.input[1])
            bias = g.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            if scale is None:
                raise ValueError(f"LayerNormalization {node.name}: its scale has no data")
            norm = LayerNormOver(x, node.output[0], shape, axis, scale, bias, float(_attr(node, "epsilon", 1e-5)))
            g.replace[id(node)] = layernorm_last_axis(g, norm, node.name or "layernorm")
            return (f"LayerNormalization {node.name or '(unnamed)'} over axes {list(range(axis, len(shape)))} of "
                    f"{shape} -> over the last axis of {[*shape[:axis], math.prod(shape[axis:])]}")
        found.append(_Match("layernorm-axes", [node], apply))
    return found


# --- rank -------------------------------------------------------------------------------------------

def _groups(shape: list[int], perm: list[int]) -> list[list[int]]:
    """The input axes of a Transpose in runs that stay adjacent and in order in its output, in output order (size-1
    axes dropped: they can go anywhere)."""
    kept = [a for a in range(len(shape)) if shape[a] != 1]
    after = dict(itertools.pairwise(kept))
    runs: list[list[int]] = []
    for a in (a for a in perm if shape[a] != 1):
        if runs and after.get(runs[-1][-1]) == a:
            runs[-1].append(a)
        else:
            runs.append([a])
    return runs


def _rank(v: _Graph) -> list[_Match]:
    found = []
    for node in v.graph.node:
        if node.op_type != "Transpose":
            continue
        t_in, t_out = node.input[0], node.output[0]
        shape, out_shape = v.shapes.get(t_in), v.shapes.get(t_out)
        if shape is None or out_shape is None or len(shape) <= MAX_RANK:
            continue
        maker = v.producer.get(t_in)
        last = v.only_reader(t_out)
        if maker is None or v.only_reader(t_in) is not node or last is None or last.op_type != "Reshape" \
                or len(v.shapes.get(last.output[0], [0] * 9)) > MAX_RANK:
            continue
        if maker.op_type == "Reshape":
            if len(v.shapes.get(maker.input[0], [0] * 9)) > MAX_RANK:
                continue
        elif maker.op_type == "Gather":
            data, indices = v.shapes.get(maker.input[0]), v.shapes.get(maker.input[1])
            if data is None or indices is None or len(data) > MAX_RANK:
                continue
        else:
            continue
        perm = list(_attr(node, "perm", list(reversed(range(len(shape))))))
        runs = _groups(shape, perm)
        if len(runs) > MAX_RANK or not runs:
            continue

        def apply(g: _Graph, node: onnx.NodeProto = node, maker: onnx.NodeProto = maker, last: onnx.NodeProto = last,
                  shape: list[int] = shape, runs: list[list[int]] = runs) -> str:
            return _apply_rank(g, node, maker, last, shape, runs)
        found.append(_Match("rank", [maker, node, last], apply))
    return found


def _apply_rank(g: _Graph, node: onnx.NodeProto, maker: onnx.NodeProto, last: onnx.NodeProto, shape: list[int],
                runs: list[list[int]]) -> str:
    import numpy as np
    from onnx import helper

    ordered = sorted(runs, key=lambda r: r[0])
    merged = [math.prod(shape[a] for a in r) for r in ordered]
    perm = [ordered.index(r) for r in runs]
    base = node.name or "transpose"
    target = g.initializer(f"{base}_merged_shape", np.array(merged, np.int64))
    t_in = node.input[0]
    if maker.op_type == "Reshape":
        new = helper.make_node("Reshape", [maker.input[0], target], [t_in], name=maker.name)
        g.replace[id(maker)] = [new]
    else:
        axis = int(_attr(maker, "axis", 0))
        flat_indices = g.fresh(f"{base}_flat_indices")
        gathered = g.fresh(f"{base}_gathered")
        flat = g.initializer(f"{base}_flat", np.array([-1], np.int64))
        g.replace[id(maker)] = [
            helper.make_node("Reshape", [maker.input[1], flat], [flat_indices], name=g.fresh(f"{base}_flatten")),
            helper.make_node("Gather", [maker.input[0], flat_indices], [gathered], axis=axis, name=maker.name),
            helper.make_node("Reshape", [gathered, target], [t_in], name=g.fresh(f"{base}_merge"))]
    g.replace[id(node)] = [helper.make_node("Transpose", [t_in], node.output, perm=perm, name=node.name)]
    out = g.initializer(f"{base}_result_shape", np.array(g.shapes[last.output[0]], np.int64))
    g.replace[id(last)] = [helper.make_node("Reshape", [last.input[0], out], last.output, name=last.name)]
    for value in list(g.graph.value_info):
        if value.name in (t_in, node.output[0]):
            g.graph.value_info.remove(value)
    return (f"{maker.op_type} {maker.name or '(unnamed)'}, Transpose {node.name or '(unnamed)'}, Reshape "
            f"{last.name or '(unnamed)'}: {len(shape)}-D {shape} -> {len(merged)}-D {merged}")


# --- reshape-allowzero ------------------------------------------------------------------------------

def _allowzero(v: _Graph) -> list[_Match]:
    found = []
    for node in v.graph.node:
        if node.op_type != "Reshape" or not _attr(node, "allowzero", 0):
            continue
        target = v.const(node.input[1])
        if target is None or (target == 0).any():
            continue

        def apply(g: _Graph, node: onnx.NodeProto = node) -> str:
            for a in node.attribute:
                if a.name == "allowzero":
                    a.i = 0
            return f"Reshape {node.name or '(unnamed)'}: allowzero=1 -> 0 (its shape has no 0)"
        found.append(_Match("reshape-allowzero", [node], apply))
    return found


# --- einsum -----------------------------------------------------------------------------------------

def _einsum(v: _Graph) -> list[_Match]:
    """Einsum "PK,KQ->PQ" (labels P kept from the first input, K contracted, Q kept from the second; no label
    repeated, no ellipsis) with static shapes: a matrix product of the inputs reshaped to [*P, |K|] and [|K|, |Q|]."""
    found = []
    for node in v.graph.node:
        if node.op_type != "Einsum" or len(node.input) != 2:
            continue
        equation = _attr(node, "equation", b"")
        terms = (equation.decode() if isinstance(equation, bytes) else str(equation)).replace(" ", "")
        if "->" not in terms or "." in terms:
            continue
        ins, out = terms.split("->")
        if ins.count(",") != 1:
            continue
        a, b = ins.split(",")
        contracted = [c for c in a if c in b and c not in out]
        kept_a, kept_b = a[:len(a) - len(contracted)], b[len(contracted):]
        shape_a, shape_b = v.shapes.get(node.input[0]), v.shapes.get(node.input[1])
        if (len(set(a)) != len(a) or len(set(b)) != len(b) or not contracted or a != kept_a + "".join(contracted)
                or b != "".join(contracted) + kept_b or out != kept_a + kept_b or set(kept_a) & set(kept_b)
                or shape_a is None or shape_b is None or shape_a[len(kept_a):] != shape_b[:len(contracted)]):
            continue

        kept, inner_dims, cols_dims = shape_a[:len(kept_a)], shape_a[len(kept_a):], shape_b[len(contracted):]

        def apply(g: _Graph, node: onnx.NodeProto = node, p: list[int] = kept, k: list[int] = inner_dims,
                  q: list[int] = cols_dims, terms: str = terms) -> str:
            import numpy as np
            from onnx import helper

            base = node.name or "einsum"
            inner, cols = math.prod(k), math.prod(q)
            a2, b2, product = g.fresh(f"{base}_a"), g.fresh(f"{base}_b"), g.fresh(f"{base}_matmul")
            g.replace[id(node)] = [
                helper.make_node("Reshape", [node.input[0], g.initializer(f"{base}_a_shape",
                                                                          np.array([*p, inner], np.int64))], [a2]),
                helper.make_node("Reshape", [node.input[1], g.initializer(f"{base}_b_shape",
                                                                          np.array([inner, cols], np.int64))], [b2]),
                helper.make_node("MatMul", [a2, b2], [product], name=g.fresh(f"{base}_as_matmul")),
                helper.make_node("Reshape", [product, g.initializer(f"{base}_out_shape",
                                                                    np.array([*p, *q], np.int64))],
                                 [node.output[0]], name=node.name)]
            return f"Einsum {node.name or '(unnamed)'} ({terms}): Reshape to {[*p, inner]} x {[inner, cols]}, MatMul"
        found.append(_Match("einsum", [node], apply))
    return found


# --- where-mask -------------------------------------------------------------------------------------

def _where_mask(v: _Graph) -> list[_Match]:
    from onnx import TensorProto

    found = []
    for node in v.graph.node:
        if node.op_type != "Where":
            continue
        readers = v.consumers.get(node.output[0], [])
        if not readers or any(r.op_type != "Softmax" for r in readers) \
                or node.output[0] in {o.name for o in v.graph.output}:
            continue
        fill = None
        for slot in (1, 2):
            value = v.const(node.input[slot])
            if value is not None and value.size and (value == value.reshape(-1)[0]).all() \
                    and float(value.reshape(-1)[0]) <= HUGE_NEGATIVE:
                fill = slot
        if fill is None or v.elem.get(node.input[3 - fill], TensorProto.FLOAT) != TensorProto.FLOAT:
            continue

        def apply(g: _Graph, node: onnx.NodeProto = node, fill: int = fill) -> str:
            import numpy as np
            from onnx import helper

            base = node.name or "where"
            neg = g.initializer(f"{base}_mask_value", np.array(MASK_NEG, np.float32))
            zero = g.initializer(f"{base}_zero", np.array(0.0, np.float32))
            mask = g.fresh(f"{base}_additive_mask")
            branches = [neg, zero] if fill == 1 else [zero, neg]
            g.replace[id(node)] = [
                helper.make_node("Where", [node.input[0], *branches], [mask], name=g.fresh(f"{base}_mask")),
                helper.make_node("Add", [node.input[3 - fill], mask], [node.output[0]], name=node.name)]
            return (f"Where {node.name or '(unnamed)'}: the -inf fill before the Softmax -> an additive mask of "
                    f"{MASK_NEG:g}")
        found.append(_Match("where-mask", [node], apply))
    return found


FINDERS: dict[str, Callable[[_Graph], list[_Match]]] = {
    "dft": _dft, "einsum": _einsum, "layernorm-axes": _layernorm_axes, "rank": _rank, "reshape-allowzero": _allowzero,
    "where-mask": _where_mask}


def parse_kinds(text: str) -> list[str]:
    """--rewrite KIND[,KIND]: the kinds, known ones only."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise BadInput(f"--rewrite {text}: give one or more of {', '.join(KINDS)} (comma-separated)")
    return list(dict.fromkeys(kinds))


def fixable(model: onnx.ModelProto, kinds: list[str] | None = None) -> dict[str, str]:
    """The nodes a rewrite would replace: node name -> its kind."""
    view = graph_view(model)
    return {n.name: m.kind for kind in (kinds or list(KINDS)) for m in FINDERS[kind](view) for n in m.nodes}


def rewrite(model: onnx.ModelProto, kinds: list[str]) -> list[str]:
    """Apply each kind where it matches, in place; returns one line per rewrite (a kind that matched nothing says
    so). Shapes must be static where a kind needs them (prepare rewrites after --shape)."""

    changes = []
    for kind in kinds:
        view = graph_view(model)
        matches = FINDERS[kind](view)
        taken: set[int] = set()
        for m in matches:
            if any(id(n) in taken for n in m.nodes):
                continue
            taken.update(id(n) for n in m.nodes)
            changes.append(f"--rewrite {kind}: {m.apply(view)}")
        if not matches:
            changes.append(f"--rewrite {kind}: nothing to rewrite")
            continue
        nodes = [new for n in model.graph.node for new in view.replace.get(id(n), [n])]
        model.graph.ClearField("node")
        model.graph.node.extend(nodes)
    check_model(model)
    return changes

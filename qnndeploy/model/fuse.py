"""`prepare --fuse`: rewrite the unfused GELU and LayerNorm of older exports into one ONNX node each (Gelu, opset
20; LayerNormalization, opset 17).

Exporters before opset 20 spell GELU as x * 0.5 * (1 + Erf(x / sqrt 2)). The HTP runs that at fp16, but its
quantized (w8a16) path has no Erf, so every w8a16 compile of such a transformer fails; the same model with one Gelu
node compiles. Before opset 17 a LayerNorm is nine nodes (ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, Mul
gamma, Add beta); one LayerNormalization over the last axis is the HTP's own op (over several trailing axes the HTP
refuses it, so those become Reshape, LayerNormalization over the last axis, Reshape back). Only ONNX-standard ops are
written, so the CPU fallback stays a plain ONNX model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qnndeploy.model import rewrite
from qnndeploy.model.onnxio import check_model, convert_opset, inferred_values, scalar_constant

if TYPE_CHECKING:
    import onnx

GELU_OPSET = 20
LAYERNORM_OPSET = 17


def _other(node: onnx.NodeProto, name: str) -> str | None:
    """The other input of a two-input node that takes `name`."""
    if len(node.input) != 2 or name not in node.input:
        return None
    return node.input[1] if node.input[0] == name else node.input[0]


def _near(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= 1e-3 * abs(want)


def find_gelus(graph: onnx.GraphProto) -> list[tuple[str, str, list[onnx.NodeProto]]]:
    """Every erf GELU of the top-level graph as (x, y, its five nodes), in the orderings exporters write:
    Mul(Mul(x, 1 + erf), 0.5), Mul(Mul(x, 0.5), 1 + erf) and Mul(x, Mul(1 + erf, 0.5))."""
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    outputs = {v.name for v in graph.output}

    def only_consumer(name: str) -> onnx.NodeProto | None:
        users = consumers.get(name, [])
        return users[0] if len(users) == 1 and name not in outputs else None

    found = []
    for erf in (n for n in graph.node if n.op_type == "Erf"):
        scale = producer.get(erf.input[0])
        if scale is None or scale.op_type not in ("Div", "Mul") or len(scale.input) != 2:
            continue
        x, c = scale.input
        if scale.op_type == "Mul" and scalar_constant(graph, x) is not None:
            x, c = c, x
        if not _near(scalar_constant(graph, c), math.sqrt(2) if scale.op_type == "Div" else 1 / math.sqrt(2)):
            continue
        add = only_consumer(erf.output[0])
        if add is None or add.op_type != "Add" \
                or not _near(scalar_constant(graph, _other(add, erf.output[0]) or ""), 1.0):
            continue
        first = only_consumer(add.output[0])
        if first is None or first.op_type != "Mul":
            continue
        partner = _other(first, add.output[0])
        half = producer.get(partner or "")
        nodes = [scale, erf, add, first]
        if partner == x:  # Mul(x, 1 + erf) then Mul(., 0.5)
            last = only_consumer(first.output[0])
            if last is None or last.op_type != "Mul" or not _near(scalar_constant(graph, _other(last, first.output[0])
                                                                              or ""), 0.5):
                continue
            nodes.append(last)
        elif _near(scalar_constant(graph, partner or ""), 0.5):  # Mul(1 + erf, 0.5) then Mul(x, .)
            last = only_consumer(first.output[0])
            if last is None or last.op_type != "Mul" or _other(last, first.output[0]) != x:
                continue
            nodes.append(last)
        elif half is not None and half.op_type == "Mul" and x in half.input \
                and _near(scalar_constant(graph, _other(half, x) or ""), 0.5) \
                and only_consumer(half.output[0]) is first:
            nodes.insert(0, half)  # Mul(Mul(x, 0.5), 1 + erf)
        else:
            continue
        found.append((x, nodes[-1].output[0], nodes))
    return found


def fuse_gelu(model: onnx.ModelProto) -> int:
    """Replace each erf GELU by one Gelu node, converting the model to opset 20 first when it is older
    (onnx's version converter rewrites the ops whose form changed, e.g. ReduceMean's axes). Returns the count."""
    from onnx import helper

    if not find_gelus(model.graph):
        return 0
    convert_opset(model, GELU_OPSET)
    graph = model.graph
    found = find_gelus(graph)
    drop = {id(n) for _, _, nodes in found for n in nodes}
    kept = [n for n in graph.node if id(n) not in drop]
    position = {id(n): i for i, n in enumerate(graph.node)}
    for i, (x, y, nodes) in enumerate(found):
        gelu = helper.make_node("Gelu", [x], [y], name=f"{nodes[-1].name or 'gelu'}_fused_{i}")
        at = max(position[id(n)] for n in nodes)
        kept.append(gelu)
        position[id(gelu)] = at
    kept.sort(key=lambda n: position[id(n)])
    graph.ClearField("node")
    graph.node.extend(kept)
    check_model(model)
    return len(found)


def _axes(graph: onnx.GraphProto, node: onnx.NodeProto) -> list[int] | None:
    """A ReduceMean's axes (an attribute before opset 18, an input from 18), when it keeps its dims."""
    from onnx import helper, numpy_helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("keepdims", 1) != 1:
        return None
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    if len(node.input) > 1 and node.input[1]:
        for t in graph.initializer:
            if t.name == node.input[1]:
                return [int(a) for a in numpy_helper.to_array(t).reshape(-1)]
        for n in graph.node:
            if n.op_type == "Constant" and n.output[0] == node.input[1]:
                return [int(a) for a in numpy_helper.to_array(n.attribute[0].t).reshape(-1)]
    return None


@dataclass
class LayerNorm:
    """A decomposed LayerNorm: x normalized over its axes from `axis` on, into y."""

    x: str
    y: str
    nodes: list[onnx.NodeProto]
    eps: float
    axis: int
    gamma: str | None
    beta: str | None
    shape: list[int]  # x's dims (0: not known; the normalized ones are known)


def find_layernorms(model: onnx.ModelProto) -> list[LayerNorm]:
    """Every decomposed LayerNorm over trailing axes: ReduceMean(x) -> Sub -> Pow 2 (or Mul by itself) -> ReduceMean
    -> Add eps -> Sqrt -> Div, then optionally Mul gamma and Add beta (constants). Only where x's dims are known over
    the normalized axes and the inner nodes feed nothing else."""
    graph = model.graph
    values = inferred_values(model)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    outputs = {v.name for v in graph.output}
    consts = {t.name for t in graph.initializer} | {n.output[0] for n in graph.node if n.op_type == "Constant"}

    def only(name: str, op: str) -> onnx.NodeProto | None:
        users = consumers.get(name, [])
        return users[0] if len(users) == 1 and users[0].op_type == op and name not in outputs else None

    def other(node: onnx.NodeProto, name: str) -> str:
        return node.input[1] if node.input[0] == name else node.input[0]

    found = []
    for mean in (n for n in graph.node if n.op_type == "ReduceMean"):
        x = mean.input[0]
        value = values.get(x)
        if value is None or not value.type.tensor_type.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in value.type.tensor_type.shape.dim]
        rank, axes = len(dims), _axes(graph, mean)
        if not rank or not axes:
            continue
        axes = sorted(a % rank for a in axes)
        if axes != list(range(rank - len(axes), rank)) or any(dims[a] <= 0 for a in axes):
            continue
        users = consumers.get(mean.output[0], [])
        if len(users) != 1 or users[0].op_type != "Sub" or list(users[0].input) != [x, mean.output[0]]:
            continue
        sub = users[0]
        centered = consumers.get(sub.output[0], [])
        square = next((n for n in centered if (n.op_type == "Pow" and n.input[0] == sub.output[0]
                                               and scalar_constant(graph, n.input[1]) == 2.0)
                       or (n.op_type == "Mul" and list(n.input) == [sub.output[0]] * 2)), None)
        div = next((n for n in centered if n.op_type == "Div" and n.input[0] == sub.output[0]), None)
        if square is None or div is None or len(centered) != 2 or sub.output[0] in outputs:
            continue
        var = only(square.output[0], "ReduceMean")
        var_axes = _axes(graph, var) if var is not None else None
        if var is None or var_axes is None or sorted(a % rank for a in var_axes) != axes:
            continue
        add = only(var.output[0], "Add")
        eps = scalar_constant(graph, other(add, var.output[0])) if add is not None else None
        sqrt = only(add.output[0], "Sqrt") if add is not None else None
        if add is None or eps is None or sqrt is None or div.input[1] != sqrt.output[0] \
                or len(consumers.get(sqrt.output[0], [])) != 1:
            continue
        nodes = [mean, sub, square, var, add, sqrt, div]
        gamma = beta = None
        end = div
        scale = only(div.output[0], "Mul")
        if scale is not None and other(scale, div.output[0]) in consts:
            gamma, end = other(scale, div.output[0]), scale
            nodes.append(scale)
            shift = only(scale.output[0], "Add")
            if shift is not None and other(shift, scale.output[0]) in consts:
                beta, end = other(shift, scale.output[0]), shift
                nodes.append(shift)
        found.append(LayerNorm(x, end.output[0], nodes, eps, axes[0], gamma, beta, dims))
    return found


def fusable_nodes(model: onnx.ModelProto) -> dict[str, str]:
    """The nodes --fuse replaces: node name -> its pattern (GELU, LayerNorm)."""
    names = {n.name: "GELU" for _, _, nodes in find_gelus(model.graph) for n in nodes}
    names.update({n.name: "LayerNorm" for found in find_layernorms(model) for n in found.nodes})
    return names


def fuse_layernorm(model: onnx.ModelProto) -> int:
    """Replace each decomposed LayerNorm by one LayerNormalization over the last axis (with Reshapes around it when
    it normalizes several axes, whose dims must then be known), converting the model to opset 17 first when it is
    older. Returns the count."""
    import numpy as np
    from onnx import helper

    if not find_layernorms(model):
        return 0
    convert_opset(model, LAYERNORM_OPSET)
    view = rewrite.graph_view(model)
    position = {id(n): i for i, n in enumerate(model.graph.node)}
    drop: set[int] = set()
    added: list[onnx.NodeProto] = []
    for f in find_layernorms(model):
        normed = f.shape[f.axis:]
        if f.axis < len(f.shape) - 1 and not all(d > 0 for d in f.shape):
            continue  # several axes and a dim not known: no Reshape can be written, the decomposed form stays
        gamma = view.const(f.gamma) if f.gamma else np.ones(normed, np.float32)
        beta = view.const(f.beta) if f.beta else None
        if gamma is None or (f.beta and beta is None):
            continue  # weights not loaded
        base = f"{f.nodes[-1].name or 'layernorm'}_fused"
        if f.axis == len(f.shape) - 1:
            inputs = [view.initializer(f"{base}_scale", np.broadcast_to(gamma, normed).astype(np.float32).copy())]
            if beta is not None:
                inputs.append(view.initializer(f"{base}_bias", np.broadcast_to(beta, normed).astype(np.float32).copy()))
            new = [helper.make_node("LayerNormalization", [f.x, *inputs], [f.y], axis=-1, epsilon=f.eps,
                                    name=view.fresh(base))]
        else:
            norm = rewrite.LayerNormOver(f.x, f.y, f.shape, f.axis, gamma, beta, f.eps)
            new = rewrite.layernorm_last_axis(view, norm, base)
        at = max(position[id(n)] for n in f.nodes)
        for n in new:
            position[id(n)] = at
        drop |= {id(n) for n in f.nodes}
        added += new
    kept = [n for n in model.graph.node if id(n) not in drop] + added
    kept.sort(key=lambda n: position[id(n)])
    model.graph.ClearField("node")
    model.graph.node.extend(kept)
    check_model(model)
    return sum(1 for n in added if n.op_type == "LayerNormalization")

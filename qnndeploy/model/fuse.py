"""`prepare --fuse`: rewrite the unfused GELU of older exports into one ONNX Gelu node (opset 20).

Exporters before opset 20 spell GELU as x * 0.5 * (1 + Erf(x / sqrt 2)). The HTP runs that at fp16, but its
quantized (w8a16) path has no Erf, so every w8a16 compile of such a transformer fails; the same model with one Gelu
node compiles. Only ONNX-standard ops are written, so the CPU fallback stays a plain ONNX model.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from qnndeploy.model.onnxio import scalar_constant

if TYPE_CHECKING:
    import onnx

GELU_OPSET = 20


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
    import onnx
    from onnx import helper, version_converter

    if not find_gelus(model.graph):
        return 0
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < GELU_OPSET:
        converted = version_converter.convert_version(model, GELU_OPSET)
        model.CopyFrom(converted)
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
    onnx.checker.check_model(model)
    return len(found)

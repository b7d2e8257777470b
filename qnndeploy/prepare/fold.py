"""The folding tools prepare tries in turn, each from one ONNX file to another: onnxsim, onnxslim, ONNX Runtime's
own basic-level offline optimization, then our own constant folder written with onnx alone.

No one tool folds every real model: onnxsim stops on graphs it cannot sort ("Nodes in a graph must be
topologically sorted"), onnxslim on others, and ONNX Runtime folds what it can run. Each tool here raises
FoldError with its one-line reason; prepare decides which result to keep.
"""

from __future__ import annotations

import contextlib
import io
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base.errors import first_line
from qnndeploy.model.onnxio import MAX_FOLDED_BYTES, RANDOM_OPS, drop_initializers, save_model, weightless
from qnndeploy.qnn import htp

if TYPE_CHECKING:
    import numpy as np
    import onnx


class FoldError(Exception):
    """A folding tool failed or is missing; str() is its one-line reason."""


def _onnxsim(src: Path, dst: Path, external: bool) -> None:
    # onnxsim 0.8 imports torch at import when torch is installed (3 s of a prepare) for an optional PPQ bridge that
    # simplify() never uses and that catches the ImportError: unless this process has loaded torch already, the
    # import sees none. The window is this import only; qnndeploy itself never imports torch.
    hidden = "torch" not in sys.modules
    if hidden:
        sys.modules["torch"] = None  # type: ignore[assignment]  # None in sys.modules: `import torch` fails
    try:
        import onnxsim
    except ImportError:
        raise FoldError("not installed (pip install onnxsim)") from None
    finally:
        if hidden:
            del sys.modules["torch"]
    if external:
        raise FoldError("skipped: it cannot write models over 2 GB")
    try:
        _, ok = onnxsim.simplify(str(src), output_path=str(dst))
    except Exception as e:  # noqa: BLE001 onnxsim raises many types, from Python and from its C++ core
        raise FoldError(first_line(e)) from None
    if not ok:
        raise FoldError("its own check of the result failed")


def _onnxslim(src: Path, dst: Path, external: bool) -> None:
    try:
        import onnxslim
    except ImportError:
        raise FoldError("not installed (pip install onnxslim)") from None
    try:
        onnxslim.slim(str(src), str(dst), save_as_external_data=external)
    except Exception as e:  # noqa: BLE001 onnxslim raises whatever its passes raise
        raise FoldError(first_line(e)) from None


def _onnxruntime(src: Path, dst: Path, external: bool) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # ONNX ops only: portable
    options.optimized_model_filepath = str(dst)
    if external:
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                         dst.name + ".data")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    try:
        ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 onnxruntime's exception types are not exported
        raise FoldError(first_line(e)) from None


def _onnx(src: Path, dst: Path, external: bool) -> None:
    """Our constant folder, onnx alone, the chain's last resort: it needs neither a sorted graph nor a runtime
    session, and inlines every If whose condition became constant, however deep the Ifs nest."""
    import onnx

    try:
        model = onnx.load(str(src))  # with its external data, read from beside src
        model.graph.ClearField("value_info")  # stale shapes would clash with those each pass infers
        while _fold_pass(model):
            pass
        model.graph.ClearField("value_info")  # stale after folding and inlining
        save_model(model, dst, external)
    except FoldError:
        raise
    except Exception as e:  # noqa: BLE001 onnx raises many types, from Python and from its C++ core
        raise FoldError(first_line(e)) from None


def _fold_pass(model: onnx.ModelProto) -> bool:
    """One round: Shape/Size of static shapes and nodes of constants become initializers, one If on a constant
    condition is inlined, dead nodes and initializers go. True when the graph changed."""
    from onnx import numpy_helper

    graph = model.graph
    shapes = _static_shapes(model)
    graph_inputs = {v.name for v in graph.input}
    consts = {t.name: t for t in graph.initializer if t.name not in graph_inputs}
    kept: list[onnx.NodeProto] = []
    inlined = changed = False
    for index, node in enumerate(graph.node):
        if node.op_type == "If" and node.input[0] in consts and not inlined:
            kept += _inline(graph, index, bool(numpy_helper.to_array(consts[node.input[0]])))
            inlined = changed = True
            continue
        values = _values(node, shapes, consts, model.opset_import)
        if values is None:
            kept.append(node)
            continue
        for name, value in zip([o for o in node.output if o], values, strict=True):
            consts[name] = numpy_helper.from_array(value, name)
            graph.initializer.append(consts[name])
        changed = True
    graph.ClearField("node")
    graph.node.extend(kept)
    return _remove_unused(graph) or changed


def _static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Every tensor whose shape onnx infers fully (weightless, as onnxio.inferred_values does); none
    when inference fails (custom ops)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(weightless(model), data_prop=True).graph
    except Exception:  # noqa: BLE001 folding what is already constant still helps
        return {}
    shapes = {}
    for value in (*inferred.input, *inferred.value_info, *inferred.output):
        shape = value.type.tensor_type.shape
        if value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in shape.dim):
            shapes[value.name] = [d.dim_value for d in shape.dim]
    return shapes


def _values(node: onnx.NodeProto, shapes: dict[str, list[int]], consts: dict[str, onnx.TensorProto],
            opsets: Sequence[onnx.OperatorSetIdProto]) -> list[np.ndarray] | None:
    """The node's outputs when they are known before any input is fed; None when not, or not worth storing."""
    import numpy as np
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    if node.domain not in ("", "ai.onnx") or node.op_type in RANDOM_OPS or any(_subgraphs(node)):
        return None
    if node.op_type in ("Shape", "Size") and node.input[0] in shapes:
        dims = shapes[node.input[0]]
        if node.op_type == "Size":
            return [np.array(math.prod(dims), np.int64)]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return [np.array(dims[attrs.get("start", 0):attrs.get("end", len(dims))], np.int64)]
    if not all(name in consts for name in node.input if name):
        return None
    one = helper.make_graph([node], "fold", [], [helper.make_empty_tensor_value_info(o) for o in node.output if o],
                            initializer=[consts[name] for name in dict.fromkeys(node.input) if name])
    try:
        values = ReferenceEvaluator(helper.make_model(one, opset_imports=opsets)).run(None, {})
    except Exception as e:  # noqa: BLE001 the reference ops raise whatever numpy raises
        raise FoldError(f"{node.op_type} node {node.name or '(unnamed)'}: {first_line(e)}") from None
    arrays = [v for v in values if isinstance(v, np.ndarray)]
    if len(arrays) != len(values) or sum(a.nbytes for a in arrays) > MAX_FOLDED_BYTES:
        return None  # sequences, optionals and big tensors stay computed
    return arrays


def _inline(graph: onnx.GraphProto, index: int, cond: bool) -> list[onnx.NodeProto]:
    """The nodes of the If at `index`'s chosen branch, writing the If's outputs; branch names that clash with the
    parent's are renamed, and the branch's initializers join the parent's."""
    from onnx import helper

    node = graph.node[index]
    branch = next(a.g for a in node.attribute if a.name == ("then_branch" if cond else "else_branch"))
    parent = {v.name for v in (*graph.input, *graph.output)} | {t.name for t in graph.initializer}
    parent = parent.union(
        *(_names(n) for i, n in enumerate(graph.node) if i != index), node.input, node.output)
    defined = {o for n in branch.node for o in n.output if o} | {t.name for t in branch.initializer}
    mapping: dict[str, str] = {}
    for out, target in zip(branch.output, node.output, strict=True):
        if target and out.name in defined and out.name not in mapping:
            mapping[out.name] = target
    taken = parent | _names(node)
    for name in sorted(defined - mapping.keys()):
        if name in parent:
            new, i = name, 1
            while new in taken:
                new, i = f"{name}_{i}", i + 1
            mapping[name] = new
            taken.add(new)
    # An output the branch does not compute itself (an outer name, or one output twice) gets an Identity.
    tail = [helper.make_node("Identity", [mapping.get(out.name, out.name)], [target])
            for out, target in zip(branch.output, node.output, strict=True)
            if target and mapping.get(out.name) != target]
    _rename(branch, mapping)
    graph.initializer.extend(branch.initializer)
    return [*branch.node, *tail]


def _rename(graph: onnx.GraphProto, mapping: dict[str, str]) -> None:
    for t in graph.initializer:
        t.name = mapping.get(t.name, t.name)
    for value in graph.output:
        value.name = mapping.get(value.name, value.name)
    for node in graph.node:
        node.input[:] = [mapping.get(n, n) for n in node.input]
        node.output[:] = [mapping.get(n, n) for n in node.output]
        for g in _subgraphs(node):
            _rename(g, mapping)


def _remove_unused(graph: onnx.GraphProto) -> bool:
    """Drop nodes no graph output depends on, then initializers nothing reads. True when any went."""
    before = len(graph.node) + len(graph.initializer)
    while True:
        read = {v.name for v in graph.output}.union(*(_reads(n) for n in graph.node))
        kept = [n for n in graph.node if any(o in read for o in n.output)]
        if len(kept) == len(graph.node):
            break
        graph.ClearField("node")
        graph.node.extend(kept)
    graph_inputs = {v.name for v in graph.input}
    drop_initializers(graph, lambda name: name in read or name in graph_inputs)
    return len(graph.node) + len(graph.initializer) < before


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        yield from [attr.g] if attr.HasField("g") else attr.graphs


def _reads(node: onnx.NodeProto) -> set[str]:
    """The names a node reads, through its subgraphs too (they may read the outer graph's tensors)."""
    names = set(node.input)
    for g in _subgraphs(node):
        names |= {v.name for v in g.output}.union(*map(_reads, g.node))
    return names


def _names(node: onnx.NodeProto) -> set[str]:
    """Every name a node and its subgraphs read or define."""
    names = {*node.input, *node.output}
    for g in _subgraphs(node):
        names |= {v.name for v in (*g.input, *g.output)} | {t.name for t in g.initializer}
        names |= set().union(*map(_names, g.node))
    return names


# Tools that hold the whole model in memory, several times over: not tried on a model over 2 GB (external data).
# Measured on Whisper large-v3's 3.2 GB decoder: onnxslim passed 18.7 GB, onnxruntime's fold 21 GB and wrote no
# model (24 GB machine); onnxsim refuses it. Our own folder (onnx) holds the model once and is still tried.
WHOLE_MODEL = frozenset({"onnxsim", "onnxslim", "onnxruntime"})
TOOLS: dict[str, Callable[[Path, Path, bool], None]] = {
    "onnxsim": _onnxsim,
    "onnxslim": _onnxslim,
    "onnxruntime": _onnxruntime,
    "onnx": _onnx,  # last: the others also fuse and eliminate nodes, this one only folds constants
}


def fold(tool: str, src: Path, dst: Path, external: bool) -> None:
    """Write `src` folded by `tool` to `dst` (weights in dst.data when `external`). The tools print tables and
    banners on stdout: only the CLI prints, so they are silenced."""
    with htp.quiet_native_stdout(), contextlib.redirect_stdout(io.StringIO()):
        TOOLS[tool](src, dst, external)
    if not dst.is_file():
        raise FoldError("it wrote no model")

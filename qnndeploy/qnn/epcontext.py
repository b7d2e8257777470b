"""ONNX Runtime EPContext wrappers (<graph>_ctx.onnx): which context binary they load, and re-pointing them.

With embed mode 0 the wrapper names its context binary by a path relative to itself. A bundle renames binaries
to <graph>.bin, so the name inside the wrapper must follow, or ONNX Runtime fails on the phone. Every wrapper
qnndeploy writes is at compat.portable_ir(): the host's onnxruntime writes IR version 14, which the ONNX Runtime
of an app (1.30 and older, measured) refuses to load, and the one EPContext node needs nothing newer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base import compat
from qnndeploy.base.errors import BadInput
from qnndeploy.model.onnxio import load_model

if TYPE_CHECKING:
    import onnx


def _ref_attrs(model: onnx.ModelProto) -> list[onnx.AttributeProto]:
    """The ep_cache_context attributes of EPContext nodes that keep their binary in a separate file."""
    refs = []
    for node in model.graph.node:
        if node.op_type != "EPContext":
            continue
        attrs = {a.name: a for a in node.attribute}
        if "embed_mode" in attrs and attrs["embed_mode"].i == 0 and "ep_cache_context" in attrs:
            refs.append(attrs["ep_cache_context"])
    return refs


def ir_version(path: Path) -> int:
    return int(load_model(path, weights=False).ir_version)


def context_refs(path: Path) -> list[str]:
    """The context-binary file names an EPContext model loads (empty if it embeds them)."""
    return [a.s.decode() for a in _ref_attrs(load_model(path, weights=False))]


def graph_names(path: Path) -> list[str]:
    """The QNN graph each EPContext node runs: its partition_name, which names the graph in the context binary."""
    names = []
    for node in load_model(path, weights=False).graph.node:
        if node.op_type == "EPContext":
            attrs = {a.name: a for a in node.attribute}
            names.append(attrs["partition_name"].s.decode() if "partition_name" in attrs else node.name)
    return names


def retarget(src: Path, dst: Path, binary_name: str) -> int:
    """Write a copy of `src` to `dst` whose EPContext nodes load `binary_name`; returns how many were changed."""
    import onnx

    model = load_model(src)
    attrs = _ref_attrs(model)
    if not attrs:
        raise BadInput(f"{src} has no EPContext node that loads a separate context binary")
    for a in attrs:
        a.s = binary_name.encode()
    model.ir_version = min(model.ir_version, compat.portable_ir())
    tmp = dst.with_name(dst.name + ".tmp")
    onnx.save(model, str(tmp))
    tmp.replace(dst)
    return len(attrs)


def wrap(binary_name: str, graph_name: str, source: Path, dst: Path, sdk_build: str | None = None) -> None:
    """Write an EPContext wrapper for a context binary made elsewhere (AI Hub): one EPContext node, the QNN EP's
    attributes, loading `binary_name` beside it and running its graph `graph_name`, with the inputs and outputs of
    the ONNX model it was compiled from (the graph keeps their names), so ONNX Runtime can run it on the host HTP
    emulator and on phones like the wrappers the ort backend writes."""
    import onnx

    model = load_model(source, check_external=False, weights=False)  # the signature only: no weight bytes
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    inputs = [v for v in graph.input if v.name not in initializers]
    node = onnx.helper.make_node(
        "EPContext", [v.name for v in inputs], [v.name for v in graph.output], name=graph_name, domain="com.microsoft",
        main_context=1, ep_cache_context=binary_name, embed_mode=0, source="QNNExecutionProvider",
        partition_name=graph_name, **({"ep_sdk_version": sdk_build} if sdk_build else {}))
    wrapper = onnx.helper.make_model(
        onnx.helper.make_graph([node], graph.name or graph_name, inputs, list(graph.output)),
        opset_imports=[onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("com.microsoft", 1)])
    wrapper.ir_version = compat.portable_ir()
    tmp = dst.with_name(dst.name + ".tmp")
    onnx.save(wrapper, str(tmp))
    tmp.replace(dst)

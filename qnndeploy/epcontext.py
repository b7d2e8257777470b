"""ONNX Runtime EPContext wrappers (<graph>_ctx.onnx): which context binary they load, and re-pointing them.

With embed mode 0 the wrapper names its context binary by a path relative to itself. A bundle renames binaries
to <graph>.bin, so the name inside the wrapper must follow, or ONNX Runtime fails on the phone.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.errors import QnnDeployError
from qnndeploy.onnxio import load_model

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


def context_refs(path: Path) -> list[str]:
    """The context-binary file names an EPContext model loads (empty if it embeds them)."""
    return [a.s.decode() for a in _ref_attrs(load_model(path))]


def graph_names(path: Path) -> list[str]:
    """The QNN graph each EPContext node runs: its partition_name, which names the graph in the context binary."""
    names = []
    for node in load_model(path).graph.node:
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
        raise QnnDeployError(f"{src} has no EPContext node that loads a separate context binary")
    for a in attrs:
        a.s = binary_name.encode()
    tmp = dst.with_name(dst.name + ".tmp")
    onnx.save(model, str(tmp))
    tmp.replace(dst)
    return len(attrs)

"""What a context binary's own metadata (qnnsystem.ContextInfo) must agree with: the graphs it is meant to hold and
their signatures, its target SoC, the runtime the bundle promises; and what deserves a warning (more VTCM than the
SoC has). compile and bundle verify both judge by these rules, so a binary of another graph is
caught even when its QAIRT and SoC markers look right."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from qnndeploy.base import compat, socs
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.base.fileio import JSON
from qnndeploy.qnn import epcontext
from qnndeploy.qnn.qnnsystem import ContextInfo, GraphInfo, QnnTensorInfo

_NOT_WORD = re.compile(r"[^A-Za-z0-9_]")


def _key(name: str) -> str:
    """QNN tensor names are C identifiers: the QNN EP writes other characters of ONNX names as '_'."""
    return _NOT_WORD.sub("_", name)


def _show(tensors: Sequence[QnnTensorInfo] | Sequence[JSON]) -> str:
    def one(t: QnnTensorInfo | JSON) -> str:
        name, dims, dtype = (t.name, t.dims, t.dtype) if isinstance(t, QnnTensorInfo) else (t["name"], t["shape"],
                                                                                          t["dtype"])
        return f"{name} {'x'.join(map(str, dims)) or 'scalar'} {dtype}"
    return ", ".join(one(t) for t in tensors)


def _same(found: Sequence[QnnTensorInfo], expected: Sequence[JSON]) -> bool:
    want = {_key(t["name"]): t for t in expected}
    if len(found) != len(expected) or {_key(t.name) for t in found} != set(want):
        return False
    for t in found:
        w = want[_key(t.name)]
        static = [d for d in w["shape"] if isinstance(d, int)] == list(w["shape"])
        shape = list(w["shape"]) or [1]  # QNN has no rank-0 tensors: an ONNX scalar is a [1] in the binary
        # a quantized tensor (QAIRT's converter makes fixed-point graph I/O) takes integers the app quantizes
        if (t.dtype != w["dtype"] and t.quantization is None) or (static and list(t.dims) != shape):
            return False
    return True


def graph_problems(info: ContextInfo, wrappers: Mapping[str, Path | None],
                   signatures: Mapping[str, tuple[Sequence[JSON], Sequence[JSON]]]) -> list[str]:
    """Our graphs (-> the EPContext wrapper that runs each, or None) found in the binary by the QNN graph their
    wrapper names, each with its CPU model's signature. A wrapper that cannot be read counts as none: its own
    problem is reported with the wrapper."""
    wanted: dict[str, str | None] = {}
    for graph, wrapper in wrappers.items():
        try:
            names = epcontext.graph_names(wrapper) if wrapper is not None else []
        except QnnDeployError:
            names = []
        wanted[graph] = names[0] if len(names) == 1 else None
    found, problems = match_graphs(info, wanted)
    return problems + [m for g, qnn in found.items() if g in signatures
                       and (m := signature_problem(qnn, g, signatures[g])) is not None]


def match_graphs(info: ContextInfo, wanted: dict[str, str | None]) -> tuple[dict[str, GraphInfo], list[str]]:
    """The binary's graph for each of `wanted` (our graph name -> the QNN graph name its EPContext wrapper names,
    or None: then the only graph of a one-graph binary, else the graph of the same name); problems for what does
    not match."""
    by_name = {g.name: g for g in info.graphs}
    problems = []
    if len(info.graphs) != len(wanted):
        problems.append(f"holds {len(info.graphs)} graph(s) ({', '.join(by_name) or 'none'}), but the manifest "
                        f"gives it {len(wanted)} ({', '.join(wanted)})")
    found: dict[str, GraphInfo] = {}
    for graph, qnn_name in wanted.items():
        g = by_name.get(qnn_name or graph) or (info.graphs[0] if qnn_name is None and len(info.graphs) == 1 else None)
        if g is None:
            which = f"the one graph '{graph}''s EPContext wrapper runs" if qnn_name else f"for graph '{graph}'"
            problems.append(f"holds no graph {qnn_name or graph!r}, {which} (it holds {', '.join(by_name) or 'none'})")
        else:
            found[graph] = g
    return found, problems


def signature_problem(g: GraphInfo, graph: str, expected: tuple[Sequence[JSON], Sequence[JSON]]) -> str | None:
    """A binary's graph must take and give what its CPU model does (names, dims, dtypes): else it is another
    graph's binary, or a stale one."""
    if _same(g.inputs, expected[0]) and _same(g.outputs, expected[1]):
        return None
    return (f"its graph for '{graph}' is ({_show(g.inputs)}) -> ({_show(g.outputs)}), but graph '{graph}' is "
            f"({_show(expected[0])}) -> ({_show(expected[1])}): is it another graph's binary?")


def target_problems(info: ContextInfo, soc: socs.Soc) -> list[str]:
    """The SoC and HTP arch the binary says it was compiled for must be its target's (the marker scan's wording)."""
    known = {s.soc_id: s.model for s in socs.catalog()}
    name = known.get(info.soc_model, f"soc_model {info.soc_model}") if info.soc_model is not None else "another SoC"
    if info.dsp_arch and info.dsp_arch != soc.dsp_arch:
        return [f"was compiled for {name} ({info.dsp_arch}), but target {soc.model} is {soc.dsp_arch}"]
    if info.soc_model is not None and info.soc_model != soc.soc_id:
        return [f"was compiled for {name}, but target {soc.model} is {soc.model}: recompile it for this SoC"]
    return []


def runtime_problem(info: ContextInfo, min_runtime: str) -> str | None:
    """The bundle promises that a runtime of `min_runtime` loads its binaries: this binary's blob must agree."""
    need = compat.min_runtime_for_blob(info.context_blob_version)
    if need is None or compat.satisfies(min_runtime, need):
        return None
    return (f"is an HTP context blob {info.context_blob_version}, which needs a QNN runtime of {need} or later, but "
            f"the bundle says {min_runtime} is enough: the app would choose the NPU on a runtime that refuses it")


def resource_warnings(info: ContextInfo, soc: socs.Soc, graph: str) -> list[str]:
    """What will stop a binary loading on its SoC: more VTCM than the chip has. `graph` is the user's name of what
    the binary holds (the compiled graph, or the shared context): the binary's own graph names are internal
    (QNNExecutionProvider_..._1_0). The spill-fill size is no warning: it is the DDR scratch the compiler planned
    (ppocr_det at 640x640 on SM8750: 4.75 MiB at 4 and at 8 MiB of VTCM and with --spill-fill, 25.2 MiB at
    --optimization-mode 3, the fastest), which no option here shrinks; inspect shows it."""
    warnings = []
    for g in info.graphs:
        name = graph if len(info.graphs) == 1 else f"{graph} (graph {g.name})"
        if g.vtcm_bytes and soc.vtcm_mb is not None and g.vtcm_bytes > soc.vtcm_mb << 20:
            warnings.append(f"{name} was compiled for {g.vtcm_bytes / 2**20:g} MiB of VTCM, more than the "
                            f"{soc.vtcm_mb} MiB of {soc.model}: it will not load there (compile --vtcm-mb)")
    return warnings


def summary(info: ContextInfo) -> JSON:
    """What a compile record keeps of a binary's metadata."""
    return {"blob_version": info.context_blob_version, "build": info.build_id, "dsp_arch": info.dsp_arch,
            "soc_model": info.soc_model,
            "graphs": [{"name": g.name, "spill_fill_bytes": g.spill_fill_bytes, "vtcm_bytes": g.vtcm_bytes,
                        "inputs": [{"name": t.name, "dims": list(t.dims), "dtype": t.dtype} for t in g.inputs],
                        "outputs": [{"name": t.name, "dims": list(t.dims), "dtype": t.dtype} for t in g.outputs]}
                       for g in info.graphs]}

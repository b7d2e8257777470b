"""`estimate`: how fast each model would run on the HTP of each SoC, before any phone is at hand: the HTP backend's
own host-side estimate for QCS9100 (qnn/hextimate.py: a compile on this machine, nothing run), scaled per chip by
the factor fitted on AI Hub's published measurements (data/chip_factors.json). A SoC without a factor gets no
number, with the reason; nothing here is measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base import socs
from qnndeploy.base.errors import BadInput
from qnndeploy.base.fileio import sha256_file
from qnndeploy.base.kinds import Precision
from qnndeploy.formats.estimaterecord import (
    NOT_CLAIMED,
    ModelEstimate,
    SocEstimate,
    estimate_graph,
    write_for,
)
from qnndeploy.formats.records import CompileRecord, read_build
from qnndeploy.model.onnxio import load_model
from qnndeploy.qnn import hextimate

if TYPE_CHECKING:
    import onnx

__all__ = ["NOT_CLAIMED", "Estimates", "ModelEstimate", "SocEstimate", "estimate_models", "qdq_precision",
           "targets"]


@dataclass(frozen=True)
class Estimates:
    models: tuple[ModelEstimate, ...]
    not_claimed: str = NOT_CLAIMED
    records: tuple[Path, ...] = ()  # the estimate records written: a build's <graph>/<SoC>/estimate.json


def targets(names: Sequence[str]) -> tuple[socs.Soc, ...]:
    """The SoCs asked for (each once, by the catalog), else every SoC with a chip factor, in the catalog's order."""
    if names:
        found: dict[str, socs.Soc] = {}
        for name in names:
            soc = socs.find(name)
            found.setdefault(soc.model, soc)
        return tuple(found.values())
    factors = hextimate.chip_factors()
    return tuple(s for s in socs.catalog() if s.model in factors)


@dataclass(frozen=True)
class _Job:
    name: str  # the model's path, or a build's graph name
    model: Path
    socs: tuple[socs.Soc, ...]
    precision: str
    build: tuple[CompileRecord, ...] = ()  # a build's graph: its compile records, beside which the records go
    quantized: bool = False  # the model is a QDQ graph already (a model file given so), estimated as it is


def _jobs(paths: Sequence[Path], soc_names: Sequence[str]) -> list[_Job]:
    """A model file is one job for the SoCs asked; a build folder (compile -o) one job per graph, from the source
    ONNX its compile records name, for the SoCs it was compiled for unless --soc names others."""
    asked = targets(soc_names)  # an unknown SoC is refused before any compile
    jobs = []
    for path in map(Path, paths):
        if not path.is_dir():
            precision = qdq_precision(path) if path.is_file() else None
            jobs.append(_Job(str(path), path, asked, precision or Precision.FP16, quantized=precision is not None))
            continue
        graphs: dict[tuple[str, Path, str], list[CompileRecord]] = {}
        for record in read_build(path):
            graphs.setdefault((record.graph, record.source, str(record.precision)), []).append(record)
        for (graph, source, precision), built in graphs.items():
            if not source.is_file():
                raise BadInput(f"{path}: graph {graph} was compiled from {source}, which is not there now: give "
                               "the model itself")
            digest = sha256_file(source)
            if any(r.source_sha256 != digest for r in built):  # a record beside that compile would be of another
                raise BadInput(f"{path}: {source} changed since graph {graph} was compiled: compile again, then "
                               "estimate (or give the model itself)")
            chosen = asked if soc_names else targets(list(dict.fromkeys(r.soc for r in built)))
            jobs.append(_Job(graph, source, chosen, precision, tuple(built)))
    return jobs


WEIGHT_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")


def qdq_precision(model: Path) -> str | None:
    """The precision of a QDQ graph (None: a float graph, estimated at fp16): "w<W>a<A>", W the bits of the weights'
    DequantizeLinear zero points (of Conv, MatMul and Gemm weights), A the bits of the activations' QuantizeLinear
    zero points, as onnxruntime's quantizer writes them (uint16 activations, uint8 weights: w8a16, what compile's
    w8a16 makes)."""
    graph = load_model(model, weights=False).graph
    bits = {2: 8, 3: 8, 4: 16, 5: 16, 21: 4, 22: 4}  # TensorProto: UINT8 INT8 UINT16 INT16 UINT4 INT4
    int32 = 6  # a bias's zero point: not a weight's bits
    dtypes = {t.name: t.data_type for t in graph.initializer}
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type == "Constant" and attr.name == "value":
                dtypes[node.output[0]] = attr.t.data_type

    def zero_point(node: onnx.NodeProto) -> int:  # no zero point: uint8, ONNX's default
        return dtypes.get(node.input[2], 0) if len(node.input) > 2 and node.input[2] else 2

    # a weight: an initializer's DequantizeLinear feeding the weight input of a Conv, MatMul or Gemm (other
    # constants, an Add's operand, take the activations' type)
    weight_inputs = {n.input[1] for n in graph.node if n.op_type in WEIGHT_OPS and len(n.input) > 1}
    weights = {zero_point(n) for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] in dtypes
               and n.output[0] in weight_inputs}
    weights.discard(int32)
    acts = {zero_point(n) for n in graph.node if n.op_type == "QuantizeLinear"}
    if not weights and not acts:
        return None
    w = "/".join(sorted({str(bits.get(d, "?")) for d in weights})) or "?"
    a = "/".join(sorted({str(bits.get(d, "?")) for d in acts})) or "?"
    return f"w{w}a{a}"


def estimate_models(models: Sequence[Path], soc_names: Sequence[str] = (), *,
                    timeout: float | None = hextimate.DEFAULT_TIMEOUT_S) -> Estimates:
    """Each model (or each graph of a build folder) estimated for QCS9100 at its precision, then for each SoC asked
    (default: a build's SoCs, else every SoC with a factor). A build's graph has the precision its compile records
    say (fp16; w8a16: its source quantized as compile quantizes it); a model file is fp16, unless it is a QDQ graph
    (qdq_precision: w8a16, w8a8), estimated as it is. A precision without factors gets no number.
 A build's graph gets a record per SoC it has a job for (formats/estimaterecord.py:
    <graph>/<SoC>/estimate.json beside compile.json); a model file, none."""
    jobs = _jobs(models, soc_names)
    found, written = [], []
    for job in jobs:
        keep = job.build[0].htp.keep_fp16 if job.build and job.build[0].htp else ()
        m = estimate_graph(job.name, job.model, job.socs, job.precision, timeout=timeout, quantized=job.quantized,
                           keep_fp16=keep)
        found.append(m)
        written += write_for(job.build, m, job.precision, "estimate")
    return Estimates(tuple(found), records=tuple(written))

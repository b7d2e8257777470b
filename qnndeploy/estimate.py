"""`estimate`: how fast each model would run on the HTP of each SoC, before any phone is at hand: the HTP backend's
own host-side estimate for QCS9100 (qnn/hextimate.py: a compile on this machine, nothing run), scaled per chip by
the factor fitted on AI Hub's published measurements (data/chip_factors.json). A SoC without a factor gets no
number, with the reason; nothing here is measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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
from qnndeploy.qnn import hextimate

__all__ = ["NOT_CLAIMED", "Estimates", "ModelEstimate", "SocEstimate", "estimate_models", "targets"]


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


def _jobs(paths: Sequence[Path], soc_names: Sequence[str]) -> list[_Job]:
    """A model file is one job for the SoCs asked; a build folder (compile -o) one job per graph, from the source
    ONNX its compile records name, for the SoCs it was compiled for unless --soc names others."""
    asked = targets(soc_names)  # an unknown SoC is refused before any compile
    jobs = []
    for path in map(Path, paths):
        if not path.is_dir():
            jobs.append(_Job(str(path), path, asked, Precision.FP16))
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


def estimate_models(models: Sequence[Path], soc_names: Sequence[str] = (), *,
                    timeout: float | None = hextimate.DEFAULT_TIMEOUT_S) -> Estimates:
    """Each model (or each graph of a build folder) estimated for QCS9100 at fp16, then for each SoC asked
    (default: a build's SoCs, else every SoC with a factor). A graph compiled at another precision gets no number:
    only fp16 has factors. A build's graph gets a record per SoC it has a job for (formats/estimaterecord.py:
    <graph>/<SoC>/estimate.json beside compile.json); a model file, none."""
    jobs = _jobs(models, soc_names)
    found, written = [], []
    for job in jobs:
        m = estimate_graph(job.name, job.model, job.socs, job.precision, timeout=timeout)
        found.append(m)
        written += write_for(job.build, m, job.precision, "estimate")
    return Estimates(tuple(found), records=tuple(written))

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
from qnndeploy.base.kinds import Precision
from qnndeploy.formats.records import read_build
from qnndeploy.qnn import hextimate, htp

# What every estimate leaves out, said wherever one is shown.
NOT_CLAIMED = ("estimated, not measured: the HTP's cost model on the host, at the top clock (burst), no thermal "
               "throttling; no time for ops left to the CPU, for loading, or for per-inference overhead outside "
               "the accelerator (small models run about 0.2 ms slower than estimated)")


@dataclass(frozen=True)
class SocEstimate:
    """One SoC's estimate of one model: ms and its band, or None with `reason`."""

    soc: str
    ms: float | None
    ms_lower: float | None
    ms_upper: float | None
    factor: float | None  # the chip factor applied to the QCS9100 estimate
    fit: str  # the factor's fit in words: models, within 1.5x leave-one-out, AI Hub's device
    reason: str  # why there is no number ("" when there is one)


@dataclass(frozen=True)
class ModelEstimate:
    model: str
    qairt: str
    reference: hextimate.Estimate  # the backend's estimate for QCS9100, which every phone's is scaled from
    socs: tuple[SocEstimate, ...]
    warnings: tuple[str, ...]
    source: str  # where the factors come from (data/chip_factors.json's provenance)


@dataclass(frozen=True)
class Estimates:
    models: tuple[ModelEstimate, ...]
    not_claimed: str = NOT_CLAIMED


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


def _for_soc(reference: hextimate.Figures, soc: socs.Soc) -> SocEstimate:
    phone = hextimate.phone_estimate(reference, soc)
    if phone is not None:
        f = phone.factor
        fit = (f"{f.models} models, {f.within:.0%} within {hextimate.WITHIN:g}x leave-one-out (worst "
               f"{f.loo_worst:.2f}), Spearman {f.spearman:.3f}, AI Hub's {f.device}")
        return SocEstimate(soc.model, phone.ms, phone.ms_lower, phone.ms_upper, f.factor, fit, "")
    if reference.ms is None:
        return SocEstimate(soc.model, None, None, None, None, "", reference.clock_source)
    return SocEstimate(soc.model, None, None, None, None, "",
                       f"no chip factor for {soc.model} ({hextimate.FACTORS}: no fp16 measurement of AI Hub's was "
                       "fitted for it): no number")


def _modelled(model: Path, soc: socs.Soc, timeout: float | None) -> SocEstimate:
    """A SoC the backend models itself (SA8255) with no factor: its own estimate, unscaled."""
    est = hextimate.estimate(model, soc, fp16=True, timeout=timeout)
    f = est.figures
    if f is None or f.ms is None:
        return SocEstimate(soc.model, None, None, None, None, "", est.reason or (f.clock_source if f else ""))
    return SocEstimate(soc.model, f.ms, f.ms_lower, f.ms_upper, None,
                       "the HTP backend's own model of this SoC, no factor", "")


@dataclass(frozen=True)
class _Job:
    name: str  # the model's path, or a build's graph name
    model: Path
    socs: tuple[socs.Soc, ...]
    precision: str


def _jobs(paths: Sequence[Path], soc_names: Sequence[str]) -> list[_Job]:
    """A model file is one job for the SoCs asked; a build folder (compile -o) one job per graph, from the source
    ONNX its compile records name, for the SoCs it was compiled for unless --soc names others."""
    asked = targets(soc_names)  # an unknown SoC is refused before any compile
    jobs = []
    for path in map(Path, paths):
        if not path.is_dir():
            jobs.append(_Job(str(path), path, asked, Precision.FP16))
            continue
        graphs: dict[tuple[str, Path, str], list[str]] = {}
        for record in read_build(path):
            graphs.setdefault((record.graph, record.source, str(record.precision)), []).append(record.soc)
        for (graph, source, precision), built in graphs.items():
            if not source.is_file():
                raise BadInput(f"{path}: graph {graph} was compiled from {source}, which is not there now: give "
                               "the model itself")
            jobs.append(_Job(graph, source, asked if soc_names else targets(list(dict.fromkeys(built))), precision))
    return jobs


def estimate_models(models: Sequence[Path], soc_names: Sequence[str] = (), *,
                    timeout: float | None = hextimate.DEFAULT_TIMEOUT_S) -> Estimates:
    """Each model (or each graph of a build folder) estimated for QCS9100 at fp16, then for each SoC asked
    (default: a build's SoCs, else every SoC with a factor). A graph compiled at another precision gets no number:
    only fp16 has factors."""
    jobs = _jobs(models, soc_names)
    reference_soc = socs.find(hextimate.CALIBRATED_ON)
    factors = hextimate.chip_factors()
    source = next(iter(factors.values())).source if factors else f"no factors in {hextimate.FACTORS}"
    found = []
    for job in jobs:
        model, chosen = job.model, job.socs
        if job.precision != Precision.FP16:
            why = f"compiled {job.precision}: only fp16 has chip factors ({hextimate.FACTORS}), no number"
            est = hextimate.Estimate(str(model), reference_soc.model, htp.qairt_version(), None, why, 0, 0.0)
            found.append(ModelEstimate(job.name, est.qairt, est,
                                       tuple(SocEstimate(s.model, None, None, None, None, "", why) for s in chosen),
                                       (), source))
            continue
        est = hextimate.estimate(Path(model), reference_soc, fp16=True, timeout=timeout)
        warnings = []
        rows: tuple[SocEstimate, ...]
        if est.figures is None:
            rows = tuple(SocEstimate(s.model, None, None, None, None, "", est.reason) for s in chosen)
        else:
            rows = tuple(_modelled(Path(model), s, timeout) if s.model in hextimate.MODELLED
                         and s.model not in factors else _for_soc(est.figures, s) for s in chosen)
            if est.figures.ops_without_cost:
                warnings.append(f"{est.figures.ops_without_cost} ops have no cost in the HTP's model: each counts "
                                "as nothing, so every estimate of this model is low by them")
        found.append(ModelEstimate(job.name, est.qairt, est, rows, tuple(warnings), source))
    return Estimates(tuple(found))

"""The estimate record (<graph>/<SoC>/estimate.json beside the job's compile.json, schemas/estimate-record.schema.json):
one graph's estimated time on one SoC, which `estimate BUILD` and `validate --estimate` write and `report` reads.
Below the three rooms, the one definition of: the estimate of one graph for its SoCs (the QCS9100 Hextimate estimate
scaled by qnn/hextimate.py's chip factors), the record made of it, its file name, writer and one lenient reader.
Nothing in it is measured (NOT_CLAIMED, in every record), and no gate reads it: `device bench --baseline` takes
bench records only."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from qnndeploy import __version__
from qnndeploy.base import socs
from qnndeploy.base.errors import BadInput, CheckFailed, MissingTool, QnnDeployError, first_line
from qnndeploy.base.fields import integer, number, opt_text, text, texts
from qnndeploy.base.fileio import JSON, write_json
from qnndeploy.base.kinds import Precision
from qnndeploy.formats import schemas
from qnndeploy.formats.records import CompileRecord, RecordStatus
from qnndeploy.model import quantize, samples
from qnndeploy.qnn import hextimate, htp

RECORD = "qnndeploy-estimate"
RECORD_VERSION = 1
RECORD_FILE = "estimate.json"
# What every estimate leaves out, said wherever one is shown (the command, the record, the report page).
NOT_CLAIMED = ("estimated, not measured: the HTP's cost model on the host, at the top clock (burst), no thermal "
               "throttling; no time for ops left to the CPU, for loading, or for per-inference overhead outside "
               "the accelerator (small models run about 0.2 ms slower than estimated)")


# --- the estimate of one graph ----------------------------------------------------------------------------------

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
    own: hextimate.Figures | None = None  # a SoC the backend models itself (SA8255): its own figures, unscaled


@dataclass(frozen=True)
class ModelEstimate:
    model: str
    qairt: str
    reference: hextimate.Estimate  # the backend's estimate for QCS9100, which every phone's is scaled from
    socs: tuple[SocEstimate, ...]
    warnings: tuple[str, ...]
    source: str  # where the factors come from (data/chip_factors.json's provenance)
    precision: str = Precision.FP16  # the precision estimated, whose factors scale it (fp16, w8a16, w8a8)


def factors_source(precision: str = Precision.FP16) -> str:
    factors = hextimate.chip_factors(precision)
    return next(iter(factors.values())).source if factors else f"no {precision} factors in {hextimate.FACTORS}"


def _for_soc(reference: hextimate.Figures, soc: socs.Soc, precision: str) -> SocEstimate:
    phone = hextimate.phone_estimate(reference, soc, precision=precision)
    if phone is not None:
        return SocEstimate(soc.model, phone.ms, phone.ms_lower, phone.ms_upper, phone.factor.factor,
                           phone.factor.fit_in_words(), "")
    if reference.ms is None:
        return SocEstimate(soc.model, None, None, None, None, "", reference.clock_source)
    poor = hextimate.chip_factors(precision).get(soc.model)
    if poor is not None:  # a factor whose fit is too poor to give numbers: the fit, said plainly
        return SocEstimate(soc.model, None, None, None, None, "",
                           f"{poor.fit_in_words()}: too poor a fit for a number (it needs {hextimate.TARGET:.0%} of "
                           f"at least {hextimate.MIN_MODELS} models within {hextimate.WITHIN:g}x): no number")
    return SocEstimate(soc.model, None, None, None, None, "",
                       f"no chip factor for {soc.model} at {precision} ({hextimate.FACTORS}: no {precision} "
                       "measurement of AI Hub's was fitted for it): no number")


def _modelled(model: Path, soc: socs.Soc, precision: str, timeout: float | None) -> SocEstimate:
    """A SoC the backend models itself (SA8255) with no factor: its own estimate, unscaled."""
    est = hextimate.estimate(model, soc, fp16=precision == Precision.FP16, timeout=timeout)
    f = est.figures
    if f is None or f.ms is None:
        return SocEstimate(soc.model, None, None, None, None, "", est.reason or (f.clock_source if f else ""))
    return SocEstimate(soc.model, f.ms, f.ms_lower, f.ms_upper, None,
                       "the HTP backend's own model of this SoC, no factor", "", f)


def none_for(name: str, model: Path, chosen: Sequence[socs.Soc], why: str,
             precision: str = Precision.FP16) -> ModelEstimate:
    """No number for any SoC of this graph, and why (a precision without factors, an estimate that failed)."""
    est = hextimate.Estimate(str(model), hextimate.CALIBRATED_ON, htp.qairt_version(), None, why, 0, 0.0)
    return ModelEstimate(name, est.qairt, est, tuple(SocEstimate(s.model, None, None, None, None, "", why)
                                                     for s in chosen), (), factors_source(precision), precision)


def _quantized(model: Path, out: Path, keep_fp16: Sequence[str]) -> Path:
    """A float graph as the QDQ graph compile's w8a16 makes of it (model/quantize.py), calibrated on two seeded
    random samples: the graph the HTP times is the same whatever the ranges (latency does not depend on values)."""
    found, _ = samples.for_graph(model, "estimate", count=2)
    return quantize.qdq(model, found, out, keep_fp16)


def estimate_graph(name: str, model: Path, chosen: Sequence[socs.Soc], precision: str = Precision.FP16, *,
                   timeout: float | None = hextimate.DEFAULT_TIMEOUT_S, quantized: bool = False,
                   keep_fp16: Sequence[str] = ()) -> ModelEstimate:
    """One model estimated for QCS9100 at `precision` (one compile here), then for each SoC of `chosen`: scaled by
    its chip factor for that precision, SA8255 (modelled, no factor) by its own compile, no number for a SoC
    without a factor. fp16: the float graph with fp16 on. w8a16: the QDQ graph, fp16 off (on when `keep_fp16`
    leaves nodes in float, as compile does); a float `model` is first quantized as compile's w8a16 quantizes it
    (`quantized`: `model` is QDQ already, a w8a16 or w8a8 graph). A precision with no factors gets no number.
    Raises what hextimate.estimate raises."""
    if precision not in hextimate.calibrated():
        return none_for(name, model, chosen, f"{precision}: no chip factors for this precision "
                                             f"({hextimate.FACTORS}), no number", precision)
    if precision == Precision.FP16 or quantized:
        return _estimated(name, Path(model), chosen, precision, precision == Precision.FP16, timeout)
    with tempfile.TemporaryDirectory(prefix="qnndeploy-estimate-") as tmp:
        try:
            qdq = _quantized(Path(model), Path(tmp) / "qdq.onnx", keep_fp16)
        except Exception as e:  # onnxruntime's quantizer raises its own types
            raise CheckFailed(f"{model}: quantizing it to {precision} for the estimate failed: {first_line(e)}") from e
        m = _estimated(name, qdq, chosen, precision, bool(keep_fp16), timeout)
    return replace(m, reference=replace(m.reference, model=str(model)))


def _estimated(name: str, model: Path, chosen: Sequence[socs.Soc], precision: str, fp16: bool,
               timeout: float | None) -> ModelEstimate:
    factors = hextimate.chip_factors(precision)
    est = hextimate.estimate(model, socs.find(hextimate.CALIBRATED_ON), fp16=fp16, timeout=timeout)
    warnings = []
    rows: tuple[SocEstimate, ...]
    if est.figures is None:
        rows = tuple(SocEstimate(s.model, None, None, None, None, "", est.reason) for s in chosen)
    else:
        rows = tuple(_modelled(model, s, precision, timeout) if s.model in hextimate.MODELLED
                     and s.model not in factors else _for_soc(est.figures, s, precision) for s in chosen)
        if est.figures.ops_without_cost:
            warnings.append(f"{est.figures.ops_without_cost} ops have no cost in the HTP's model: each counts "
                            "as nothing, so every estimate of this model is low by them")
    return ModelEstimate(name, est.qairt, est, rows, tuple(warnings), factors_source(precision), precision)


def estimate_or_why(name: str, model: Path, chosen: Sequence[socs.Soc], precision: str, *,
                    timeout: float | None = hextimate.DEFAULT_TIMEOUT_S) -> ModelEstimate:
    """estimate_graph, where a graph that cannot be estimated (the HTP does not take it whole, a compile that
    fails, its source gone) is no number with the reason, not an error: what a command that estimates on the side
    (validate --estimate) needs. A missing tool (no onnxruntime-qnn) is still raised: it is this
    machine's, not the graph's, and no record should keep it."""
    if not Path(model).is_file():
        return none_for(name, model, chosen, f"its source {model} is not there now", precision)
    try:
        return estimate_graph(name, model, chosen, precision, timeout=timeout)
    except MissingTool:
        raise
    except QnnDeployError as e:
        return none_for(name, model, chosen, str(e), precision)


# --- the record --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CostModel:
    """Where the estimate comes from: the HTP backend's cost model for `soc` (QCS9100, the SoC the factors scale;
    SA8255 for its own), its QAIRT and simulated clock, and the figures it gave (None: it gave none)."""

    soc: str
    qairt: str
    clock_mhz: float | None
    clock_source: str | None
    cycles: int | None
    cycles_lower: int | None
    cycles_upper: int | None
    ms: float | None  # the cycles at the clock, unscaled
    ms_lower: float | None
    ms_upper: float | None


@dataclass(frozen=True)
class EstimateRecord:
    """One graph x SoC's estimate, as the record holds it (schemas/estimate-record.schema.json), in its order."""

    record: str
    version: int
    graph: str
    soc: str
    precision: str
    source: str  # the ONNX estimated (the compile record's source)
    source_sha256: str | None  # its bytes, as the compile record names them (None: a model given alone)
    ms: float | None  # None: no number, `reason` says why
    ms_lower: float | None
    ms_upper: float | None
    reason: str | None
    factor: float | None  # the chip factor applied (None: SA8255's own, or no number)
    fit: str | None  # the factor's fit in words
    cost_model: CostModel
    fill_bytes: int | None
    spill_bytes: int | None
    ops_without_cost: int | None
    warnings: tuple[str, ...]
    factors: str  # where the factors come from (data/chip_factors.json's provenance)
    not_claimed: str
    made_by: str  # the command that wrote it: "estimate" or "validate --estimate"
    qnndeploy: str
    created: str

    def to_json(self) -> JSON:
        data = asdict(self)
        data["warnings"] = list(self.warnings)
        return data


def record_file(record: CompileRecord) -> Path:
    """estimate.json in the job's folder, or estimate-<graph>.json in a shared context's (one per member), as
    validation.json is named."""
    return record.folder / (f"estimate-{record.graph}.json" if record.shared else RECORD_FILE)


def make(m: ModelEstimate, row: SocEstimate, precision: str, made_by: str, created: str | None = None,
         source_sha256: str | None = None) -> EstimateRecord:
    """The record of one SoC's row of a graph's estimate (of the model with these bytes, the compile's)."""
    figures = row.own or m.reference.figures
    cost_soc = row.soc if row.own is not None else m.reference.soc
    cost = CostModel(cost_soc, m.qairt, figures.clock_mhz if figures else None,
                     figures.clock_source if figures else None, figures.cycles if figures else None,
                     figures.lower if figures else None, figures.upper if figures else None,
                     figures.ms if figures else None, figures.ms_lower if figures else None,
                     figures.ms_upper if figures else None)
    return EstimateRecord(
        RECORD, RECORD_VERSION, m.model, row.soc, str(precision), m.reference.model, source_sha256, row.ms,
        row.ms_lower,
        row.ms_upper, None if row.ms is not None else (row.reason or "no number"), row.factor, row.fit or None,
        cost, figures.fill_bytes if figures else None, figures.spill_bytes if figures else None,
        figures.ops_without_cost if figures else None, m.warnings, m.source, NOT_CLAIMED, made_by, __version__,
        created or datetime.now(UTC).isoformat(timespec="seconds"))


def write(path: Path, record: EstimateRecord) -> None:
    """Strict JSON, whole or not at all (fileio.write_json)."""
    write_json(path, record.to_json())


def write_for(build: Sequence[CompileRecord], m: ModelEstimate, precision: str, made_by: str) -> list[Path]:
    """The records of a graph's estimate, one per SoC row the build has a compiled job of that graph for (none
    beside a failed compile: the HTP may not take the graph for that SoC)."""
    jobs = {r.soc: r for r in build if r.graph == m.model and r.status == RecordStatus.OK}
    created = datetime.now(UTC).isoformat(timespec="seconds")
    written = []
    for row in m.socs:
        job = jobs.get(row.soc)
        if job is None:
            continue
        path = record_file(job)
        write(path, make(m, row, precision, made_by, created, job.source_sha256))
        written.append(path)
    return written


# --- the reader --------------------------------------------------------------------------------------------------

def parse(data: object) -> EstimateRecord:
    """An estimate record as this qnndeploy writes it (strict): every rule of schemas/estimate-record.schema.json, then
    read. BadInput naming the first field the schema refuses; `read` is the lenient reader of old or broken records
    (the report)."""
    problems = schemas.problems("estimate-record", data)
    if problems:
        raise BadInput(f"not a valid estimate record: {problems[0]}")
    return read(data)


def read(data: object) -> EstimateRecord:
    """An estimate record as read from its JSON, of any version: a figure that is missing or not a number is None
    (no number); the words it lacks are empty. BadInput when it is not an estimate record or lacks what names it
    (the graph, the SoC); the message says which. The not-claimed sentence is always this qnndeploy's."""
    if not isinstance(data, Mapping) or data.get("record") != RECORD:
        raise BadInput(f'not an estimate record (no "record": "{RECORD}")')
    graph, soc = text(data, "graph"), text(data, "soc")
    c = data.get("cost_model")
    c = c if isinstance(c, Mapping) else {}
    ms = number(data, "ms")
    cost = CostModel(opt_text(c, "soc") or "", opt_text(c, "qairt") or "", number(c, "clock_mhz"),
                     opt_text(c, "clock_source"), integer(c, "cycles"), integer(c, "cycles_lower"),
                     integer(c, "cycles_upper"), number(c, "ms"), number(c, "ms_lower"), number(c, "ms_upper"))
    return EstimateRecord(
        RECORD, integer(data, "version") or 0, graph, soc, opt_text(data, "precision") or "",
        opt_text(data, "source") or "", opt_text(data, "source_sha256"), ms,
        number(data, "ms_lower") if ms is not None else None, number(data, "ms_upper") if ms is not None else None,
        None if ms is not None else (opt_text(data, "reason") or "no number"), number(data, "factor"),
        opt_text(data, "fit"), cost, integer(data, "fill_bytes"), integer(data, "spill_bytes"),
        integer(data, "ops_without_cost"),
        tuple(texts(data, "warnings")), opt_text(data, "factors") or "",
        NOT_CLAIMED, opt_text(data, "made_by") or "", opt_text(data, "qnndeploy") or "",
        opt_text(data, "created") or "")

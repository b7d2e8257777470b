"""The HTP backend's own host-side performance model (Hextimate): a graph's estimated accelerator cycles, read at
compile time on this machine, with nothing run.

The wheel's libQnnHtp.so estimates a graph when it finalizes it with QNN profiling on, and writes a "Performance
Estimates" profiling event: simulated cycles with a lower and an upper bound, the bytes filled into and spilled out
of its memory, and the ops it has no cost for. So the compile is the QNN EP's own, with its profiling_level and
profiling_file_path options (measured with QAIRT 2.47.0-2.51.0: its verbose log shows the graph option "hextimate
= 1" set by the backend itself; a forwarding backend library that added the HTP finalize config "hextimate" changed
no figure, with the key renamed or the value 0 either, so it is not needed). The backend estimates for QCS9100 and
SA8255 (v73) only; for another SoC it says why not, and the estimate is None with that reason.

What the number is not: a measurement; a time for any op left to the CPU (the compile allows no CPU fallback); load
or first-run time; anything but the HTP's top clock (burst), with no throttling.

A phone SoC gets its estimate from the QCS9100 one scaled by the chip's factor (phone_estimate): data/chip_factors.json,
fitted by benchmarks/estimate_vs_aihub.py on AI Hub's published measurements (fit, below), one set per precision
(fp16; w8a16 and w8a8 on QDQ graphs); a SoC or precision with no factor gets no number.
"""

from __future__ import annotations

import csv
import json
import math
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from qnndeploy.base import child, socs
from qnndeploy.base.errors import BadInput, CheckFailed, first_line
from qnndeploy.qnn import htp

DEFAULT_TIMEOUT_S = 600.0
EVENT = "Performance Estimates"
# The backend's own words when it has no model for the SoC (a string in libQnnHtp.so, logged at graph finalize).
UNSUPPORTED = re.compile(r"(Performance Estimates unsupported on soc \S+)")
CPU_LEFT = "fallback to CPU EP has been explicitly disabled"  # onnxruntime's words for a graph the EP left nodes of


@dataclass(frozen=True)
class Figures:
    """One graph's estimate, as the backend wrote it, and the time it means at the simulated clock."""

    cycles: int  # simulated accelerator execution cycles
    lower: int  # the backend's lower and upper estimates
    upper: int
    fill_bytes: int  # read into the HTP's memory: inputs (weights included), intermediates, from another HTP
    spill_bytes: int  # written out of it: outputs, intermediates, to another HTP
    ops_without_cost: int  # ops the model has no cost for: each adds nothing, so the estimate is low by them
    backend_us: int | None  # the backend's own time for `cycles`, whole microseconds (QAIRT 2.50 on; None before)
    clock_mhz: float | None  # the simulated clock (data/hextimate.json); None where no row covers this QAIRT
    clock_source: str
    ms: float | None  # cycles at the clock: the estimated accelerator time, burst, nothing measured
    ms_lower: float | None
    ms_upper: float | None


@dataclass(frozen=True)
class Estimate:
    """The estimate of one model for one SoC: `figures` None when the backend gave none, and `reason` says why."""

    model: str
    soc: str
    qairt: str
    figures: Figures | None
    reason: str
    graphs: int  # HTP graphs estimated (one: the compile allows no CPU fallback, so no split)
    seconds: float  # the compile's wall time


def clock(qairt: str, soc: str) -> tuple[float | None, str]:
    """The simulated clock of data/hextimate.json for this QAIRT release and SoC, and where it comes from."""
    rows = json.loads(resources.files("qnndeploy").joinpath("data/hextimate.json").read_text(encoding="utf-8"))
    for row in rows["clock"]:
        if row["qairt"] == qairt and soc in row["socs"]:
            return float(row["mhz"]), f"data/hextimate.json: {row['measured']}"
    return None, f"no simulated clock is known for QAIRT {qairt} on {soc} (data/hextimate.json)"


def parse(csv_text: str) -> list[dict[str, int]]:
    """The "Performance Estimates" events of an EP profiling CSV, one {sub-event name: value} per graph.

    The CSV's columns: Msg Timestamp, Message, Time, Unit of Measurement, Timing Source, Event Level, Event
    Identifier; an event is a ROOT row followed by its SUB-EVENT rows."""
    events: list[dict[str, int]] = []
    current: dict[str, int] | None = None
    for row in csv.reader(csv_text.splitlines()):
        if len(row) < 7:
            continue
        level, name = row[5].strip(), row[6].strip()
        if level == "ROOT":
            current = {} if name == EVENT else None
            if current is not None:
                events.append(current)
        elif level == "SUB-EVENT" and current is not None:
            try:
                current[name] = int(row[2])
            except ValueError:
                continue
    return events


def figures(event: dict[str, int], qairt: str, soc: str) -> Figures:
    """One event's numbers, and their times at the simulated clock."""
    def get(name: str) -> int:
        if name not in event:
            raise CheckFailed(f"the backend's {EVENT} event has no '{name}' (QAIRT {qairt}): its format changed")
        return event[name]

    sim = "Simulated (Accelerator exec cycles{})"
    cycles, lower, upper = get(sim.format("")), get(sim.format(" (lower estimate)")), get(
        sim.format(" (upper estimate)"))
    mhz, where = clock(qairt, soc)

    def ms(c: int) -> float | None:
        return None if mhz is None else round(c / mhz / 1000, 6)

    return Figures(
        cycles=cycles, lower=lower, upper=upper,
        fill_bytes=get("Input Fill") + get("Intermediate Fill") + get("Inter HTP Fill"),
        spill_bytes=get("Output Spill") + get("Intermediate Spill") + get("Inter HTP Spill"),
        ops_without_cost=get("Missing Ops (Number of Ops with no Costs associated)"),
        backend_us=event.get("Simulated (Accelerator exec time us)"),
        clock_mhz=mhz, clock_source=where, ms=ms(cycles), ms_lower=ms(lower), ms_upper=ms(upper))


def estimate(model: Path, soc: socs.Soc, *, fp16: bool = True, timeout: float | None = DEFAULT_TIMEOUT_S) -> Estimate:
    """Compile `model` for `soc` with QNN profiling on and read the HTP backend's estimate. The compile runs in a child
    process (a native crash or a hang ends the child, not this process); a graph the HTP does not take whole is an
    error (CheckFailed), since an estimate would leave its CPU ops out."""
    if not model.is_file():
        raise BadInput(f"{model}: no such ONNX file")
    qairt = htp.qairt_version()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="qnndeploy-hextimate-") as tmp:
        csv_path = Path(tmp) / "profile.csv"
        _compile(model, soc, fp16, csv_path, verbose=False, timeout=timeout)
        events = parse(csv_path.read_text(errors="replace")) if csv_path.is_file() else []
    if not events:
        reason = _why_none(soc, fp16, timeout)
        return Estimate(str(model), soc.model, qairt, None, reason, 0, round(time.monotonic() - start, 2))
    every = [figures(e, qairt, soc.model) for e in events]
    one = every[0] if len(every) == 1 else _summed(every)
    return Estimate(str(model), soc.model, qairt, one, "", len(every), round(time.monotonic() - start, 2))


def _summed(every: list[Figures]) -> Figures:
    """Graphs that run one after another: their cycles, bytes and missing ops add up."""
    first = every[0]

    def total(attr: str) -> int:
        return sum(int(getattr(f, attr)) for f in every)

    def total_ms(attr: str) -> float | None:
        values = [getattr(f, attr) for f in every]
        return None if None in values else round(sum(values), 6)

    us = [f.backend_us for f in every]
    return Figures(total("cycles"), total("lower"), total("upper"), total("fill_bytes"), total("spill_bytes"),
                   total("ops_without_cost"), None if None in us else sum(u for u in us if u is not None),
                   first.clock_mhz, first.clock_source,
                   total_ms("ms"), total_ms("ms_lower"), total_ms("ms_upper"))


@cache
def _why_none(soc: socs.Soc, fp16: bool, timeout: float | None) -> str:
    """The backend's reason for writing no estimate: a lone Relu compiled with its log at the verbose level (QNN's
    warnings reach ONNX Runtime's log only there), and its "unsupported on soc" line, else what is known."""
    import onnx

    probe = htp.relu_probe()
    with tempfile.TemporaryDirectory(prefix="qnndeploy-hextimate-probe-") as tmp:
        path = Path(tmp) / "relu.onnx"
        onnx.save(probe, path)
        csv_path = Path(tmp) / "profile.csv"
        log = _compile(path, soc, fp16, csv_path, verbose=True, timeout=timeout)
        found = UNSUPPORTED.search(log)
        if found:
            return f"the HTP backend says: {found.group(1)}"
        if csv_path.is_file() and parse(csv_path.read_text(errors="replace")):
            return (f"the HTP backend estimates a lone Relu for {soc.model} but wrote no {EVENT} event for this "
                    "graph")
    return f"the HTP backend wrote no {EVENT} event for {soc.model} and said nothing about it"


def _compile(model: Path, soc: socs.Soc, fp16: bool, csv_path: Path, *, verbose: bool,
             timeout: float | None) -> str:
    """The child (main below) compiles; its log is returned. A failed compile is CheckFailed with its last line."""
    log_path = csv_path.with_suffix(".log")
    args = [str(model), soc.model, "fp16" if fp16 else "int", str(csv_path), "verbose" if verbose else "quiet"]
    with log_path.open("wb") as err:
        proc = subprocess.Popen(child.module("qnn.hextimate", *args), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, env=child.environ(), start_new_session=True)
    code = child.wait(proc, timeout)
    log = log_path.read_text(errors="replace")
    if code is None:
        raise CheckFailed(f"the HTP compile with Hextimate did not finish within {timeout:g} s")
    if code < 0:
        raise CheckFailed(f"the HTP compile with Hextimate crashed ({signal.Signals(-code).name})")
    if code != 0:
        said = [line.strip() for line in log.splitlines() if line.strip()]
        last = said[-1] if said else f"exit {code}"
        if CPU_LEFT in last:
            raise CheckFailed(f"the HTP does not take the whole graph for {soc.model}, and an estimate would leave "
                              f"the CPU's part out: `qnndeploy check {model} --soc {soc.model}` names the nodes")
        raise CheckFailed(f"the HTP compile with Hextimate failed: {last}")
    return log


def main(argv: list[str]) -> int:
    """The child of _compile: MODEL SOC fp16|int CSV verbose|quiet. Compiles MODEL for SOC with QNN profiling
    written to CSV (CPU fallback off: a node the HTP refuses fails the compile). A failure is its
    one line on stderr, exit 1. `verbose` sets ONNX Runtime's default and session loggers to verbose: QNN's log
    reaches them only there."""
    import onnxruntime as ort

    model, soc_name, precision, csv_path, level = argv
    if level == "verbose":
        ort.set_default_logger_severity(0)
    provider = {"profiling_level": "detailed", "profiling_file_path": csv_path}
    try:
        with htp.quiet_native_stdout():
            options = htp.session_options(socs.find(soc_name), fp16=precision == "fp16", provider=provider,
                                          log_level=0 if level == "verbose" else 3)
            ort.InferenceSession(model, options)
    except Exception as e:  # noqa: BLE001 onnxruntime raises its own, unexported exception types
        print(first_line(e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# --- from the QCS9100 estimate to a phone's: one factor per chip ----------------------------------------------------

FACTORS = "data/chip_factors.json"
MODELLED = ("QCS9100", "SA8255")  # the SoCs the backend estimates; for every other it says "unsupported"
CALIBRATED_ON = "QCS9100"  # the SoC whose estimates the factors scale (SA8255's model is the same)
WITHIN = 1.5  # the fit's tolerance: a model is "within" when measured and predicted differ by at most this factor
# A factor gives numbers only when its fit shows it works: at least TARGET of at least MIN_MODELS models within
# WITHIN, leave-one-out (issue 36's target). Below it (w8a8's and w8a16's fits so far: the quantized estimates do not
# even rank AI Hub's models right) the factor stays in the data and its fit is said, with no number.
TARGET = 0.9
MIN_MODELS = 5  # with fewer, each model left out is judged on a factor of three others or less


@dataclass(frozen=True)
class ChipFactor:
    """One chip's factor from data/chip_factors.json: measured / estimate, fitted on AI Hub's measurements."""

    soc: str
    factor: float  # phone ms = QCS9100 estimate ms x factor
    models: int  # models the fit used
    loo_median: float  # leave-one-out measured / predicted: the median over the models
    loo_worst: float  # and the one farthest from 1
    within: float  # the fraction of models within WITHIN, leave-one-out
    spearman: float  # rank correlation of the estimates with the measured times
    device: str  # AI Hub's device the measurements come from
    runtime: str  # AI Hub's runtime fitted on (onnx: ONNX Runtime's QNN EP)
    precision: str  # the precision fitted: fp16, w8a16 or w8a8 (each has factors of its own)
    source: str  # the qai-hub-models release, the QAIRT of the estimates, the fit date

    @property
    def calibrated(self) -> bool:
        """Whether the fit is good enough to give numbers (TARGET of at least MIN_MODELS models within WITHIN)."""
        return self.models >= MIN_MODELS and self.within >= TARGET

    def fit_in_words(self) -> str:
        return (f"{self.precision} factor: {self.models} models, {self.within:.0%} within {WITHIN:g}x leave-one-out "
                f"(worst {self.loo_worst:.2f}), Spearman {self.spearman:.3f}, AI Hub's {self.device}")


@dataclass(frozen=True)
class PhoneEstimate:
    """A phone SoC's estimated time: the QCS9100 estimate scaled by the chip's factor, nothing measured."""

    soc: str
    ms: float
    ms_lower: float  # the backend's lower and upper estimates, scaled by the same factor
    ms_upper: float
    qcs9100_ms: float  # the estimate scaled
    factor: ChipFactor


@dataclass(frozen=True)
class FactorFit:
    """A factor fitted on (model, measured ms, estimate ms) rows: the geometric mean of measured / estimate, and
    per model the leave-one-out ratio measured / (estimate x the factor fitted without that model)."""

    factor: float
    loo: dict[str, float]  # model -> measured / predicted, leave-one-out
    within: float  # the fraction of `loo` within WITHIN
    spearman: float  # of the measured times against the estimates

    @property
    def loo_median(self) -> float:
        return statistics.median(self.loo.values())

    @property
    def loo_worst(self) -> float:
        return max(self.loo.values(), key=lambda r: max(r, 1 / r))


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _ranks(values: Sequence[float]) -> list[float]:
    """Ranks from 1, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson's on the ranks (NaN with fewer than two values or a constant side)."""
    if len(a) != len(b) or len(a) < 2:
        return math.nan
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return num / den if den else math.nan


def fit(rows: Sequence[tuple[str, float, float]]) -> FactorFit:
    """The factor of one chip from (model, measured ms, estimate ms) rows, at least two."""
    if len(rows) < 2:
        raise ValueError("a factor needs at least two models, one to leave out")
    ratios = {model: measured / est for model, measured, est in rows}
    loo = {}
    for model, _, _ in rows:
        rest = [r for m, r in ratios.items() if m != model]
        loo[model] = ratios[model] / _geomean(rest)
    within = sum(1 for r in loo.values() if max(r, 1 / r) <= WITHIN) / len(loo)
    return FactorFit(_geomean(list(ratios.values())), loo, within,
                     spearman([m for _, m, _ in rows], [e for _, _, e in rows]))


@cache
def _factors_json() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(resources.files("qnndeploy").joinpath(FACTORS).read_text(encoding="utf-8"))
    return loaded


def calibrated() -> tuple[str, ...]:
    """The precisions data/chip_factors.json has factors for: fp16, then the quantized ones it holds."""
    return ("fp16", *(p for p, entry in (_factors_json().get("quantized") or {}).items() if entry.get("factors")))


def chip_factors(precision: str = "fp16") -> dict[str, ChipFactor]:
    """data/chip_factors.json's factors for one precision, by catalog SoC; none for a precision not calibrated."""
    data = _factors_json()
    entry: dict[str, Any] = data if precision == "fp16" else (data.get("quantized") or {}).get(precision) or {}
    if not entry.get("factors"):
        return {}
    fitted = entry["fitted"]
    source = (f"{precision}: fitted {fitted} on {data['source']['wheel']} ({data['source']['files']}), estimates of "
              f"QAIRT {data['estimates']['qairt']} ({FACTORS})")
    runtime = entry["source"]["runtime"]
    return {row["soc"]: ChipFactor(row["soc"], float(row["factor"]), int(row["models"]), float(row["loo_median"]),
                                   float(row["loo_worst"]), float(row["within"]), float(row["spearman"]),
                                   row["device"], runtime, precision, source)
            for row in entry["factors"]}


def phone_estimate(qcs9100: Figures, soc: socs.Soc | str, *, precision: str = "fp16") -> PhoneEstimate | None:
    """The estimate for `soc` from a QCS9100 (or SA8255) estimate of a graph at `precision` (fp16, w8a16, w8a8: the
    QCS9100 figures must be of that precision's graph): its times scaled by the chip's factor for that precision.
    None when the chip has no factor for it, its factor's fit is too poor to give numbers (ChipFactor.calibrated),
    or the figures have no time (no clock known for their QAIRT)."""
    name = soc.model if isinstance(soc, socs.Soc) else soc
    factor = chip_factors(precision).get(name)
    if factor is None or not factor.calibrated or None in (qcs9100.ms, qcs9100.ms_lower, qcs9100.ms_upper):
        return None
    assert qcs9100.ms is not None and qcs9100.ms_lower is not None and qcs9100.ms_upper is not None
    f = factor.factor
    return PhoneEstimate(name, round(qcs9100.ms * f, 6), round(qcs9100.ms_lower * f, 6),
                         round(qcs9100.ms_upper * f, 6), qcs9100.ms, factor)

"""The bench record (bench-<serial>-<graph>.json, schemas/bench-record.schema.json): the one definition of its types
that `device bench` writes and `report` reads, below both rooms, with its file name, the gate between two records,
and one lenient reader."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from qnndeploy.base.errors import BadInput
from qnndeploy.base.fields import flag, integer, number, numbers, obj, objects, opt_text, text, texts
from qnndeploy.base.fileio import JSON
from qnndeploy.base.names import BENCH_RECORD
from qnndeploy.formats import schemas

RECORD_VERSION = 1
# the figures the gate compares, by their dotted name in a path's figures
LOWER_IS_BETTER = ("first_ms", "latency_ms.p50", "latency_ms.p90", "latency_ms.p99", "latency_ms.mean",
                   "energy_mj_per_inference", "launch.session_cold_ms", "launch.session_warm_ms",
                   "launch.first_result_cold_ms", "launch.first_result_warm_ms")
STAND_IN = "STAND-IN"  # what the test suite's stand-in tools print (tests/support/device_emulator/), no real tool
STAND_IN_NOTE = ("stand-in tools: the tools printed STAND-IN (the emulated phone of qnndeploy's tests): every time "
                 "here, launch figures included, is the host's (the host HTP emulator's, this machine's CPU), not a "
                 "phone's HTP time")
# What cold and warm mean, for the records that carry Launch figures (device bench's and device verify's)
LAUNCH_NOTE = ("launch: per path, from a tool process's start to a ready session (session_*_ms: the context load, or "
               "on-device the compile) and to its first result (first_result_*_ms). cold: the first process after "
               "the files were pushed, on-device with an empty EP-context cache (the app's first launch; the files "
               "may still be in the page cache from the push: nothing is evicted, that needs root); warm: a second "
               "process right after, files in the page cache, on-device the EP-context cache present (a later app "
               "start). qnn-net-run: the session is qnn-profile-viewer's 'Init Stats' NetRun time of a "
               "--profiling_level basic run (null without a viewer), the first result when its Result_0 output "
               "folder was written, from the process start (stat -c %y against date +%s%N on the phone); "
               "onnxruntime_perf_test: the session is its 'Session creation time cost', the first result that + its "
               "'First inference time cost' (its program load before the session is not in either)")
HIGHER_IS_BETTER = ("throughput_per_s",)


@dataclass
class Latency:
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None


@dataclass
class Launch:
    """How long one path takes to start (LAUNCH_NOTE says how each is measured), in ms; None: not measured."""

    session_cold_ms: float | None = None
    session_warm_ms: float | None = None
    first_result_cold_ms: float | None = None
    first_result_warm_ms: float | None = None


@dataclass
class PathFigures:
    """One path (npu or cpu) of a record; a figure that was not measured is None."""

    first_ms: float | None = None
    latency_ms: Latency = field(default_factory=Latency)
    throughput_per_s: float | None = None
    rtf: float | None = None
    cpu_percent: float | None = None
    energy_mj_per_inference: float | None = None
    energy_source: str | None = None
    runs: int | None = None
    block_p50_ms: list[float] = field(default_factory=list)
    launch: Launch = field(default_factory=Launch)


@dataclass
class SustainedPoint:
    t_s: float
    path: str
    latency_ms_p50: float | None
    latency_ms_mean: float | None
    throughput_per_s: float | None
    temperature_c: float | None
    thermal_status: int | None


@dataclass
class SweepPoint:
    perf_mode: str
    npu: PathFigures


@dataclass
class Regression:
    figure: str
    was: float | None
    now: float | None
    ratio: float | None  # now / was


@dataclass
class Gate:
    baseline: str
    threshold: float | None
    regressions: list[Regression] = field(default_factory=list)
    passed: bool = True


@dataclass
class Conditions:
    charging: bool | None = None
    screen_on: bool | None = None
    battery_level_start: int | None = None
    battery_level_end: int | None = None
    temperature_c_start: float | None = None
    temperature_c_end: float | None = None
    thermal_status_start: int | None = None
    thermal_status_end: int | None = None
    temperature_source: str | None = None  # the thermal zone type read, or "battery"


@dataclass(frozen=True)
class ProfileRow:
    """One row of a record's per-op profile (its "ops" or "partitions", device/opprofile.py writes them), as read:
    a partition has no type ("") and no share."""

    name: str
    type: str
    time_us: float | None
    share: float | None
    where: str


def profile_rows(profile: JSON | None, key: str) -> list[ProfileRow]:
    """The profile's rows under `key` ("ops" or "partitions"), leniently; BadInput when one has no name."""
    return [ProfileRow(text(o, "name"), opt_text(o, "type") or "", number(o, "time_us"), number(o, "share"),
                       opt_text(o, "where") or "") for o in objects(profile, key)]


@dataclass
class BenchRecord:
    """One phone x graph: the record's fields (bench-record.schema.json), in its order."""

    record: str
    record_version: int
    created: str
    qnndeploy: str
    bundle: dict[str, Any]
    phone: dict[str, Any]
    decision: dict[str, Any]
    graph: str
    settings: dict[str, Any]
    conditions: Conditions
    paths: dict[str, PathFigures]
    ratios: dict[str, float | None]
    ratio_spread: dict[str, dict[str, float] | None]
    sustained: list[SustainedPoint]
    sweep: list[SweepPoint]
    profile: JSON | None  # the per-op profile: null unless device/opprofile.py fills it
    gate: Gate | None
    notes: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def record_name(serial: str, graph: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", serial)
    return f"bench-{safe}-{re.sub(r'[^A-Za-z0-9_.-]', '_', graph)}.json"


# --- the gate -------------------------------------------------------------------------------------------------------

def _figure(record: BenchRecord, path: str, name: str) -> float | None:
    value: Any = record.paths.get(path)
    for key in name.split("."):
        value = getattr(value, key, None)
    return float(value) if isinstance(value, (int, float)) else None


def gate(baseline: BenchRecord, where: str, record: BenchRecord, threshold: float) -> Gate:
    """Every figure both records have that got worse by more than `threshold` (0.1: 10%)."""
    result = Gate(where, threshold)
    for path in ("npu", "cpu"):
        for name in (*LOWER_IS_BETTER, *HIGHER_IS_BETTER):
            was, now = _figure(baseline, path, name), _figure(record, path, name)
            if was is None or now is None or was <= 0:
                continue
            ratio = now / was
            worse = ratio > 1 + threshold if name in LOWER_IS_BETTER else ratio < 1 / (1 + threshold)
            if worse:
                result.regressions.append(Regression(f"{path}.{name}", was, now, round(ratio, 4)))
    result.passed = not result.regressions
    return result


# --- the reader -----------------------------------------------------------------------------------------------------

def read_launch(m: Mapping[str, Any]) -> Launch:
    """Launch figures as a record holds them; an older record without them reads as none measured."""
    launch = obj(m, "launch")
    return Launch(*(number(launch, k) for k in ("session_cold_ms", "session_warm_ms", "first_result_cold_ms",
                                                  "first_result_warm_ms")))


def _path(p: Mapping[str, Any]) -> PathFigures:
    latency = obj(p, "latency_ms")
    blocks = p.get("block_p50_ms")
    return PathFigures(
        number(p, "first_ms"), Latency(*(number(latency, k) for k in ("p50", "p90", "p99", "mean", "min", "max"))),
        number(p, "throughput_per_s"), number(p, "rtf"), number(p, "cpu_percent"),
        number(p, "energy_mj_per_inference"), opt_text(p, "energy_source"), integer(p, "runs"),
        numbers(blocks), read_launch(p))


def parse(data: object) -> BenchRecord:
    """A bench record as this qnndeploy writes it (strict): every rule of schemas/bench-record.schema.json, then
    read. BadInput naming the first field the schema refuses; `read` is the lenient reader of old or broken records
    (the report)."""
    problems = schemas.problems("bench-record", data)
    if problems:
        raise BadInput(f"not a valid bench record: {problems[0]}")
    return read(data)


def read(data: object) -> BenchRecord:
    """A bench record as read from its JSON, of any version: a figure that is missing or not a number is None, a
    missing part empty. BadInput when it is not a bench record, lacks what names it (the phone, its serial, the
    graph) or holds a list that is not one of objects; the message says which."""
    if not isinstance(data, Mapping) or data.get("record") != BENCH_RECORD:
        raise BadInput(f'not a bench record (no "record": "{BENCH_RECORD}")')
    if "phone" not in data:
        raise BadInput("it has no 'phone'")
    phone = obj(data, "phone")
    text(phone, "serial")  # what names the phone: the page shows it, a baseline is checked against it
    graph = text(data, "graph")
    c = obj(data, "conditions")
    conditions = Conditions(flag(c, "charging"), flag(c, "screen_on"), integer(c, "battery_level_start"),
                            integer(c, "battery_level_end"), number(c, "temperature_c_start"),
                            number(c, "temperature_c_end"), integer(c, "thermal_status_start"),
                            integer(c, "thermal_status_end"), opt_text(c, "temperature_source"))
    ratios, spread = obj(data, "ratios"), obj(data, "ratio_spread")
    sustained = [SustainedPoint(number(s, "t_s") or 0.0, opt_text(s, "path") or "", number(s, "latency_ms_p50"),
                                number(s, "latency_ms_mean"), number(s, "throughput_per_s"),
                                number(s, "temperature_c"), integer(s, "thermal_status"))
                 for s in objects(data, "sustained")]
    sweep = [SweepPoint(str(s.get("perf_mode")), _path(obj(s, "npu"))) for s in objects(data, "sweep")]
    g, profile = data.get("gate"), data.get("profile")
    gate = Gate(str(g.get("baseline")), number(g, "threshold"),
                [Regression(str(r.get("figure")), number(r, "was"), number(r, "now"), number(r, "ratio"))
                 for r in objects(g, "regressions")], g.get("passed") is True) if isinstance(g, Mapping) else None
    return BenchRecord(
        BENCH_RECORD, integer(data, "record_version") or 0, opt_text(data, "created") or "",
        opt_text(data, "qnndeploy") or "", obj(data, "bundle"), phone, obj(data, "decision"), graph,
        obj(data, "settings"), conditions,
        {str(name): _path(p) for name, p in obj(data, "paths").items() if isinstance(p, Mapping)},
        {str(k): number(ratios, k) for k in ratios},
        {str(k): {str(f): n for f in v if (n := number(v, f)) is not None} if isinstance(v, Mapping) else None
         for k, v in spread.items()},
        sustained, sweep, dict(profile) if isinstance(profile, Mapping) else None, gate,
        texts(data, "notes"))

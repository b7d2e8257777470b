"""Find the records under the paths a report is asked for and read each into a dataclass: compile and validation
records, bundle manifests, `check --json` and `diagnose --json` outputs saved to a file, a bundle's on-device
validation records, device verify records, bench records and estimate records. A file that is none of these, or one
that is but cannot be read, becomes a Skipped with the reason; nothing here raises for a record's content."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from qnndeploy.base import interrupt
from qnndeploy.base.errors import BadInput, QnnDeployError
from qnndeploy.base.fileio import read_limited
from qnndeploy.base.names import (
    BENCH_RECORD,
    DEVICE_RECORD,
    FORMAT,
    ON_DEVICE_RECORD,
    SPLIT_RECORD,
    file_kind,
    graph_name,
)
from qnndeploy.decide.reach import reach
from qnndeploy.formats import benchrecord, estimaterecord
from qnndeploy.formats.manifest import Manifest, parse_json
from qnndeploy.formats.records import RECORD, VALIDATION_RECORD
from qnndeploy.report.entries import (
    BenchInfo,
    BundleInfo,
    CheckInfo,
    Collected,
    CompileInfo,
    DeviceInfo,
    DeviceRun,
    DiagnoseInfo,
    EstimateInfo,
    FileInfo,
    OnDeviceInfo,
    OpRow,
    OutputFigures,
    Probe,
    ReachInfo,
    Skipped,
    TargetInfo,
    ValidationInfo,
)
from qnndeploy.verification.checks import bundle_folder

MAX_RECORD_BYTES = 64 << 20  # a record is kilobytes; a bench record with a detailed profile a few MB
MAX_TOTAL_BYTES = 128 << 20  # of records read by one report: a build of a hundred graphs is a few MB; past it the
# files left are skipped and listed (memory grows with what is read: 335 MB of bench records peaked at 1.9 GB)
MAX_SHOWN_ROWS = 40  # of a profile's ops (and partitions): the page shows the ones with the most time
MAX_FILES = 20_000  # JSON files looked at under one path: a report of a home folder is a mistake, not a report
ARCHIVES = (".zip", ".tar.gz", ".tgz")


class _Unreadable(Exception):
    """A record of a known kind whose fields are not what that kind writes: the message says which."""


# --- finding the files -------------------------------------------------------------------------------------------

def collect(paths: list[Path], steps: Callable[[str], None] | None = None) -> Collected:
    """Read every record under each path: a folder (walked, symlinks not followed), a record file, or a bundle
    archive (.zip, .tar.gz; extracted while it is read). BadInput for a path that does not exist or is a file of
    another kind, and when no path holds any record. `steps` is told of each path as it is read. Each record is
    read, kept as what the page shows of it and let go; once MAX_TOTAL_BYTES have been read, the files left are
    skipped, each with the reason."""
    out = Collected()
    seen: dict[bytes, str] = {}  # a record's sha256 -> where it was shown
    budget = [MAX_TOTAL_BYTES]
    with ExitStack() as stack:
        for path_given in paths:
            given = Path(path_given)
            if not os.path.lexists(given):
                raise BadInput(f"{given}: no such file or folder (give a build folder, a bundle or a folder of "
                               "device records)")
            label = given.name or str(given)
            if steps is not None:
                steps(f"reading the records under {given}")
            out.paths.append(str(given))
            root = given
            if given.is_file() and given.name.lower().endswith(ARCHIVES):
                root = stack.enter_context(bundle_folder(given))
            elif given.is_file() and given.suffix.lower() != ".json":
                raise BadInput(f"{given} is {file_kind(given.name)}, not a record: give a build folder, a bundle "
                               "(folder or archive), a folder of device records or a record's .json")
            for path in _json_files(root, given):
                shown = label if root.is_file() else f"{label}/{path.relative_to(root).as_posix()}"
                _read_one(path, shown, out, seen, budget)
    if not out.records:
        raise BadInput(f"no qnndeploy records in {', '.join(map(str, paths))}: give a build folder (compile -o), a "
                       "bundle, or a folder of device records (device verify, device bench)")
    return out


def _json_files(root: Path, given: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    count = 0
    for folder, dirs, files in os.walk(root):  # symlinked folders are not entered
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # staging folders, .git, caches
        for name in sorted(files):
            if name.startswith(".") or not name.endswith(".json"):
                continue
            interrupt.check()  # a safe point: Ctrl-C or SIGTERM stops a long walk here, before anything is written
            count += 1
            if count > MAX_FILES:
                raise BadInput(f"{given} holds over {MAX_FILES:,} JSON files: give the build folder, bundle or "
                               "records folder itself")
            yield Path(folder, name)


def _read_one(path: Path, shown: str, out: Collected, seen: dict[bytes, str], budget: list[int]) -> None:
    try:
        if path.is_symlink():
            raise QnnDeployError("a symlink; records are read as regular files only")
        size = path.stat().st_size
        if size > budget[0] and size <= MAX_RECORD_BYTES:  # a file over the cap says so itself
            raise QnnDeployError(f"not read: the report's budget of {MAX_TOTAL_BYTES >> 20} MB of records is spent "
                                 f"({size:,} bytes, {budget[0]:,} left); report fewer paths at a time")
        raw = read_limited(path, MAX_RECORD_BYTES, "record")
        budget[0] -= len(raw)
        data = parse_json(raw, path)
    except QnnDeployError as e:
        reason = str(e).replace(str(path), "the file").replace("a manifest is", "a record is")
        out.skipped.append(Skipped(shown, reason))
        return
    kind = _kind(data)
    if kind is None:
        out.skipped.append(Skipped(shown, _not_a_record(data)))
        return
    digest = hashlib.sha256(raw).digest()
    del raw  # only what the page shows is kept
    if digest in seen:  # a bundle's records/ holds copies of its build's records
        out.duplicates[shown] = seen[digest]
        return
    try:
        _READERS[kind](data, shown, out)
    except (_Unreadable, BadInput) as e:  # BadInput: what benchrecord.read and estimaterecord.read find unreadable
        out.skipped.append(Skipped(shown, f"{_NAMES[kind]}, but {e}"))
        return
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        out.skipped.append(Skipped(shown, f"{_NAMES[kind]}, but unreadable: {type(e).__name__} {e}"))
        return
    seen[digest] = shown


def _kind(data: object) -> str | None:
    if isinstance(data, dict):
        record = data.get("record")
        if record in (RECORD, VALIDATION_RECORD, DEVICE_RECORD, BENCH_RECORD, estimaterecord.RECORD):
            return str(record)
        if data.get("kind") == ON_DEVICE_RECORD:
            return ON_DEVICE_RECORD
        if data.get("format") == FORMAT:
            return FORMAT
        if isinstance(data.get("models"), list) and "verdict" in data:
            return "check"
        if isinstance(data.get("probes"), list) and "graph" in data and "soc" in data:
            return "diagnose"
    return None


def _not_a_record(data: object) -> str:
    if isinstance(data, dict):
        if data.get("record") == SPLIT_RECORD:
            return "a split record (prepare --split-at): not shown in a report"
        if "changes" in data and "output_sha256" in data:
            return "a prepare record: not shown in a report"
        if "traceEvents" in data:
            return "a Chrome trace: open it in Perfetto or chrome://tracing"
        if "error" in data and "exit_code" in data:
            return f"a command's --json output of a failure (exit {data.get('exit_code')}): {data.get('error')}"
        for key in ("record", "kind", "format"):
            if isinstance(data.get(key), str):
                return f"{key} {data[key]!r} is not one a report reads (a newer qnndeploy's?)"
    elif isinstance(data, list) and data and isinstance(data[0], dict) and "ph" in data[0]:
        return "a Chrome trace: open it in Perfetto or chrome://tracing"
    return "not a qnndeploy record"


# --- typed fields --------------------------------------------------------------------------------------------------

def _get(m: Any, key: str) -> Any:
    if not isinstance(m, Mapping):
        raise _Unreadable(f"an object is expected where {key!r} is read")
    if key not in m:
        raise _Unreadable(f"it has no {key!r}")
    return m[key]


def _text(m: Mapping[str, Any], key: str) -> str:
    value = _get(m, key)
    if not isinstance(value, str):
        raise _Unreadable(f"{key!r} is not text")
    return value


def _opt_text(m: Any, key: str) -> str | None:
    value = m.get(key) if isinstance(m, Mapping) else None
    return value if isinstance(value, str) else None if value is None else str(value)


def _number(m: Any, key: str) -> float | None:
    """A figure: a number, or None where it was not measured (null, absent or not a number)."""
    value = m.get(key) if isinstance(m, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None  # NaN and Infinity (Python's json reads them) measure nothing


def _int(m: Any, key: str) -> int | None:
    value = m.get(key) if isinstance(m, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(m: Mapping[str, Any], key: str) -> bool:
    value = _get(m, key)
    if not isinstance(value, bool):
        raise _Unreadable(f"{key!r} is not true or false")
    return value


def _objects(m: Any, key: str, required: bool = False) -> list[Mapping[str, Any]]:
    value = _get(m, key) if required else (m.get(key) if isinstance(m, Mapping) else None)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise _Unreadable(f"{key!r} is not a list of objects")
    return value


def _list(m: Any, key: str) -> list[Any]:
    value = m.get(key) if isinstance(m, Mapping) else None
    return value if isinstance(value, list) else []


def _object(m: Any, key: str) -> Mapping[str, Any]:
    value = m.get(key) if isinstance(m, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _outputs(items: list[Mapping[str, Any]]) -> tuple[OutputFigures, ...]:
    return tuple(OutputFigures(_text(o, "name"), o.get("passed") if isinstance(o.get("passed"), bool) else None,
                               _number(o, "snr_db"), _number(o, "cosine"), _number(o, "max_abs_diff"),
                               _number(o, "rel_l2"), _opt_text(o, "note")) for o in items)


def _files(items: list[Mapping[str, Any]]) -> tuple[FileInfo, ...]:
    return tuple(FileInfo(_text(f, "path"), _int(f, "size"), _opt_text(f, "format") or "") for f in items)


# --- one reader per kind ---------------------------------------------------------------------------------------------

def _compile(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    members = _objects(d, "members")
    graphs = [_text(m, "graph") for m in members] or [_text(d, "graph")]
    warnings = tuple(str(w) for w in _list(d, "warnings") if w)
    outputs = _objects(d, "outputs")
    for graph in graphs:  # a shared context's members: the shared binary and each one's own wrapper
        mine = [f for f in outputs if not members or (not f.get("twin") and f.get("graph") in (None, graph))]
        out.compiles.append(CompileInfo(
            shown, graph, _text(d, "soc"), _opt_text(d, "dsp_arch") or "", _opt_text(d, "backend") or "",
            _opt_text(d, "qairt_version") or "", _opt_text(d, "precision") or "", _text(d, "status"),
            _opt_text(d, "error"), _number(d, "duration_s"), _files(mine),
            _text(d, "graph") if members else None, warnings, _opt_text(d, "created")))


def _samples(inputs: object) -> str:
    if not isinstance(inputs, Mapping):
        return ""
    if inputs.get("kind") == "random":
        return f"{inputs.get('samples')} random sample(s), seed {inputs.get('seed')}"
    if inputs.get("kind") == "files":
        return f"{inputs.get('samples', '?')} sample file(s) from {inputs.get('folder')}"
    if inputs.get("kind") == "chain":
        return f"what the split's earlier parts made of {_samples(inputs.get('samples'))}"
    return str(inputs.get("kind") or "")


def _validation(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    thresholds = {str(k): float(v) for k, v in _object(d, "thresholds").items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool)}
    task, chain, loop = _object(d, "task"), _object(d, "chain"), _object(d, "loop")
    texts = tuple((_text(t, "cpu"), _text(t, "npu")) for t in _objects(loop, "samples"))
    rate = _number(loop, "error_rate")
    decided = isinstance(task.get("passed"), bool)
    out.validations.append(ValidationInfo(
        shown, _text(d, "graph"), _text(d, "soc"), _opt_text(d, "precision") or "", _bool(d, "passed"), thresholds,
        _outputs(_objects(d, "outputs", required=True)), _samples(d.get("inputs")),
        _number(_object(d, "emulator"), "seconds_per_run"), _opt_text(d, "threshold_reason"),
        f"{_opt_text(task, 'kind')} ({_opt_text(task, 'output')}): {_opt_text(task, 'summary')}" if decided else None,
        task.get("passed") is True if decided else None,
        f"the split ({_opt_text(chain, 'split')}) as the app runs it, against the source model" if chain else None,
        chain.get("passed") is True if chain else None,
        (f"decode loop on {_text(loop, 'soc')} (decides the encoder and decoder): "
         + (f"word error rate {rate:.2%} against the CPU's texts" if rate is not None else
            _opt_text(loop, "error") or "not run")) if loop else None,
        loop.get("passed") is True if loop else None, texts))


def _bundle(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    version = d.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _Unreadable("its format_version is not a number")
    targets = []
    for t in _objects(d, "targets"):
        validation = t.get("validation")
        passed = validation.get("passed") if isinstance(validation, Mapping) else None
        graphs = _object(validation, "graphs") if isinstance(validation, Mapping) else {}
        judged = tuple((str(g), _opt_text(v, "inputs") or "") for g, v in graphs.items() if isinstance(v, Mapping))
        targets.append(TargetInfo(_text(t, "soc"), _opt_text(t, "dsp_arch") or "", _opt_text(t, "precision") or "",
                                  _files(_objects(t, "artifacts")), passed if isinstance(passed, bool) else None,
                                  judged))
    runtime = _object(d, "runtime")
    mode = _opt_text(runtime, "mode") or ""
    on_device = tuple((_text(g, "graph"), tuple(str(a) for a in g.get("validated") or []))
                      for g in _objects(_object(d, "on_device"), "graphs"))
    out.bundles.append(BundleInfo(
        shown, _text(d, "name"), _text(d, "version"), version, _opt_text(_object(d, "qairt"), "version") or "",
        tuple(_text(g, "name") for g in _objects(d, "graphs")), tuple(targets),
        f"{mode}: {runtime.get('maven')}" if runtime.get("maven") else mode, on_device,
        _opt_text(_object(d, "source"), "model") or "", _opt_text(_object(d, "source"), "license"),
        tuple(_text(g, "name") for g in _objects(d, "graphs") if g.get("cpu_only") is True)))
    out.reaches.append(_reach(d, shown))


def _reach(d: Mapping[str, Any], shown: str) -> ReachInfo:
    """The bundle's reach table (decide/reach.py, engine ort), or why it cannot be made from this manifest."""
    bundle = f"{d.get('name')} {d.get('version')}"
    try:
        return ReachInfo(shown, bundle, reach(Manifest.parse(dict(d))))
    except (QnnDeployError, KeyError, TypeError, ValueError, AttributeError) as e:
        return ReachInfo(shown, bundle, None, f"{type(e).__name__}: {e}" if not isinstance(e, QnnDeployError)
                         else str(e))


def _check(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    for m in _objects(d, "models", required=True):
        htp = _object(m, "htp")
        graph = graph_name(_text(m, "path"))  # as compile names it (det.npu.onnx is det), not the ONNX graph's name
        cpu = htp.get("cpu_nodes")
        out.checks.append(CheckInfo(
            shown, graph, _text(htp, "soc"), _text(m, "verdict"), htp.get("measured") is True,
            _opt_text(htp, "reason") or "", _int(htp, "total_nodes") or 0, len(cpu) if isinstance(cpu, list) else 0,
            _int(htp, "qnn_partitions") or 0, _int(htp, "cpu_partitions") or 0,
            tuple(str(f.get("message")) for f in _objects(m, "findings"))))


def _diagnose(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    probes = tuple(Probe(_int(p, "position") or 0, _text(p, "tensor"), _opt_text(p, "op_type") or "",
                         _number(p, "snr_db"), _number(p, "cosine"), p.get("bad") is True)
                   for p in _objects(d, "probes", required=True))
    bad = _object(d, "first_bad")
    out.diagnoses.append(DiagnoseInfo(
        shown, _text(d, "graph"), _text(d, "soc"), d.get("ok") is True, _number(d, "min_snr_db"), _int(d, "nodes"),
        probes, _opt_text(bad, "tensor"), _opt_text(bad, "op_type")))


def _on_device(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    out.on_device.append(OnDeviceInfo(
        shown, _text(d, "graph"), _text(d, "arch"), _text(d, "soc"), _number(d, "compile_s"), _bool(d, "passed"),
        _opt_text(d, "error"), _outputs(_objects(d, "outputs"))))


def _device(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    device, soc, decision, bundle = (_object(d, k) for k in ("device", "soc", "decision", "bundle"))
    runs = tuple(DeviceRun(
        _text(g, "graph"), _text(g, "status"), _opt_text(g, "reason"), _int(g, "samples") or 0,
        _int(g, "inferences") or 0, _number(g, "first_run_s"), _number(g, "per_inference_s"), _opt_text(g, "clock"),
        _outputs(_objects(g, "outputs")), benchrecord.read_launch(g)) for g in _objects(d, "graphs"))
    out.devices.append(DeviceInfo(
        shown, _text(device, "serial"), _opt_text(device, "model") or "", _opt_text(soc, "model") or "unknown SoC",
        _opt_text(soc, "dsp_arch"), _bool(d, "ok"), _opt_text(decision, "provider"), _opt_text(decision, "reason"),
        f"{bundle.get('name')} {bundle.get('version')} (QAIRT {bundle.get('qairt_version')})", runs,
        _opt_text(d, "created"), _opt_text(_object(d, "runner"), "note"), _push(_object(d, "push")),
        _play(_object(d, "play")), _outcome(d, runs)))


def _outcome(d: Mapping[str, Any], runs: tuple[DeviceRun, ...]) -> str:
    """What the phone proved: the record's outcome; a record without one (before it was written) that is ok but
    ran no graph proved nothing (not run), as device verify without a runner wrote it."""
    said = _opt_text(d, "outcome")
    if said in ("passed", "ran", "not run", "failed"):
        return said
    if not _bool(d, "ok"):
        return "failed"
    ran = [r.status for r in runs if r.status != "not run"]
    return "not run" if not ran or len(ran) < len(runs) else "passed" if set(ran) == {"passed"} else "ran"


def _push(p: Mapping[str, Any]) -> str | None:
    files, total, sent, seconds = (_number(p, k) for k in ("files", "bytes_total", "bytes_sent", "seconds"))
    if files is None:
        return None
    speed = _number(p, "mb_per_s")
    return (f"pushed {sent or 0:,.0f} of {total or 0:,.0f} bytes ({files:.0f} files, "
            f"{_number(p, 'unchanged') or 0:.0f} unchanged)" + (f" in {seconds:.1f} s" if seconds is not None else "")
            + (f", {speed:.1f} MB/s" if speed is not None else ""))


def _play(p: Mapping[str, Any]) -> str | None:
    if not p:
        return None
    return (f"Play delivers device group {p.get('delivered')!s}, the decision expects {p.get('expected')!s}: "
            f"{'ok' if p.get('ok') is True else 'MISMATCH'}; {p.get('reason')!s}")


def _ops(items: list[Mapping[str, Any]]) -> tuple[OpRow, ...]:
    """The MAX_SHOWN_ROWS rows with the most time, in that order (the page shows those and counts the rest)."""
    rows = [OpRow(_text(o, "name"), _opt_text(o, "type") or "", _number(o, "time_us"), _number(o, "share"),
                  _opt_text(o, "where") or "") for o in items]
    return tuple(sorted(rows, key=lambda o: -(o.time_us or 0.0))[:MAX_SHOWN_ROWS])


def _bench(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    record = benchrecord.read(d)
    phone, bundle, decision = record.phone, record.bundle, record.decision
    profile = record.profile or {}
    where = decision.get("npu_source")
    ops, partitions = _objects(profile, "ops"), _objects(profile, "partitions")
    out.benches.append(BenchInfo(
        shown, dataclasses.replace(record, profile=None), _opt_text(phone, "soc") or "unknown SoC", phone["serial"],
        " ".join(str(phone.get(k)) for k in ("manufacturer", "model") if phone.get(k)) or "phone",
        f"{bundle.get('name')} {bundle.get('version')}", _opt_text(bundle, "qairt") or "",
        f"{decision.get('provider')}" + (f" ({where})" if where else "") +
        (f", {decision.get('dsp_arch')}" if decision.get("dsp_arch") else ""),
        _opt_text(profile, "level"), _opt_text(profile, "source"), _opt_text(profile, "trace"),
        _ops(ops), _ops(partitions), len(ops), len(partitions)))


def _estimate(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    out.estimates.append(EstimateInfo(shown, estimaterecord.read(d)))


_READERS = {RECORD: _compile, VALIDATION_RECORD: _validation, FORMAT: _bundle, "check": _check,
            "diagnose": _diagnose, ON_DEVICE_RECORD: _on_device, DEVICE_RECORD: _device, BENCH_RECORD: _bench,
            estimaterecord.RECORD: _estimate}
_NAMES = {RECORD: "a compile record", VALIDATION_RECORD: "a validation record", FORMAT: "a bundle manifest",
          "check": "a check --json output", "diagnose": "a diagnose --json output",
          ON_DEVICE_RECORD: "an on-device validation record", DEVICE_RECORD: "a device verify record",
          BENCH_RECORD: "a bench record", estimaterecord.RECORD: "an estimate record"}

"""Find the records under the paths a report is asked for and read each into a dataclass: compile and validation
records, bundle manifests, `check --json` and `diagnose --json` outputs saved to a file, a bundle's on-device
validation records, device verify records, bench records and estimate records. A file that is none of these, or one
that is but cannot be read, becomes a Skipped with the reason; nothing here raises for a record's content."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from qnndeploy.base import interrupt
from qnndeploy.base.errors import BadInput, QnnDeployError
from qnndeploy.base.fields import integer, is_number, items, number, obj, objects, opt_text, text
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
from qnndeploy.formats.benchrecord import ProfileRow, profile_rows
from qnndeploy.formats.devicerecord import OUTCOMES, DeviceRecord
from qnndeploy.formats.manifest import Manifest, parse_json
from qnndeploy.formats.ondevicerecord import OnDeviceRecord
from qnndeploy.formats.records import RECORD, VALIDATION_RECORD, ValidationRecord
from qnndeploy.report.entries import (
    BenchInfo,
    BundleInfo,
    CheckInfo,
    Collected,
    CompileInfo,
    DeviceRecordInfo,
    DeviceRun,
    DiagnoseInfo,
    DiagnoseProbe,
    EstimateInfo,
    FileInfo,
    OnDeviceInfo,
    OutputFigures,
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
    except BadInput as e:  # what the field readers, benchrecord.read and estimaterecord.read find unreadable
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


def _outputs(items: list[Mapping[str, Any]]) -> tuple[OutputFigures, ...]:
    return tuple(OutputFigures(text(o, "name"), o.get("passed") if isinstance(o.get("passed"), bool) else None,
                               number(o, "snr_db"), number(o, "cosine"), number(o, "max_abs_diff"),
                               number(o, "rel_l2"), opt_text(o, "note")) for o in items)


def _files(items: list[Mapping[str, Any]]) -> tuple[FileInfo, ...]:
    return tuple(FileInfo(text(f, "path"), integer(f, "size"), opt_text(f, "format") or "") for f in items)


# --- one reader per kind ---------------------------------------------------------------------------------------------

def _compile(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    members = objects(d, "members")
    graphs = [text(m, "graph") for m in members] or [text(d, "graph")]
    warnings = tuple(str(w) for w in items(d, "warnings") if w)
    outputs = objects(d, "outputs")
    for graph in graphs:  # a shared context's members: the shared binary and each one's own wrapper
        mine = [f for f in outputs if not members or (not f.get("twin") and f.get("graph") in (None, graph))]
        out.compiles.append(CompileInfo(
            shown, graph, text(d, "soc"), opt_text(d, "dsp_arch") or "", opt_text(d, "backend") or "",
            opt_text(d, "qairt_version") or "", opt_text(d, "precision") or "", text(d, "status"),
            opt_text(d, "error"), number(d, "duration_s"), _files(mine),
            text(d, "graph") if members else None, warnings, opt_text(d, "created")))


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
    v = ValidationRecord.lenient(d)
    thresholds = {str(k): float(n) for k, n in v.thresholds.items() if is_number(n)}
    task, chain, loop = v.task or {}, v.chain or {}, v.loop or {}
    texts = tuple((text(t, "cpu"), text(t, "npu")) for t in objects(loop, "samples"))
    rate = number(loop, "error_rate")
    decided = isinstance(task.get("passed"), bool)
    out.validations.append(ValidationInfo(
        shown, v.graph, v.soc, v.precision, v.passed, thresholds, _outputs(list(v.outputs)), _samples(v.inputs),
        number(v.emulator, "seconds_per_run"), v.threshold_reason,
        f"{opt_text(task, 'kind')} ({opt_text(task, 'output')}): {opt_text(task, 'summary')}" if decided else None,
        task.get("passed") is True if decided else None,
        f"the split ({opt_text(chain, 'split')}) as the app runs it, against the source model" if chain else None,
        chain.get("passed") is True if chain else None,
        (f"decode loop on {text(loop, 'soc')} (decides the encoder and decoder): "
         + (f"word error rate {rate:.2%} against the CPU's texts" if rate is not None else
            opt_text(loop, "error") or "not run")) if loop else None,
        loop.get("passed") is True if loop else None, texts))


def _bundle(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    version = d.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise BadInput("its format_version is not a number")
    targets = []
    for t in objects(d, "targets"):
        validation = t.get("validation")
        passed = validation.get("passed") if isinstance(validation, Mapping) else None
        graphs = obj(validation, "graphs") if isinstance(validation, Mapping) else {}
        judged = tuple((str(g), opt_text(v, "inputs") or "") for g, v in graphs.items() if isinstance(v, Mapping))
        targets.append(TargetInfo(text(t, "soc"), opt_text(t, "dsp_arch") or "", opt_text(t, "precision") or "",
                                  _files(objects(t, "artifacts")), passed if isinstance(passed, bool) else None,
                                  judged))
    runtime = obj(d, "runtime")
    mode = opt_text(runtime, "mode") or ""
    on_device = tuple((text(g, "graph"), tuple(str(a) for a in g.get("validated") or []))
                      for g in objects(obj(d, "on_device"), "graphs"))
    out.bundles.append(BundleInfo(
        shown, text(d, "name"), text(d, "version"), version, opt_text(obj(d, "qairt"), "version") or "",
        tuple(text(g, "name") for g in objects(d, "graphs")), tuple(targets),
        f"{mode}: {runtime.get('maven')}" if runtime.get("maven") else mode, on_device,
        opt_text(obj(d, "source"), "model") or "", opt_text(obj(d, "source"), "license"),
        tuple(text(g, "name") for g in objects(d, "graphs") if g.get("cpu_only") is True)))
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
    for m in objects(d, "models", required=True):
        htp = obj(m, "htp")
        graph = graph_name(text(m, "path"))  # as compile names it (det.npu.onnx is det), not the ONNX graph's name
        cpu = htp.get("cpu_nodes")
        out.checks.append(CheckInfo(
            shown, graph, text(htp, "soc"), text(m, "verdict"), htp.get("measured") is True,
            opt_text(htp, "reason") or "", integer(htp, "total_nodes") or 0, len(cpu) if isinstance(cpu, list) else 0,
            integer(htp, "qnn_partitions") or 0, integer(htp, "cpu_partitions") or 0,
            tuple(str(f.get("message")) for f in objects(m, "findings"))))


def _diagnose(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    probes = tuple(DiagnoseProbe(integer(p, "position") or 0, text(p, "tensor"), opt_text(p, "op_type") or "",
                         number(p, "snr_db"), number(p, "cosine"), p.get("bad") is True)
                   for p in objects(d, "probes", required=True))
    bad = obj(d, "first_bad")
    out.diagnoses.append(DiagnoseInfo(
        shown, text(d, "graph"), text(d, "soc"), d.get("ok") is True, number(d, "min_snr_db"), integer(d, "nodes"),
        probes, opt_text(bad, "tensor"), opt_text(bad, "op_type")))


def _on_device(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    r = OnDeviceRecord.lenient(d)
    out.on_device.append(OnDeviceInfo(shown, r.graph, r.arch, r.soc, r.compile_s, r.passed, r.error,
                                      _outputs(list(r.outputs))))


def _device(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    r = DeviceRecord.read(d)
    device, soc, decision, bundle = r.device, r.soc, r.decision, r.bundle
    runs = tuple(DeviceRun(
        text(g, "graph"), text(g, "status"), opt_text(g, "reason"), integer(g, "samples") or 0,
        integer(g, "inferences") or 0, number(g, "first_run_s"), number(g, "per_inference_s"), opt_text(g, "clock"),
        _outputs(objects(g, "outputs")), benchrecord.read_launch(g)) for g in r.graphs)
    out.devices.append(DeviceRecordInfo(
        shown, text(device, "serial"), opt_text(device, "model") or "", opt_text(soc, "model") or "unknown SoC",
        opt_text(soc, "dsp_arch"), r.ok, opt_text(decision, "provider"), opt_text(decision, "reason"),
        f"{bundle.get('name')} {bundle.get('version')} (QAIRT {bundle.get('qairt_version')})", runs,
        r.created or None, opt_text(r.runner, "note"), _push(r.push), _play(r.play or {}), _outcome(r, runs)))


def _outcome(r: DeviceRecord, runs: tuple[DeviceRun, ...]) -> str:
    """What the phone proved: the record's outcome; a record without one (before it was written) that is ok but
    ran no graph proved nothing (not run), as device verify without a runner wrote it."""
    if r.outcome in OUTCOMES:
        return r.outcome
    if not r.ok:
        return "failed"
    ran = [run.status for run in runs if run.status != "not run"]
    return "not run" if not ran or len(ran) < len(runs) else "passed" if set(ran) == {"passed"} else "ran"


def _push(p: Mapping[str, Any]) -> str | None:
    files, total, sent, seconds = (number(p, k) for k in ("files", "bytes_total", "bytes_sent", "seconds"))
    if files is None:
        return None
    speed = number(p, "mb_per_s")
    return (f"pushed {sent or 0:,.0f} of {total or 0:,.0f} bytes ({files:.0f} files, "
            f"{number(p, 'unchanged') or 0:.0f} unchanged)" + (f" in {seconds:.1f} s" if seconds is not None else "")
            + (f", {speed:.1f} MB/s" if speed is not None else ""))


def _play(p: Mapping[str, Any]) -> str | None:
    if not p:
        return None
    return (f"Play delivers device group {p.get('delivered')!s}, the decision expects {p.get('expected')!s}: "
            f"{'ok' if p.get('ok') is True else 'MISMATCH'}; {p.get('reason')!s}")


def _most(rows: list[ProfileRow]) -> tuple[ProfileRow, ...]:
    """The MAX_SHOWN_ROWS rows with the most time, in that order (the page shows those and counts the rest)."""
    return tuple(sorted(rows, key=lambda o: -(o.time_us or 0.0))[:MAX_SHOWN_ROWS])


def _bench(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    record = benchrecord.read(d)
    phone, bundle, decision = record.phone, record.bundle, record.decision
    profile = record.profile or {}
    where = decision.get("npu_source")
    ops, partitions = profile_rows(profile, "ops"), profile_rows(profile, "partitions")
    out.benches.append(BenchInfo(
        shown, dataclasses.replace(record, profile=None), opt_text(phone, "soc") or "unknown SoC", phone["serial"],
        " ".join(str(phone.get(k)) for k in ("manufacturer", "model") if phone.get(k)) or "phone",
        f"{bundle.get('name')} {bundle.get('version')}", opt_text(bundle, "qairt") or "",
        f"{decision.get('provider')}" + (f" ({where})" if where else "") +
        (f", {decision.get('dsp_arch')}" if decision.get("dsp_arch") else ""),
        opt_text(profile, "level"), opt_text(profile, "source"), opt_text(profile, "trace"),
        _most(ops), _most(partitions), len(ops), len(partitions)))


def _estimate(d: Mapping[str, Any], shown: str, out: Collected) -> None:
    out.estimates.append(EstimateInfo(shown, estimaterecord.read(d)))


_READERS = {RECORD: _compile, VALIDATION_RECORD: _validation, FORMAT: _bundle, "check": _check,
            "diagnose": _diagnose, ON_DEVICE_RECORD: _on_device, DEVICE_RECORD: _device, BENCH_RECORD: _bench,
            estimaterecord.RECORD: _estimate}
_NAMES = {RECORD: "a compile record", VALIDATION_RECORD: "a validation record", FORMAT: "a bundle manifest",
          "check": "a check --json output", "diagnose": "a diagnose --json output",
          ON_DEVICE_RECORD: "an on-device validation record", DEVICE_RECORD: "a device verify record",
          BENCH_RECORD: "a bench record", estimaterecord.RECORD: "an estimate record"}

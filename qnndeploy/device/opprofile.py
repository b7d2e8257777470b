"""Per-op profiles of one graph on a phone's NPU: qnn-net-run with a profiling level, QAIRT's qnn-profile-viewer on
its log, the rows parsed into a per-op and per-partition table, and a Chrome trace of them.

What runs on the phone (`profile_graph`), in the graph's work folder where `device verify`/`bench` put its inputs:

  LD_LIBRARY_PATH=<bundle>/lib/arm64-v8a ADSP_LIBRARY_PATH=<skel>;... \\
    qnn-net-run --backend libQnnHtp.so --retrieve_context GRAPH.bin --input_list input_list.txt \\
                --output_dir out_profile --profiling_level basic|detailed [--profiling_option optrace]
  LD_LIBRARY_PATH=... qnn-profile-viewer --input_log out_profile/qnn-profiling-data_0.log \\
                --output out_profile/profile.csv

The viewer runs ON THE PHONE: the SDK ships an Android build of it, bin/aarch64-android/qnn-profile-viewer, and
Qualcomm's QHAS page says to "run qnn-profile-viewer on the device" (sources below); the log itself is QNN's binary
serialization, whose layout is not public, so it is never parsed here, only the viewer's text output is.

Formats relied on, each with where it was read (nothing else is assumed):
- `--profiling_level basic|detailed`: qnn-net-run's option, "basic: Enables essential profiling events. detailed:
  Enables all available profiling events" (QAIRT 2.39 docs, QNN/general/lpai/lpai_backend_profiler.html, in
  the SDK zip at https://apigwx-aws.qualcomm.com/qsc/public/v1/api/download/software/sdks/
  Qualcomm_AI_Runtime_Community/All/2.39.0.250926/v2.39.0.250926.zip).
- optrace is `--profiling_level detailed --profiling_option optrace` (the qnn-net-run command line of
  https://github.com/MollySophia/rwkv-qualcomm/blob/main/docs/optrace.md; executorch's QnnProfiler.cpp maps its
  optrace level to QNN_PROFILE_LEVEL_DETAILED plus QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE,
  https://github.com/pytorch/executorch/pull/6606). The viewer's optrace chrometrace needs the HTP optrace reader
  (`--reader .../libQnnHtpOptraceProfilingReader.so`) and the graph's schematic binary from its compile
  (https://qairt-2-44-docs.pages.dev/SNPE/general/qhas_profiling, and the rwkv-qualcomm page above); bundles carry
  no schematic, so an optrace run gives the detailed table here, and the trace below is built from it.
- The log is `<output_dir>/qnn-profiling-data_0.log`: QAIRT's own Python model-level API (qti.aisw.core.
  model_level_api, its profiling helper, read in a public copy of the SDK's Python package; no canonical URL) has
  `default_profiling_log_name = 'qnn-profiling-data_0.log'` in the output folder and runs `qnn-profile-viewer
  --input_log LOG --output FILE --reader ...` on it; rwkv-qualcomm's page names the same file.
- The rows: CSV with the header `Msg Timestamp,Message,Time,Unit of Measurement,Timing Source,Event Level,Event
  Identifier`, one row per QNN profile event, Event Level ROOT or SUB-EVENT, units US/CYCLES/COUNT/BYTES, Message
  the event type (INIT, EXECUTE, NODE, BACKEND, ...). This is the layout ONNX Runtime's QNN EP writes, "in a
  similar format to QNN SDK Tools"
  (https://github.com/microsoft/onnxruntime/commit/e833d22f143f86529f4863b5da6cac4eb4a78bbb;
  https://github.com/microsoft/onnxruntime/blob/main/onnxruntime/core/providers/qnn/builder/qnn_backend_manager.cc,
  ExtractProfilingEvent; the QNN EP's binary log beside it is "compatible with qnn-profile-viewer",
  https://github.com/microsoft/onnxruntime/pull/25987). No public sample of the viewer's own --output CSV was
  found, so a CSV in any other layout is refused with a message rather than guessed at.
- The events of an HTP execute at detailed level, as the QNN HTP backend (onnxruntime-qnn's, QAIRT 2.38) emits
  them here and as a published qnn-net-run detailed profile shows them (https://gist.github.com/hushell/
  23e68eef236673655db4635b80297c40): ROOT `Accelerator (execute) time (cycles)`, one NODE SUB-EVENT per op
  `<node>:OpId_<n> (cycles)` (and `Input OpId_<n>`/`Output OpId_<n>` for the graph's I/O), ROOT `Accelerator
  (execute) time` in US, then ROOT EXECUTE `QNN (execute) time` in US, which ends one execution. The op cycles sum
  to the accelerator's cycles. QNN documents NODE events as "stats related to individual nodes in graphs as
  sub-events" of EXECUTE (QnnProfile.h, QNN_PROFILE_EVENTTYPE_EXECUTE, in the same SDK docs).
- Op time: QNN's HTP profiling page says the detailed report gives each op's cycle count, not microseconds, and
  that, ops running in parallel, there is no direct conversion from cycles to microseconds: compare ops by their
  cycles (docs.qualcomm.com/bundle/publicresource/topics/80-63442-50/htp_backend.html, "QNN HTP Profiling"; read
  in the translation at https://avoid.overfit.cn/post/0043128d28864be5b709d7c6c2adf225). So an op's share is its
  cycles over the execution's accelerator cycles (measured), and its time_us is the accelerator's execute time
  (µs, measured) apportioned by that share: an attribution that sums to the graph's accelerator time, not a
  measured duration of the op. The trace lays ops end to end in their execution order, says so in its
  metadata, and makes no claim about overlap.
- ONNX Runtime's session profile (SessionOptions.enable_profiling, or `onnxruntime_perf_test -p`): a JSON list of
  Trace Event Format events, one `"cat": "Node"` complete event per kernel run with args.provider and
  args.op_name (https://onnxruntime.ai/docs/performance/tune-performance/profiling-tools.html). A node of
  CPUExecutionProvider is a CPU-fallback op; a QNNExecutionProvider node is a whole HTP partition.
- The trace: the Trace Event Format's JSON Object Format, {"traceEvents": [...], "displayTimeUnit": "ms"}, complete
  events `"ph": "X"` with ts and dur in microseconds, pid, tid, name, args; metadata events `"ph": "M"` named
  process_name/thread_name with args.name (https://docs.google.com/document/d/
  1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU), which chrome://tracing and Perfetto read.
"""

from __future__ import annotations

import csv
import io
import posixpath
import re
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from qnndeploy.base import numbers
from qnndeploy.base.errors import BadInput, CheckFailed, QnnDeployError
from qnndeploy.base.fileio import JSON, sha256_file, write_json
from qnndeploy.device import runner
from qnndeploy.device.adb import FILES, RUN, Device, MiB
from qnndeploy.formats.manifest import parse_json
from qnndeploy.model.onnxio import load_model

SDK_VIEWER = "bin/aarch64-android/qnn-profile-viewer"
REMOTE_VIEWER = "/data/local/tmp/qnndeploy/bin/qnn-profile-viewer"
PROFILE_DIR = "out_profile"  # qnn-net-run's --output_dir of a profiled run, in the graph's work folder
LOG = "qnn-profiling-data_0.log"
VIEWER_CSV = "profile.csv"
SOURCE = "qnn-profile-viewer"
ORT_SOURCE = "onnxruntime profile"
CSV_HEADER = ("Msg Timestamp", "Message", "Time", "Unit of Measurement", "Timing Source", "Event Level",
              "Event Identifier")
MAX_CSV_BYTES = 64 * MiB  # detailed rows of a large graph over many inferences: megabytes, not more
_NODE = re.compile(r"^(?P<name>.*?)(?::| )OpId_(?P<id>\d+) \(cycles\)$")
_IO_OPS = {"Input": "Input", "Output": "Output"}  # the HTP's graph I/O pseudo-ops, as their identifiers name them
ACCEL_CYCLES = "Accelerator (execute) time (cycles)"
ACCEL_US = "Accelerator (execute) time"
QNN_LOAD_US = "QNN (load binary) time"


class Level(StrEnum):
    """`device bench --profile LEVEL`."""

    BASIC = "basic"  # graph times only (load, execute): the cheapest
    DETAILED = "detailed"  # plus one event per op of the graph
    OPTRACE = "optrace"  # detailed with the HTP's op trace on (--profiling_option optrace)


class Where(StrEnum):
    HTP = "htp"
    CPU = "cpu"


def net_run_args(level: Level) -> list[str]:
    """qnn-net-run's options for a profiling level."""
    if level == Level.OPTRACE:
        return ["--profiling_level", "detailed", "--profiling_option", "optrace"]
    return ["--profiling_level", level.value]


# --- parsed rows -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Event:
    """One row of the event CSV."""

    message: str  # the event type: INIT, EXECUTE, NODE, BACKEND, ...
    value: float
    unit: str  # US, CYCLES, COUNT, BYTES, ...
    level: str  # ROOT or SUB-EVENT
    identifier: str


@dataclass
class Execution:
    """One graph execution's events: op cycles in execution order, the accelerator's cycles and µs, QNN's µs."""

    ops: list[tuple[str, int, float]] = field(default_factory=list)  # (name, OpId, cycles)
    accel_cycles: float | None = None
    accel_us: float | None = None
    qnn_us: float | None = None


@dataclass(frozen=True)
class OpRow:
    name: str
    type: str | None  # the ONNX op type of the node it is named after, when the model is known
    time_us: float | None
    share: float | None  # of the partition's accelerator cycles (HTP) or of the run's kernel time (ORT)
    where: Where
    op_id: int | None = None  # the HTP's OpId
    cycles: float | None = None  # the HTP's cycles, mean per execution (measured; time_us is apportioned from it)
    node: str | None = None  # the ONNX node the op was made from, when the model is known and names it

    def record(self) -> JSON:
        return {"name": self.name, "type": self.type, "time_us": _round(self.time_us), "share": _round(self.share, 6),
                "where": str(self.where)}


@dataclass(frozen=True)
class PartitionRow:
    name: str
    time_us: float | None
    where: Where

    def record(self) -> JSON:
        return {"name": self.name, "time_us": _round(self.time_us), "where": str(self.where)}


@dataclass
class OpProfile:
    """A graph's per-op profile: what bench records in its `profile` field and writes as a Chrome trace."""

    level: Level
    graph: str
    ops: list[OpRow] = field(default_factory=list)
    partitions: list[PartitionRow] = field(default_factory=list)
    executions: int = 0  # the executions the times are the mean of
    load_us: float | None = None  # QNN (load binary) time: the context load
    source: str = SOURCE
    trace: str | None = None  # the trace file's name, once written
    notes: list[str] = field(default_factory=list)

    def record(self) -> JSON:
        """The bench record's `profile` (schemas/bench-record.schema.json)."""
        return {"level": str(self.level), "ops": [o.record() for o in self.ops],
                "partitions": [p.record() for p in self.partitions], "trace": self.trace, "source": self.source}

    def trace_events(self) -> JSON:
        """The Chrome trace (Trace Event Format, JSON Object Format)."""
        return chrome_trace(self)

    def write_trace(self, path: Path) -> Path:
        """Write the Chrome trace to `path` (atomically) and remember its name for record()."""
        write_json(Path(path), chrome_trace(self))
        self.trace = Path(path).name
        return Path(path)


def _round(v: float | None, digits: int = 3) -> float | None:
    return None if v is None else round(v, digits)


# --- parsing -----------------------------------------------------------------------------------------------------

def read_events(text: str) -> list[Event]:
    """The rows of an event CSV (the layout of CSV_HEADER). Raises QnnDeployError for another layout."""
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    if header is None or tuple(h.strip() for h in header[:len(CSV_HEADER)]) != CSV_HEADER:
        got = ",".join(header or [])[:120]
        raise CheckFailed(f"the profile CSV starts with {got!r}, not QNN's event header ({','.join(CSV_HEADER)}): "
                          "is it from another qnn-profile-viewer layout?")
    events = []
    for n, row in enumerate(rows, start=2):
        if not row or not any(c.strip() for c in row):
            continue
        if len(row) < len(CSV_HEADER):
            raise CheckFailed(f"line {n} of the profile CSV has {len(row)} fields, not {len(CSV_HEADER)}")
        reading = numbers.read(row[2])
        if reading.value is None:
            raise CheckFailed(f"line {n} of the profile CSV has the time {row[2][:40]!r}, not a finite number"
                              + (f" ({reading.problem})" if reading.problem else ""))
        value = reading.value
        # an identifier may hold commas (an op name): the fields after Timing Source and Event Level are its
        events.append(Event(row[1].strip(), value, row[3].strip().upper(), row[5].strip(), ",".join(row[6:]).strip()))
    return events


def executions(events: Sequence[Event]) -> tuple[list[Execution], float | None]:
    """The events grouped into executions (each ends with its ROOT EXECUTE event), and the load binary time."""
    done: list[Execution] = []
    current = Execution()
    load_us = None
    for e in events:
        if e.message == "NODE" and e.unit == "CYCLES":
            m = _NODE.match(e.identifier)
            if m and (op_id := numbers.integer(m["id"], low=0)) is not None:
                current.ops.append((m["name"], op_id, e.value))
        elif e.level == "ROOT" and e.identifier == ACCEL_CYCLES and e.unit == "CYCLES":
            current.accel_cycles = e.value
        elif e.level == "ROOT" and e.identifier == ACCEL_US and e.unit == "US":
            current.accel_us = e.value
        elif e.level == "ROOT" and e.message == "EXECUTE":
            current.qnn_us = e.value if e.unit == "US" else None
            done.append(current)
            current = Execution()
        elif e.message == "INIT" and e.unit == "US" and e.identifier == QNN_LOAD_US:
            load_us = e.value
    return done, load_us


def from_events_csv(text: str, graph: str, level: Level, types: dict[str, str] | None = None) -> OpProfile:
    """An OpProfile from the event CSV of one graph's run: the mean over its executions. `types`: node name -> ONNX
    op type (node_types() of the model the context was compiled from)."""
    runs, load_us = executions(read_events(text))
    profile = OpProfile(level, graph, executions=len(runs), load_us=load_us)
    if not runs:
        profile.notes.append("the profile holds no graph execution (no EXECUTE event)")
        return profile
    qnn = [r.qnn_us for r in runs if r.qnn_us is not None]
    accel = [r.accel_us for r in runs if r.accel_us is not None]
    partition_us = _mean(qnn) if qnn else _mean(accel) if accel else None
    profile.partitions.append(PartitionRow(graph, partition_us, Where.HTP))
    with_ops = [r for r in runs if r.ops]
    if not with_ops:
        if level != Level.BASIC:
            profile.notes.append(f"the {level} profile has no per-op events: did qnn-net-run take --profiling_level?")
        return profile
    order = [(name, op_id) for name, op_id, _ in with_ops[0].ops]
    shares: dict[tuple[str, int], list[float]] = {k: [] for k in order}
    times: dict[tuple[str, int], list[float]] = {k: [] for k in order}
    cycles_of: dict[tuple[str, int], list[float]] = {k: [] for k in order}
    for r in with_ops:
        total = r.accel_cycles or sum(c for _, _, c in r.ops)
        for name, op_id, cycles in r.ops:
            if (name, op_id) in cycles_of:
                cycles_of[(name, op_id)].append(cycles)
            if total and (name, op_id) in shares:
                share = cycles / total
                shares[(name, op_id)].append(share)
                if r.accel_us is not None:
                    times[(name, op_id)].append(share * r.accel_us)
    for name, op_id in order:
        node = onnx_node(name, types or {})
        kind = _IO_OPS.get(name) or ((types or {}).get(node) if node else None)
        s, t = shares[(name, op_id)], times[(name, op_id)]
        c = cycles_of[(name, op_id)]
        profile.ops.append(OpRow(name, kind, _mean(t) if t else None, _mean(s) if s else None, Where.HTP, op_id,
                                 _mean(c) if c else None, node))
    if not accel:
        profile.notes.append("no Accelerator (execute) time in µs: op shares only, no op times")
    return profile


def from_ort_profile(text: str, graph: str, level: Level) -> OpProfile:
    """An OpProfile from ONNX Runtime's session profile JSON: CPU-fallback nodes are ops where=cpu, each QNN EP
    node (one HTP partition) a partition where=htp; times are the mean per run of the kernel."""
    try:  # the bounded JSON reader: no recursion, no 5,000-digit integer, within JSON's limits
        data = parse_json(text.encode("utf-8", "surrogatepass"), Path("the ONNX Runtime profile"))
    except QnnDeployError as e:
        raise CheckFailed(str(e).replace("a manifest is", "a profile is")) from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise CheckFailed("the ONNX Runtime profile holds no list of events")
    kernels: dict[str, list[float]] = {}
    info: dict[str, tuple[str, str]] = {}  # name -> (op_name, provider)
    for ev in events:
        if not isinstance(ev, dict) or ev.get("cat") != "Node" or ev.get("ph") != "X":
            continue
        given = ev.get("args")
        args: dict[str, Any] = given if isinstance(given, dict) else {}
        name, dur = str(ev.get("name", "")), ev.get("dur")
        if not name.endswith("_kernel_time") or not isinstance(dur, (int, float)) or isinstance(dur, bool):
            continue
        node = name.removesuffix("_kernel_time")
        kernels.setdefault(node, []).append(float(dur))
        info[node] = (str(args.get("op_name", "")), str(args.get("provider", "")))
    profile = OpProfile(level, graph, source=ORT_SOURCE)
    if not kernels:
        profile.notes.append("the ONNX Runtime profile has no node events (was the session run?)")
        return profile
    profile.executions = max(len(v) for v in kernels.values())
    means = {n: _mean(v) for n, v in kernels.items()}
    total = sum(means.values())
    for node, us in means.items():
        op_name, provider = info[node]
        where = Where.HTP if provider == "QNNExecutionProvider" else Where.CPU
        if where == Where.HTP:
            profile.partitions.append(PartitionRow(node, us, where))
        else:
            profile.ops.append(OpRow(node, op_name or None, us, us / total if total else None, where))
            if provider != "CPUExecutionProvider":
                profile.notes.append(f"{node} ran on {provider}, reported as cpu")
    return profile


def merged(npu: OpProfile, ort: OpProfile) -> OpProfile:
    """The HTP's per-op rows with ONNX Runtime's CPU-fallback ops and partitions (one run's two views)."""
    return OpProfile(npu.level, npu.graph, list(npu.ops) + [o for o in ort.ops if o.where == Where.CPU],
                     list(npu.partitions) + ort.partitions, npu.executions, npu.load_us,
                     f"{npu.source} + {ort.source}", notes=npu.notes + ort.notes)


def node_types(model: Path) -> dict[str, str]:
    """ONNX node name -> op type, for naming the HTP's ops. Unnamed nodes as the QNN EP names them, op type and
    node index (MatMul0, Relu1: observed with onnxruntime-qnn 2.5.0)."""
    graph = load_model(Path(model), weights=False).graph
    return {(n.name or f"{n.op_type}{i}"): n.op_type for i, n in enumerate(graph.node)}


_TOKEN = re.compile(r"_token_\d+$")


def onnx_node(op: str, types: dict[str, str]) -> str | None:
    """The ONNX node an HTP op was made from: its name, or its name without the `_token_<n>` suffix the QNN EP adds
    to some (Conv_0_token_1, observed with onnxruntime-qnn 2.5.0); None for an op the HTP added (a layout
    Transpose, the graph's Input/Output) or when the model is not known."""
    if op in types:
        return op
    base = _TOKEN.sub("", op)
    return base if base in types else None


def _mean(v: Sequence[float]) -> float:
    return sum(v) / len(v)


# --- the Chrome trace --------------------------------------------------------------------------------------------

def chrome_trace(p: OpProfile) -> JSON:
    """The Trace Event Format's JSON Object Format: process 1 the HTP (each partition a thread, its ops nested in
    it, laid end to end in execution order), process 2 the CPU-fallback ops; all times in µs."""
    events: list[JSON] = [_meta("process_name", 1, 0, "HTP (qnn-net-run)")]
    ts = 0.0
    htp_ops = [o for o in p.ops if o.where == Where.HTP]
    for tid, part in enumerate((q for q in p.partitions if q.where == Where.HTP), start=1):
        events.append(_meta("thread_name", 1, tid, f"graph {part.name}"))
        ops_us = sum(round(o.time_us or 0.0, 3) for o in htp_ops) if tid == 1 else 0.0
        dur = round(max(part.time_us or 0.0, ops_us), 3)
        events.append({"name": part.name, "cat": "partition", "ph": "X", "ts": round(ts, 3), "dur": dur,
                       "pid": 1, "tid": tid, "args": {"where": str(part.where), "executions": p.executions}})
        if tid == 1:  # the HTP's op events belong to the graph that was profiled
            t = round(ts, 3)
            for o in htp_ops:
                d = round(o.time_us or 0.0, 3)  # each op starts where the one before it ends, to the ns
                events.append({"name": o.name, "cat": "op", "ph": "X", "ts": t, "dur": d,
                               "pid": 1, "tid": tid, "args": {"type": o.type, "share": _round(o.share, 6),
                                                              "cycles": _round(o.cycles), "op_id": o.op_id,
                                                              "where": str(o.where)}})
                t = round(t + d, 3)
        ts = round(ts + dur, 3)
    cpu = [o for o in p.ops if o.where == Where.CPU]
    if cpu:
        events += [_meta("process_name", 2, 0, "CPU fallback (ONNX Runtime)"), _meta("thread_name", 2, 1, "ops")]
        t = 0.0
        for o in cpu:
            d = round(o.time_us or 0.0, 3)
            events.append({"name": o.name, "cat": "op", "ph": "X", "ts": t, "dur": d, "pid": 2,
                           "tid": 1, "args": {"type": o.type, "share": _round(o.share, 6), "where": str(o.where)}})
            t = round(t + d, 3)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"graph": p.graph, "level": str(p.level), "source": p.source, "executions": p.executions,
                          "layout": ("ops are laid end to end in execution order, each lasting its share of the "
                                     "accelerator's mean execute time by its HTP cycles; QNN gives op cycles, not "
                                     "start times or op durations")}}


def _meta(name: str, pid: int, tid: int, label: str) -> JSON:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}}


# --- on the phone ------------------------------------------------------------------------------------------------

def find_viewer(viewer: Path | None, sdk_root: Path | None) -> Path | None:
    """--profile-viewer, else the SDK's aarch64-android qnn-profile-viewer, else none."""
    want = "qnn-profile-viewer from the SDK's bin/aarch64-android"
    if viewer is not None:
        if not Path(viewer).is_file():
            raise BadInput(f"--profile-viewer {viewer}: no such file (give {want})")
        return runner.phone_executable(Path(viewer), want)
    if sdk_root is not None and (Path(sdk_root) / SDK_VIEWER).is_file():
        return runner.phone_executable(Path(sdk_root) / SDK_VIEWER, want)
    return None


def viewer_command(viewer: str, log: str, output: str, lib_dir: str) -> str:
    """The shell line that turns the log into the event CSV, on the phone."""
    return f"LD_LIBRARY_PATH={shlex.quote(lib_dir)} " + shlex.join([viewer, "--input_log", log, "--output", output])


def profile_graph(dev: Device, graph: str, where: runner.NetRun, level: Level, *,
                  graphs: Sequence[str] | None = None, types: dict[str, str] | None = None,
                  viewer: str = REMOTE_VIEWER) -> OpProfile:
    """Profile one graph of a context binary on the phone: qnn-net-run at `level` on the inputs already in the
    run's folder (runner.INPUT_LIST), then qnn-profile-viewer (installed at `viewer`) on its log; the CSV is pulled
    and parsed. `graphs`: the context's graphs in order, for a shared context. Raises QnnDeployError when a step
    fails."""
    workdir, lib_dir = where.workdir, where.lib_dir
    lists = ",".join(runner.INPUT_LIST if g == graph else "__" for g in (graphs or [graph]))
    ran = runner.run(dev, where, lists, PROFILE_DIR, extra=net_run_args(level))
    if ran.code != 0:
        last = next((ln.strip() for ln in reversed(ran.output.splitlines()) if ln.strip()), "no output")
        raise CheckFailed(f"qnn-net-run --profiling_level on {graph} exited with {ran.code}: {last[:200]}")
    q = shlex.quote
    log, out = f"{PROFILE_DIR}/{LOG}", f"{PROFILE_DIR}/{VIEWER_CSV}"
    found = dev.run(f"cd {q(workdir)} && test -f {q(log)}", doing=f"looking for {log}", limit=FILES)
    if found.code != 0:
        raise CheckFailed(f"qnn-net-run profiled {graph} but wrote no {log} in {workdir}")
    view = dev.run(f"cd {q(workdir)} && {viewer_command(viewer, log, out, lib_dir)} 2>&1",
                   doing=f"running qnn-profile-viewer on the profile of {graph}", limit=RUN)
    if view.code != 0:
        last = next((ln.strip() for ln in reversed(view.output.splitlines()) if ln.strip()), "no output")
        raise CheckFailed(f"qnn-profile-viewer on {posixpath.join(workdir, log)} exited with {view.code}: "
                          f"{last[:200]}")
    with tempfile.TemporaryDirectory(prefix="qnndeploy-profile-") as tmp:
        local = Path(tmp) / VIEWER_CSV
        dev.pull(f"{workdir}/{out}", local, max_bytes=MAX_CSV_BYTES)
        text = local.read_text(encoding="utf-8", errors="replace")
    try:
        return from_events_csv(text, graph, level, types)
    except QnnDeployError as e:
        raise e.reworded(f"{posixpath.join(workdir, out)}: {e}") from None


# --- the session start: qnn-profile-viewer's summary ----------------------------------------------------------------

# qnn-profile-viewer without --output prints a summary of a log to stdout: a section per QNN phase, "Init Stats:",
# "Compose Graphs Stats:", "Finalize Stats:", "De-Init Stats:", "Execute Stats (Average):" (also Overall, Min, Max),
# each followed by a rule of dashes (or "--- Graph 0 (NAME):" for a graph's figures) and lines "NetRun: N us" (the
# time qnn-net-run itself measured for the phase) and "Backend (...): N us". For a saved context, Init is backend,
# device and context creation, the context binary loaded: the session start. Read in public examples of the printed
# output, none from Qualcomm's own pages, so the parse is held to the one line it needs: a Chinese QNN tutorial
# (stored in the search index, no address kept) shows the output of `qnn-profile-viewer --input_log
# qnn-profiling-data_0.log` after `qnn-net-run --profiling_level basic` ("Init Stats:" / "NetRun:  331158 us" /
# "Compose Graphs Stats:" ... "Execute Stats (Average):" ... "NetRun:  2952 us"), quoting qnn-net-run's help "basic:
# captures execution and init time"; public scripts that read the same output do the same (a regex
# r"Init Stats:\s*-+\s*NetRun:\s+(\d+) us", and section lists of exactly those headers). The gist hushell/
# 23e68eef236673655db4635b80297c40 shows the "Execute Stats:" layout of a detailed run.
_SECTION = re.compile(r"^[ \t-]*(?P<name>[A-Za-z][A-Za-z -]*?(?:Stats|Statistics)(?: \([A-Za-z]+\))?):[ \t]*$")
_NETRUN = re.compile(r"^[ \t]*NetRun:[ \t]*(?P<value>\S+?)[ \t]*us[ \t]*$")
MAX_INIT_US = 10**12  # about 11 days


def init_ms(text: str) -> numbers.Reading:
    """The 'Init Stats' NetRun time of qnn-profile-viewer's printed summary, in ms (None, with the reason, when the
    section or its NetRun line is missing or not a number)."""
    section = None
    for line in text.splitlines():
        if (m := _SECTION.match(line)) is not None:
            section = m.group("name")
        elif section == "Init Stats" and (m := _NETRUN.match(line)) is not None:
            us = numbers.read(m.group("value"), integer=True, low=0, high=MAX_INIT_US)
            return numbers.Reading(us.value / 1000 if us.value is not None else None,
                                   f"Init Stats NetRun: {us.problem}" if us.problem else None)
    return numbers.Reading(None, "qnn-profile-viewer printed no 'Init Stats' NetRun line")


def session_ms(dev: Device, workdir: str, output_dir: str, lib_dir: str, viewer: str = REMOTE_VIEWER
               ) -> numbers.Reading:
    """The session start of a --profiling_level basic qnn-net-run run whose outputs are in workdir/output_dir, by
    the viewer (installed at `viewer`) on its log; None with the reason when it cannot be read."""
    log = f"{output_dir}/{LOG}"
    line = f"LD_LIBRARY_PATH={shlex.quote(lib_dir)} " + shlex.join([viewer, "--input_log", log])
    view = dev.run(f"cd {shlex.quote(workdir)} && {line} 2>&1", doing=f"running qnn-profile-viewer on {log}",
                   limit=RUN)
    if view.code != 0:
        last = next((ln.strip() for ln in reversed(view.output.splitlines()) if ln.strip()), "no output")
        return numbers.Reading(None, f"qnn-profile-viewer on {log} exited with {view.code}: {last[:200]}")
    return init_ms(view.output)


NO_VIEWER = ("profile: null, no qnn-profile-viewer for the phone: pass --profile-viewer PATH or --qnn-sdk-root DIR "
             f"(DIR/{SDK_VIEWER})")


def profile_for_bench(dev: Device, graph: str, where: runner.NetRun, level: Level, trace: Path, *,
                      viewer: Path | None, model: Path | None = None) -> tuple[OpProfile | None, list[str]]:
    """What `device bench --profile LEVEL` takes for one graph: (the profile, whose record() is the bench record's
    `profile`, notes for the record). Installs `viewer` (find_viewer's) on the phone, profiles the graph on the
    inputs in the run's folder, writes the Chrome trace at `trace`. No viewer, or a step that fails on the phone:
    (None, [why]); a profile is never made up."""
    if viewer is None:
        return None, [NO_VIEWER]
    try:
        runner.install(dev, viewer, sha256_file(viewer), REMOTE_VIEWER)
        profile = profile_graph(dev, graph, where, level, types=node_types(model) if model is not None else None)
    except QnnDeployError as e:
        return None, [f"profile: null, {e}"]
    profile.write_trace(trace)
    notes = [f"profile: {n}" for n in profile.notes]
    if level != Level.BASIC and profile.ops:
        notes.append("profile: an op's time_us is the accelerator's execute time apportioned by its share of the HTP "
                     "cycles (QNN gives op cycles, which have no direct conversion to µs); the shares are measured")
    return profile, notes

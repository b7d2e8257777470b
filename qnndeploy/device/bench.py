"""`device bench`: is the NPU worth it on this phone? The same inputs through the NPU and the CPU path, in alternating
blocks, with latency, throughput, the process's CPU use, energy per inference and the thermal state; sustained runs,
an HTP performance-mode sweep, and a gate against an earlier record. One record per phone x graph
(bench-<serial>-<graph>.json, schemas/bench-record.schema.json; its types in formats/benchrecord.py).

The paths, for the target the app's decision picks (decide/decision.py, as device verify does):
- NPU, prebuilt target: qnn-net-run on the context binary, as device verify runs it (device/runner.py), with
  --perf_profile MODE (the QNN SDK docs' qnn-net-run options list --perf_profile with the values low_balanced,
  balanced, default, high_performance, sustained_high_performance, burst, low_power_saver, power_saver,
  high_power_saver, extreme_power_saver and system_settings; newer QAIRT releases also take it in the HTP backend
  extension config, as executorch's backends/qualcomm/debugger/utils.py writes "perf_profile": "burst" there).
  The mode is the app's (the manifest's htp_performance_mode, else the glue's "burst") unless a sweep asks others.
- NPU, on-device decision: onnxruntime_perf_test with the QNN EP on the EP context compiled on the phone, as device
  verify's on-device path runs it (device/ortrunner.py), htp_performance_mode set per mode.
- CPU: the bundle's CPU model through `onnxruntime_perf_test -e cpu` (the real ONNX Runtime tool, the binary the
  on-device path pushes; -x T sets its intra-op threads, command_args_parser.cc).

Per-inference times are what the tools print, nothing else:
- onnxruntime_perf_test (performance_runner.cc) prints, per process, "Session creation time cost: S s", "First
  inference time cost: M ms", "Total inference requests: N", "Average inference time cost total: M ms" and its
  latency summary over the sorted per-inference times: "Min Latency: X s", "Max Latency: X s", "P50 Latency: X s",
  "P90 Latency", "P95 Latency", "P99 Latency", "P999 Latency" (seconds), the summary printed when no result file is
  given (-s "defaults to on" then; onnxruntime/test/perftest, read 2026-12-02). A path's percentile over the run is the
  median over blocks of the block's percentile; min and max are over every block; the mean is weighted by the
  inferences.
- qnn-net-run prints no per-inference time (its timings are in the profiling log, read by qnn-profile-viewer:
  --profile, device/opprofile.py). It writes each inference's outputs to <output_dir>/Result_<i>/ as that inference
  ends: a block is one qnn-net-run process of N inferences, and the gaps between the modification times of
  consecutive Result_<i> folders (stat -c %y, on the phone's clock) are its N - 1 per-inference times, outputs
  written included. Its first-inference time is the first folder's time from the process start. (Subtracting a
  one-inference run's time from an N-inference run's, as device verify does, drowns in the start-up's noise.)

First launch (each path's `launch`, benchrecord.LAUNCH_NOTE): a cold process then a warm one, from its start to a
ready session and to its first result. NPU prebuilt: two one-inference qnn-net-run runs at --profiling_level basic,
the session qnn-profile-viewer's "Init Stats" NetRun (opprofile.session_ms), the first result the Result_0 stamp;
on-device: the compile into an empty EP-context cache, then the run that opens it; CPU: the first two blocks.

CPU %: utime+stime of the tool's process from /proc/PID/stat over the phone's CLK_TCK and its own clock, as
device/profile.py does (100 = one core), read by a sampler loop on the phone itself while the process runs.
Energy: battery current_now (µA) x voltage_now (µV) from /sys/class/power_supply/battery sampled by that loop and
integrated over the process (trapezoids), divided by its inferences: the whole phone's draw, idle draw included.
Refused (null, with a note) while the phone is on external power (dumpsys battery's AC/USB/Wireless/Dock powered):
the current is then the charger's. Thermal: `dumpsys thermalservice` "Thermal Status: N" and the skin (else cpu)
zones of /sys/class/thermal/thermal_zone*/{type,temp} (m°C) before and after each block.
"""

from __future__ import annotations

import itertools
import math
import posixpath
import re
import shlex
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from qnndeploy import __version__
from qnndeploy.base import numbers
from qnndeploy.base.errors import BadInput, CheckFailed, QnnDeployError
from qnndeploy.base.fileio import read_limited, sha256_file, write_json
from qnndeploy.base.names import BENCH_RECORD
from qnndeploy.base.pool import Pool
from qnndeploy.decide import decision
from qnndeploy.device import opprofile, ortrunner, runner
from qnndeploy.device.adb import FILES, RUN, Device, Upload, connect, list_devices, parse_int
from qnndeploy.device.profile import CURRENT_NOW, parse_battery, parse_stat
from qnndeploy.device.verify import REMOTE_ROOT, DeviceJob, push_bundle
from qnndeploy.formats import benchrecord
from qnndeploy.formats.benchrecord import (
    BenchRecord,
    Conditions,
    Latency,
    Launch,
    PathFigures,
    SustainedPoint,
    SweepPoint,
)
from qnndeploy.formats.manifest import parse_json

VOLTAGE_NOW = "/sys/class/power_supply/battery/voltage_now"
THERMAL = "/sys/class/thermal"
SAMPLE_S = 0.1  # the sampler loop's period on the phone
DEFAULT_THRESHOLD = 0.1
NPU_TOOL, CPU_TOOL, ORT_QNN_TOOL = "qnn-net-run", "onnxruntime_perf_test -e cpu", "onnxruntime_perf_test -e qnn"
ENERGY_SOURCE = "current_now x voltage_now"
_SEP = "@@qnndeploy-bench@@"
_STATUS = re.compile(r"^\s*Thermal Status:[ \t]*(.*?)\s*$", re.MULTILINE)  # ThermalManagerService's dump
MAX_STATUS = 99  # PowerManager.THERMAL_STATUS_*: 0 none .. 6 shutdown; room for new ones, not for garbage
MAX_BASELINE_BYTES = 64 << 20  # a bench record is kilobytes; with a detailed per-op profile a few MB
_WAKE = re.compile(r"mWakefulness=(\w+)")  # PowerManagerService's dump
FIRST_NOTE = ("first_ms: npu, a qnn-net-run process of one inference (at --profiling_level basic, for the session "
              "start of launch), from its start to its output (start, context load, inference): launch."
              "first_result_cold_ms; on-device, the run that opens the EP context, its session creation + first "
              "inference: launch.first_result_warm_ms; cpu, the same figures of the first block: launch."
              "first_result_cold_ms")
THROUGHPUT_NOTE = "throughput_per_s: 1000 / the mean latency, one inference at a time"
NPU_TIMES_NOTE = ("npu latency: qnn-net-run prints no per-inference time; each inference's time is the gap between "
                  "the modification times of consecutive Result_<i> output folders (outputs written included); "
                  "first_ms the first folder's time from the process start")
ENERGY_NOTE = ("energy_mj_per_inference: the battery's power (current_now x voltage_now, sampled every "
               f"{SAMPLE_S:g} s while each tool process ran, integrated over the process and divided by its time) x "
               "the mean time per inference: the whole phone's draw, idle included")

Say = Callable[[str], None]


@dataclass
class Options:
    """What one `device bench` asks, shared by every phone."""

    graph: str | None = None
    runs: int = 50
    blocks: int = 2
    minutes: float | None = None
    perf_modes: tuple[str, ...] = ()
    cpu_threads: int | None = None
    input_seconds: float | None = None
    baseline: Path | None = None
    threshold: float = DEFAULT_THRESHOLD
    profile: opprofile.Level | None = None  # --profile: the per-op profiling level (device/opprofile.py); None: none
    profile_viewer: Path | None = None  # --profile-viewer: qnn-profile-viewer for Android (else the SDK's)


@dataclass
class PhoneBench:
    serial: str
    records: list[BenchRecord] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)
    error: str | None = None  # why this phone could not be benched (--all keeps going)

    @property
    def passed(self) -> bool:
        return self.error is None and all(r.gate is None or r.gate.passed for r in self.records)


@dataclass
class _Block:
    """One tool process on the phone: its time, figures, CPU ticks and battery samples."""

    path: str
    code: int
    output: str
    seconds: float
    inferences: int
    mean_ms: float | None = None
    latency: Latency = field(default_factory=Latency)
    first_ms: float | None = None  # from the process start to its first result
    session_ms: float | None = None  # from the process start to its ready session (onnxruntime_perf_test's)
    cpu_percent: float | None = None
    power_w: float | None = None  # the battery's mean current x voltage while the process ran
    t_start: float = 0.0
    problems: tuple[str, ...] = ()  # the tool's figure lines that did not read (ortrunner.summary), left out


@dataclass
class _Thermal:
    temperature_c: float | None
    source: str | None
    status: int | None
    level: int | None
    powered: bool | None
    problem: str | None = None  # why dumpsys thermalservice's status did not read


# --- what the phone says -------------------------------------------------------------------------------------------

def _thermal(dev: Device) -> _Thermal:
    """The thermal status, the skin (else cpu) zone temperature, and the battery, in one round trip."""
    q = shlex.quote
    r = dev.run(f"dumpsys thermalservice 2>/dev/null; echo {_SEP}; for z in {THERMAL}/thermal_zone*; do "
                f'echo "$(cat "$z/type" 2>/dev/null) $(cat "$z/temp" 2>/dev/null)"; done; echo {_SEP}; '
                f"dumpsys battery; echo {_SEP}; cat {q(CURRENT_NOW)} 2>/dev/null",
                doing="reading the thermal state and the battery")
    parts = r.output.split(_SEP + "\n")
    parts += [""] * (4 - len(parts))
    said = _STATUS.findall(parts[0])
    status = numbers.read(said[-1], integer=True, low=0, high=MAX_STATUS) if said else numbers.Reading(None)
    zones = []
    for line in parts[1].splitlines():
        kind, _, temp = line.strip().rpartition(" ")
        value = parse_int(temp)
        if kind and value is not None:
            zones.append((kind, value / 1000))
    battery = parse_battery(parts[2], parts[3])
    skin = [(k, t) for k, t in zones if "skin" in k.lower()]
    cpu = [(k, t) for k, t in zones if "cpu" in k.lower()]
    chosen = max(skin or cpu, key=lambda z: z[1], default=None)
    temperature, source = (chosen[1], chosen[0]) if chosen else (battery.temperature_c, "battery")
    return _Thermal(temperature, source if temperature is not None else None,
                    int(status.value) if status.value is not None else None, battery.level, battery.powered,
                    f"dumpsys thermalservice's Thermal Status: {status.problem}" if status.problem else None)


def _screen_on(dev: Device) -> bool | None:
    wake = _WAKE.findall(dev.run("dumpsys power 2>/dev/null", doing="reading the screen state (dumpsys power)").output)
    return wake[-1] == "Awake" if wake else None


def _sampled(dev: Device, workdir: str, env: str, argv: list[str], doing: str, path: str, clk: int,
             inferences: int, outputs: bool = False) -> _Block:
    """Run one tool process in the background on the phone while a loop there samples the battery every SAMPLE_S
    and keeps its last /proc/PID/stat (a zombie's holds its final utime+stime); timed by the phone's date +%s%N."""
    q = shlex.quote
    log = f"{workdir}/bench-log.txt"
    script = (
        f"cd {q(workdir)} && rm -rf out || exit 1; s=$(date +%s%N); {env} {shlex.join(argv)} > {q(log)} 2>&1 & p=$!; "
        f"last=; while :; do st=$(cat /proc/$p/stat 2>/dev/null); [ -n \"$st\" ] && last=$st; "
        f"case \"$st\" in ''|*') Z '*|*') X '*) break;; esac; "
        f"echo \"S $(date +%s%N) $(cat {q(CURRENT_NOW)} 2>/dev/null) $(cat {q(VOLTAGE_NOW)} 2>/dev/null)\"; "
        f"sleep {SAMPLE_S}; done; wait $p; rc=$?; e=$(date +%s%N); echo \"T $s $e $rc\"; echo \"P $last\"; "
        + ("o=out; " + runner.RESULTS if outputs else "") + f"echo {_SEP}; cat {q(log)}; exit $rc")
    start = time.perf_counter()
    r = dev.run(script, doing=doing, limit=RUN)
    host = time.perf_counter() - start
    head, _, output = r.output.partition(_SEP + "\n")
    samples: list[tuple[float, float, float]] = []
    results: list[str] = []  # qnn-net-run: its Result_<line> folders' times (runner.RESULTS)
    s0 = s1 = ticks = None
    for line in head.splitlines():
        kind, _, rest = line.partition(" ")
        values = rest.split()
        if kind == "S" and len(values) == 3:
            t, i, v = (parse_int(x) for x in values)
            if t is not None and i is not None and v is not None:
                samples.append((t / 1e9, abs(i) * 1e-6, v * 1e-6))
        elif kind == "T" and len(values) == 3:
            s0, s1 = parse_int(values[0]), parse_int(values[1])
        elif kind == "P" and (parsed := parse_stat(rest)) is not None:
            ticks = parsed[2]
        elif kind == "R":
            results.append(line)
    seconds = (s1 - s0) / 1e9 if s0 is not None and s1 is not None and s1 > s0 else host
    block = _Block(path, r.code, output, seconds, inferences, t_start=s0 / 1e9 if s0 is not None else 0.0)
    if ticks is not None and seconds > 0:
        block.cpu_percent = round(ticks / clk / seconds * 100, 1)
    if len(samples) >= 2 and samples[-1][0] > samples[0][0]:  # current x voltage integrated (trapezoids), per second
        joules = sum((b[0] - a[0]) * (a[1] * a[2] + b[1] * b[2]) / 2 for a, b in itertools.pairwise(samples))
        block.power_w = joules / (samples[-1][0] - samples[0][0])
    elif samples:
        block.power_w = samples[0][1] * samples[0][2]
    if outputs:
        _output_times(block, runner.result_times(results), s0)
    return block


def _at(times: list[float], q: float) -> float:
    """onnxruntime_perf_test's percentile: the sorted times' element at int(size * q)."""
    return times[min(len(times) - 1, int(len(times) * q))]


def _output_times(block: _Block, done: dict[int, float], start: int | None) -> None:
    """A qnn-net-run block's figures from when each inference's outputs were written: the first output's time from
    the process start (start, context load, first inference), then the gaps between consecutive outputs."""
    lines = sorted(done)
    if not lines or lines != list(range(len(lines))):
        return
    stamps = [done[n] for n in lines]
    if start is not None and stamps[0] * 1e9 >= start:
        block.first_ms = (stamps[0] - start / 1e9) * 1000
    gaps = sorted((b - a) * 1000 for a, b in itertools.pairwise(stamps))
    if gaps and min(gaps) >= 0:
        block.mean_ms = statistics.fmean(gaps)
        block.latency = Latency(_at(gaps, 0.5), _at(gaps, 0.9), _at(gaps, 0.99), block.mean_ms, gaps[0], gaps[-1])


def _ort_figures(block: _Block) -> None:
    """The figures onnxruntime_perf_test printed (see the module docstring), into the block."""
    said = ortrunner.summary(block.output)
    for q, seconds in said.latency_s.items():
        setattr(block.latency, q, seconds * 1000)
    block.problems = said.problems
    block.mean_ms = block.latency.mean = said.average_ms
    block.inferences = said.requests + 1 if said.requests is not None else block.inferences  # and the warm-up
    block.session_ms = said.session_s * 1000 if said.session_s is not None else None
    if block.session_ms is not None and said.first_inference_ms is not None:
        block.first_ms = block.session_ms + said.first_inference_ms


# --- one phone x graph ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _OnPhone:
    """What every graph benched on one phone shares: the connection, the job and the decision, the options, the
    libraries' environment, the clock rate, the progress callback, and whether a profile viewer is installed."""

    dev: Device
    job: DeviceJob
    choice: decision.Decision
    options: Options
    env: str
    clk: int
    say: Say
    viewer: bool = False


class _GraphBench:
    """What runs one graph on one phone: its work folder, inputs and the tools' command lines."""

    def __init__(self, phone: _OnPhone, graph: str) -> None:
        self.dev, self.job, self.choice, self.options = phone.dev, phone.job, phone.choice, phone.options
        self.env, self.clk, self.say, self.viewer, self.graph = phone.env, phone.clk, phone.say, phone.viewer, graph
        choice, job = phone.choice, phone.job
        self.launch = Launch()  # the NPU path's (npu_first fills it)
        self.launch_problems: list[str] = []
        self.on_device = choice.npu_source == decision.NpuSource.ON_DEVICE
        self.workdir = f"{REMOTE_ROOT}/bench/{job.bundle_id}/{graph}"
        self.cpu_dir = f"{self.workdir}/cpu"
        self.npu_first_ms: float | None = None
        self.first_problems: tuple[str, ...] = ()  # the first-inference run's figure lines that did not read
        self.native = False
        self.lost = 0  # NPU blocks whose outputs' times could not be read
        self.ctx = f"{self.workdir}/cache/{graph}_ctx.onnx"

    def prepare(self) -> None:
        job, graph, q = self.job, self.graph, shlex.quote
        samples, _, _ = job.reference(graph)
        cpu_model = job.cpu_model(graph)
        cpu_rel = cpu_model.relative_to(job.bundle).as_posix()
        listed = {e.path: e for _, e in job.manifest.files()}
        beside = [a.path for a in job.manifest.cpu if posixpath.dirname(a.path) == posixpath.dirname(cpu_rel)
                  and (a.path == cpu_rel or (a.path in listed and listed[a.path].serves(graph)))]
        copies = " && ".join(f"cp {q(job.remote_dir + '/' + p)} {q(self.cpu_dir + '/' + posixpath.basename(p))}"
                             for p in beside)
        self.cpu_model = f"{self.cpu_dir}/{posixpath.basename(cpu_rel)}"
        self.dev.run(f"rm -rf {q(self.workdir)} && mkdir -p {q(self.cpu_dir)} {q(self.workdir + '/cache')} && "
                     f"{copies}", check=True, doing=f"preparing {self.workdir}", limit=FILES)
        with tempfile.TemporaryDirectory(prefix="qnndeploy-bench-") as tmp:
            local = Path(tmp)
            inputs = [i.name for i in job.manifest_graph(graph).inputs]
            ortrunner.write_test_data(local / "cpu", samples, inputs)
            if not self.on_device:
                self.native = runner.write_inputs(local / "npu", samples, self.options.runs)
            ups = [(p, p.relative_to(local).as_posix()) for p in sorted(local.rglob("*")) if p.is_file()]
            self.dev.push_files([Upload(p, f"{self.workdir}/{rel}", name=rel) for p, rel in ups])
        if self.on_device:
            self.dev.run(f"cp -r {q(self.cpu_dir)}/test_data_set_* {q(self.workdir + '/cache')}/", check=True,
                         doing="copying the test data beside the EP context", limit=FILES)

    # -- NPU
    def _qnn_args(self, input_list: str, mode: str) -> list[str]:
        context = f"{self.job.remote_dir}/{self.choice.paths[self.graph]}"
        graphs_of = {a.path: a.served for t in self.job.manifest.targets for a in t.artifacts}
        graphs = graphs_of.get(self.choice.paths[self.graph], [self.graph])
        lists = ",".join(input_list if g == self.graph else "__" for g in graphs)
        return [runner.REMOTE_RUNNER, "--backend", runner.BACKEND, "--retrieve_context", context, "--input_list",
                lists, "--output_dir", "out", "--perf_profile", mode] + (
                    ["--use_native_input_files"] if self.native else [])

    def _ort_qnn_args(self, mode: str, compile_: bool) -> list[str]:
        choice = self.choice
        assert choice.dsp_arch is not None and choice.soc_id is not None  # an on-device decision names both
        provider = ortrunner.provider_options(choice.dsp_arch, choice.soc_id, choice.ep_options.get(self.graph, {}),
                                              mode)
        provider["htp_performance_mode"] = mode
        model = self.cpu_model if compile_ else self.ctx
        config = ortrunner.session_config(self.ctx if compile_ else None)
        return ortrunner.command(model, provider, config, 1 if compile_ else self.options.runs)

    def npu_first(self, mode: str) -> None:
        """The first-launch figures, once per graph: a cold process then a warm one (benchrecord.LAUNCH_NOTE); the
        first-inference figure; on the on-device path the cold run is the compile that writes the EP context every
        later block opens."""
        if self.on_device:
            cold = _sampled(self.dev, self.workdir, self.env, self._ort_qnn_args(mode, True),
                            f"compiling {self.graph} on the phone (onnxruntime_perf_test, QNN EP)", "npu", self.clk, 2)
            self._check(cold, ORT_QNN_TOOL)
            _ort_figures(cold)
            once = [*self._ort_qnn_args(mode, False)[:-3], "-r", "1", self.ctx]  # one inference: the first
            warm = _sampled(self.dev, self.workdir, self.env, once, f"opening the EP context of {self.graph}", "npu",
                            self.clk, 2)
            self._check(warm, ORT_QNN_TOOL)
            _ort_figures(warm)
            self.npu_first_ms, self.first_problems = warm.first_ms, warm.problems
        else:
            cold, warm = (self._qnn_once(mode, temperature) for temperature in ("cold", "warm"))
            self.npu_first_ms = cold.first_ms
        self.launch = Launch(_round(cold.session_ms, 3), _round(warm.session_ms, 3), _round(cold.first_ms, 3),
                             _round(warm.first_ms, 3))

    def _qnn_once(self, mode: str, temperature: str) -> _Block:
        """One qnn-net-run process of one inference at --profiling_level basic: its first result from the process
        start (its output folder's time) and, with a viewer, its session start (the profile's Init time)."""
        block = _sampled(self.dev, f"{self.workdir}/npu", self.env,
                         [*self._qnn_args(runner.FIRST_INPUT, mode), "--profiling_level", "basic"],
                         f"running qnn-net-run once on {self.graph} ({temperature})", "npu", self.clk, 1, outputs=True)
        self._check(block, NPU_TOOL)
        if self.viewer:
            said = opprofile.session_ms(self.dev, f"{self.workdir}/npu", "out", f"{self.job.remote_dir}/lib/arm64-v8a")
            block.session_ms = said.value
            if said.problem:
                self.launch_problems.append(f"npu.launch.session_{temperature}_ms: null, {said.problem}")
        return block

    def npu_block(self, mode: str) -> _Block:
        if self.on_device:
            block = _sampled(self.dev, self.workdir, self.env, self._ort_qnn_args(mode, False),
                             f"NPU block of {self.graph} (onnxruntime_perf_test, QNN EP, {mode})", "npu", self.clk,
                             self.options.runs)
            self._check(block, ORT_QNN_TOOL)
            _ort_figures(block)
            return block
        block = _sampled(self.dev, f"{self.workdir}/npu", self.env, self._qnn_args(runner.INPUT_LIST, mode),
                         f"NPU block of {self.graph} (qnn-net-run, {mode})", "npu", self.clk, self.options.runs,
                         outputs=True)
        self._check(block, NPU_TOOL)
        if block.mean_ms is None:
            self.lost += 1
        else:
            block.inferences = self.options.runs - 1  # the gaps between its outputs
        return block

    # -- CPU
    def cpu_block(self) -> _Block:
        argv = [ortrunner.REMOTE_ORT_RUNNER, "-e", "cpu", "-m", "times", "-r", str(self.options.runs)]
        if self.options.cpu_threads is not None:
            argv += ["-x", str(self.options.cpu_threads)]
        block = _sampled(self.dev, self.workdir, self.env, [*argv, self.cpu_model],
                         f"CPU block of {self.graph} (onnxruntime_perf_test -e cpu)", "cpu", self.clk,
                         self.options.runs + 1)
        self._check(block, CPU_TOOL)
        _ort_figures(block)
        return block

    def _check(self, block: _Block, tool: str) -> None:
        if block.code != 0:
            last = next((ln.strip() for ln in reversed(block.output.splitlines()) if ln.strip()), "no output")
            raise CheckFailed(f"{self.dev.serial}: {tool} on {self.graph} exited with {block.code}: {last[:200]}")


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def _figures(blocks: list[_Block], first_ms: float | None, charging: bool, input_seconds: float | None,
             notes: list[str], name: str) -> PathFigures:
    """A path's figures from its blocks (see the module docstring for each)."""
    notes += [f"{name}: a figure the tool printed did not read ({said}): left out"
              for said in dict.fromkeys(p for b in blocks for p in b.problems)]
    timed = [b for b in blocks if b.mean_ms is not None]
    runs = sum(b.inferences for b in timed) if timed else 0
    means = [b.mean_ms for b in timed if b.mean_ms is not None]
    weights = [b.inferences for b in timed]
    mean = sum(m * w for m, w in zip(means, weights, strict=True)) / sum(weights) if means and sum(weights) else None
    lat = Latency(mean=_round(mean))
    for q in ("p50", "p90", "p99"):
        setattr(lat, q, _round(_median([v for b in timed if (v := getattr(b.latency, q)) is not None])))
    mins = [b.latency.min for b in timed if b.latency.min is not None]
    maxs = [b.latency.max for b in timed if b.latency.max is not None]
    lat.min, lat.max = _round(min(mins)) if mins else None, _round(max(maxs)) if maxs else None
    per_block = [b.latency.p50 if b.latency.p50 is not None else b.mean_ms for b in timed]
    cpu = [(b.cpu_percent, b.seconds) for b in blocks if b.cpu_percent is not None]
    figures = PathFigures(first_ms=_round(first_ms, 3), latency_ms=lat,
                          throughput_per_s=_round(1000 / mean, 2) if mean else None,
                          cpu_percent=_round(sum(c * s for c, s in cpu) / sum(s for _, s in cpu), 1)
                          if cpu and sum(s for _, s in cpu) > 0 else None,
                          runs=runs, block_p50_ms=[r for b in per_block if (r := _round(b)) is not None])
    if input_seconds and mean:
        figures.rtf = _round(mean / 1000 / input_seconds, 5)
    powers = [b.power_w for b in timed if b.power_w is not None]
    if charging:
        notes.append(f"{name}.energy_mj_per_inference: null, the phone was on external power (charging): the "
                     "battery current is the charger's, not the run's; unplug it (or `adb shell dumpsys battery "
                     "unplug`) and run again")
    elif powers and len(powers) == len(timed) and mean is not None:
        weights = [b.inferences for b in timed]
        power = sum(w * b.power_w for w, b in zip(weights, timed, strict=True) if b.power_w is not None) / sum(weights)
        figures.energy_mj_per_inference = _round(power * mean, 4)  # W x ms = mJ
        figures.energy_source = ENERGY_SOURCE
    elif mean is not None:
        notes.append(f"{name}.energy_mj_per_inference: null, the phone gave no reading of current_now and "
                     "voltage_now during a block (no such files?)")
    return figures


def _ratio(a: float | None, b: float | None) -> float | None:
    return float(f"{a / b:.6g}") if a is not None and b else None


def _ratios(npu: PathFigures, cpu: PathFigures) -> dict[str, float | None]:
    return {"latency_p50": _ratio(npu.latency_ms.p50, cpu.latency_ms.p50),
            "latency_mean": _ratio(npu.latency_ms.mean, cpu.latency_ms.mean),
            "first_ms": _ratio(npu.first_ms, cpu.first_ms),
            "throughput": _ratio(npu.throughput_per_s, cpu.throughput_per_s),
            "energy_per_inference": _ratio(npu.energy_mj_per_inference, cpu.energy_mj_per_inference),
            "cpu_percent": _ratio(npu.cpu_percent, cpu.cpu_percent)}


def _spread(npu: list[_Block], cpu: list[_Block]) -> dict[str, dict[str, float] | None]:
    """The NPU/CPU latency ratio of each pair of alternating blocks: its least, median and greatest."""
    pairs = [n.mean_ms / c.mean_ms for n, c in zip(npu, cpu, strict=False) if n.mean_ms and c.mean_ms]
    if not pairs:
        return {"latency_mean": None}
    return {"latency_mean": {"min": round(min(pairs), 4), "median": round(statistics.median(pairs), 4),
                             "max": round(max(pairs), 4), "blocks": len(pairs)}}


def _strict(record: BenchRecord) -> BenchRecord:
    """The record as strict JSON holds it: a figure that is not finite (a lying tool's, or a ratio to a hostile
    baseline's) is null, with a note that says which and why."""
    data, nulled = numbers.strict(record.to_json())
    if not nulled:
        return record
    data["notes"] = [*data["notes"], *(f"{said}: null, not a finite number (from the tool's figures or the "
                                       "baseline's)" for said in nulled)]
    return benchrecord.read(data)


# --- the baseline -----------------------------------------------------------------------------------------------

def read_baseline(path: Path, serial: str, graph: str) -> tuple[Path, BenchRecord]:
    """The earlier record to compare with: RECORD, or bench-<serial>-<graph>.json in a folder of them."""
    path = Path(path)
    if path.is_dir():
        path = path / benchrecord.record_name(serial, graph)
    try:  # the bounded readers: a regular file (no FIFO or device), of a bench record's size, within JSON's limits
        data = parse_json(read_limited(path, MAX_BASELINE_BYTES, "bench record"), path)
    except QnnDeployError as e:
        raise BadInput(f"--baseline {str(e).replace('a manifest is', 'a bench record is')}: give a bench record "
                       "(bench-SERIAL-GRAPH.json) or a folder of them") from None
    if not isinstance(data, dict) or data.get("record") != BENCH_RECORD:
        raise BadInput(f"--baseline {path} is not a bench record (no \"record\": \"{BENCH_RECORD}\")")
    try:
        return path, benchrecord.read(data)
    except BadInput as e:
        raise BadInput(f"--baseline {path} is a bench record, but {e}") from None


def check_baseline(baseline: BenchRecord, where: Path, graph: str, serial: str, bundle: str) -> None:
    """Only the same graph, phone and bundle compare honestly: anything else is bad input."""
    for what, old, new in (("graph", baseline.graph, graph), ("phone", baseline.phone.get("serial"), serial),
                           ("bundle", baseline.bundle.get("name"), bundle)):
        if old != new:
            raise BadInput(f"--baseline {where} is a bench of {what} {old!r}, this run's is {new!r}: compare a "
                           f"record of the same graph, phone and bundle")


# --- the run --------------------------------------------------------------------------------------------------------

def bench_device(job: DeviceJob, options: Options, serial: str | None = None,
                 say: Say = lambda _line: None) -> PhoneBench:
    """Decide, push, then per graph the alternating NPU and CPU blocks, the sustained curve and the sweep; write
    one record per graph. Raises QnnDeployError when the phone cannot be benched."""
    dev = connect(serial, job.timeout)
    props = dev.getprops()
    phone = decision.DeviceIdentity.from_props(props)
    choice = decision.decide(job.manifest, phone, load_errors={}, lib_dir="", runtime_version=job.runtime_version)
    if not choice.npu:
        raise CheckFailed(f"{dev.serial}: the app takes the CPU on this phone ({choice.reason}): no NPU to bench")
    on_device = choice.npu_source == decision.NpuSource.ON_DEVICE
    if job.ort_runner is None:
        raise BadInput("device bench needs --ort-runner PATH (onnxruntime_perf_test for Android arm64): it runs the "
                       "CPU path (-e cpu)" + (" and the on-device NPU path (-e qnn)" if on_device else ""))
    if not on_device and job.runner is None:
        raise BadInput("device bench needs --runner PATH or --qnn-sdk-root DIR (qnn-net-run) for the NPU path")
    graphs = [g for g in choice.paths if g not in choice.cpu_graphs]
    if options.graph is not None:
        if options.graph not in graphs:
            raise BadInput(f"--graph {options.graph}: the bundle's NPU graphs on this phone are {', '.join(graphs)}")
        graphs = [options.graph]
    baselines = {g: read_baseline(options.baseline, dev.serial, g) for g in graphs} if options.baseline else {}
    for graph, (where, base) in baselines.items():  # before anything runs: a wrong baseline is bad input
        check_baseline(base, where, graph, dev.serial, job.manifest.name)
    result = PhoneBench(dev.serial)
    for graph in graphs:
        job.reference(graph)
    say(f"{dev.serial}: pushing {job.bundle_id} to {job.remote_dir}")
    push_bundle(dev, job, choice)
    assert choice.dsp_arch is not None  # an NPU decision names its target's arch
    lib_dir = f"{job.remote_dir}/lib/arm64-v8a"
    adsp = decision.adsp_library_path(f"{job.remote_dir}/lib/hexagon-{choice.dsp_arch}", None)
    env = f"LD_LIBRARY_PATH={shlex.quote(lib_dir)} ADSP_LIBRARY_PATH={shlex.quote(adsp)}"
    assert job.ort_runner_sha256 is not None
    runner.install(dev, job.ort_runner, job.ort_runner_sha256, ortrunner.REMOTE_ORT_RUNNER)
    viewer = None if on_device else opprofile.find_viewer(options.profile_viewer, job.sdk_root)
    if not on_device:
        assert job.runner is not None and job.runner_sha256 is not None
        runner.install(dev, job.runner, job.runner_sha256)
        if viewer is not None:  # reads the NPU path's session start (opprofile.session_ms)
            runner.install(dev, viewer, sha256_file(viewer), opprofile.REMOTE_VIEWER)
    clk = parse_int(dev.run("getconf CLK_TCK", doing="reading the clock rate (getconf CLK_TCK)").output)
    if clk is None or clk <= 0:
        raise CheckFailed(f"getconf CLK_TCK failed on {dev.serial}")
    shared = _OnPhone(dev, job, choice, options, env, clk, say, viewer is not None)
    for graph in graphs:
        record = _bench_graph(shared, props, graph)
        if graph in baselines:
            where, base = baselines[graph]
            record.gate = benchrecord.gate(base, str(where), record, options.threshold)
        record = _strict(record)
        path = job.record_dir / benchrecord.record_name(dev.serial, graph)
        write_json(path, record.to_json())
        result.records.append(record)
        result.written.append(path)
    return result


def _bench_graph(phone: _OnPhone, props: dict[str, str], graph: str) -> BenchRecord:
    dev, job, choice, options, say = phone.dev, phone.job, phone.choice, phone.options, phone.say
    g = _GraphBench(phone, graph)
    g.prepare()
    mode = job.manifest.htp_performance_mode or ortrunner.DEFAULT_PERFORMANCE_MODE  # the app's
    notes: list[str] = [FIRST_NOTE, THROUGHPUT_NOTE, ENERGY_NOTE, benchrecord.LAUNCH_NOTE]
    start = _thermal(dev)
    screen = _screen_on(dev)
    powered = [start.powered]
    t0 = time.monotonic()
    g.npu_first(mode)
    cpu_first: float | None = None
    npu_blocks: list[_Block] = []
    cpu_blocks: list[_Block] = []
    sustained: list[SustainedPoint] = []
    deadline = t0 + options.minutes * 60 if options.minutes else None
    n = 0
    while n < options.blocks or (deadline is not None and time.monotonic() < deadline):
        n += 1
        for path in ("npu", "cpu"):
            block = g.npu_block(mode) if path == "npu" else g.cpu_block()
            (npu_blocks if path == "npu" else cpu_blocks).append(block)
            if path == "cpu" and cpu_first is None:
                cpu_first = block.first_ms
            if deadline is not None:
                after = _thermal(dev)
                powered.append(after.powered)
                if after.problem is not None and f"sustained: {after.problem}: read as null" not in notes:
                    notes.append(f"sustained: {after.problem}: read as null")
                sustained.append(SustainedPoint(round(time.monotonic() - t0, 2), path, _round(block.latency.p50),
                                                _round(block.mean_ms),
                                                _round(1000 / block.mean_ms, 2) if block.mean_ms else None,
                                                after.temperature_c, after.status))
        left = f", {max(0.0, deadline - time.monotonic()):.0f} s left" if deadline is not None else ""
        say(f"{dev.serial} {graph}: block {n}: NPU {_ms(npu_blocks[-1].mean_ms)}, CPU "
            f"{_ms(cpu_blocks[-1].mean_ms)} per inference{left}")
    sweep: list[SweepPoint] = []
    for other in options.perf_modes:
        say(f"{dev.serial} {graph}: perf mode {other}")
        blocks = [g.npu_block(other) for _ in range(options.blocks)]
        sweep.append(SweepPoint(other, _figures(blocks, None, False, options.input_seconds, [], "sweep")))
    end = _thermal(dev)
    powered.append(end.powered)
    notes += [f"conditions: {said}: read as null" for said in dict.fromkeys(
        t.problem for t in (start, end) if t.problem is not None)]
    notes += [f"npu.first_ms: a figure the tool printed did not read ({said}): left out" for said in g.first_problems]
    charging = any(p for p in powered)
    npu = _figures(npu_blocks, g.npu_first_ms, charging, options.input_seconds, notes, "npu")
    cpu = _figures(cpu_blocks, cpu_first, charging, options.input_seconds, notes, "cpu")
    npu.launch = g.launch
    cold, warm = [*cpu_blocks, None, None][:2]  # the first CPU process, then the second
    cpu.launch = Launch(*(_round(b.session_ms, 3) if b else None for b in (cold, warm)),
                        *(_round(b.first_ms, 3) if b else None for b in (cold, warm)))
    notes += g.launch_problems
    if not g.on_device and not phone.viewer:
        notes.append("npu.launch.session_*_ms: null, no qnn-profile-viewer for the phone to read qnn-net-run's Init "
                     f"time: pass --profile-viewer PATH or --qnn-sdk-root DIR (DIR/{opprofile.SDK_VIEWER})")
    if warm is None:
        notes.append("cpu.launch.*_warm_ms: null, one CPU block ran (--blocks 1): no second process")
    if any(benchrecord.STAND_IN in b.output for b in (*npu_blocks, *cpu_blocks)):
        notes.append(benchrecord.STAND_IN_NOTE)
    if charging:
        for point in sweep:
            point.npu.energy_mj_per_inference, point.npu.energy_source = None, None
    if not g.on_device:
        notes.append(NPU_TIMES_NOTE)
    if g.lost:
        notes.append(f"npu: {g.lost} block(s) left out: the modification times of qnn-net-run's Result_<i> output "
                     "folders (stat -c %y) did not read as one time per inference" +
                     ("; npu latency: null, no block measured it" if not npu.runs else ""))
    if options.input_seconds is None:
        notes.append("rtf: null, the bundle gives no duration for the graph's input: give --input-seconds SECONDS (the "
                     "audio or video one inference covers)")
    if screen:
        notes.append("conditions: the screen was on (it draws power and heats the phone): `adb shell input keyevent "
                     "26` turns it off")
    ratios = _ratios(npu, cpu)
    if ratios["latency_p50"] is None:
        notes.append("ratios.latency_p50: null, a path has no p50 (see its note); latency_mean compares the means")
    if ratios["energy_per_inference"] is None:
        notes.append("ratios.energy_per_inference: null, a path has no energy figure (see its note)")
    profile = None
    if options.profile is not None and g.on_device:
        notes.append("profile: null, per-op profiles are qnn-net-run's, of a context binary: the on-device path "
                     "(onnxruntime_perf_test) has none here")
    elif options.profile is not None:
        lib_dir = f"{job.remote_dir}/lib/arm64-v8a"
        adsp = decision.adsp_library_path(f"{job.remote_dir}/lib/hexagon-{choice.dsp_arch}", None)
        trace = job.record_dir / benchrecord.record_name(dev.serial, graph).replace(".json", "-trace.json")
        where = runner.NetRun(f"{g.workdir}/npu", f"{job.remote_dir}/{choice.paths[graph]}", lib_dir, adsp, g.native)
        taken, said = opprofile.profile_for_bench(
            dev, graph, where, options.profile, trace,
            viewer=opprofile.find_viewer(options.profile_viewer, job.sdk_root), model=job.cpu_model(graph))
        profile = taken.record() if taken is not None else None
        notes += said
    conditions = Conditions(charging, screen, start.level, end.level, start.temperature_c, end.temperature_c,
                            start.status, end.status, start.source)
    return BenchRecord(
        BENCH_RECORD, benchrecord.RECORD_VERSION,
        datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"), __version__,
        {"name": job.manifest.name, "version": job.manifest.version, "qairt": job.manifest.qairt.version,
         "qairt_build": job.manifest.qairt.build, "manifest_sha256": job.manifest_sha256,
         "runtime_version": job.runtime_version},
        {"serial": dev.serial, "model": props.get("ro.product.model", ""),
         "manufacturer": props.get("ro.product.manufacturer", ""), "soc": choice.soc,
         "sdk_int": decision.DeviceIdentity.from_props(props).sdk_int or None,
         "fingerprint": props.get("ro.build.fingerprint") or None},
        {"provider": str(choice.provider), "npu_source": str(choice.npu_source) if choice.npu_source else None,
         "reason_key": choice.reason_key, "dsp_arch": choice.dsp_arch, "soc_id": choice.soc_id},
        graph,
        {"runs": options.runs, "blocks": len(npu_blocks), "minutes": options.minutes, "perf_mode": mode,
         "perf_modes": list(options.perf_modes), "cpu_threads": options.cpu_threads,
         "input_seconds": options.input_seconds,
         "npu_tool": ORT_QNN_TOOL if g.on_device else NPU_TOOL, "cpu_tool": CPU_TOOL,
         "sample_s": SAMPLE_S},
        conditions, {"npu": npu, "cpu": cpu}, ratios, _spread(npu_blocks, cpu_blocks), sustained, sweep, profile,
        None, notes)


def _ms(value: float | None) -> str:
    return f"{value:.2f} ms" if value is not None else "- ms"


def bench_all(job: DeviceJob, options: Options, say: Say = lambda _line: None) -> list[PhoneBench]:
    """Every device the adb server knows, in parallel; a phone that fails does not stop the others."""
    entries = list_devices(job.timeout)
    if not entries:
        raise BadInput("no device connected: plug in a phone with USB debugging on (or `adb connect "
                       "HOST:PORT`) and check `adb devices`")

    def one(serial: str) -> PhoneBench:
        try:
            return bench_device(job, options, serial, say)
        except BadInput:
            raise
        except QnnDeployError as e:
            return PhoneBench(serial, error=str(e))

    with Pool(max_workers=len(entries)) as pool:
        return list(pool.map(one, [e.serial for e in entries]))

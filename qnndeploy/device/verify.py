"""`device verify`: put a bundle on a phone the way the app would use it, prove it there, and record the result.

For each phone: the same decision as the app's Kotlin selector (qnndeploy.decide.decision) picks the target; its files,
the CPU fallback and the runtime libraries for its arch go to /data/local/tmp/qnndeploy/<name>-<version>/ with
Device.push_folder (only what differs is sent, through a staging folder, every sha256 checked on the phone).
With a runner (qnn-net-run), each graph's context binary runs there on generated or given inputs, and its outputs
are compared with the bundle's CPU model run on this host by onnxruntime, with validate's metrics and thresholds.
Loading the QNN libraries is the step of the decision only the phone can answer: the runner answers it.

A phone whose SoC has no bundle target but whose HTP arch the bundle validated gets the on-device path
(npu_source "on-device"): the app compiles the ONNX with the QNN EP at first run. With an ORT runner
(onnxruntime_perf_test, device/ortrunner.py) that compile runs on the phone with the app's very session and EP
options: a first run compiles and writes the EP context (timed: the first-compile time, against the bundle's
budget), a second run opens the cached context as a later app start does (the run time). With qnn-net-run as well,
the context binary the phone compiled runs through it once more and its outputs are compared with the CPU model's,
with validate's metrics, as for a bundle's own context binaries.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import shlex
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from qnndeploy import __version__
from qnndeploy.base.errors import BadInput, QnnDeployError
from qnndeploy.base.fileio import JSON, ByteProgress, sha256_file, write_json
from qnndeploy.base.pool import Pool
from qnndeploy.decide import decision
from qnndeploy.device import opprofile, ortrunner, runner
from qnndeploy.device.adb import FILES, Device, LocalFile, MiB, Upload, connect, list_devices
from qnndeploy.device.runner import Clock
from qnndeploy.formats import benchrecord, playplan
from qnndeploy.formats.benchrecord import Launch
from qnndeploy.formats.devicerecord import DeviceRecord
from qnndeploy.formats.manifest import FileFormat, Graph, Manifest, Provider
from qnndeploy.formats.records import ValidationRecord
from qnndeploy.model import metrics, samples, tasks
from qnndeploy.model.samples import Sample
from qnndeploy.qnn import epcontext, markers, ondevice

REMOTE_ROOT = "/data/local/tmp/qnndeploy"
DEFAULT_RECORD_DIR = Path("device-records")
CPU_EXPECTED = "CPU fallback expected"
NPU_EXPECTED = "NPU expected, if the QNN libraries load (not run: no runner)"
NPU_RAN = "NPU: the QNN libraries loaded and every context binary ran on the phone"
NPU_WRONG = "NPU: the context binaries ran on the phone, but their outputs differ from the CPU model's"
NPU_FAILED = "NPU target, but it failed on the phone: the app would fall back to the CPU"
TIMING_NOTE = ("first run: one qnn-net-run process with one inference at --profiling_level basic (start, context "
               "load, inference); "
               "per inference: (time of an N-inference run - first run) / (N - 1)")
ON_DEVICE_EXPECTED = ("NPU expected, compiled on the phone at first run, if the QNN libraries load (not run: no ORT "
                      "runner)")
ON_DEVICE_RAN = "NPU, compiled on the phone: the QNN EP compiled every graph there and ran it"
ON_DEVICE_PASSED = ("NPU, compiled on the phone: the QNN EP compiled every graph there, and its outputs match the "
                    "CPU model's")
ON_DEVICE_WRONG = "NPU, compiled on the phone, but its outputs differ from the CPU model's"
ON_DEVICE_FAILED = "NPU on-device compile, but it failed on the phone: the app would fall back to the CPU"


class VerifyOutcome(StrEnum):
    """What a phone's device verify proved, worst first: the exit code follows it (1, 4, 0)."""

    FAILED = "failed"  # the phone or a graph failed (exit 1)
    NOT_RUN = "not run"  # the files were pushed and checked, but some graph ran nowhere on the phone (exit 4)
    RAN = "ran"  # every graph ran on the phone, at least one not compared with the CPU model (exit 0)
    PASSED = "passed"  # every graph ran on the phone and matches the CPU model (exit 0)


ON_DEVICE_TIMING_NOTE = ("on-device: compile_s is the first onnxruntime_perf_test run's session creation (load and "
                         "compile the ONNX, write the EP context); cache_load_s the second run's, which opens the "
                         "cached context as a later app start does; per_inference_s that run's average of N "
                         "inferences after one warm-up")


@dataclass
class PushFigures:
    files: int
    bytes_total: int
    sent: list[str]
    bytes_sent: int
    unchanged: int
    removed: list[str]
    seconds: float
    mb_per_s: float | None  # bytes sent / seconds of the whole push (hashing on the phone included)


class GraphStatus(StrEnum):
    """What a graph's run on a phone came to."""

    PASSED = "passed"  # ran and matches the CPU model
    FAILED = "failed"  # ran and differs from the CPU model
    ERROR = "error"  # the tool could not run it
    RAN = "ran"  # ran, not compared with the CPU model
    NOT_RUN = "not run"  # nothing ran it on the phone; its reason says why


NOT_RUN = GraphStatus.NOT_RUN  # as the command line names it


@dataclass
class GraphRun:
    graph: str
    context: str  # on the phone
    status: GraphStatus
    reason: str | None = None
    ran_on: Provider | None = None  # where it ran: the phone's HTP or its CPU; None when it did not run
    samples: int = 0
    inputs: JSON | None = None  # how the inputs were made (random, seeded; or the files of --inputs)
    inferences: int = 0
    first_run_s: float | None = None
    per_inference_s: float | None = None
    clock: Clock | None = None
    outputs: list[metrics.OutputMetrics] = field(default_factory=list)
    thresholds: metrics.Thresholds | None = None  # validate's, for the target's precision
    task: JSON | None = None  # the task's verdict (tasks.TaskVerdict), which decides for its output
    advice: list[runner.Advice] = field(default_factory=list)
    log_tail: str | None = None
    hosted: JSON | None = None  # device verify --aihub: the AI Hub job (id, url) and its profile figures
    on_device: OnDeviceRun | None = None  # the on-device path: the QNN EP's compile and runs on the phone
    launch: Launch | None = None  # its first launch, cold and warm (benchrecord.LAUNCH_NOTE); None: not run


@dataclass
class OnDeviceRun:
    """One graph compiled on the phone by the QNN EP (onnxruntime_perf_test), as the app's first run does, then
    opened from the cache it wrote, as the app's later runs do."""

    model: str  # the bundle's ONNX that was compiled, on the phone
    cache: str  # the EP context the compile wrote (<graph>_ctx.onnx), on the phone
    provider_options: dict[str, str]  # the QNN EP options of the session, the glue's
    session_config: dict[str, str]  # the session configuration entries of the first (compiling) run
    compile_s: float | None = None  # the first run's session creation: the first compile
    first_inference_ms: float | None = None  # the first run's warm-up inference
    cache_load_s: float | None = None  # the second run's session creation: the cache hit
    per_inference_s: float | None = None  # the second run's average inference
    inferences: int = 0
    binary: str | None = None  # the context binary the EP compiled, as its EPContext model names it


@dataclass
class PlayCheck:
    """Which device group of a `package play` output Play gives this phone, against the one the decision needs."""

    manufacturer: str | None  # ro.soc.manufacturer = Build.SOC_MANUFACTURER, as Play matches it
    model: str | None  # ro.soc.model = Build.SOC_MODEL
    delivered: str  # the group Play delivers, by the device targeting config in the output folder
    expected: str  # the group holding the bundle target the decision picks for this SoC
    ok: bool
    reason: str


@dataclass
class DeviceVerification:
    serial: str
    ok: bool = False
    error: str | None = None  # why this device could not be verified (--all keeps going)
    model: str = ""
    android_release: str = ""
    sdk: int | None = None
    soc: str | None = None
    identified_by: str | None = None
    dsp_arch: str | None = None
    provider: Provider | None = None  # as the app would choose
    npu_source: str | None = None  # on the NPU: "prebuilt" (the bundle's context binaries) or "on-device"
    compile_budget_s: float | None = None  # on-device: the first compile's budget in the app (the manifest's)
    compile_s: float | None = None  # on-device, with an ORT runner: every graph's first compile on the phone, summed
    reason: str | None = None
    expectation: str | None = None
    remote_dir: str | None = None
    push: PushFigures | None = None
    runner: str | None = None
    ort_runner: str | None = None  # on-device: onnxruntime_perf_test on the phone
    runner_note: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    graphs: list[GraphRun] = field(default_factory=list)
    play: PlayCheck | None = None
    record: Path | None = None
    outcome: VerifyOutcome = VerifyOutcome.FAILED  # what was proven: ok and every graph ran (passed, ran), or not run
    stand_in: bool = False  # a tool printed STAND-IN: the emulated phone of the tests, the host's times



@dataclass(frozen=True, kw_only=True)
class PhoneRequest:
    """A bundle on phones, as device verify and device bench take it: which phones (`serial`, else $ANDROID_SERIAL,
    else the only one connected; every connected one with `all_devices`; AI Hub's with `aihub`, by name or SoC),
    what runs there and with which samples, and where the records go. `bundle` is the path the user named (the
    archive, when the job runs from its extraction)."""

    bundle: Path
    serial: str | None = None
    all_devices: bool = False
    aihub: bool = False
    hosted_names: Sequence[str] = ()
    hosted_socs: Sequence[str] = ()
    runner: Path | None = None
    ort_runner: Path | None = None
    qnn_sdk_root: Path | None = None
    inputs: Path | None = None
    preprocess: str | Path | None = None
    random: int | None = None
    seed: int = 0
    ranges: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    runs: int = 10
    record_dir: Path = DEFAULT_RECORD_DIR
    play: Path | None = None
    timeout: float | None = None
    allow_unchecked: bool = False


class DeviceJob:
    """What every phone of one `device verify` shares: the checked bundle, the runner and the CPU references."""

    def __init__(self, bundle: Path, manifest: Manifest, request: PhoneRequest) -> None:
        """`bundle`: the folder the files are pushed from (an archive's extraction); `request` what was asked."""
        r = request
        self.preprocess = samples.sample_source(r.inputs, r.random, r.preprocess)  # the samples validate would take
        if r.runs < 1:
            raise BadInput("--runs must be 1 or more")
        sdk_root = r.qnn_sdk_root
        env_sdk = os.environ.get("QNN_SDK_ROOT")
        if r.runner is None and sdk_root is None and env_sdk and (Path(env_sdk) / runner.SDK_RUNNER).is_file():
            sdk_root = Path(env_sdk)  # as compile does: the SDK set up with envsetup.sh
        self.bundle, self.manifest = Path(bundle), manifest
        self.given = Path(r.bundle)  # what the user named: the archive, when `bundle` is its extraction
        self.runner = runner.find_runner(r.runner, sdk_root)
        self.runner_sha256 = None
        if self.runner is not None:
            found = markers.Scanner()
            self.runner_sha256 = sha256_file(self.runner, scan=found)
            _same_qairt(manifest, self.runner, found.builds)
        self.ort_runner = ortrunner.find_ort_runner(r.ort_runner)
        self.ort_runner_sha256 = sha256_file(self.ort_runner) if self.ort_runner is not None else None
        self.sdk_root = Path(sdk_root) if sdk_root else None
        self.viewer = opprofile.find_viewer(None, self.sdk_root)  # qnn-net-run's session start (the SDK's viewer)
        if (self.runner or self.ort_runner) and not manifest.runtime.bundled and self.sdk_root is None:
            raise BadInput(f"the bundle uses an external runtime ({manifest.runtime.maven}): the runner "
                           "needs the QNN libraries, pass --qnn-sdk-root DIR of that QAIRT version")
        self.inputs, self.samples, self.seed, self.runs = r.inputs, r.random or 1, r.seed, r.runs
        self.ranges = dict(r.ranges)  # --range: integer inputs' values for random samples
        self.timeout = r.timeout  # --timeout: replaces every adb step's deadline (None: each step's default)
        self.record_dir = Path(r.record_dir)
        self.bundle_id = f"{manifest.name}-{manifest.version}"
        self.remote_dir = f"{REMOTE_ROOT}/{self.bundle_id}"
        self.sha256 = {e.path: e.sha256 for _, e in manifest.files()}
        self.manifest_sha256 = sha256_file(self.bundle / "manifest.json")  # every phone gets these very bytes
        self.play_plan: playplan.PlayPlan | None = None
        self.play_groups: list[playplan.PlayGroup] = []
        if r.play is not None:
            # the targeting config Play reads is evaluated, not the plan's copy of it: a hand edit counts
            self.play_plan, self.play_groups = playplan.read_plan_of(r.play, self.bundle), playplan.read_config(r.play)
        backend = decision.bundled_backend(manifest)  # its version, as the app's glue reads it; external: unknown
        self.runtime_version = markers.library_version(self.bundle / backend) if backend else None
        self._libs: dict[str, dict[str, LocalFile]] = {}
        self._libs_lock = threading.Lock()
        self._refs: dict[str, tuple[list[Sample], list[Sample], JSON]] = {}
        self._lock = threading.Lock()

    def runtime_libs(self, arch: str) -> dict[str, LocalFile]:
        """The QNN libraries an NPU run on `arch` needs; SDK files are hashed and checked once, for every phone."""
        with self._libs_lock:
            if arch not in self._libs:
                self._libs[arch] = _runtime_libs(self, arch)
            return self._libs[arch]

    def reference(self, graph: str) -> tuple[list[Sample], list[Sample], JSON]:
        """(input samples, CPU outputs, how the inputs were made) for a graph; computed once, shared by phones."""

        with self._lock:
            if graph not in self._refs:
                self._refs[graph] = samples.reference(self.cpu_model(graph), graph, self.inputs, self.samples,
                                                      self.seed, self.preprocess, self.ranges)
            return self._refs[graph]

    def judge(self, run: GraphRun, graph: str, soc: str | None, expected: list[Sample], actual: list[Sample],
              limits: metrics.Thresholds) -> None:
        """Judge a run as validate judged the graph: the task its bundled validation record names (else the one
        its graph makes plain) decides for its output, the tensor rules for the others."""
        model = self.cpu_model(graph)
        given = None
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):  # no record, or not ours
            record = ValidationRecord.read(self.bundle / "records" / f"{graph}-{soc}-validation.json")
            given = record.task_given if record is not None else None
        run.outputs, verdict, passed = tasks.judge(tasks.recorded(given, model), model, expected, actual, limits)
        run.task = verdict.json() if verdict else None
        run.status = GraphStatus.PASSED if passed else GraphStatus.FAILED

    def manifest_graph(self, graph: str) -> Graph:
        return next(g for g in self.manifest.graphs if g.name == graph)

    def cpu_model(self, graph: str) -> Path:
        return next(self.bundle / a.path for a in self.manifest.cpu if a.graph == graph
                    and a.format == FileFormat.ONNX)


def play_check(plan: playplan.PlayPlan, groups: list[playplan.PlayGroup], props: dict[str, str], soc: str | None,
               files: list[str] | None = None, on_device: bool = False) -> PlayCheck:
    """Play's group for a phone from its SoC props, against the decision's; when they differ, why. `files`: the
    bundle files the decision needs, which the delivered group and the base module must hold between them;
    `on_device`: the decision compiles on the phone (its models are the base's)."""
    phone = decision.DeviceIdentity.from_props(props)
    manufacturer, model = props.get("ro.soc.manufacturer") or None, props.get("ro.soc.model") or None
    delivered = playplan.play_group(groups, manufacturer, model, phone.sdk_int, plan.default_group)
    expected = playplan.expected_group(plan, soc)
    said = f"ro.soc.manufacturer {manufacturer!r}, ro.soc.model {model!r}"
    if delivered == expected:
        held = {f.path for f in plan.installed}
        held |= {f.path for g in plan.groups if g.name == delivered for f in g.files}
        missing = [f for f in files or [] if f not in held]
        if missing:
            return PlayCheck(manufacturer, model, delivered, expected, False,
                             f"Play delivers group {delivered} ({said}), the group the decision expects, but neither "
                             f"it nor the base module and CPU packs hold {', '.join(missing)}: run qnndeploy package "
                             "play on this bundle again")
        how = (": no NPU file; the NPU models are the base module's ONNX, compiled on the phone (on-device)"
               if on_device else "")
        return PlayCheck(manufacturer, model, delivered, expected, True,
                         f"Play delivers group {delivered} ({said}), the group the decision expects{how}")
    if phone.sdk_int < playplan.SOC_TARGETING_SINCE_SDK:
        why = f"Play targets SoCs only from Android 12 (API 31) and this phone is API {phone.sdk_int}"
    elif manufacturer is None or model is None:
        why = "the phone reports no ro.soc.manufacturer or ro.soc.model, so no system-on-chip selector matches it"
    elif expected == plan.default_group:
        why = f"a selector of group {delivered} matches this phone, but its SoC is in no bundle target"
    else:
        listed = sorted({f"{c.manufacturer}/{c.model}" for g in groups if g.name == expected
                         for sel in g.selectors for c in sel})
        why = f"Play compares exactly, and group {expected} lists {', '.join(listed) or 'no SoC'}"
    return PlayCheck(manufacturer, model, delivered, expected, False,
                     f"Play would deliver group {delivered} ({said}) but the decision expects group {expected} for "
                     f"SoC {soc or 'unknown'}: {why}; the app would run on the CPU")


# --- one phone -------------------------------------------------------------------------------------------------

def verify_device(job: DeviceJob, serial: str | None = None, progress: ByteProgress | None = None,
                  steps: Callable[[str], None] | None = None) -> DeviceVerification:
    """Decide, push, check, run (with a runner) and record, on one phone. Raises QnnDeployError when the phone
    cannot be used or the connection is lost (running again resumes the push). `steps`: told of each long step
    (the CPU references, the push, each graph's run) as it starts."""
    say = steps or (lambda _text: None)
    dev = connect(serial, job.timeout)
    props = dev.getprops()
    phone = decision.DeviceIdentity.from_props(props)
    result = DeviceVerification(dev.serial, model=props.get("ro.product.model", ""),
                                android_release=props.get("ro.build.version.release", ""),
                                sdk=phone.sdk_int or None, remote_dir=job.remote_dir)
    # The library loads are what the runner proves on the phone; the decision assumes they succeed.
    choice = decision.decide(job.manifest, phone, load_errors={}, lib_dir="", runtime_version=job.runtime_version)
    result.soc, result.identified_by, result.reason = choice.soc, choice.identified_by, choice.reason
    result.provider, result.dsp_arch = choice.provider, choice.dsp_arch
    on_device = choice.npu_source == decision.NpuSource.ON_DEVICE
    result.npu_source = str(choice.npu_source) if choice.npu_source is not None else None
    result.compile_budget_s = choice.compile_budget_s
    result.expectation = (ON_DEVICE_EXPECTED if on_device else NPU_EXPECTED) if choice.npu else CPU_EXPECTED
    if job.play_plan is not None:
        result.play = play_check(job.play_plan, job.play_groups, props, choice.soc, choice.files, on_device)

    wanted = [g for g in choice.paths  # the graphs a runner will run: their references, CPU graphs' samples
              if (job.ort_runner is not None if not choice.npu or g in choice.cpu_graphs
                  else job.runner is not None or (on_device and job.ort_runner is not None))]
    if wanted:
        say("running the CPU models here on the samples (the reference)")
        for graph in wanted:
            job.reference(graph)  # unusable --inputs fail here, before anything is pushed
    say(f"{dev.serial}: pushing {job.bundle_id} to {job.remote_dir}")
    result.push = push_bundle(dev, job, choice, progress)

    if on_device:
        say(f"{dev.serial}: compiling and running the graphs on the phone")
        _verify_on_device(dev, job, choice, result)
    elif choice.npu and job.runner is not None:
        lib_dir = f"{job.remote_dir}/lib/arm64-v8a"
        skel_dir = f"{job.remote_dir}/lib/hexagon-{choice.dsp_arch}"
        result.environment = {"LD_LIBRARY_PATH": lib_dir,
                              decision.ADSP_VAR: decision.adsp_library_path(skel_dir, None)}
        result.runner = runner.REMOTE_RUNNER
        assert job.runner_sha256 is not None  # hashed with the runner, in DeviceJob()
        runner.install(dev, job.runner, job.runner_sha256)
        if job.viewer is not None:
            runner.install(dev, job.viewer, sha256_file(job.viewer), opprofile.REMOTE_VIEWER)
        graphs_of = {a.path: a.served for t in job.manifest.targets for a in t.artifacts}
        for graph, context in choice.paths.items():
            if graph in choice.cpu_graphs:  # a split model's CPU part: no context binary to run
                continue
            say(f"{dev.serial}: running {graph} ({context}) on the phone with qnn-net-run")
            result.graphs.append(_run_graph(dev, job, graph, f"{job.remote_dir}/{context}", result,
                                            graphs_of.get(context, [graph])))
    elif choice.npu:
        result.runner_note = ("no runner: pass --runner PATH or --qnn-sdk-root DIR to run the context binaries on "
                              "the phone and compare them with the CPU model")
    elif job.ort_runner is None:
        result.runner_note = ("CPU fallback on this phone: no context binary to run; --ort-runner PATH "
                              "(onnxruntime_perf_test) runs the CPU models on the phone's CPU")
    cpu_graphs = [g for g in choice.paths if not choice.npu or g in choice.cpu_graphs]
    if job.ort_runner is not None and cpu_graphs:  # the app's CPU path, on the phone's CPU as the app runs it
        assert job.ort_runner_sha256 is not None  # hashed with the runner, in DeviceJob()
        runner.install(dev, job.ort_runner, job.ort_runner_sha256, ortrunner.REMOTE_ORT_RUNNER)
        result.ort_runner = ortrunner.REMOTE_ORT_RUNNER
        for graph in cpu_graphs:
            result.graphs.append(_run_on_cpu(dev, job, graph, choice.paths[graph], choice, result))
    over_budget = (result.compile_s is not None and result.compile_budget_s is not None
                   and result.compile_s > result.compile_budget_s)
    add_not_run(result, choice, _why_not_run(job, choice, on_device))
    settle(result, failed=over_budget or (result.play is not None and not result.play.ok))
    ran = [g for g in result.graphs if g.ran_on == Provider.NPU]  # the NPU's graphs that ran: what the expectation says
    statuses = {g.status for g in ran}
    if on_device:
        _on_device_outcome(result, over_budget)
    elif ran:
        result.expectation = (NPU_FAILED if GraphStatus.ERROR in statuses
                              else NPU_WRONG if GraphStatus.FAILED in statuses else NPU_RAN)
    if choice.npu and not on_device:  # say what was observed here, not the decision's assumption that libraries load
        result.reason = f"SoC {choice.soc} ({choice.dsp_arch}) is in the bundle; " + (
            "the QNN libraries were not loaded here (no runner)" if not ran else
            "qnn-net-run could not run on the phone (see the graphs' advice)" if GraphStatus.ERROR in statuses else
            "qnn-net-run loaded the QNN libraries and ran every context binary")
    result.record = write_record(job, result)
    return result


def _why_not_run(job: DeviceJob, choice: decision.Decision, on_device: bool) -> str:
    """Why a graph of this decision did not run on the phone, with what would run it."""
    if not choice.npu:
        return (f"the app runs it on the CPU here ({choice.reason}); device verify runs context binaries and "
                "on-device compiles, not the CPU model: its files were pushed and checked")
    if on_device:
        return ("no ORT runner: pass --ort-runner PATH (onnxruntime_perf_test for Android arm64 with the QNN EP) to "
                "compile and run it on the phone")
    return "no runner: pass --runner PATH or --qnn-sdk-root DIR (qnn-net-run for aarch64-android) to run it on the NPU"


def add_not_run(result: DeviceVerification, choice: decision.Decision, why: str) -> None:
    """A "not run" entry, with why, for every graph of the decision that has none: the record lists every graph."""
    have = {g.graph for g in result.graphs}
    for graph, path in choice.paths.items():
        if graph in have:
            continue
        reason = why
        if choice.npu and graph in choice.cpu_graphs:
            reason = ("a split's CPU part: the app runs it with ONNX Runtime on the CPU; device verify runs the NPU "
                      "parts only")
        result.graphs.append(GraphRun(graph, f"{result.remote_dir}/{path}" if result.remote_dir else path,
                                      GraphStatus.NOT_RUN, reason))
    order = list(choice.paths)  # the decision's order (a split's parts in the pipeline's)
    result.graphs.sort(key=lambda g: order.index(g.graph) if g.graph in order else len(order))


def settle(result: DeviceVerification, failed: bool = False) -> None:
    """The phone's outcome from its graphs (and a failure found beside them: a budget, Play): any graph in error or
    failed, failed; else any graph not run (or none at all), not run; else passed, or ran when one was not
    compared. ok is true for passed and ran only: a phone where nothing ran is never ok."""
    statuses = {g.status for g in result.graphs}
    if failed or result.error or statuses & {GraphStatus.FAILED, GraphStatus.ERROR}:
        result.outcome = VerifyOutcome.FAILED
    elif not statuses or GraphStatus.NOT_RUN in statuses:
        result.outcome = VerifyOutcome.NOT_RUN
    else:
        result.outcome = VerifyOutcome.PASSED if statuses == {GraphStatus.PASSED} else VerifyOutcome.RAN
    result.ok = result.outcome in (VerifyOutcome.PASSED, VerifyOutcome.RAN)


def push_bundle(dev: Device, job: DeviceJob, choice: decision.Decision,
                progress: ByteProgress | None = None) -> PushFigures:
    """Put what the decision needs on the phone (its files, the CPU fallback, the runtime libraries of its arch, the
    manifest) in job.remote_dir, incrementally and atomically (Device.push_folder); what was sent."""
    files = {"manifest.json": LocalFile(job.bundle / "manifest.json", job.manifest_sha256)}
    for rel in [*choice.files, *(a.path for a in job.manifest.cpu)]:
        files[rel] = LocalFile(job.bundle / rel, job.sha256[rel])
    if choice.npu:
        assert choice.dsp_arch is not None  # an NPU decision names its target's arch
        files.update(job.runtime_libs(choice.dsp_arch))
    start = time.perf_counter()
    pushed = dev.push_folder(files, job.remote_dir, progress=progress)
    seconds = time.perf_counter() - start
    return PushFigures(
        files=len(files), bytes_total=sum(f.path.stat().st_size for f in files.values()), sent=pushed.sent,
        bytes_sent=pushed.bytes_sent, unchanged=len(pushed.unchanged), removed=pushed.removed,
        seconds=round(seconds, 4), mb_per_s=round(pushed.bytes_sent / seconds / 1e6, 2) if pushed.sent else None)


# --- the on-device path ------------------------------------------------------------------------------------------

def _verify_on_device(dev: Device, job: DeviceJob, choice: decision.Decision, result: DeviceVerification) -> None:
    """Compile each graph's ONNX on the phone with the QNN EP as the app does, run it from its cache, and (with
    qnn-net-run) compare the compiled binary's outputs with the CPU model's."""
    if job.ort_runner is None:
        result.runner_note = ("no ORT runner: pass --ort-runner PATH (onnxruntime_perf_test built for Android with "
                              "the QNN EP) to compile the ONNX on the phone as the app's QNN EP does, and --runner "
                              "qnn-net-run to compare its outputs with the CPU model")
        return
    assert choice.dsp_arch is not None and choice.soc_id is not None  # an on-device decision names both
    lib_dir = f"{job.remote_dir}/lib/arm64-v8a"
    result.environment = {"LD_LIBRARY_PATH": lib_dir, decision.ADSP_VAR: decision.adsp_library_path(
        f"{job.remote_dir}/lib/hexagon-{choice.dsp_arch}", None)}
    assert job.ort_runner_sha256 is not None  # hashed with the runner, in DeviceJob()
    runner.install(dev, job.ort_runner, job.ort_runner_sha256, ortrunner.REMOTE_ORT_RUNNER)
    result.ort_runner = ortrunner.REMOTE_ORT_RUNNER
    if job.runner is not None:
        assert job.runner_sha256 is not None
        runner.install(dev, job.runner, job.runner_sha256)
        result.runner = runner.REMOTE_RUNNER
    else:
        result.runner_note = ("no qnn-net-run: the graphs were compiled and run on the phone, their outputs not "
                              "compared with the CPU model (pass --runner PATH or --qnn-sdk-root DIR)")
    for graph, model in choice.paths.items():
        if graph not in choice.cpu_graphs:
            result.graphs.append(_run_on_device(dev, job, graph, model, result, choice))
    compiles = [g.on_device.compile_s for g in result.graphs if g.on_device is not None]
    if compiles and all(c is not None for c in compiles):
        result.compile_s = round(sum(c for c in compiles if c is not None), 4)


def _on_device_outcome(result: DeviceVerification, over_budget: bool) -> None:
    """The expectation and reason of an on-device phone: what was observed, not the decision's assumptions."""
    statuses = {g.status for g in result.graphs if g.ran_on == Provider.NPU}
    where = f"SoC {result.soc} ({result.dsp_arch}) has no bundle target; the bundle validated {result.dsp_arch}: "
    if not statuses:
        result.reason = where + "the ONNX was not compiled here (no ORT runner)"
        return
    if GraphStatus.ERROR in statuses:
        result.expectation = ON_DEVICE_FAILED
        result.reason = where + "the QNN EP could not compile or run it on the phone (see the graphs' advice)"
    elif over_budget:
        result.expectation = ON_DEVICE_FAILED
        result.reason = (where + f"the first compile took {result.compile_s:g} s on the phone, over the bundle's "
                         f"budget of {result.compile_budget_s:g} s: the app would stop it, remember the failure and "
                         "take the CPU")
    elif GraphStatus.FAILED in statuses:
        result.expectation = ON_DEVICE_WRONG
        result.reason = where + "the QNN EP compiled and ran it on the phone"
    else:
        result.expectation = ON_DEVICE_PASSED if statuses == {GraphStatus.PASSED} else ON_DEVICE_RAN
        budget = (f", within the budget of {result.compile_budget_s:g} s" if result.compile_budget_s is not None
                  else "")
        result.reason = (where + f"the QNN EP compiled it on the phone in {result.compile_s:g} s{budget}"
                         if result.compile_s is not None else where + "the QNN EP compiled it on the phone")


def _failure(run: GraphRun, what: str, failed: ortrunner.PerfRun | runner.Invocation, facts: dict[str, Any]) -> None:
    last = next((ln.strip() for ln in reversed(failed.output.splitlines()) if ln.strip()), "no output")
    run.reason = f"{what} exited with {failed.code}: {last[:200]}"
    run.advice = runner.diagnose(failed.output, **facts)
    run.log_tail = "\n".join(failed.output.splitlines()[-20:])


def _run_on_device(dev: Device, job: DeviceJob, graph: str, model: str, result: DeviceVerification,
                   choice: decision.Decision) -> GraphRun:
    """One graph: copy its ONNX (and external data) beside its test data, compile it with onnxruntime_perf_test
    into a fresh cache (the app's first run), run the cached EP context (a later run); with qnn-net-run, run the
    binary the EP compiled and compare it with the CPU model."""
    assert choice.dsp_arch is not None and choice.soc_id is not None
    workdir = f"{REMOTE_ROOT}/run/{job.bundle_id}/on-device/{graph}"  # not _run_graph's, which it empties
    name = posixpath.basename(model)
    model_dir, cache_dir = f"{workdir}/model", f"{workdir}/cache"
    cache = f"{cache_dir}/{graph}_ctx.onnx"
    provider = ortrunner.provider_options(choice.dsp_arch, choice.soc_id, choice.ep_options.get(graph, {}),
                                          job.manifest.htp_performance_mode)
    config = ortrunner.session_config(cache)
    run = GraphRun(graph, f"{job.remote_dir}/{model}", GraphStatus.ERROR,
                   on_device=OnDeviceRun(f"{job.remote_dir}/{model}", cache, provider, config))
    samples, _, run.inputs = job.reference(graph)
    facts: dict[str, Any] = {"adsp": result.environment[decision.ADSP_VAR], "soc": result.soc,
                             "arch": result.dsp_arch, "qairt": job.manifest.qairt.version}
    env = (result.environment["LD_LIBRARY_PATH"], result.environment[decision.ADSP_VAR])
    listed = {e.path: e for _, e in job.manifest.files()}
    # the model and the files beside it that it reads (its external data): the bundle files of this graph there
    beside = [p for p in choice.files if posixpath.dirname(p) == posixpath.dirname(model)
              and (p == model or (p in listed and listed[p].serves(graph)))]
    with tempfile.TemporaryDirectory(prefix="qnndeploy-ondevice-") as tmp:
        local = Path(tmp)
        inputs = [i.name for i in job.manifest_graph(graph).inputs]
        ortrunner.write_test_data(local / "up", samples, inputs)
        q = shlex.quote
        copies = " && ".join(f"cp {q(job.remote_dir + '/' + p)} {q(model_dir + '/' + posixpath.basename(p))}"
                             for p in beside)
        dev.run(f"rm -rf {q(workdir)} && mkdir -p {q(model_dir)} {q(cache_dir)} && {copies}", check=True,
                doing=f"preparing {workdir}", limit=FILES)
        ups = [(p, p.relative_to(local / "up").as_posix()) for p in sorted((local / "up").rglob("*")) if p.is_file()]
        dev.push_files([Upload(p, f"{model_dir}/{rel}", name=rel) for p, rel in ups])
        run.ran_on = Provider.NPU  # the QNN EP on the phone's HTP
        first = ortrunner.run(dev, workdir, *env, ortrunner.command(f"{model_dir}/{name}", provider, config, job.runs),
                              f"compiling {name} on the phone (onnxruntime_perf_test, QNN EP)")
        if first.code != 0 or first.session_s is None:
            _failure(run, "onnxruntime_perf_test", first, facts)
            return run
        od = run.on_device
        assert od is not None
        od.compile_s, od.first_inference_ms = round(first.session_s, 4), first.first_inference_ms
        found = dev.run(f"test -f {q(cache)} && cp -r {q(model_dir)}/test_data_set_* {q(cache_dir)}/",
                        doing=f"looking for the EP context {cache}", limit=FILES)
        if found.code != 0:
            run.reason = (f"the QNN EP compiled {name} but wrote no EP context at {cache} (ep.context_file_path): "
                          "the app could not cache it")
            return run
        again = ortrunner.run(dev, workdir, *env, ortrunner.command(cache, provider, ortrunner.session_config(None),
                                                                    job.runs),
                              f"opening the cached EP context of {graph} (onnxruntime_perf_test)")
        if again.code != 0 or again.session_s is None:
            _failure(run, "onnxruntime_perf_test on the cached EP context", again, facts)
            return run
        od.cache_load_s = round(again.session_s, 4)
        run.launch = Launch(*(_ms(p.session_s, 0) for p in (first, again)),
                            *(_ms(p.session_s, p.first_inference_ms) for p in (first, again)))
        result.stand_in |= any(benchrecord.STAND_IN in p.output for p in (first, again))
        od.per_inference_s = round(again.average_ms / 1000, 6) if again.average_ms is not None else None
        od.inferences = again.requests or 0
        run.clock, run.samples = again.clock, len(samples)
        run.first_run_s = round(first.session_s + (first.first_inference_ms or 0) / 1000, 4)
        run.per_inference_s = od.per_inference_s
        dev.pull(cache, local / "ctx.onnx", max_bytes=16 * MiB)
        try:  # the phone's file: a model that does not parse is the phone's failure, not this run's
            refs = epcontext.context_refs(local / "ctx.onnx")
        except QnnDeployError as e:
            run.reason = f"the EP context the QNN EP wrote at {cache} is not an ONNX model ({e})"
            return run
        od.binary = f"{cache_dir}/{posixpath.basename(refs[0])}" if refs else None
    if job.runner is None:
        run.status = GraphStatus.RAN
        return run
    if od.binary is None:
        run.reason = (f"the EP context {cache} embeds its binary: qnn-net-run needs it as a file "
                      "(ep.context_embed_mode 0)")
        return run
    # fp16's thresholds for a float model the EP runs in fp16 (the QNN EP's default), else the quantized ones
    compared = _run_graph(dev, job, graph, od.binary, result, [graph],
                          precision=ondevice.precision_of(choice.ep_options.get(graph, {})), launch=False)
    compared.on_device, compared.context = od, run.context
    compared.first_run_s, compared.per_inference_s, compared.clock = run.first_run_s, run.per_inference_s, run.clock
    compared.launch = run.launch  # the app's launch is the EP's, not qnn-net-run's comparison run
    return compared


def _beside(job: DeviceJob, choice: decision.Decision, graph: str, model: str) -> list[str]:
    """The model and the files beside it that it reads (its external data): the bundle files of this graph there."""
    listed = {e.path: e for _, e in job.manifest.files()}
    return [p for p in [*choice.files, *(a.path for a in job.manifest.cpu)]
            if posixpath.dirname(p) == posixpath.dirname(model) and (p == model or (p in listed
                                                                                   and listed[p].serves(graph)))]


def _run_on_cpu(dev: Device, job: DeviceJob, graph: str, model: str, choice: decision.Decision,
                result: DeviceVerification) -> GraphRun:
    """One graph's CPU model on the phone's CPU, as the app's CPU path runs it: onnxruntime_perf_test -e cpu on the
    pushed model (its copy beside the test data), one warm-up inference then N. Its outputs are not compared: the
    tool writes none."""
    workdir = f"{REMOTE_ROOT}/run/{job.bundle_id}/cpu/{graph}"
    model_dir = f"{workdir}/model"
    run = GraphRun(graph, f"{job.remote_dir}/{model}", GraphStatus.ERROR, ran_on=Provider.CPU)
    samples, _, run.inputs = job.reference(graph)
    q = shlex.quote
    copies = " && ".join(f"cp {q(job.remote_dir + '/' + p)} {q(model_dir + '/' + posixpath.basename(p))}"
                         for p in dict.fromkeys(_beside(job, choice, graph, model)))
    with tempfile.TemporaryDirectory(prefix="qnndeploy-cpu-") as tmp:
        local = Path(tmp)
        ortrunner.write_test_data(local / "up", samples, [i.name for i in job.manifest_graph(graph).inputs])
        dev.run(f"rm -rf {q(workdir)} && mkdir -p {q(model_dir)} && {copies}", check=True,
                doing=f"preparing {workdir}", limit=FILES)
        ups = [(p, p.relative_to(local / "up").as_posix()) for p in sorted((local / "up").rglob("*")) if p.is_file()]
        dev.push_files([Upload(p, f"{model_dir}/{rel}", name=rel) for p, rel in ups])
    argv = [ortrunner.REMOTE_ORT_RUNNER, "-e", "cpu", "-m", "times", "-r", str(job.runs),
            f"{model_dir}/{posixpath.basename(model)}"]
    done = ortrunner.run(dev, workdir, "", "", argv, f"running {graph} on the phone's CPU (onnxruntime_perf_test -e "
                                                      "cpu)")
    if done.code != 0 or done.session_s is None:
        _failure(run, "onnxruntime_perf_test -e cpu", done, {"adsp": "", "soc": choice.soc, "arch": None,
                                                              "qairt": job.manifest.qairt.version})
        return run
    run.status, run.clock, run.samples, run.inferences = GraphStatus.RAN, done.clock, len(samples), done.requests or 0
    run.reason = "ran on the phone's CPU (onnxruntime_perf_test -e cpu); outputs not compared: the tool writes none"
    run.first_run_s = round(done.session_s + (done.first_inference_ms or 0) / 1000, 4)
    run.per_inference_s = round(done.average_ms / 1000, 6) if done.average_ms is not None else None
    again = ortrunner.run(dev, workdir, "", "", argv, f"running {graph} on the phone's CPU again (warm)")
    warm = again if again.code == 0 else None
    run.launch = Launch(_ms(done.session_s, 0), _ms(warm.session_s, 0) if warm else None,
                        _ms(done.session_s, done.first_inference_ms),
                        _ms(warm.session_s, warm.first_inference_ms) if warm else None)
    result.stand_in |= any(benchrecord.STAND_IN in p.output for p in (done, again))
    return run


def _ms(session_s: float | None, then_ms: float | None) -> float | None:
    """onnxruntime_perf_test's session creation (s) + `then_ms`, in ms: its session start (then_ms 0), or its first
    result (then_ms its first inference); None when either was not printed."""
    return round(session_s * 1000 + then_ms, 3) if session_s is not None and then_ms is not None else None


def _runtime_libs(job: DeviceJob, arch: str) -> dict[str, LocalFile]:
    """The QNN libraries an NPU run needs for one arch: the bundle's own, or (external runtime) the SDK's."""
    runtime = job.manifest.runtime
    if runtime.bundled:
        return {lib.path: LocalFile(job.bundle / lib.path, lib.sha256) for lib in runtime.libs
                if lib.abi == f"hexagon-{arch}" or (lib.abi == "arm64-v8a" and (lib.dsp_arch or arch) == arch)}
    if job.sdk_root is None:
        return {}  # nothing to run them with: the app gets them from Maven
    backend, system, stub, skel = decision.qnn_libraries(arch)
    wanted = {f"lib/arm64-v8a/{n}": job.sdk_root / "lib/aarch64-android" / n for n in (backend, system, stub)}
    wanted[f"lib/hexagon-{arch}/{skel}"] = job.sdk_root / f"lib/hexagon-{arch}/unsigned" / skel
    missing = [str(p) for p in wanted.values() if not p.is_file()]
    if missing:
        raise BadInput(f"the QAIRT SDK at {job.sdk_root} has no {missing[0]}: the runner needs it")
    files = {}
    for rel, p in wanted.items():
        found = markers.Scanner()
        files[rel] = LocalFile(p, sha256_file(p, scan=found))
        _same_qairt(job.manifest, p, found.builds)
    return files


def _same_qairt(manifest: Manifest, path: Path, builds: set[str]) -> None:
    """The phone must run the QAIRT the context binaries were compiled with (else error 5000, "Unsupported context
    binary version"): refuse SDK files that say they are another version."""
    want = manifest.qairt.version
    other = sorted(b for b in builds if markers.build_version(b) != want)
    if other:
        raise BadInput(f"{path} is QAIRT {', '.join(other)} but the bundle was compiled with QAIRT {want}: "
                       f"use the QAIRT {want} SDK (a mismatch fails on the phone with error 5000, "
                       "'Unsupported context binary version')")


def _lists(graph: str, graphs: list[str], input_list: str) -> str:
    """qnn-net-run's --input_list for one graph of a context: one list per graph of the context, in its order,
    "__" for a graph not to run."""
    return ",".join(input_list if g == graph else "__" for g in graphs)


def _run_graph(dev: Device, job: DeviceJob, graph: str, context: str, result: DeviceVerification,
               graphs: list[str], precision: str | None = None, launch: bool = True) -> GraphRun:
    """Run one graph of a context binary (one inference, then N; with `launch`, the one-inference runs at
    --profiling_level basic, and once more warm: the first-launch figures) on the phone and compare with the CPU
    outputs. `graphs`: the context's graphs, in order (one unless it is shared). `precision`: whose thresholds
    judge it (default: the chosen target's)."""
    run = GraphRun(graph, context, GraphStatus.ERROR)
    samples, expected, run.inputs = job.reference(graph)
    lines = max(job.runs, len(samples))
    workdir = f"{REMOTE_ROOT}/run/{job.bundle_id}/{graph}"
    # soc and arch are set: only an NPU decision runs graphs
    facts: dict[str, Any] = {"adsp": result.environment[decision.ADSP_VAR], "soc": result.soc,
                             "arch": result.dsp_arch, "qairt": job.manifest.qairt.version}
    env = (result.environment["LD_LIBRARY_PATH"], result.environment[decision.ADSP_VAR])
    with tempfile.TemporaryDirectory(prefix="qnndeploy-run-") as tmp:
        local = Path(tmp)
        native = runner.write_inputs(local / "up", samples, lines)
        dev.run(f"rm -rf {shlex.quote(workdir)} && mkdir -p {shlex.quote(workdir)}", check=True,
                doing=f"preparing {workdir}", limit=FILES)
        ups = [(p, p.relative_to(local / "up").as_posix()) for p in sorted((local / "up").rglob("*")) if p.is_file()]
        dev.push_files([Upload(p, f"{workdir}/{rel}", name=rel) for p, rel in ups])
        run.ran_on = Provider.NPU  # qnn-net-run on the phone's HTP: what it gave is judged below
        once = _lists(graph, graphs, runner.FIRST_INPUT)
        basic = ["--profiling_level", "basic"] if launch else []
        where = runner.NetRun(workdir, context, *env, native)
        first = runner.run(dev, where, once, "out_first", extra=basic)
        cold = _session(dev, job, workdir, "out_first", env[0]) if first.code == 0 and launch else None
        timed = first if first.code != 0 else runner.run(dev, where, _lists(graph, graphs, runner.INPUT_LIST))
        warm = runner.run(dev, where, once, "out_warm", extra=basic) if launch and timed.code == 0 else None
        failed = next((r for r in (first, timed, warm) if r is not None and r.code != 0), None)
        if failed is not None:
            last = next((ln.strip() for ln in reversed(failed.output.splitlines()) if ln.strip()), "no output")
            run.reason = f"qnn-net-run exited with {failed.code}: {last[:200]}"
            run.advice = runner.diagnose(failed.output, **facts)
            run.log_tail = "\n".join(failed.output.splitlines()[-20:])
            return run
        actual = []
        for i in range(len(samples)):
            outputs = {}
            for name, ref in expected[i].items():
                target = local / "down" / runner.output_file(i, name)
                # float32 outputs: more than a few times the model's size is no output of it (read_output says why)
                dev.pull(f"{workdir}/out/{runner.output_file(i, name)}", target, max_bytes=4 * ref.size * 4 + MiB)
                outputs[name] = runner.read_output(target, name, ref.shape)
            actual.append(outputs)
    if precision is None:
        precision = next(t.precision for t in job.manifest.targets if t.soc == result.soc)
    run.thresholds = limits = metrics.thresholds_for(precision)
    job.judge(run, graph, result.soc, expected, actual, limits)  # validate's verdict
    run.samples, run.inferences, run.clock = len(samples), lines, timed.clock
    run.first_run_s = round(first.seconds, 4)
    if warm is not None:
        run.launch = Launch(cold, _session(dev, job, workdir, "out_warm", env[0]),
                            *(round(r.first_output_s * 1000, 3) if r.first_output_s is not None else None
                              for r in (first, warm)))
        result.stand_in |= any(benchrecord.STAND_IN in r.output for r in (first, timed, warm))
    if lines > 1 and timed.seconds > first.seconds:
        run.per_inference_s = round((timed.seconds - first.seconds) / (lines - 1), 6)
    return run


def _session(dev: Device, job: DeviceJob, workdir: str, output_dir: str, lib_dir: str) -> float | None:
    """qnn-net-run's session start in a --profiling_level basic run's outputs, by the SDK's qnn-profile-viewer on
    the phone (opprofile.session_ms); None without a viewer or when it does not read."""
    if job.viewer is None:
        return None
    said = opprofile.session_ms(dev, workdir, output_dir, lib_dir)
    return round(said.value, 3) if said.value is not None else None


def write_record(job: DeviceJob, r: DeviceVerification) -> Path:
    """The device record, written atomically: what ran where, with which files, and how it went."""
    stamp = datetime.now(UTC)
    name = f"{job.bundle_id}_{re.sub(r'[^A-Za-z0-9_.-]', '_', r.serial)}_{stamp:%Y%m%dT%H%M%SZ}.json"
    path = job.record_dir / name
    write_json(path, DeviceRecord(
        r.ok, str(r.outcome),
        {"serial": r.serial, "model": r.model, "android_release": r.android_release, "sdk": r.sdk},
        {"model": r.soc, "identified_by": r.identified_by, "dsp_arch": r.dsp_arch},
        {"name": job.manifest.name, "version": job.manifest.version, "qairt_version": job.manifest.qairt.version,
         "qairt_build": job.manifest.qairt.build, "path": str(job.given.resolve())},
        {"provider": r.provider, "npu_source": r.npu_source, "compile_budget_s": r.compile_budget_s,
         "reason": r.reason, "expectation": r.expectation},
        {"remote_dir": r.remote_dir, **(asdict(r.push) if r.push else {})},
        {"path": r.runner, "local": str(job.runner) if job.runner else None, "note": r.runner_note,
         "environment": r.environment,
         "timing": (ON_DEVICE_TIMING_NOTE if r.ort_runner else TIMING_NOTE) if r.graphs else None,
         "ort": {"path": r.ort_runner, "local": str(job.ort_runner)} if r.ort_runner else None},
        {"compile_s": r.compile_s, "compile_budget_s": r.compile_budget_s} if r.ort_runner else None,
        {"note": benchrecord.LAUNCH_NOTE, "stand_in": benchrecord.STAND_IN_NOTE if r.stand_in else None}
        if any(g.launch for g in r.graphs) else None,
        tuple(asdict(g) for g in r.graphs), asdict(r.play) if r.play else None, __version__,
        stamp.isoformat(timespec="seconds")).to_json())
    return path


# --- every phone -----------------------------------------------------------------------------------------------

def verify_all(job: DeviceJob) -> list[DeviceVerification]:
    """Every device the adb server knows, in parallel; a phone that fails does not stop the others."""
    entries = list_devices(job.timeout)
    if not entries:
        raise BadInput("no device connected: plug in a phone with USB debugging on (or `adb connect "
                       "HOST:PORT`) and check `adb devices`")

    def one(serial: str) -> DeviceVerification:
        try:
            return verify_device(job, serial)
        except QnnDeployError as e:
            return DeviceVerification(serial, error=str(e))

    with Pool(max_workers=len(entries)) as pool:
        return list(pool.map(one, [e.serial for e in entries]))

"""`device verify`: put a bundle on a phone the way the app would use it, prove it there, and record the result.

For each phone: the same decision as the app's Kotlin selector (qnndeploy.formats.decision) picks the target; its files,
the CPU fallback and the runtime libraries for its arch go to /data/local/tmp/qnndeploy/<name>-<version>/ with
Device.push_folder (only what differs is sent, through a staging folder, every sha256 checked on the phone).
With a runner (qnn-net-run), each graph's context binary runs there on generated or given inputs, and its outputs
are compared with the bundle's CPU model run on this host by onnxruntime, with validate's metrics and thresholds.
Loading the QNN libraries is the step of the decision only the phone can answer: the runner answers it.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from qnndeploy import __version__
from qnndeploy.base.errors import BadInput, QnnDeployError
from qnndeploy.base.fileio import JSON, sha256_file, write_json
from qnndeploy.base.names import DEVICE_RECORD
from qnndeploy.base.pool import Pool
from qnndeploy.device import runner
from qnndeploy.device.adb import FILES, Device, LocalFile, MiB, Progress, Upload, connect, list_devices
from qnndeploy.formats import decision, playplan
from qnndeploy.formats.manifest import FileFormat, Manifest, Provider, load_manifest
from qnndeploy.formats.verify import VerifyReport, opened
from qnndeploy.model import metrics, samples
from qnndeploy.model.samples import Sample
from qnndeploy.qnn import markers

REMOTE_ROOT = "/data/local/tmp/qnndeploy"
RECORD = DEVICE_RECORD
RECORD_VERSION = 1
DEFAULT_RECORD_DIR = Path("device-records")
CPU_EXPECTED = "CPU fallback expected"
NPU_EXPECTED = "NPU expected, if the QNN libraries load (not run: no runner)"
NPU_RAN = "NPU: the QNN libraries loaded and every context binary ran on the phone"
NPU_WRONG = "NPU: the context binaries ran on the phone, but their outputs differ from the CPU model's"
NPU_FAILED = "NPU target, but it failed on the phone: the app would fall back to the CPU"
TIMING_NOTE = ("first run: one qnn-net-run process with one inference (start, context load, inference); "
               "per inference: (time of an N-inference run - first run) / (N - 1)")


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


@dataclass
class GraphRun:
    graph: str
    context: str  # on the phone
    status: str  # "passed" | "failed" | "error"
    reason: str | None = None
    samples: int = 0
    inputs: JSON | None = None  # how the inputs were made (random, seeded; or the files of --inputs)
    inferences: int = 0
    first_run_s: float | None = None
    per_inference_s: float | None = None
    clock: str | None = None  # "device" or "host"
    outputs: list[metrics.OutputMetrics] = field(default_factory=list)
    thresholds: metrics.Thresholds | None = None  # validate's, for the target's precision
    advice: list[runner.Advice] = field(default_factory=list)
    log_tail: str | None = None
    hosted: JSON | None = None  # device verify --aihub: the AI Hub job (id, url) and its profile figures


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
    reason: str | None = None
    expectation: str | None = None
    remote_dir: str | None = None
    push: PushFigures | None = None
    runner: str | None = None
    runner_note: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    graphs: list[GraphRun] = field(default_factory=list)
    play: PlayCheck | None = None
    record: Path | None = None


class Job:
    """What every phone of one `device verify` shares: the checked bundle, the runner and the CPU references."""

    def __init__(self, bundle: Path, manifest: Manifest, runner_path: Path | None = None, sdk_root: Path | None = None,
                 inputs: Path | None = None, random: int | None = None, seed: int = 0, runs: int = 10,
                 record_dir: Path = DEFAULT_RECORD_DIR, play: Path | None = None, timeout: float | None = None,
                 preprocess: str | Path | None = None, given: Path | None = None) -> None:
        self.preprocess = samples.sample_source(inputs, random, preprocess)  # the samples validate would take
        if runs < 1:
            raise BadInput("--runs must be 1 or more")
        env_sdk = os.environ.get("QNN_SDK_ROOT")
        if runner_path is None and sdk_root is None and env_sdk and (Path(env_sdk) / runner.SDK_RUNNER).is_file():
            sdk_root = Path(env_sdk)  # as compile does: the SDK set up with envsetup.sh
        self.bundle, self.manifest = Path(bundle), manifest
        self.given = Path(given or bundle)  # what the user named: the archive, when `bundle` is its extraction
        self.runner = runner.find_runner(runner_path, sdk_root)
        self.runner_sha256 = None
        if self.runner is not None:
            found = markers.Scanner()
            self.runner_sha256 = sha256_file(self.runner, scan=found)
            _same_qairt(manifest, self.runner, found.builds)
        self.sdk_root = Path(sdk_root) if sdk_root else None
        if self.runner and not manifest.runtime.bundled and self.sdk_root is None:
            raise BadInput(f"the bundle uses an external runtime ({manifest.runtime.maven}): the runner "
                           "needs the QNN libraries, pass --qnn-sdk-root DIR of that QAIRT version")
        self.inputs, self.samples, self.seed, self.runs = inputs, random or 1, seed, runs
        self.timeout = timeout  # --timeout: replaces every adb step's deadline (None: each step's default)
        self.record_dir = Path(record_dir)
        self.bundle_id = f"{manifest.name}-{manifest.version}"
        self.remote_dir = f"{REMOTE_ROOT}/{self.bundle_id}"
        self.sha256 = {e.path: e.sha256 for _, e in manifest.files()}
        self.manifest_sha256 = sha256_file(self.bundle / "manifest.json")  # every phone gets these very bytes
        self.play_plan: JSON | None = None
        self.play_groups: list[playplan.Group] = []
        if play is not None:
            # the targeting config Play reads is evaluated, not the plan's copy of it: a hand edit counts
            self.play_plan, self.play_groups = playplan.read_plan_of(play, self.bundle), playplan.read_config(play)
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
                                                      self.seed, self.preprocess)
            return self._refs[graph]

    def cpu_model(self, graph: str) -> Path:
        return next(self.bundle / a.path for a in self.manifest.cpu if a.graph == graph
                    and a.format == FileFormat.ONNX)


def play_check(plan: JSON, groups: list[playplan.Group], props: dict[str, str], soc: str | None) -> PlayCheck:
    """Play's group for a phone from its SoC props, against the decision's; when they differ, why."""
    phone = decision.Device.from_props(props)
    manufacturer, model = props.get("ro.soc.manufacturer") or None, props.get("ro.soc.model") or None
    delivered = playplan.play_group(groups, manufacturer, model, phone.sdk_int, plan["default_group"])
    expected = playplan.expected_group(plan, soc)
    said = f"ro.soc.manufacturer {manufacturer!r}, ro.soc.model {model!r}"
    if delivered == expected:
        return PlayCheck(manufacturer, model, delivered, expected, True,
                         f"Play delivers group {delivered} ({said}), the group the decision expects")
    if phone.sdk_int < playplan.SOC_TARGETING_SINCE_SDK:
        why = f"Play targets SoCs only from Android 12 (API 31) and this phone is API {phone.sdk_int}"
    elif manufacturer is None or model is None:
        why = "the phone reports no ro.soc.manufacturer or ro.soc.model, so no system-on-chip selector matches it"
    elif expected == plan["default_group"]:
        why = f"a selector of group {delivered} matches this phone, but its SoC is in no bundle target"
    else:
        listed = sorted({f"{c.manufacturer}/{c.model}" for g in groups if g.name == expected
                         for sel in g.selectors for c in sel})
        why = f"Play compares exactly, and group {expected} lists {', '.join(listed) or 'no SoC'}"
    return PlayCheck(manufacturer, model, delivered, expected, False,
                     f"Play would deliver group {delivered} ({said}) but the decision expects group {expected} for "
                     f"SoC {soc or 'unknown'}: {why}; the app would run on the CPU")


@contextmanager
def checked_bundle(path: Path, allow_unchecked: bool = False
                   ) -> Iterator[tuple[Path, VerifyReport, Manifest | None]]:
    """(the bundle folder, bundle verify's report, the manifest when the bundle is sound) for a bundle folder or a
    .tar.gz/.zip of one, which stays extracted while the caller pushes from it: nothing is pushed from a bad bundle.
    Not loaded on the host emulator: the phone runs the binaries itself."""

    with opened(Path(path), allow_unchecked=allow_unchecked) as (root, report):
        yield root, report, load_manifest(root) if report.ok else None


# --- one phone -------------------------------------------------------------------------------------------------

def verify_device(job: Job, serial: str | None = None, progress: Progress | None = None) -> DeviceVerification:
    """Decide, push, check, run (with a runner) and record, on one phone. Raises QnnDeployError when the phone
    cannot be used or the connection is lost (running again resumes the push)."""
    dev = connect(serial, job.timeout)
    props = dev.getprops()
    phone = decision.Device.from_props(props)
    result = DeviceVerification(dev.serial, model=props.get("ro.product.model", ""),
                                android_release=props.get("ro.build.version.release", ""),
                                sdk=phone.sdk_int or None, remote_dir=job.remote_dir)
    # The library loads are what the runner proves on the phone; the decision assumes they succeed.
    choice = decision.decide(job.manifest, phone, load_errors={}, lib_dir="", runtime_version=job.runtime_version)
    result.soc, result.identified_by, result.reason = choice.soc, choice.identified_by, choice.reason
    result.provider, result.dsp_arch = choice.provider, choice.dsp_arch
    result.expectation = NPU_EXPECTED if choice.npu else CPU_EXPECTED
    if job.play_plan is not None:
        result.play = play_check(job.play_plan, job.play_groups, props, choice.soc)

    files = {"manifest.json": LocalFile(job.bundle / "manifest.json", job.manifest_sha256)}
    for rel in [*choice.files, *(a.path for a in job.manifest.cpu)]:
        files[rel] = LocalFile(job.bundle / rel, job.sha256[rel])
    if choice.npu:
        assert choice.dsp_arch is not None  # an NPU decision names its target's arch
        files.update(job.runtime_libs(choice.dsp_arch))
        if job.runner is not None:
            for graph in choice.paths:
                if graph not in choice.cpu_graphs:
                    job.reference(graph)  # unusable --inputs fail here, before anything is pushed
    start = time.perf_counter()
    pushed = dev.push_folder(files, job.remote_dir, progress=progress)
    seconds = time.perf_counter() - start
    result.push = PushFigures(
        files=len(files), bytes_total=sum(f.path.stat().st_size for f in files.values()), sent=pushed.sent,
        bytes_sent=pushed.bytes_sent, unchanged=len(pushed.unchanged), removed=pushed.removed,
        seconds=round(seconds, 4), mb_per_s=round(pushed.bytes_sent / seconds / 1e6, 2) if pushed.sent else None)

    if choice.npu and job.runner is not None:
        lib_dir = f"{job.remote_dir}/lib/arm64-v8a"
        skel_dir = f"{job.remote_dir}/lib/hexagon-{choice.dsp_arch}"
        result.environment = {"LD_LIBRARY_PATH": lib_dir,
                              decision.ADSP_VAR: decision.adsp_library_path(skel_dir, None)}
        result.runner = runner.REMOTE_RUNNER
        assert job.runner_sha256 is not None  # hashed with the runner, in Job()
        runner.install(dev, job.runner, job.runner_sha256)
        graphs_of = {a.path: a.served for t in job.manifest.targets for a in t.artifacts}
        for graph, context in choice.paths.items():
            if graph in choice.cpu_graphs:  # a split model's CPU part: no context binary to run
                continue
            result.graphs.append(_run_graph(dev, job, graph, f"{job.remote_dir}/{context}", result,
                                            graphs_of.get(context, [graph])))
    elif choice.npu:
        result.runner_note = ("no runner: pass --runner PATH or --qnn-sdk-root DIR to run the context binaries on "
                              "the phone and compare them with the CPU model")
    elif job.runner is not None:
        result.runner_note = "CPU fallback on this phone: no context binary to run"
    result.ok = all(g.status == "passed" for g in result.graphs) and (result.play is None or result.play.ok)
    if result.graphs:
        statuses = {g.status for g in result.graphs}
        result.expectation = NPU_FAILED if "error" in statuses else NPU_WRONG if "failed" in statuses else NPU_RAN
    if choice.npu:  # say what was observed here, not the decision's assumption that the libraries load
        result.reason = f"SoC {choice.soc} ({choice.dsp_arch}) is in the bundle; " + (
            "the QNN libraries were not loaded here (no runner)" if not result.graphs else
            "qnn-net-run could not run on the phone (see the graphs' advice)" if "error" in statuses else
            "qnn-net-run loaded the QNN libraries and ran every graph")
    result.record = write_record(job, result)
    return result


def _runtime_libs(job: Job, arch: str) -> dict[str, LocalFile]:
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


def _run_graph(dev: Device, job: Job, graph: str, context: str, result: DeviceVerification,
               graphs: list[str]) -> GraphRun:
    """Run one graph of a context binary twice (one inference, then N) on the phone and compare with the CPU
    outputs. `graphs`: the context's graphs, in order (one unless it is shared)."""
    run = GraphRun(graph, context, "error")
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
        first = runner.run(dev, workdir, context, *env, native, _lists(graph, graphs, runner.FIRST_INPUT), "out_first")
        timed = first if first.code != 0 else runner.run(dev, workdir, context, *env, native,
                                                         _lists(graph, graphs, runner.INPUT_LIST))
        failed = first if first.code != 0 else timed if timed.code != 0 else None
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
    precision = next(t.precision for t in job.manifest.targets if t.soc == result.soc)
    run.thresholds = limits = metrics.thresholds_for(precision)
    run.outputs = metrics.judge_model(job.cpu_model(graph), expected, actual, limits)  # validate's rules
    run.status = "passed" if all(m.passed for m in run.outputs) else "failed"
    run.samples, run.inferences, run.clock = len(samples), lines, timed.clock
    run.first_run_s = round(first.seconds, 4)
    if lines > 1 and timed.seconds > first.seconds:
        run.per_inference_s = round((timed.seconds - first.seconds) / (lines - 1), 6)
    return run


def write_record(job: Job, r: DeviceVerification) -> Path:
    """The device record, written atomically: what ran where, with which files, and how it went."""
    stamp = datetime.now(UTC)
    name = f"{job.bundle_id}_{re.sub(r'[^A-Za-z0-9_.-]', '_', r.serial)}_{stamp:%Y%m%dT%H%M%SZ}.json"
    path = job.record_dir / name
    write_json(path, {
        "record": RECORD, "version": RECORD_VERSION, "ok": r.ok,
        "device": {"serial": r.serial, "model": r.model, "android_release": r.android_release, "sdk": r.sdk},
        "soc": {"model": r.soc, "identified_by": r.identified_by, "dsp_arch": r.dsp_arch},
        "bundle": {"name": job.manifest.name, "version": job.manifest.version,
                   "qairt_version": job.manifest.qairt.version, "qairt_build": job.manifest.qairt.build,
                   "path": str(job.given.resolve())},
        "decision": {"provider": r.provider, "reason": r.reason, "expectation": r.expectation},
        "push": {"remote_dir": r.remote_dir, **(asdict(r.push) if r.push else {})},
        "runner": {"path": r.runner, "local": str(job.runner) if job.runner else None, "note": r.runner_note,
                   "environment": r.environment, "timing": TIMING_NOTE if r.graphs else None},
        "graphs": [asdict(g) for g in r.graphs],
        "play": asdict(r.play) if r.play else None,
        "tools": {"qnndeploy": __version__},
        "created": stamp.isoformat(timespec="seconds"),
    })
    return path


# --- every phone -----------------------------------------------------------------------------------------------

def verify_all(job: Job) -> list[DeviceVerification]:
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

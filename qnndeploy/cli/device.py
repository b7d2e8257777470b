"""`qnndeploy device list | info | profile | verify | bench`: phones over adb.

Everything a phone says is untrusted: every line of text output, and every error message, goes through escaped()
(control characters and escape sequences shown, never emitted); JSON output is escaped by json.dumps.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import click

from qnndeploy import api
from qnndeploy.api import (
    BENCH_THRESHOLD,
    NOT_RUN,
    BenchOptions,
    DeviceInfo,
    DeviceVerification,
    GraphRun,
    PhoneRequest,
    Profile,
    ProfileLevel,
    VerifyOutcome,
    VerifyReport,
    devices,
    hosted_devices,
    on_phones,
    write_profile_csv,
)
from qnndeploy.api import Battery as PhoneBattery
from qnndeploy.base.errors import EXIT_CHECK_FAILED, EXIT_NOT_RUN, QnnDeployError
from qnndeploy.base.names import PERFORMANCE_MODES
from qnndeploy.cli._common import (
    CONTEXT_SETTINGS,
    Group,
    Renamed,
    emit_json,
    escaped,
    fail,
    gathered,
    handles_errors,
    json_option,
    jsonable,
    num,
    render_output,
    sample_options,
    shown,
    soc_option,
    step_progress,
    unchecked_option,
)
from qnndeploy.cli._profile import profile_options
from qnndeploy.formats.benchrecord import BenchRecord

serial_option = click.option("-s", "--serial", envvar="ANDROID_SERIAL", metavar="SERIAL",
                             help="Device serial from `adb devices` [default: $ANDROID_SERIAL, else the only device "
                                  "connected].")
timeout_option = click.option(
    "--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
    help="Replace the deadline of every adb step with SECONDS: each shell command and pull must end within it, a "
         "push must make progress at least every SECONDS, each qnn-net-run run must end within it [default: per "
         "step, 30 s for a command to 30 min for a run; docs/command-details.md, Deadlines and caps].")


def _say(line: object = "", err: bool = False) -> None:
    """One line of text output, phone text in it escaped."""
    click.echo(escaped(line), err=err)


def escapes_errors(fn: Callable[..., None]) -> Callable[..., None]:
    """Errors carry phone text too (a serial, a command's output): escape it before handles_errors prints it."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except QnnDeployError as e:
            raise e.reworded(escaped(e)) from None

    return wrapper


@click.group(cls=Group, context_settings=CONTEXT_SETTINGS)
def device() -> None:
    """Phones over adb: list, info, profile, verify, bench.

    Through the standard adb server, as the adb command uses it ($ANDROID_ADB_SERVER_PORT is honoured).
    """


# --- list ---------------------------------------------------------------------------------------------------------

@device.command("list")
@click.option("--aihub", is_flag=True, help="The phones Qualcomm AI Hub hosts (qai-hub client), with their chipset "
              "mapped to the catalog, instead of the adb server's.")
@click.option("--bundle", type=click.Path(path_type=Path), metavar="BUNDLE",
              help="With --aihub: also the bundle target the app would choose on each hosted phone (a bundle folder or "
                   "archive).")
@timeout_option
@json_option
@handles_errors
@escapes_errors
def device_list(aihub: bool, bundle: Path | None, timeout: float | None, as_json: bool) -> None:
    """List the devices the adb server knows, with their state and SoC (--aihub: AI Hub's hosted phones).

    A phone whose properties cannot be read (it misses a deadline) keeps its row, with '?' for its SoC and the
    error on stderr; then exit 1.
    """
    if bundle is not None and not aihub:
        fail("--bundle goes with --aihub (for a phone over adb: qnndeploy device info --bundle)")
    if aihub and timeout is not None:
        fail("--timeout is for phones over adb, not with --aihub")
    if aihub:
        _list_hosted(bundle, as_json)
        return
    rows = devices(timeout)
    if as_json:
        emit_json(rows)
    else:
        if not rows:
            _say("no devices: plug in a phone with USB debugging on (or `adb connect HOST:PORT`)")
        for r in rows:
            _say(f"{r.serial:<24} {r.state:<13} {r.soc or ('?' if r.error else '-'):<10} {r.model}")
        for r in rows:
            if r.error:
                _say(f"error: {r.error}", err=True)
    if any(r.error for r in rows):
        sys.exit(EXIT_CHECK_FAILED)


def _list_hosted(bundle: Path | None, as_json: bool) -> None:
    rows = hosted_devices(bundle)
    if as_json:
        emit_json(rows)
        return
    for r in rows:
        d = r.device
        soc = f"{d.soc} ({d.dsp_arch})" if d.soc else "not in the catalog"
        line = f"{d.name:<36} Android {d.os:<6} {d.chipset or '-':<34} {soc}"
        if r.choice is not None:
            on_device = " (on-device compile)" if r.choice.npu_source == "on-device" else ""
            line += f"  -> {'NPU ' + (r.choice.soc or '') + on_device if r.choice.npu else 'CPU: ' + r.choice.reason}"
        _say(line)


# --- info ---------------------------------------------------------------------------------------------------------

def _render_device_info(i: DeviceInfo) -> None:
    def yes(flag: bool | None) -> str:
        return "-" if flag is None else "yes" if flag else "NO"

    _say(f"{i.serial}: {i.manufacturer} {i.model}, Android {i.android_release} (API {i.sdk}), {i.abi}")
    _say(f"  ro.soc.model {i.soc_model_prop or '-'}   ro.soc.manufacturer {i.soc_manufacturer or '-'}   "
               f"ro.board.platform {i.board_platform or '-'}   soc0/soc_id {i.kernel_soc_id or '-'}")
    if i.soc:
        _say(f"  SoC {i.soc} (by {i.identified_by}): HTP {i.dsp_arch}, QNN soc_model {i.qnn_soc_id}, "
                   f"fp16 {yes(i.fp16)}")
    else:
        _say("  SoC not in the catalog: CPU fallback")
    _say(f"  page size {i.page_size or '-'}   libcdsprpc.so {yes(i.cdsprpc)}   "
               f"DSP folders {', '.join(i.dsp_dirs) or 'none'}")
    _say(f"  QNN libraries in /vendor, /odm: {', '.join(i.vendor_qnn_libs) or 'none'}")
    for note in i.notes:
        _say(f"  note: {note}")
    c = i.app_choice
    if c is not None and c.npu and c.npu_source == "on-device":
        budget = f"{c.compile_budget_s:g} s" if c.compile_budget_s is not None else "-"
        _say(f"  with bundle {i.bundle}: NPU, compiled on the phone (npu_source on-device): no target for {c.soc}, "
             f"HTP {c.dsp_arch} is validated; the first run compiles the ONNX with the QNN EP for soc_model "
             f"{c.soc_id}, compile budget {budget}, if the QNN libraries load (device verify --ort-runner runs it); "
             f"files: {', '.join(c.files)}")
    elif c is not None and c.npu:
        _say(f"  with bundle {i.bundle}: NPU, target {c.soc} ({c.dsp_arch}) by {c.identified_by}, if the QNN "
                   f"libraries load (device verify runs them); files: {', '.join(c.files)}")
    elif c is not None:
        _say(f"  with bundle {i.bundle}: CPU fallback: {c.reason}")


@device.command("info")
@serial_option
@click.option("--bundle", type=click.Path(path_type=Path), metavar="BUNDLE",
              help="A bundle folder or archive: also say which target the app would choose on this phone.")
@timeout_option
@json_option
@handles_errors
@escapes_errors
def device_info(serial: str | None, bundle: Path | None, timeout: float | None, as_json: bool) -> None:
    """What a phone is, and what the app would choose on it.

    SoC identity and catalog match, Android version, ABI, page size, DSP libraries, QNN libraries in /vendor
    or /odm that can shadow the app's.

    A --bundle that is not a bundle is bad input (exit 2), as in every command that takes one.
    """
    result = api.device_info(serial, bundle, timeout)
    if as_json:
        emit_json(result)
    else:
        _render_device_info(result)


# --- profile ------------------------------------------------------------------------------------------------------

def _battery_text(b: PhoneBattery) -> str:
    parts = [f"{b.level}%" if b.level is not None else None,
             f"{b.temperature_c:.1f}°C" if b.temperature_c is not None else None,
             f"{b.current_ma:+.0f} mA" if b.current_ma is not None else None]
    return " ".join(p for p in parts if p) or "-"


def _render_profile_end(result: Profile, pid: int, csv_path: Path | None) -> None:
    if result.ended:
        _say(f"process {pid} ended")
    if not result.samples:
        _say("no samples yet")
        return
    if result.powered:
        _say("note: the phone was on external power (USB/AC): the battery current is charging, not the app's "
                   "drain; for power, use adb over Wi-Fi (adb tcpip) unplugged, or `adb shell dumpsys battery unplug`")
    _say(f"mean CPU {result.mean_cpu():.1f}% of one core over {result.samples[-1].time_s:g} s; per thread:")
    for t in result.thread_means():
        _say(f"  {t.tid:>7} {t.name:<16} {t.cpu_percent:6.1f}%")
    if csv_path:
        _say(f"wrote {csv_path}")


@dataclass(frozen=True, kw_only=True)
class ProfileArgs:
    """What `qnndeploy device profile` is asked: its options as click parsed them, a field each."""

    pid: int | None
    package: str | None
    serial: str | None
    interval: float
    duration: float | None
    csv_path: Path | None
    timeout: float | None


@device.command("profile")
@click.option("--pid", type=int, metavar="PID", help="Process id on the device.")
@click.option("--package", metavar="NAME", help="App package name (its process is found with pidof).")
@serial_option
@click.option("--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True, metavar="SECONDS",
              help="Seconds between samples.")
@click.option("--duration", cls=Renamed, type=click.FloatRange(min=0), metavar="SECONDS",
              help="Stop after SECONDS [default: at Ctrl-C].")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Also write the samples as CSV.")
@timeout_option
@json_option
@handles_errors
@escapes_errors
@gathered(ProfileArgs)
def device_profile(args: ProfileArgs, as_json: bool) -> None:
    """CPU use of a process and its threads, and the battery.

    Every interval: the process's CPU use (give --pid or --package) and each thread's (100% = one core), and
    the battery's level, temperature and current.

    Measure before moving a model to the NPU: the NPU pays off where the CPU is busy.
    """
    if (args.pid is None) == (args.package is None):
        fail("give exactly one of --pid PID or --package NAME")
    result, sampled = api.device_profile(args.serial, pid=args.pid, package=args.package, interval=args.interval,
                                         timeout=args.timeout)
    if not as_json:
        _say(f"{result.serial}: process {result.pid} ({result.name}), every {args.interval:g} s, "
             f"CLK_TCK {result.clk_tck}{'' if args.duration else ' - Ctrl-C to stop'}")
        _say(f"{'time':>8} {'cpu':>7}  {'battery':<22} busiest threads")
    try:
        for s in sampled:
            if not as_json:
                top = ", ".join(f"{t.name} {t.cpu_percent:.0f}%" for t in s.threads[:3])
                _say(f"{s.time_s:>7.1f}s {s.cpu_percent:>6.1f}%  {_battery_text(s.battery):<22} {top}")
            if args.duration is not None and s.time_s + 1e-3 >= args.duration:
                break
    except KeyboardInterrupt:
        pass  # Ctrl-C is how an open-ended profile ends: keep what was measured
    if args.csv_path:
        write_profile_csv(result, args.csv_path)
    if as_json:
        samples = cast(dict[str, Any], jsonable(result))  # a dataclass: a dict
        emit_json({**samples, "mean_cpu_percent": result.mean_cpu(), "threads": result.thread_means(),
                   "powered": result.powered})
    else:
        _render_profile_end(result, result.pid, args.csv_path)


# --- verify -------------------------------------------------------------------------------------------------------

def _render_graph_run(g: GraphRun, w: int = 14) -> None:
    label = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "ran": "RAN",
             NOT_RUN: "NOT RUN"}[g.status]
    od = g.on_device
    if od is not None and od.compile_s is not None:
        per = f"{od.per_inference_s * 1e3:.2f} ms/inference" if od.per_inference_s is not None else "- ms/inference"
        cache = f"{od.cache_load_s:.3f} s" if od.cache_load_s is not None else "-"
        _say(f"  {'':<5} {g.graph:<{w}} compiled on the phone in {od.compile_s:.3f} s (first run), cache hit "
             f"{cache}, {per} ({od.inferences} runs, QNN EP: " + " ".join(f"{k}={v}" for k, v in
                                                                      od.provider_options.items()) + ")")
    if g.status in ("error", NOT_RUN):
        _say(f"  {label:<5} {g.graph:<{w}} {g.reason}")
    elif g.status == "ran" and g.ran_on == "cpu":
        per = f"{g.per_inference_s * 1e3:.2f} ms/inference" if g.per_inference_s is not None else "- ms/inference"
        first = "-" if g.first_run_s is None else f"{g.first_run_s * 1e3:.0f}"
        _say(f"  {label:<5} {g.graph:<{w}} on the phone's CPU: first run {first} ms, {per} ({g.inferences} runs, "
             f"{g.clock} clock); outputs not compared (onnxruntime_perf_test writes none)")
    elif g.status == "ran":
        _say(f"  {label:<5} {g.graph:<{w}} outputs not compared (no qnn-net-run)")
    else:
        per = (f"{g.per_inference_s * 1e3:.2f} ms/inference ({g.inferences} runs" if g.per_inference_s is not None
               else f"per inference lost in the start-up noise ({g.inferences} runs: raise --runs")
        first = "-" if g.first_run_s is None else f"{g.first_run_s * 1e3:.0f}"
        _say(f"  {label:<5} {g.graph:<{w}} first run {first} ms, {per}, {g.clock} clock), "
                   f"{g.samples} sample(s)")
    if g.launch is not None:
        launch = g.launch
        _say(f"  {'':<5} {'':<{w}} first launch: session start cold {_fig(launch.session_cold_ms, '.1f')} / warm "
             f"{_fig(launch.session_warm_ms, '.1f')} ms, first result cold "
             f"{_fig(launch.first_result_cold_ms, '.1f')} / warm {_fig(launch.first_result_warm_ms, '.1f')} ms")
    for m in g.outputs:
        render_output(m)
    for a in g.advice:
        _say(f"        advice ({a.id}): {a.message}")
        _say(f"            seen: {a.line}")


def _render_device_verification(r: DeviceVerification) -> None:
    _say(f"{r.serial}: {r.model}, Android {r.android_release} (API {r.sdk})")
    _say(f"  SoC {r.soc or 'unknown'}" + (f" (by {r.identified_by})" if r.identified_by else "")
               + f": {r.expectation}" + (f": {r.reason}" if r.provider == "cpu" or r.npu_source == "on-device" else ""))
    p = r.push
    if p is not None:
        speed = f", {p.mb_per_s:.1f} MB/s" if p.mb_per_s and p.bytes_sent >= 1e6 else ""
        _say(f"  pushed to {r.remote_dir}: {len(p.sent)} of {p.files} files sent ({p.bytes_sent / 1e6:.2f} of "
                   f"{p.bytes_total / 1e6:.2f} MB) in {p.seconds:.2f} s{speed}; every sha256 checked on the phone")
        if p.removed:
            _say(f"  removed from the phone: {', '.join(p.removed)}")
    if r.play is not None:
        _say(f"  Play: {'' if r.play.ok else 'MISMATCH: '}{r.play.reason}")
    if r.ort_runner:
        _say("  ran onnxruntime_perf_test" + (" and qnn-net-run" if r.runner else "")
             + (" with " + " ".join(f"{k}={v}" for k, v in r.environment.items()) if r.environment else ""))
    elif r.runner:
        _say("  ran qnn-net-run with " + " ".join(f"{k}={v}" for k, v in r.environment.items()))
    if r.runner_note:
        _say(f"  note: {r.runner_note}")
    for g in r.graphs:
        _render_graph_run(g, max([14, *(len(x.graph) for x in r.graphs)]))


def _ms(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else "-"


def _render_hosted_table(results: list[DeviceVerification]) -> None:
    """One row per (hosted phone, graph): the comparison with the CPU and AI Hub's profile."""
    w = max([14, *(len(g.graph) for r in results for g in r.graphs)])  # the graph column fits the longest name
    _say(f"{'device':<30} {'SoC':<7} {'graph':<{w}} {'status':<7} {'worst':<22} {'infer ms':>8} "
               f"{'load ms':>8} {'warm ms':>8}  job")
    for r in results:
        if r.error:
            _say(f"{r.serial:<30} {'-':<7} {'-':<{w}} {'ERROR':<7} {r.error}")
            continue
        if not r.graphs:
            _say(f"{r.serial:<30} {r.soc or '?':<7} {'-':<{w}} {'CPU':<7} {r.reason}")
        for g in r.graphs:
            h = g.hosted or {}
            worst = min(g.outputs, key=lambda m: (m.passed, m.snr_db if m.snr_db is not None else float("inf")),
                        default=None)
            text = (f"{worst.name} SNR {num(worst.snr_db, '.1f')} dB" if worst is not None
                    else (g.reason or "-")[:22])
            _say(f"{r.serial:<30} {r.soc or '?':<7} {g.graph:<{w}} {g.status:<7} {text:<22} "
                       f"{_ms(h.get('inference_ms')):>8} {_ms(h.get('first_load_ms')):>8} "
                       f"{_ms(h.get('warm_load_ms')):>8}  {h.get('url', '-')}")
    for r in results:
        for g in r.graphs:
            if g.status == "error":
                _say(f"error: {r.serial}, {g.graph}: {g.reason}")
        if r.record:
            _say(f"record: {shown(r.record)}")


def _render_verify_table(results: list[DeviceVerification]) -> None:
    _say(f"{'serial':<22} {'model':<24} {'SoC':<8} {'choice':<6} {'sent':>9} {'MB sent':>8}  "
               f"{'graphs':<24} status")
    for r in results:
        if r.error or r.push is None:
            _say(f"{r.serial:<22} {'-':<24} {'-':<8} {'-':<6} {'-':>9} {'-':>8}  {'-':<24} ERROR: {r.error}")
            continue
        graphs = ", ".join(f"{g.graph} {g.status}" for g in r.graphs) or "-"
        if r.play is not None:
            graphs += f"; Play {r.play.delivered}" + ("" if r.play.ok else f" (expected {r.play.expected})")
        sent = f"{len(r.push.sent)}/{r.push.files}"
        _say(f"{r.serial:<22} {r.model[:24]:<24} {r.soc or '?':<8} {(r.provider or '-').upper():<6} {sent:>9} "
                   f"{r.push.bytes_sent / 1e6:>8.2f}  {graphs:<24} {_verdict(r)}")


def _verdict(r: DeviceVerification) -> str:
    """A phone's verdict in a word: ok only when something ran and nothing failed."""
    if r.error or r.outcome == VerifyOutcome.FAILED:
        return "FAILED"
    return "NOT RUN" if r.outcome == VerifyOutcome.NOT_RUN else "ok"


def _exit_code(results: list[DeviceVerification]) -> int:
    """1 when a phone failed; else 4 when some graph ran nowhere (README "Exit codes"); else 0."""
    verdicts = {_verdict(r) for r in results}
    return EXIT_CHECK_FAILED if "FAILED" in verdicts else EXIT_NOT_RUN if "NOT RUN" in verdicts else 0


def _render_verifications(report: VerifyReport, results: list[DeviceVerification],
                          all_devices: bool) -> None:
    _say(f"bundle {report.name} {report.version} (QAIRT {report.qairt}): verified, {report.files} files")
    for r in results:
        if not r.error:
            _render_device_verification(r)
    if all_devices:
        _render_verify_table(results)
    for r in results:
        if not r.error and r.outcome == VerifyOutcome.NOT_RUN:
            missed = [g.graph for g in r.graphs if g.status == NOT_RUN]
            _say(f"NOT RUN on {r.serial}: {', '.join(missed) or 'no graph'} ran nowhere on the phone (the files were "
                 "pushed and checked; nothing was proven there)")
        if r.record:
            _say(f"record: {shown(r.record)}")


@dataclass(frozen=True, kw_only=True)
class VerifyArgs:
    """What `qnndeploy device verify` is asked: its options as click parsed them, a field each."""

    bundle_dir: Path
    serial: str | None
    all_devices: bool
    runner: Path | None
    ort_runner: Path | None
    qnn_sdk_root: Path | None
    inputs: Path | None
    preprocess: str | None
    random_: int | None
    seed: int
    ranges: dict[str, tuple[int, int]]
    runs: int
    record_dir: Path
    aihub: bool
    hosted_names: tuple[str, ...]
    hosted_socs: tuple[str, ...]
    play_dir: Path | None
    timeout: float | None
    allow_unchecked: bool


@device.command("verify")
@click.argument("bundle_dir", metavar="BUNDLE", type=click.Path(path_type=Path))
@serial_option
@click.option("--all", "all_devices", is_flag=True, help="Every connected device, in parallel.")
@click.option("--runner", type=click.Path(dir_okay=False, path_type=Path), metavar="PATH",
              help="A qnn-net-run built for aarch64-android, to run the context binaries on the phone.")
@click.option("--ort-runner", type=click.Path(dir_okay=False, path_type=Path), metavar="PATH",
              help="An onnxruntime_perf_test built for Android arm64 with the QNN EP, to compile the ONNX on a phone "
                   "the bundle has no target for but whose HTP arch it validated (npu_source on-device), as the "
                   "app's QNN EP does, timing the first compile and the runs from its cache.")
@click.option("--qnn-sdk-root", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="QAIRT SDK: its bin/aarch64-android/qnn-net-run (default: $QNN_SDK_ROOT when it has one), and "
                   "the QNN libraries for a bundle with an external runtime.")
@sample_options("--inputs", "Input samples, as validate takes them:")
@click.option("--runs", type=int, default=10, show_default=True, metavar="N",
              help="Inferences in the timed run (the samples, repeated).")
@click.option("-o", "--output", "record_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("device-records"), show_default=True, metavar="DIR",
              help="Folder for the device records (JSON).")
@click.option("--aihub", is_flag=True,
              help="Run on phones Qualcomm AI Hub hosts instead of over adb: each graph's context binary in an AI Hub "
                   "inference job with profiling (choose the phones with --device or --soc).")
@click.option("--device", "hosted_names", multiple=True, metavar="NAME",
              help="With --aihub: a hosted device by its AI Hub name (repeatable; device list --aihub lists them).")
@soc_option("With --aihub: any hosted Android phone with this SoC, by its catalog chipset.", dest="hosted_socs")
@click.option("--play", "play_dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="A `package play` output of BUNDLE: also say which device group Play delivers to the phone (by "
                   "its ro.soc.manufacturer and ro.soc.model), and fail when it is not the decision's.")
@timeout_option
@unchecked_option
@json_option
@handles_errors
@escapes_errors
@gathered(VerifyArgs)
def device_verify(args: VerifyArgs, as_json: bool) -> None:
    """Push a bundle to a phone, run it there, record the result.

    The bundle folder goes to the phone as the app would use it and is checked there; with a runner, it runs
    there too.

    BUNDLE is a bundle folder, .tar.gz or .zip. It is verified first (exit 1 with its report when it fails, 2 when
    BUNDLE is not a bundle). The app's own decision picks the target for the phone's SoC; its files, the CPU
    fallback and the runtime libraries for its arch go to /data/local/tmp/qnndeploy/NAME-VERSION/ (only files whose
    sha256 differs are sent; a staging folder is renamed at the end; an interrupted push resumes). With a runner,
    each context binary runs on the phone (qnn-net-run, LD_LIBRARY_PATH and ADSP_LIBRARY_PATH set) and its outputs
    are compared with the CPU model on this host, with validate's metrics; known QNN errors become advice. A phone
    whose SoC is not in the bundle: CPU fallback expected, unless the bundle compiles on the device for its HTP arch
    (npu_source on-device): then, with --ort-runner (onnxruntime_perf_test), each graph's ONNX is compiled on the
    phone with the app's QNN EP options and session, timed (first compile against the bundle's budget, cache hit,
    runs), and with --runner the binary it compiled is compared with the CPU model as above. With --play, Play's
    device group for the phone is checked
    against the decision's (a phone Play sends another group, or none, runs on the CPU).

    The record lists every graph of the decision: ran on the NPU (passed, failed, error, or ran without a
    comparison), or not run, with why (no runner; the phone takes the CPU; a split's CPU part). Exit 1 when a
    phone fails; 4 when nothing failed but some graph was not run (its files pushed and checked, nothing proven);
    0 when every graph ran.

    With --aihub, the phones are Qualcomm AI Hub's (qai-hub's own configuration holds the token): per phone and
    graph one inference job with profiling; outputs compared with the CPU model as above, and AI Hub's inference
    time, first and warm load time, peak memory and compute units recorded, with the job's id and URL.
    """
    given = click.get_current_context().get_parameter_source("serial") == click.core.ParameterSource.COMMANDLINE
    if (args.hosted_names or args.hosted_socs) and not args.aihub:
        fail("--device and --soc choose AI Hub's phones: add --aihub (over adb, use -s SERIAL)")
    if args.aihub and (given or args.all_devices or args.runner or args.ort_runner or args.qnn_sdk_root
                       or args.play_dir or args.timeout is not None):
        fail("--aihub runs on AI Hub's phones: -s, --all, --runner, --ort-runner, --qnn-sdk-root, --play and "
             "--timeout are for phones over adb")
    if args.all_devices and given:
        fail("give -s SERIAL or --all, not both")
    request = _on_phones(args, aihub=args.aihub, hosted_names=args.hosted_names, hosted_socs=args.hosted_socs,
                         play=args.play_dir)
    with step_progress("device verify") as live:
        report, results = on_phones(request, None if as_json else live.read, live.step)
    if as_json:
        emit_json({"bundle": report, "devices": results})
    elif args.aihub:
        _say(f"bundle {report.name} {report.version} (QAIRT {report.qairt}): verified; on AI Hub:")
        _render_hosted_table(results)
    else:
        _render_verifications(report, results, args.all_devices)
    code = _exit_code(results)
    if code:
        sys.exit(code)


def _on_phones(args: VerifyArgs | BenchArgs, **more: Any) -> PhoneRequest:
    """The bundle on phones as device verify and device bench ask for it (`more`: verify's own fields)."""
    return PhoneRequest(bundle=args.bundle_dir, serial=None if args.all_devices else args.serial,
                        all_devices=args.all_devices, runner=args.runner, ort_runner=args.ort_runner,
                        qnn_sdk_root=args.qnn_sdk_root, inputs=args.inputs, preprocess=args.preprocess,
                        random=args.random_, seed=args.seed, ranges=args.ranges, runs=args.runs,
                        record_dir=args.record_dir, timeout=args.timeout, allow_unchecked=args.allow_unchecked, **more)


# --- bench --------------------------------------------------------------------------------------------------------

def _fig(value: float | None, fmt: str = "sig") -> str:
    """A figure as read: "-" when unmeasured; by default 3 significant digits below 100 (0.0205 ms, not 0.02)."""
    if value is None:
        return "-"
    if fmt == "sig":
        return f"{value:.1f}" if abs(value) >= 100 else f"{value:.3g}"
    return format(value, fmt)


def _render_bench_record(r: BenchRecord, path: Path | None) -> None:
    c = r.conditions
    npu, cpu = r.paths["npu"], r.paths["cpu"]
    temp = (f"{_fig(c.temperature_c_start, '.1f')} -> {_fig(c.temperature_c_end, '.1f')} °C ({c.temperature_source})"
            if c.temperature_c_start is not None else "temperature -")
    _say(f"{r.phone['serial']} {r.phone['soc']} {r.graph}: NPU {r.settings['npu_tool']} ({r.settings['perf_mode']}) "
         f"vs CPU {r.settings['cpu_tool']}; {r.settings['blocks']} alternating blocks of {r.settings['runs']} runs")
    _say(f"  conditions: charging {'-' if c.charging is None else 'yes' if c.charging else 'no'}, screen "
         f"{'-' if c.screen_on is None else 'on' if c.screen_on else 'off'}, battery {c.battery_level_start}% -> "
         f"{c.battery_level_end}%, {temp}, thermal status {c.thermal_status_start} -> {c.thermal_status_end}")
    rows = [("runs", str(npu.runs), str(cpu.runs), "", ""),
            ("first inference ms", _fig(npu.first_ms), _fig(cpu.first_ms), "first_ms", ""),
            *((label, _fig(getattr(npu.launch, key)), _fig(getattr(cpu.launch, key)), "", "") for label, key in (
                ("session cold ms", "session_cold_ms"), ("session warm ms", "session_warm_ms"),
                ("first result cold ms", "first_result_cold_ms"), ("first result warm ms", "first_result_warm_ms"))),
            ("latency p50 ms", _fig(npu.latency_ms.p50), _fig(cpu.latency_ms.p50), "latency_p50", ""),
            ("latency p90 ms", _fig(npu.latency_ms.p90), _fig(cpu.latency_ms.p90), "", ""),
            ("latency p99 ms", _fig(npu.latency_ms.p99), _fig(cpu.latency_ms.p99), "", ""),
            ("latency mean ms", _fig(npu.latency_ms.mean), _fig(cpu.latency_ms.mean), "latency_mean", ""),
            ("throughput /s", _fig(npu.throughput_per_s, ".1f"), _fig(cpu.throughput_per_s, ".1f"), "throughput", ""),
            ("real-time factor", _fig(npu.rtf), _fig(cpu.rtf), "", ""),
            ("process CPU %", _fig(npu.cpu_percent, ".1f"), _fig(cpu.cpu_percent, ".1f"), "cpu_percent", ""),
            ("energy mJ/inference", _fig(npu.energy_mj_per_inference), _fig(cpu.energy_mj_per_inference),
             "energy_per_inference", "")]
    _say(f"  {'figure':<22} {'NPU':>10} {'CPU':>10} {'NPU/CPU':>9}")
    for label, n, cp, key, _ in rows:
        ratio = _fig(r.ratios.get(key)) if key else ""
        _say(f"  {label:<22} {n:>10} {cp:>10} {ratio:>9}")
    spread = r.ratio_spread.get("latency_mean")
    if spread:  # a figure that was not finite is missing (its note says why)
        _say(f"  NPU/CPU mean latency over {_fig(spread.get('blocks'), 'g')} block pairs: "
             f"{_fig(spread.get('min'), '.3f')} .. {_fig(spread.get('max'), '.3f')} "
             f"(median {_fig(spread.get('median'), '.3f')})")
    if r.sustained:
        _say(f"  sustained {r.settings['minutes']:g} min: {'t s':>7} {'path':<4} {'p50 ms':>8} {'mean ms':>8} "
             f"{'/s':>8} {'°C':>6} status")
        for s in r.sustained:
            _say(f"  {'':<17}{s.t_s:>7.1f} {s.path:<4} {_fig(s.latency_ms_p50):>8} {_fig(s.latency_ms_mean):>8} "
                 f"{_fig(s.throughput_per_s, '.1f'):>8} {_fig(s.temperature_c, '.1f'):>6} {s.thermal_status}")
    for point in r.sweep:
        f = point.npu
        _say(f"  perf mode {point.perf_mode:<27} NPU mean {_fig(f.latency_ms.mean)} ms, "
             f"{_fig(f.throughput_per_s, '.1f')}/s, energy {_fig(f.energy_mj_per_inference)} mJ ({f.runs} runs)")
    if r.gate is not None:
        g = r.gate
        _say(f"  gate against {g.baseline} (threshold {g.threshold:.0%}): {'passed' if g.passed else 'FAILED'}")
        for reg in g.regressions:
            _say(f"    regression {reg.figure}: {_fig(reg.was, 'g')} -> {_fig(reg.now, 'g')} (x{_fig(reg.ratio, 'g')})")
    for note in r.notes:
        _say(f"  note: {note}")
    if path is not None:
        _say(f"record: {shown(path)}")


@dataclass(frozen=True, kw_only=True)
class BenchArgs:
    """What `qnndeploy device bench` is asked: its options as click parsed them, a field each."""

    bundle_dir: Path
    serial: str | None
    all_devices: bool
    graph: str | None
    runs: int
    blocks: int
    minutes: float | None
    perf_modes: tuple[str, ...]
    cpu_threads: int | None
    input_seconds: float | None
    baseline: Path | None
    threshold: float
    runner: Path | None
    ort_runner: Path | None
    qnn_sdk_root: Path | None
    profile_level: ProfileLevel | None
    profile_viewer: Path | None
    inputs: Path | None
    preprocess: str | None
    random_: int | None
    seed: int
    ranges: dict[str, tuple[int, int]]
    record_dir: Path
    timeout: float | None
    allow_unchecked: bool


@device.command("bench")
@click.argument("bundle_dir", metavar="BUNDLE", type=click.Path(path_type=Path))
@serial_option
@click.option("--all", "all_devices", is_flag=True, help="Every connected device, in parallel.")
@click.option("--graph", metavar="GRAPH", help="Bench this graph only [default: every NPU graph of the decision].")
@click.option("--runs", type=click.IntRange(min=2), default=50, show_default=True, metavar="N",
              help="Inferences per block and path.")
@click.option("--blocks", type=click.IntRange(min=1), default=2, show_default=True, metavar="K",
              help="Alternating NPU and CPU blocks (at least; --duration runs more).")
# --duration is in seconds, as every duration is; the bench and its record count minutes
@click.option("--duration", "minutes", cls=Renamed, metavar="SECONDS",
              type=click.FloatRange(min=0, min_open=True), callback=lambda ctx, param, s: None if s is None else s / 60,
              help="A sustained run: keep alternating blocks for SECONDS, with a curve point per block (latency, "
                   "throughput, temperature, thermal status).")
@click.option("--performance-mode", "perf_modes", cls=Renamed, multiple=True, type=click.Choice(PERFORMANCE_MODES),
              metavar="MODE",
              help="Also run the NPU in this HTP performance mode (repeatable: a sweep), qnn-net-run's "
                   "--perf_profile (on-device: the QNN EP's htp_performance_mode). The comparison itself uses the "
                   "app's mode (the bundle's, else burst).")
@click.option("--cpu-threads", type=click.IntRange(min=1), metavar="T",
              help="Intra-op threads of the CPU path (onnxruntime_perf_test -x) [default: its own].")
@click.option("--input-seconds", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Seconds of audio or video one inference covers: gives the real-time factor.")
@click.option("--baseline", type=click.Path(exists=True, path_type=Path), metavar="RECORD",
              help="An earlier bench record of the same graph, phone and bundle (or a folder of them): exit 1 when a "
                   "figure regresses beyond --threshold.")
@click.option("--threshold", type=click.FloatRange(min=0), default=BENCH_THRESHOLD, show_default=True,
              metavar="F", help="With --baseline: the regression allowed (0.1 = 10%).")
@click.option("--runner", type=click.Path(dir_okay=False, path_type=Path), metavar="PATH",
              help="A qnn-net-run built for aarch64-android: the NPU path.")
@click.option("--ort-runner", type=click.Path(dir_okay=False, path_type=Path), metavar="PATH",
              help="An onnxruntime_perf_test built for Android arm64 (with the QNN EP): the CPU path (-e cpu), and "
                   "the NPU path on a phone the bundle compiles on (-e qnn).")
@click.option("--qnn-sdk-root", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="QAIRT SDK: its bin/aarch64-android/qnn-net-run (default: $QNN_SDK_ROOT when it has one), and "
                   "the QNN libraries for a bundle with an external runtime.")
@profile_options
@sample_options("--inputs", "Input samples, as validate takes them:")
@click.option("-o", "--output", "record_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("device-records"), show_default=True, metavar="DIR",
              help="Folder for the bench records, bench-SERIAL-GRAPH.json.")
@timeout_option
@unchecked_option
@json_option
@handles_errors
@escapes_errors
@gathered(BenchArgs)
def device_bench(args: BenchArgs, as_json: bool) -> None:
    """Is the NPU worth it on this phone? NPU against CPU, with energy and heat.

    On each phone, for the target the app's decision picks, the same inputs run through the NPU (qnn-net-run on
    the context binary; on-device targets: onnxruntime_perf_test with the QNN EP) and the CPU (the CPU model
    through onnxruntime_perf_test -e cpu), in alternating blocks. Per path: first-inference latency, latency
    percentiles and mean, throughput, real-time factor (with --input-seconds), the process's CPU %, energy per
    inference from the battery's current_now x voltage_now (never while charging), and the thermal state; the
    NPU/CPU ratio of each, with its spread over the blocks. --duration keeps going and records the curve;
    --performance-mode sweeps HTP performance modes. Writes bench-SERIAL-GRAPH.json per phone and graph into DIR.

    Exit 1 when a phone fails, or a figure regresses beyond --threshold against --baseline; 2 on bad input (a
    baseline of another graph, phone or bundle).
    """
    given = click.get_current_context().get_parameter_source("serial") == click.core.ParameterSource.COMMANDLINE
    if args.all_devices and given:
        fail("give -s SERIAL or --all, not both")
    request = _on_phones(args)
    options = BenchOptions(graph=args.graph, runs=args.runs, blocks=args.blocks, minutes=args.minutes,
                           perf_modes=args.perf_modes, cpu_threads=args.cpu_threads, input_seconds=args.input_seconds,
                           baseline=args.baseline, threshold=args.threshold, profile=args.profile_level,
                           profile_viewer=args.profile_viewer)
    with step_progress("device bench") as live:
        results = api.device_bench(request, options, live.step)
    if as_json:
        emit_json([r.to_json() for p in results for r in p.records])
    else:
        for p in results:
            if p.error:
                _say(f"error: {p.serial}: {p.error}")
            for r, path in zip(p.records, p.written, strict=True):
                _render_bench_record(r, path)
    for p in results:
        if p.error and as_json:
            _say(f"error: {p.serial}: {p.error}", err=True)
    if not all(p.passed for p in results):
        sys.exit(EXIT_CHECK_FAILED)

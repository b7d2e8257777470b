"""The command line: parse options, call one library function, render its result. Only this module prints."""

from __future__ import annotations

import dataclasses
import functools
import json
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from qnndeploy import __version__
from qnndeploy.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, QnnDeployError


def _jsonable(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def emit_json(value: object) -> None:
    click.echo(json.dumps(_jsonable(value), indent=2))


def report(result, as_json: bool, render: Callable) -> None:
    """Print a result that has `ok` as JSON or text; exit 1 when it is not ok (the documented exit code)."""
    emit_json(result) if as_json else render(result)
    if not result.ok:
        sys.exit(EXIT_CHECK_FAILED)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def handles_errors(fn: Callable) -> Callable:
    """Turn the library's one error type into a one-line message and its exit code, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except QnnDeployError as e:
            if kwargs.get("as_json"):  # a script reading stdout gets the failure too, not an empty stream
                emit_json({"error": str(e), "exit_code": e.exit_code})
            fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            fail("interrupted; nothing was left half-written", 130)

    return wrapper


json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of text.")


@contextmanager
def byte_progress(description: str, quiet: bool = False) -> Iterator[Callable[[int], None] | None]:
    """A live byte counter on stderr for long reads; the library only calls back with byte counts."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        DownloadColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TransferSpeedColumn,
    )

    with Progress(SpinnerColumn(), TextColumn(description), DownloadColumn(), TransferSpeedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda n: bar.advance(task, n)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="qnndeploy")
def cli() -> None:
    """Ship ONNX models on the Qualcomm NPU (QNN HTP), with a CPU fallback on every phone.

    \b
    Exit codes: 0 ok; 1 the thing checked has problems; 2 bad input (nothing written);
    3 a required tool is missing; 130 interrupted. `check` adds 10 (fixable) and 11 (not ready).
    """


# --- socs -------------------------------------------------------------------------------------------

@cli.command()
@click.argument("name", required=False)
@json_option
@handles_errors
def socs(name: str | None, as_json: bool) -> None:
    """List the SoC catalog, or show one SoC by model, soc_id or ro.board.platform codename."""
    from qnndeploy import socs as catalog

    rows = [catalog.find(name)] if name else list(catalog.catalog())
    if as_json:
        emit_json([s.to_json() for s in rows])
        return
    click.echo(f"{'model':<10} {'soc_id':>6}  {'arch':<5} {'vtcm':>4}  {'fp16':<4}  {'name':<26} codenames")
    for s in rows:
        click.echo(f"{s.model:<10} {s.soc_id:>6}  {s.dsp_arch:<5} {s.vtcm_mb:>3}M  {'yes' if s.fp16 else 'NO':<4}  "
                   f"{s.marketing_name or '-':<26} {','.join(s.codenames) or '-'}")


# --- bundle -------------------------------------------------------------------------------------------

def _assignments(values: tuple[str, ...], option: str, parse: Callable) -> dict:
    """NAME=VALUE options into a dict, refusing a NAME given twice."""
    out: dict = {}
    for v in values:
        name, value = parse(v)
        if name in out:
            raise QnnDeployError(f"{option} gives {name} twice")
        out[name] = value
    return out


def _graph_file(value: str) -> tuple[str, Path]:
    graph, sep, path = value.partition("=")
    if not (sep and graph and path):
        raise QnnDeployError(f"--cpu {value!r} is not of the form GRAPH=model.onnx")
    return graph, Path(path)


def _npu(values: tuple[str, ...]) -> dict[str, dict[str, list[Path]]]:
    out: dict[str, dict[str, list[Path]]] = {}
    for v in values:
        soc, sep, rest = v.partition(":")
        graph, sep2, path = rest.partition("=")
        if not (sep and sep2 and soc and graph and path):
            raise QnnDeployError(f"--npu {v!r} is not of the form SOC:GRAPH=path/graph.bin")
        files = out.setdefault(soc, {}).setdefault(graph, [])
        if any(Path(f).suffix == Path(path).suffix for f in files):
            raise QnnDeployError(f"--npu gives {soc}:{graph} twice")
        files.append(Path(path))
    return out


def _render_verify(report) -> None:
    where = f"{report.name}-{report.version}" if report.name else report.bundle
    if report.ok:
        click.echo(f"OK  {report.bundle}: {where}, QAIRT {report.qairt}, {report.files} files, "
                   f"{report.bytes / 1e6:.1f} MB")
        click.echo(f"    targets: {', '.join(report.targets) or 'none (CPU only)'}; runtime: {report.runtime}")
    else:
        click.echo(f"FAIL {report.bundle}: {len(report.problems)} problem(s)")
        for p in report.problems:
            click.echo(f"  - {p.path}: {p.message}")
    for w in report.warnings:
        click.echo(f"  warning: {w.path}: {w.message}")


@cli.group(invoke_without_command=True)
@click.option("--name", help="Bundle name (the folder is NAME-VERSION).")
@click.option("--version", "version_", metavar="VERSION", help="Bundle version, e.g. 1.0.0.")
@click.option("--cpu", "cpu", multiple=True, metavar="GRAPH=MODEL.onnx", help="CPU fallback model per graph.")
@click.option("--npu", "npu", multiple=True, metavar="SOC:GRAPH=FILE",
              help="QNN context binary (.bin) of GRAPH for SOC; an EPContext _ctx.onnx may be given too.")
@click.option("--from-build", type=click.Path(path_type=Path),
              help="Take context binaries, CPU models and records from a `qnndeploy compile` output folder.")
@click.option("--qnn-sdk-root", type=click.Path(path_type=Path), help="Take runtime libraries from a QAIRT SDK.")
@click.option("--runtime-libs", type=click.Path(path_type=Path), help="Take runtime libraries from a flat folder.")
@click.option("--qairt-version", help="QAIRT version (X.Y.Z) when the binaries do not embed it.")
@click.option("--maven-runtime-version", metavar="X.Y.Z",
              help="External runtime: the qnn-runtime release to pin, of the QAIRT X.Y family [default: QAIRT's].")
@click.option("--precision", type=click.Choice(["fp16", "w8a16", "w8a8"]),
              help="Precision of the context binaries [default: fp16, or the compile records'].")
@click.option("--source-model", type=click.Path(path_type=Path), help="The original model file (hashed).")
@click.option("--model-name", help="Name of the source model (default: the bundle name).")
@click.option("--commit", help="Commit of the source model.")
@click.option("--license", "license_", metavar="LICENSE", help="Licence of the model, e.g. Apache-2.0.")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="Folder that receives NAME-VERSION/.")
@click.option("--archive", type=click.Choice(["tar.gz", "zip"]), help="Also write NAME-VERSION.tar.gz or .zip.")
@click.option("--force", is_flag=True, help="Replace an existing bundle of the same name and version.")
@json_option
@click.pass_context
@handles_errors
def bundle(ctx: click.Context, name, version_, cpu, npu, from_build, qnn_sdk_root, runtime_libs, qairt_version,
           maven_runtime_version, precision,
           source_model, model_name, commit, license_, output, archive, force, as_json) -> None:
    """Assemble a bundle: per-SoC context binaries, CPU fallbacks, runtime libraries, manifest.json.

    Without --qnn-sdk-root or --runtime-libs the bundle declares the external runtime
    com.qualcomm.qti:qnn-runtime pinned to its QAIRT version. `qnndeploy bundle verify PATH` checks one.
    """
    if ctx.invoked_subcommand is not None:
        return
    from qnndeploy.bundle.build import BundleSpec, build_bundle, spec_from_build

    if not name or not version_:
        raise QnnDeployError("bundle needs --name and --version (see qnndeploy bundle --help)")
    spec = spec_from_build(from_build, name, version_) if from_build else BundleSpec(name, version_, {}, {})
    spec.cpu.update(_assignments(cpu, "--cpu", _graph_file))
    for soc, graphs in _npu(npu).items():
        spec.npu.setdefault(soc, {}).update(graphs)
    spec.sdk_root, spec.libs_dir, spec.qairt_version = qnn_sdk_root, runtime_libs, qairt_version
    spec.maven_version = maven_runtime_version
    spec.source_model, spec.source_path, spec.commit, spec.license = model_name, source_model, commit, license_
    spec.precision = precision or spec.precision
    with byte_progress("bundling", as_json) as progress:
        result = build_bundle(spec, output, force=force, archive_fmt=archive, progress=progress)
    if as_json:
        emit_json(result)
        return
    click.echo(f"bundle {result.path}  ({result.files} files, {result.bytes / 1e6:.1f} MB, QAIRT {result.qairt})")
    click.echo(f"  targets: {', '.join(result.targets) or 'none (CPU only)'}")
    click.echo(f"  runtime: {result.runtime}")
    if result.archive:
        click.echo(f"  archive: {result.archive}")
    for w in result.warnings:
        click.echo(f"  warning: {w.path}: {w.message}")
    click.echo(f"next: qnndeploy bundle verify {shlex.quote(str(result.path))}")


@bundle.command("verify")
@click.argument("path", type=click.Path(path_type=Path))
@json_option
@handles_errors
def bundle_verify(path: Path, as_json: bool) -> None:
    """Check a bundle folder or archive; every problem is reported. Exit 0 only when clean, 1 with problems."""
    from qnndeploy.bundle.verify import verify_bundle

    with byte_progress("verifying", as_json) as progress:
        result = verify_bundle(path, progress)
    report(result, as_json, _render_verify)


# --- check / prepare ----------------------------------------------------------------------------------

def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def _render_check(report) -> None:
    htp = report.htp
    click.echo(f"{report.path}: {report.verdict.upper()}")
    n = report.parameters
    count = f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n:,}"
    click.echo(f"  graph {report.graph or '(unnamed)'}, opset {report.opset}, {report.nodes} nodes, "
               f"{count} parameters ({_size(2 * n)} at fp16, {_size(n)} at 8-bit)")
    for title, tensors in (("inputs", report.inputs), ("outputs", report.outputs)):
        click.echo(f"  {title}:")
        for t in tensors:
            flags = [w for w, on in (("dynamic", t.dynamic), ("int64", t.dtype == "int64"),
                                     ("float64", t.dtype == "float64")) if on]
            click.echo(f"    {t.name:<28} {t.dtype:<8} {t.shape_text():<24} {' '.join(flags)}".rstrip())
    where = f"HTP {htp.soc}" + (f" (QAIRT {htp.qairt})" if htp.qairt else "")
    if not htp.measured:
        click.echo(f"  {where}: not measured: {htp.reason}")
    elif not htp.cpu_nodes:
        click.echo(f"  {where}: all {htp.total_nodes} nodes on the HTP, {htp.qnn_partitions} HTP partition(s), "
                   f"0 CPU partitions ({htp.seconds:.1f} s)")
    else:
        click.echo(f"  {where}: {len(htp.cpu_nodes)} of {htp.total_nodes} nodes on the CPU in "
                   f"{htp.cpu_partitions} CPU partition(s), {htp.qnn_partitions} HTP partition(s)")
        for n in htp.cpu_nodes[:20]:
            click.echo(f"    cpu: {n.name or '(unnamed)'} ({n.op_type})")
        if len(htp.cpu_nodes) > 20:
            click.echo(f"    … and {len(htp.cpu_nodes) - 20} more (--json lists all)")
    if report.findings:
        click.echo("  findings:")
    for f in report.findings:
        click.echo(f"    [{f.severity}] {f.message}")
        click.echo(f"      fix: {f.fix}")
    if report.prepare_command:
        click.echo(f"  fix all: {report.prepare_command}")
        if report.placeholders:
            click.echo(f"           (replace {', '.join(report.placeholders)} with the sizes and values your app uses)")
    click.echo(f"  verdict: {report.verdict} (exit {report.exit_code})")


@cli.command()
@click.argument("models", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--soc", help="SoC whose HTP measures op support (default SM8750); also checks its fp16 support.")
@click.option("--precision", type=click.Choice(["fp16", "w8a16"]), default="fp16", show_default=True,
              help="Measure op support for this build: w8a16 measures the QDQ-quantized graph compile would make.")
@click.option("--no-measure", is_flag=True, help="Skip the HTP partitioning (reads the graph only).")
@json_option
@handles_errors
def check(models: tuple[Path, ...], soc: str | None, precision: str, no_measure: bool, as_json: bool) -> None:
    """Is each ONNX model ready for the NPU? Findings, measured HTP op support, a verdict and the fix.

    \b
    Exit codes: 0 ready; 10 fixable (`qnndeploy prepare` fixes it: the report gives
    the command line); 11 not ready (needs a re-export); 2 bad input; 3 missing tool.
    With several models the worst verdict decides.
    """
    from qnndeploy import onnxcheck

    reports = [onnxcheck.check_model(m, soc=soc, measure=not no_measure, precision=precision) for m in models]
    worst = max(reports, key=lambda r: r.exit_code)
    if as_json:
        emit_json({"verdict": worst.verdict, "exit_code": worst.exit_code, "models": reports})
    else:
        for i, report in enumerate(reports):
            if i:
                click.echo()
            _render_check(report)
        if len(reports) > 1:
            click.echo(f"\noverall: {worst.verdict} (exit {worst.exit_code})")
    sys.exit(worst.exit_code)


@cli.command()
@click.argument("model", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="The prepared model OUT.onnx; OUT.prepare.json is written beside it.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=1,3,640,640", help="Fix an input's dims.")
@click.option("--int32-inputs", is_flag=True,
              help="Wrap int64 inputs and outputs as int32 (a Cast inside the graph, names unchanged).")
@click.option("--freeze", multiple=True, metavar="NAME=VALUE[,VALUE…]",
              help="Replace an input by a constant (e.g. sample_rate=16000) so what it drives folds away.")
@click.option("--no-simplify", is_flag=True,
              help="Skip the folding chain (onnxsim, onnxslim, onnxruntime); shapes are still fixed and re-inferred.")
@click.option("--fuse", is_flag=True,
              help="Fuse the unfused (Erf) GELU into one Gelu node, opset 20: what w8a16 on the HTP needs.")
@click.option("--inputs", "inputs_dir", type=click.Path(path_type=Path),
              help="Folder with NAME.npy or NAME.npz per input for the equivalence run [default: random inputs].")
@click.option("--tolerance", type=float, default=1e-4, show_default=True,
              help="Fail when an output's max abs diff and its rel L2 error both exceed this.")
@click.option("--force", is_flag=True, help="Overwrite OUT.onnx.")
@json_option
@handles_errors
def prepare(model: Path, out: Path, shapes: tuple[str, ...], int32_inputs: bool, freeze: tuple[str, ...],
            no_simplify: bool, fuse: bool, inputs_dir: Path | None, tolerance: float, force: bool,
            as_json: bool) -> None:
    """Make MODEL NPU-ready: static shapes, int32 I/O, frozen settings, simplified; proven equivalent on CPU.

    \b
    Exit codes: 0 written; 1 the prepared model differs from the original beyond
    --tolerance (nothing written); 2 bad input (nothing written); 3 missing tool.
    """
    from qnndeploy import prepare as stage

    result = stage.prepare_model(
        model, out, shapes=_assignments(shapes, "--shape", stage.parse_shape),
        freeze=_assignments(freeze, "--freeze", lambda v: stage.parse_assignment(v, "--freeze")),
        int32_inputs=int32_inputs, simplify=not no_simplify, inputs_dir=inputs_dir, tolerance=tolerance,
        force=force, fuse=fuse)
    if as_json:
        emit_json(result)
        return
    extra = f" + {Path(result.external_data).name}" if result.external_data else ""
    click.echo(f"wrote {result.output}{extra} and {result.record}")
    for change in result.changes:
        click.echo(f"  {change}")
    if len(result.folding) > 1:
        click.echo("  folding: " + "; ".join(result.folding))
    for title, tensors in (("inputs", result.inputs), ("outputs", result.outputs)):
        click.echo(f"  {title}: " + ", ".join(f"{t.name} {t.dtype} {t.shape_text()}" for t in tensors))
    click.echo(f"  equivalence on onnxruntime CPU (inputs: {result.equivalence_inputs}; "
               f"tolerance {result.tolerance:g}):")
    for d in result.equivalence:
        click.echo(f"    {d.name:<28} max abs diff {d.max_abs_diff:.2g}  rel L2 {d.rel_l2:.2g}  "
                   f"{'ok' if d.ok else 'FAIL'}")
    for note in result.notes:
        click.echo(f"  note: {note}")
    click.echo(f"next: qnndeploy check {shlex.quote(result.output)}")


# --- device (adb) -------------------------------------------------------------------------------------

serial_option = click.option("-s", "--serial", envvar="ANDROID_SERIAL", metavar="SERIAL",
                             help="Device serial from `adb devices` (default: the only device connected).")


@cli.group()
def device() -> None:
    """Phones over adb (the standard adb server, as the adb command uses it)."""


@device.command("list")
@json_option
@handles_errors
def device_list(as_json: bool) -> None:
    """List the devices the adb server knows, with their state and SoC."""
    from qnndeploy.device.info import devices

    rows = devices()
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no devices: plug in a phone with USB debugging on (or `adb connect HOST:PORT`)")
    for r in rows:
        click.echo(f"{r.serial:<24} {r.state:<13} {r.soc or '-':<10} {r.model}")


def _render_device_info(i) -> None:
    def yes(flag: bool | None) -> str:
        return "-" if flag is None else "yes" if flag else "NO"

    click.echo(f"{i.serial}: {i.manufacturer} {i.model}, Android {i.android_release} (API {i.sdk}), {i.abi}")
    click.echo(f"  ro.soc.model {i.soc_model_prop or '-'}   ro.soc.manufacturer {i.soc_manufacturer or '-'}   "
               f"ro.board.platform {i.board_platform or '-'}   soc0/soc_id {i.kernel_soc_id or '-'}")
    if i.soc:
        click.echo(f"  SoC {i.soc} (by {i.identified_by}): HTP {i.dsp_arch}, QNN soc_model {i.qnn_soc_id}, "
                   f"fp16 {yes(i.fp16)}")
    else:
        click.echo("  SoC not in the catalog: CPU fallback")
    click.echo(f"  page size {i.page_size or '-'}   libcdsprpc.so {yes(i.cdsprpc)}   "
               f"DSP folders {', '.join(i.dsp_dirs) or 'none'}")
    click.echo(f"  QNN libraries in /vendor, /odm: {', '.join(i.vendor_qnn_libs) or 'none'}")
    for note in i.notes:
        click.echo(f"  note: {note}")
    c = i.app_choice
    if c is not None and c.npu:
        click.echo(f"  with bundle {i.bundle}: NPU, target {c.soc} ({c.dsp_arch}) by {c.identified_by}, if the QNN "
                   f"libraries load (device verify runs them); files: {', '.join(c.files)}")
    elif c is not None:
        click.echo(f"  with bundle {i.bundle}: CPU fallback: {c.reason}")


@device.command("info")
@serial_option
@click.option("--bundle", type=click.Path(file_okay=False, path_type=Path),
              help="A bundle folder: also say which target the app would choose on this phone.")
@json_option
@handles_errors
def device_info_cmd(serial: str | None, bundle: Path | None, as_json: bool) -> None:
    """SoC identity and catalog match, Android version, ABI, page size, DSP libraries, shadowing QNN libraries."""
    from qnndeploy.device.info import device_info

    info = device_info(serial, bundle)
    emit_json(info) if as_json else _render_device_info(info)


def _battery_text(b) -> str:
    parts = [f"{b.level}%" if b.level is not None else None,
             f"{b.temperature_c:.1f}°C" if b.temperature_c is not None else None,
             f"{b.current_ma:+.0f} mA" if b.current_ma is not None else None]
    return " ".join(p for p in parts if p) or "-"


@device.command("profile")
@click.option("--pid", type=int, help="Process id on the device.")
@click.option("--package", help="App package name (its process is found with pidof).")
@serial_option
@click.option("--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True, help="Seconds.")
@click.option("--duration", type=click.FloatRange(min=0), help="Stop after S seconds (default: at Ctrl-C).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), help="Write samples as CSV.")
@json_option
@handles_errors
def device_profile(pid: int | None, package: str | None, serial: str | None, interval: float,
                   duration: float | None, csv_path: Path | None, as_json: bool) -> None:
    """CPU use of a process and of each thread (100% = one core), and the battery, every interval.

    Measure before moving a model to the NPU: the NPU pays off where the CPU is busy.
    """
    from qnndeploy.device import profile as prof
    from qnndeploy.device.adb import connect

    if (pid is None) == (package is None):
        fail("give exactly one of --pid PID or --package NAME")
    dev = connect(serial)
    pid, name = prof.find_process(dev, pid, package)
    result = prof.start(dev, pid, name, interval)
    if not as_json:
        click.echo(f"{dev.serial}: process {pid} ({name}), every {interval:g} s, CLK_TCK {result.clk_tck}"
                   f"{'' if duration else ' - Ctrl-C to stop'}")
        click.echo(f"{'time':>8} {'cpu':>7}  {'battery':<22} busiest threads")
    try:
        for s in prof.samples(dev, result):
            if not as_json:
                top = ", ".join(f"{t.name} {t.cpu_percent:.0f}%" for t in s.threads[:3])
                click.echo(f"{s.time_s:>7.1f}s {s.cpu_percent:>6.1f}%  {_battery_text(s.battery):<22} {top}")
            if duration is not None and s.time_s + 1e-3 >= duration:
                break
    except KeyboardInterrupt:
        pass  # Ctrl-C is how an open-ended profile ends: keep what was measured
    if csv_path:
        prof.write_csv(result, csv_path)
    if as_json:
        emit_json({**_jsonable(result), "mean_cpu_percent": result.mean_cpu(), "threads": result.thread_means(),
                   "powered": result.powered})
        return
    if result.ended:
        click.echo(f"process {pid} ended")
    if not result.samples:
        click.echo("no samples yet")
        return
    if result.powered:
        click.echo("note: the phone was on external power (USB/AC): the battery current is charging, not the app's "
                   "drain; for power, use adb over Wi-Fi (adb tcpip) unplugged, or `adb shell dumpsys battery unplug`")
    click.echo(f"mean CPU {result.mean_cpu():.1f}% of one core over {result.samples[-1].time_s:g} s; per thread:")
    for t in result.thread_means():
        click.echo(f"  {t.tid:>7} {t.name:<16} {t.cpu_percent:6.1f}%")
    if csv_path:
        click.echo(f"wrote {csv_path}")


def _render_output(m) -> None:
    """One output's comparison with the CPU, as validate and device verify show it."""
    click.echo(f"        {'ok ' if m.passed else 'BAD'} {m.name}: max|d| {m.max_abs_diff:.2e}  "
               f"rel L2 {_num(m.rel_l2, '.2e')}  cos {_num(m.cosine, '.6f')}  SNR {_num(m.snr_db, '.1f')} dB"
               + (f"  argmax {m.argmax_agreement:.1%}" if m.argmax_agreement is not None else ""))
    if m.note:
        click.echo(f"            {m.note}")


def _render_graph_run(g) -> None:
    label = {"passed": "PASS", "failed": "FAIL", "error": "ERROR"}[g.status]
    if g.status == "error":
        click.echo(f"  {label:<5} {g.graph:<14} {g.reason}")
    else:
        per = (f"{g.per_inference_s * 1e3:.2f} ms/inference ({g.inferences} runs" if g.per_inference_s is not None
               else f"per inference lost in the start-up noise ({g.inferences} runs: raise --runs")
        click.echo(f"  {label:<5} {g.graph:<14} first run {g.first_run_s * 1e3:.0f} ms, {per}, {g.clock} clock), "
                   f"{g.samples} sample(s)")
    for m in g.outputs:
        _render_output(m)
    for a in g.advice:
        click.echo(f"        advice ({a.id}): {a.message}")
        click.echo(f"            seen: {a.line}")


def _render_device_verification(r) -> None:
    click.echo(f"{r.serial}: {r.model}, Android {r.android_release} (API {r.sdk})")
    click.echo(f"  SoC {r.soc or 'unknown'}" + (f" (by {r.identified_by})" if r.identified_by else "")
               + f": {r.expectation}" + (f": {r.reason}" if r.provider == "cpu" else ""))
    p = r.push
    speed = f", {p.mb_per_s:.1f} MB/s" if p.mb_per_s and p.bytes_sent >= 1e6 else ""
    click.echo(f"  pushed to {r.remote_dir}: {len(p.sent)} of {p.files} files sent ({p.bytes_sent / 1e6:.2f} of "
               f"{p.bytes_total / 1e6:.2f} MB) in {p.seconds:.2f} s{speed}; every sha256 checked on the phone")
    if p.removed:
        click.echo(f"  removed from the phone: {', '.join(p.removed)}")
    if r.runner:
        click.echo("  ran qnn-net-run with " + " ".join(f"{k}={v}" for k, v in r.environment.items()))
    if r.runner_note:
        click.echo(f"  note: {r.runner_note}")
    for g in r.graphs:
        _render_graph_run(g)


def _render_verify_table(results) -> None:
    click.echo(f"{'serial':<22} {'model':<24} {'SoC':<8} {'choice':<6} {'sent':>9} {'MB sent':>8}  "
               f"{'graphs':<24} status")
    for r in results:
        if r.error:
            click.echo(f"{r.serial:<22} {'-':<24} {'-':<8} {'-':<6} {'-':>9} {'-':>8}  {'-':<24} ERROR: {r.error}")
            continue
        graphs = ", ".join(f"{g.graph} {g.status}" for g in r.graphs) or ("not run" if r.provider == "npu" else "-")
        sent = f"{len(r.push.sent)}/{r.push.files}"
        click.echo(f"{r.serial:<22} {r.model[:24]:<24} {r.soc or '?':<8} {r.provider.upper():<6} {sent:>9} "
                   f"{r.push.bytes_sent / 1e6:>8.2f}  {graphs:<24} {'ok' if r.ok else 'FAILED'}")


@device.command("verify")
@click.argument("bundle_dir", metavar="BUNDLE", type=click.Path(path_type=Path))
@serial_option
@click.option("--all", "all_devices", is_flag=True, help="Every connected device, in parallel.")
@click.option("--runner", type=click.Path(dir_okay=False, path_type=Path),
              help="A qnn-net-run built for aarch64-android, to run the context binaries on the phone.")
@click.option("--qnn-sdk-root", type=click.Path(file_okay=False, path_type=Path),
              help="QAIRT SDK: its bin/aarch64-android/qnn-net-run (default: $QNN_SDK_ROOT when it has one), and "
                   "the QNN libraries for a bundle with an external runtime.")
@click.option("--inputs", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Input samples as for validate: *.npz or INPUT.npy; DIR/GRAPH/ per graph.")
@click.option("--samples", type=int, default=1, show_default=True, help="Seeded random samples without --inputs.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for the random samples.")
@click.option("--runs", type=int, default=10, show_default=True,
              help="Inferences in the timed run (the samples, repeated).")
@click.option("-o", "--output", "record_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("device-records"), show_default=True, help="Folder for the device records (JSON).")
@json_option
@handles_errors
def device_verify(bundle_dir: Path, serial: str | None, all_devices: bool, runner: Path | None,
                  qnn_sdk_root: Path | None, inputs: Path | None, samples: int, seed: int, runs: int,
                  record_dir: Path, as_json: bool) -> None:
    """Push a bundle to a phone as the app would use it, check it there, run it, and record the result.

    \b
    The bundle is verified first. The app's own decision picks the target for the phone's SoC; its files, the
    CPU fallback and the runtime libraries for its arch go to /data/local/tmp/qnndeploy/NAME-VERSION/ (only
    files whose sha256 differs are sent; a staging folder is renamed at the end; an interrupted push resumes).
    With a runner, each context binary runs on the phone (qnn-net-run, LD_LIBRARY_PATH and ADSP_LIBRARY_PATH
    set) and its outputs are compared with the CPU model on this host, with validate's metrics; known QNN
    errors become advice. A phone whose SoC is not in the bundle: CPU fallback expected. Exit 1 when a phone
    fails.
    """
    from qnndeploy.device import verify as stage

    given = click.get_current_context().get_parameter_source("serial") == click.core.ParameterSource.COMMANDLINE
    if all_devices and given:
        fail("give -s SERIAL or --all, not both")
    report, manifest = stage.check_bundle(bundle_dir)
    if not report.ok:
        emit_json({"bundle": report, "devices": []}) if as_json else _render_verify(report)
        fail(f"{bundle_dir} fails bundle verify: fix the bundle (or build it again) before pushing it",
             EXIT_CHECK_FAILED)
    job = stage.Job(bundle_dir, manifest, runner, qnn_sdk_root, inputs, samples, seed, runs, record_dir)
    if all_devices:
        results = stage.verify_all(job)
    else:
        with byte_progress("pushing", quiet=as_json) as progress:
            results = [stage.verify_device(job, serial, progress)]
    if as_json:
        emit_json({"bundle": report, "devices": results})
    else:
        click.echo(f"bundle {report.name} {report.version} (QAIRT {report.qairt}): verified, {report.files} files")
        for r in results:
            if not r.error:
                _render_device_verification(r)
        if all_devices:
            _render_verify_table(results)
        for r in results:
            if r.record:
                click.echo(f"record: {_shown(r.record)}")
    if not all(r.ok for r in results):
        sys.exit(EXIT_CHECK_FAILED)


# --- compile / validate / doctor ----------------------------------------------------------------------

def _shown(path: Path) -> str:
    """A path as short as it can be: relative to the current folder when it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@contextmanager
def _job_progress(what: str) -> Iterator[Callable | None]:
    """A rich progress bar on stderr fed by the library's (done, total, result) callback; none when piped."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[last]}"), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None, last="")

        def update(done: int, total: int, result) -> None:
            last = f"{result.graph} {result.soc} {result.status}" if result is not None else ""
            bar.update(task, completed=done, total=total, last=last)

        yield update


@cli.command("compile")
@click.argument("models", nargs=-1, required=True, metavar="MODEL.onnx|NAME=MODEL.onnx...")
@click.option("--soc", "socs", multiple=True, required=True, metavar="SOC",
              help="Target SoC; repeat for several (qnndeploy socs lists them).")
@click.option("--backend", type=click.Choice(["ort", "qairt"]),
              help="ort: onnxruntime-qnn (default where installed); qairt: the QAIRT SDK's tools.")
@click.option("--precision", type=click.Choice(["fp16", "w8a16"]), default="fp16", show_default=True,
              help="fp16 activations, or 8-bit weights with 16-bit activations (needs --calib).")
@click.option("--calib", type=click.Path(path_type=Path), metavar="DIR",
              help="w8a16 calibration samples: *.npz (one per sample) or INPUT.npy; DIR/GRAPH/ per graph.")
@click.option("-j", "--jobs", type=int, help="Jobs at once (default: the number of CPU cores).")
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), help="Build folder.")
@click.option("--qnn-sdk-root", type=click.Path(path_type=Path), help="QAIRT SDK for --backend qairt "
              "(default: $QNN_SDK_ROOT).")
@click.option("--no-cache", is_flag=True, help="Compile every job; neither read nor fill the cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path),
              help="Compile cache (default: $QNNDEPLOY_CACHE_DIR or ~/.cache/qnndeploy/compile).")
@json_option
@handles_errors
def compile_cmd(models: tuple[str, ...], socs: tuple[str, ...], backend: str | None, precision: str,
                calib: Path | None, jobs: int | None, out: Path, qnn_sdk_root: Path | None, no_cache: bool,
                cache_dir: Path | None, as_json: bool) -> None:
    """Compile each model for each SoC into a QNN context binary, in parallel, with records and logs.

    \b
    Writes OUT/<graph>/<SoC>/<graph>.bin (+ <graph>_ctx.onnx with the ort backend) and compile.json,
    and OUT/logs/<graph>-<SoC>.log. Unchanged jobs come from the cache. A failing job does not stop
    the others; the exit code is 1 when any job failed. CPU fallback is off: a node the HTP cannot run
    fails the job and is named.
    """
    from qnndeploy import compile as stage

    with _job_progress("compiling") as progress:
        summary = stage.compile_models(stage.models_from_args(list(models)), list(socs), out, backend=backend,
                                       precision=precision, calib=calib, jobs=jobs, progress=progress,
                                       use_cache=not no_cache, cache_dir=cache_dir, qnn_sdk_root=qnn_sdk_root)
    report(summary, as_json, _render_compile)


def _render_compile(summary) -> None:
    from qnndeploy.formats import CONTEXT_BINARY

    click.echo(f"backend {summary.backend}, QAIRT {summary.qairt_version}, {summary.precision}")
    for j in summary.jobs:
        if j.status == "failed":
            click.echo(f"  FAILED  {j.graph:<14} {j.soc:<9} {j.error}")
            click.echo(f"  {'':<7} {'':<14} {'':<9} log: {_shown(j.log)}")
            continue
        binary = next((o for o in j.outputs if o["format"] == CONTEXT_BINARY), None)
        made = f"{_shown(j.folder / binary['path'])} ({binary['size'] / 1e6:.1f} MB)" if binary else ""
        when = j.note if j.status == "cached" else f"{j.duration_s:.1f} s"
        click.echo(f"  {j.status:<7} {j.graph:<14} {j.soc:<9} {made}  [{when}]")
    noted = [j for j in summary.jobs if j.warnings and j.status != "failed"]
    if noted:
        click.echo("warnings (each job's full log is in the folder shown):")
        for j in noted:
            for w in j.warnings:
                click.echo(f"  {j.graph} {j.soc}: {w}")
            click.echo(f"    log: {_shown(j.log)}")
    counts = {s: sum(j.status == s for j in summary.jobs) for s in ("ok", "cached", "failed")}
    click.echo(f"{counts['ok']} compiled, {counts['cached']} cached, {counts['failed']} failed "
               f"in {summary.duration_s:.1f} s -> {_shown(summary.out)}")
    if counts["failed"]:
        click.echo("failed: " + ", ".join(f"{j.graph} {j.soc}" for j in summary.failures))
    if counts["ok"] + counts["cached"]:
        click.echo(f"next: qnndeploy validate {shlex.quote(_shown(summary.out))}")


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


@cli.command()
@click.argument("build", type=click.Path(path_type=Path))
@click.option("--inputs", type=click.Path(path_type=Path), metavar="DIR",
              help="Real input samples: *.npz (one per sample) or INPUT.npy; DIR/GRAPH/ per graph.")
@click.option("--random", "random_", type=int, metavar="N", help="N seeded random samples (default 1).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --random.")
@click.option("--min-cosine", type=float, help="Override the cosine similarity threshold (fp16 0.999, w8a16 0.99).")
@click.option("--min-snr-db", type=float, help="Override the SNR threshold in dB (fp16 30, w8a16 20).")
@click.option("--atol", type=float, help="Override the near-zero level (fp16 1e-3, w8a16 1e-2): an output whose "
              "CPU reference has an RMS below it is judged on max abs diff <= atol instead of cosine and SNR.")
@json_option
@handles_errors
def validate(build: Path, inputs: Path | None, random_: int | None, seed: int, min_cosine: float | None,
             min_snr_db: float | None, atol: float | None, as_json: bool) -> None:
    """Run each compiled context on the host HTP emulator and the source ONNX on CPU; compare outputs.

    Reports max abs diff, rel L2, cosine and SNR per output, judges them against per-precision
    thresholds and writes BUILD/<graph>/<SoC>/validation.json. Exit 1 when any target fails.
    Emulator timings are not phone timings.
    """
    from qnndeploy import validate as stage

    overrides = {k: v for k, v in (("min_cosine", min_cosine), ("min_snr_db", min_snr_db), ("atol", atol))
                 if v is not None}
    with _job_progress("validating on the HTP emulator") as progress:
        summary = stage.validate_build(build, inputs, random_, seed=seed, thresholds=overrides, progress=progress)
    report(summary, as_json, _render_validation)


def _render_validation(summary) -> None:
    i = summary.inputs
    source = i["folder"] if i["kind"] == "files" else f"{i['samples']} random sample(s), seed {i['seed']}"
    click.echo(f"inputs: {source}")
    for t in summary.targets:
        label = {"passed": "PASS", "failed": "FAIL", "skipped": "skip", "error": "ERROR"}[t.status]
        if t.status in ("skipped", "error"):
            click.echo(f"  {label:<5} {t.graph:<14} {t.soc:<9} {t.reason}")
            continue
        click.echo(f"  {label:<5} {t.graph:<14} {t.soc:<9} {t.samples} sample(s), "
                   f"emulator {t.emulator_s_per_run:.2f} s/run")
        for m in t.outputs:
            _render_output(m)
    counts = {s: sum(t.status == s for t in summary.targets) for s in ("passed", "failed", "skipped", "error")}
    click.echo(", ".join(f"{n} {s}" for s, n in counts.items() if n) + f"; records: {_shown(summary.build)}"
               "/<graph>/<SoC>/validation.json")
    click.echo(f"note: {summary.emulator_note}")


@cli.command()
@click.option("--qnn-sdk-root", type=click.Path(path_type=Path), help="QAIRT SDK to check (default: $QNN_SDK_ROOT).")
@json_option
@handles_errors
def doctor(qnn_sdk_root: Path | None, as_json: bool) -> None:
    """Check this machine: OS and CPU, onnxruntime-qnn, QAIRT SDK, Python 3.10, NDK, adb and phones.

    Exit 0 when what `compile` and `validate` need is there (optional parts may be missing), 3 when not.
    """
    from qnndeploy import doctor as stage
    from qnndeploy.errors import EXIT_MISSING_TOOL

    report = stage.doctor(qnn_sdk_root)
    if as_json:
        emit_json(report)
    else:
        for c in report.checks:
            optional = "" if c.required or c.status == "ok" else " (optional)"
            click.echo(f"{c.status:<8} {c.name:<24} {c.detail}{optional}")
            if c.fix and c.status != "ok":
                click.echo(f"{'':<8} {'':<24} -> {c.fix}")
        click.echo("ready to compile and validate" if report.ok else "not ready: fix the required lines above")
    if not report.ok:
        sys.exit(EXIT_MISSING_TOOL)


# --- scaffold -----------------------------------------------------------------------------------------

@cli.command("scaffold")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--package", required=True, help="The app's Java/Kotlin package, e.g. com.example.foo "
              "(the glue goes in PACKAGE.qnndeploy).")
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="Folder to create, best inside the app module (e.g. app/qnndeploy); must be new or empty.")
@click.option("--engine", type=click.Choice(["ort", "sherpa-onnx"]), default="ort", show_default=True,
              help="ONNX Runtime with the QNN EP (EPContext .onnx), or sherpa-onnx (QnnConfig, context binaries).")
@click.option("--app", is_flag=True, help="Make a complete one-screen Android app around the glue (engine ort).")
@click.option("--force", is_flag=True,
              help="Replace OUTPUT if it is an earlier scaffold output (it holds .qnndeploy-scaffold).")
@json_option
@handles_errors
def scaffold_cmd(bundle: Path, package: str, out: Path, engine: str, app: bool, force: bool, as_json: bool) -> None:
    """Generate the app side of a bundle: Kotlin runtime selector and engine glue, Gradle and manifest snippets.

    The bundle (folder or archive) must pass `bundle verify`; it is copied into OUTPUT/bundle/ in the layout
    Gradle wants. The README.md written to OUTPUT lists the three lines to add to the app.
    """
    from qnndeploy import scaffold as stage
    from qnndeploy.bundle.verify import opened

    stage.check_request(package, out, engine=engine, app=app, force=force)
    with byte_progress("verifying", as_json) as progress, opened(bundle, progress) as (root, report):
        if not report.ok:
            emit_json(report) if as_json else _render_verify(report)  # the report is the JSON output here
            fail(f"{bundle} fails bundle verify ({len(report.problems)} problem(s)); not scaffolding from it: "
                 "fix or rebuild the bundle")
        result = stage.scaffold(root, package, out, engine=engine, app=app, force=force, report=report)
    if as_json:
        emit_json(result)
        return
    kind = "sample app" if app else f"{engine} glue"
    click.echo(f"{kind} for {package} in {result.path}: {len(result.kotlin)} Kotlin files, "
               f"bundle copied ({result.bundle_files} files, {result.bundle_bytes / 1e6:.1f} MB)")
    click.echo(f"  NPU targets: {', '.join(result.targets) or 'none (CPU only)'}; runtime: {result.runtime}")
    if app:
        click.echo(f"next: open {result.path} in Android Studio (or gradle wrapper && ./gradlew installDebug); "
                   f"see {result.path / 'README.md'}")
    else:
        click.echo("add these three lines to the app (details in README.md there):")
        for line in result.lines:
            click.echo(f"  {line}")


# --- demo -------------------------------------------------------------------------------------------

@cli.command()
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("qnndeploy-demo"), show_default=True,
              help="Folder for the model, build, records and bundle.")
@click.option("--soc", "soc_names", multiple=True, help="SoC to compile for (repeatable) [default: SM8550 SM8650 SM8750].")
@click.option("--qnn-sdk-root", type=click.Path(path_type=Path), help="Bundle the runtime libraries of a QAIRT SDK.")
@click.option("--runtime-libs", type=click.Path(path_type=Path), help="Bundle the runtime libraries of a flat folder.")
@click.option("--force", is_flag=True, help="Empty an existing output folder first.")
@json_option
@handles_errors
def demo(output: Path, soc_names: tuple[str, ...], qnn_sdk_root: Path | None, runtime_libs: Path | None, force: bool,
         as_json: bool) -> None:
    """The whole procedure on the embedded demo model: check, prepare, compile, validate, bundle, verify."""
    from qnndeploy.demo import DEFAULT_SOCS, STEPS, run_demo

    steps: list[str] = []

    def step(text: str) -> None:
        steps.append(text)
        if not as_json:
            click.echo(f"[{len(steps)}/{STEPS}] {text}")

    r = run_demo(output, tuple(soc_names) or DEFAULT_SOCS, force, step, qnn_sdk_root, runtime_libs)
    if as_json:
        emit_json(r)
        return
    click.echo("")
    click.echo(f"check before: {r.verdict_before}; prepare: {'; '.join(r.prepare_changes)}; "
               f"CPU max abs diff {r.max_abs_diff_cpu:.1e}")
    click.echo(f"check after: {r.verdict_after}, {r.cpu_partitions} CPU partition(s) on the HTP")
    cached = f" ({r.cached} from the compile cache)" if r.cached else ""
    click.echo(f"compiled {len(r.compiled)} context binaries{cached} in {r.compile_s:.1f} s: {', '.join(r.compiled)}")
    for line in r.validated:
        click.echo(f"validated {line}")
    click.echo(f"bundle {r.bundle} ({r.bundle_files} files, QAIRT {r.qairt}) verifies clean")
    click.echo(f"runtime: {r.runtime}")
    click.echo("emulator results show the HTP's arithmetic, not phone speed: measure that on a phone.")
    click.echo("next:")
    for c in r.next_commands:
        click.echo(f"  {c}")


def _terminated(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM (CI cancel, kill) cleans up like Ctrl-C: nothing half-written stays


def main() -> None:
    """Run the CLI with one-line errors for usage mistakes too, and SIGTERM handled like Ctrl-C."""
    import signal

    signal.signal(signal.SIGTERM, _terminated)
    try:
        code = cli(standalone_mode=False)
    except click.UsageError as e:
        where = f" (see {e.ctx.command_path} --help)" if e.ctx else ""
        fail(f"{e.format_message()}{where}", e.exit_code)
    except click.ClickException as e:
        fail(e.format_message(), e.exit_code)
    except (click.Abort, KeyboardInterrupt):
        fail("interrupted; nothing was left half-written", 130)
    sys.exit(code if isinstance(code, int) else 0)

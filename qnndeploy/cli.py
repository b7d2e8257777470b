"""The command line: parse options, call one library function, render its result. Only this module prints."""

from __future__ import annotations

import dataclasses
import functools
import json
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
    from rich.progress import DownloadColumn, Progress, SpinnerColumn, TextColumn, TransferSpeedColumn

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

def _pairs(values: tuple[str, ...], option: str, example: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        key, sep, path = v.partition("=")
        if not sep or not key or not path:
            raise QnnDeployError(f"{option} {v!r} is not of the form {example}")
        if key in out:
            raise QnnDeployError(f"{option} gives {key} twice")
        out[key] = path
    return out


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
def bundle(ctx: click.Context, name, version_, cpu, npu, from_build, qnn_sdk_root, runtime_libs, qairt_version, precision,
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
    spec.cpu.update({g: Path(p) for g, p in _pairs(cpu, "--cpu", "GRAPH=model.onnx").items()})
    for soc, graphs in _npu(npu).items():
        spec.npu.setdefault(soc, {}).update(graphs)
    spec.sdk_root, spec.libs_dir, spec.qairt_version = qnn_sdk_root, runtime_libs, qairt_version
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
    click.echo(f"next: qnndeploy bundle verify {result.path}")


@bundle.command("verify")
@click.argument("path", type=click.Path(path_type=Path))
@json_option
@handles_errors
def bundle_verify(path: Path, as_json: bool) -> None:
    """Check a bundle folder or archive; every problem is reported. Exit 0 only when clean, 1 with problems."""
    from qnndeploy.bundle.verify import verify_bundle

    with byte_progress("verifying", as_json) as progress:
        report = verify_bundle(path, progress)
    emit_json(report) if as_json else _render_verify(report)
    if not report.ok:
        sys.exit(EXIT_CHECK_FAILED)


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
@click.option("--no-measure", is_flag=True, help="Skip the HTP partitioning (reads the graph only).")
@json_option
@handles_errors
def check(models: tuple[Path, ...], soc: str | None, no_measure: bool, as_json: bool) -> None:
    """Is each ONNX model ready for the NPU? Findings, measured HTP op support, a verdict and the fix.

    \b
    Exit codes: 0 ready; 10 fixable (`qnndeploy prepare` fixes it: the report gives
    the command line); 11 not ready (needs a re-export); 2 bad input; 3 missing tool.
    With several models the worst verdict decides.
    """
    from qnndeploy import onnxcheck

    reports = [onnxcheck.check_model(m, soc=soc, measure=not no_measure) for m in models]
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


def _assignments(values: tuple[str, ...], option: str, parse: Callable) -> dict:
    out: dict = {}
    for v in values:
        name, value = parse(v)
        if name in out:
            raise QnnDeployError(f"{option} gives {name} twice")
        out[name] = value
    return out


@cli.command()
@click.argument("model", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="The prepared model OUT.onnx; OUT.prepare.json is written beside it.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=1,3,640,640", help="Fix an input's dims.")
@click.option("--int32-inputs", is_flag=True,
              help="Wrap int64 inputs and outputs as int32 (a Cast inside the graph, names unchanged).")
@click.option("--freeze", multiple=True, metavar="NAME=VALUE[,VALUE…]",
              help="Replace an input by a constant (e.g. sample_rate=16000) so what it drives folds away.")
@click.option("--no-simplify", is_flag=True, help="Skip onnxsim; shapes are still fixed and re-inferred.")
@click.option("--inputs", "inputs_dir", type=click.Path(path_type=Path),
              help="Folder with NAME.npy or NAME.npz per input for the equivalence run [default: random inputs].")
@click.option("--tolerance", type=float, default=1e-4, show_default=True,
              help="Fail when an output's max abs diff and its rel L2 error both exceed this.")
@click.option("--force", is_flag=True, help="Overwrite OUT.onnx.")
@json_option
@handles_errors
def prepare(model: Path, out: Path, shapes: tuple[str, ...], int32_inputs: bool, freeze: tuple[str, ...],
            no_simplify: bool, inputs_dir: Path | None, tolerance: float, force: bool, as_json: bool) -> None:
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
        force=force)
    if as_json:
        emit_json(result)
        return
    extra = f" + {Path(result.external_data).name}" if result.external_data else ""
    click.echo(f"wrote {result.output}{extra} and {result.record}")
    for change in result.changes:
        click.echo(f"  {change}")
    for title, tensors in (("inputs", result.inputs), ("outputs", result.outputs)):
        click.echo(f"  {title}: " + ", ".join(f"{t.name} {t.dtype} {t.shape_text()}" for t in tensors))
    click.echo(f"  equivalence on onnxruntime CPU (inputs: {result.equivalence_inputs}; "
               f"tolerance {result.tolerance:g}):")
    for d in result.equivalence:
        click.echo(f"    {d.name:<28} max abs diff {d.max_abs_diff:.2g}  rel L2 {d.rel_l2:.2g}  "
                   f"{'ok' if d.ok else 'FAIL'}")
    for note in result.notes:
        click.echo(f"  note: {note}")
    click.echo(f"next: qnndeploy check {result.output}")



def main() -> None:
    cli()

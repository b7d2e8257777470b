"""`qnndeploy bundle build` and `bundle verify`. The rule for a bundle argument (a path that is not a bundle at all is
bad input, exit 2; a bundle with problems is exit 1) is the API's (qnndeploy/api/_bundles.py), for every command."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from qnndeploy.api import (
    BundleResult,
    BundleSpec,
    OnDeviceRequest,
    VerifyReport,
    build_bundle,
    spec_from_build,
    verify_with_runtime,
    with_split,
)
from qnndeploy.base.errors import BadInput
from qnndeploy.base.fileio import resolve_named
from qnndeploy.base.kinds import choices
from qnndeploy.base.names import ACCEPT_ON, PERFORMANCE_MODES
from qnndeploy.cli._common import (
    CONTEXT_SETTINGS,
    Group,
    Renamed,
    assignments,
    byte_progress,
    command_line,
    emit_json,
    gathered,
    handles_errors,
    json_option,
    next_step,
    render_verify,
    report,
    shallow_option,
    step_progress,
    unchecked_option,
)
from qnndeploy.formats.archive import ArchiveKind
from qnndeploy.formats.manifest import DEFAULT_COMPILE_BUDGET_S


def _render_build(result: BundleResult) -> None:
    click.echo(f"bundle {result.path}  ({result.files} files, {result.bytes / 1e6:.1f} MB, QAIRT {result.qairt})")
    click.echo(f"  targets: {', '.join(result.targets) or 'none (CPU only)'}")
    click.echo(f"  runtime: {result.runtime}")
    for g in result.on_device:
        click.echo(f"  on-device compile: {g.graph} validated for {', '.join(g.validated) or 'no HTP arch'}")
    for line in result.licences:
        click.echo(f"  licence: {line}")
    if result.archive:
        click.echo(f"  archive: {result.archive}")
    for w in result.warnings:
        click.echo(f"  warning: {w.path}: {w.message}")
    next_step(command_line("qnndeploy", "bundle", "verify", Path(result.path)))


def _graph_file(value: str) -> tuple[str, Path]:
    graph, sep, path = value.partition("=")
    if not (sep and graph and path):
        raise BadInput(f"--cpu {value!r} is not of the form GRAPH=model.onnx")
    return graph, resolve_named(Path(path))  # a link named here is followed once; bundle opens with O_NOFOLLOW


def _accepts(values: tuple[str, ...]) -> dict[tuple[str, str], str]:
    """--accept GRAPH@SOC=REASON (SOC may be *) into (graph, SoC) -> reason, refusing a pair given twice."""
    out: dict[tuple[str, str], str] = {}
    for v in values:
        pair, sep, reason = v.partition("=")
        graph, at, soc = pair.partition("@")
        if not (sep and at and graph and soc):
            raise BadInput(f"--accept {v!r} is not of the form GRAPH@SOC=\"REASON\" (SOC may be *)")
        if (graph, soc) in out:
            raise BadInput(f"--accept gives {graph}@{soc} twice")
        out[(graph, soc)] = reason
    return out


def _npu(values: tuple[str, ...]) -> dict[str, dict[str, list[Path]]]:
    out: dict[str, dict[str, list[Path]]] = {}
    for v in values:
        soc, sep, rest = v.partition(":")
        graph, sep2, path = rest.partition("=")
        if not (sep and sep2 and soc and graph and path):
            raise BadInput(f"--npu {v!r} is not of the form SOC:GRAPH=path/graph.bin")
        files = out.setdefault(soc, {}).setdefault(graph, [])
        if any(Path(f).suffix == Path(path).suffix for f in files):
            raise BadInput(f"--npu gives {soc}:{graph} twice")
        files.append(resolve_named(Path(path)))
    return out


class _BundleGroup(Group):
    """`bundle --name …` (options, no subcommand) is read as `bundle build --name …`, the form from before `build`
    was a subcommand. It stays unambiguous: whatever follows is parsed by `build` alone, so `bundle --name x
    verify P` is an error (build takes no arguments), never a verify that drops --name."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0].startswith("-") and args[0] not in ctx.help_option_names:
            stray = self.commands["build"].make_context("build", list(args), parent=ctx, resilient_parsing=True).args
            if stray and stray[0] in self.commands:
                raise click.UsageError(f"options go after the subcommand (`qnndeploy bundle {stray[0]} …`); "
                                       "`qnndeploy bundle --OPTION …` with no subcommand is `bundle build --OPTION …`",
                                       ctx)
            args = ["build", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_BundleGroup, context_settings=CONTEXT_SETTINGS)
def bundle() -> None:
    """Build a bundle, or verify one.

    `qnndeploy bundle --name NAME --version VERSION …` (options, no subcommand) is short for
    `qnndeploy bundle build --name NAME --version VERSION …`.
    """


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildArgs:
    """What `bundle build` is asked: its options as click parsed them, a field each."""

    name: str
    version_: str
    cpu: tuple[str, ...]
    npu: tuple[str, ...]
    from_build: Path | None
    accept: tuple[str, ...]
    accept_on: str | None
    qnn_sdk_root: Path | None
    runtime_libs: Path | None
    align_16k: bool
    qairt_version: str | None
    maven_runtime_version: str | None
    precision: str | None
    source_model: Path | None
    model_name: str | None
    commit: str | None
    license_: str | None
    split_record: Path | None
    performance_mode: str | None
    on_device_compile: bool
    compile_budget: float | None
    vtcm_mb: int | None
    optimization_mode: int | None
    output: Path
    archive: str | None
    force: bool


@bundle.command("build")
@click.option("--name", required=True, help="Bundle name (the folder is NAME-VERSION).")
@click.option("--version", "version_", required=True, metavar="VERSION", help="Bundle version, e.g. 1.0.0.")
@click.option("--cpu", "cpu", multiple=True, metavar="GRAPH=MODEL.onnx",
              help="CPU fallback model of GRAPH (repeatable; every graph needs one, --from-build gives them).")
@click.option("--npu", "npu", multiple=True, metavar="SOC:GRAPH=FILE",
              help="QNN context binary (.bin) of GRAPH for SOC (repeatable); an EPContext _ctx.onnx may be given too.")
@click.option("--from-build", type=click.Path(path_type=Path), metavar="DIR",
              help="Take context binaries, CPU models and records from a `qnndeploy compile` output folder.")
@click.option("--accept", "accept", multiple=True, metavar="GRAPH@SOC=REASON",
              help="With --from-build: ship GRAPH for SOC (* for every SoC it failed on) although it failed "
                   "validation, recording REASON in the manifest (repeatable; every failed pair needs one).")
@click.option("--accept-on", type=click.Choice(ACCEPT_ON), metavar="npu|cpu",
              help="Where the app runs a SoC with an accepted failure: npu (the reason says its results are good "
                   "enough) or cpu (the CPU fallback on that SoC) [default: npu].")
@click.option("--qnn-sdk-root", type=click.Path(path_type=Path), metavar="DIR",
              help="Take runtime libraries from a QAIRT SDK.")
@click.option("--runtime-libs", type=click.Path(path_type=Path), metavar="DIR",
              help="Take runtime libraries from a flat folder.")
@click.option("--align-16k", is_flag=True,
              help="Raise the PT_LOAD p_align of runtime libraries aligned below 16 KB (Qualcomm's Skels) to 16384, "
                   "where every segment's file offset and address agree modulo 16384; proven on the bytes, both "
                   "hashes recorded. Without it such a library is refused.")
@click.option("--qairt", "qairt_version", cls=Renamed, metavar="X.Y.Z",
              help="QAIRT version when the binaries do not embed it.")
@click.option("--maven-runtime-version", metavar="X.Y.Z",
              help="External runtime: the qnn-runtime release to pin, no older than the oldest that loads the binaries "
                   "[default: QAIRT's].")
@click.option("--precision", type=click.Choice(["fp16", "w8a16", "w4a16", "w8a8"]),
              help="Precision of the context binaries [default: the compile records', else fp16].")
@click.option("--source-model", type=click.Path(path_type=Path), metavar="PATH",
              help="The original model file (its sha256 goes in the manifest).")
@click.option("--source-model-name", "model_name", cls=Renamed, metavar="NAME",
              help="Name of the source model [default: the bundle name].")
@click.option("--commit", help="Commit of the source model.")
@click.option("--license", "license_", metavar="LICENSE", help="Licence of the model, e.g. Apache-2.0.")
@click.option("--split", "split_record", type=click.Path(path_type=Path), metavar="OUT.split.json",
              help="A model split by prepare --split-at or --split-size: a CPU part goes in as a CPU-only graph, "
                   "every NPU part must be in the build, and the app runs them in order.")
@click.option("--performance-mode", cls=Renamed, type=click.Choice(PERFORMANCE_MODES), metavar="MODE",
              help="HTP performance mode the generated glue sets: " + ", ".join(PERFORMANCE_MODES)
              + " [default: the glue's, burst].")
@click.option("--on-device-compile", is_flag=True,
              help="Let phones whose SoC has no target compile the CPU models on first run with ONNX Runtime's QNN "
                   "EP: each graph is compiled here as the phone would, for one SoC of each HTP arch from v69, and "
                   "run on the host HTP emulator; the arches that pass are listed.")
@click.option("--compile-budget", type=click.FloatRange(min=1, max=3600), metavar="SECONDS",
              help="With --on-device-compile: the first run's compile budget; past it the app takes the CPU "
                   "[default: 60].")
@click.option("--vtcm-mb", type=click.IntRange(1, 9999), metavar="MB",
              help="With --on-device-compile: the VTCM the phone's compile may use [default: the QNN EP's].")
@click.option("--optimization-mode", type=click.IntRange(1, 3), metavar="1-3",
              help="With --on-device-compile: HTP graph finalization optimization of the phone's compile (3 "
                   "compiles slowest) [default: the QNN EP's].")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path(), show_default=True,
              metavar="DIR", help="Folder that receives NAME-VERSION/.")
@click.option("--archive", type=click.Choice(choices(ArchiveKind)), help="Also write NAME-VERSION.tar.gz or .zip.")
@click.option("--force", is_flag=True, help="Replace an existing NAME-VERSION/ (and its archive) in the output folder.")
@json_option
@handles_errors
@gathered(BuildArgs)
def build(args: BuildArgs, as_json: bool) -> None:
    """Assemble a bundle from context binaries and CPU models.

    Per-SoC context binaries, CPU fallbacks, runtime libraries and records, listed in manifest.json.
    Without --qnn-sdk-root or --runtime-libs the bundle declares the external runtime
    com.qualcomm.qti:qnn-runtime pinned to its QAIRT version. The bundle is verified before it is
    renamed into place: a failed run leaves nothing under DIR/NAME-VERSION. With --from-build, a graph
    that failed validation is refused unless --accept gives the reason it ships anyway.
    """
    on_device = (args.compile_budget, args.vtcm_mb, args.optimization_mode)
    if not args.on_device_compile and on_device != (None, None, None):
        raise BadInput("--compile-budget, --vtcm-mb and --optimization-mode set the phone's own compile: they need "
                       "--on-device-compile")
    if (args.accept or args.accept_on) and not args.from_build:
        raise BadInput("--accept and --accept-on need --from-build: only a compile folder's validation records "
                       "say which graphs failed")
    base = (spec_from_build(args.from_build, args.name, args.version_, _accepts(args.accept), args.accept_on,
                            args.split_record) if args.from_build
            else BundleSpec(args.name, args.version_, {}, {}))
    given = _npu(args.npu)
    spec = dataclasses.replace(
        base, cpu={**base.cpu, **assignments(args.cpu, "--cpu", _graph_file)},
        npu={soc: {**base.npu.get(soc, {}), **given.get(soc, {})} for soc in {**base.npu, **given}},
        sdk_root=args.qnn_sdk_root, libs_dir=args.runtime_libs, align_16k=args.align_16k,
        qairt_version=args.qairt_version, maven_version=args.maven_runtime_version, source_model=args.model_name,
        source_path=args.source_model, commit=args.commit, license=args.license_,
        precision=args.precision or base.precision, performance_mode=args.performance_mode,
        on_device=OnDeviceRequest(args.compile_budget or DEFAULT_COMPILE_BUDGET_S, args.vtcm_mb,
                                  args.optimization_mode) if args.on_device_compile else None)
    if args.split_record is not None and not args.from_build:
        spec = with_split(spec, args.split_record)
    with byte_progress("bundling", as_json) as progress:
        result = build_bundle(spec, args.output, force=args.force, archive_fmt=args.archive, progress=progress,
                              steps=lambda step: click.echo(f"bundle: {step}", err=True))
    if as_json:
        emit_json(result)
    else:
        _render_build(result)


@bundle.command("verify")
@click.argument("path", type=click.Path(path_type=Path))
@shallow_option
@unchecked_option
@json_option
@handles_errors
def verify(path: Path, shallow: bool, allow_unchecked: bool, as_json: bool) -> None:
    """Check a bundle folder or archive.

    PATH is a bundle folder, .tar.gz or .zip; every problem is reported. Each context binary is read with
    libQnnSystem and (unless --shallow) loaded on the host HTP emulator and compared with its CPU model.

    Exit 0 when clean, 1 with problems, 2 when PATH is not a bundle at all (no manifest.json, or one
    that is not a readable qnndeploy manifest).
    """
    with step_progress("bundle verify") as live:
        result, app = verify_with_runtime(path, deep=not shallow, allow_unchecked=allow_unchecked,
                                          progress=None if as_json else live.read, steps=live.step)
    report(result, as_json, lambda r: _render_verified(r, path, shallow, app))


def _render_verified(result: VerifyReport, path: Path, shallow: bool, app: str | None = None) -> None:
    render_verify(result, shallow)
    if app:  # what scaffold --engine ort will pin for this bundle, and whether it is validated for its binaries
        click.echo(f"    {app}")
    if result.ok:  # the two ways on from a sound bundle: the app's glue, and a phone
        next_step(command_line("qnndeploy", "scaffold", path, "--package", "com.example.app", "-o", "app/qnndeploy"),
                  command_line("qnndeploy", "device", "verify", path))

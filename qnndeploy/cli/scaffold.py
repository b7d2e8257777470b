"""`qnndeploy scaffold`: the app side of a verified bundle."""

from __future__ import annotations

from pathlib import Path

import click

from qnndeploy.api import ScaffoldRequest, ScaffoldResult
from qnndeploy.api import scaffold as scaffold_bundle
from qnndeploy.base.compat import Aar
from qnndeploy.base.kinds import choices
from qnndeploy.cli._common import (
    as_enum,
    byte_progress,
    emit_json,
    escaped,
    gathered,
    handles_errors,
    json_option,
    shallow_option,
    unchecked_option,
)
from qnndeploy.decide.reach import Engine


def _render_scaffold(result: ScaffoldResult) -> None:
    kind = "sample app" if result.app else f"{result.engine} glue"
    click.echo(f"{kind} for {result.package} in {result.path}: {len(result.kotlin)} Kotlin files, "
               f"bundle copied ({result.bundle_files} files, {result.bundle_bytes / 1e6:.1f} MB)")
    click.echo(f"  NPU targets: {', '.join(result.targets) or 'none (CPU only)'}; runtime: {result.runtime}")
    licence = escaped(result.license) if result.license else "not given (bundle build --license)"
    click.echo(f"  the model's licence: {licence}; the app ships the model under it")
    if result.runtime_set:
        click.echo(f"  {result.runtime_set}")
    if result.play:
        click.echo(f"  NPU files: in the Google Play AI pack {result.play}; the app has the CPU models")
    for w in result.warnings:
        click.echo(f"  warning: {w}")
    if result.app:
        click.echo(f"next: open {result.path} in Android Studio (or gradle wrapper && ./gradlew installDebug); "
                   f"see {result.path / 'README.md'}")
    else:
        count = {3: "three", 6: "six"}.get(len(result.lines), str(len(result.lines)))
        click.echo(f"add these {count} lines to the app (details in README.md there):")
        for line in result.lines:
            click.echo(f"  {line}")


@click.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--package", required=True, metavar="NAME", help="The app's Java/Kotlin package, e.g. com.example.foo "
              "(the glue goes in PACKAGE.qnndeploy).")
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), metavar="DIR",
              help="Folder to create, new or empty: the glue, best inside the app module (e.g. app/qnndeploy); "
                   "with --app, the whole app.")
@click.option("--engine", type=click.Choice(choices(Engine)), default="ort", show_default=True,
              callback=as_enum(Engine),
              help="ONNX Runtime with the QNN EP (EPContext .onnx), or sherpa-onnx (QnnConfig, context binaries).")
@click.option("--ort-aar", type=click.Choice(choices(Aar)), default=None, callback=as_enum(Aar),
              help="Engine ort's ONNX Runtime: Microsoft's onnxruntime-android-qnn (QNN built in), or Qualcomm's QNN "
                   "plugin AAR with onnxruntime-android (the glue registers the plugin); pinned to a validated set "
                   "that loads the bundle. [default: the newest validated set of either that loads the bundle's "
                   "binaries, else microsoft]")
@click.option("--app", is_flag=True, help="Make a complete one-screen Android app around the glue (engine ort).")
@click.option("--play", "play", type=click.Path(path_type=Path), metavar="DIR",
              help="A `qnndeploy package play BUNDLE -o DIR` output: the NPU files come from its Google Play AI "
                   "pack (the app keeps the CPU models and fetches the pack), not from the app's assets.")
@click.option("--force", is_flag=True,
              help="Replace DIR if it is an earlier scaffold output (it holds .qnndeploy-scaffold), never another "
                   "folder.")
@shallow_option
@unchecked_option
@json_option
@handles_errors
@gathered(ScaffoldRequest)
def scaffold(args: ScaffoldRequest, as_json: bool) -> None:
    """Generate the app side of a bundle: Kotlin glue.

    The Kotlin runtime selector (NPU or CPU on each phone) and engine glue, Gradle and manifest snippets.

    The bundle (folder or archive) must pass `bundle verify` (exit 1 with its report when it does not, 2 when
    BUNDLE is not a bundle); it is copied beside the glue (DIR/bundle/, or DIR/app/qnndeploy/bundle/ with --app)
    in the layout Gradle wants. Without --app, the README.md written to DIR lists the three lines to add to
    the app (with --play, three more: the pack's Gradle files).
    """
    with byte_progress("verifying", as_json) as progress:
        result = scaffold_bundle(args, progress=progress)
    if as_json:
        emit_json(result)
    else:
        _render_scaffold(result)

"""`qnndeploy reach`: which phones take the NPU with a bundle, and why not the others."""

from __future__ import annotations

from pathlib import Path

import click

from qnndeploy.api import reach as reach_bundle
from qnndeploy.base.kinds import choices
from qnndeploy.cli._common import (
    byte_progress,
    command_line,
    emit_json,
    handles_errors,
    json_option,
    next_step,
    table,
    unchecked_option,
)
from qnndeploy.decide.reach import WORLDS, Engine, Reach, ReachRow, Spelled


def _android(row: ReachRow) -> str:
    return "any" if row.min_sdk is None else f"SDK {row.min_sdk}+"


def render(result: Reach, bundle: Path) -> None:
    click.echo(f"bundle {result.bundle}, engine {result.engine}: {result.chipsets} chipsets, {len(result.rows)} "
               "names phones report (Qualcomm's chipset table and the SoC catalog)")
    table(["world", "chipset", "SoC", "arch", "reports", "as", "Android", "path", "runtime", "Play group", "reason"],
          ([r.world, r.chipset, r.soc, r.dsp_arch, r.spelling + (" (assumed)" if r.spelled == Spelled.ASSUMED else ""),
            r.identified_by, _android(r), r.path, r.runtime, r.play_group, f"{r.reason_key}: {r.reason}"]
           for r in result.rows))
    click.echo("chipsets by their best name's path:")
    for w in result.summary:
        click.echo(f"  {w.world:<10} {w.prebuilt:>3} prebuilt  {w.on_device:>3} on-device  {w.cpu:>3} cpu")
    click.echo("reason keys are those the app's glue logs (logcat tag qnndeploy, its \"decision\" line)")
    next_step(command_line("qnndeploy", "scaffold", bundle, "--package", "com.example.app", "-o", "app/qnndeploy"))


@click.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--engine", type=click.Choice(choices(Engine)), default=Engine.ORT.value, show_default=True,
              help="The app's engine, as scaffold --engine: ort compiles the ONNX on phones without a target when "
                   "the bundle allows it (bundle build --on-device-compile); sherpa-onnx runs context binaries only.")
@click.option("--world", "worlds", multiple=True, type=click.Choice(WORLDS, case_sensitive=False), metavar="WORLD",
              help=f"Only the chipsets of this world of Qualcomm's table: {', '.join(WORLDS[:-1])} or {WORLDS[-1]} "
                   "(catalog SoCs the table does not list), in any case. Repeatable. [default: all]")
@unchecked_option
@json_option
@handles_errors
def reach(bundle: Path, engine: str, worlds: tuple[str, ...], allow_unchecked: bool, as_json: bool) -> None:
    """Which phones take the NPU with a bundle, and why not the others.

    For every chipset of Qualcomm's chipset table (qai-hub-models' devices_and_chipsets.yaml, copied in
    qnndeploy/data/qualcomm_chipsets.json) and of the SoC catalog, under every name phones report
    (Build.SOC_MODEL from Android 12: the catalog's model and aliases, Qualcomm's part numbers; ro.board.platform
    codenames on Android 11 and older), what the app's decision gives: a prebuilt context binary, an on-device
    compile, or the CPU, with the decision's reason key (the one the glue logs), the runtime the path needs and the
    Google Play device group the phone would get from `package play`; then per world how many chipsets get each
    path. The decision is the app's first start: the QNN libraries load and no failure is remembered.

    The bundle (folder or archive) must pass `bundle verify` without the host emulator (exit 1 with its report
    when it does not, 2 when BUNDLE is not a bundle).

    \b
    Exit codes: 0 the table; 1 the bundle fails bundle verify; 2 bad input (no such path, not a
    bundle, an unknown --engine or --world).
    """
    with byte_progress("verifying", as_json) as progress:
        result = reach_bundle(bundle, engine=engine, worlds=worlds, allow_unchecked=allow_unchecked, progress=progress)
    if as_json:
        emit_json(result)
    else:
        render(result, bundle)

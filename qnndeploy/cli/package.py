"""`qnndeploy package`: a verified bundle in the form an app store delivers (today: Google Play AI packs)."""

from __future__ import annotations

from pathlib import Path

import click

from qnndeploy.api import (
    DEFAULT_PACK,
    DELIVERIES,
    ON_DEVICE_ROW,
    PlayPackage,
    PlayRequest,
    package_play,
    play_size_text,
)
from qnndeploy.cli._common import (
    Group,
    as_enum,
    byte_progress,
    emit_json,
    escaped,
    gathered,
    handles_errors,
    json_option,
    jsonable,
    shallow_option,
    unchecked_option,
)
from qnndeploy.formats.playplan import Delivery


@click.group(cls=Group)
def package() -> None:
    """Package a bundle for an app store's delivery."""


def _render(result: PlayPackage) -> None:
    groups = result.plan.groups
    packs = result.plan.packs
    named = f"AI pack {result.pack}" if len(packs) == 1 else f"AI packs {', '.join(p.name for p in packs)}"
    click.echo(f"{named} ({result.delivery}) in {result.path}: {len(groups)} device group(s) + "
               f"'{result.plan.default_group}', {sum(len(g.files) for g in groups)} NPU files")
    licence = escaped(result.license) if result.license else "not given (bundle build --license)"
    click.echo(f"  the model's licence: {licence}; the app ships the model under it")
    for g in groups:
        models = sorted({s.model for s in g.selectors})
        spread = len({f.pack for f in g.files})
        click.echo(f"  group {g.name}: {', '.join(g.socs)} ({g.dsp_arch}); selectors: "
                   f"{len(g.selectors)} system-on-chip (QTI and Qualcomm x {', '.join(models)})"
                   + (f"; its files in {spread} packs" if spread > 1 else ""))
    for c in result.plan.cpu_packs:
        click.echo(f"  install-time asset pack {c.name}: {len(c.files)} CPU model file(s), "
                   f"{play_size_text(c.deflated)} deflated (over the base module's limit; with the app, read as its "
                   "assets)")
    external = result.plan.base.external_runtime
    click.echo("what one phone downloads (deflated, as in the APKs), against one APK with every SoC's files:")
    width = max(len(r.group) for r in result.rows)
    click.echo(f"  {'group':<{width}}  {'files':>5}  {'bytes':>12}  {'deflated':>12}  {'of one APK':>10}")
    size = play_size_text
    for r in result.rows:
        share = r.deflated / result.one_apk_deflated if result.one_apk_deflated else 0.0
        click.echo(f"  {r.group:<{width}}  {r.files:>5}  {size(r.bytes):>12}  {size(r.deflated):>12}  {share:>10.0%}")
    click.echo(f"  {'one APK':<{width}}  {'':>5}  {size(result.one_apk_bytes):>12}  "
               f"{size(result.one_apk_deflated):>12}  {'100%':>10}")
    on_device = result.plan.on_device
    default = result.rows[-1]
    if on_device is not None:  # the default group's phones: the NPU all the same, from the base module's ONNX
        archs = ", ".join(on_device.archs) or "none"
        click.echo(f"  {ON_DEVICE_ROW}, {size(default.deflated)} (group {default.group}: HTP {archs} "
                   f"validated, {size(on_device.deflated)} of ONNX compiled at first run within "
                   f"{on_device.budget_s:g} s; other arches run the CPU model)")
    if external:
        click.echo(f"  (plus the QNN runtime {external} from Maven, the same for every phone)")
    click.echo(f"add to the app project ({result.path / 'README.md'} has the details and the commands to check it):")
    for line in result.lines:
        click.echo(f"  {line}")


@package.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), metavar="DIR",
              help="Folder to create, new or empty: the AI pack module, the device targeting config, play.gradle "
                   "and play.json (best at the app project's top level).")
@click.option("--delivery", type=click.Choice(DELIVERIES), default="fast-follow", show_default=True,
              callback=as_enum(Delivery),
              help="When Play delivers the pack: with the app (install-time), right after install (fast-follow), "
                   "or when the app asks (on-demand). Until a pack is there the app runs the CPU model.")
@click.option("--pack", default=DEFAULT_PACK, show_default=True,
              help="The AI pack's name (and Gradle module): a letter, then letters, digits or underscores.")
@click.option("--force", is_flag=True,
              help="Replace DIR if it is an earlier package play output (it holds .qnndeploy-play), never another "
                   "folder.")
@shallow_option
@unchecked_option
@json_option
@handles_errors
@gathered(PlayRequest)
def play(args: PlayRequest, as_json: bool) -> None:
    """Write a Google Play AI pack of BUNDLE, one device group per SoC.

    Each group holds its targets' NPU files and is selected by Build.SOC_MANUFACTURER (QTI or Qualcomm) and
    Build.SOC_MODEL (the SoC and its catalog aliases); phones of no group get the default group "other" and the
    CPU model, which stays in the app's base module with the QNN runtime libraries. Prints, per group, what a
    phone downloads against one APK holding every SoC's files. Then scaffold the glue with `scaffold --play DIR`.

    The bundle (folder or archive) must pass `bundle verify` (exit 1 with its report when it does not, 2 when
    BUNDLE is not a bundle).
    """
    with byte_progress("verifying, hashing and deflating", as_json) as progress:
        result = package_play(args, progress=progress)
    if as_json:
        data = jsonable(result)
        assert isinstance(data, dict)
        data["plan"] = result.plan.to_json()  # as play.json has it, not its type's fields
        emit_json(data)
    else:
        _render(result)

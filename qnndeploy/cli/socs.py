"""`qnndeploy socs`: the SoC catalog."""

from __future__ import annotations

import click

from qnndeploy.api import Soc, find_soc, soc_sources
from qnndeploy.api import socs as catalog
from qnndeploy.cli._common import emit_json, handles_errors, json_option


def _known(value: object, shown: str) -> str:
    return "?" if value is None else shown


def _verified(s: Soc) -> str:
    """The QAIRT releases whose compiler wrote this row's soc_model and arch (measured), and those that did not."""
    def span(versions: list[str]) -> str:
        return versions[0] if len(versions) == 1 else f"{versions[0]}-{versions[-1]}"

    good = [m.qairt for m in s.measured if (m.soc_model, m.arch) == (s.soc_id, s.arch_number) and not m.refuses]
    other = [m.qairt for m in s.measured if m.qairt not in good]
    if not s.measured:
        return "-"
    if not good:
        return f"none ({span(other)} refuse it)"
    return span(good) + (f", not {', '.join(other)}" if other else "")


def _detail(s: Soc) -> None:
    fp16 = _known(s.fp16, "yes" if s.fp16 else "no")
    click.echo(f"{s.model}  soc_model {s.soc_id}, HTP {s.dsp_arch}, VTCM {_known(s.vtcm_mb, f'{s.vtcm_mb} MB')}, "
               f"fp16 {fp16}  {s.marketing_name or ''}".rstrip())
    click.echo(f"  also reported as: {', '.join(s.aliases) or '-'};  "
               f"ro.board.platform: {', '.join(s.codenames) or '-'}")
    hosted = {True: "hosted", False: "not available for jobs", None: ""}[s.aihub_hosted]
    click.echo(f"  AI Hub chipset: {', '.join(s.aihub_chipsets) or '-'} {hosted}".rstrip())
    for m in s.measured:
        if m.soc_model is None:
            click.echo(f"  QAIRT {m.qairt} compiles nothing for it on the host (measured)")
            continue
        refuses = f", refuses {', '.join(m.refuses)}" if m.refuses else ""
        marker = (f"; its embedded prepare string says arch={m.marker_arch}, libQnnSystem and bundle verify read "
                  f"v{m.arch}" if m.marker_arch is not None and m.marker_arch != m.arch else "")
        click.echo(f"  QAIRT {m.qairt} writes soc_model {m.soc_model}, arch v{m.arch}{refuses} (measured){marker}")
    if s.note:
        click.echo(f"  note: {s.note}")
    for key in s.confirmed_by:
        source = soc_sources()[key]
        click.echo(f"  source {key}: {source['where']} (read {source['read']})")


@click.command()
@click.argument("name", required=False)
@json_option
@handles_errors
def socs(name: str | None, as_json: bool) -> None:
    """The SoC catalog, or one SoC with its sources and what QNN's compiler wrote for it.

    NAME is a model (SM8750), a name phones report (SM8750-AC), a QNN soc_id (69) or a ro.board.platform codename
    (sun), in any case.
    """
    rows = [find_soc(name)] if name else list(catalog())
    if as_json:
        emit_json([s.to_json() for s in rows])
        return
    if name:
        _detail(rows[0])
        return
    click.echo(f"{'model':<9} {'soc_id':>6} {'arch':<4} {'vtcm':>4} {'fp16':<4} {'name':<32} {'also reported as':<20} "
               "verified with QAIRT")
    for s in rows:
        vtcm = _known(s.vtcm_mb, f"{s.vtcm_mb}M")
        fp16 = _known(s.fp16, "yes" if s.fp16 else "NO")
        click.echo(f"{s.model:<9} {s.soc_id:>6} {s.dsp_arch:<4} {vtcm:>4} {fp16:<4} {s.marketing_name or '-':<32} "
                   f"{','.join(s.aliases) or '-':<20} {_verified(s)}")
    click.echo("sources and measurements of one SoC: qnndeploy socs NAME")

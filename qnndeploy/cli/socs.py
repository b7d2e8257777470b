"""`qnndeploy socs`: the SoC catalog."""

from __future__ import annotations

import click

from qnndeploy import socs as catalog
from qnndeploy.cli._common import emit_json, handles_errors, json_option


@click.command()
@click.argument("name", required=False)
@json_option
@handles_errors
def socs(name: str | None, as_json: bool) -> None:
    """The SoC catalog, or one SoC.

    NAME is a model (SM8750), alias, QNN soc_id (69) or ro.board.platform codename (sun), in any case.
    """
    rows = [catalog.find(name)] if name else list(catalog.catalog())
    if as_json:
        emit_json([s.to_json() for s in rows])
        return
    click.echo(f"{'model':<10} {'soc_id':>6}  {'arch':<5} {'vtcm':>4}  {'fp16':<4}  {'name':<26} codenames")
    for s in rows:
        click.echo(f"{s.model:<10} {s.soc_id:>6}  {s.dsp_arch:<5} {s.vtcm_mb:>3}M  {'yes' if s.fp16 else 'NO':<4}  "
                   f"{s.marketing_name or '-':<26} {','.join(s.codenames) or '-'}")

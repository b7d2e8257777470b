"""`qnndeploy doctor`: what this machine can do, and what to install."""

from __future__ import annotations

from pathlib import Path

import click

from qnndeploy.api import DoctorReport
from qnndeploy.api import doctor as examine
from qnndeploy.base.errors import EXIT_MISSING_TOOL
from qnndeploy.cli._common import handles_errors, json_option, report


def _render_doctor(result: DoctorReport) -> None:
    """Required and present lines first, with the verdict; then the optional parts not here, apart: each is needed by
    one path only, so their absence is not a fault."""
    absent = [c for c in result.checks if not c.required and c.status != "ok"]
    for c in result.checks:
        if c not in absent:
            click.echo(f"{c.status:<8} {c.name:<24} {c.detail}")
            if c.fix and c.status != "ok":
                click.echo(f"{'':<8} {'':<24} -> {c.fix}")
    click.echo("ready to compile and validate" if result.ok else "not ready: fix the required lines above")
    if absent:
        click.echo(f"optional, not here ({len(absent)}; each is needed by one path only, which its line names):")
        for c in absent:
            click.echo(f"  {c.name:<24} {c.detail}" + (f"; {c.fix}" if c.fix else ""))


@click.command()
@click.option("--qnn-sdk-root", type=click.Path(path_type=Path), metavar="DIR",
              help="QAIRT SDK to check [default: $QNN_SDK_ROOT].")
@json_option
@handles_errors
def doctor(qnn_sdk_root: Path | None, as_json: bool) -> None:
    """What this machine can do, and what to install.

    Required: Linux x86-64, Python, onnxruntime-qnn. Optional (one line each says which path needs it):
    the QAIRT SDK and its Python 3.10 converters, the NDK, adb and connected phones.

    Exit 0 when what `compile` and `validate` need is there (optional parts may be missing), 3 when not.
    """
    report(examine(qnn_sdk_root), as_json, _render_doctor, failed=EXIT_MISSING_TOOL)

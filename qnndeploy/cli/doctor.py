"""`qnndeploy doctor`: what this machine can do, and what to install."""

from __future__ import annotations

from pathlib import Path

import click

from qnndeploy import doctor as stage
from qnndeploy.base.errors import EXIT_MISSING_TOOL
from qnndeploy.cli._common import handles_errors, json_option, report


def _render_doctor(result: stage.DoctorReport) -> None:
    for c in result.checks:
        optional = "" if c.required or c.status == "ok" else " (optional)"
        click.echo(f"{c.status:<8} {c.name:<24} {c.detail}{optional}")
        if c.fix and c.status != "ok":
            click.echo(f"{'':<8} {'':<24} -> {c.fix}")
    click.echo("ready to compile and validate" if result.ok else "not ready: fix the required lines above")


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
    report(stage.doctor(qnn_sdk_root), as_json, _render_doctor, failed=EXIT_MISSING_TOOL)

"""`qnndeploy report`: one self-contained HTML page of the records under build folders, bundles and device record
folders."""

from __future__ import annotations

from pathlib import Path

import click

from qnndeploy.api import ReportResult
from qnndeploy.api import report as write_report
from qnndeploy.cli._common import emit_json, escaped, handles_errors, json_option, shown, step_progress


def _render(result: ReportResult) -> None:
    kinds: dict[str, int] = {}
    for r in result.records:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    counts = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
    click.echo(f"report: {shown(result.output)} ({len(result.cells)} graph x SoC, records: {counts}; "
               f"{len(result.skipped)} file(s) skipped)")
    for s in result.skipped:
        click.echo(f"  skipped {escaped(s.source)}: {escaped(s.reason)}")


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="PATH...")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("report.html"), show_default=True,
              metavar="FILE.html", help="The page to write.")
@click.option("--force", is_flag=True, help="Replace an existing FILE.html.")
@json_option
@handles_errors
def report(paths: tuple[Path, ...], output: Path, force: bool, as_json: bool) -> None:
    """One self-contained HTML page of the records of builds, bundles and phones.

    Each PATH is a build folder (compile -o), a bundle (folder or archive), a folder of device records (device
    verify, device bench) or one record's .json; `check --json` and `diagnose --json` outputs saved to a .json file
    are read too. Per graph x SoC: the check verdict and HTP coverage, compile time and sizes, validation figures,
    diagnose curves, on-device compile validation, device verify figures, and bench figures with plots (latency
    distribution per path, energy per inference CPU vs NPU, sustained curves, op profile). Every section names the
    record it came from; a file that is not a record, or cannot be read, is listed as skipped with the reason. The
    page has its CSS and plots (SVG) inline: no script, nothing fetched from the network.

    \b
    Exit codes: 0 written; 2 bad input (a PATH that does not exist or holds no record,
    FILE.html exists without --force, or lies inside a PATH it reads).
    """
    with step_progress("report") as live:
        result = write_report(list(paths), output, force=force, steps=live.step)
    if as_json:
        emit_json(result)
    else:
        _render(result)

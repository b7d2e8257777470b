"""`qnndeploy report`: one self-contained HTML page of every record under the paths given (a build folder, a bundle,
a folder of device records): per graph x SoC the check verdict and HTP coverage, compile time and sizes, validation
figures, diagnose curves, on-device compile validation, device verify and bench figures with plots, the estimate
(estimated, not measured) beside them, each naming the record it came from. collect.py finds and reads the
records into entries.py's dataclasses, html.py renders the page, svg.py draws the plots."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from qnndeploy import __version__
from qnndeploy.base.errors import BadInput
from qnndeploy.base.fileio import check_apart, staging_file, writing
from qnndeploy.report import html
from qnndeploy.report.collect import collect
from qnndeploy.report.entries import Collected, Skipped


@dataclass(frozen=True)
class RecordRef:
    kind: str
    source: str  # as the page names it: relative to the path given, under its name


@dataclass
class ReportResult:
    output: Path
    paths: list[str]
    records: list[RecordRef] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    duplicates: dict[str, str] = field(default_factory=dict)  # a record's identical copy -> the one shown
    cells: list[tuple[str, str]] = field(default_factory=list)  # (graph, SoC), as the page lists them
    bytes: int = 0


def report(paths: Sequence[Path], output: Path, force: bool = False, steps: Callable[[str], None] | None = None
           ) -> ReportResult:
    """Read every record under `paths` and write the page to `output` whole or not at all (a staging file, then
    one rename). BadInput when a path does not exist or holds no record, `output` is or lies inside a path read,
    or `output` exists without `force`.
    `steps` is told of each long step (each path read, the page drawn) as it starts."""
    output = Path(output)
    if not paths:
        raise BadInput("give at least one PATH: a build folder, a bundle or a folder of device records")
    if output.is_dir():
        raise BadInput(f"{output} is a folder: give the report's file name, e.g. -o {output / 'report.html'}")
    if any(Path(p).exists() and output.exists() and output.samefile(p) for p in paths):
        raise BadInput(f"{output} is one of the PATHs read: give the report another name, e.g. -o report.html")
    check_apart(output, [("PATH read", Path(p)) for p in paths])  # --force would replace a record, or write a bundle
    if output.exists() and not force:  # before reading: a long read should not end in this refusal
        raise BadInput(f"{output} already exists; remove it or pass --force")
    collected = collect(list(paths), steps)
    if steps is not None:
        steps(f"drawing the page: {collected.records} record(s), their tables and plots")
    page = html.render(collected, datetime.now(UTC).isoformat(timespec="seconds"), __version__)
    data = page.encode("utf-8")
    with writing(output), staging_file(output, force=force, tidy=True) as tmp:
        tmp.write_bytes(data)
    return ReportResult(output, collected.paths, _refs(collected), collected.skipped, collected.duplicates,
                        list(html.cells(collected)), len(data))


def _refs(c: Collected) -> list[RecordRef]:
    groups: list[tuple[str, Sequence[Any]]] = [
        ("bundle", c.bundles), ("check", c.checks), ("compile", c.compiles), ("validation", c.validations),
        ("diagnose", c.diagnoses), ("on-device", c.on_device), ("device", c.devices), ("bench", c.benches),
        ("estimate", c.estimates)]
    return [RecordRef(kind, source) for kind, items in groups
            for source in dict.fromkeys(str(i.source) for i in items)]

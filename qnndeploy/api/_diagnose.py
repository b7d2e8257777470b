"""`diagnose --plot` for the command line: the error curve diagnose found, drawn to a file."""

from __future__ import annotations

from pathlib import Path

from qnndeploy.base.fileio import staging_file, writing
from qnndeploy.diagnose import DiagnoseResult, plot


def write_plot(result: DiagnoseResult, path: Path) -> None:
    """The SNR of each probed tensor against its position in the graph (capped at 150 dB), the bad ones marked and
    the threshold drawn; written whole or not at all."""
    probes = [p for p in result.probes if p.snr_db is not None]
    with writing(path), staging_file(path, force=True) as tmp:
        plot.line_chart([plot.Point(p.position, min(p.snr_db or 0.0, 150.0), p.bad) for p in probes], tmp,
                        threshold=result.min_snr_db)

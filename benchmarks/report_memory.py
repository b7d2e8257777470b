"""Peak memory of `qnndeploy report` over a folder of many large-but-valid records (issue 34, 6): bench records each
holding a detailed op profile and a long sustained run, a few MB apiece, as `device bench --profile detailed`
writes for a large model. One record against many: the many's peak should stay near the one's, however much the
folder holds (each file has a cap, and the report a total budget past which it skips files and says so).

    python benchmarks/report_memory.py [--records 60] [--record-mb 6] [--smoke]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from benchlib import QNNDEPLOY, Target, parse, parser, run, table  # benchlib puts the repository on sys.path

LIMIT_MB = 400  # the peak over any number of records


def write_records(folder: Path, count: int, size_mb: float) -> int:
    """`count` bench records of about `size_mb` each; their total bytes."""
    from tests.report.bench_fixture import bench_record

    folder.mkdir(parents=True)
    ops = max(1, int(size_mb * 1e6 / 160))  # an op row with its sustained point is about 160 bytes of JSON
    total = 0
    for i in range(count):
        record = bench_record(graph=f"graph_{i:03d}")
        record["profile"]["ops"] = [{"name": f"/encoder/layer_{j}/conv_{j}", "type": "Conv2d",
                                     "time_us": float(j % 997), "share": (j % 997) / 1e6, "where": "htp"}
                                    for j in range(ops)]
        record["sustained"] = [{"t_s": float(j), "path": "npu", "latency_ms_p50": 1.1 + (j % 7) / 100,
                                "throughput_per_s": 900.0, "temperature_c": 31.0, "thermal_status": 0}
                               for j in range(ops // 4)]
        path = folder / f"bench-emulator-5554-graph_{i:03d}.json"
        path.write_text(json.dumps(record))
        total += path.stat().st_size
    return total


def main() -> None:
    ap = parser(__doc__, repeat=None)
    ap.add_argument("--records", type=int, default=60, help="records in the large folder [60]")
    ap.add_argument("--record-mb", type=float, default=6.0, help="size of each record, MB [6]")
    args = parse(ap)
    count, size = (4, 0.2) if args.smoke else (args.records, args.record_mb)
    with tempfile.TemporaryDirectory(prefix="report-memory-") as tmp:
        root = Path(tmp)
        one_bytes = write_records(root / "one", 1, size)
        many_bytes = write_records(root / "many", count, size)
        rows, targets = [], []
        for name, folder, total in (("1 record", root / "one", one_bytes),
                                    (f"{count} records", root / "many", many_bytes)):
            m = run([*QNNDEPLOY, "report", str(folder), "-o", str(root / f"{folder.name}.html")])
            page = (root / f"{folder.name}.html").stat().st_size
            rows.append([name, f"{total / 1e6:.0f}", f"{m.seconds:.1f}", f"{m.peak_mb:.0f}", f"{page / 1e6:.1f}"])
            targets.append([Target("peak RSS", m.peak_mb, "<=", LIMIT_MB, " MB")])
    print(f"{count} bench records of about {size:g} MB each; {sys.executable}")
    table(["inputs MB", "seconds", "peak RSS MB", "page MB"], rows, targets)


if __name__ == "__main__":
    main()

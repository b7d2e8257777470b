"""The fuzz tier's `qnndeploy report` cases (issue 34; tests/cli/test_fuzz.py runs them under tests/support/fuzz.py's
invariant): bench records whose plots have an axis of no width or a figure at the float range's edges (the page is
written, exit 0), and a page told to land inside a path it reads, with --force (a one-line error, nothing written)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.report.bench_fixture import bench_record
from tests.support.fuzz import Case

BIG = 1.7976931348623157e308


def _latencies(value: float) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        for p in record["paths"].values():
            p["latency_ms"] = dict.fromkeys(p["latency_ms"], value)
            p["block_p50_ms"] = [value] * 4
            p["energy_mj_per_inference"] = value
    return change


def _sustained(t: Callable[[int], float], latency: Callable[[int], float]) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        for i, s in enumerate(record["sustained"]):
            s["t_s"], s["latency_ms_p50"], s["temperature_c"] = t(i), latency(i), latency(i)
    return change


def _one(path: str, key: str, value: float) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        record["paths"][path]["latency_ms"][key] = value
    return change


def _both(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        for c in changes:
            c(record)
    return change


FIGURES: dict[str, Callable[[dict[str, Any]], None]] = {
    "every latency 1e300": _latencies(1e300),
    "every latency the largest float": _latencies(BIG),
    "every latency 2**60": _latencies(float(2**60)),
    "every latency 5e-324": _latencies(5e-324),
    "sustained: one huge value": _sustained(float, lambda i: 1e300),
    "sustained: integers 1 apart past 2**53": _sustained(lambda i: 2**53 + i % 2, lambda i: 2**53 + (i + 1) % 2),
    "sustained: the largest float and its negative": _sustained(lambda i: (-BIG, BIG)[i % 2],
                                                                lambda i: (BIG, -BIG)[i % 2]),
    "sustained: subnormal times": _sustained(lambda i: 5e-324 * i, lambda i: 5e-324 * (i % 3)),
    "npu p50 5e-324": _one("npu", "p50", 5e-324),
    "npu min -1, p50 1e-323": _both(_one("npu", "min", -1.0), _one("npu", "p50", 1e-323)),
    "cpu p50 the largest float, npu p50 5e-324": _both(_one("cpu", "p50", BIG), _one("npu", "p50", 5e-324)),
}


def _records(change: Callable[[dict[str, Any]], None] | None = None) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        record = bench_record()
        if change is not None:
            change(record)
        (folder / "records").mkdir()
        (folder / "records" / "bench-emulator-5554-kws_demo.json").write_text(json.dumps(record))
    return setup


def report_cases(good_bundle: Path) -> Iterator[Case]:
    for label, change in FIGURES.items():
        yield Case(f"report of {label}", ("report", "records", "-o", "report.html"), _records(change), broken=False)

    def with_link(folder: Path) -> None:
        _records()(folder)
        (folder / "link").symlink_to("records")

    def with_bundle(folder: Path) -> None:
        _records()(folder)
        shutil.copytree(good_bundle, folder / "b", symlinks=True)

    inside = {"a record it reads": ("records", "records/bench-emulator-5554-kws_demo.json", _records()),
              "the folder it reads": ("records", "records/report.html", _records()),
              "a new folder in it": ("records", "records/sub/report.html", _records()),
              "a link to it": ("records", "link/report.html", with_link),
              "the folder, read through a link": ("link", "records/report.html", with_link),
              "the bundle it reads": ("b", "b/report.html", with_bundle),
              "the bundle's records": ("b", "b/records/report.html", with_bundle),
              "the bundle's manifest": ("b", "b/manifest.json", with_bundle)}
    for label, (path, out, setup) in inside.items():
        yield Case(f"report -o inside {label} --force", ("report", path, "-o", out, "--force"), setup, unchanged=True)

"""What `qnndeploy report` refuses and how it writes, on hand-made inputs (no compile, no browser): a path that is
not there or holds no record is bad input with nothing written, an existing page is replaced only with --force and
then whole, a folder is walked without entering symlinks or hidden folders."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from qnndeploy.base.errors import EXIT_BAD_INPUT
from tests.report.bench_fixture import bench_record
from tests.support.cli import parsed, run


def records(tmp_path: Path) -> Path:
    folder = tmp_path / "records"
    folder.mkdir()
    (folder / "bench-emulator-5554-kws_demo.json").write_text(json.dumps(bench_record()))
    return folder


def one_line_error(r, *words: str) -> None:
    assert r.exit_code == EXIT_BAD_INPUT, r.output
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert all(w in r.stderr for w in words), r.stderr
    assert r.stdout == ""


def test_a_path_that_is_missing_or_holds_no_record_is_bad_input_and_nothing_is_written(tmp_path):
    out = tmp_path / "report.html"
    one_line_error(run("report", tmp_path / "nowhere", "-o", out), "nowhere: no such file or folder")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.json").write_text('{"hello": 1}')
    one_line_error(run("report", empty, "-o", out), "no qnndeploy records in")
    model = tmp_path / "m.onnx"
    model.write_bytes(b"\0" * 16)
    one_line_error(run("report", model, "-o", out), "m.onnx is an ONNX model, not a record")
    one_line_error(run("report", records(tmp_path), "-o", tmp_path), "is a folder")
    bench = tmp_path / "records" / "bench-emulator-5554-kws_demo.json"
    one_line_error(run("report", bench, "-o", bench, "--force"), "is one of the PATHs read")
    assert json.loads(bench.read_text())["record"] == "qnndeploy-bench"
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["empty", "m.onnx", "records"]


def test_an_existing_page_is_replaced_only_with_force_and_whole(tmp_path):
    folder, out = records(tmp_path), tmp_path / "report.html"
    out.write_text("mine")
    one_line_error(run("report", folder, "-o", out), "already exists", "--force")
    assert out.read_text() == "mine"
    r = run("report", folder, "-o", out, "--force", "--json")
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
    assert parsed(r.stdout)["records"] == [{"kind": "bench", "source": "records/bench-emulator-5554-kws_demo.json"}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records", "report.html"]  # no staging file left


def test_symlinks_and_hidden_folders_are_not_read(tmp_path, monkeypatch):
    folder = records(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "bench-x-other.json").write_text(json.dumps(bench_record(graph="other")))
    (folder / "linked").symlink_to(elsewhere)
    (folder / "bench-link.json").symlink_to(elsewhere / "bench-x-other.json")
    (folder / ".partial").mkdir()
    (folder / ".partial" / "bench-x-half.json").write_text(json.dumps(bench_record(graph="half")))
    r = run("report", folder, "-o", tmp_path / "report.html", "--json")
    assert r.exit_code == 0, r.output
    result = parsed(r.stdout)
    assert result["cells"] == [["kws_demo", "SM8750"]]
    assert result["skipped"] == [{"source": "records/bench-link.json",
                                  "reason": "a symlink; records are read as regular files only"}]
    monkeypatch.chdir(tmp_path)
    text = run("report", "records", "-o", "report.html", "--force")
    assert text.exit_code == 0
    assert text.stdout.splitlines() == [
        "report: report.html (1 graph x SoC, records: 1 bench; 1 file(s) skipped)",
        "  skipped records/bench-link.json: a symlink; records are read as regular files only"]


def test_a_bundle_s_on_device_compile_records_are_shown_per_graph_and_arch(tmp_path):
    """Records as bundle build --on-device-compile writes them (qnn/ondevice.py ArchCheck.record)."""
    from qnndeploy.formats.ondevicerecord import OnDeviceRecord
    from qnndeploy.qnn.ondevice import ArchCheck, ep_options
    from tests.report.page import parse

    folder = tmp_path / "records"
    folder.mkdir()
    good = ArchCheck("kws_demo", "v79", "SM8750", 3.25, True, outputs=[
        {"name": "probs", "passed": True, "snr_db": 61.04, "cosine": 0.99999, "max_abs_diff": 2e-4}])
    bad = ArchCheck("kws_demo", "v73", "SM8550", None, False, error="the QNN EP refused the graph: <op> unsupported")
    for check in (good, bad):
        (folder / f"kws_demo-on-device-{check.arch}.json").write_text(
            json.dumps(OnDeviceRecord.of(check, ep_options("fp16"), "2.49.40").to_json()))
    out = tmp_path / "report.html"
    r = run("report", folder, "-o", out, "--json")
    assert r.exit_code == 0, r.output
    assert parsed(r.stdout)["cells"] == [["kws_demo", "SM8550"], ["kws_demo", "SM8750"]]
    dom = parse(out.read_text())
    (v79,) = dom.all("div", data_kind="on-device", data_source="records/kws_demo-on-device-v79.json")
    assert "pass: compiled as a phone's QNN EP compiles it for v79 (SM8750) in 3.2 s" in v79.text
    assert [td.text for td in v79.all("td")][:3] == ["probs", "ok", "61.0"]
    (v73,) = dom.all("div", data_kind="on-device", data_source="records/kws_demo-on-device-v73.json")
    assert "FAIL" in v73.text and "in \u2013" in v73.text and "refused the graph: <op> unsupported" in v73.text


def test_extreme_and_missing_figures_render_without_a_traceback(tmp_path):
    """Figures a broken or hostile writer may put in a record: huge, negative, zero, NaN and Infinity (which Python's
    json reads), a string where a number belongs, lists where objects belong. The page is written; NaN and Infinity
    show as not measured."""
    folder = tmp_path / "records"
    folder.mkdir()
    record = bench_record()
    npu = record["paths"]["npu"]
    npu["latency_ms"] = {"p50": 1e308, "p90": -1e308, "p99": 0, "mean": "fast", "min": -5, "max": 1e-300}
    npu["block_p50_ms"] = [1e308, -1, 0, "x", None]
    record["paths"]["cpu"]["energy_mj_per_inference"] = -3.0
    record["sustained"] = [{"t_s": 0, "path": "npu", "latency_ms_p50": 1e308, "temperature_c": -1e308},
                           {"t_s": 1e308, "path": "npu", "latency_ms_p50": 0, "temperature_c": 1e308}]
    record["profile"]["ops"][0]["share"] = 1e308
    text = json.dumps(record).replace('"p99": 0', '"p99": NaN').replace('"first_ms": 12.100000000000001',
                                                                        '"first_ms": Infinity')
    (folder / "bench-emulator-5554-kws_demo.json").write_text(text)
    (folder / "bench-x-lists.json").write_text(json.dumps({**bench_record(graph="g2"), "paths": [], "ratios": [1],
                                                           "sustained": {"t_s": 1}, "profile": [], "gate": []}))
    out = tmp_path / "report.html"
    r = run("report", folder, "-o", out, "--json")
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output and out.read_text().endswith("</html>\n")
    result = parsed(r.stdout)
    assert [x["source"] for x in result["records"]] == ["records/bench-emulator-5554-kws_demo.json"]
    assert [x["source"] for x in result["skipped"]] == ["records/bench-x-lists.json"]
    page = out.read_text()
    assert '<td class="num">\u2013</td>' in page
    assert not re.search(r'="[^"]*\b(nan|inf)\b', page), "a coordinate that is no number"


def plot_records(folder: Path) -> dict[str, dict]:
    """Bench records whose plots have an axis of no width a float can tell (one huge value; integers 1 apart past
    2**53, which a float reads as one) or a subnormal latency (5e-324, under the smallest 1-2-5 tick)."""
    equal = bench_record(graph="equal")
    for p in equal["paths"].values():
        p["latency_ms"] = dict.fromkeys(p["latency_ms"], 1e300)
        p["block_p50_ms"] = [1e300] * 4
    for s in equal["sustained"]:
        s["latency_ms_p50"], s["temperature_c"] = 1e300, 2**60
    apart = bench_record(graph="apart")
    for s in apart["sustained"]:
        s["t_s"], s["latency_ms_p50"] = 2**53 + (s["t_s"] > 50), 2**53 + (s["path"] == "npu")
    tiny = bench_record(graph="tiny")
    tiny["paths"]["npu"]["latency_ms"]["p50"] = 5e-324
    tiny["paths"]["npu"]["energy_mj_per_inference"] = 5e-324
    tiny["paths"]["cpu"]["energy_mj_per_inference"] = 0
    records = {"equal": equal, "apart": apart, "tiny": tiny}
    folder.mkdir()
    for name, record in records.items():
        (folder / f"bench-x-{name}.json").write_text(json.dumps(record))
    return records


def test_a_plot_axis_of_no_width_or_a_subnormal_figure_draws_a_page(tmp_path):
    """Issue 34: these raised ZeroDivisionError (svg._share) and 'math domain error' (the log axis of ranges)."""
    plot_records(tmp_path / "records")
    out = tmp_path / "report.html"
    r = run("report", tmp_path / "records", "-o", out, "--json")
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output and parsed(r.stdout)["skipped"] == []
    page = out.read_text()
    assert page.count('data-plot="latency"') == 3 and page.count('data-plot="sustained"') == 3
    assert not re.search(r'="[^"]*\b(nan|inf)\b', page), "a coordinate that is no number"


def test_every_plot_draws_any_pair_of_finite_figures():
    """svg's axes over the edges of the float range: every plot of every pair is drawn, its coordinates numbers."""
    import itertools

    from qnndeploy.report import svg

    big = 1.7976931348623157e308
    edges = [0.0, 5e-324, 1e-323, 2.2e-308, 1.0, 2.0**53, 2.0**53 + 2, 1e15 + 0.125, 1e300, big, -big, -1e300,
             -5e-324, -1.0]
    for a, b in itertools.product(edges, repeat=2):
        plots = [svg.line_chart([svg.Series("a", [(a, b), (b, a)])], title="t", x_label="x", y_label="y", threshold=a),
                 svg.line_chart([svg.Series("a", [(a, a), (a, a)])], title="t", x_label="x", y_label="y"),
                 svg.bars([("a", a, "#000"), ("b", b, "#000")], title="t", unit="u"),
                 svg.ranges([svg.Range("a", a, a, b, b, b, a, (a, b))], title="t", unit="u"),
                 svg.ranges([svg.Range("a", a, b, b, b, b)], title="t", unit="u")]
        for plot in plots:
            assert not re.search(r'="[^"]*\b(nan|inf)\b', plot), (a, b, plot)


@pytest.mark.slow
def test_the_page_of_extreme_plots_renders_in_chromium(tmp_path):
    from tests.report.page import render

    plot_records(tmp_path / "records")
    out = tmp_path / "report.html"
    assert run("report", tmp_path / "records", "-o", out).exit_code == 0
    dom, shot = render(out, tmp_path)
    assert len(dom.all("figure", data_plot="latency")) == 3 and shot.stat().st_size > 0


def test_the_page_may_not_be_written_inside_a_path_read(tmp_path, monkeypatch):
    """Issue 34: -o FILE --force inside a folder read replaced an input record, or wrote into a bundle."""
    folder = records(tmp_path)
    bench = folder / "bench-emulator-5554-kws_demo.json"
    before = bench.read_bytes()
    (folder / "sub").mkdir()
    (tmp_path / "link").symlink_to(folder)
    for out in (bench, folder / "report.html", folder / "sub" / "report.html", tmp_path / "link" / "report.html"):
        one_line_error(run("report", folder, "-o", out, "--force"), "write the output outside it")
    one_line_error(run("report", tmp_path / "link", "-o", bench, "--force"), "is inside the PATH read")
    assert bench.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["bench-emulator-5554-kws_demo.json", "sub"]
    assert list((folder / "sub").iterdir()) == []
    monkeypatch.chdir(folder)
    one_line_error(run("report", ".", "--force"), "-o report.html is inside the PATH read .")
    assert run("report", ".", "-o", tmp_path / "report.html").exit_code == 0


def test_past_the_total_budget_files_are_skipped_with_the_reason_and_the_page_says_so(tmp_path, monkeypatch):
    """Issue 34: report held every record read at once (335 MB of bench records peaked at 1.9 GB); each file had a
    cap, the whole none. Now records are read one at a time, kept as what the page shows, until the budget is
    spent: the files left are skipped, listed in the page's Skipped files and in --json, with why."""
    import importlib

    from tests.report.page import parse

    collect = importlib.import_module("qnndeploy.report.collect")  # the module: the package exports its function

    folder = tmp_path / "records"
    folder.mkdir()
    for i in range(3):
        (folder / f"bench-x-g{i}.json").write_text(json.dumps(bench_record(graph=f"g{i}")))
    size = (folder / "bench-x-g0.json").stat().st_size
    monkeypatch.setattr(collect, "MAX_TOTAL_BYTES", int(size * 2.5))
    out = tmp_path / "report.html"
    r = run("report", folder, "-o", out, "--json")
    assert r.exit_code == 0, r.output
    result = parsed(r.stdout)
    assert [x["source"] for x in result["records"]] == ["records/bench-x-g0.json", "records/bench-x-g1.json"]
    (skipped,) = result["skipped"]
    assert skipped["source"] == "records/bench-x-g2.json"
    assert skipped["reason"].startswith("not read: the report's budget of 0 MB of records is spent (")
    assert "report fewer paths at a time" in skipped["reason"]
    (item,) = parse(out.read_text()).all("li", data_source="records/bench-x-g2.json")
    assert "budget" in item.text and result["cells"] == [["g0", "SM8750"], ["g1", "SM8750"]]


def test_a_long_profile_shows_its_40_slowest_ops_and_counts_the_rest(tmp_path):
    """collect keeps only the rows the page shows (the slowest 40) and the count of the others."""
    folder = tmp_path / "records"
    folder.mkdir()
    record = bench_record()
    record["profile"]["ops"] = [{"name": f"op{j}", "type": "Conv2d", "time_us": float(j), "share": j / 1e4,
                                 "where": "htp"} for j in range(100)]
    (folder / "bench-x-g.json").write_text(json.dumps(record))
    out = tmp_path / "report.html"
    assert run("report", folder, "-o", out).exit_code == 0
    page = out.read_text()
    assert "<code>op99</code>" in page and "<code>op60</code>" in page and "<code>op59</code>" not in page
    assert "60 more ops with less time not shown" in page


def test_a_bench_records_first_launch_figures_are_shown_beside_its_first_inference(tmp_path):
    """Each path's session start and first result, cold and warm, in the rows after the first inference; a record
    older than those figures shows them as not measured (and still reads)."""
    from tests.report.page import parse

    folder = tmp_path / "records"
    folder.mkdir()
    new = bench_record(graph="new")
    for name, p in new["paths"].items():
        scale = 1 if name == "npu" else 10
        p["launch"] = {"session_cold_ms": 41.5 * scale, "session_warm_ms": 12.25 * scale,
                       "first_result_cold_ms": 640.0 * scale, "first_result_warm_ms": 95.5 * scale}
    (folder / "bench-emulator-5554-new.json").write_text(json.dumps(new))
    (folder / "bench-emulator-5554-old.json").write_text(json.dumps(bench_record(graph="old")))  # no launch
    out = tmp_path / "report.html"
    assert run("report", str(folder), "-o", str(out)).exit_code == 0
    page = parse(out.read_text())
    shown = {}
    for div in page.all("div", data_kind="bench"):
        rows = [[td.text for td in tr.all("td")] for tr in div.all("tr") if tr.all("td")]
        titles = [r[0] for r in rows]
        first = titles.index("first inference, ms")  # the launch rows follow it
        assert titles[first + 1:first + 5] == ["session start cold, ms", "session start warm, ms",
                                               "first result cold, ms", "first result warm, ms"]
        shown["new" if "new" in div.attrs["data-source"] else "old"] = {r[0]: r[1:3] for r in rows}
    assert shown["new"]["session start cold, ms"] == ["41.5", "415"]
    assert shown["new"]["first result warm, ms"] == ["95.5", "955"]
    assert shown["old"]["session start warm, ms"] == ["\u2013", "\u2013"]  # not measured, not a number

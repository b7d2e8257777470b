"""`qnndeploy report` on real records: a build folder and a bundle made by `qnndeploy demo`, `check --json` and
`diagnose --json` outputs saved to files, a device verify record from an emulated phone, and bench records written
from tests/report/bench_fixture.py (A FIXTURE OF THE BENCH RECORD FORMAT until `device bench` exists). The page is
rendered in headless Chromium: its DOM is checked for the sections, figures and escaped names, its screenshot for
being a picture at all."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest

from qnndeploy.qnn import htp
from tests.report import page as browser
from tests.report.bench_fixture import bench_record
from tests.support.cli import PROGRAM, parsed, run

pytestmark = [pytest.mark.slow, pytest.mark.needs_qnn]

pytest_plugins = ["tests.support.device_emulator.fixtures"]

EVIL_GRAPH = "<script>alert(1)</script>"
EVIL_OP = "<img src=x onerror=alert(2)>"
EVIL_FILE = 'bench-"><svg onload=alert(3)>.json'
GRAPH, SOC = "kws_demo", "SM8750"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Any]:
    """The demo's build and bundle, a records folder (check and diagnose outputs, two bench records, two broken
    files), and the report of all three, rendered by Chromium."""
    root = tmp_path_factory.mktemp("report")
    demo = root / "demo"
    r = run("demo", "-o", demo, "--soc", SOC)
    assert r.exit_code == 0, r.output
    records = root / "records"
    records.mkdir()
    with (records / "check.json").open("wb") as c, (records / "diagnose.json").open("wb") as d:  # as a user saves them
        jobs = [subprocess.Popen([*PROGRAM, "check", str(demo / "model/kws_demo.npu.onnx"), "--soc", SOC, "--json"],
                                 stdout=c, stderr=subprocess.DEVNULL),
                subprocess.Popen([*PROGRAM, "diagnose", str(demo / "build" / GRAPH / SOC), "--json"], stdout=d,
                                 stderr=subprocess.DEVNULL)]
        assert [job.wait(timeout=600) for job in jobs] == [0, 0]
    (records / "bench-emulator-5554-kws_demo.json").write_text(json.dumps(bench_record()))
    (records / EVIL_FILE).write_text(json.dumps(bench_record(graph=EVIL_GRAPH, serial='a"b&c', op_name=EVIL_OP)))
    (records / "broken.json").write_text('{"record": "qnndeploy-bench", ')
    (records / "no-phone.json").write_text(json.dumps({"record": "qnndeploy-bench", "graph": "g"}))
    out = root / "page" / "report.html"
    r = run("report", demo / "build", demo / "bundle/kws-demo-1.0.0", records, "-o", out, "--json")
    assert r.exit_code == 0, r.output
    dom, shot = browser.render(out, root)
    return {"demo": demo, "records": records, "out": out, "json": parsed(r.stdout), "dom": dom, "shot": shot}


def record_of(made: dict[str, Any], rel: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((made["demo"] / rel).read_text())
    return data


def cell(made: dict[str, Any], graph: str = GRAPH, soc: str = SOC) -> browser.Node:
    (found,) = made["dom"].all("section", data_graph=graph, data_soc=soc)
    return found


def block(made: dict[str, Any], kind: str, graph: str = GRAPH) -> browser.Node:
    (found,) = cell(made, graph).all("div", data_kind=kind)
    return found


def test_the_page_has_a_section_per_graph_and_soc_each_record_naming_its_file(made):
    cells = {(s.attrs["data-graph"], s.attrs["data-soc"]) for s in made["dom"].all("section", **{"class": "cell"})}
    assert cells == {(GRAPH, SOC), (EVIL_GRAPH, SOC)}
    kinds = [(b.attrs["data-kind"], b.attrs["data-source"]) for b in cell(made).all("div", **{"class": "record"})]
    assert kinds == [("check", "records/check.json"), ("compile", "build/kws_demo/SM8750/compile.json"),
                     ("validation", "build/kws_demo/SM8750/validation.json"), ("diagnose", "records/diagnose.json"),
                     ("bench", "records/bench-emulator-5554-kws_demo.json")]
    for b in cell(made).all("div", **{"class": "record"}):  # the file is named on the page, not only in an attribute
        assert f"from {b.attrs['data-source']}" in b.all("p", **{"class": "source"})[0].text
    # the bundle's copies of the build's records are the same bytes: shown once, both files named
    assert "kws-demo-1.0.0/records/kws_demo-SM8750-compile.json" in block(made, "compile").text
    (bundle,) = made["dom"].all("div", data_kind="bundle")
    assert bundle.attrs["data-source"] == "kws-demo-1.0.0/manifest.json" and "bundle kws-demo 1.0.0" in bundle.text
    listed = {(r["kind"], r["source"]) for r in made["json"]["records"]}
    assert {("bundle", "kws-demo-1.0.0/manifest.json"), ("check", "records/check.json"),
            ("bench", f"records/{EVIL_FILE}")} <= listed
    assert made["json"]["output"] == str(made["out"]) and made["out"].stat().st_size == made["json"]["bytes"]


def test_the_figures_are_the_records(made):
    compiled = record_of(made, "build/kws_demo/SM8750/compile.json")
    text = block(made, "compile").text
    assert f"in {compiled['duration_s']:.1f} s" in text and f"QAIRT {htp.qairt_version()}" in text
    binary = next(o for o in compiled["outputs"] if o["format"] == "qnn-context-binary")
    assert re.search(rf"kws_demo\.bin\s*qnn-context-binary\s*{binary['size'] / 1e3:.1f} kB", text), text

    validation = record_of(made, "build/kws_demo/SM8750/validation.json")
    (row,) = [r for r in block(made, "validation").all("tr") if r.all("td")]
    cells = [td.text for td in row.all("td")]
    (probs,) = validation["outputs"]
    assert cells[:4] == ["probs", "ok", f"{probs['snr_db']:.1f}", f"{probs['cosine']:.6f}"]
    assert validation["task"]["kind"] == "classify"  # the demo's scores are a one-row Softmax: its label decides
    assert f"classify (probs): {validation['task']['summary']}" in block(made, "validation").text

    check = json.loads((made["records"] / "check.json").read_text())["models"][0]["htp"]
    nodes = check["total_nodes"]
    share = (nodes - len(check["cpu_nodes"])) / nodes
    assert f"verdict ready; {share:.1%} of {nodes} nodes on the HTP" in block(made, "check").text

    diagnosed = json.loads((made["records"] / "diagnose.json").read_text())
    (figure,) = block(made, "diagnose").all("figure", data_plot="diagnose")
    assert len(figure.all("circle")) == len([p for p in diagnosed["probes"] if p["snr_db"] is not None]) > 0

    bench = block(made, "bench")
    assert {f.attrs["data-plot"] for f in bench.all("figure")} == {"latency", "energy", "sustained", "temperature"}
    assert all(len(f.all("svg")) == 1 for f in bench.all("figure"))
    rows = {tr.all("td")[0].text: [td.text for td in tr.all("td")[1:]] for tr in bench.all("tr") if tr.all("td")}
    assert rows["latency p50, ms"] == ["1.1", "9.2", "0.12"]  # npu, cpu, npu / cpu
    assert rows["energy per inference, mJ"] == ["0.9", "4.5", "0.2"]
    assert rows["real-time factor"] == ["\u2013", "\u2013", ""]  # null in the record: not measured, not a number
    assert rows["runs"][:2] == ["200", "200"] and "npu 200 runs, cpu 200 runs" in bench.text
    assert [c.strip() for c in rows["conv1"][:3]] == ["Conv2d", "120", "31.0%"] and rows["power_saver"][2] == "\u2013"
    assert "charging no, screen on no" in bench.text and "FAILED, threshold 10%" in bench.text


def test_names_from_records_render_as_text_never_as_markup(made):
    dom = made["dom"]
    assert dom.all("script") == [] and dom.all("img") == []
    assert not [n.tag for n in dom.all() if any(a.startswith("on") for a in n.attrs)]  # no onload=, onerror=
    evil = cell(made, EVIL_GRAPH)
    assert evil.all("h3")[0].text == f"{EVIL_GRAPH} on {SOC}"
    assert EVIL_OP in evil.text and 'a"b&c' in evil.text
    assert evil.all("div", data_kind="bench")[0].attrs["data-source"] == f"records/{EVIL_FILE}"
    raw = made["out"].read_text()
    assert "<script" not in raw and "&lt;script&gt;alert(1)&lt;/script&gt;" in raw


def test_the_page_is_self_contained_and_renders(made):
    from PIL import Image

    dom = made["dom"]
    fetching = [n.tag for n in dom.all() if n.tag in ("link", "script", "iframe", "object", "embed", "img", "image")
                or {"src", "srcset"} & set(n.attrs) or n.attrs.get("href", "#").partition("#")[0]]
    assert fetching == []  # nothing loaded from anywhere; links only within the page
    (style,) = dom.all("style")
    assert "url(" not in style.text and "@import" not in style.text and "@font-face" not in style.text
    raw = made["out"].read_text()
    assert set(re.findall(r"https?://[^\s\"'<>]+", raw)) == {"http://www.w3.org/2000/svg"}  # a namespace, not fetched
    with Image.open(made["shot"]) as shot:
        assert shot.size == (1200, 2000)
        pixels = shot.convert("RGB")
        colours = pixels.getcolors(maxcolors=1 << 22) or []
    assert len(colours) > 100  # text, tables and plots; one flat colour is a blank page
    dominant = max(colours)[0] / (1200 * 2000)
    assert dominant < 0.97, f"{dominant:.1%} of the screenshot is one colour"


def test_unreadable_files_are_listed_as_skipped_with_the_reason(made):
    skipped = {li.attrs["data-source"]: li.text for li in made["dom"].all("li") if "data-source" in li.attrs}
    assert "not readable JSON" in skipped["records/broken.json"]
    assert "a bench record, but it has no 'phone'" in skipped["records/no-phone.json"]
    assert {s["source"] for s in made["json"]["skipped"]} == {"records/broken.json", "records/no-phone.json"}


@pytest.mark.needs_adb
def test_a_device_verify_record_of_an_emulated_phone_is_shown_per_graph(made, device, tmp_path, monkeypatch):
    from tests.support.device_emulator import qnn_profile_viewer
    from tests.support.device_emulator.qnn_net_run import write_launcher
    from tests.support.elfgen import fake_sdk

    sdk = fake_sdk(tmp_path / "qairt", ["v79"])  # the runner stand-in and stand-in libraries in the SDK's layout
    (sdk / "bin/aarch64-android").mkdir(parents=True)
    write_launcher(sdk / "bin/aarch64-android/qnn-net-run")
    qnn_profile_viewer.write_launcher(sdk / "bin/aarch64-android/qnn-profile-viewer")  # reads the session start
    monkeypatch.setenv("QNN_SDK_ROOT", str(sdk))
    bundle = made["demo"] / "bundle/kws-demo-1.0.0"
    r = run("device", "verify", bundle, "--runs", "2", "-o", tmp_path / "device-records", "--json")
    assert r.exit_code == 0, r.output
    out = tmp_path / "report.html"
    assert run("report", bundle, tmp_path / "device-records", "-o", out).exit_code == 0
    dom = browser.dom_only(out, tmp_path)
    (phone,) = dom.all("div", data_kind="phone")
    assert phone.attrs["data-source"].startswith("device-records/kws-demo-1.0.0_") and device.serial in phone.text
    push = parsed(r.stdout)["devices"][0]["push"]
    assert f"pushed {push['bytes_sent']:,} of {push['bytes_total']:,} bytes ({push['files']} files" in phone.text
    (section,) = dom.all("section", data_graph=GRAPH, data_soc=SOC)
    (run_block,) = section.all("div", data_kind="device")
    (graph,) = parsed(r.stdout)["devices"][0]["graphs"]
    assert graph["status"] == "passed" and "passed; " in run_block.text
    assert f"{graph['outputs'][0]['snr_db']:.1f}" in run_block.text
    launch = graph["launch"]  # the first launch, cold and warm, as the phone's table shows it
    assert f"{launch['session_cold_ms']:.1f} / {launch['session_warm_ms']:.1f} ms" in phone.text
    assert f"{launch['first_result_cold_ms']:.1f} / {launch['first_result_warm_ms']:.1f} ms" in phone.text


def test_a_bundle_archive_is_read_as_its_folder(made, tmp_path):
    from qnndeploy.formats.archive import write_archive

    zipped = tmp_path / "kws-demo-1.0.0.zip"
    write_archive(made["demo"] / "bundle/kws-demo-1.0.0", zipped, "zip", "kws-demo-1.0.0")
    r = run("report", zipped, "-o", tmp_path / "report.html", "--json")
    assert r.exit_code == 0, r.output
    assert parsed(r.stdout)["records"] == [
        {"kind": "bundle", "source": "kws-demo-1.0.0.zip/manifest.json"},
        {"kind": "compile", "source": "kws-demo-1.0.0.zip/records/kws_demo-SM8750-compile.json"},
        {"kind": "validation", "source": "kws-demo-1.0.0.zip/records/kws_demo-SM8750-validation.json"}]


def test_the_bundle_shows_the_model_licence_and_what_judged_each_target_and_no_cell_is_left_blank(made):
    manifest = record_of(made, "bundle/kws-demo-1.0.0/manifest.json")
    (bundles,) = made["dom"].all("section", id="bundles")
    assert f"licence {manifest['source']['license']}" in bundles.text
    judged = manifest["targets"][0]["validation"]["graphs"][GRAPH]["inputs"]
    assert judged.endswith("seeded random samples") and f"{GRAPH}: {judged}" in bundles.text
    (overview,) = made["dom"].all("section", id="overview")
    rows = [[td.text for td in tr.all("td")] for tr in overview.all("tr") if tr.all("td")]
    assert rows and all(cell.strip() for row in rows for cell in row)  # not measured is the dash, never blank
    evil = next(r for r in rows if r[0] == EVIL_GRAPH)  # a bench record alone: every other column says so
    assert evil[2:6] == ["\u2013"] * 4

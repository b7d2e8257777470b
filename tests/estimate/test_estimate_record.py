"""The estimate record (formats/estimaterecord.py, schemas/estimate-record.schema.json): `estimate BUILD` and
`validate --estimate` write the same numbers per graph x SoC beside compile.json, the report page shows them labelled
as estimated beside a bench's measured latency, a build without them still reports, and no bench gate takes one.
The real part: a tiny graph compiled for QCS9100 and SM8750 and estimated by the wheel's HTP cost model (a second
or so each)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import onnx
import pytest

from qnndeploy.base.errors import BadInput, CheckFailed
from qnndeploy.base.kinds import BackendName, Precision
from qnndeploy.device import bench
from qnndeploy.formats import benchrecord, estimaterecord
from qnndeploy.formats.records import CompileRecord, RecordStatus
from qnndeploy.qnn import hextimate, htp
from tests.report import page
from tests.report.bench_fixture import bench_record
from tests.support import synth_models
from tests.support.cli import parsed, run
from tests.support.host import require

SCHEMA = json.loads((Path(estimaterecord.__file__).parent.parent / "schemas" / "estimate-record.schema.json")
                    .read_text())
SOCS = ("QCS9100", "SM8750")
# what differs between two writers of the same estimate
WHO = ("made_by", "created")


def _numbers(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in WHO}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A build of the static MLP for QCS9100 and SM8750, estimated (the records kept as written), then validated
    with --estimate."""
    require(htp.available(), "onnxruntime-qnn")
    root = tmp_path_factory.mktemp("estimate-record")
    model = root / "mlp.onnx"
    onnx.save(synth_models.static_mlp(), model)
    build = root / "build"
    done = run("compile", model, "--soc", ",".join(SOCS), "-o", build)
    assert done.exit_code == 0, done.output
    untouched = root / "untouched"
    shutil.copytree(build, untouched)  # an older build: no estimate.json
    est = run("estimate", build)
    assert est.exit_code == 0, est.output
    estimated = {soc: json.loads((build / "mlp" / soc / "estimate.json").read_text()) for soc in SOCS}
    val = run("validate", build, "--estimate")
    assert val.exit_code == 0, val.output
    val_json = parsed(run("validate", build, "--estimate", "--json").stdout)
    return {"root": root, "model": model, "build": build, "untouched": untouched, "estimate": est,
            "estimated": estimated, "validate": val, "validate_json": val_json}


@pytest.mark.needs_qnn
def test_estimate_writes_one_record_per_graph_and_soc_that_the_schema_accepts(built):
    assert "records: 2 written" in built["estimate"].stdout
    factors = hextimate.chip_factors()
    for soc, data in built["estimated"].items():
        jsonschema.validate(data, SCHEMA)
        assert estimaterecord.parse(data).to_json() == data  # read strictly, it is what was written
        assert data["graph"] == "mlp" and data["soc"] == soc and data["made_by"] == "estimate"
        cost = data["cost_model"]
        assert cost["soc"] == "QCS9100" and cost["cycles"] > 0 and cost["cycles_lower"] <= cost["cycles"] \
            <= cost["cycles_upper"] and cost["clock_mhz"] > 0 and cost["qairt"] == htp.qairt_version()
        assert data["factor"] == factors[soc].factor and "leave-one-out" in data["fit"]
        assert data["ms"] == pytest.approx(cost["ms"] * factors[soc].factor, abs=2e-6)  # both rounded to 1 ns
        assert data["ms_lower"] <= data["ms"] <= data["ms_upper"] and data["reason"] is None
        assert data["fill_bytes"] > 0 and data["ops_without_cost"] == 0
        assert data["not_claimed"] == estimaterecord.NOT_CLAIMED and "not measured" in data["not_claimed"]
        compiled = json.loads((built["build"] / "mlp" / soc / "compile.json").read_text())
        assert data["source_sha256"] == compiled["input"]["sha256"]
    assert estimaterecord.read(built["estimated"]["SM8750"]).ms == built["estimated"]["SM8750"]["ms"]


@pytest.mark.needs_qnn
def test_validate_estimate_writes_the_same_numbers_and_prints_a_line_per_job(built):
    for soc in SOCS:
        again = json.loads((built["build"] / "mlp" / soc / "estimate.json").read_text())
        jsonschema.validate(again, SCHEMA)
        assert again["made_by"] == "validate --estimate"
        assert _numbers(again) == _numbers(built["estimated"][soc])
    lines = built["validate"].stdout.splitlines()
    for soc in SOCS:
        (line,) = [x for x in lines if x.split()[:3] == ["estimate", "mlp", soc]]
        assert f"{built['estimated'][soc]['ms']:.3f} ms" in line and "factor" in line
    assert f"note: {estimaterecord.NOT_CLAIMED}" in lines
    j = built["validate_json"]
    assert j["not_claimed"] == estimaterecord.NOT_CLAIMED
    assert [t["estimate"]["ms"] for t in j["targets"]] == [built["estimated"][s]["ms"] for s in SOCS]


@pytest.mark.needs_qnn
def test_the_report_shows_each_estimate_labelled_beside_the_measured_bench(built, tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    (records / "bench-x-mlp.json").write_text(json.dumps(bench_record(graph="mlp", soc="SM8750")))
    host = bench_record(graph="mlp", soc="SM8750", serial="emulated")
    host["notes"] = [*host["notes"], benchrecord.STAND_IN_NOTE]  # the emulated phone's: the host's time
    (records / "bench-emulated-mlp.json").write_text(json.dumps(host))
    out = tmp_path / "report.html"
    r = run("report", built["build"], records, "-o", out)
    assert r.exit_code == 0, r.output
    dom = page.parse(out.read_text())
    head = dom.all("header")[0].text
    assert estimaterecord.NOT_CLAIMED in head
    for soc in SOCS:
        (cell,) = dom.all("section", data_graph="mlp", data_soc=soc)
        (block,) = cell.all("div", data_kind="estimate")
        assert block.attrs["data-source"] == f"build/mlp/{soc}/estimate.json"
        text = block.text
        assert "estimated, not measured" in text and estimaterecord.NOT_CLAIMED in text
        data = json.loads((built["build"] / "mlp" / soc / "estimate.json").read_text())
        assert f"{data['ms']:.3g} ms" in text and f"{data['factor']:.3g}" in text
        assert f"{data['cost_model']['cycles']:,}" in text and data["cost_model"]["qairt"] in text
        kinds = [b.attrs["data-kind"] for b in cell.all("div", **{"class": "record"})]
        assert kinds[:3] == ["compile", "validation", "estimate"]
    (sm8750,) = dom.all("section", data_graph="mlp", data_soc="SM8750")
    beside = sm8750.all("div", data_kind="estimate")[0].text
    assert "estimated beside measured" in beside and "measured: bench latency p50" in beside
    assert "bench-x-mlp.json" in beside
    rows = [tr.text for tr in sm8750.all("div", data_kind="estimate")[0].all("tr")]
    assert sorted(("emulated" in t, "stand-in tools" in t) for t in rows if t.startswith("measured")) == [
        (False, False), (True, True)]
    overview = dom.all("section", id="overview")[0].all("table")[0]
    head_cells = [th.text for th in overview.all("th")]
    assert head_cells.index("estimate") == head_cells.index("bench") - 1
    assert "estimated, not measured" in overview.text


@pytest.mark.needs_qnn
def test_an_old_build_without_estimates_still_reports(built, tmp_path):
    assert not list(built["untouched"].rglob("estimate*.json"))
    out = tmp_path / "report.html"
    r = run("report", built["untouched"], "-o", out)
    assert r.exit_code == 0, r.output
    dom = page.parse(out.read_text())
    assert not dom.all("div", data_kind="estimate")
    assert len(dom.all("div", data_kind="compile")) == 2
    assert "Estimates:" not in dom.all("header")[0].text


@pytest.mark.needs_qnn
def test_a_source_changed_since_the_compile_is_refused_and_nothing_written(built, tmp_path):
    build = tmp_path / "build"
    shutil.copytree(built["untouched"], build)
    record = build / "mlp" / "SM8750" / "compile.json"
    data = json.loads(record.read_text())
    data["input"]["sha256"] = "0" * 64  # as if mlp.onnx changed after this compile
    record.write_text(json.dumps(data))
    r = run("estimate", build)
    assert r.exit_code == 2 and "changed since graph mlp was compiled" in r.stderr
    assert not list(build.rglob("estimate*.json"))


@pytest.mark.needs_qnn
def test_no_record_goes_beside_a_failed_compile(built, tmp_path, monkeypatch):
    build = tmp_path / "build"
    shutil.copytree(built["untouched"], build)
    record = build / "mlp" / "SM8750" / "compile.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "status": "failed"}))
    r = run("estimate", build)
    assert r.exit_code == 0, r.output
    assert sorted(p.relative_to(build).as_posix() for p in build.rglob("estimate*.json")) == [
        "mlp/QCS9100/estimate.json"]


@pytest.mark.needs_qnn
def test_a_model_file_writes_no_record(built, tmp_path, monkeypatch):
    model = tmp_path / "mlp.onnx"
    shutil.copy(built["model"], model)
    r = run("estimate", model, "--soc", "SM8750")
    assert r.exit_code == 0 and "records:" not in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.onnx"]


@pytest.mark.needs_qnn
def test_a_graph_the_cost_model_cannot_estimate_validates_with_no_number(built, tmp_path, monkeypatch):
    build = tmp_path / "build"
    shutil.copytree(built["untouched"], build)

    def refuse(*_: object, **__: object) -> hextimate.Estimate:
        raise CheckFailed("the HTP does not take the whole graph for QCS9100")

    monkeypatch.setattr(hextimate, "estimate", refuse)
    r = run("validate", build, "--estimate", "--soc", "SM8750")
    assert r.exit_code == 0, r.output
    assert "no number: the HTP does not take the whole graph" in r.stdout
    data = json.loads((build / "mlp" / "SM8750" / "estimate.json").read_text())
    jsonschema.validate(data, SCHEMA)
    assert data["ms"] is None and "whole graph" in data["reason"] and data["cost_model"]["cycles"] is None
    assert not (build / "mlp" / "QCS9100" / "estimate.json").exists()  # not validated, not estimated


@pytest.mark.needs_qnn
def test_a_bench_baseline_never_takes_an_estimate_record(built):
    record = built["build"] / "mlp" / "SM8750" / "estimate.json"
    with pytest.raises(BadInput, match="not a bench record"):
        bench.read_baseline(record, "emulator-5554", "mlp")
    with pytest.raises(BadInput, match="--baseline"):  # a folder: only bench-<serial>-<graph>.json is read
        bench.read_baseline(record.parent, "emulator-5554", "mlp")


# --- the reader and the page, on hand-made records (no compile) -----------------------------------------------------

def _record(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "record": estimaterecord.RECORD, "version": 1, "graph": "g", "soc": "SM8750", "precision": "fp16",
        "source": "/m.onnx", "source_sha256": None, "ms": 0.5, "ms_lower": 0.4, "ms_upper": 0.6, "reason": None,
        "factor": 0.39,
        "fit": "26 models", "cost_model": {"soc": "QCS9100", "qairt": "2.50.40", "clock_mhz": 1497.6,
                                           "clock_source": "x", "cycles": 1, "cycles_lower": 1, "cycles_upper": 2,
                                           "ms": 1.0, "ms_lower": 0.9, "ms_upper": 1.1},
        "fill_bytes": 1, "spill_bytes": 2, "ops_without_cost": 0, "warnings": [], "factors": "f",
        "not_claimed": estimaterecord.NOT_CLAIMED, "made_by": "estimate", "qnndeploy": "0", "created":
            "2026-12-05T00:00:00+00:00"}
    data.update(changes)
    return data


def test_the_reader_is_lenient_and_names_what_it_cannot_read():
    jsonschema.validate(_record(), SCHEMA)
    r = estimaterecord.read(_record(ms="fast", not_claimed="measured on a phone", cost_model=[]))
    assert r.ms is None and r.ms_lower is None and r.reason == "no number" and r.cost_model.cycles is None
    assert r.not_claimed == estimaterecord.NOT_CLAIMED  # always this qnndeploy's words, never the file's
    with pytest.raises(BadInput, match="not an estimate record"):
        estimaterecord.read({"record": "qnndeploy-bench"})
    with pytest.raises(BadInput, match="'soc'"):
        estimaterecord.read(_record(soc=None))


def test_the_page_escapes_an_estimate_and_skips_an_unreadable_one(tmp_path):
    folder = tmp_path / "records"
    folder.mkdir()
    evil = "<script>alert(1)</script>"
    (folder / "estimate.json").write_text(json.dumps(_record(graph=evil, fit="<img src=x onerror=alert(2)>",
                                                             warnings=["<b>w</b>"])))
    (folder / "broken.json").write_text(json.dumps(_record(graph=7)))
    out = tmp_path / "report.html"
    r = run("report", folder, "-o", out, "--json")
    assert r.exit_code == 0, r.output
    html = out.read_text()
    assert "<script>" not in html and "<img" not in html and "<b>w</b>" not in html
    dom = page.parse(html)
    (block,) = dom.all("div", data_kind="estimate")
    assert "<img src=x onerror=alert(2)>" in block.text and estimaterecord.NOT_CLAIMED in block.text
    skipped = {s["source"]: s["reason"] for s in parsed(r.stdout)["skipped"]}
    assert skipped == {"records/broken.json": "an estimate record, but 'graph' is not text"}


def test_a_shared_context_s_members_each_get_their_own_record_file(tmp_path):
    job = CompileRecord(tmp_path, "a", "SM8750", 69, "v79", BackendName.ORT, "2.50.40", Precision.FP16,
                        RecordStatus.OK, tmp_path / "a.onnx", "0" * 64, (), None, shared="ctx")
    assert estimaterecord.record_file(job) == tmp_path / "estimate-a.json"  # as validation-a.json is named
    assert estimaterecord.record_file(dataclasses.replace(job, shared=None)) == tmp_path / "estimate.json"

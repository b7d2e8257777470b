"""`qnndeploy reach`: which phones take the NPU with a bundle. On the demo's real bundle (`qnndeploy demo`): every
Mobile chipset of Qualcomm's table with a path and a reason, the Play groups that `package play` really writes, the
report page's table, a bundle archive and a bundle that fails verify; on manifests from tests/support/bundles.py:
the on-device path, the engine, the runtime each path needs; and the bad inputs every bundle command refuses.
tests/scaffold/test_kotlin.py holds the rows against the Kotlin selector."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import asdict
from html.parser import HTMLParser
from pathlib import Path

import pytest

from qnndeploy import api
from qnndeploy.base import socs
from qnndeploy.base.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, QnnDeployError
from qnndeploy.decide import reach
from qnndeploy.decide.decision import REASONS, SOC_MODEL_SINCE_SDK, arch_min_qairt
from qnndeploy.formats.archive import write_archive
from qnndeploy.formats.manifest import Manifest
from qnndeploy.formats.playplan import DEFAULT_GROUP, MANUFACTURERS, plan_groups, play_group, read_plan
from tests.support import bundles
from tests.support.cli import parsed, run


def mobile_chipsets() -> set[str]:
    return {c.name for c in reach.chipsets() if c.world == "Mobile"}


# --- the demo's bundle ---------------------------------------------------------------------------------------------

def manifest_of(bundle: Path) -> dict:
    data: dict = json.loads((bundle / "manifest.json").read_text())
    return data


@pytest.mark.slow
def test_every_mobile_chipset_of_qualcomms_table_has_a_path_and_a_reason(demo_bundle):
    r = run("reach", demo_bundle, "--world", "Mobile", "--json")
    assert r.exit_code == 0, r.output
    out = parsed(r.stdout)
    rows = out["rows"]
    assert {row["chipset"] for row in rows} == mobile_chipsets() and out["chipsets"] == len(mobile_chipsets())
    assert {row["world"] for row in rows} == {"Mobile"}
    manifest = manifest_of(demo_bundle)
    targets = {socs.find(t["soc"]).model for t in manifest["targets"]}
    for row in rows:
        assert row["path"] in {"prebuilt", "on-device", "cpu"} and row["reason"], row
        assert row["reason_key"] in REASONS["decide"], row
        if row["soc"] in targets:  # every name of a target's SoC, Qualcomm's part numbers and codenames included
            assert (row["path"], row["reason_key"]) == ("prebuilt", "npu"), row
            assert row["runtime"] == manifest["qairt"]["min_runtime"], row
        else:
            assert (row["path"], row["reason_key"], row["runtime"]) == ("cpu", "soc_not_in_bundle", None), row
        assert row["min_sdk"] == (SOC_MODEL_SINCE_SDK if row["identified_by"] == "Build.SOC_MODEL" else None)
    galaxy = [row for row in rows if row["chipset"] == "qualcomm-snapdragon-8-elite-for-galaxy"]
    assert {row["spelling"] for row in galaxy} >= {"SM8750", "SM8750-AC", "sun"}  # the S25 reports SM8750-AC
    reached = {row["chipset"] for row in rows if row["path"] == "prebuilt"}
    assert out["summary"] == [{"world": "Mobile", "prebuilt": len(reached), "on_device": 0,
                               "cpu": len(mobile_chipsets()) - len(reached)}]
    assert len(reached) == len(targets)  # one Qualcomm chipset per demo SoC
    text = run("reach", demo_bundle, "--world", "mobile")  # the choice ignores case
    assert text.exit_code == 0, text.output
    for name in mobile_chipsets():
        assert name in text.stdout
    cpu = len(mobile_chipsets()) - len(reached)
    assert re.search(rf"^  Mobile +{len(reached)} prebuilt +0 on-device +{cpu} cpu$", text.stdout, re.MULTILINE)
    assert "next: qnndeploy scaffold" in text.stdout


@pytest.mark.slow
def test_every_chipset_and_catalog_soc_is_listed_once_per_name(demo_bundle):
    out = parsed(run("reach", demo_bundle, "--json").stdout)
    keys = {(row["chipset"] or row["soc"]) for row in out["rows"]}
    listed = {s for c in reach.chipsets() if (s := reach.catalog_soc(c)) is not None}
    assert keys == {c.name for c in reach.chipsets()} | {s.model for s in socs.catalog() if s not in listed}
    names = [(row["chipset"] or row["soc"], row["spelling"], row["identified_by"]) for row in out["rows"]]
    assert len(names) == len(set(names))
    assert sum(sum(w[p] for p in ("prebuilt", "on_device", "cpu")) for w in out["summary"]) == len(keys)


@pytest.mark.slow
def test_the_play_group_of_each_row_is_the_one_package_play_writes(demo_bundle, tmp_path):
    done = run("package", "play", demo_bundle, "-o", tmp_path / "play")
    assert done.exit_code == 0, done.output
    plan = read_plan(tmp_path / "play")
    groups = plan_groups(plan)
    rows = parsed(run("reach", demo_bundle, "--json").stdout)["rows"]
    for row in rows:
        model = row["spelling"] if row["identified_by"] == "Build.SOC_MODEL" else None
        sdk = SOC_MODEL_SINCE_SDK if model else SOC_MODEL_SINCE_SDK - 1
        for manufacturer in MANUFACTURERS:
            assert play_group(groups, manufacturer, model, sdk, plan.default_group) == row["play_group"], row
    # a target's phones reporting Build.SOC_MODEL get its group; older phones (no SoC for Play) the default
    for g in plan.groups:
        assert {row["play_group"] for row in rows if row["soc"] in g.socs and row["min_sdk"]} == {g.name}
    assert {row["play_group"] for row in rows if row["min_sdk"] is None} == {DEFAULT_GROUP}


@pytest.mark.slow
def test_an_archive_gives_the_folders_table_and_the_api_the_commands(demo_bundle, tmp_path):
    archive = tmp_path / "kws.tar.gz"
    write_archive(demo_bundle, archive, "tar.gz", demo_bundle.name)
    folder, packed = (run("reach", b, "--json", "--engine", "sherpa-onnx") for b in (demo_bundle, archive))
    assert folder.exit_code == packed.exit_code == 0, packed.output
    assert folder.stdout == packed.stdout
    assert parsed(folder.stdout) == json.loads(json.dumps(asdict(api.reach(archive, engine="sherpa-onnx"))))


@pytest.mark.slow
def test_a_bundle_that_fails_verify_is_exit_1_with_its_report(demo_bundle, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(demo_bundle, bad)
    binary = next(bad.glob("npu/*/*.bin"))
    with binary.open("r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    r = run("reach", bad)
    assert r.exit_code == EXIT_CHECK_FAILED
    assert "sha256 differs from the manifest" in r.stdout  # the verify report
    assert r.stderr.strip() == (f"error: {bad} fails bundle verify (1 problem(s)); not reaching from it: fix or "
                                "rebuild the bundle")
    r = run("reach", bad, "--json")
    assert r.exit_code == EXIT_CHECK_FAILED and parsed(r.stdout)["ok"] is False
    with pytest.raises(QnnDeployError, match="fails bundle verify") as raised:
        api.reach(bad)
    assert raised.value.exit_code == EXIT_CHECK_FAILED


class _Tables(HTMLParser):
    """The report's reach section: each record's rows of cells, as text."""

    def __init__(self) -> None:
        super().__init__()
        self.in_reach, self.text = False, ""
        self.rows: list[list[str]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "section":
            self.in_reach = dict(attrs).get("id") == "reach"
        elif tag == "tr" and self.in_reach:
            self.rows.append([])
        elif tag == "td" and self.in_reach:
            self.rows[-1].append("")

    def handle_data(self, data: str) -> None:
        if self.in_reach:
            self.text += data
            if self.rows and self.rows[-1]:
                self.rows[-1][-1] += data


@pytest.mark.slow
def test_the_report_page_shows_the_reach_table(demo_bundle, tmp_path):
    page = tmp_path / "report.html"
    r = run("report", demo_bundle, "-o", page)
    assert r.exit_code == 0, r.output
    tables = _Tables()
    tables.feed(page.read_text())
    rows = [row for row in tables.rows if len(row) == 9]  # the chipset table (the summary has 4 columns)
    want = api.reach(demo_bundle)
    for row, best in zip(rows, want.best(), strict=True):  # one row per chipset, as the command's best()
        assert row[1].startswith(best.chipset or "\u2013") and (best.marketing_name or "") in row[1]
        assert row[5] == best.path and row[6].startswith(best.reason_key) and best.reason in row[6]
    summary = [row for row in tables.rows if len(row) == 4]
    assert [[int(x) for x in row[1:]] for row in summary] == [[w.prebuilt, w.on_device, w.cpu] for w in want.summary]
    assert "one row per chipset" in tables.text and f"all {len(want.rows)} names" in tables.text


# --- manifests without files: the paths a bundle can give ----------------------------------------------------------

def rows_of(manifest: dict, engine: reach.Engine = reach.Engine.ORT) -> list[reach.ReachRow]:
    return list(reach.reach(Manifest.parse(manifest), engine).rows)


def test_the_on_device_path_needs_ort_a_validated_arch_and_its_runtime():
    m = bundles.on_device(bundles.manifest(), validated=("v81",))
    m["qairt"]["min_runtime"] = "2.45.0"  # the oldest runtime that loads its binaries, as bundle build writes it
    rows = {(r.soc, r.spelling): r for r in rows_of(m)}
    sm8845 = rows[("SM8845", "SM8845")]  # v81, no target
    assert (sm8845.path, sm8845.reason_key, sm8845.runtime) == ("on-device", "npu_on_device", arch_min_qairt()["v81"])
    assert sm8845.play_group == DEFAULT_GROUP  # the base carries the ONNX it compiles
    sm8650 = rows[("SM8650", "SM8650")]  # v75: not validated
    assert (sm8650.path, sm8650.reason_key, sm8650.runtime) == ("cpu", "not_validated_on_device", None)
    sm8750 = rows[("SM8750", "SM8750-AC")]  # a target
    assert (sm8750.path, sm8750.runtime) == ("prebuilt", m["qairt"]["min_runtime"])
    unknown = next(r for r in rows.values() if r.chipset == "qualcomm-snapdragon-845")  # SDM845, not in the catalog
    assert (unknown.path, unknown.reason_key) == ("cpu", "arch_unknown")  # the glue passes no platform info
    sherpa = {(r.soc, r.spelling): r for r in rows_of(m, reach.Engine.SHERPA_ONNX)}
    assert (sherpa[("SM8845", "SM8845")].path, sherpa[("SM8845", "SM8845")].reason_key) == (
        "cpu", "on_device_needs_ort")
    assert sherpa[("SM8750", "SM8750-AC")].path == "prebuilt"


def test_a_target_asking_for_the_cpu_is_cpu_under_every_name():
    m = bundles.accepted(bundles.manifest())  # SM8750's rec failed validation, shipped for the CPU
    for row in rows_of(m):
        if row.soc == "SM8750":
            assert (row.path, row.reason_key) == ("cpu", "validation_failed"), row
        if row.soc == "SM8550":
            assert row.path == "prebuilt", row


def test_the_summary_counts_each_chipset_once_by_its_best_name():
    rows = rows_of(bundles.manifest(targets=("SM8750",)))
    summary = reach.summary(rows)
    mobile = next(w for w in summary if w.world == "Mobile")
    assert mobile.prebuilt == len({r.chipset for r in rows if r.world == "Mobile" and r.soc == "SM8750"})
    assert sum(w.prebuilt + w.on_device + w.cpu for w in summary) == len({r.key for r in rows})
    only = reach.reach(Manifest.parse(bundles.manifest()), worlds=["automotive", "unknown"])
    assert {r.world for r in only.rows} == {"Automotive", "unknown"}


# --- bad input -------------------------------------------------------------------------------------------------------

def test_bad_input_is_one_line_and_exit_2(tmp_path):
    not_bundle = tmp_path / "folder"
    not_bundle.mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text('{"name": "x"}')
    cases = {
        tmp_path / "missing": "does not exist",
        not_bundle: "is not a bundle: it has no manifest.json",
        tmp_path / "notes.txt": "not a bundle",
        tmp_path / "other": "other",
    }
    for path, said in cases.items():
        r = run("reach", path)
        assert r.exit_code == EXIT_BAD_INPUT, (path, r.output)
        assert r.stdout == "" and len(r.stderr.splitlines()) == 1 and said in r.stderr, r.stderr
        assert r.stderr.startswith("error: ") and "Traceback" not in r.output
        j = run("reach", path, "--json")
        assert parsed(j.stdout)["exit_code"] == EXIT_BAD_INPUT and j.exit_code == EXIT_BAD_INPUT
    for option in (["--engine", "tflite"], ["--world", "Moon"]):
        r = run("reach", not_bundle, *option)
        assert r.exit_code == EXIT_BAD_INPUT and option[1] in r.output
    with pytest.raises(QnnDeployError, match="unknown engine 'tflite'") as raised:
        api.reach(tmp_path / "missing", engine="tflite")  # the request is checked before the bundle is read
    assert raised.value.exit_code == EXIT_BAD_INPUT


def test_the_engines_are_scaffolds():
    """--engine names what scaffold renders: each engine has its glue's folder of templates; only ort's glue
    compiles ONNX on the phone (QnnRuntime derives it so, tests/scaffold/test_kotlin.py)."""
    from qnndeploy.scaffold import templates_dir

    assert all((templates_dir() / "glue" / "kotlin" / e.value).is_dir() for e in reach.Engine)
    assert [e for e in reach.Engine if e.compiles_onnx] == [reach.Engine.ORT]

"""The facts in qnndeploy/data against independent copies of them: Qualcomm's chipset table (the qai-hub-models
wheel), ExecuTorch's Qualcomm SoC table (the executorch wheel), and what QNN's own compilers and runtimes do here
(support/qnn_facts.py). Each wheel is installed with --no-deps (tests/reference-requirements.txt): only its data file
is read."""

from __future__ import annotations

import importlib.util
import json
import re
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
import yaml

from qnndeploy.base import compat, socs
from qnndeploy.qnn import toolchain
from qnndeploy.scaffold import templates_dir
from tests.support import REPO
from tests.support.host import require, shipped_files

DATA = REPO / "qnndeploy" / "data"


def _wheel_file(dist: str, path: str) -> Path:
    try:
        found = Path(str(distribution(dist).locate_file(path)))
    except PackageNotFoundError:
        found = None
    require(found is not None and found.is_file(),
            f"{dist} (pip install --no-deps -r tests/reference-requirements.txt)")
    assert found is not None
    return found


@pytest.fixture(scope="module")
def qualcomm() -> dict:
    return yaml.safe_load(_wheel_file("qai-hub-models", "qai_hub_models/devices_and_chipsets.yaml").read_text())


@pytest.fixture(scope="module")
def executorch():
    path = _wheel_file("executorch", "executorch/backends/qualcomm/serialization/qc_schema.py")
    spec = importlib.util.spec_from_file_location("qc_schema", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # dataclasses and enums only: no dependency of executorch's
    return module


def _catalog_soc(name: str, chipset: dict) -> socs.Soc | None:
    """The catalog SoC for one of Qualcomm's chipsets: by a part-number alias (sm8750-ac) or by AI Hub name."""
    parts = {a.upper() for a in chipset["aliases"] if not a.startswith("qualcomm-")}
    return next((s for s in socs.catalog() if parts & set(s.names) or name in s.aihub_chipsets), None)


def test_the_catalog_agrees_with_qualcomms_chipset_table(qualcomm):
    checked = []
    for name, c in qualcomm["chipsets"].items():
        soc = _catalog_soc(name, c)
        if soc is None:
            continue
        assert (soc.soc_id, soc.arch_number) == (c["soc_model"], c["htp_version"]), (soc.model, name)
        if soc.fp16 is not None:
            assert soc.fp16 == c.get("supports_fp16", False), (soc.model, name)
        assert name in soc.aihub_chipsets, (soc.model, name)
        checked.append(soc.model)
    assert {"SM8350", "SM8750", "SM8850", "SM7325", "SM8950", "QCS9100", "SA8255"} <= set(checked)
    assert socs.find("SM8350").soc_id == 30  # not 35, which is the Snapdragon 778G (SM7325)


def test_every_mobile_chipset_with_an_htp_v68_or_newer_is_in_the_catalog(qualcomm):
    missing = [name for name, c in qualcomm["chipsets"].items()
               if c["world"] == "Mobile" and c["htp_version"] >= 68 and _catalog_soc(name, c) is None]
    assert missing == []


def test_hosted_means_a_device_available_for_jobs(qualcomm):
    for soc in socs.catalog():
        devices = [d for d in qualcomm["devices"].values() if d["chipset"] in soc.aihub_chipsets]
        if not devices:
            assert soc.aihub_hosted is None or not set(soc.aihub_chipsets) & set(qualcomm["chipsets"]), soc.model
            continue
        assert soc.aihub_hosted == any(d.get("available_in_workbench", True) for d in devices), soc.model
    assert socs.find("SA8255").aihub_hosted is False


def test_every_alias_qualcomm_lists_resolves_to_its_soc(qualcomm):
    for name, c in qualcomm["chipsets"].items():
        soc = _catalog_soc(name, c)
        for alias in (a for a in c["aliases"] if not a.startswith("qualcomm-")) if soc else ():
            assert socs.find(alias).model == soc.model, alias
    assert socs.find("SM8750-AC").model == "SM8750" and socs.find("sm8850-ad").model == "SM8850"


def test_the_catalog_agrees_with_executorchs_table(executorch):
    rows = executorch._soc_info_table  # QcomChipset -> SocInfo(soc_model, HtpInfo(htp_arch, vtcm_size_in_mb))
    checked = []
    for chipset, info in rows.items():
        soc = next((s for s in socs.catalog() if chipset.name in s.names), None)
        if soc is None:
            continue
        assert (soc.soc_id, soc.arch_number) == (int(chipset), int(info.htp_info.htp_arch)), soc.model
        if soc.vtcm_mb is not None:
            assert soc.vtcm_mb == info.htp_info.vtcm_size_in_mb, soc.model
        checked.append(soc.model)
    assert {"SM8350", "SM8475", "SM8845", "SA8255", "QCS9100"} <= set(checked)


def test_the_catalog_agrees_with_every_row_of_the_eps_own_soc_table():
    """The QNN EP maps a chip name to soc_model and HTP arch by its own table (onnxruntime-qnn PR #830): a chip the
    EP knows by name is in the catalog with the same numbers, so the glue's soc_model and the EP agree."""
    table = json.loads((DATA / "ep_soc_table.json").read_text())
    assert table["source"]["url"].startswith("https://github.com/onnxruntime/onnxruntime-qnn/") and table["rows"]
    for row in table["rows"]:
        soc = socs.find(row["soc"])
        assert (soc.model, soc.soc_id, soc.arch_number) == (row["soc"], row["soc_model"], row["htp_arch"]), row
    confirmed = {s.model for s in socs.catalog() if "ep" in s.confirmed_by}
    assert {"SM7675", "SC8480XP"} <= confirmed <= {row["soc"] for row in table["rows"]}


def test_rows_outside_qualcomms_table_are_confirmed_elsewhere(qualcomm):
    """SM8475, SM8635, SM8735 and SM8845 are not in Qualcomm's chipset table: each names its other sources."""
    for model in ("SM8475", "SM8635", "SM8735", "SM8845"):
        soc = socs.find(model)
        assert not any(_catalog_soc(n, c) is soc for n, c in qualcomm["chipsets"].items())
        assert "litert" in soc.confirmed_by and soc.note
        if "executorch" not in soc.confirmed_by:
            assert "https://" in soc.note  # where the arch comes from


def test_every_source_a_row_names_is_described():
    for soc in socs.catalog():
        for key in soc.confirmed_by:
            assert {"what", "where", "read"} <= set(socs.sources()[key]), (soc.model, key)


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_the_newest_ep_resolves_each_chip_name_of_its_table_as_the_data_says(toolchains, tmp_path):
    """The real EP against its table as data: the newest wheel (whose library carries the names) given
    soc_model="SM8750" and no htp_arch writes the row's soc_model and arch into the binary, or, for a soc_model the
    host compiler has no arch for (the catalog's measured rows say which), compiles nothing."""
    from tests.support.qnn_facts import _child

    newest = toolchains[-1]
    rows = json.loads((DATA / "ep_soc_table.json").read_text())["rows"]
    out = tmp_path / "names"
    out.mkdir()
    seen = _child(newest, "names", str(out), *(r["soc"] for r in rows))["names"]
    assert isinstance(seen, dict)
    for row in rows:
        compiles = any(m.qairt == newest.qairt and m.soc_model is not None for m in socs.find(row["soc"]).measured)
        assert seen[row["soc"]] == ([row["soc_model"], row["htp_arch"]] if compiles else None), row
    assert sum(v is not None for v in seen.values()) >= 8


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_every_compiler_writes_what_the_catalog_recorded_and_every_runtime_loads_what_the_table_says(
        toolchains, tmp_path):
    """Re-measure: every toolchain's compiler for every catalog SoC, and every runtime against every toolchain's
    binary. The data must be exactly what QNN does today."""
    from tests.support.qnn_facts import measure_compilers, measure_loads

    compilers = measure_compilers(toolchains, tmp_path)
    for soc in socs.catalog():
        recorded = {m.qairt: {"soc_model": m.soc_model, "arch": m.arch, "marker_arch": m.marker_arch,
                              "refuses": list(m.refuses)}
                    for m in soc.measured}
        assert recorded == {q: a["socs"][soc.model] for q, a in compilers.items()}, soc.model
    for q, answer in compilers.items():  # the blob each release writes is the one the runtime table implies
        row = compat._blob_row_for(q)
        assert row is not None and row.blob == answer["blob"], q
    loads = measure_loads(toolchains, tmp_path)
    assert loads == compat.rows()["loads"]["rows"]


def test_the_load_table_covers_every_toolchain_pair():
    known = [t.qairt for t in toolchain.known()]
    pairs = {(r.binary, r.runtime) for r in compat.load_rows()}
    assert pairs == {(b, r) for b in known for r in known}
    assert compat.loads_measured() is not None


def test_every_maven_version_qnndeploy_writes_has_a_source():
    """The published list is the only source of pins: default pins, validated sets used, the templates."""
    published = compat.published()
    for tc in toolchain.known():
        assert set(compat.maven_for(tc.qairt)) <= set(published)
    for s in compat.validated_sets("0.0.0"):
        assert s.qnn_runtime in published
    texts = [p.read_text() for p in shipped_files(templates_dir())]
    for text in texts:
        for version in re.findall(r"qnn-runtime:(\d+\.\d+\.\d+)", text):
            assert version in published
    for version in ("2.49.40", "2.48.40"):
        assert version not in published and compat.not_published(version) is not None


def test_the_data_files_are_valid_json_with_a_source_per_row():
    runtime = json.loads((DATA / "runtime.json").read_text())
    for row in runtime["maven"]["published"] + runtime["maven"]["not_published"]:
        assert row["source"]["url"].startswith("https://") and row["source"]["says"]
    for wheel in runtime["compilers"]["wheels"]:
        assert wheel["source"]["url"].startswith("https://")
    budget = json.loads((DATA / "load_budget.json").read_text())
    for row in budget["arches"].values():
        assert row["status"] in ("measured", "published", "derived", "unknown") and row["says"]
        assert (row["bytes"] is None) == (row["status"] == "unknown")
        if row["bytes"] is not None:
            assert row["label"] and budget["sources"][row["source"]]["read"]
    assert budget["default"]["rule"] == "ours" and budget["default"]["says"]
    for source in [*budget["sources"].values(), *budget["context"]]:
        assert (source.get("url", "").startswith("https://") or source["where"]) and source.get("says", source.get(
            "where"))
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", source["read"])


def _models_folder() -> Path:
    return _wheel_file("qai-hub-models", "qai_hub_models/devices_and_chipsets.yaml").parent / "models"


def test_the_load_budget_is_the_largest_part_ai_hub_ran_on_a_phone_of_each_arch(qualcomm):
    """data/load_budget.json against the qai-hub-models wheel, derived again: for every model whose manifest gives
    each part's size, its largest part, on every phone whose NPU it was measured on (perf.yaml); per HTP arch the
    largest such part is the budget, and an arch with none is unknown (the default rule's)."""
    budget = json.loads((DATA / "load_budget.json").read_text())
    part_size = re.compile(r"Model size \(part(\d+)_of_(\d+)\) \((\w+)\)")
    largest: dict[str, tuple[int, str, str]] = {}  # arch -> (bytes, model, device)
    for manifest in sorted(_models_folder().glob("*/manifest.yaml")):
        details = yaml.safe_load(manifest.read_text()).get("runtime_technical_details") or {}
        sizes = [_bytes(v) for d in details.values() for k, v in d.items() if part_size.fullmatch(k)]
        if not sizes:
            continue
        perf = yaml.safe_load((manifest.parent / "perf.yaml").read_text())
        for precision in perf["precisions"].values():
            for component in precision["components"].values():
                for device, runtimes in component["performance_metrics"].items():
                    ran = any(m.get("desired_compute_unit") == "npu" for r in runtimes.values()
                              for m in r.get("llm_metrics", []))
                    row = qualcomm["devices"].get(device, {})
                    if not ran or row.get("form_factor") != "Phone":
                        continue
                    arch = f"v{qualcomm['chipsets'][row['chipset']]['htp_version']}"
                    largest[arch] = max(largest.get(arch, (0, "", "")), (max(sizes), manifest.parent.name, device))
    assert largest, "no model of the wheel gives its parts' sizes"
    for arch, row in budget["arches"].items():
        if row["status"] == "derived":
            assert (row["bytes"], row["from"]["model"], row["from"]["device"]) == largest[arch], arch
            assert qualcomm["devices"][row["from"]["device"]]["chipset"] == row["from"]["chipset"]
        else:
            assert row["status"] == "unknown" and arch not in largest, arch
    assert {f"v{s.arch_number}" for s in socs.catalog()} <= set(budget["arches"])  # every arch of the catalog


def _bytes(text: str) -> int:
    """'882 MB' -> 882_000_000 (MB read as 10^6 bytes: the smaller reading, as the data says)."""
    number, unit = text.split()
    return round(float(number) * {"kB": 1e3, "MB": 1e6, "GB": 1e9}[unit])


def test_the_split_counts_the_load_budget_cites_are_the_wheels():
    """The hand-chosen split counts the data's context cites (Qwen3 0.6B 2 parts, 1.7B 4, 4B 4, 8B 5), and the
    err 1002 that made 1.7B's 4, read from each model.py of the wheel as text (nothing imported)."""
    said = json.loads((DATA / "load_budget.json").read_text())["context"][0]["says"]
    for model, splits in (("qwen3_0_6b", 2), ("qwen3_1_7b", 4), ("qwen3_4b", 4), ("qwen3_8b", 5)):
        text = (_models_folder() / model / "model.py").read_text()
        assert re.search(r"^NUM_SPLITS = (\d+)$", text, re.MULTILINE)[1] == str(splits), model
    assert "err 1002" in (_models_folder() / "qwen3_1_7b" / "model.py").read_text()
    assert "0.6B 2 parts, 1.7B 4, 4B 4, 8B 5" in said and "err 1002" in said

"""Shared contexts (compile --share): a tiny LM's prefill and decode graphs, exported from torch with the same
weights, compiled by the real onnxruntime-qnn into one context binary per SoC, validated, bundled and verified."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from qnndeploy.base.errors import QnnDeployError
from qnndeploy.base.names import FORMAT_VERSION
from qnndeploy.compile import CompileOptions, compile_models, shares_from_args
from qnndeploy.formats.records import JobRecord
from qnndeploy.qnn import epcontext
from qnndeploy.scaffold import scaffold
from qnndeploy.verification.checks import verify_bundle
from tests.support import REPO
from tests.support.cli import run

pytestmark = pytest.mark.needs_qnn

SCHEMA = json.loads((REPO / "qnndeploy/schemas/compile-record.schema.json").read_text())
SOCS = ("SM8750", "SM8650")


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tests.support import corpus_torch

    return corpus_torch.export_tiny_lm(tmp_path_factory.mktemp("lm"))


@pytest.fixture(scope="module")
def build(lm: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("build")
    args = ["compile", *(f"{g}={p}" for g, p in lm.items()), "--share", "lm=prefill,decode", "-o", str(out),
            "--no-cache", "--json", *(x for s in SOCS for x in ("--soc", s))]
    r = run(*args)
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.slow
def test_one_binary_per_soc_holds_both_graphs_and_saves_the_shared_weights(build: Path) -> None:
    for soc in SOCS:
        folder = build / "lm" / soc
        text = (folder / "compile.json").read_text()
        record = json.loads(text)
        jsonschema.validate(record, SCHEMA)
        # its type reads it strictly and writes it back byte for byte (members, twins, context, shared)
        assert json.dumps(JobRecord.parse(record, folder / "compile.json").to_json(), indent=2) + "\n" == text
        assert record["status"] == "ok" and [m["graph"] for m in record["members"]] == ["prefill", "decode"]
        assert sorted(p.name for p in folder.glob("*.bin")) == ["lm.bin", "twin-decode.bin", "twin-prefill.bin"]
        for g in ("prefill", "decode"):
            assert epcontext.context_refs(folder / f"{g}_ctx.onnx") == ["lm.bin"]
            assert epcontext.context_refs(folder / f"twin-{g}_ctx.onnx") == [f"twin-{g}.bin"]
        # read back from the binary by libQnnSystem: both graphs, in compile order, with the models' tensors
        context = record["context"]
        assert context["dsp_arch"] == {"SM8750": "v79", "SM8650": "v75"}[soc] and context["blob_version"] == "4.0"
        assert [[(t["name"], t["dims"], t["dtype"]) for t in g["inputs"]] for g in context["graphs"]] == [
            [("input_ids", [1, 32], "int32")],
            [("input_ids", [1, 1], "int32"), ("position", [1, 1], "int32"),
             ("past_keys", [2, 1, 4, 32, 32], "float32"), ("past_values", [2, 1, 4, 32, 32], "float32")]]
        shared, apart = record["shared"]["shared_bytes"], record["shared"]["separate_bytes"]
        assert shared == (folder / "lm.bin").stat().st_size
        assert apart == sum((folder / f"twin-{g}.bin").stat().st_size for g in ("prefill", "decode"))
        # the two graphs' weights are the same tensors (under different exporter names): stored once
        assert shared < 0.65 * apart, (shared, apart)
    assert not (build / "prefill").exists() and not (build / "decode").exists()


@pytest.mark.slow
def test_validate_runs_each_graphs_twin_and_bundle_verify_accepts_the_shared_binary(build: Path,
                                                                                    tmp_path: Path) -> None:
    r = run("validate", str(build), "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert sorted((t["graph"], t["soc"], t["status"], t["shared"]) for t in summary["targets"]) == sorted(
        (g, s, "passed", "lm") for g in ("prefill", "decode") for s in SOCS)
    record = json.loads((build / "lm" / "SM8750" / "validation-decode.json").read_text())
    assert record["binary"]["path"] == "lm.bin" and record["emulated"]["path"] == "twin-decode_ctx.onnx"

    r = run("bundle", "--from-build", str(build), "--name", "lm", "--version", "1.0",
            "-o", str(tmp_path), "--performance-mode", "sustained_high_performance", "--json")
    assert r.exit_code == 0, r.output
    bundle = tmp_path / "lm-1.0"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["htp"] == {"performance_mode": "sustained_high_performance"}
    assert {t["soc"]: t["compile"] for t in manifest["targets"]} == {
        s: {"vtcm_mb": None, "optimization_mode": None, "spill_fill": False} for s in SOCS}
    for t in manifest["targets"]:
        bins = [a for a in t["artifacts"] if a["format"] == "qnn-context-binary"]
        assert [(a["path"], a["graphs"]) for a in bins] == [(f"npu/{t['soc']}/lm.bin", ["prefill", "decode"])]
        assert all(t["validation"]["graphs"][g]["passed"] for g in ("prefill", "decode"))
    assert not list(bundle.rglob("twin-*")), "the emulator's twins are never bundled"
    for soc in SOCS:
        for g in ("prefill", "decode"):
            assert epcontext.context_refs(bundle / "npu" / soc / f"{g}_ctx.onnx") == ["lm.bin"]
    assert verify_bundle(bundle).ok
    glue = scaffold(bundle, "com.example.lm", tmp_path / "glue")
    assert (glue.path / "bundle" / "assets" / "qnndeploy" / "npu" / "SM8750" / "lm.bin").is_file()
    with pytest.raises(QnnDeployError, match="runs the first graph of a context binary only: use --engine ort"):
        scaffold(bundle, "com.example.lm", tmp_path / "sherpa", engine="sherpa-onnx")

    # a shared binary needs format 3: an older manifest cannot say that one binary serves two graphs
    manifest["format_version"] = 2
    del manifest["licences"]  # format 6's: a manifest of an older version never has it
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    report = verify_bundle(bundle)
    assert not report.ok and any("format 3" in p.message for p in report.problems)
    # the binary must name every graph whose wrapper loads it
    manifest["format_version"] = 3
    shared = manifest["targets"][0]["artifacts"][0]
    del shared["graphs"]
    shared["graph"] = "prefill"
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    found = {(p.path, p.message) for p in verify_bundle(bundle).problems}
    soc = manifest["targets"][0]["soc"]
    assert ("manifest.json", f"target {soc} has no context binary for graph 'decode'") in found
    assert any(path == f"npu/{soc}/decode_ctx.onnx" and "loads 'lm.bin'" in m for path, m in found), found


@pytest.mark.slow
def test_a_second_compile_is_up_to_date(build: Path, lm: dict[str, Path]) -> None:
    summary = compile_models(dict(lm), list(SOCS), build, CompileOptions(shares={"lm": ["prefill", "decode"]}))
    assert [(j.graph, j.status, j.note) for j in summary.jobs] == [("lm", "cached", "up to date")] * 2
    assert summary.jobs[0].members == ["prefill", "decode"]


@pytest.mark.parametrize(("shares", "socs", "message"), [
    (["lm=prefill"], ["SM8750"], "two or more different graphs"),
    (["lm=prefill,nope"], ["SM8750"], "no model is graph 'nope'"),
    (["prefill=prefill,decode"], ["SM8750"], "is also a graph's name"),
    (["a=prefill,decode", "b=decode,prefill"], ["SM8750"], "one share per graph"),
    (["lm=prefill,decode"], ["SM8350"], "v73 or newer; SM8350 is older"),
    (["lm"], ["SM8750"], "write NAME=GRAPH1,GRAPH2"),
])
def test_bad_shares_are_refused_before_anything_is_written(tmp_path: Path, shares: list[str], socs: list[str],
                                                           message: str) -> None:
    from tests.support import bundles

    models = {g: bundles.tiny_model(tmp_path / f"{g}.onnx", 8) for g in ("prefill", "decode")}
    with pytest.raises(QnnDeployError, match=message):
        compile_models(models, socs, tmp_path / "b", CompileOptions(shares=shares_from_args(shares)))
    assert not (tmp_path / "b").exists()

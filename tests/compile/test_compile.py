"""`qnndeploy compile`: real onnxruntime-qnn compiles of the PP-OCR cls and rec models for two SoCs in parallel,
a graph the HTP rejects, the cache, w8a16 with calibration, bad input; and the qairt backend against the
stand-in SDK in tests/support/qairt_standin/ (the real QAIRT SDK cannot be installed here)."""

from __future__ import annotations

import json
import os
import re
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from qnndeploy import compile as stage
from qnndeploy.base import socs as catalog
from qnndeploy.base.errors import BadInput
from qnndeploy.base.fileio import sha256_file
from qnndeploy.compile import logs
from qnndeploy.formats.records import JobStarted
from qnndeploy.model import media
from qnndeploy.qnn import htp
from tests.support import QAIRT_STANDIN as STANDIN
from tests.support import bundles
from tests.support import synth_models as sm
from tests.support.cli import run
from tests.support.host import alive, pids_mentioning, require
from tests.support.ppocr import STATIC_SHAPES, model_path, static_ppocr
from tests.support.synth_models import sinh_graph

SOCS = ("SM8550", "SM8750")
SCHEMA = json.loads((Path(stage.__file__).parent.parent / "schemas" / "compile-record.schema.json").read_text())


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    return {"cls": static_ppocr("cls", folder), "rec": static_ppocr("rec", folder),
            "bad": sinh_graph(folder / "bad.onnx")}


@pytest.fixture(scope="module")
def build(models, tmp_path_factory):
    """cls, rec and the Sinh graph for SM8550 and SM8750, two jobs at a time, with a private cache."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    root = tmp_path_factory.mktemp("compile")
    out, cache = root / "build", root / "cache"
    args = ["compile", *models.values(), *[a for s in SOCS for a in ("--soc", s)], "-j", "2", "-o", out,
            "--cache-dir", cache]
    first = run(*args)
    return {"out": out, "cache": cache, "args": args, "first": first}


def record(out: Path, graph: str, soc: str) -> dict:
    return json.loads((out / graph / soc / "compile.json").read_text())


@pytest.mark.slow
def test_without_vtcm_mb_the_compiler_gives_the_graphs_4_mib(build):
    """What compile --help and the README say of the default, measured: not all of the SoC's 8 MB."""
    for graph in ("cls", "rec"):
        for soc_name in SOCS:
            rec = record(build["out"], graph, soc_name)
            assert rec["options"]["vtcm_mb"] is None and catalog.find(soc_name).vtcm_mb == 8
            assert [g["vtcm_bytes"] for g in rec["context"]["graphs"]] == [4 << 20], (graph, soc_name)


@pytest.mark.slow
def test_compiles_each_graph_for_each_soc_with_a_record(build, models):
    out = build["out"]
    for graph in ("cls", "rec"):
        for soc_name in SOCS:
            folder = out / graph / soc_name
            rec = record(out, graph, soc_name)
            jsonschema.validate(rec, SCHEMA)
            soc = catalog.find(soc_name)
            assert rec["status"] == "ok" and rec["error"] is None
            assert (rec["soc_id"], rec["dsp_arch"], rec["backend"]) == (soc.soc_id, soc.dsp_arch, "ort")
            assert rec["qairt_version"] == htp.qairt_version()
            assert re.fullmatch(rf"v{re.escape(htp.qairt_version())}\.\d+", rec["qairt_build"])
            assert rec["input"] == {"path": str(models[graph]), "sha256": sha256_file(models[graph])}
            assert rec["options"]["htp_arch"] == soc.arch_number and rec["options"]["cpu_fallback"] is False
            assert {o["path"]: o["format"] for o in rec["outputs"]} == {
                f"{graph}.bin": "qnn-context-binary", f"{graph}_ctx.onnx": "ort-epcontext"}
            for o in rec["outputs"]:
                assert sha256_file(folder / o["path"]) == o["sha256"]
                assert (folder / o["path"]).stat().st_size == o["size"]
            # the binary really targets this SoC, and the wrapper points at the renamed binary
            data = (folder / f"{graph}.bin").read_bytes()
            assert f"soc_type={soc_name};arch={soc.arch_number}".encode() in data
            assert rec["qairt_build"].encode() in data
            ctx = onnx.load(str(folder / f"{graph}_ctx.onnx"))
            assert [n.op_type for n in ctx.graph.node] == ["EPContext"]
            attrs = {a.name: h.get_attribute_value(a) for a in ctx.graph.node[0].attribute}
            assert attrs["ep_cache_context"] == f"{graph}.bin".encode() and attrs["embed_mode"] == 0
            assert sorted(p.name for p in folder.iterdir()) == sorted([f"{graph}.bin", f"{graph}_ctx.onnx",
                                                                      "compile.json"])
            # each job has its own log, even with -j 2
            log = (out / rec["log"]).read_text()
            assert f"soc_model {soc.soc_id}" in log and f"compile {graph} for {soc_name}" in log
            other = next(s for s in SOCS if s != soc_name)
            assert f"compile {graph} for {other}" not in log


@pytest.mark.slow
def test_renamed_context_runs_on_the_htp_emulator(build, models):
    import onnxruntime as ort

    from qnndeploy.base import socs

    x = np.random.default_rng(1).uniform(-1, 1, STATIC_SHAPES["cls"]).astype(np.float32)
    want = ort.InferenceSession(str(models["cls"]), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ctx = build["out"] / "cls" / "SM8750" / "cls_ctx.onnx"
    got = ort.InferenceSession(str(ctx), htp.session_options(socs.find("SM8750"))).run(None, {"x": x})[0]
    assert np.abs(got - want).max() < 1e-2


@pytest.mark.slow
def test_a_graph_the_htp_rejects_fails_alone_and_is_named(build):
    result, out = build["first"], build["out"]
    assert result.exit_code == 1, result.output
    for soc in SOCS:
        rec = record(out, "bad", soc)
        jsonschema.validate(rec, SCHEMA)
        assert rec["status"] == "failed" and rec["outputs"] == []
        assert "bad0 (Sinh)" in rec["error"] and "CPU fallback is off" in rec["error"]
        assert sorted(p.name for p in (out / "bad" / soc).iterdir()) == ["compile.json"]
        assert "Unsupported nodes in QNN EP" in (out / "logs" / f"bad-{soc}.log").read_text()
        assert f"log: {out / 'logs' / f'bad-{soc}.log'}" in result.output
    assert re.search(r"FAILED\s+bad\s+SM8550\s+the HTP cannot run 1 node\(s\): bad0 \(Sinh\)", result.output)
    assert "4 compiled, 0 cached, 2 failed" in result.output
    assert "failed: bad SM8550, bad SM8750" in result.output


@pytest.mark.slow
def test_unchanged_jobs_are_cache_hits_and_say_so(build, models):
    out = build["out"]
    before = {p: p.stat().st_mtime_ns for p in out.glob("*/*/*.bin")}
    again = run(*build["args"])
    assert again.exit_code == 1  # the Sinh graph is never cached: it fails again
    assert "0 compiled, 4 cached, 2 failed" in again.output
    assert len(re.findall(r"cached\s+\w+\s+SM8\d50 .*\[up to date\]", again.output)) == 4
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/*/*.bin")} == before

    # a new build folder fills from the content-addressed cache, through the library API
    calls = []
    summary = stage.compile_models({"cls": models["cls"], "rec": models["rec"]}, list(SOCS), out.parent / "b2",
                                   stage.CompileOptions(jobs=2,
                                                        cache_dir=build["cache"]), progress=lambda *a: calls.append(a))
    assert summary.ok and [j.status for j in summary.jobs] == ["cached"] * 4
    assert {j.note for j in summary.jobs} == {"restored from the cache"}
    ends = [c for c in calls if not isinstance(c[2], JobStarted)]
    assert ends[0] == (0, 4, None) and ends[-1][:2] == (4, 4) and len(ends) == 5
    assert sorted((c[2].graph, c[2].soc) for c in calls if isinstance(c[2], JobStarted)) == sorted(
        (j.graph, j.soc) for j in summary.jobs)  # and each job said when it started
    for j in summary.jobs:
        assert record(out.parent / "b2", j.graph, j.soc)["cache_key"] == record(out, j.graph, j.soc)["cache_key"]
        assert "cache hit" in j.log.read_text().splitlines()[0]

    # a changed model misses the cache
    changed = out.parent / "cls_changed.onnx"
    m = onnx.load(str(models["cls"]))
    m.doc_string = "changed"
    onnx.save(m, changed)
    summary = stage.compile_models({"cls": changed}, ["SM8750"], out.parent / "b3",
                                   stage.CompileOptions(cache_dir=build["cache"]))
    assert [j.status for j in summary.jobs] == ["ok"]


@pytest.mark.slow
def test_fp16_is_refused_for_a_soc_without_fp16(models, tmp_path):
    result = run("compile", models["cls"], "--soc", "SM8750", "--soc", "SM8350", "-o", tmp_path / "b")
    assert result.exit_code == 2
    assert "SM8350 (v68) has no fp16 on its HTP" in result.output and "drop --soc SM8350" in result.output
    assert not (tmp_path / "b").exists()


@pytest.mark.slow
def test_bad_input_is_refused_before_anything_is_written(models, tmp_path):
    out = tmp_path / "b"
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    np.savez(wrong / "0.npz", x=np.zeros([1, 3, 8, 8], np.float32))
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "x.npy").write_text("garbage\n")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    folder = tmp_path / "folder.onnx"
    folder.mkdir()
    (tmp_path / "ext").mkdir()
    truncated = sm.save_with_external_data(sm.static_mlp(), tmp_path / "ext" / "m.onnx")
    data = truncated.with_name("m.onnx.weights")
    data.write_bytes(data.read_bytes()[:100])
    cases = [
        (["compile", models["cls"], "--soc", "SM8750", "--precision", "w8a16", "--calib", wrong],
         "input 'x' has shape [1, 3, 8, 8], the model needs [1, 3, 48, 192]"),
        (["compile", models["cls"], "--soc", "SM8750", "--calib", wrong], "--calib applies to --precision w8a16"),
        (["compile", tmp_path / "missing.onnx", "--soc", "SM8750"], "missing.onnx: no such file"),
        (["compile", model_path("cls"), "--soc", "SM8750"], "dynamic size"),
        (["compile", models["cls"], "--soc", "SM9999"], "unknown SoC 'SM9999'"),
        (["compile", models["cls"], "--soc", "SM8750", "--precision", "w8a16"], "w8a16 needs --calib DIR"),
        (["compile", models["cls"], f"cls={models['rec']}", "--soc", "SM8750"], "would both be graph 'cls'"),
        (["compile", f"bad name={models['cls']}", "--soc", "SM8750"], "graph name 'bad name'"),
        (["compile", f"bad/name={models['cls']}", "--soc", "SM8750"], f"bad/name={models['cls']}: no such file"),
        (["compile", empty, "--soc", "SM8750"], "is not an ONNX model"),
        (["compile", folder, "--soc", "SM8750"], "is a folder, not an ONNX model file"),
        (["compile", "/dev/null", "--soc", "SM8750"], "/dev/null is a character device"),
        (["compile", truncated, "--soc", "SM8750"], "is truncated or damaged"),
        (["compile", models["cls"], "--soc", "SM8750", "--precision", "w8a16", "--calib", garbage],
         "as a NumPy array file"),
        (["compile", models["cls"], "--soc", "SM8750", "--cache-dir", empty], "is a file, not a folder"),
        (["compile", models["cls"], "--soc", "SM8750", "--loop", "whisper"], "--loop calibrates a decode loop's"),
        (["compile", models["cls"], "--soc", "SM8750", "--precision", "w8a16", "--calib", wrong, "--loop", "whisper"],
         "--loop whisper: no graph takes <model>-tokens"),
    ]
    for args, message in cases:
        result = run(*args, "-o", out)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output
        assert not out.exists()


@pytest.mark.slow
def test_w8a16_quantizes_with_calibration_samples(models, tmp_path):
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    calib = tmp_path / "calib" / "cls"
    calib.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(3):
        np.savez(calib / f"{i}.npz", x=rng.uniform(-1, 1, STATIC_SHAPES["cls"]).astype(np.float32))
    summary = stage.compile_models({"cls": models["cls"]}, ["SM8650", "SM8750"], tmp_path / "b",
                                   stage.CompileOptions(precision="w8a16", calib=tmp_path / "calib", use_cache=False,
                                                        jobs=1))
    assert [job.status for job in summary.jobs] == ["ok", "ok"], [job.error for job in summary.jobs]
    rec = record(tmp_path / "b", "cls", "SM8750")
    jsonschema.validate(rec, SCHEMA)
    assert rec["precision"] == "w8a16" and rec["options"]["enable_htp_fp16_precision"] is False
    assert rec["options"]["quantization"]["activation_type"] == "QUInt16"
    assert rec["options"]["calibration"]["path"] == str(calib)
    assert rec["options"]["calibration"]["files"] == rec["options"]["calibration"]["samples"] == 3
    assert any("calibrated on 3 sample(s)" in w for w in rec["warnings"])
    assert any(f.kind == logs.QUANTIZATION for f in summary.jobs[0].findings)  # the quantizer's own warnings
    assert not list(models["cls"].parent.glob("*inferred*"))  # the quantizer wrote nothing beside the model
    # quantized once: the second SoC's job compiled the QDQ graph the first made, with its figures and warnings
    first, second = ((tmp_path / "b" / "logs" / f"cls-{soc}.log").read_text() for soc in ("SM8650", "SM8750"))
    assert "quantizing to QDQ" in first and "an earlier job of this compile made" not in first
    said = first[first.index("qnndeploy: quantizing to QDQ"):first.index("qnndeploy: compiling")]
    assert "an earlier job of this compile made" in second and said in second  # the quantizer's lines, labelled
    other = record(tmp_path / "b", "cls", "SM8650")
    assert rec["quantized_layers"] == other["quantized_layers"] and rec["warnings"] == other["warnings"]
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["cls", "logs"]  # the shared QDQ graphs are gone


def test_w8a16_calibrates_on_image_files_through_preprocess_as_validate_takes_them(models, tmp_path):
    """--calib takes what validate's --inputs takes: .png files through --preprocess, fitted to the input; the
    preprocessing is recorded and is part of the fingerprint (other preprocessing, other samples)."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    from PIL import Image

    calib = tmp_path / "photos"
    calib.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (60, 200, 3), dtype=np.uint8)).save(calib / f"{i}.png")
    spec = "image:scale=1/255,mean=0.5,std=0.5"
    r = run("compile", models["cls"], "--soc", "SM8750", "--precision", "w8a16", "--calib", calib, "--preprocess",
            spec, "-o", tmp_path / "b", "--no-cache")
    assert r.exit_code == 0, r.output
    cal = record(tmp_path / "b", "cls", "SM8750")["options"]["calibration"]
    assert cal["path"] == str(calib) and cal["files"] == cal["samples"] == 2
    assert cal["preprocess"]["resize"] == [48, 192] and cal["preprocess"]["mean"] == [0.5, 0.5, 0.5]
    other = stage._calibration(calib, "cls", models["cls"], media.parse_preprocess("image:scale=1/255"), tmp_path)
    assert other[1]["sha256"] != cal["sha256"]
    r = run("compile", models["cls"], "--soc", "SM8750", "--preprocess", spec, "-o", tmp_path / "c")
    assert r.exit_code == 2 and "give them with --calib DIR" in r.output, r.output


def test_a_prepared_model_named_as_check_advises_keeps_the_models_graph_name(models, tmp_path):
    """check's advice writes det.onnx's prepared model to det.npu.onnx: its graph is still det, in the build folder,
    the binary's name and what the bundle and the app's Kotlin get; NAME= still names a graph anything valid."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    assert stage.models_from_args(["a/det.npu.onnx", "b/rec.onnx", "c/.npu.onnx", "x.npu=d/e.onnx"]) == {
        "det": Path("a/det.npu.onnx"), "rec": Path("b/rec.onnx"), ".npu": Path("c/.npu.onnx"),
        "x.npu": Path("d/e.onnx")}
    prepared = tmp_path / "cls.npu.onnx"
    prepared.write_bytes(models["cls"].read_bytes())
    r = run("compile", prepared, "--soc", "SM8750", "-o", tmp_path / "b")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "b" / "cls" / "SM8750" / "cls.bin").is_file() and not list(tmp_path.glob("b/*.npu"))
    assert r.output.splitlines()[-1] == f"next: qnndeploy validate {tmp_path / 'b'}"


def test_log_parser_finds_what_the_summary_shows():
    text = "\n".join([
        ("2026 [E:onnxruntime:, qnn_execution_provider.cc:2453 GetCapabilityImpl] Unsupported nodes in QNN EP: "
         "{ name: a/b, type: Sinh }, { name: c, type: Unique }, "),
        ("[W:onnxruntime:, qnn_model_wrapper.cc:565 CreateQnnNode] QNN.backendValidateOpConfig() failed for node "
         "`relu0` of type `Relu` with error code 3110"),
        ("[W:onnxruntime:, session_state.cc:1618 VerifyEachNodeIsAssignedToAnEp] Some nodes were not assigned to the "
         "preferred execution providers which may or may not have an negative impact on performance."),
        ("2025-04-01 23:50:17,978 - 183 - ERROR - Node q0: 'No translation registered for op type "
         "onnx_dynamicquantizelinear.'"),
        "2025-04-01 23:50:17,979 - 250 - WARNING - WARNING_QUANTIZATION: bias encoding of conv1 was clamped",
        "WARNING:root:Please consider to run pre-processing before quantization.",
        "     0.4ms [ ERROR ] Failed to create context binary",
        "2026 [I:onnxruntime:, inference_session.cc:2835 operator()] Initializing session.",
    ])
    found = [(f.kind, f.message) for f in logs.parse(text)]
    assert found == [
        ("unsupported-op", "a/b (Sinh) is not supported by the QNN HTP"),
        ("unsupported-op", "c (Unique) is not supported by the QNN HTP"),
        ("unsupported-op", "relu0 (Relu) rejected by the HTP backend (QNN error 3110)"),
        ("cpu-partition", "some nodes were assigned to the CPU, not the HTP"),
        ("unsupported-op", "q0 (dynamicquantizelinear) has no QNN translation"),
        ("quantization", "WARNING_QUANTIZATION: bias encoding of conv1 was clamped"),
        ("quantization", "Please consider to run pre-processing before quantization."),
        ("error", "Failed to create context binary"),
    ]
    many = "\n".join(f"Unsupported nodes in QNN EP: {{ name: n{i}, type: Sinh }}, " for i in range(12))
    trimmed = logs.parse(many)
    assert len(trimmed) == logs.MAX_PER_KIND + 1 and trimmed[-1].message == "... and 4 more (see the log)"
    assert len(logs.parse(many, limit=None)) == 12


# --- the qairt backend, against the stand-in SDK -----------------------------------------------------

@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The stand-in SDK's call log, python3 that has onnx first on PATH, and a stand-in ndk-build."""
    calls = tmp_path / "calls.jsonl"
    ndk = tmp_path / "ndk"
    ndk.mkdir()
    (ndk / "ndk-build").write_text("#!/bin/sh\necho 'stand-in ndk-build'\n")
    (ndk / "ndk-build").chmod(0o755)
    monkeypatch.setenv("QAIRT_STANDIN_CALLS", str(calls))
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), str(ndk), os.environ["PATH"]]))
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)

    def read() -> list[dict]:
        return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []

    return read


@pytest.mark.slow
def test_qairt_backend_runs_the_sdk_tools_as_documented(models, tmp_path, standin):
    out = tmp_path / "b"
    result = run("compile", models["cls"], "--soc", "SM8750", "--backend", "qairt", "--qnn-sdk-root", STANDIN,
                 "-o", out, "--no-cache")
    assert result.exit_code == 0, result.output
    calls = standin()
    assert [c["tool"] for c in calls] == ["qnn-onnx-converter", "qnn-model-lib-generator",
                                          "qnn-context-binary-generator"]
    conv, libgen, ctxgen = (c["argv"] for c in calls)
    work = Path(conv[3]).parent
    assert conv == ["--input_network", str(models["cls"]), "--output_path", str(work / "cls.cpp"),
                    "--act_bitwidth", "16", "--bias_bitwidth", "32"]
    assert libgen == ["-c", str(work / "cls.cpp"), "-b", str(work / "cls.bin"), "-o", str(work / "model_libs")]
    sdk = STANDIN.resolve()
    assert ctxgen == ["--backend", str(sdk / "lib/x86_64-linux-clang/libQnnHtp.so"),
                      "--model", str(work / "model_libs/x86_64-linux-clang/libcls.so"),
                      "--output_dir", str(work / "binary"), "--binary_file", "cls",
                      "--config_file", str(work / "config-cls/htp_backend_extensions.json")]
    for c in calls:
        assert c["env"]["LDFLAGS"] == "-Wl,-z,max-page-size=16384" and c["env"]["QNN_SDK_ROOT"] == str(sdk)
    rec = record(out, "cls", "SM8750")
    jsonschema.validate(rec, SCHEMA)
    assert rec["backend"] == "qairt" and rec["qairt_version"] == "2.50.40"  # the stand-in's sdk.yaml
    assert rec["tools"]["qairt_sdk"] == "2.50.40.260831" and rec["qairt_build"] == "v2.50.40.260831140417"
    assert rec["options"]["htp_config"] == {"vtcm_mb": 8, "O": 3, "soc_id": 69, "dsp_arch": "v79"}
    assert rec["warnings"] == []  # the binary names soc_type=SM8750;arch=79, as the HTP config asked
    assert {o["path"]: o["format"] for o in rec["outputs"]} == {"cls.bin": "qnn-context-binary",
                                                                 "libcls.so": "qnn-model-lib"}
    lib = (out / "cls" / "SM8750" / "libcls.so").read_bytes()
    machine, = struct.unpack_from("<H", lib, 18)
    p_align, = struct.unpack_from("<Q", lib, 64 + 48)
    assert (machine, p_align) == (183, 16384)  # aarch64, 16 KB pages from LDFLAGS
    assert [p.name for p in (out / "cls").iterdir()] == ["SM8750"]  # no work folder left beside the job
    assert "/.SM8750.partial-" in str(work)  # the temporary files lived inside the job's staging folder


@pytest.mark.slow
def test_qairt_w8a16_passes_calibration_as_an_input_list(models, tmp_path, standin, monkeypatch):
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + "/usr/bin:/bin")  # no ndk-build
    calib = tmp_path / "calib"
    calib.mkdir()
    np.save(calib / "x.npy", np.zeros([2, *STATIC_SHAPES["cls"]], np.float32))  # two samples stacked
    summary = stage.compile_models({"cls": models["cls"]}, ["SM8650"], tmp_path / "b",
                                   stage.CompileOptions(backend="qairt", precision="w8a16", calib=calib,
                                                        use_cache=False, qnn_sdk_root=STANDIN))
    assert summary.ok, summary.jobs[0].error
    conv = standin()[0]["argv"]
    assert conv[-3] == "--input_list" and conv[-1] == "--use_native_input_files"
    assert standin()[1]["argv"][-2:] == ["-t", "x86_64-linux-clang"]
    assert any("ndk-build is not on PATH" in w for w in summary.jobs[0].warnings)
    assert any(f.kind == logs.QUANTIZATION for f in summary.jobs[0].findings)


@pytest.mark.slow
def test_qairt_unsupported_op_and_missing_sdk(models, tmp_path, standin):
    summary = stage.compile_models({"bad": models["bad"]}, ["SM8750"], tmp_path / "b",
                                   stage.CompileOptions(backend="qairt", use_cache=False, qnn_sdk_root=STANDIN))
    job = summary.jobs[0]
    assert not summary.ok and job.status == "failed"
    assert "bad0 (sinh) has no QNN translation" in job.error
    result = run("compile", models["cls"], "--soc", "SM8750", "--backend", "qairt", "-o", tmp_path / "c")
    assert result.exit_code == 3 and "--qnn-sdk-root" in result.output and "QNN_SDK_ROOT" in result.output


def test_standin_tools_reject_flags_the_real_tools_reject(tmp_path):
    tool = STANDIN / "bin" / "x86_64-linux-clang"
    env = {**os.environ, "PYTHONPATH": str(STANDIN / "lib" / "python")}
    bad = subprocess.run([sys.executable, tool / "qnn-onnx-converter", "--input_network", "m.onnx", "--bogus"],
                         capture_output=True, text=True, env=env, check=False)
    assert bad.returncode == 2 and "unrecognized arguments: --bogus" in bad.stderr
    no_env = subprocess.run([sys.executable, tool / "qnn-onnx-converter", "--input_network", "m.onnx"],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""}, check=False)
    assert no_env.returncode == 1 and "envsetup.sh" in no_env.stderr
    missing = subprocess.run([sys.executable, tool / "qnn-context-binary-generator", "--model", "x.so"],
                             capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and "--backend" in missing.stderr


# --- what a reviewer broke it with -------------------------------------------------------------------

def relu_graph(path: Path) -> Path:
    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="relu0")], "relu",
                         [h.make_tensor_value_info("x", T.FLOAT, [1, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 8])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
    return path


def test_unsupported_nodes_are_named_when_onnxruntime_does_not_name_them(tmp_path):
    """With every node unsupported, onnxruntime says only "nodes assigned to the default CPU EP"."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    graph = h.make_graph([h.make_node("Sinh", ["x"], ["y"], name="bad0")], "sinh",
                         [h.make_tensor_value_info("x", T.FLOAT, [1, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 8])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), tmp_path / "sinh.onnx")
    result = run("compile", tmp_path / "sinh.onnx", "--soc", "SM8750", "-o", tmp_path / "b", "--no-cache")
    assert result.exit_code == 1
    assert re.search(r"FAILED\s+sinh\s+SM8750\s+the HTP cannot run 1 node\(s\): bad0 \(Sinh\)", result.output)
    assert "Unsupported nodes in QNN EP" not in (tmp_path / "b" / "logs" / "sinh-SM8750.log").read_text()


def test_a_soc_this_qairt_cannot_build_for_is_refused_before_any_job(tmp_path):
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    result = run("compile", relu_graph(tmp_path / "relu.onnx"), "--soc", "SM8750", "--soc", "SSG2115P",
                 "-o", tmp_path / "b", "--no-cache")
    assert result.exit_code == 2 and not (tmp_path / "b").exists()
    assert f"QAIRT {htp.qairt_version()} compiles nothing for SSG2115P (soc_model 46) on the host" in result.output
    assert "drop --soc SSG2115P" in result.output and "Relu" not in result.output


def test_name_is_path_only_for_graph_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a=b").mkdir()
    relu_graph(tmp_path / "a=b" / "relu.onnx")
    (tmp_path / "x=y.onnx").write_bytes(b"")
    args = ["adv/a=b/relu.onnx", "a=b/relu.onnx", "x=y.onnx", "det=m/det.onnx", "z=x=y.onnx"]
    assert list(stage.models_from_args(args[:1]).items()) == [("relu", Path("adv/a=b/relu.onnx"))]
    assert stage.models_from_args(args[1:]) == {
        "relu": Path("a=b/relu.onnx"), "x=y": Path("x=y.onnx"), "det": Path("m/det.onnx"), "z": Path("x=y.onnx")}
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    result = run("compile", "a=b/relu.onnx", "--soc", "SM8750", "-o", "my build", "--no-cache")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "my build" / "relu" / "SM8750" / "relu.bin").is_file()
    assert "next: qnndeploy validate 'my build'" in result.output  # shell-quoted


def test_a_rerun_removes_what_a_killed_compile_left(tmp_path):
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    out = tmp_path / "b"
    graph = out / "relu"
    stale = [graph / ".SM8750.partial-abc", graph / ".SM8750.old-123"]
    for p in [*stale, graph / ".SM8550.partial-ghi"]:
        p.mkdir(parents=True)
        (p / "job.json").write_text("{}")
    summary = stage.compile_models({"relu": relu_graph(tmp_path / "relu.onnx")}, ["SM8750"], out,
                                   stage.CompileOptions(use_cache=False))
    assert summary.ok
    # this run's job is SM8750: its leftovers go; another SoC's staging folder may belong to a running compile
    assert sorted(p.name for p in graph.iterdir()) == [".SM8550.partial-ghi", "SM8750"]


@pytest.mark.parametrize("child", [["sleep", "600"], ["sh", "-c", "trap '' TERM; sleep 600"]],
                         ids=["child", "child-ignoring-sigterm"])
def test_stopping_kills_each_tool_with_its_children_and_waits(tmp_path, child):
    """What Ctrl-C or SIGTERM does to the running tools: their whole process group dies before compile returns, a
    child that ignores SIGTERM and outlives the tool too (SIGKILL goes to the group, not only to a living tool)."""
    import threading

    pids = tmp_path / "pids"
    script = ("import os, subprocess, sys, time\n"
              f"child = subprocess.Popen({child!r})\n"
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
              "time.sleep(600)\n")
    tools, raised = stage.Tools(), []

    def job() -> None:
        try:
            with (tmp_path / "log").open("w") as log:
                tools.run([sys.executable, "-c", script], log)
        except KeyboardInterrupt:
            raised.append(True)

    thread = threading.Thread(target=job)
    thread.start()
    for _ in range(600):  # the tool starts in well under a second; give a loaded machine 60 s
        if pids.is_file() and len(pids.read_text().split()) == 2:
            break
        thread.join(0.1)
    tool, child = map(int, pids.read_text().split())
    tools.stop()
    thread.join()
    assert raised == [True] and not alive(tool) and not alive(child)
    with pytest.raises(KeyboardInterrupt), (tmp_path / "log").open("a") as log:  # no new tool once stopping
        tools.run([sys.executable, "-c", "pass"], log)


@pytest.mark.slow
def test_interrupted_compile_leaves_no_worker_and_no_partial_folder(models, tmp_path):
    """SIGINT to the compile process alone (the worker gets none): the worker must be stopped, not finish."""
    import signal

    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    out = tmp_path / "b"
    proc = subprocess.Popen([sys.executable, "-m", "qnndeploy", "compile", str(models["rec"]), "--soc", "SM8750",
                             "-o", str(out), "--no-cache"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for _ in range(600):  # the job spec appears just before its worker process starts
        if list(out.glob("rec/.SM8750.partial-*/.tmp-*/job.json")) or proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output
    assert "interrupted" in output and "Traceback" not in output
    assert [pid for pid in pids_mentioning(str(out)) if alive(pid)] == []
    assert sorted(p.name for p in (out / "rec").iterdir()) == []  # no partial folder, no half-made job
    assert "interrupted" in (out / "logs" / "rec-SM8750.log").read_text()


@pytest.mark.slow
def test_htp_settings_reach_the_binary_and_the_record(models, tmp_path):
    """--vtcm-mb and --optimization-mode are what the compiled graph says (read back with inspect); they are recorded
    and part of the cache key; more VTCM than a target has is refused."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    out = tmp_path / "b"
    r = run("compile", models["cls"], "--soc", "SM8750", "-o", out, "--vtcm-mb", "2", "--optimization-mode", "3",
            "--spill-fill", "--cache-dir", tmp_path / "cache")
    assert r.exit_code == 0, r.output
    options = record(out, "cls", "SM8750")["options"]
    assert (options["vtcm_mb"], options["htp_graph_finalization_optimization_mode"],
            options["enable_htp_spill_fill_buffer"]) == (2, 3, True)
    r = run("inspect", out / "cls" / "SM8750" / "cls.bin", "--json")
    assert r.exit_code == 0, r.output
    graph, = json.loads(r.stdout)["binaries"][0]["context"]["graphs"]
    assert (graph["vtcm_bytes"], graph["optimization_level"]) == (2 << 20, 3)
    key = record(out, "cls", "SM8750")["cache_key"]
    r = run("compile", models["cls"], "--soc", "SM8750", "-o", out, "--vtcm-mb", "4", "--cache-dir", tmp_path / "cache")
    assert r.exit_code == 0 and record(out, "cls", "SM8750")["cache_key"] != key
    r = run("compile", models["cls"], "--soc", "SM8750", "--soc", "SM8550", "-o", out, "--vtcm-mb", "16")
    assert r.exit_code == 2 and "more VTCM than SM8750 (8 MB), SM8550 (8 MB)" in r.output
    # one bundle target holds one set of settings: a graph compiled with others is refused, naming both
    r = run("compile", models["rec"], "--soc", "SM8750", "-o", out, "--cache-dir", tmp_path / "cache")
    assert r.exit_code == 0, r.output
    r = run("bundle", "--from-build", out, "--name", "m", "--version", "1.0", "-o", tmp_path / "bundles")
    assert r.exit_code == 2 and "SM8750 graphs compiled with different HTP settings" in r.output, r.output
    assert "--vtcm-mb 4, --optimization-mode default, spill-fill off" in r.output
    assert "--vtcm-mb default, --optimization-mode default, spill-fill off" in r.output
    assert not (tmp_path / "bundles").exists()


def _exp_log(folder: Path) -> tuple[Path, Path]:
    """MatMul -> Exp -> Log -> Relu: Exp spans ~e^-6..e^6, more than 16-bit activations hold finely; and 20
    calibration samples."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((32, 32)) * 0.2).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Exp", ["m"], ["e"], name="exp"),
             helper.make_node("Log", ["e"], ["l"], name="log"),
             helper.make_node("Relu", ["l"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "explog", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, folder / "explog.onnx")
    (folder / "calib").mkdir()
    rng = np.random.default_rng(1)
    for i in range(20):
        np.savez(folder / "calib" / f"s{i}.npz", x=(rng.standard_normal((1, 32)) * 2.5).astype(np.float32))
    return folder / "explog.onnx", folder / "calib"


@pytest.mark.slow
def test_keep_fp16_leaves_the_named_nodes_unquantized(tmp_path):
    """w8a16 with every node kept in fp16 is far closer to the CPU than plain w8a16: the option reaches the
    quantizer and the compile (recorded, in the cache key); misuse is refused before any job."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    model, calib = _exp_log(tmp_path)
    snr = {}
    for keep in ("", "mm,exp,log,relu"):
        out = tmp_path / f"b{len(keep)}"
        r = run("compile", model, "--soc", "SM8750", "--precision", "w8a16", "--calib", calib, "-o", out,
                "--no-cache", *(["--keep-fp16", keep] if keep else []))
        assert r.exit_code == 0, r.output
        options = record(out, "explog", "SM8750")["options"]
        assert options["quantization"].get("nodes_to_exclude", []) == [n for n in keep.split(",") if n]
        assert options["enable_htp_fp16_precision"] is bool(keep)
        r = run("validate", out, "--inputs", calib, "--json")
        snr[keep] = json.loads(r.stdout)["targets"][0]["outputs"][0]["snr_db"]
    assert snr["mm,exp,log,relu"] > snr[""] + 20, snr
    for args, message in ((["--keep-fp16", "exp"], "applies to --precision w8a16"),
                          (["--precision", "w8a16", "--calib", str(calib), "--keep-fp16", "nope"],
                           "--keep-fp16 nope: no node of that name")):
        r = run("compile", model, "--soc", "SM8750", "-o", tmp_path / "x", *args)
        assert r.exit_code == 2 and message in r.output, r.output


def test_workers_never_import_the_current_folder(tmp_path):
    """A `qnndeploy/` folder where the user runs compile is neither imported by the worker processes nor does it
    break them: they start as `python -P -m qnndeploy.compile.ort` with this qnndeploy first on the path."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    import subprocess

    marker = tmp_path / "ran"
    hostile = tmp_path / "cwd" / "qnndeploy"
    (hostile / "compile").mkdir(parents=True)
    for name in ("__init__.py", "compile/__init__.py", "compile/ort.py", "qnnsystem.py"):
        (hostile / name).write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
    model = relu_graph(tmp_path / "relu.onnx")
    done = subprocess.run(["qnndeploy", "compile", str(model), "--soc", "SM8750", "-o", str(tmp_path / "b"),
                           "--no-cache"], cwd=tmp_path / "cwd", capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    record = (tmp_path / "b" / "relu" / "SM8750" / "compile.json")
    assert record.is_file()


@pytest.mark.needs_qnn
def test_the_summary_table_fits_a_long_graph_name(tmp_path):
    """The graph column is as wide as the longest name: the SoC column stays one column."""
    require(htp.available(), "onnxruntime-qnn")
    short = bundles.tiny_model(tmp_path / "det.onnx", 8)
    long = bundles.tiny_model(tmp_path / "a_graph_name_longer_than_the_column.onnx", 8)
    r = run("compile", short, long, "--soc", "SM8750", "-o", tmp_path / "build")
    assert r.exit_code == 0, r.output
    rows = [line for line in r.stdout.splitlines() if " SM8750 " in line]
    assert len(rows) == 2 and len({row.index(" SM8750 ") for row in rows}) == 1, rows


def test_a_job_that_failed_for_want_of_room_says_so(tmp_path):
    """A compiler on a full disk writes empty or cut files and fails on them in its own words: onnxruntime-qnn said
    "Empty cache file encountered" when the disk filled during a 0.5B compile here. The job's error then says there
    was no room. The full disk is a file size limit (ulimit -f) on this process: writes past it fail as on a full
    disk (EFBIG; Python ignores SIGXFSZ). The model's external data counts: a limit above its .onnx alone but below
    its weights is no room."""
    model = bundles.with_external_data(bundles.tiny_model(tmp_path / "tiny.onnx", 64), tmp_path / "m" / "m.onnx")
    data = model.with_name("m.onnx.data").stat().st_size
    work = tmp_path / "work"
    work.mkdir()
    error = BadInput("model_ctx.onnx does not load: Empty cache file encountered")
    assert stage.failure(error, work, model) == str(error)  # room enough: the compiler's words alone
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (model.stat().st_size + data // 2, hard))
    try:
        said = stage.failure(error, work, model)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert said.startswith(str(error)) and f"(no room to write in {tmp_path}: a file is larger than" in said
    assert said.endswith("make room and compile again)") and list(work.iterdir()) == []

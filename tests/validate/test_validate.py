"""`qnndeploy validate`: the compiled PP-OCR contexts run on the real host HTP emulator (onnxruntime-qnn) against
CPU onnxruntime; det once, for the near-zero reference; thresholds, input folders, records; metrics on arrays."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from qnndeploy import compile as compile_stage
from qnndeploy import validate as stage
from qnndeploy.model import metrics
from qnndeploy.qnn import htp
from tests.support import QAIRT_STANDIN as STANDIN
from tests.support.cli import run
from tests.support.host import require
from tests.support.ppocr import STATIC_SHAPES, static_ppocr
from tests.support.synth_models import sinh_graph

pytestmark = [pytest.mark.needs_qnn]

SCHEMA = json.loads((Path(stage.__file__).parent.parent / "schemas" / "validation-record.schema.json").read_text())


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    folder = tmp_path_factory.mktemp("vmodels")
    return {"cls": static_ppocr("cls", folder), "rec": static_ppocr("rec", folder)}


@pytest.fixture(scope="module")
def build(models, tmp_path_factory):
    """cls for two SoCs, rec for one (rec takes 20 s an emulator run): two graphs and two SoCs in one build. Into
    the session's compile cache, which cls_build restores from."""
    out = tmp_path_factory.mktemp("vbuild") / "build"
    assert compile_stage.compile_models(models, ["SM8750"], out, compile_stage.CompileOptions(jobs=2)).ok
    assert compile_stage.compile_models({"cls": models["cls"]}, ["SM8550"], out).ok
    return out


@pytest.mark.slow
def test_cls_and_rec_pass_on_the_emulator_for_two_socs(build):
    result = run("validate", build, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["ok"] and summary["inputs"]["kind"] == "random" and summary["inputs"]["samples"] == 1
    assert "Emulator timings say nothing about phone timings" in summary["emulator_note"]
    assert {(t["graph"], t["soc"], t["status"]) for t in summary["targets"]} == {
        ("cls", "SM8550", "passed"), ("cls", "SM8750", "passed"), ("rec", "SM8750", "passed")}
    for t in summary["targets"]:
        path = build / t["graph"] / t["soc"] / "validation.json"
        rec = json.loads(path.read_text())
        jsonschema.validate(rec, SCHEMA)
        compiled = json.loads((path.parent / "compile.json").read_text())
        assert rec["passed"] and rec["thresholds"] == metrics.THRESHOLDS["fp16"]
        assert rec["context"]["sha256"] == next(o["sha256"] for o in compiled["outputs"]
                                                if o["format"] == "ort-epcontext")
        assert rec["compile_cache_key"] == compiled["cache_key"]
        (out,) = rec["outputs"]
        # measured here: cls rel L2 ~4e-3, rec ~9e-3 vs CPU with fp16 on the HTP
        assert out["judged_on"] == "cosine+snr" and out["cosine"] > 0.9999 and 30 < out["snr_db"] < 80
        assert out["rel_l2"] < 0.02 and out["argmax_agreement"] == 1.0
        assert rec["emulator"]["seconds_per_run"] > 0 and "not" in rec["emulator"]["note"]
    text = run("validate", build / "..", "--random", "1")  # no compile records in the parent folder
    assert text.exit_code == 2 and "no compile records" in text.output
    text = run("validate", build, "--random", "1", "--graph", "cls")  # cls only: rec takes 20 s a run
    assert text.exit_code == 0 and text.output.splitlines()[-1] == (  # the next stage, ready to paste
        f"next: qnndeploy bundle build --from-build {build} --name NAME --version VERSION"), text.output


@pytest.mark.slow
def test_the_recognizer_is_judged_by_the_text_it_reads_from_rendered_words(build, tmp_path):
    """PP-OCR's recognizer names its vocabulary, so validate judges its text (CTC, greedy) rather than its scores:
    on a line rendered with Pillow's own font, the CPU and the emulated NPU read the same text, which is the text
    drawn."""
    from PIL import Image, ImageDraw, ImageFont

    words = ["Snapdragon NPU 2026"]  # one line: rec takes 12 s an emulator run
    folder = tmp_path / "lines"
    folder.mkdir()
    for i, text in enumerate(words):
        image = Image.new("RGB", (320, 48), "white")
        ImageDraw.Draw(image).text((6, 6), text, fill="black", font=ImageFont.load_default(size=30))
        image.save(folder / f"{i}.png")
    (tmp_path / "texts.txt").write_text("\n".join(words) + "\n")
    result = run("validate", build, "--graph", "rec", "--inputs", folder, "--preprocess",
                 "image:resize=48x320,scale=1/255,mean=0.5/0.5/0.5,std=0.5/0.5/0.5",
                 "--task", f"rec=ocr:texts={tmp_path / 'texts.txt'}", "--json")
    assert result.exit_code == 0, result.output
    (target,) = json.loads(result.stdout)["targets"]
    task = target["task"]
    assert task["kind"] == "ocr" and task["passed"] and task["figures"]["error_rate"] == 0
    assert [(e["cpu"], e["npu"]) for e in task["examples"]] == [(w, w) for w in words]
    assert task["figures"]["cpu_error_rate_vs_texts"] == 0 == task["figures"]["npu_error_rate_vs_texts"]
    record = json.loads((build / "rec" / "SM8750" / "validation.json").read_text())
    jsonschema.validate(record, SCHEMA)
    assert record["task"]["kind"] == "ocr" and record["task"]["vocabulary"] == 6625


@pytest.fixture(scope="module")
def cls_build(build, models, tmp_path_factory):
    """A build of its own (these tests write failed validations), restored from the cache `build` filled."""
    out = tmp_path_factory.mktemp("clsbuild") / "build"
    summary = compile_stage.compile_models({"cls": models["cls"]}, ["SM8750"], out)
    assert summary.ok and [j.status for j in summary.jobs] == ["cached"]
    return out


@pytest.mark.slow
def test_a_stricter_threshold_fails_with_exit_1(cls_build):
    # cls is a classifier (a one-row Softmax): its label decides, and no SNR threshold changes the label
    labels = run("validate", cls_build, "--min-snr-db", "200")
    assert labels.exit_code == 0 and "ok  classify (save_infer_model/scale_0.tmp_1)" in labels.output
    result = run("validate", cls_build, "--min-snr-db", "200", "--task", "tensor")
    assert result.exit_code == 1
    assert "FAIL  cls" in result.output and "BAD save_infer_model/scale_0.tmp_1" in result.output
    assert "next: qnndeploy bundle build" not in result.output  # only a passed validation goes on
    assert "emulator timings say nothing about phone timings" in result.output.lower()
    rec = json.loads((cls_build / "cls" / "SM8750" / "validation.json").read_text())
    assert rec["passed"] is False and rec["thresholds"]["min_snr_db"] == 200


@pytest.mark.slow
def test_inputs_folder_per_graph(cls_build, tmp_path):
    inputs = tmp_path / "inputs" / "cls"
    inputs.mkdir(parents=True)
    rng = np.random.default_rng(3)
    np.save(inputs / "x.npy", rng.uniform(-1, 1, [2, *STATIC_SHAPES["cls"]]))  # float64: cast to the model's float32
    summary = stage.validate_build(cls_build, stage.ValidateOptions(inputs=tmp_path / "inputs"))
    (target,) = summary.targets
    assert summary.ok and target.samples == 2
    rec = json.loads((cls_build / "cls" / "SM8750" / "validation.json").read_text())
    assert rec["inputs"] == {"kind": "files", "folder": str(inputs), "samples": 2, "files": ["x.npy"]}
    np.save(inputs / "x.npy", np.zeros([1, 3, 48, 100], np.float32))
    before = (cls_build / "cls" / "SM8750" / "validation.json").stat().st_mtime_ns
    result = run("validate", cls_build, "--inputs", tmp_path / "inputs")
    assert result.exit_code == 2 and "has shape [1, 3, 48, 100]" in result.output  # bad input: nothing run
    assert (cls_build / "cls" / "SM8750" / "validation.json").stat().st_mtime_ns == before
    both = run("validate", cls_build, "--inputs", tmp_path / "inputs", "--random", "2")
    assert both.exit_code == 2 and "not both" in both.output


@pytest.mark.slow
def test_w8a16_build_is_judged_on_w8a16_thresholds(models, tmp_path):
    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        np.savez(calib / f"{i}.npz", x=rng.uniform(-1, 1, STATIC_SHAPES["cls"]).astype(np.float32))
    out = tmp_path / "build"
    assert compile_stage.compile_models({"cls": models["cls"]}, ["SM8750"], out,
                                        compile_stage.CompileOptions(precision="w8a16", calib=calib,
                                                                     use_cache=False)).ok
    summary = stage.validate_build(out, stage.ValidateOptions(random=2))
    (target,) = summary.targets
    assert target.thresholds == metrics.THRESHOLDS["w8a16"]
    assert target.status == "passed", target.outputs
    assert target.outputs[0].snr_db < 45  # 8-bit weights cost accuracy that fp16 does not


@pytest.mark.slow
def test_failed_and_qairt_jobs_are_skipped_with_the_reason(tmp_path, monkeypatch):
    import os
    import sys

    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    bad = sinh_graph(tmp_path / "bad.onnx")
    out = tmp_path / "build"
    compile_stage.compile_models({"bad": bad}, ["SM8750"], out, compile_stage.CompileOptions(use_cache=False))
    compile_stage.compile_models({"qbad": bad, "relu": _relu(tmp_path)}, ["SM8750"], out,
                                 compile_stage.CompileOptions(backend="qairt", use_cache=False, qnn_sdk_root=STANDIN))
    result = run("validate", out)
    assert result.exit_code == 1  # nothing could be validated
    assert "skip  bad" in result.output and "the compile failed" in result.output
    assert "no ORT EPContext wrapper (qairt backend)" in result.output


def _relu(tmp_path: Path) -> Path:
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "relu", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 4])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), tmp_path / "relu.onnx")
    return tmp_path / "relu.onnx"


@pytest.mark.slow
def test_det_near_zero_reference_is_judged_on_max_abs_diff(tmp_path):
    """PP-OCR det on random input gives a map near zero: cosine/SNR mislead there, max abs diff does not."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    det = static_ppocr("det", tmp_path, [1, 3, 320, 320])  # a quarter of the app's 640x640: 4x faster on the emulator
    out = tmp_path / "build"
    assert compile_stage.compile_models({"det": det}, ["SM8750"], out, compile_stage.CompileOptions(use_cache=False)).ok
    summary = stage.validate_build(out)
    (target,) = summary.targets
    (m,) = target.outputs
    assert target.status == "passed"
    assert m.judged_on == "max_abs_diff" and "near zero" in m.note and "--inputs" in m.note
    assert m.ref_rms < 1e-3 and m.max_abs_diff < 1e-3
    assert m.cosine is not None and m.cosine < 0.999  # would have failed if judged on cosine


def test_metrics_on_known_arrays():
    ref = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    m = metrics.metrics(ref, ref + np.array([0.01, 0, 0, 0], np.float32))
    assert math.isclose(m["max_abs_diff"], 0.01, rel_tol=1e-4)
    assert math.isclose(m["rel_l2"], 0.01 / math.sqrt(14.25), rel_tol=1e-4)
    assert math.isclose(m["snr_db"], 10 * math.log10(14.25 / 1e-4), rel_tol=1e-4)
    assert m["cosine"] > 0.99999
    assert metrics.metrics(ref, ref)["snr_db"] == 300.0  # exact agreement: capped, not infinite
    zero = metrics.metrics(np.zeros(4), np.full(4, 1e-5))
    assert zero["rel_l2"] is None and zero["cosine"] is None and zero["snr_db"] is None
    limits = metrics.THRESHOLDS["fp16"]
    assert not metrics.judge("y", [ref], [np.full(4, np.nan, np.float32)], limits).passed
    flat = metrics.judge("y", [np.full((2, 3), 1e-5)], [np.full((2, 3), 3e-4)], limits)
    assert flat.passed and flat.judged_on == "max_abs_diff"
    off = metrics.judge("y", [ref], [-ref], limits)
    assert not off.passed and off.cosine < 0


# --- what a reviewer broke it with -------------------------------------------------------------------

@pytest.fixture(scope="module")
def relu_build(tmp_path_factory):
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    folder = tmp_path_factory.mktemp("relu")
    out = folder / "build"
    assert compile_stage.compile_models({"relu": _relu(folder)}, ["SM8750"], out,
                                        compile_stage.CompileOptions(use_cache=False)).ok
    return out


@pytest.mark.parametrize("args, message", [
    (["--min-cosine", "2"], "--min-cosine 2: a cosine similarity lies between -1 and 1"),
    (["--min-cosine", "nan"], "--min-cosine nan"),
    (["--min-snr-db", "inf"], "--min-snr-db inf: give a finite number of dB"),
    (["--atol", "-1"], "--atol -1: give a finite absolute tolerance of 0 or more"),
    (["--atol", "nan"], "--atol nan"),
])
def test_thresholds_no_output_could_meet_are_refused(relu_build, args, message):
    result = run("validate", relu_build, *args)
    assert result.exit_code == 2 and result.output.startswith("error: ") and result.output.count("\n") == 1
    assert message in result.output
    assert not (relu_build / "relu" / "SM8750" / "validation.json").exists()


def test_an_inputs_folder_without_usable_samples_is_bad_input(relu_build, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "x.npy").write_text("garbage\n")
    (tmp_path / "zip").mkdir()
    (tmp_path / "zip" / "0.npz").write_bytes(b"PK\x03\x04 cut short")
    for folder, message in ((empty, "no input samples (*.npz, or x.npy)"),
                            (garbage, f"cannot read {garbage / 'x.npy'} as a NumPy array file"),
                            (tmp_path / "zip", "0.npz as a NumPy array file")):
        result = run("validate", relu_build, "--inputs", folder)
        assert result.exit_code == 2 and result.output.startswith("error: ") and message in result.output, folder
        assert result.output.count("\n") == 1
    assert not (relu_build / "relu" / "SM8750" / "validation.json").exists()
    np.save(garbage / "x.npy", np.ones([1, 4], np.float32))  # the same folder, fixed: validates
    assert run("validate", relu_build, "--inputs", garbage).exit_code == 0
    (relu_build / "relu" / "SM8750" / "validation.json").unlink()  # the module's other tests expect none


def test_argmax_agreement_only_for_outputs_with_a_class_axis(tmp_path):
    """Softmax outputs and [batch, classes] logits get argmax agreement; a feature map does not."""
    import onnx

    from qnndeploy.model import onnxio
    from tests.support import synth_models as sm

    onnx.save(sm.token_types(), tmp_path / "softmax.onnx")
    onnx.save(sm.static_mlp(), tmp_path / "logits.onnx")
    onnx.save(sm.wrong_output_shape(), tmp_path / "features.onnx")
    assert onnxio.class_axes(tmp_path / "softmax.onnx") == {"probs": -1}
    assert onnxio.class_axes(tmp_path / "logits.onnx") == {"y": 1}
    assert onnxio.class_axes(tmp_path / "features.onnx") == {}
    ref = np.array([[0.1, 0.9], [0.8, 0.2]], np.float32)
    limits = metrics.thresholds_for("fp16")
    (scores,) = metrics.judge_outputs([{"y": ref}], [{"y": ref[:, ::-1]}], limits, {"y": 1})
    assert scores.argmax_agreement == 0.0
    (plain,) = metrics.judge_outputs([{"y": ref}], [{"y": ref}], limits)
    assert plain.argmax_agreement is None


def test_a_looser_threshold_needs_a_reason_which_is_recorded_and_bundled(relu_build, tmp_path):
    import shutil

    relu_build = shutil.copytree(relu_build, tmp_path / "build")  # the module's build stays unvalidated
    r = run("validate", str(relu_build), "--min-snr-db", "10")
    assert r.exit_code == 2 and "--min-snr-db 10 is looser than the default: say why with --reason" in r.output
    stricter = run("validate", str(relu_build), "--min-snr-db", "40")
    assert stricter.exit_code == 0, stricter.output  # a stricter threshold needs no reason
    why = "speech-only model: 10 dB keeps every keyword (device-checked)"
    r = run("validate", str(relu_build), "--min-snr-db", "10", "--reason", why)
    assert r.exit_code == 0, r.output
    record = json.loads((relu_build / "relu" / "SM8750" / "validation.json").read_text())
    assert record["threshold_reason"] == why and record["thresholds"]["min_snr_db"] == 10
    jsonschema.validate(record, SCHEMA)
    r = run("bundle", "--from-build", str(relu_build), "--name", "relu", "--version", "1",
            "-o", str(tmp_path))
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "relu-1" / "manifest.json").read_text())
    assert manifest["targets"][0]["validation"]["graphs"]["relu"]["threshold_reason"] == why
    r = run("bundle", "verify", str(tmp_path / "relu-1"))
    assert "graph 'relu' was judged with a looser threshold (cosine >= 0.999, SNR >= 10 dB" in r.output, r.output
    assert why in r.output


def test_selected_jobs_in_parallel_in_the_builds_order_with_a_line_per_job_in_logs(tmp_path):
    """--graph and --soc pick jobs; -j 2 gives the results a serial run gives, in the same order; where stderr is no
    terminal (CI), each job says when it starts and ends, with its seconds, and --json stays parseable."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    one = _relu(tmp_path)
    two = tmp_path / "two.onnx"
    two.write_bytes(one.read_bytes())
    build = tmp_path / "build"
    compiled = run("compile", one, two, "--soc", "SM8650", "--soc", "SM8750", "-o", build, "--no-cache")
    assert compiled.exit_code == 0, compiled.output
    assert re.search(r"^compiling: two SM8650 started \(\d of 4 done\)$", compiled.stderr, re.MULTILINE)
    assert re.search(r"^compiling: two SM8650 ok in \d+\.\d s \(\d of 4 done\)$", compiled.stderr, re.MULTILINE)
    picked = run("validate", build, "--graph", "relu", "--soc", "sm8750", "--json")
    assert picked.exit_code == 0, picked.output
    assert [(t["graph"], t["soc"]) for t in json.loads(picked.stdout)["targets"]] == [("relu", "SM8750")]
    assert picked.stderr.splitlines()[0] == "validating on the HTP emulator: relu SM8750 started (0 of 1 done)"
    assert re.fullmatch(r"validating on the HTP emulator: relu SM8750 passed in \d+\.\d s \(1 of 1 done\)",
                        picked.stderr.splitlines()[1])
    assert not (build / "relu" / "SM8650" / "validation.json").exists()
    serial, parallel = (json.loads(run("validate", build, "-j", j, "--json").stdout)["targets"] for j in (1, 2))
    assert [(t["graph"], t["soc"]) for t in parallel] == [(t["graph"], t["soc"]) for t in serial] == [
        ("relu", "SM8650"), ("relu", "SM8750"), ("two", "SM8650"), ("two", "SM8750")]
    assert [t["outputs"] for t in parallel] == [t["outputs"] for t in serial]
    unknown = run("validate", build, "--graph", "three")
    assert unknown.exit_code == 2
    assert unknown.output == "error: --graph three: not in the build, which holds relu, two\n"
    absent = run("validate", build, "--soc", "SM8550")
    assert absent.exit_code == 2 and "--soc SM8550: the build has no job for it (its jobs are for SM8650, SM8750)" \
        in absent.output

"""Validation on the inputs a graph really gets, on the real onnxruntime-qnn: a split's NPU part fed what the parts
before it make (not random values), judged with the whole chain as the app runs it; integer inputs drawn from the
values the graph takes (a length up to the positions it masks) or given with --range; and what bundle build
accepted, bundle verify accepts."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qnndeploy import validate as stage
from qnndeploy.formats.records import ValidationRecord
from qnndeploy.model import samples
from qnndeploy.model.onnxio import int_input_ranges
from qnndeploy.qnn import htp
from qnndeploy.verification import emulated
from tests.support import synth_models
from tests.support.cli import run
from tests.support.host import require

SCHEMA = json.loads((Path(stage.__file__).parent.parent / "schemas" / "validation-record.schema.json").read_text())


def cli(*args: object) -> tuple[int, dict]:
    r = run(*args, "--json")
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)


def split_build(tmp_path: Path, cpu: str) -> Path:
    """The ScaleNorm model split at its gained feature, `cpu` part on the CPU, the other compiled for SM8650."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    onnx.save(synth_models.scalenorm_after_gain(), tmp_path / "pose.onnx")
    code, split = cli("prepare", tmp_path / "pose.onnx", "--split-at", "feat", "--cpu-part", cpu,
                      "-o", tmp_path / "parts" / "pose.onnx")
    assert code == 0
    npu = next(Path(p["path"]) for p in split["parts"] if p["runs_on"] == "npu")
    assert cli("compile", npu, "--soc", "SM8650", "-o", tmp_path / "build", "--no-cache")[0] == 0
    return tmp_path / "build"


@pytest.mark.needs_qnn
def test_a_split_tail_is_fed_what_the_cpu_head_makes_and_fails_where_the_app_would(tmp_path: Path) -> None:
    """The head gives the tail values near 700 whose squares overflow fp16 in its ReduceL2: fed uniform [-1, 1)
    values the tail passed; fed the head's real outputs it fails, and so does the chain."""
    build = split_build(tmp_path, "head")
    code, summary = cli("validate", build)
    target = summary["targets"][0]
    assert code == 1 and not summary["ok"] and target["status"] == "failed"
    assert target["inputs"]["kind"] == "chain" and target["inputs"]["after"] == ["head"]
    assert target["inputs"]["samples"]["kind"] == "random"
    assert target["chain"]["passed"] is False and target["chain"]["emulator_runs"] == 0
    assert target["outputs"][0]["snr_db"] < 0  # a scale error: the overflowed norm
    record = json.loads((build / "pose-tail" / "SM8650" / "validation.json").read_text())
    assert json.dumps(ValidationRecord.parse(record, build).to_json()) == json.dumps(record)  # the chain's too
    jsonschema.validate(record, SCHEMA)
    assert record["passed"] is False and record["chain"]["outputs"][0]["name"] == "y"
    shown = run("validate", build).output
    assert "inputs: what the split's head made of the model's samples" in shown
    assert "FAILS against the source model" in shown and "next: qnndeploy diagnose" in shown

    # bundle refuses the failure unless accepted, and verify replays the chain's record without a word against it
    refused = run("bundle", "build", "--from-build", build, "--split", tmp_path / "parts" / "pose.split.json",
                  "--name", "pose", "--version", "1", "-o", tmp_path / "out")
    assert refused.exit_code == 2 and "--accept pose-tail@SM8650=" in refused.output
    accepted = run("bundle", "build", "--from-build", build, "--split", tmp_path / "parts" / "pose.split.json",
                   "--name", "pose", "--version", "1", "-o", tmp_path / "out",
                   "--accept", "pose-tail@SM8650=overflow known, the app runs it on the CPU", "--accept-on", "cpu")
    assert accepted.exit_code == 0, accepted.output
    verified = run("bundle", "verify", tmp_path / "out" / "pose-1")  # the chain again, no worse than accepted
    assert verified.exit_code == 0, verified.output
    assert "1 context binary loaded and run on the host HTP emulator" in verified.output
    assert "1 chained with the split's CPU part" in verified.output and "other inputs" not in verified.output


@pytest.mark.needs_qnn
def test_the_opposite_split_passes_and_its_chain_runs_the_cpu_tail_on_the_npu_heads_outputs(tmp_path: Path) -> None:
    build = split_build(tmp_path, "tail")
    code, summary = cli("validate", build)
    target = summary["targets"][0]
    assert code == 0 and target["status"] == "passed"
    assert target["inputs"]["kind"] == "chain" and target["inputs"]["after"] == []
    assert [o["name"] for o in target["outputs"]] == ["feat"]  # the head's own output, the cut tensor
    assert target["chain"]["passed"] and [o["name"] for o in target["chain"]["outputs"]] == ["y"]
    assert target["chain"]["outputs"][0]["snr_db"] > 30
    built = run("bundle", "build", "--from-build", build, "--split", tmp_path / "parts" / "pose.split.json",
                "--name", "pose", "--version", "1", "-o", tmp_path / "out")
    assert built.exit_code == 0, built.output
    verified = run("bundle", "verify", tmp_path / "out" / "pose-1")  # the CPU tail on the emulated head's outputs
    assert verified.exit_code == 0 and "1 chained with the split's CPU part" in verified.output, verified.output
    assert "warning" not in verified.output.lower()


def test_a_length_compared_with_a_range_of_positions_gets_lengths_from_1_to_the_positions(tmp_path) -> None:
    model = synth_models.masked_by_length(16)
    lo, hi, why = int_input_ranges(model.graph)["x_lens"]
    assert (lo, hi) == (1, 17) and "compared with the 16 positions of Range positions" in why
    onnx.save(model, tmp_path / "ctc.onnx")
    made, record = samples.for_graph(tmp_path / "ctc.onnx", "ctc", count=64)
    assert all(1 <= int(s["x_lens"][0]) <= 16 for s in made)
    assert record["ranges"]["x_lens"] == {"from": 1, "to": 16, "why": why}


def test_an_integer_input_nothing_bounds_is_recorded_as_a_guess_and_range_overrides_it(tmp_path) -> None:
    name = "count"
    graph = helper.make_graph([helper.make_node("Cast", [name], ["y"], to=TensorProto.FLOAT)], "m",
                              [helper.make_tensor_value_info(name, TensorProto.INT32, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    made, record = samples.for_graph(tmp_path / "m.onnx", "m", count=4)
    assert record["ranges"][name]["why"] == samples.GUESSED and samples.guessed(record) == [name]
    made, record = samples.for_graph(tmp_path / "m.onnx", "m", count=16, ranges={name: (100, 101)})
    assert {int(v) for s in made for v in s[name].ravel()} <= {100, 101}
    assert record["ranges"][name] == {"from": 100, "to": 101, "why": "given with --range"}
    assert samples.recorded_ranges(record) == {name: (100, 101)}


@pytest.mark.needs_qnn
def test_random_lengths_in_the_graphs_range_pass_where_a_guess_made_the_cpu_itself_compute_nan(tmp_path) -> None:
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    onnx.save(synth_models.masked_by_length(), tmp_path / "ctc.onnx")
    assert cli("compile", tmp_path / "ctc.onnx", "--soc", "SM8650", "-o", tmp_path / "build")[0] == 0
    code, summary = cli("validate", tmp_path / "build", "--random", "8")
    assert code == 0 and summary["targets"][0]["inputs"]["ranges"]["x_lens"]["from"] == 1
    code, summary = cli("validate", tmp_path / "build", "--random", "8", "--range", "x_lens=0:9")
    assert code == 1
    bad = summary["targets"][0]["outputs"][0]
    assert bad["judged_on"] == "finite" and "the CPU's own output has NaN or Inf" in bad["note"]
    for wrong, said in (("x_lens=9:1", "LO must be at most HI"), ("x_lens", "give NAME=LO:HI"),
                        ("nosuch=1:2", "no integer input of that name"), ("x_lens=1:5000000000", "holds")):
        r = run("validate", tmp_path / "build", "--range", wrong)
        assert r.exit_code == 2 and said in r.output and "Traceback" not in r.output, r.output


@pytest.mark.needs_qnn
def test_a_failure_accepted_on_max_abs_diff_builds_a_bundle_that_verify_accepts(tmp_path: Path) -> None:
    """The reference is all zeros, so the failure was judged on max abs diff and has no SNR or cosine: bundle
    verify compares the binary's new run with the accepted record on that figure."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    onnx.save(synth_models.rounding_residue(), tmp_path / "res.onnx")
    assert cli("compile", tmp_path / "res.onnx", "--soc", "SM8650", "-o", tmp_path / "build")[0] == 0
    code, summary = cli("validate", tmp_path / "build")
    assert code == 1 and summary["targets"][0]["outputs"][0]["judged_on"] == "max_abs_diff"
    refused = run("bundle", "build", "--from-build", tmp_path / "build", "--name", "res", "--version", "1",
                  "-o", tmp_path / "out")
    assert refused.exit_code == 2
    printed = refused.output.split("--accept ")[1].split(" ")[0]  # res@SM8650="REASON"
    built = run("bundle", "build", "--from-build", tmp_path / "build", "--name", "res", "--version", "1",
                "-o", tmp_path / "out", "--accept", printed.replace('"REASON"', "rounding noise the app never reads"))
    assert built.exit_code == 0, built.output
    verified = run("bundle", "verify", tmp_path / "out" / "res-1")
    assert verified.exit_code == 0 and "no max abs diff" not in verified.output, verified.output


def test_a_binary_worse_than_its_accepted_record_is_told_on_the_figure_it_was_judged_on() -> None:
    recorded = [{"name": "y", "passed": False, "judged_on": "max_abs_diff", "max_abs_diff": 0.24, "snr_db": None,
                 "cosine": None}]
    assert emulated._worse([{**recorded[0], "max_abs_diff": 0.24}], recorded) is None
    said = emulated._worse([{**recorded[0], "max_abs_diff": 3.0}], recorded)
    assert said is not None and "max abs diff 3" in said
    topk = [{"name": "i", "passed": False, "judged_on": "topk_set", "topk_jaccard": 0.8}]
    assert emulated._worse([{**topk[0], "topk_jaccard": 0.5}], topk) is not None
    assert emulated._worse([{**topk[0], "topk_jaccard": 0.8}], topk) is None
    snr = [{"name": "y", "passed": False, "judged_on": "cosine+snr", "snr_db": 25.0, "cosine": 0.99}]
    assert emulated._worse([{**snr[0], "snr_db": 24.0}], snr) is None
    assert emulated._worse([{**snr[0], "snr_db": 20.0}], snr) is not None
    # swift_f0's split: a chain output accepted at NaN (no figure) is no worse when it fails the same way again
    nan = [{"name": "pitch", "passed": False, "judged_on": "cosine+snr", "snr_db": None, "cosine": None}]
    assert emulated._worse(nan, nan) is None
    assert emulated._worse([{**nan[0], "passed": False}], [{**nan[0], "passed": True}]) is not None


@pytest.mark.needs_qnn
def test_bundle_verify_runs_a_binary_on_its_records_sample_files_while_they_are_there(tmp_path: Path) -> None:
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    onnx.save(synth_models.masked_by_length(), tmp_path / "ctc.onnx")
    assert cli("compile", tmp_path / "ctc.onnx", "--soc", "SM8650", "-o", tmp_path / "build")[0] == 0
    (tmp_path / "real").mkdir()
    samples.write_samples(tmp_path / "real", [{"x": np.full((1, 16, 4), 0.5, np.float32),
                                               "x_lens": np.array([n], np.int32)} for n in (3, 16)])
    assert cli("validate", tmp_path / "build", "--inputs", tmp_path / "real")[0] == 0
    assert run("bundle", "build", "--from-build", tmp_path / "build", "--name", "ctc", "--version", "1",
               "-o", tmp_path / "out").exit_code == 0
    verified = run("bundle", "verify", tmp_path / "out" / "ctc-1")
    assert verified.exit_code == 0 and "1 on the sample files of its validation record" in verified.output
    (tmp_path / "real" / "00001.npz").unlink()  # no longer the files the record lists: one random input instead
    verified = run("bundle", "verify", tmp_path / "out" / "ctc-1")
    assert verified.exit_code == 0 and "sample files" not in verified.output, verified.output

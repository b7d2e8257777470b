"""w8a16 advice that holds the path: plain check says which ops a w8a16 compile refuses (the refusals measured here,
data/htp_refusals.json), check --precision w8a16 names the node QNN refused and its rewrite, and every `next:`
line, followed as printed, builds w8a16 into the w8a16 folder (real compiles)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import onnx
import pytest

from qnndeploy import check
from qnndeploy.qnn import refusals
from tests.support import masked_attention
from tests.support import synth_models as sm
from tests.support.cli import run

pytestmark = pytest.mark.needs_qnn


@pytest.fixture(scope="module")
def attention(tmp_path_factory):
    return masked_attention.export(tmp_path_factory.mktemp("attention") / "attn.onnx")


def next_lines(output: str) -> list[str]:
    last = output.splitlines()[-1]
    assert last.startswith("next: "), output
    return last.removeprefix("next: ").split(", then ")


def test_every_refusal_in_the_table_is_found_in_graphs_and_says_where_it_was_measured():
    for fact in refusals.facts():
        assert fact.id in refusals.DETECTORS
        assert re.fullmatch(r"measured here with onnxruntime-qnn [\d.]+ \(QAIRT [\d.]+\) on \d{4}-\d\d-\d\d",
                            fact.measured), fact


def test_a_plain_check_says_a_w8a16_compile_refuses_the_minus_inf_where(attention):
    report = check.check_model(attention, soc="SM8750")
    assert report.verdict == "ready"  # fp16 takes it
    (note,) = [f for f in report.findings if f.code == "w8a16"]
    (fact,) = [f for f in refusals.facts() if f.id == "where-inf-fill"]
    assert note.severity == "info"
    assert "1 Where node(s) (/Where → QNN ElementWiseSelect, error 6007)" in note.message
    assert fact.measured in note.message
    assert note.fix == "before a w8a16 build: prepare --rewrite where-mask (then check --precision w8a16)"


def test_a_w8a16_check_names_the_node_qnn_refused_and_the_rewrite(attention):
    report = check.check_model(attention, soc="SM8750", precision="w8a16")
    (refused,) = [f for f in report.findings if f.code == "htp"]
    assert refused.severity == "fixable" and report.verdict == "fixable"  # it was "not ready", re-export
    assert refused.message.startswith("node /Where (ONNX Where → QNN ElementWiseSelect) refused, error 6007: ")
    npu = attention.with_name("attn.npu.onnx")
    assert refused.fix.endswith(f"qnndeploy prepare {attention} --rewrite where-mask -o {npu}, then qnndeploy check "
                                f"{npu} --soc SM8750 --precision w8a16")
    assert "re-export avoiding the ops the message names" not in refused.fix  # what it said, naming nothing


@pytest.mark.parametrize("which", ["gelu", "masked-attention"])
def test_every_next_line_followed_as_printed_builds_w8a16_into_the_w8a16_folder(tmp_path, monkeypatch, which):
    """check --precision w8a16 --calib → prepare --fuse or --rewrite where-mask (whose own next: is the w8a16 check)
    → check → compile: each line as printed. Before, prepare's next: dropped --precision and check's compile line
    --calib, and the build went to the fp16 build folder."""
    monkeypatch.chdir(tmp_path)
    if which == "gelu":
        onnx.save(sm.gelu_erf(), "m.onnx")
        masked_attention.calibration(Path("calib"), shape=(1, 8, 16))
    else:
        masked_attention.export(Path("m.onnx"))
        masked_attention.calibration(Path("calib"))
    first = run("check", "m.onnx", "--soc", "SM8750", "--precision", "w8a16", "--calib", "calib")
    assert first.exit_code == 10, first.output
    prepare, check_again = next_lines(first.output)
    assert prepare.endswith("--fuse" if which == "gelu" else "--rewrite where-mask")
    assert check_again == "qnndeploy check m.npu.onnx --soc SM8750 --precision w8a16 --calib calib"
    prepared = run(*shlex.split(prepare)[1:])
    assert prepared.exit_code == 0, prepared.output
    assert next_lines(prepared.output) == ["qnndeploy check m.npu.onnx --precision w8a16"]

    ready = run(*shlex.split(check_again)[1:])
    assert ready.exit_code == 0, ready.output
    (compile_line,) = next_lines(ready.output)
    built = run(*shlex.split(compile_line)[1:])
    assert built.exit_code == 0, built.output
    record = json.loads(Path("build-w8a16/m/SM8750/compile.json").read_text())
    assert record["precision"] == "w8a16" and Path(record["options"]["calibration"]["path"]).name == "calib"

    # prepare's own next: the w8a16 check, whose compile line keeps the precision and asks for the samples (DIR)
    again = run(*shlex.split(next_lines(prepared.output)[0])[1:])
    assert again.exit_code == 0, again.output
    assert next_lines(again.output) == [
        "qnndeploy compile m.npu.onnx --soc SM8750 -o build-w8a16 --precision w8a16 --calib DIR"]
    assert "DIR below: a folder of real input samples" in again.output
    assert not Path("build").exists()


def test_calib_is_for_w8a16(tmp_path):
    onnx.save(sm.gelu_erf(), tmp_path / "m.onnx")
    result = run("check", tmp_path / "m.onnx", "--calib", tmp_path)
    assert result.exit_code == 2 and "--calib is for --precision w8a16" in result.output


def test_a_graph_too_big_for_one_context_is_fused_before_it_is_split(tmp_path, monkeypatch):
    """Too big to measure whole, a graph's refusals measured here are read off it: check --precision w8a16 asks for
    prepare --fuse first, then (on the fused model) for the split, whose parts are cut from the fused graph. Before,
    it asked for the split alone, and each part's check then asked for a --fuse its split record does not know."""
    monkeypatch.chdir(tmp_path)
    onnx.save(sm.gelu_erf(width=512), "m.onnx")  # 64 KB of fp32 weights
    first = run("check", "m.onnx", "--soc", "SM8750", "--precision", "w8a16", "--context-gb", "0.00001")
    assert first.exit_code == 10, first.output
    assert "a w8a16 compile refuses 1 Erf node(s) (gelu_erf): the Erf of an unfused GELU" in first.output
    prepare = next_lines(first.output)[0]
    assert prepare == "qnndeploy prepare m.onnx -o m.npu.onnx --fuse"
    assert run(*shlex.split(prepare)[1:]).exit_code == 0
    again = run("check", "m.npu.onnx", "--soc", "SM8750", "--precision", "w8a16", "--context-gb", "0.00001")
    assert again.exit_code == 10 and "Erf" not in again.output, again.output
    assert "--split-size" in next_lines(again.output)[0]


def test_a_graph_too_big_to_quantize_here_gets_the_refusals_read_off_it(tmp_path, monkeypatch):
    """The w8a16 measure quantizes the whole model in memory (Whisper large-v3's 3.0 GB encoder was killed at 23.6
    GB): above check.QUANTIZED_MEASURE_MAX it is not measured, and the refusals measured here are read off it."""
    onnx.save(sm.gelu_erf(width=512), tmp_path / "m.onnx")  # 64 KB of fp32 weights, over a bound of 32 KB
    monkeypatch.setattr(check, "QUANTIZED_MEASURE_MAX", 32 << 10)
    report = check.check_model(tmp_path / "m.onnx", soc="SM8750", precision="w8a16")
    assert not report.htp.measured and "GB of fp32 weights, over the" in report.htp.reason
    (refused,) = [f for f in report.findings if f.code == "htp"]
    assert refused.severity == "fixable" and refused.message.startswith("a w8a16 compile refuses 1 Erf node(s)")
    assert report.prepare_command == f"qnndeploy prepare {tmp_path / 'm.onnx'} -o {tmp_path / 'm.npu.onnx'} --fuse"

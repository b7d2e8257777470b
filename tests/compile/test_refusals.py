"""A w8a16 compile that QNN refuses while composing the graph names the node, its ONNX and QNN ops and the error
code from the real compile log, and gives the prepare rewrite when the refusal is one measured here
(data/htp_refusals.json): torch's masked_fill(mask, -inf) compiled by the real onnxruntime-qnn."""

from __future__ import annotations

import json
import re
import shlex
import shutil

import pytest

from qnndeploy.qnn import refusals
from tests.support import masked_attention
from tests.support.cli import run

pytestmark = pytest.mark.needs_qnn


@pytest.fixture(scope="module")
def attention(tmp_path_factory):
    folder = tmp_path_factory.mktemp("attention")
    return masked_attention.export(folder / "attn.onnx"), masked_attention.calibration(folder / "calib")


def test_a_refused_w8a16_compile_names_the_node_its_ops_the_error_and_the_rewrite(tmp_path, attention):
    model, calib = attention
    result = run("compile", model, "--soc", "SM8750", "--precision", "w8a16", "--calib", calib, "-o",
                 tmp_path / "build", "--no-cache")
    assert result.exit_code == 1, result.output
    record = json.loads((tmp_path / "build" / "attn" / "SM8750" / "compile.json").read_text())
    error = record["error"]
    # what the compiler logged, in the one-line error and the record; it said "Failed to compose Qnn graph." alone
    assert error.startswith("node /Where (ONNX Where → QNN ElementWiseSelect) refused, error 6007: a Where whose "
                            "fill is -inf"), error
    assert error in " ".join(result.output.split())
    log = (tmp_path / "build" / record["log"]).read_text()
    assert refusals.parse(log) == [refusals.Refused("/Where", "ElementWiseSelect", 6007)]
    (fact,) = [f for f in refusals.facts() if f.id == "where-inf-fill"]
    assert (fact.qnn_op, fact.code) == ("ElementWiseSelect", 6007)  # the table says what the compiler does here
    prepare, check = re.search(r"rewrite it as an additive mask: (qnndeploy prepare .*), then (qnndeploy check .*)",
                               error).groups()
    npu = model.with_name("attn.npu.onnx")
    assert shlex.split(prepare) == ["qnndeploy", "prepare", str(model), "--rewrite", "where-mask", "-o", str(npu)]
    assert shlex.split(check) == ["qnndeploy", "check", str(npu), "--soc", "SM8750", "--precision", "w8a16"]


def test_the_same_graph_compiles_at_fp16(tmp_path, attention):
    """The refusal is the w8a16 one: fp16 takes the -inf fill (the table says so)."""
    model, _ = attention
    assert run("compile", model, "--soc", "SM8750", "-o", tmp_path / "build", "--no-cache").exit_code == 0


def test_the_printed_rewrite_followed_as_printed_compiles_at_w8a16(tmp_path, attention):
    model, calib = attention
    if "--rewrite" not in run("prepare", "--help").output:
        pytest.skip("prepare --rewrite where-mask is not built yet")
    result = run("compile", model, "--soc", "SM8750", "--precision", "w8a16", "--calib", calib, "-o",
                 tmp_path / "build", "--no-cache")
    prepare, check = re.search(r"(qnndeploy prepare .*), then (qnndeploy check \S+ --soc \S+ --precision w8a16)",
                               " ".join(result.output.split())).groups()
    assert run(*shlex.split(prepare)[1:]).exit_code == 0
    ready = run(*shlex.split(check)[1:])
    assert ready.exit_code == 0, ready.output
    npu = model.with_name("attn.npu.onnx")
    built = run("compile", npu, "--soc", "SM8750", "--precision", "w8a16", "--calib", calib, "-o",
                tmp_path / "rewritten", "--no-cache")
    assert built.exit_code == 0, built.output


def test_w4a16_refuses_the_same_where_and_its_rewrite_builds_w4a16(tmp_path, attention):
    """The refusal holds at w4a16 too (measured: the table's `also`): the error gives the rewrite and the w4a16
    check; the rewritten graph compiles at w4a16."""
    given, calib = attention
    model = tmp_path / given.name  # a copy of its own: the w8a16 test writes its rewrite beside the fixture's
    shutil.copyfile(given, model)
    (fact,) = [f for f in refusals.facts() if f.id == "where-inf-fill"]
    assert fact.at("w4a16") and fact.at("w4a16") != fact.measured and fact.at("fp16") is None
    result = run("compile", model, "--soc", "SM8750", "--precision", "w4a16", "--calib", calib, "-o",
                 tmp_path / "build", "--no-cache")
    assert result.exit_code == 1, result.output
    error = json.loads((tmp_path / "build" / "attn" / "SM8750" / "compile.json").read_text())["error"]
    assert error.startswith("node /Where (ONNX Where → QNN ElementWiseSelect) refused, error 6007: a Where whose "
                            "fill is -inf") and f"({fact.at('w4a16')})" in error, error
    prepare, check = re.search(r"rewrite it as an additive mask: (qnndeploy prepare .*), then (qnndeploy check .*)",
                               error).groups()
    assert shlex.split(check)[-2:] == ["--precision", "w4a16"]
    assert run(*shlex.split(prepare)[1:]).exit_code == 0
    npu = model.with_name("attn.npu.onnx")
    result = run("compile", npu, "--soc", "SM8750", "--precision", "w4a16", "--calib", calib, "-o",
                 tmp_path / "fixed", "--no-cache")
    assert result.exit_code == 0, result.output

"""`qnndeploy check`: one synthetic graph per finding, op support measured on the real QNN HTP backend
(onnxruntime-qnn), the PP-OCR models' dynamic dims, and bad input. The prepared PP-OCR models are checked in
test_prepare.py, where they are made."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnndeploy import check
from qnndeploy.base import socs as catalog
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.qnn import htp
from tests.support import synth_models as sm
from tests.support.cli import run
from tests.support.host import require
from tests.support.ppocr import model_path


def save(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, path)
    return path


def codes(report, severity=None):
    return {f.code for f in report.findings if severity is None or f.severity == severity}


@pytest.fixture
def qnn():
    require(htp.available(), "onnxruntime-qnn (the QNN HTP backend)")


def test_static_float_model_is_ready_and_fully_on_the_htp(tmp_path, qnn):
    report = check.check_model(save(tmp_path, sm.static_mlp()))
    assert report.verdict == "ready" and report.exit_code == 0
    assert report.findings == []
    assert report.htp.measured and report.htp.soc == "SM8750" and report.htp.qairt == htp.qairt_version()
    assert report.htp.qnn_partitions == 1 and report.htp.cpu_partitions == 0 and report.htp.cpu_nodes == []
    assert report.parameters == 16 * 8 + 8


def test_dynamic_batch_is_fixable_and_measurement_waits_for_prepare(tmp_path):
    path = save(tmp_path, sm.static_mlp("N"))
    report = check.check_model(path)
    assert report.verdict == "fixable" and report.exit_code == 10
    assert report.inputs[0].dynamic and report.inputs[0].shape == ["N", 16]
    assert "dynamic-dims" in codes(report, "fixable")
    assert not report.htp.measured and "prepare" in report.htp.reason
    assert report.prepare_command == f"qnndeploy prepare {path} -o {tmp_path / 'm.npu.onnx'} --shape x=1,16"


def test_static_batch_above_one_is_a_warning_only(tmp_path, qnn):
    """The advice is what the user can do: prepare cannot change a dim the model fixes, so it says re-export (it
    printed `prepare --shape x=1,16`, which prepare refuses)."""
    report = check.check_model(save(tmp_path, sm.static_mlp(4)))
    assert codes(report) == {"batch"} and report.verdict == "ready" and report.prepare_command is None
    (finding,) = report.findings
    assert "static batch of 4" in finding.message
    assert finding.fix.startswith("if the app feeds one at a time, re-export")
    assert "prepare cannot change a dim the model fixes" in finding.fix


def test_float64_at_the_end_gets_the_split_that_leaves_the_rest_on_the_npu(tmp_path, qnn):
    """A float64 decoding after the network (SwiftF0's pitch) is not a re-export: check prints the split that runs it
    on the CPU, cut before the int64 argmax that feeds it (an int64 tensor at the cut would be an NPU int64 output),
    and the NPU part it leaves checks ready."""
    model = save(tmp_path, sm.float64_tail())
    report = check.check_model(model)
    (finding,) = [f for f in report.findings if f.code == "float64"]
    assert finding.severity == "fixable" and report.verdict == "fixable"
    assert finding.prepare is not None and finding.prepare.split_at == ["act"] and finding.prepare.cpu == "tail"
    assert report.prepare_command is not None and "-o" in report.prepare_command
    out = tmp_path / "m-parts" / "m.onnx"  # its parts m-head and m-tail: the graph names the app gets
    assert f"-o {out} --split-at act --cpu-part tail" in report.prepare_command
    done = run("prepare", str(model), "-o", str(out), "--split-at", "act", "--cpu-part", "tail")
    assert done.exit_code == 0, done.output
    head = check.check_model(tmp_path / "m-parts" / "m-head.onnx")
    assert head.verdict == "ready" and head.htp.measured and not head.htp.cpu_nodes


def test_int64_inputs_and_outputs_ask_for_int32_wrappers(tmp_path, qnn):
    report = check.check_model(save(tmp_path, sm.int64_io()))
    (finding,) = [f for f in report.findings if f.code == "int64"]
    assert finding.severity == "fixable" and "ids" in finding.message and "best" in finding.message
    assert report.verdict == "fixable" and report.prepare_command.endswith("--int32-inputs")


def test_if_driven_by_a_setting_input_is_fixed_by_freezing_it(tmp_path, qnn):
    report = check.check_model(save(tmp_path, sm.if_on_scalar_input()))
    (finding,) = [f for f in report.findings if f.code == "control-flow"]
    assert finding.severity == "fixable" and "sample_rate" in finding.message
    assert report.prepare_command.endswith("--freeze sample_rate=VALUE")  # frozen: no int32 wrapper needed
    assert report.placeholders == ["VALUE"]
    assert "int64" not in codes(report)


def test_if_driven_by_the_data_is_not_ready_unless_the_htp_takes_it(tmp_path, qnn):
    path = save(tmp_path, sm.if_on_data())
    report = check.check_model(path, measure=False)
    assert "control-flow" in codes(report, "blocker")
    assert report.verdict == "not ready" and report.exit_code == 11 and report.prepare_command is None
    measured = check.check_model(path)  # this QNN EP takes a simple If whole: the measurement outranks the reading
    assert measured.htp.cpu_nodes == [] and measured.verdict == "ready"
    (finding,) = [f for f in measured.findings if f.code == "control-flow"]
    assert finding.severity == "info" and "runs on the HTP as measured" in finding.message


def test_a_data_driven_if_the_qnn_partitioner_fails_on_is_one_blocker_not_two(tmp_path, qnn):
    """ONNX Runtime's partitioning for the QNN EP fails on an If whose branch reads the outer graph ("INVALID_GRAPH ...
    topologically sorted"): the If's control-flow finding is the blocker, the failed measurement one info line
    saying what it means, without ONNX Runtime's raw message."""
    r = run("check", str(save(tmp_path, sm.if_reading_outer())))
    assert r.exit_code == 11
    assert r.output.count("[blocker]") == 1 and "[blocker] If node branch depends on the values of x" in r.output
    assert "INVALID_GRAPH" not in r.output.split("findings:")[1]
    assert ("[info] op support on the HTP not measured: ONNX Runtime cannot partition the graph for the QNN EP "
            "around If node branch") in r.output


def test_a_cpu_op_at_the_head_gets_the_split_that_keeps_the_rest_on_the_npu(tmp_path, qnn):
    """A Clip whose floor is computed (max - 80 dB) runs on the CPU; it sits at the graph's head, so check prints the
    split that runs the head on the CPU, and the NPU part of that split checks ready with every node on the HTP."""
    r = run("check", str(save(tmp_path, sm.computed_floor())))
    assert r.exit_code == 10, r.output
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("  fix all: ")]
    command = shlex.split(line.removeprefix("  fix all: "))
    assert command[command.index("--split-at"):] == ["--split-at", "clipped", "--cpu-part", "head"]
    assert "the head (3 nodes) runs on the CPU, the other 6 on the NPU" in r.output
    split = run(*command[1:], "--json")
    assert split.exit_code == 0, split.output
    (npu,) = [p["path"] for p in json.loads(split.stdout)["parts"] if p["runs_on"] == "npu"]
    checked = run("check", npu)
    assert checked.exit_code == 0 and "all 6 nodes on the HTP" in checked.output, checked.output


def test_qdq_quantization_in_the_onnx_is_not_ready(tmp_path, qnn):
    report = check.check_model(save(tmp_path, sm.qdq()))
    (finding,) = [f for f in report.findings if f.code == "quantized"]
    assert "DequantizeLinear ×2" in finding.message and "QuantizeLinear ×1" in finding.message
    assert "quantize in QNN" in finding.fix and report.verdict == "not ready"


def test_float64_is_flagged_and_measured_on_the_cpu(tmp_path, qnn):
    report = check.check_model(save(tmp_path, sm.float64()))
    assert "float64" in codes(report, "blocker")
    assert [(n.name, n.op_type) for n in report.htp.cpu_nodes] == [("mm", "MatMul")]


def test_measured_cpu_nodes_are_listed_with_their_partitions(tmp_path, qnn):
    report = check.check_model(save(tmp_path, sm.unsupported_op()))
    assert [(n.name, n.op_type) for n in report.htp.cpu_nodes] == [("determinant", "Det")]
    assert report.htp.qnn_partitions == 1 and report.htp.cpu_partitions == 1 and report.htp.total_nodes == 3
    assert codes(report) == {"htp", "htp-rule"} and report.verdict == "not ready"
    rule = next(f for f in report.findings if f.code == "htp-rule")  # the rule Det breaks, with its source
    assert rule.message.startswith("Det ×1: onnxruntime's QNN EP has no op builder for it")
    assert "op_builder_factory.cc" in rule.fix


def test_a_model_the_htp_takes_nothing_of_is_all_cpu(tmp_path, qnn):
    report = check.check_model(save(tmp_path, sm.only_unsupported()))
    assert report.htp.measured and report.htp.qnn_partitions == 0 and report.htp.cpu_partitions == 1
    assert [n.op_type for n in report.htp.cpu_nodes] == ["Det"]


def test_sm8350_at_fp16_is_refused_up_front_not_blamed_on_the_model(tmp_path, qnn):
    path = save(tmp_path, sm.static_mlp())
    report = check.check_model(path, soc="SM8350")
    (finding,) = [f for f in report.findings if f.code == "soc"]
    assert finding.severity == "blocker" and "SM8350 (v68) has no fp16 on its HTP" in finding.message
    assert not report.htp.measured and "re-export" not in finding.fix and "CPU fallback" in finding.fix
    # w8a16 compiles for soc_model 30 (measured): the way to its NPU is offered
    assert "check --precision w8a16" in finding.fix
    assert "soc" not in codes(check.check_model(path, soc="SM8350", precision="w8a16"))
    assert "soc" not in codes(check.check_model(path, soc="SM8650"))


def test_a_binary_arch_the_measurement_contradicts_is_flagged_before_compiling(tmp_path, qnn, monkeypatch):
    """No SoC has one with the releases measured so far (SM8475's metadata says v69, like the catalog): a measured
    row saying another arch is flagged as a warning."""
    real = catalog.measured
    monkeypatch.setattr(catalog, "measured", lambda soc, qairt: catalog.Measured(qairt, 42, 68, 68, ())
                        if soc.model == "SM8475" else real(soc, qairt))
    report = check.check_model(save(tmp_path, sm.static_mlp()), soc="SM8475")
    (finding,) = [f for f in report.findings if f.code == "soc"]
    assert finding.severity == "warning" and "writes arch 68 into SM8475 context binaries" in finding.message
    assert report.verdict == "ready"
    monkeypatch.undo()
    assert "soc" not in codes(check.check_model(save(tmp_path, sm.static_mlp()), soc="SM8475"))


def test_weights_over_one_part_are_told_to_split_or_go_8_bit_where_8_bit_fits(tmp_path):
    """The budget is the SoC arch's (data/load_budget.json: 882 MB on SM8750's v79), counted as the compiler stores
    the weights: an embedding table stays 16-bit in a w8a16 build (the quantizer treats a Gather's table as data),
    so 8-bit is no way out for it; a MatMul's weight of the same size is 8-bit there and fits one part."""
    path = sm.large_embedding(tmp_path / "big.onnx")  # 4.5 GB of sparse external data, never read
    report = check.check_model(path)
    (finding,) = [f for f in report.findings if f.code == "size"]
    assert report.parameters == 1_100_000 * 1024 and report.weight_mb_fp16 > 2000
    assert finding.severity == "fixable" and "w8a16" not in finding.fix
    assert ("2,252.8 MB stored at fp16: over the 882.0 MB one HTP context is planned to hold on SM8750 (v79, derived"
            in finding.message)
    # the budget in the model's own bytes (fp32: twice the fp16 it becomes), cut to three digits: 1.764 GB -> 1.76
    assert ("split it into 3 or more NPU graphs of at most 1.76 GB of weights each as the model stores them "
            "(882.0 MB at fp16) (prepare --split-size 1.76)") in finding.fix
    assert [(s.precision, s.bytes, s.parts) for s in report.load.stored] == [
        ("fp16", 2_252_800_000, 3), ("w8a16", 2_252_800_000, 3), ("w4a16", 2_252_800_000, 3)]
    assert "size" in codes(check.check_model(path, precision="w8a16", measure=False))

    weight = sm.large_embedding(tmp_path / "proj.onnx", rows=700_000, matmul=True)  # 1.43 GB at fp16, 0.72 at 8-bit
    report = check.check_model(weight, measure=False)
    (finding,) = [f for f in report.findings if f.code == "size"]
    assert finding.fix.endswith("or 1 part at w8a16 (check --precision w8a16), or 1 part at w4a16 (check --precision "
                                "w4a16)")
    assert "size" not in codes(check.check_model(weight, precision="w8a16", measure=False))


def test_check_reads_ppocr_models_and_flags_their_dynamic_dims():
    for name in ("det", "rec", "cls"):
        report = check.check_model(model_path(name))
        assert report.inputs[0].dynamic and report.outputs[0].dynamic, name
        assert report.verdict == "fixable" and "dynamic-dims" in codes(report), name
        assert "--shape x=1,3,D1,D2" in report.prepare_command and report.placeholders == ["D1", "D2"], name
        assert not report.htp.measured


# --- the command line -----------------------------------------------------------------------------

def test_cli_text_report_gives_the_fix_and_exit_code(tmp_path):
    path = save(tmp_path, sm.static_mlp("N"))
    result = run("check", str(path))
    assert result.exit_code == 10, result.output
    assert "FIXABLE" in result.output and "[N, 16]" in result.output
    assert f"fix all: qnndeploy prepare {path}" in result.output


def test_cli_json_and_worst_verdict_over_several_models(tmp_path, qnn):
    ready, not_ready = save(tmp_path, sm.static_mlp(), "a.onnx"), save(tmp_path, sm.unsupported_op(), "b.onnx")
    result = run("check", str(ready), str(not_ready), "--json")
    assert result.exit_code == 11
    data = json.loads(result.stdout)
    assert data["verdict"] == "not ready" and [m["verdict"] for m in data["models"]] == ["ready", "not ready"]
    assert data["models"][1]["htp"]["cpu_nodes"] == [{"name": "determinant", "op_type": "Det"}]


def test_json_stdout_stays_clean_of_the_qnn_banner(tmp_path, qnn):
    """The QNN libraries print a banner on stdout from C; a script reading --json must still parse it."""
    path = save(tmp_path, sm.static_mlp())
    proc = subprocess.run([sys.executable, "-m", "qnndeploy", "check", str(path), "--json"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["models"][0]["htp"]["measured"] is True


@pytest.mark.parametrize("content, message", [
    (b"hello, not a model\n", "is not an ONNX model"),
    (b"", "is not an ONNX model"),
])
def test_non_onnx_files_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    result = run("check", str(path))
    assert result.exit_code == 2 and result.output.startswith("error: ") and message in result.output
    assert result.output.count("\n") == 1


def test_truncated_model_is_a_one_line_error(tmp_path):
    data = model_path("cls").read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(QnnDeployError, match="not an ONNX model or is truncated"):
        check.check_model(path)


def test_missing_external_data_and_missing_file(tmp_path):
    path = sm.save_with_external_data(sm.static_mlp(), tmp_path / "ext.onnx")
    (tmp_path / "ext.onnx.weights").unlink()
    with pytest.raises(QnnDeployError, match=re.escape("ext.onnx.weights, which is missing")):
        check.check_model(path)
    result = run("check", str(tmp_path / "nope.onnx"))
    assert result.exit_code == 2 and "no such file" in result.output


def test_unknown_soc_is_bad_input(tmp_path):
    result = run("check", str(save(tmp_path, sm.static_mlp())), "--soc", "SM9999")
    assert result.exit_code == 2 and "unknown SoC" in result.output


def test_without_onnxruntime_qnn_the_graph_is_still_checked(tmp_path, monkeypatch):
    """macOS or Windows users have no host HTP: check says so instead of failing."""
    monkeypatch.setattr(htp, "available", lambda: False)
    report = check.check_model(save(tmp_path, sm.static_mlp()))
    assert not report.htp.measured and "not installed" in report.htp.reason
    assert codes(report, "warning") == {"htp"} and report.verdict == "ready"


# --- the HTP measurement: a budget, and a stop that stops it -----------------------------------------------------

def test_recurrent_steps_count_what_the_htp_compiler_unrolls():
    layers, steps = htp.recurrent_steps(sm.long_lstm(steps=50))
    assert (layers, steps) == (2, 2 * 2 * 50)  # two layers, both directions, 50 steps each
    assert htp.recurrent_steps(sm.rnn_state(static=True)) == (1, 5)  # a GRU over 5 steps, one direction
    assert htp.recurrent_steps(sm.static_mlp()) == (0, 0)


def _measuring_children(model: str) -> list[int]:
    """Pids of running `python -m qnndeploy.qnn.htp` children partitioning `model`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"qnndeploy.qnn.htp" in argv and model.encode() in argv:
            found.append(int(proc.name))
    return found


def test_the_measurement_ends_at_its_timeout_and_says_so(tmp_path, qnn):
    """A recurrent model whose partitioning takes minutes: --timeout ends it (no compile left running), the report
    says op support was not measured and why, and stderr said beforehand what to expect."""
    model = save(tmp_path, sm.long_lstm())
    done = subprocess.run(["qnndeploy", "check", str(model), "--timeout", "1", "--json"], capture_output=True,
                          text=True, timeout=120, check=False, env={**os.environ, "TMPDIR": str(tmp_path)})
    report = json.loads(done.stdout)["models"][0]
    assert done.returncode == 0 and report["verdict"] == "ready", done.stderr  # nothing found that blocks it
    assert not report["htp"]["measured"] and report["htp"]["timed_out"]
    assert report["htp"]["reason"] == "the HTP compiler did not finish within 1 s"
    (finding,) = report["findings"]
    assert finding["severity"] == "warning" and "4,000 unrolled cell steps" in finding["message"]
    assert "--timeout" in finding["fix"]
    assert "unrolls 2 recurrent layer(s) into 4,000 cell steps: measuring op support may take" in done.stderr
    assert not _measuring_children(str(model)) and not list(tmp_path.glob("qnndeploy-check-*"))


def test_sigterm_stops_the_measurement_at_once(tmp_path, qnn):
    """CI cancels with SIGTERM: check stops while the HTP compiler runs (it would run for minutes), exit 130,
    with no compile left behind and no temporary folder."""
    model = save(tmp_path, sm.long_lstm())
    proc = subprocess.Popen(["qnndeploy", "check", str(model), "--timeout", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    while not _measuring_children(str(model)):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)  # the partitioning alone takes minutes
    assert proc.returncode == 130, err
    assert "interrupted; nothing was left half-written" in err
    assert not _measuring_children(str(model)) and not list(tmp_path.glob("qnndeploy-check-*"))


# --- what a reviewer broke it with -------------------------------------------------------------------

@pytest.mark.parametrize("kind, message", [("folder", "is a folder, not an ONNX model file"),
                                           ("fifo", "is a FIFO (named pipe), not an ONNX model file"),
                                           ("device", "is a character device, not an ONNX model file")])
def test_a_path_that_is_no_regular_file_says_what_it_is(tmp_path, kind, message):
    import os

    path = {"folder": tmp_path / "m.onnx", "fifo": tmp_path / "m.onnx", "device": "/dev/null"}[kind]
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # opening it would block: check must only stat it
    result = run("check", str(path))
    assert result.exit_code == 2 and result.output == f"error: {path} {message}: give the path of the .onnx file\n"


def test_truncated_external_data_is_named_before_any_measurement(tmp_path):
    path = sm.save_with_external_data(sm.static_mlp(), tmp_path / "ext.onnx")
    data = tmp_path / "ext.onnx.weights"
    data.write_bytes(data.read_bytes()[:64])
    with pytest.raises(QnnDeployError, match=r"the external data file .*ext.onnx.weights is truncated or damaged: "
                                             r"tensor W needs bytes 0-512, the file has 64"):
        check.check_model(path)


def test_a_soc_whose_htp_takes_nothing_is_blamed_not_the_model(tmp_path, qnn):
    """QAIRT lists SSG2115P but its HTP compiler refuses every node for it: the catalog says so up front (measured),
    and the probe that found it still agrees."""
    path = save(tmp_path, sm.static_mlp())
    assert htp.htp_takes_nothing(catalog.find("SSG2115P"))
    assert not htp.htp_takes_nothing(catalog.find("SM8750"))
    report = check.check_model(path, soc="SSG2115P")
    assert report.verdict == "not ready" and not report.htp.measured
    (finding,) = [f for f in report.findings if f.code == "soc"]
    assert f"QAIRT {htp.qairt_version()} compiles nothing for SSG2115P (soc_model 46) on the host" in finding.message
    assert "whatever the export" in finding.message


# --- hostile inputs (issue 11): each a one-line error or a finding, before any ONNX Runtime session -----------

def _relu(shape=(1, 4), elem=onnx.TensorProto.FLOAT):
    from onnx import helper as h

    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", elem, shape)],
                         [h.make_tensor_value_info("y", elem, shape)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _constant_of_shape(count):
    import numpy as np
    from onnx import helper as h
    from onnx import numpy_helper

    graph = h.make_graph(
        [h.make_node("ConstantOfShape", ["s"], ["c"], value=h.make_tensor("v", onnx.TensorProto.FLOAT, [1], [1.0])),
         h.make_node("Add", ["x", "c"], ["y"])], "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([count], np.int64), "s")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _epcontext():
    from onnx import helper as h

    graph = h.make_graph([h.make_node("EPContext", ["x"], ["y"], domain="com.microsoft", embed_mode=0,
                                      ep_cache_context="ZZZZ")], "g",
                         [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13), h.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def _elem72_initializer():
    model = _relu()
    model.graph.initializer.append(onnx.helper.make_tensor("w", onnx.TensorProto.FLOAT, [1], [1.0]))
    model.graph.initializer[0].data_type = 72
    return model


def _elem72_input():
    model = _relu()
    model.graph.input[0].type.tensor_type.elem_type = 72
    return model


HOSTILE = {  # name -> (file bytes, the file name, what the one-line error says)
    "non-UTF-8 op_type": (lambda: _relu().SerializeToString().replace(b"Relu", b"R\xffl\xfe"), "m.onnx",
                          "not UTF-8"),
    "elem_type 72 input": (lambda: _elem72_input().SerializeToString(), "m.onnx", "unknown element type 72"),
    "elem_type 72 initializer": (lambda: _elem72_initializer().SerializeToString(), "m.onnx",
                                 "unknown element type 72"),
    "5,000-char location": (lambda: sm.external_weights("a" * 5000).SerializeToString(), "m.onnx", "5000 characters"),
    "location ../x": (lambda: sm.external_weights("../x.bin").SerializeToString(), "m.onnx",
                      "outside the model's folder"),
    "absolute location": (lambda: sm.external_weights("/etc/hostname").SerializeToString(), "m.onnx",
                          "an absolute path"),
    "a .json file": (lambda: b'{"irVersion": "8"}\n', "m.json", "a JSON file is not read as a model"),
    "a .txtpb file": (lambda: b'ir_version: 8\ngraph { name: "g" }\n', "m.txtpb", "text protobuf"),
    "input dims 2^40": (lambda: _relu((1, 2**40)).SerializeToString(), "m.onnx", "over 2,147,483,648 elements"),
    "ConstantOfShape 2^62": (lambda: _constant_of_shape(2**62).SerializeToString(), "m.onnx",
                             "(ConstantOfShape) is given the constant shape [4611686018427387904]"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_models_are_one_line_errors_before_any_session(tmp_path, case):
    make, name, message = HOSTILE[case]
    path = tmp_path / name
    path.write_bytes(make())
    result = run("check", str(path))
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {path}") and message in result.output, result.output
    assert result.output.count("\n") == 1 and isinstance(result.exception, SystemExit)


def test_a_non_utf8_ep_cache_context_is_read_without_a_traceback(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(_epcontext().SerializeToString().replace(b"ZZZZ", b"\xff\xfe\xfd\xfc"))
    result = run("check", "--no-measure", str(path))
    assert result.exit_code in (0, 10, 11), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_huge_constant_built_from_constants_is_a_blocker_and_not_measured(tmp_path):
    path = save(tmp_path, _constant_of_shape(2**30))  # 4 GiB of float32 from a 128-byte file
    report = check.check_model(path)
    assert not report.htp.measured and "4,096 MiB" in report.htp.reason
    assert report.verdict == "not ready" and "size" in codes(report, "blocker")


def test_a_graph_over_the_measurement_limit_is_read_not_measured(tmp_path, monkeypatch):
    from onnx import helper as h

    n = 60
    nodes = [h.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}") for i in range(n)]
    graph = h.make_graph(nodes, "chain", [h.make_tensor_value_info("t0", onnx.TensorProto.FLOAT, [1, 4])],
                         [h.make_tensor_value_info(f"t{n}", onnx.TensorProto.FLOAT, [1, 4])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    monkeypatch.setattr(htp, "MAX_MEASURED_NODES", 50)
    report = check.check_model(save(tmp_path, model))
    assert not report.htp.measured and "60 nodes, over the 50" in report.htp.reason
    assert report.verdict == "ready" and "size" in codes(report, "warning")


def test_control_flow_drivers_stay_linear_on_a_long_chain_of_ifs():
    from qnndeploy.check import rules

    # value_drivers with one memo over every If: a chain of 50,000 producers is walked once, not once per If.
    producers = {f"t{i + 1}": onnx.helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(50_000)}
    memo: dict[str, frozenset[str]] = {}
    assert all(rules.value_drivers(f"t{i}", producers, {"t0"}, memo) == {"t0"} for i in range(0, 50_001, 10))
    assert len(memo) == 50_001


@pytest.mark.needs_qnn
def test_an_unfused_gelu_among_other_cpu_nodes_is_fused_first_and_the_rest_judged_on_the_fused_model(tmp_path):
    """At w8a16 the Erf of an unfused GELU has no HTP form; beside it a Det (no HTP kernel) at the graph's tail.
    check offered re-export (exit 11) for both; now --fuse first (exit 10), the Det judged again after it, and the
    printed next step keeps the SoC and the precision."""
    model = sm.gelu_erf()
    model.graph.node.extend([helper.make_node("Reshape", ["g", "square"], ["g2"], name="square"),
                             helper.make_node("Det", ["g2"], ["det"], name="determinant")])
    model.graph.initializer.append(numpy_helper.from_array(np.array([8, 4, 4], np.int64), "square"))
    model.graph.output.append(helper.make_tensor_value_info("det", TensorProto.FLOAT, [8]))
    onnx.save(model, tmp_path / "m.onnx")
    require(htp.available(), "onnxruntime-qnn")
    result = run("check", tmp_path / "m.onnx", "--soc", "SM8750", "--precision", "w8a16")
    assert result.exit_code == 10, result.output
    assert "the other 1 CPU node(s) (Det ×1) are judged on the fused model" in result.output
    prepare, check_again = result.output.splitlines()[-1].removeprefix("next: ").split(", then ")
    assert prepare.endswith("--fuse") and check_again.endswith("--soc SM8750 --precision w8a16")
    assert run(*shlex.split(prepare)[1:]).exit_code == 0
    again = run(*shlex.split(check_again)[1:], "--json")
    report = json.loads(again.stdout)["models"][0]
    assert [n["op_type"] for n in report["htp"]["cpu_nodes"]] == ["Det"]  # the GELU now runs on the HTP


@pytest.mark.needs_qnn
def test_a_setting_input_that_sizes_a_resize_is_frozen_first(tmp_path):
    """A matting model's downsample_ratio sets its Resize's scales: check offers --freeze for it (random values make
    sizes the model never has) and judges the CPU nodes it causes after the freeze; frozen, all run on the HTP."""
    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("Concat", ["ones", "downsample_ratio", "downsample_ratio"], ["scales"], axis=0),
         helper.make_node("Resize", ["src", "", "scales"], ["small"], mode="linear", name="downsample"),
         helper.make_node("Conv", ["small", "W"], ["y"], pads=[1, 1, 1, 1])], "matting",
        [helper.make_tensor_value_info("src", TensorProto.FLOAT, [1, 3, 64, 64]),
         helper.make_tensor_value_info("downsample_ratio", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones(2, np.float32), "ones"), weights])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "matting.onnx")
    require(htp.available(), "onnxruntime-qnn")
    report = check.check_model(tmp_path / "matting.onnx", soc="SM8750")
    setting = next(f for f in report.findings if f.code == "setting-input")
    assert setting.severity == "fixable" and "downsample_ratio sets the output size of Resize downsample" in \
        setting.message
    assert report.verdict == "fixable" and "--freeze downsample_ratio=VALUE" in (report.prepare_command or "")
    assert run("prepare", tmp_path / "matting.onnx", "-o", tmp_path / "m.npu.onnx",
               "--freeze", "downsample_ratio=0.25").exit_code == 0
    again = check.check_model(tmp_path / "m.npu.onnx", soc="SM8750")
    assert again.verdict == "ready" and not again.htp.cpu_nodes


@pytest.mark.needs_qnn
def test_a_plain_check_says_a_w8a16_compile_would_refuse_an_unfused_gelu(tmp_path):
    require(htp.available(), "onnxruntime-qnn")
    path = save(tmp_path, sm.gelu_erf())
    report = check.check_model(path, soc="SM8750")
    assert report.verdict == "ready"  # fp16 takes the Erf
    (note,) = [f for f in report.findings if f.code == "w8a16"]
    assert note.severity == "info" and "prepare --fuse" in note.fix
    assert not [f for f in check.check_model(path, soc="SM8750", precision="w8a16").findings if f.code == "w8a16"]


UNARY = ("Acos", "Acosh", "Asinh", "Atanh", "Cosh", "Sinh", "Tan", "Softplus", "Softsign", "Erf", "Sin", "Sqrt",
         "Tanh", "Exp", "Neg", "Abs", "Sigmoid", "Floor", "Ceil", "Round", "Reciprocal", "Elu", "HardSigmoid",
         "HardSwish", "LeakyRelu", "Log", "Selu", "Celu", "Shrink", "ThresholdedRelu")


def test_the_op_builders_in_the_data_agree_with_the_installed_plugin(tmp_path, qnn):
    """data/htp_rules.json's builders (the plugin's sourced op_builder_factory.cc, plus what was measured here) are
    checked against the installed onnxruntime-qnn: every op it runs on the HTP alone has a builder by the data, so
    check never says "no op builder" of an op the plugin takes. Each op alone (fp32 [1, 64]), a Relu after it."""
    data = json.loads((Path(check.__file__).parent.parent / "data" / "htp_rules.json").read_text())
    builders = set(data["builders"]["ops"]) | set(data["builders"]["measured"]["ops"])
    nodes, last = [], "x"
    for i, op in enumerate(UNARY):
        nodes += [helper.make_node(op, [last], [f"t{i}"], name=f"n_{op}"),
                  helper.make_node("Relu", [f"t{i}"], [f"r{i}"], name=f"relu{i}")]
        last = f"r{i}"
    nodes.append(helper.make_node("ReduceL2", [last], ["y"], axes=[1], keepdims=1, name="n_ReduceL2"))
    graph = helper.make_graph(nodes, "ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    measured = htp.measure_htp(save(tmp_path, model), catalog.find("SM8750"))
    assert measured.measured, measured.reason
    on_cpu = {n.op_type for n in measured.cpu_nodes}
    taken = {*UNARY, "ReduceL2"} - on_cpu
    assert taken - builders == set(), "the plugin runs these on the HTP, the data says it has no builder for them"
    assert on_cpu >= {"Acos", "Erf", "Softsign"}  # and the measurement separates: some stay on the CPU


def test_a_decoder_is_told_per_soc_how_many_parts_prepare_generate_should_make(tmp_path):
    """A decoder exported with its KV cache (dynamic lengths, int64 ids): one finding says what prepare --generate
    fixes and how many parts it needs on each SoC, with the stored bytes per precision against the SoC's budget and
    where that comes from; the fix line is prepare --generate --parts P, and the verdict fixable (exit 10)."""
    from tests.support.cli import parsed

    path = save(tmp_path, sm.tiny_decoder(tied=True), "dec.onnx")  # 6.6 MB at fp16, its tied table twice
    r = run("check", path, "--soc", "SM8750,SM8650", "--no-measure", "--json")
    assert r.exit_code == 10, r.output
    reports = parsed(r.stdout)["models"]
    for report, (soc, arch, status) in zip(reports, [("SM8750", "v79", "derived"), ("SM8650", "v75", "default")],
                                           strict=True):
        assert [f["code"] for f in report["findings"]] == ["parts"]  # not its dynamic dims and int64 ids
        assert report["load"]["soc"] == soc and report["load"]["decoder_layers"] == 2
        assert (report["load"]["budget"]["arch"], report["load"]["budget"]["status"]) == (arch, status)
        assert [(s["precision"], s["parts"]) for s in report["load"]["stored"]] == [
            ("fp16", 1), ("w8a16", 1), ("w4a16", 1)]
        assert report["load"]["stored"][0]["extra_bytes"] == 2 * 4096 * 256  # the tied table's second copy
        assert report["prepare_command"].endswith(f"-o {tmp_path}/dec-parts/dec.onnx --generate --parts 1 "
                                                  "--precision fp16")

    r = run("check", path, "--context-gb", "0.004", "--no-measure")  # 4 MB a part: 2 parts at fp16
    assert r.exit_code == 10, r.output
    assert ("load on SM8750: one part holds 4.0 MB (v79, given: check --context-gb); stored fp16 6.6 MB: 2 part(s), "
            "w8a16 5.4 MB: 2 part(s), w4a16 ") in r.output
    assert ("[fixable] a decoder with a KV cache (2 layers): 6.6 MB stored at fp16 (its tied embedding stored twice: "
            "+2.1 MB); one part holds 4.0 MB on SM8750 (v79, given: check --context-gb): 2 parts (layers 0, 1; the "
            "embedding in the first, the lm_head in the last)") in r.output
    assert (f"next: qnndeploy prepare {path} -o {tmp_path}/dec-parts/dec.onnx --generate --parts 2 --precision fp16"
            in r.output)

    r = run("check", path, "--context-gb", "0.003", "--no-measure", "--json")  # embedding + one layer: over 3 MB
    (finding,) = parsed(r.stdout)["models"][0]["findings"]
    assert r.exit_code == 11 and finding["severity"] == "blocker" and "a single layer is over it" in finding["message"]
    assert finding["fix"].endswith("or 2 parts at w4a16 (check --precision w4a16)")


def test_the_static_graphs_prepare_generate_writes_are_not_taken_for_a_decoder_to_prepare(tmp_path):
    """A generation part has past_key_values inputs too, but of fixed sizes: it is checked as any model (no parts
    finding); its size against the budget like any other graph's."""
    model = sm.tiny_decoder(kv=True, seq=1)
    for value in [*model.graph.input, *model.graph.output]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param"):
                dim.dim_value = {"batch": 1}.get(dim.dim_param, 16)
    report = check.check_model(save(tmp_path, model, "part.onnx"), measure=False)
    assert "parts" not in codes(report) and report.load.decoder_layers == 0
    assert [s.parts for s in report.load.stored] == [1, 1, 1]


@pytest.mark.slow
@pytest.mark.parametrize("dynamo", [False, True])
def test_a_real_transformers_export_is_planned_into_parts(llm_export, dynamo):
    """transformers' Qwen2 (tied embedding) and Llama (untied) as both torch exporters write them: each is a decoder
    to prepare --generate, its embedding and lm_head found where they are (the TorchScript exporter writes a tied
    table as two initializers, the dynamo exporter as one read twice: the compiler stores it twice either way)."""
    from qnndeploy.model import loadplan
    from tests.support import llm

    for spec in (llm.QWEN_TINY, llm.LLAMA_TINY):
        path = llm_export(spec, dynamo=dynamo).path
        graph = onnx.load(path).graph
        store = loadplan.stored(graph, "fp16")
        place = loadplan.decoder_bytes(graph, store)
        table = 2 * spec.vocab * spec.hidden
        assert (place.layers, place.embedding, place.lm_head) == (spec.layers, table, table)
        twice = dynamo and spec == llm.QWEN_TINY
        assert store.extra_bytes == (table if twice else 0), spec.family
        report = check.check_model(path, measure=False, context_bytes=200_000)  # 0.41 MB: 3 parts of 4 layers
        (finding,) = report.findings
        assert (finding.code, finding.severity, report.load.at("fp16").layers) == (
            "parts", "fixable", [(0, 0), (1, 2), (3, 3)])
        assert report.prepare_command.endswith("--generate --parts 3 --precision fp16") and report.exit_code == 10
        assert ("its tied embedding stored twice" in finding.message) == twice

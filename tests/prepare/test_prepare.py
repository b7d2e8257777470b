"""`qnndeploy prepare`: real PP-OCR models made static and proven equivalent, then `check`ed ready with zero CPU
partitions on the real QNN HTP backend; synthetic graphs for int32 wrappers, freezing, external data; bad input."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from qnndeploy import check, prepare
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.qnn import htp
from tests.support import synth_models as sm
from tests.support.cli import run
from tests.support.host import require
from tests.support.ppocr import STATIC_SHAPES, model_path


def infer(path, feeds):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def save(folder, model, name="m.onnx"):
    path = folder / name
    onnx.save(model, path)
    return path


@pytest.fixture(scope="session")
def ppocr_prepared(tmp_path_factory):
    """The three PP-OCR models prepared once for the whole session (each later check compiles once)."""
    folder = tmp_path_factory.mktemp("ppocr")
    return {name: prepare.prepare_model(model_path(name), folder / f"{name}.npu.onnx",
                                        prepare.PrepareOptions(shapes={"x": shape}))
            for name, shape in STATIC_SHAPES.items()}


@pytest.mark.parametrize("name", ["det", "rec", "cls"])
def test_ppocr_prepared_is_static_and_equivalent(ppocr_prepared, name):
    result = ppocr_prepared[name]
    assert [t.shape for t in result.inputs] == [STATIC_SHAPES[name]]
    assert not any(t.dynamic for t in result.outputs)
    assert result.nodes_after < result.nodes_before  # onnxsim folded the shape arithmetic
    (diff,) = result.equivalence
    assert diff.ok and diff.max_abs_diff < 1e-5 and diff.rel_l2 < 1e-3, diff


@pytest.mark.parametrize("name", [pytest.param("det", marks=pytest.mark.slow), "rec", "cls"])
def test_ppocr_prepared_checks_ready_with_zero_cpu_partitions(ppocr_prepared, name):
    require(htp.available(), "onnxruntime-qnn (the QNN HTP backend)")
    report = check.check_model(ppocr_prepared[name].output)
    assert report.verdict == "ready" and report.findings == []
    assert report.htp.measured and report.htp.cpu_nodes == [] and report.htp.cpu_partitions == 0
    assert report.htp.qnn_partitions >= 1


def test_record_holds_changes_hashes_and_figures(ppocr_prepared):
    result = ppocr_prepared["cls"]
    record = json.loads(Path(result.record).read_text())
    assert result.record.endswith("cls.npu.prepare.json")
    assert record["source_sha256"] == hashlib.sha256(model_path("cls").read_bytes()).hexdigest()
    assert record["output_sha256"] == hashlib.sha256(Path(result.output).read_bytes()).hexdigest()
    assert any("[1, 3, 48, 192]" in c for c in record["changes"])
    assert record["equivalence"][0]["name"] == "save_infer_model/scale_0.tmp_1"
    assert record["equivalence_inputs"] == "random (seed 0)" and record["kind"] == "qnndeploy-prepare"


@pytest.mark.slow
def test_difference_beyond_tolerance_fails_and_writes_nothing(tmp_path):
    """Folding cls's BatchNorms into its Convs moves the last float bits: a zero tolerance must catch that."""
    with pytest.raises(QnnDeployError, match="differs from the original") as error:
        prepare.prepare_model(model_path("cls"), tmp_path / "cls.onnx",
                              prepare.PrepareOptions(shapes={"x": STATIC_SHAPES["cls"]}, tolerance=0.0))
    assert error.value.exit_code == 1
    assert list(tmp_path.iterdir()) == []


def test_int64_inputs_and_outputs_become_int32_with_names_unchanged(tmp_path):
    src = save(tmp_path, sm.int64_io())
    result = prepare.prepare_model(src, tmp_path / "out.onnx", prepare.PrepareOptions(int32_inputs=True))
    assert sorted(result.int32_wrapped) == ["best", "ids"]
    assert [(t.name, t.dtype) for t in result.inputs] == [("ids", "int32")]
    assert [(t.name, t.dtype) for t in result.outputs] == [("emb", "float32"), ("best", "int32")]
    ids = np.array([[3, 1, 4, 1, 5, 9, 2, 6]])
    want = infer(src, {"ids": ids})
    got = infer(tmp_path / "out.onnx", {"ids": ids.astype(np.int32)})
    assert got[1].dtype == np.int32 and np.array_equal(got[1], want[1]) and np.array_equal(got[0], want[0])
    assert "int64" not in {f.code for f in check.check_model(tmp_path / "out.onnx", measure=False).findings}


@pytest.mark.parametrize("rate, branch", [("16000", "relu"), ("8000", "neg")])
def test_freezing_the_setting_input_folds_the_if_away(tmp_path, rate, branch):
    result = prepare.prepare_model(save(tmp_path, sm.if_on_scalar_input()), tmp_path / "out.onnx",
                                   prepare.PrepareOptions(freeze={"sample_rate": rate}))
    model = onnx.load(tmp_path / "out.onnx")
    assert [n.op_type for n in model.graph.node] == ["Relu" if branch == "relu" else "Neg"]
    assert [i.name for i in model.graph.input] == ["x"] and result.frozen == {"sample_rate": int(rate)}
    x = np.array([[1.0, -2.0, 3.0, -4.0]], np.float32)
    (y,) = infer(tmp_path / "out.onnx", {"x": x})
    assert np.array_equal(y, np.maximum(x, 0) if branch == "relu" else -x)
    assert check.check_model(tmp_path / "out.onnx", measure=False).verdict == "ready"


def test_external_data_under_2_gb_is_inlined_into_one_file(tmp_path):
    """torch's dynamo exporter writes model.onnx.data even for a few MB: the prepared model is one file."""
    (tmp_path / "src").mkdir()
    src = sm.save_with_external_data(sm.static_mlp("N", width=256), tmp_path / "src" / "m.onnx")
    out = tmp_path / "out" / "m.npu.onnx"
    result = prepare.prepare_model(src, out, prepare.PrepareOptions(shapes={"x": [1, 16]}))
    assert result.external_data is None
    assert sorted(p.name for p in out.parent.iterdir()) == ["m.npu.onnx", "m.npu.prepare.json"]
    assert any("external data inlined" in c for c in result.changes)
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in onnx.load(out).graph.initializer)
    assert result.equivalence[0].max_abs_diff < 1e-5


def test_fuse_on_a_model_with_external_data_run_from_another_folder(tmp_path, monkeypatch):
    """dynamo's default export keeps the weights in model.onnx.data: --fuse checked the fused model before its
    weights were read, and onnx's checker looked for the data file in the working folder (a traceback)."""
    (tmp_path / "src").mkdir()
    src = sm.save_with_external_data(sm.gelu_erf(64), tmp_path / "src" / "g.onnx")
    monkeypatch.chdir(tmp_path)
    done = run("prepare", src, "--fuse", "-o", tmp_path / "out" / "g.onnx")
    assert done.exit_code == 0, done.output
    assert "erf GELU pattern(s) fused" in done.output and "FAIL" not in done.output


def test_external_data_model_in_and_out(tmp_path, monkeypatch):
    """Above the 2 GB protobuf limit the weights stay in a side file (the limit lowered to test it small)."""
    monkeypatch.setattr(prepare, "EXTERNAL_ABOVE", 1000)
    (tmp_path / "src").mkdir()
    src = sm.save_with_external_data(sm.static_mlp("N", width=256), tmp_path / "src" / "big.onnx")
    out = tmp_path / "out" / "big.npu.onnx"
    result = prepare.prepare_model(src, out, prepare.PrepareOptions(shapes={"x": [1, 16]}))
    assert result.external_data == str(out.with_name("big.npu.onnx.data"))
    assert sorted(p.name for p in out.parent.iterdir()) == ["big.npu.onnx", "big.npu.onnx.data",
                                                             "big.npu.prepare.json"]
    assert result.equivalence[0].max_abs_diff < 1e-5
    assert out.with_name("big.npu.onnx.data").stat().st_mode & 0o777 == out.stat().st_mode & 0o777
    model = onnx.load(out, load_external_data=False)
    assert model.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL
    # the data file holds the weights once: onnx appends to a data file that is there (it held them twice)
    held = [int(e.value) for t in model.graph.initializer for e in t.external_data if e.key == "length"]
    assert out.with_name("big.npu.onnx.data").stat().st_size == sum(held) >= 16 * 256 * 4
    if htp.available():
        report = check.check_model(out)
        assert report.verdict == "ready" and report.htp.cpu_nodes == []


def test_a_file_of_the_data_file_s_name_in_the_working_folder_changes_nothing(tmp_path, monkeypatch):
    """onnx's external-data option looks for the data file's name in the working folder, not beside the model, and
    refused to write: run where an earlier output's data file is, prepare failed ("its result does not run")."""
    monkeypatch.setattr(prepare, "EXTERNAL_ABOVE", 1000)
    (tmp_path / "src").mkdir()
    src = sm.save_with_external_data(sm.static_mlp("N", width=256), tmp_path / "src" / "big.onnx")
    (tmp_path / "big.npu.onnx.data").write_bytes(b"an earlier run's")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out" / "big.npu.onnx"
    result = prepare.prepare_model(src, out, prepare.PrepareOptions(shapes={"x": [1, 16]}))
    assert result.external_data == str(out.with_name("big.npu.onnx.data"))
    assert (tmp_path / "big.npu.onnx.data").read_bytes() == b"an earlier run's"
    assert result.equivalence[0].max_abs_diff < 1e-5


def test_no_simplify_still_fixes_and_infers_shapes(tmp_path):
    result = prepare.prepare_model(save(tmp_path, sm.static_mlp("N")), tmp_path / "out.onnx",
                                   prepare.PrepareOptions(shapes={"x": [1, 16]}, simplify=False))
    assert not result.simplified and result.nodes_after == result.nodes_before == 3
    assert [t.shape for t in result.outputs] == [[1, 8]]


def test_real_inputs_from_a_folder(tmp_path):
    src = save(tmp_path, sm.static_mlp("N"))
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    np.save(inputs / "x.npy", np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16))
    result = prepare.prepare_model(src, tmp_path / "out.onnx", prepare.PrepareOptions(shapes={"x": [1, 16]},
                                                                                      inputs_dir=inputs))
    assert result.equivalence_inputs == str(inputs) and result.equivalence[0].ok
    np.save(inputs / "x.npy", np.zeros((1, 16), np.float64))
    with pytest.raises(QnnDeployError, match="holds float64, input x takes float32"):
        prepare.prepare_model(src, tmp_path / "out2.onnx", prepare.PrepareOptions(shapes={"x": [1, 16]},
                                                                                  inputs_dir=inputs))
    np.save(inputs / "x.npy", np.zeros((2, 16), np.float32))
    with pytest.raises(QnnDeployError, match=r"shape \[2, 16\], the prepared input x is \[1, 16\]"):
        prepare.prepare_model(src, tmp_path / "out2.onnx", prepare.PrepareOptions(shapes={"x": [1, 16]},
                                                                                  inputs_dir=inputs))
    (inputs / "x.npy").unlink()
    with pytest.raises(QnnDeployError, match=re.escape("no x.npy or x.npz for input x")):
        prepare.prepare_model(src, tmp_path / "out2.onnx", prepare.PrepareOptions(shapes={"x": [1, 16]},
                                                                                  inputs_dir=inputs))
    assert not (tmp_path / "out2.onnx").exists()


# --- the command line -----------------------------------------------------------------------------

def test_cli_prepare_then_check_is_ready(tmp_path):
    src = save(tmp_path, sm.int64_io())
    out = tmp_path / "m.npu.onnx"
    result = run("prepare", str(src), "-o", str(out), "--int32-inputs")
    assert result.exit_code == 0, result.output
    assert "input ids: int64 -> int32" in result.output and f"next: qnndeploy check {out}" in result.output
    again = run("prepare", str(src), "-o", str(out), "--int32-inputs", "--json")
    assert again.exit_code == 2 and "already exists" in again.output
    forced = run("prepare", str(src), "-o", str(out), "--int32-inputs", "--json", "--force")
    assert forced.exit_code == 0 and json.loads(forced.stdout)["int32_wrapped"] == ["ids", "best"]
    assert run("check", str(out), "--no-measure").exit_code == 0


@pytest.mark.parametrize("args, message", [
    (["--shape", "y=1,16"], "the model has no input y; its inputs: x"),
    (["--shape", "x=1,16,3"], "3 dims given, but input x has rank 2"),
    (["--shape", "x=1,D1"], "'D1' is not a size"),
    (["--shape", "x=1,16", "--shape", "x=1,16"], "--shape gives x twice"),
    ([], "input x has dynamic dims [N, 16]: give its fixed size, e.g. --shape x=1,16"),
    (["--shape", "x=1,16", "--freeze", "x=abc"], "'abc' is not a valid float32 value"),
    (["--shape", "x=1,16", "--freeze", "x=1,2"], "2 value(s) given, input x [1, 16] holds 16"),
    (["--shape", "x=1,16", "--freeze", "rate=1"], "the model has no input rate"),
    (["--shape", "x=1,16", "--inputs", "nowhere"], "no such folder"),
    (["--shape", "x=1,16", "--tolerance", "-1"], "--tolerance -1.0: give a number of 0 or more"),
    (["--shape", "x=1,16", "--tolerance", "nan"], "--tolerance nan: give a number of 0 or more"),
])
def test_bad_options_are_one_line_errors_and_write_nothing(tmp_path, args, message):
    src = save(tmp_path, sm.static_mlp("N"))
    result = run("prepare", str(src), "-o", str(tmp_path / "out.onnx"), *args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and message in result.output and result.output.count("\n") == 1
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_freeze_value_of_the_wrong_dtype(tmp_path):
    src = save(tmp_path, sm.if_on_scalar_input())
    for value in ("16k", "1.5", "99999999999999999999"):
        result = run("prepare", str(src), "-o", str(tmp_path / "o.onnx"),
                     "--freeze", f"sample_rate={value}")
        assert result.exit_code == 2 and f"'{value}' is not a valid int64 value" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_non_onnx_and_truncated_sources(tmp_path):
    text = tmp_path / "notes.onnx"
    text.write_text("not a model\n")
    data = model_path("rec").read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 3])
    for src in (text, cut):
        result = run("prepare", str(src), "-o", str(tmp_path / "out.onnx"))
        assert result.exit_code == 2 and "is not an ONNX model" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.onnx", "notes.onnx"]


# --- what a reviewer broke it with -------------------------------------------------------------------

def test_an_output_path_that_is_a_folder_is_refused_without_writing(tmp_path):
    src = save(tmp_path, sm.static_mlp())
    (tmp_path / "dir.onnx").mkdir()
    result = run("prepare", str(src), "-o", str(tmp_path / "dir.onnx"), "--force")
    assert result.exit_code == 2 and result.output.startswith("error: ") and result.output.count("\n") == 1
    assert "is not a file (a folder?)" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.onnx", "m.onnx"]  # no dir.prepare.json
    assert list((tmp_path / "dir.onnx").iterdir()) == []


@pytest.mark.parametrize("kind, message", [("folder", "is a folder"), ("fifo", "is a FIFO"),
                                           ("device", "is a character device")])
def test_a_source_that_is_no_regular_file_says_what_it_is(tmp_path, kind, message):
    import os

    src = {"folder": tmp_path / "m.onnx", "fifo": tmp_path / "m.onnx", "device": "/dev/null"}[kind]
    if kind == "folder":
        src.mkdir()
    elif kind == "fifo":
        os.mkfifo(src)
    result = run("prepare", str(src), "-o", str(tmp_path / "out.onnx"))
    assert result.exit_code == 2 and message in result.output and "no such file" not in result.output
    assert not (tmp_path / "out.onnx").exists()


def test_a_truncated_external_data_file_is_named_as_such(tmp_path):
    src = sm.save_with_external_data(sm.static_mlp(), tmp_path / "ext.onnx")
    data = tmp_path / "ext.onnx.weights"
    data.write_bytes(data.read_bytes()[:100])
    result = run("prepare", str(src), "-o", str(tmp_path / "out" / "m.onnx"))
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert f"the external data file {data} is truncated or damaged" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ext.onnx", "ext.onnx.weights"]


def test_an_external_data_file_that_is_a_symlink_is_one_line_with_the_way_out(tmp_path):
    """onnx reads no weights through a link (a Hugging Face cache's layout): said in one line, with `cp -L`."""
    src = sm.save_with_external_data(sm.static_mlp(), tmp_path / "ext.onnx")
    data = tmp_path / "ext.onnx.weights"
    data.rename(tmp_path / "blob")
    data.symlink_to("blob")
    result = run("prepare", str(src), "-o", str(tmp_path / "out" / "m.onnx"))
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "is a symbolic link; onnx does not follow links to weights: copy the model" in result.output
    assert "resolved (cp -L)" in result.output
    assert not (tmp_path / "out").exists()


def test_long_names_work_up_to_the_file_system_limit(tmp_path):
    """A 245-character output name: the work folder must not be named after it (that exceeds 255)."""
    src = save(tmp_path, sm.static_mlp())
    out = tmp_path / ("a" * 240 + ".onnx")
    result = prepare.prepare_model(src, out)
    assert out.is_file() and prepare.record_path(out).is_file() and result.output == str(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.onnx", out.name, prepare.record_path(out).name])
    too_long = tmp_path / ("b" * 245 + ".onnx")  # its .prepare.json would be 258 characters
    result = run("prepare", str(src), "-o", str(too_long))
    assert result.exit_code == 2 and "too long for the file system" in result.output
    assert not too_long.exists()


def test_damaged_input_samples_are_one_line_errors(tmp_path):
    src = save(tmp_path, sm.static_mlp())
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "x.npy").write_text("garbage\n")
    result = run("prepare", str(src), "-o", str(tmp_path / "out" / "o.onnx"),
                 "--inputs", str(inputs))
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert f"cannot read {inputs / 'x.npy'} as a NumPy array file" in result.output
    assert not (tmp_path / "out").exists()  # the folder -o would have made is gone again


def test_next_command_is_shell_quoted(tmp_path):
    import shlex

    src = save(tmp_path, sm.static_mlp())
    out = tmp_path / "my out" / "it's.onnx"
    result = run("prepare", str(src), "-o", str(out))
    assert result.exit_code == 0, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("next: ")]
    assert shlex.split(line.removeprefix("next: ")) == ["qnndeploy", "check", str(out)]


# --- real exporters' habits, each in a small synthetic graph ------------------------------------------

def test_an_if_on_input_shapes_and_a_setting_folds_after_the_fix_all_command(tmp_path):
    path = save(tmp_path, sm.if_on_shape_and_setting())
    report = check.check_model(path, measure=False)
    assert report.placeholders == ["LEN", "VALUE"]
    assert report.prepare_command.endswith("--shape x=1,LEN --freeze sr=VALUE")
    result = prepare.prepare_model(path, tmp_path / "m.npu.onnx", prepare.PrepareOptions(shapes={"x": [1, 300]},
                                                                                         freeze={"sr": 16000}))
    model = onnx.load(tmp_path / "m.npu.onnx")
    assert [n.op_type for n in model.graph.node] == ["Relu"] and result.folded_by == "onnxsim"
    assert check.check_model(tmp_path / "m.npu.onnx", measure=False).verdict == "ready"


def test_the_folding_chain_goes_on_when_a_tool_fails(tmp_path, monkeypatch):
    from qnndeploy.prepare import fold

    def broken(src, dst, external):
        raise fold.FoldError("Nodes in a graph must be topologically sorted")

    monkeypatch.setitem(fold.TOOLS, "onnxsim", broken)
    result = prepare.prepare_model(save(tmp_path, sm.if_on_shape_and_setting(setting=False)), tmp_path / "o.onnx",
                                   prepare.PrepareOptions(shapes={"x": [1, 300]}))
    assert result.folded_by == "onnxslim"
    assert result.folding == ["onnxsim: failed (Nodes in a graph must be topologically sorted)", "onnxslim: ok"]
    assert [n.op_type for n in onnx.load(tmp_path / "o.onnx").graph.node] == ["Relu"]


def test_with_every_folding_tool_failing_the_unfolded_model_is_kept_and_said(tmp_path, monkeypatch):
    from qnndeploy.prepare import fold

    def broken(src, dst, external):
        raise fold.FoldError("no")

    for tool in list(fold.TOOLS):
        monkeypatch.setitem(fold.TOOLS, tool, broken)
    result = prepare.prepare_model(save(tmp_path, sm.if_on_shape_and_setting(setting=False)), tmp_path / "o.onnx",
                                   prepare.PrepareOptions(shapes={"x": [1, 300]}))
    assert result.folded_by is None and result.folding[-1] == "no folding: ok, but If branch left in the graph"
    assert result.notes == ["If node branch is still in the graph: run check"]
    assert [t.shape for t in result.outputs] == [[1, 300]]


def test_a_wrong_declared_output_shape_is_replaced_by_what_the_graph_computes(tmp_path):
    path = save(tmp_path, sm.wrong_output_shape())
    report = check.check_model(path, measure=False)
    (finding,) = [f for f in report.findings if f.code == "output-shape"]
    assert "y declares [1, seqlen], computes [4, 1, 8]" in finding.message and report.verdict == "fixable"
    result = prepare.prepare_model(path, tmp_path / "m.npu.onnx")
    assert [t.shape for t in result.outputs] == [[4, 1, 8]]
    assert "output y: declared [1, seqlen], the graph computes [4, 1, 8] (CPU run): declaration replaced" \
        in result.changes
    again = check.check_model(tmp_path / "m.npu.onnx", measure=False)
    assert again.verdict == "ready" and again.prepare_command is None


def test_a_symbol_fixed_on_one_input_fixes_it_on_the_others(tmp_path):
    path = save(tmp_path, sm.rnn_state())
    report = check.check_model(path, measure=False)
    assert report.prepare_command.endswith("--shape x=5,1,4 --shape h0=2,1,8") and report.placeholders == []
    result = prepare.prepare_model(path, tmp_path / "m.npu.onnx", prepare.PrepareOptions(shapes={"x": [5, 1, 4]}))
    assert {t.name: t.shape for t in result.inputs} == {"x": [5, 1, 4], "h0": [2, 1, 8]}
    assert "input h0: [2, batch, 8] -> [2, 1, 8] (its symbols fixed by --shape)" in result.changes
    with pytest.raises(QnnDeployError, match="dim 'batch' is 2 here but 1 in --shape x"):
        prepare.prepare_model(path, tmp_path / "n.onnx", prepare.PrepareOptions(shapes={"x": [5, 1, 4], "h0": [2, 2,
                                                                                                               8]}))


def test_dim_0_of_a_state_input_is_not_called_a_batch(tmp_path):
    report = check.check_model(save(tmp_path, sm.rnn_state(static=True)), measure=False)
    assert "batch" not in {f.code for f in report.findings} and report.verdict == "ready"


def test_integer_samples_stay_inside_the_table_they_index(tmp_path):
    path = save(tmp_path, sm.token_types(rows=2))
    from qnndeploy.model import onnxio

    assert onnxio.int_input_ranges(onnx.load(path).graph) == {
        "token_type_ids": (0, 2, "it indexes types (2 rows) in Gather token_type_embedding")}
    result = prepare.prepare_model(path, tmp_path / "m.npu.onnx", prepare.PrepareOptions(int32_inputs=True))
    assert result.equivalence[0].ok  # [0, 10) would have failed the original model in its Gather


def test_a_model_that_fails_on_random_integers_names_them(tmp_path):
    model = sm.token_types(rows=2)
    model.graph.node[1].input[0] = "types_via_identity"  # the table is no longer visible as an initializer
    model.graph.node.insert(0, onnx.helper.make_node("Identity", ["types"], ["types_via_identity"], name="id"))
    path = save(tmp_path, model)
    with pytest.raises(QnnDeployError, match=r"integer inputs were drawn token_type_ids in \[0, 10\)"):
        prepare.prepare_model(path, tmp_path / "m.npu.onnx")
    assert not (tmp_path / "m.npu.onnx").exists()


def test_fuse_turns_the_erf_gelu_into_one_gelu_node_at_opset_20(tmp_path):
    path = save(tmp_path, sm.gelu_erf())
    result = prepare.prepare_model(path, tmp_path / "m.npu.onnx", prepare.PrepareOptions(fuse=True))
    model = onnx.load(tmp_path / "m.npu.onnx")
    ops = [n.op_type for n in model.graph.node]
    assert "Gelu" in ops and "Erf" not in ops and "1 erf GELU pattern(s) fused into Gelu nodes (opset 20)" \
        in result.changes
    assert next(o.version for o in model.opset_import if o.domain == "") == 20
    assert result.equivalence[0].max_abs_diff < 1e-5  # ReduceMean's axes moved to an input by the conversion


@pytest.mark.needs_qnn
def test_folding_that_breaks_a_gelu_the_htp_runs_is_not_kept(tmp_path):
    """onnxsim folds the GELU's `* 0.5` into the next Conv, and the HTP no longer runs the bare Erf; measured on the
    HTP, that result is not kept, the next tool's is, and the prepared model checks ready with every node on the
    HTP, as the source was."""
    require(htp.available(), "onnxruntime-qnn")
    path = save(tmp_path, sm.gelu_conv("T"))
    r = run("prepare", str(path), "-o", str(tmp_path / "m.npu.onnx"), "--shape", "x=1,16,50")
    assert r.exit_code == 0, r.output
    checked = run("check", str(tmp_path / "m.npu.onnx"))
    assert checked.exit_code == 0 and "all 7 nodes on the HTP" in checked.output, checked.output
    assert ("onnxsim: ok, but not kept: 1 node(s) on the CPU (Erf) as measured on the HTP (SM8750), the unfolded "
            "model none on the CPU (the fold broke a pattern the HTP runs); onnxslim: ok, none on the CPU") in r.output


# --- the fourth folding tool: our own constant folder, onnx alone -------------------------------------------

def only_the_onnx_folder(monkeypatch):
    from qnndeploy.prepare import fold

    def off(src, dst, external):
        raise fold.FoldError("off")

    for tool in list(fold.TOOLS):
        if tool != "onnx":
            monkeypatch.setitem(fold.TOOLS, tool, off)
    return ["onnxsim: failed (off)", "onnxslim: failed (off)", "onnxruntime: failed (off)", "onnx: ok"]


def test_the_onnx_folder_alone_inlines_an_if_on_a_shape(tmp_path, monkeypatch):
    folding = only_the_onnx_folder(monkeypatch)
    src = save(tmp_path, sm.if_on_shape_and_setting(setting=False))
    result = prepare.prepare_model(src, tmp_path / "o.onnx", prepare.PrepareOptions(shapes={"x": [1, 300]}))
    assert result.folded_by == "onnx" and result.folding == folding
    model = onnx.load(tmp_path / "o.onnx")
    assert [n.op_type for n in model.graph.node] == ["Relu"] and len(model.graph.initializer) == 0
    assert result.equivalence[0].ok and result.equivalence[0].max_abs_diff == 0
    x = np.linspace(-1, 1, 300, dtype=np.float32).reshape(1, 300)
    assert np.array_equal(infer(tmp_path / "o.onnx", {"x": x})[0], np.maximum(x, 0))


def test_the_onnx_folder_turns_shape_arithmetic_into_a_constant_shape(tmp_path, monkeypatch):
    only_the_onnx_folder(monkeypatch)
    result = prepare.prepare_model(save(tmp_path, sm.reshape_from_shape()), tmp_path / "o.onnx",
                                   prepare.PrepareOptions(shapes={"x": [1, 5, 16]}))
    model = onnx.load(tmp_path / "o.onnx")
    assert [n.op_type for n in model.graph.node] == ["MatMul", "Reshape"] and result.folded_by == "onnx"
    target = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}[model.graph.node[1].input[1]]
    assert target.tolist() == [1, 5 * 64]
    assert [t.shape for t in result.outputs] == [[1, 320]] and result.equivalence[0].max_abs_diff == 0


def test_the_onnx_folder_keeps_external_data(tmp_path, monkeypatch):
    only_the_onnx_folder(monkeypatch)
    monkeypatch.setattr(prepare, "EXTERNAL_ABOVE", 1000)
    (tmp_path / "src").mkdir()
    src = tmp_path / "src" / "big.onnx"  # the weights in big.onnx.data, the small shape constants inline
    onnx.save(sm.reshape_from_shape(), src, save_as_external_data=True, location="big.onnx.data", size_threshold=1024)
    out = tmp_path / "out" / "big.npu.onnx"
    result = prepare.prepare_model(src, out, prepare.PrepareOptions(shapes={"x": [1, 5, 16]}))
    assert result.folded_by == "onnx" and result.external_data == str(out.with_name("big.npu.onnx.data"))
    model = onnx.load(out, load_external_data=False)
    assert [n.op_type for n in model.graph.node] == ["MatMul", "Reshape"]
    (weights,) = [t for t in model.graph.initializer if t.name == "W"]
    assert weights.data_location == onnx.TensorProto.EXTERNAL and result.equivalence[0].max_abs_diff == 0


def test_the_onnx_folder_names_the_node_it_cannot_evaluate(tmp_path):
    from qnndeploy.prepare import fold

    model = sm.reshape_from_shape()
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 5
    model.graph.initializer[1].CopyFrom(onnx.numpy_helper.from_array(np.array(7, np.int64), "one"))  # past rank 3
    src = save(tmp_path, model)
    with pytest.raises(fold.FoldError, match=r"^Gather node length: .*index") as error:
        fold.fold("onnx", src, tmp_path / "o.onnx", False)
    assert "\n" not in str(error.value)


# --- hostile inputs (issue 11): one-line errors, nothing allocated or folded first ----------------------------

def _dynamic_features():
    from onnx import helper as h

    graph = h.make_graph([h.make_node("Relu", ["features"], ["y"])], "g",
                         [h.make_tensor_value_info("features", onnx.TensorProto.FLOAT, ["N", "C"])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", "C"])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _prepare_error(tmp_path, model_path, *args):
    result = run("prepare", str(model_path), "-o", str(tmp_path / "out" / "p.onnx"), *args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1, result.output
    assert not (tmp_path / "out").exists()
    return result.output


@pytest.mark.parametrize("value, message", [
    ("features=²,4", "'²' is not a size"),
    ("features=1,٣", "'٣' is not a size"),
    ("features=1,100000000000", "over the limit of 2,147,483,648 per tensor"),
    ("features=100000x100000", "10,000,000,000 elements"),
])
def test_shape_takes_ascii_digits_and_sane_sizes_only(tmp_path, value, message):
    path = save(tmp_path, _dynamic_features())
    assert message in _prepare_error(tmp_path, path, "--shape", value)


def test_freeze_takes_ascii_digits_only(tmp_path):
    from onnx import helper as h

    graph = h.make_graph([h.make_node("Cast", ["k"], ["y"], to=onnx.TensorProto.FLOAT)], "g",
                         [h.make_tensor_value_info("k", onnx.TensorProto.INT64, [1])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    path = save(tmp_path, model)
    assert "'٣' is not a valid int64 value" in _prepare_error(tmp_path, path, "--freeze", "k=٣")


def test_random_samples_refuse_an_oversized_input_before_allocating():
    from qnndeploy.model.onnxio import TensorInfo
    from qnndeploy.model.samples import random_samples

    with pytest.raises(QnnDeployError, match="over the limit of 2,147,483,648 per tensor"):
        random_samples([TensorInfo("x", "float32", [1, 100_000_000_000])], 1, 0)


def test_a_tiny_model_building_a_huge_constant_is_refused_before_folding(tmp_path):
    from onnx import helper as h
    from onnx import numpy_helper

    graph = h.make_graph(
        [h.make_node("ConstantOfShape", ["s"], ["c"], name="big",
                     value=h.make_tensor("v", onnx.TensorProto.FLOAT, [1], [1.0])),
         h.make_node("Add", ["x", "c"], ["y"])], "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([2**30], np.int64), "s")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    path = save(tmp_path, model)
    assert path.stat().st_size < 200
    assert "node big (ConstantOfShape) makes a constant of 4,096 MiB" in _prepare_error(tmp_path, path)


@pytest.mark.parametrize("location, message", [
    ("../x.bin", "a path outside the model's folder"),
    ("/etc/hostname", "an absolute path"),
    ("a" * 5000, "5000 characters"),
])
def test_external_data_outside_the_model_folder_is_refused(tmp_path, location, message):
    model = sm.external_weights(location)
    (tmp_path / "x.bin").write_bytes(bytes(64))
    folder = tmp_path / "sub"
    folder.mkdir()
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    assert message in _prepare_error(tmp_path, path)


def _log_front(path: Path) -> Path:
    onnx.save(sm.log_front(skip=True), path)
    return path


def test_split_at_a_tensor_chains_back_to_the_original(tmp_path):
    """The head is what the cut needs; a tensor the tail also reads from the head (the skip) joins the cut; the
    two parts chained by name compute the original exactly, and the record says which runs where."""
    src = _log_front(tmp_path / "front.onnx")
    r = run("prepare", str(src), "--split-at", "m1", "-o", str(tmp_path / "parts.onnx"),
            "--json")
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    assert sorted(result["cut"]) == ["logx", "m1"]
    head, tail = (onnx.load(tmp_path / f"parts-{p}.onnx") for p in ("head", "tail"))
    assert [n.op_type for n in head.graph.node] == ["Log", "MatMul"]
    assert [n.op_type for n in tail.graph.node] == ["Relu", "Add", "MatMul"]
    assert {i.name for i in tail.graph.input} == {"m1", "logx"} and [o.name for o in tail.graph.output] == ["y"]
    x = np.random.default_rng(3).uniform(1e-3, 1, (1, 64)).astype(np.float32)
    mid = {o.name: v for o, v in zip(head.graph.output, infer(tmp_path / "parts-head.onnx", {"x": x}), strict=True)}
    (y,) = infer(tmp_path / "parts-tail.onnx", {i.name: mid[i.name] for i in tail.graph.input})
    np.testing.assert_array_equal(y, infer(src, {"x": x})[0])
    record = json.loads((tmp_path / "parts.split.json").read_text())
    assert record["order"] == ["head", "tail"]
    assert [(p["name"], p["runs_on"]) for p in record["parts"]] == [("head", "cpu"), ("tail", "npu")]


@pytest.mark.parametrize(("args", "message"), [
    (["--split-at", "nope"], "no node of the main graph makes a tensor of that name"),
    (["--split-at", "x"], "it is a graph input"),
    (["--split-at", "y"], "the tail would be empty"),
    (["--split-at", "m1", "--shape", "x=1,64"], "cuts a model that is already prepared"),
])
def test_a_bad_split_is_one_line_and_writes_nothing(tmp_path, args, message):
    src = _log_front(tmp_path / "front.onnx")
    r = run("prepare", str(src), "-o", str(tmp_path / "parts.onnx"), *args)
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["front.onnx"]


def test_onnxsim_folds_without_loading_torch_and_torch_still_imports_after(tmp_path):
    """onnxsim 0.8 loads torch, when installed, at its import (3 s of every prepare) for a bridge simplify() never
    uses: a prepare in a fresh process folds with onnxsim and never has torch loaded; a later import of torch in the
    same process works. (The test environment has torch: it is a test dependency.)"""
    from tests.support.bundles import tiny_model

    src = tiny_model(tmp_path / "m.onnx", 16)
    script = ("import sys; from pathlib import Path; from qnndeploy.prepare import fold\n"
              f"fold.fold('onnxsim', Path({str(src)!r}), Path({str(tmp_path / 'f.onnx')!r}), False)\n"
              "assert 'onnxsim' in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)\n"
              "import torch; print(torch.zeros(2).sum().item())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0.0"
    onnx.checker.check_model(str(tmp_path / "f.onnx"))

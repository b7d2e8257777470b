"""`qnndeploy inspect`: context binaries really compiled by onnxruntime-qnn, read back by the wheel's own
libQnnSystem, must say what the compiler was asked for (graph, I/O names, dims, dtypes, SoC, arch); the marker
fallback without the library; damaged binaries (one crashes libQnnSystem) end in a one-line problem, exit 1."""

from __future__ import annotations

import ctypes
import json
import tarfile
from pathlib import Path

import pytest

import qnndeploy
from qnndeploy import inspect
from qnndeploy.base import socs as catalog
from qnndeploy.base.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, QnnDeployError
from qnndeploy.qnn import htp, qnnsystem
from tests.support.cli import run
from tests.support.host import require
from tests.support.synth_models import tiny

SOCS = ("SM8750", "SM8550")


def partition_name(ctx: Path) -> str:
    """The QNN graph name onnxruntime-qnn gives a compiled partition, as its EPContext wrapper records it."""
    import onnx

    (node,) = onnx.load(str(ctx)).graph.node
    return next(a.s.decode() for a in node.attribute if a.name == "partition_name")


def compiled(models: dict[str, Path], out: Path, socs=SOCS) -> Path:
    from qnndeploy import compile as stage

    summary = stage.compile_models(models, list(socs), out, stage.CompileOptions(use_cache=False))
    assert all(j.status == "ok" for j in summary.jobs), [j.error for j in summary.jobs]
    return out


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and libQnnSystem)")
    root = tmp_path_factory.mktemp("inspect")
    return compiled({"tiny": tiny(root / "tiny.onnx")}, root / "build")


def record(build: Path, graph: str, soc: str) -> dict:
    return json.loads((build / graph / soc / "compile.json").read_text())


def assert_agrees(info: qnnsystem.ContextInfo, build: Path, graph: str, soc: str, model: Path) -> None:
    """The binary says what the compile was asked for: the SoC's arch and soc_model, the QAIRT build, one graph
    named as the EPContext wrapper says, and the model's inputs and outputs with their dims. An fp16 compile keeps
    float32 I/O: the HTP converts at the graph's edges, and the binary says float32."""
    import onnx
    from onnx.helper import tensor_dtype_to_np_dtype

    target = catalog.find(soc)
    assert (info.dsp_arch, info.soc_model) == (target.dsp_arch, target.soc_id)
    assert info.build_id == record(build, graph, soc)["qairt_build"]
    assert info.binary_info_version in (1, 2, 3) and info.context_blob_version.count(".") == 1
    assert 0 < info.context_blob_size <= (build / graph / soc / f"{graph}.bin").stat().st_size
    (g,) = info.graphs
    assert g.name == partition_name(build / graph / soc / f"{graph}_ctx.onnx")
    onnx_graph = onnx.load(str(model)).graph

    def expected(values) -> list[tuple[str, tuple[int, ...], str]]:
        return [(v.name, tuple(d.dim_value for d in v.type.tensor_type.shape.dim),
                 tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name) for v in values]

    assert [(t.name, t.dims, t.dtype) for t in g.inputs] == expected(onnx_graph.input)
    assert [(t.name, t.dims, t.dtype) for t in g.outputs] == expected(onnx_graph.output)
    assert all(t.quantization is None for t in (*g.inputs, *g.outputs))
    assert g.vtcm_bytes and g.spill_fill_bytes is not None and g.optimization_level is not None


# --- fast: one tiny model, two SoCs -------------------------------------------------------------------------------

@pytest.mark.parametrize("soc", SOCS)
def test_a_binary_says_what_the_compiler_was_asked_for(build, soc):
    info = qnnsystem.read_context(build / "tiny" / soc / "tiny.bin")
    assert_agrees(info, build, "tiny", soc, build.parent / "tiny.onnx")
    assert [t.dtype for t in info.graphs[0].outputs] == ["float32", "int64"]


def test_in_process_and_child_process_readers_agree(build):
    path = build / "tiny" / "SM8750" / "tiny.bin"
    assert qnnsystem.read_context_here(path) == qnnsystem.read_context(path)


def test_the_command_prints_the_metadata_and_a_table_per_graph(build):
    path = build / "tiny" / "SM8550" / "tiny.bin"
    r = run("inspect", path)
    assert r.exit_code == 0, r.output
    assert "SoC, arch       SM8550 (soc_model 43), HTP v73" in r.output
    assert f"QAIRT build     {record(build, 'tiny', 'SM8550')['qairt_build']}" in r.output
    assert "out idx  1x1  int64" in r.output and "in  x    1x8  float32" in r.output
    assert "spill-fill" in r.output and "VTCM" in r.output and "optimization level" in r.output
    r = run("inspect", path, "--json")
    data = json.loads(r.stdout)
    assert r.exit_code == 0 and data["ok"] and data["kind"] == "binary"
    (binary,) = data["binaries"]
    assert binary["source"] == "qnnsystem" and binary["binary_soc"] == "SM8550"
    assert binary["context"]["dsp_arch"] == "v73"
    assert [t["name"] for t in binary["context"]["graphs"][0]["inputs"]] == ["x", "b"]


def test_without_the_library_the_markers_are_shown_and_say_so(build, tmp_path, monkeypatch):
    monkeypatch.setenv(qnnsystem.LIBRARY_ENV, str(tmp_path / "missing" / "libQnnSystem.so"))
    result = inspect.inspect(build / "tiny" / "SM8750" / "tiny.bin")
    (b,) = result.binaries
    assert result.ok and b.source == inspect.MARKERS and b.context is None
    assert qnnsystem.LIBRARY_ENV in b.reason and "is not a file" in b.reason
    assert b.markers is not None and b.markers.targets == (("SM8750", 79),)
    assert b.markers.builds == (record(build, "tiny", "SM8750")["qairt_build"],)
    r = run("inspect", build / "tiny" / "SM8750" / "tiny.bin")
    assert r.exit_code == 0 and "source: markers (" in r.output and "SM8750 v79" in r.output
    broken = tmp_path / "libQnnSystem.so"
    broken.write_text("not a shared library")
    monkeypatch.setenv(qnnsystem.LIBRARY_ENV, str(broken))
    r = run("inspect", build / "tiny" / "SM8750" / "tiny.bin")
    assert r.exit_code == 0 and f"source: markers (cannot load {broken}" in r.output
    monkeypatch.setenv(qnnsystem.LIBRARY_ENV, str(tmp_path / "missing" / "libQnnSystem.so"))
    # the library API says the same in one line, for callers that fall back themselves
    with pytest.raises(QnnDeployError, match="is not a file") as e:
        qnnsystem.library_path()
    assert "\n" not in str(e.value)


def damaged(build: Path, tmp_path: Path) -> dict[str, Path]:
    good = (build / "tiny" / "SM8750" / "tiny.bin").read_bytes()
    cases = {"empty": b"", "truncated": good[: len(good) * 2 // 3], "not-qnn": bytes(range(256)) * 64}
    paths = {}
    for name, data in cases.items():
        paths[name] = tmp_path / f"{name}.bin"
        paths[name].write_bytes(data)
    return paths


@pytest.mark.parametrize("case", ["empty", "truncated", "not-qnn"])
def test_a_damaged_binary_is_one_problem_line_and_exit_1(build, tmp_path, case):
    path = damaged(build, tmp_path)[case]
    r = run("inspect", path)
    assert r.exit_code == EXIT_CHECK_FAILED and "Traceback" not in r.output
    problems = [line for line in r.output.splitlines() if "PROBLEM" in line]
    assert len(problems) == 1 and str(path) in problems[0]
    if case == "truncated":  # libQnnSystem refuses it; its markers are still there and are shown
        assert "malformed binary" in problems[0] and "SM8750 v79" in r.output
    if case == "empty":
        r = run("inspect", path, "--json")
        assert r.exit_code == EXIT_CHECK_FAILED and not json.loads(r.stdout)["ok"]


def test_a_binary_that_crashes_libqnnsystem_costs_only_its_child(build, tmp_path):
    """Measured: one zeroed byte of the context binary's header (a FlatBuffers vtable entry) makes libQnnSystem
    of QAIRT 2.51 segfault; in-process, that would kill qnndeploy."""
    data = bytearray((build / "tiny" / "SM8750" / "tiny.bin").read_bytes())
    if data[70] != 0x26:
        pytest.skip("this QAIRT lays the header out otherwise: the known crashing byte is not there")
    data[70] = 0
    path = tmp_path / "crash.bin"
    path.write_bytes(data)
    with pytest.raises(QnnDeployError, match=r"crashed reading .*crash\.bin \(signal 11\)") as e:
        qnnsystem.read_context(path)
    assert e.value.exit_code == EXIT_CHECK_FAILED
    r = run("inspect", path)
    assert r.exit_code == EXIT_CHECK_FAILED and "PROBLEM libQnnSystem crashed" in r.output


def test_one_child_reads_many_binaries_and_a_crash_costs_only_the_binary_that_caused_it(build, tmp_path):
    good = build / "tiny" / "SM8750" / "tiny.bin"
    data = bytearray(good.read_bytes())
    data[70] = 0  # the crashing byte of the test above
    crash = tmp_path / "crash.bin"
    crash.write_bytes(data)
    answers = qnnsystem.read_contexts([good, crash, good, good])
    assert [type(a).__name__ for a in answers] == ["ContextInfo", "CheckFailed", "ContextInfo", "ContextInfo"]
    assert "crashed reading" in str(answers[1]) and str(crash) in str(answers[1])
    assert answers[0] == answers[2] == answers[3]


def test_a_reader_that_does_not_finish_is_stopped(build):
    with pytest.raises(QnnDeployError, match="did not finish reading"):
        qnnsystem.read_context(build / "tiny" / "SM8750" / "tiny.bin", timeout=0.001)


def test_quantization_parameters_are_read_per_encoding():
    """The decoding of Qnn_QuantizeParams_t for the encodings a binary's I/O can carry (the compiles above keep
    float I/O, so the structs are filled here as libQnnSystem fills them)."""
    q = qnnsystem._QuantizeParams(encodingDefinition=1, quantizationEncoding=0)
    q.u.scaleOffset = qnnsystem._ScaleOffset(0.5, -128)
    assert qnnsystem._quantization(q, 0x0416) == qnnsystem.Quantization("scale_offset", 0.5, -128)
    assert qnnsystem._quantization(q, 0x0232) is None  # a float tensor has no quantization
    pairs = (qnnsystem._ScaleOffset * 2)(qnnsystem._ScaleOffset(0.25, 0), qnnsystem._ScaleOffset(2.0, -3))
    q = qnnsystem._QuantizeParams(encodingDefinition=1, quantizationEncoding=1)
    q.u.axisScaleOffset = qnnsystem._AxisScaleOffset(3, 2, ctypes.cast(pairs, ctypes.POINTER(qnnsystem._ScaleOffset)))
    assert qnnsystem._quantization(q, 0x0308) == qnnsystem.Quantization(
        "axis_scale_offset", axis=3, scales=(0.25, 2.0), offsets=(0, -3))
    assert ctypes.sizeof(qnnsystem._QuantizeParams) == 40 and ctypes.sizeof(qnnsystem._QnnTensor) == 144


# --- bundles ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bundle(build, tmp_path_factory) -> Path:
    """A real bundle (bundle build) of the tiny model's binaries and EPContext wrappers."""
    from tests.support.bundles import build as build_bundle

    npu = {soc: {"det": [build / "tiny" / soc / "tiny.bin", build / "tiny" / soc / "tiny_ctx.onnx"]} for soc in SOCS}
    inputs = {"cpu": {"det": build.parent / "tiny.onnx"}, "npu": npu, "root": build.parent}
    return build_bundle(tmp_path_factory.mktemp("inspect-bundle"), inputs, name="tiny")


def test_a_bundle_shows_every_context_binary_with_its_target(bundle, tmp_path):
    result = inspect.inspect(bundle)
    assert result.ok and result.kind == "bundle" and result.bundle == "tiny 1.0.0"
    assert sorted((b.soc, b.path) for b in result.binaries) == [("SM8550", "npu/SM8550/det.bin"),
                                                                 ("SM8750", "npu/SM8750/det.bin")]
    for b in result.binaries:
        assert b.context is not None and b.source == inspect.QNN_SYSTEM and b.graphs == ("det",)
        assert (b.context.dsp_arch, b.context.soc_model) == (b.target_arch, b.soc_id) and not b.warnings
        assert b.binary_soc == b.soc
    archive = tmp_path / "tiny-1.0.0.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(bundle, arcname=bundle.name)
    r = run("inspect", archive)
    assert r.exit_code == 0, r.output
    assert "bundle tiny 1.0.0" in r.output and "npu/SM8550/det.bin" in r.output and "[SM8750, target v79]" in r.output


def test_a_binary_under_the_wrong_target_is_a_warning(bundle, tmp_path):
    import shutil

    copy = tmp_path / "swapped"
    shutil.copytree(bundle, copy)
    a, b = copy / "npu" / "SM8550" / "det.bin", copy / "npu" / "SM8750" / "det.bin"
    a.write_bytes(b.read_bytes())  # the SM8750 binary where the SM8550 target expects its own
    report = next(x for x in inspect.inspect(copy).binaries if x.soc == "SM8550")
    assert report.warnings == ("compiled for soc_model 69 (SM8750), but the target is SM8550 (soc_model 43)",
                               "compiled for HTP v79, but the target SM8550 is v73")


def test_a_folder_that_is_not_a_bundle_or_a_fifo_is_bad_input(tmp_path):
    import os

    (tmp_path / "empty").mkdir()
    os.mkfifo(tmp_path / "fifo.bin")  # read, it would hang
    for path in (tmp_path / "empty", tmp_path / "nothing-here", tmp_path / "fifo.bin"):
        r = run("inspect", path)
        assert r.exit_code == EXIT_BAD_INPUT and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1


# --- slow: the demo model and PP-OCR, as compile builds them -------------------------------------------------------

@pytest.mark.slow
def test_the_demo_compiled_for_two_socs_reads_back(tmp_path):
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and libQnnSystem)")
    from qnndeploy.prepare import PrepareOptions, prepare_model

    model = tmp_path / "kws_demo.onnx"
    prepare_model(Path(qnndeploy.__file__).parent / "data" / "demo.onnx", model,
                  PrepareOptions(shapes={"features": [1, 1, 49, 10]}))
    build = compiled({"kws_demo": model}, tmp_path / "build")
    for soc in SOCS:
        info = qnnsystem.read_context(build / "kws_demo" / soc / "kws_demo.bin")
        assert_agrees(info, build, "kws_demo", soc, model)
        assert [(t.name, t.dims, t.dtype) for t in info.graphs[0].inputs] == [("features", (1, 1, 49, 10), "float32")]


@pytest.mark.slow
def test_ppocr_compiled_for_two_socs_reads_back(tmp_path):
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and libQnnSystem)")
    from qnndeploy.prepare import PrepareOptions, prepare_model
    from tests.support.ppocr import STATIC_SHAPES, model_path

    models = {}
    for name in ("cls", "rec"):
        models[name] = tmp_path / f"{name}.onnx"
        prepare_model(model_path(name), models[name], PrepareOptions(shapes={"x": STATIC_SHAPES[name]}))
    build = compiled(models, tmp_path / "build")
    for name, model in models.items():
        for soc in SOCS:
            info = qnnsystem.read_context(build / name / soc / f"{name}.bin")
            assert_agrees(info, build, name, soc, model)
            assert info.graphs[0].inputs[0].dims == tuple(STATIC_SHAPES[name])


@pytest.mark.slow
def test_a_shared_context_binary_lists_each_graph(tmp_path):
    """compile --share puts two graphs in one context binary: both are read, each named as its wrapper says."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and libQnnSystem)")
    from qnndeploy import compile as stage

    models = {"a": tiny(tmp_path / "a.onnx"), "b": tiny(tmp_path / "b.onnx")}
    summary = stage.compile_models(models, ["SM8750"], tmp_path / "build", stage.CompileOptions(use_cache=False,
                                                                                                shares={"pair": ["a",
                                                                                                                 "b"]}))
    assert all(j.status == "ok" for j in summary.jobs), [j.error for j in summary.jobs]
    folder = tmp_path / "build" / "pair" / "SM8750"
    info = qnnsystem.read_context(folder / "pair.bin")
    assert sorted(g.name for g in info.graphs) == sorted(partition_name(folder / f"{g}_ctx.onnx") for g in models)
    assert all([t.name for t in g.inputs] == ["x", "b"] for g in info.graphs)


def test_a_signature_matches_what_qnn_makes_of_it():
    """The rules compile and verify judge a binary's graph by: an ONNX scalar is a [1] in QNN (silero VAD's `sr`),
    names match after QNN's identifier rule, and dims and dtypes must agree."""
    from qnndeploy.qnn.contextcheck import signature_problem
    from qnndeploy.qnn.qnnsystem import GraphInfo, QnnTensorInfo

    def graph(*inputs: QnnTensorInfo) -> GraphInfo:
        y = QnnTensorInfo("y", (1, 1), "float32", 0, None)
        return GraphInfo("g", inputs, (y,), 0, 0, 0, 0, 0, None, None, None, 3)

    want = ([{"name": "sr", "dtype": "int32", "shape": []}, {"name": "x:0", "dtype": "float32", "shape": [1, 512]}],
            [{"name": "y", "dtype": "float32", "shape": [1, 1]}])
    ok = graph(QnnTensorInfo("sr", (1,), "int32", 0, None), QnnTensorInfo("x_0", (1, 512), "float32", 0, None))
    assert signature_problem(ok, "vad", want) is None
    wrong = graph(QnnTensorInfo("sr", (1,), "int32", 0, None), QnnTensorInfo("x_0", (1, 256), "float32", 0, None))
    assert "is it another graph's binary?" in (signature_problem(wrong, "vad", want) or "")


@pytest.mark.parametrize("name", ["model.onnx", "manifest.json", "libQnnHtp.so"])
def test_a_file_that_is_not_a_binary_is_bad_input(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"\x08\x07")
    r = run("inspect", path)
    assert r.exit_code == 2 and r.output.startswith(f"error: {path} is ") and "not a QNN context binary" in r.output

"""The weight-free reader: the same model as onnx.load gives, minus the data of big initializers, on real models
and on hand-made protobuf edge cases; and a one-line error, never a crash, for bytes that are not a model."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from qnndeploy.base.errors import QnnDeployError
from qnndeploy.model import onnxwire
from qnndeploy.model.onnxio import load_model
from tests.support.ppocr import model_path


def _mixed(tmp_path):
    """Big weights as raw_data, as packed float_data and as non-packed repeated floats (a foreign writer's
    choice), small constants in each form, and a graph field split in two (protobuf merges them)."""
    rng = np.random.default_rng(0)
    big = numpy_helper.from_array(rng.standard_normal((256, 128)).astype(np.float32), "big_raw")
    packed = h.make_tensor("big_packed", T.FLOAT, [128, 128], rng.standard_normal(128 * 128).astype(np.float32))
    small = numpy_helper.from_array(np.array([1, 128], np.int64), "shape")
    small_floats = h.make_tensor("scale", T.FLOAT, [1], [0.5])
    nodes = [h.make_node("MatMul", ["x", "big_raw"], ["a"], name="mm1"),
             h.make_node("MatMul", ["a", "big_packed"], ["b"], name="mm2"),
             h.make_node("Mul", ["b", "scale"], ["c"], name="scale"),
             h.make_node("Reshape", ["c", "shape"], ["y"], name="flat")]
    graph = h.make_graph(nodes, "mixed", [h.make_tensor_value_info("x", T.FLOAT, [1, 256])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 128])], [big, packed, small, small_floats])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    path = tmp_path / "mixed.onnx"
    path.write_bytes(model.SerializeToString())
    return model, path


def test_big_initializers_come_without_data_and_everything_else_is_kept(tmp_path):
    model, path = _mixed(tmp_path)
    got = load_model(path, weights=False)
    by_name = {t.name: t for t in got.graph.initializer}
    assert not by_name["big_raw"].raw_data and not by_name["big_packed"].float_data
    assert list(by_name["big_raw"].dims) == [256, 128] and by_name["big_packed"].data_type == T.FLOAT
    assert numpy_helper.to_array(by_name["shape"]).tolist() == [1, 128]  # small constants keep their values
    assert numpy_helper.to_array(by_name["scale"]).tolist() == [0.5]
    for field in ("node", "input", "output", "name"):
        assert getattr(got.graph, field) == getattr(model.graph, field)
    assert got.opset_import == model.opset_import and got.ir_version == model.ir_version
    assert got.ByteSize() < 2000 < model.ByteSize()


def test_non_packed_repeated_data_and_a_split_graph_field(tmp_path):
    """Repeated floats written one field each (wire type 5, legal protobuf) count as data too; two graph fields in
    one file are merged as protobuf merges them."""
    model, _ = _mixed(tmp_path)
    tensor = b"".join([bytes([0x08]) + bytes([64]),  # dims: 64
                       bytes([0x10, 0x01]),  # data_type FLOAT
                       *(bytes([0x25]) + np.float32(i).tobytes() for i in range(20_000)),  # float_data, not packed
                       bytes([0x42, 0x01]) + b"w"])  # name "w"
    init = bytes([0x2A]) + onnxwire._encode_varint(len(tensor)) + tensor  # GraphProto.initializer
    graph = model.graph.SerializeToString()
    data = b"".join([bytes([0x08, 0x09]),  # ir_version 9
                     bytes([0x3A]) + onnxwire._encode_varint(len(graph)) + graph,
                     bytes([0x3A]) + onnxwire._encode_varint(len(init)) + init,
                     *(bytes([0x42]) + onnxwire._encode_varint(len(o)) + o
                       for o in (x.SerializeToString() for x in model.opset_import))])
    path = tmp_path / "foreign.onnx"
    path.write_bytes(data)
    full = onnx.load(str(path))
    got = load_model(path, weights=False)
    assert [t.name for t in got.graph.initializer] == [t.name for t in full.graph.initializer]
    w = next(t for t in got.graph.initializer if t.name == "w")
    assert not w.float_data and list(w.dims) == [64]
    assert got.graph.node == full.graph.node


@pytest.mark.parametrize("name", ["det", "rec", "cls"])
def test_real_models_read_the_same_graph(name):
    """PP-OCR's det, rec and cls models (from the rapidocr wheel): the same nodes, inputs, outputs and initializer
    names, dims and types as onnx.load, with only the big initializers' data missing."""
    path = model_path(name)
    full, got = onnx.load(str(path)), load_model(path, weights=False)
    assert got.graph.node == full.graph.node and got.graph.input == full.graph.input
    assert got.graph.output == full.graph.output and got.graph.value_info == full.graph.value_info
    for a, b in zip(got.graph.initializer, full.graph.initializer, strict=True):
        assert (a.name, list(a.dims), a.data_type) == (b.name, list(b.dims), b.data_type)
        kept = len(b.raw_data) + 4 * len(b.float_data) + 8 * len(b.int64_data) <= onnxwire.SMALL_BYTES
        assert (a == b) if kept else not (a.raw_data or a.float_data)


def test_truncated_and_foreign_bytes_are_one_line_errors(tmp_path):
    """Every cut of a model, and bytes with a group wire type or an overlong varint: never a crash or a hang."""
    _, path = _mixed(tmp_path)
    data = path.read_bytes()
    cut = tmp_path / "cut.onnx"
    for end in list(range(1, 200)) + list(range(200, len(data), 997)):
        cut.write_bytes(data[:end])
        try:
            load_model(cut, weights=False)
        except QnnDeployError as e:
            assert "\n" not in str(e)
    for junk in (bytes([0x0B]) + b"x" * 10, b"\xff" * 12, bytes([0x3A, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F])):
        cut.write_bytes(junk)
        with pytest.raises(QnnDeployError, match=r"not a readable ONNX model|is not an ONNX model"):
            load_model(cut, weights=False)


# Runs the command as its child and prints the child's peak RSS (kB): the test process's own memory is not counted.
PEAK = ("import resource, subprocess, sys\nsubprocess.run(sys.argv[1:], check=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def test_an_epcontext_wrapper_is_written_from_the_graph_not_the_weights(tmp_path):
    """Deep `bundle verify` and AI Hub compiles wrap each context binary with the signature of its CPU model: that
    must not read the model's weights, whose size can be gigabytes."""
    weights = numpy_helper.from_array(np.zeros((8192, 8192), np.float32), "w")  # 268 MB
    graph = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"])], "big",
                         [h.make_tensor_value_info("x", T.FLOAT, [1, 8192])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 8192])], [weights])
    model = tmp_path / "big.onnx"
    model.write_bytes(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString())
    del weights, graph
    wrap = (f"from pathlib import Path\nfrom qnndeploy.qnn import epcontext\n"
            f"epcontext.wrap('ctx.bin', 'big', Path({str(model)!r}), Path({str(tmp_path / 'ctx.onnx')!r}))")
    done = subprocess.run([sys.executable, "-c", PEAK, sys.executable, "-c", wrap], capture_output=True, text=True,
                          check=True)
    peak_mb = int(done.stdout.split()[-1]) / 1024
    wrapper = onnx.load(str(tmp_path / "ctx.onnx"))
    assert [n.op_type for n in wrapper.graph.node] == ["EPContext"]
    assert [i.name for i in wrapper.graph.input] == ["x"] and [o.name for o in wrapper.graph.output] == ["y"]
    assert peak_mb < 150, f"wrapping a {model.stat().st_size / 1e6:.0f} MB model peaked at {peak_mb:.0f} MB"

"""onnx's checker and version converter on models of any size: the weights are set aside while they run (they pass
the whole model through one protobuf, which refuses 2 GB and more), and the result is what they give the whole
model. Whisper large-v3's 3.0 and 3.2 GB graphs (benchmarks/whisper_large.py) are where a whole pass failed."""

from __future__ import annotations

import onnx
from onnx import version_converter

from qnndeploy.model.onnxio import ASIDE_BYTES, check_model, convert_opset
from tests.support import synth_models as sm


def test_a_converted_model_is_what_the_converter_makes_of_the_whole_model():
    model = sm.gelu_erf(width=2048)  # two 128 KB weights, set aside, and a ReduceMean whose axes opset 18 moved
    assert sum(len(t.raw_data) > ASIDE_BYTES for t in model.graph.initializer) == 2
    whole = version_converter.convert_version(model, 21)
    convert_opset(model, 21)
    assert model.SerializeToString(deterministic=True) == whole.SerializeToString(deterministic=True)
    convert_opset(model, 18)  # never down
    assert model.opset_import[0].version == 21


def test_the_checker_sees_the_graph_and_the_weights_are_put_back():
    model = sm.gelu_erf(width=4096)  # 256 KB weights: set aside
    before = model.SerializeToString(deterministic=True)
    check_model(model)
    assert model.SerializeToString(deterministic=True) == before
    broken = sm.gelu_erf(width=4096)
    broken.graph.node[2].op_type = "NoSuchOp"
    try:
        check_model(broken)
    except onnx.checker.ValidationError as e:
        assert "NoSuchOp" in str(e)
    else:
        raise AssertionError("the checker passed an unknown op")
    assert broken.graph.initializer[0].raw_data == sm.gelu_erf(width=4096).graph.initializer[0].raw_data

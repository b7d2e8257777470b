"""The clamp check (model/clamps.py) on a graph whose weights lie in an external file, as a large part's do: the
tensors an input drives past the range the calibration samples gave them, and none for an input like them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qnndeploy.model.clamps import beyond_calibration


def _model(folder: Path) -> Path:
    weight = numpy_helper.from_array(np.eye(4, dtype=np.float32) * 2, "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"]),
         helper.make_node("Cast", ["z"], ["n"], to=TensorProto.INT64)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("n", TensorProto.INT64, [1, 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    return path


def test_the_tensors_past_their_calibrated_range_are_named_in_graph_order(tmp_path: Path) -> None:
    path = _model(tmp_path)
    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(0)
    for k in range(6):
        np.savez(calib / f"{k:03d}.npz", x=rng.uniform(-1, 1, (1, 4)).astype(np.float32))
    assert (tmp_path / "m.onnx.data").is_file()

    found = beyond_calibration(path, {"x": np.full((1, 4), 0.5, np.float32)}, calib)
    assert found == []
    found = beyond_calibration(path, {"x": np.array([[-8.0, 0.1, 0.1, 0.1]], np.float32)}, calib)
    assert [c.tensor for c in found] == ["x", "y"]  # z (Relu) stays within 0..its max; n is no float
    x, y = found
    assert x.value == -8.0 and x.calibrated[0] < 0 < x.calibrated[1] and x.factor == -8.0 / x.calibrated[0] > 8
    assert y.value == -16.0 and y.factor == -16.0 / y.calibrated[0]
    assert beyond_calibration(path, {"x": np.array([[-8.0, 0.1, 0.1, 0.1]], np.float32)}, calib, limit=1e6) == []

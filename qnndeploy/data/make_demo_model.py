"""Regenerates demo.onnx, the licence-clean model `qnndeploy demo` runs: written here, seeded weights, no training.

A small keyword-spotting-shaped CNN (49 frames x 10 MFCC -> 12 classes) exported the way CPU models usually are:
with a dynamic batch dimension, which the NPU cannot take, so the demo has something real for `prepare` to fix.
Run: python qnndeploy/data/make_demo_model.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(20261129)

    def weight(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), name)

    inits = [weight("c1.w", (32, 1, 3, 3)), weight("c1.b", (32,)), weight("c2.w", (64, 32, 3, 3)),
             weight("c2.b", (64,)), weight("fc.w", (64, 12)), weight("fc.b", (12,))]
    nodes = [
        helper.make_node("Conv", ["features", "c1.w", "c1.b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "c2.w", "c2.b"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("MatMul", ["flat", "fc.w"], ["mm"]),
        helper.make_node("Add", ["mm", "fc.b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "kws_demo",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 1, 49, 10])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 12])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="qnndeploy")
    model.ir_version = 8
    helper.set_model_props(model, {"license": "Apache-2.0", "source": "qnndeploy/data/make_demo_model.py"})
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    onnx.save(build(), Path(__file__).with_name("demo.onnx"))

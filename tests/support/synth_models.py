"""Small synthetic ONNX models, one per readiness finding, built with onnx.helper so each edge case is exact.

Every function returns a ModelProto (or writes files and returns the model path) and is deterministic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

OPSET = 17


def _model(nodes, inputs, outputs, inits=(), name="g", check=True, opset: int = OPSET) -> onnx.ModelProto:
    graph = h.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], producer_name="synth_models")
    model.ir_version = 9
    if check:  # onnx's checker looks for external data relative to the working folder
        onnx.checker.check_model(model)
    return model


def _weight(name: str, shape, seed: int = 0, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(dtype), name)


def _vi(name, elem, shape):
    return h.make_tensor_value_info(name, elem, shape)


def static_mlp(batch: int | str = 1, width: int = 8) -> onnx.ModelProto:
    """MatMul + Add + Relu on [batch, 16]: ready when batch is 1; `batch="N"` makes the first dim dynamic."""
    return _model(
        [h.make_node("MatMul", ["x", "W"], ["a"], name="mm"),
         h.make_node("Add", ["a", "B"], ["b"], name="add"),
         h.make_node("Relu", ["b"], ["y"], name="relu")],
        [_vi("x", T.FLOAT, [batch, 16])], [_vi("y", T.FLOAT, [batch, width])],
        [_weight("W", [16, width]), _weight("B", [width], 1)], name="mlp")


def int64_io() -> onnx.ModelProto:
    """Token ids in (int64), embedding lookup, argmax out (int64): both ends need int32 wrappers."""
    return _model(
        [h.make_node("Gather", ["E", "ids"], ["e"], name="embed"),
         h.make_node("Relu", ["e"], ["emb"], name="relu"),
         h.make_node("ArgMax", ["emb"], ["best"], axis=-1, keepdims=0, name="argmax")],
        [_vi("ids", T.INT64, [1, 8])],
        [_vi("emb", T.FLOAT, [1, 8, 16]), _vi("best", T.INT64, [1, 8])],
        [_weight("E", [32, 16])], name="embed")


def if_on_scalar_input() -> onnx.ModelProto:
    """An If driven by a scalar `sample_rate` input: freezing that input folds the If away."""
    then_branch = h.make_graph([h.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [],
                               [_vi("t", T.FLOAT, [1, 4])])
    else_branch = h.make_graph([h.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [],
                               [_vi("e", T.FLOAT, [1, 4])])
    return _model(
        [h.make_node("Equal", ["sample_rate", "sr16k"], ["is16k"], name="eq"),
         h.make_node("If", ["is16k"], ["y"], then_branch=then_branch, else_branch=else_branch, name="branch")],
        [_vi("x", T.FLOAT, [1, 4]), _vi("sample_rate", T.INT64, [])], [_vi("y", T.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.array(16000, np.int64), "sr16k")], name="if_sr")


def if_on_data() -> onnx.ModelProto:
    """An If whose condition is computed from the data tensor itself: no freeze can remove it."""
    then_branch = h.make_graph([h.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [],
                               [_vi("t", T.FLOAT, [1, 64])])
    else_branch = h.make_graph([h.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [],
                               [_vi("e", T.FLOAT, [1, 64])])
    return _model(
        [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
         h.make_node("Greater", ["s", "zero"], ["pos"], name="gt"),
         h.make_node("If", ["pos"], ["y"], then_branch=then_branch, else_branch=else_branch, name="branch")],
        [_vi("x", T.FLOAT, [1, 64])], [_vi("y", T.FLOAT, [1, 64])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")], name="if_data")


def qdq() -> onnx.ModelProto:
    """int8 quantization already in the ONNX: QuantizeLinear/DequantizeLinear around a MatMul."""
    return _model(
        [h.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q_x"),
         h.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq_x"),
         h.make_node("DequantizeLinear", ["Wq", "ws", "z"], ["Wd"], name="dq_w"),
         h.make_node("MatMul", ["xd", "Wd"], ["y"], name="mm")],
        [_vi("x", T.FLOAT, [1, 16])], [_vi("y", T.FLOAT, [1, 8])],
        [numpy_helper.from_array(np.array(0.02, np.float32), "s"),
         numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
         numpy_helper.from_array(np.array(128, np.uint8), "z"),
         numpy_helper.from_array(np.random.default_rng(0).integers(0, 255, (16, 8)).astype(np.uint8), "Wq")],
        name="qdq")


def float64() -> onnx.ModelProto:
    """A double-precision model: the HTP has no float64."""
    return _model(
        [h.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
        [_vi("x", T.DOUBLE, [1, 16])], [_vi("y", T.DOUBLE, [1, 8])], [_weight("W", [16, 8], dtype=np.float64)],
        name="f64")


def unsupported_op() -> onnx.ModelProto:
    """MatMul -> Det (no HTP kernel) and MatMul -> Relu: one node must stay on CPU."""
    return _model(
        [h.make_node("MatMul", ["x", "W"], ["a"], name="mm"),
         h.make_node("Det", ["a"], ["d"], name="determinant"),
         h.make_node("Relu", ["a"], ["r"], name="relu")],
        [_vi("x", T.FLOAT, [1, 8, 8])], [_vi("d", T.FLOAT, [1]), _vi("r", T.FLOAT, [1, 8, 8])],
        [_weight("W", [8, 8])], name="det")


def only_unsupported() -> onnx.ModelProto:
    """Nothing the HTP runs: the partitioner keeps the whole graph on the CPU."""
    return _model([h.make_node("Det", ["x"], ["d"], name="determinant")],
                  [_vi("x", T.FLOAT, [1, 8, 8])], [_vi("d", T.FLOAT, [1])], name="det_only")


def save_with_external_data(model: onnx.ModelProto, path: Path) -> Path:
    """Save with every initializer in a side file, the layout of models over 2 GB (`model` is left as it was)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.save(copy, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location=path.name + ".weights", size_threshold=0)
    return path


def large_embedding(path: Path, rows: int = 1_100_000, dim: int = 1024, matmul: bool = False) -> Path:
    """A 1.1 B-parameter embedding table in external data, written as a sparse file (no real disk use); with
    `matmul`, the same table as the [rows, dim] weight of a MatMul instead of a Gather's.

    The input has a dynamic batch so `check` reads only the graph (sizes come from the tensor dims).
    """
    table = T()
    table.name = "E"
    table.data_type = T.FLOAT
    table.dims.extend([rows, dim])
    table.data_location = T.EXTERNAL
    data = path.with_name(path.name + ".weights")
    nbytes = rows * dim * 4
    for key, value in (("location", data.name), ("offset", "0"), ("length", str(nbytes))):
        entry = table.external_data.add()
        entry.key, entry.value = key, value
    node = h.make_node("MatMul", ["x", "E"], ["y"], name="project") if matmul else \
        h.make_node("Gather", ["E", "ids"], ["y"], name="embed")
    graph = h.make_graph([node], "big", [_vi("x", T.FLOAT, ["batch", 8, rows]) if matmul else
                                         _vi("ids", T.INT64, ["batch", 8])],
                         [_vi("y", T.FLOAT, ["batch", 8, dim])], initializer=[table])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])
    model.ir_version = 9
    with data.open("wb") as f:
        f.truncate(nbytes)
    onnx.save(model, path)
    return path


def if_on_shape_and_setting(setting: bool = True) -> onnx.ModelProto:
    """silero-vad's pattern: an If whose condition comes from the *shape* of the audio input (dynamic length) and,
    with `setting`, from a scalar `sr` input. Fixing the length and freezing sr folds it."""
    then_branch = h.make_graph([h.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [],
                               [_vi("t", T.FLOAT, [1, "len"])])
    else_branch = h.make_graph([h.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [],
                               [_vi("e", T.FLOAT, [1, "len"])])
    nodes = [h.make_node("Shape", ["x"], ["shape"], name="shape"),
             h.make_node("Gather", ["shape", "one"], ["length"], axis=0, name="length"),
             h.make_node("Greater", ["length", "limit"], ["long"], name="is_long")]
    inputs = [_vi("x", T.FLOAT, [1, "len"])]
    cond = "long"
    if setting:
        nodes += [h.make_node("Equal", ["sr", "sr16k"], ["is16k"], name="is_16k"),
                  h.make_node("And", ["long", "is16k"], ["both"], name="both")]
        inputs.append(_vi("sr", T.INT64, []))
        cond = "both"
    nodes.append(h.make_node("If", [cond], ["y"], then_branch=then_branch, else_branch=else_branch, name="branch"))
    return _model(nodes, inputs, [_vi("y", T.FLOAT, [1, "len"])],
                  [numpy_helper.from_array(np.array(1, np.int64), "one"),
                   numpy_helper.from_array(np.array(256, np.int64), "limit"),
                   numpy_helper.from_array(np.array(16000, np.int64), "sr16k")], name="if_shape")


def rnn_state(static: bool = False) -> onnx.ModelProto:
    """A GRU step with its state input [layers=2, batch, 8]: dim 0 is the layer count, not a batch. With the
    symbolic `batch` shared by x and h0, fixing x fixes h0."""
    b = 1 if static else "batch"
    hidden = 8
    return _model(
        [h.make_node("Slice", ["h0", "start", "end"], ["h_first"], name="first_layer"),
         h.make_node("GRU", ["x", "W", "R", "", "", "h_first"], ["y", "hn1"], hidden_size=hidden, name="gru"),
         h.make_node("Concat", ["hn1", "hn1"], ["hn"], axis=0, name="both_layers")],
        [_vi("x", T.FLOAT, [5, b, 4]), _vi("h0", T.FLOAT, [2, b, hidden])],
        [_vi("y", T.FLOAT, [5, 1, b, hidden]), _vi("hn", T.FLOAT, [2, b, hidden])],
        [_weight("W", [1, 3 * hidden, 4]), _weight("R", [1, 3 * hidden, hidden], 1),
         numpy_helper.from_array(np.array([0], np.int64), "start"),
         numpy_helper.from_array(np.array([1], np.int64), "end")], name="rnn")


def wrong_output_shape() -> onnx.ModelProto:
    """ddddocr's flaw: the output is declared [1, seqlen] but the graph computes [4, 1, 8]."""
    return _model(
        [h.make_node("MatMul", ["x", "W"], ["a"], name="mm"),
         h.make_node("Transpose", ["a"], ["y"], perm=[1, 0, 2], name="time_major")],
        [_vi("x", T.FLOAT, [1, 4, 16])], [_vi("y", T.FLOAT, [1, "seqlen"])], [_weight("W", [16, 8])], name="ocr")


def gelu_erf(width: int = 16) -> onnx.ModelProto:
    """The unfused GELU of exports before opset 20 (x * 0.5 * (1 + erf(x / sqrt 2))) between two MatMuls, and a
    ReduceMean with the axes attribute that opset 18 moved to an input: the fusion must convert it."""
    return _model(
        [h.make_node("MatMul", ["x", "W1"], ["a"], name="fc1"),
         h.make_node("Div", ["a", "sqrt2"], ["d"], name="gelu_div"),
         h.make_node("Erf", ["d"], ["e"], name="gelu_erf"),
         h.make_node("Add", ["e", "one"], ["p"], name="gelu_add"),
         h.make_node("Mul", ["a", "p"], ["m"], name="gelu_mul"),
         h.make_node("Mul", ["m", "half"], ["g"], name="gelu_half"),
         h.make_node("MatMul", ["g", "W2"], ["z"], name="fc2"),
         h.make_node("ReduceMean", ["z"], ["y"], axes=[-1], keepdims=1, name="mean")],
        [_vi("x", T.FLOAT, [1, 8, 16])], [_vi("y", T.FLOAT, [1, 8, 1])],
        [_weight("W1", [16, width]), _weight("W2", [width, 16], 1),
         numpy_helper.from_array(np.array(np.sqrt(2), np.float32), "sqrt2"),
         numpy_helper.from_array(np.array(1, np.float32), "one"),
         numpy_helper.from_array(np.array(0.5, np.float32), "half")], name="gelu")


def token_types(rows: int = 2) -> onnx.ModelProto:
    """A BERT-style token type embedding: token_type_ids (int64) index a `rows`-row table through a Cast and an
    Unsqueeze; any id >= rows fails in the Gather."""
    return _model(
        [h.make_node("Unsqueeze", ["token_type_ids", "axis0"], ["ids"], name="batch_axis"),
         h.make_node("Gather", ["types", "ids"], ["emb"], axis=0, name="token_type_embedding"),
         h.make_node("Softmax", ["emb"], ["probs"], axis=-1, name="softmax")],
        [_vi("token_type_ids", T.INT64, [1, 6])], [_vi("probs", T.FLOAT, [1, 1, 6, 4])],
        [_weight("types", [rows, 4]), numpy_helper.from_array(np.array([0], np.int64), "axis0")], name="types")


def reshape_from_shape(width: int = 64) -> onnx.ModelProto:
    """An exporter's flatten: the target shape of a Reshape computed from the input's Shape (Gather, Mul,
    Unsqueeze, Concat) after a MatMul whose weights (16 x `width` floats) make external data worth testing."""
    return _model(
        [h.make_node("MatMul", ["x", "W"], ["a"], name="fc"),
         h.make_node("Shape", ["x"], ["shape"], name="shape"),
         h.make_node("Gather", ["shape", "one"], ["length"], axis=0, name="length"),
         h.make_node("Mul", ["length", "width"], ["flat"], name="flat"),
         h.make_node("Unsqueeze", ["flat", "axis0"], ["flat1"], name="flat1"),
         h.make_node("Concat", ["batch", "flat1"], ["target"], axis=0, name="target"),
         h.make_node("Reshape", ["a", "target"], ["y"], name="flatten")],
        [_vi("x", T.FLOAT, [1, "len", 16])], [_vi("y", T.FLOAT, [1, "flat"])],
        [_weight("W", [16, width]), numpy_helper.from_array(np.array(1, np.int64), "one"),
         numpy_helper.from_array(np.array(width, np.int64), "width"),
         numpy_helper.from_array(np.array([0], np.int64), "axis0"),
         numpy_helper.from_array(np.array([1], np.int64), "batch")], name="flatten")


def external_weights(location: str) -> onnx.ModelProto:
    """x + w, with w's 16 bytes declared in the external data file `location` (which is not written)."""
    w = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = T.EXTERNAL
    w.external_data.add(key="location", value=location)
    w.external_data.add(key="length", value="16")
    graph = h.make_graph([h.make_node("Add", ["x", "w"], ["y"])], "g", [_vi("x", T.FLOAT, [1, 4])],
                         [_vi("y", T.FLOAT, [1, 4])], [w])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def log_front(skip: bool = False) -> onnx.ModelProto:
    """x [1, 64] -> Log -> MatMul -> Relu [-> Add(the Log again): a skip past the Relu] -> MatMul -> y [1, 16]: a
    log-mel style front end, which fp16 cannot feed tiny values (below 6.1e-5); the part `prepare --split-at`
    leaves on the CPU."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.1).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((64, 16)) * 0.1).astype(np.float32), "w2")
    nodes = [h.make_node("Log", ["x"], ["logx"], name="log"), h.make_node("MatMul", ["logx", "w1"], ["m1"], name="mm1"),
             h.make_node("Relu", ["m1"], ["r1"], name="relu")]
    if skip:
        nodes.append(h.make_node("Add", ["r1", "logx"], ["skip"], name="skip"))
    nodes.append(h.make_node("MatMul", ["skip" if skip else "r1", "w2"], ["y"], name="mm2"))
    return _model(nodes, [_vi("x", T.FLOAT, [1, 64])], [_vi("y", T.FLOAT, [1, 16])], [w1, w2], name="front")


def long_lstm(steps: int = 1000, hidden: int = 128) -> onnx.ModelProto:
    """Two bidirectional LSTM layers over `steps` time steps: the HTP compiler unrolls every step of both
    directions (4 * steps cell steps), so partitioning it takes minutes on a 2-core host."""
    nodes, width = [], 16
    inits = []
    x = "x"
    for layer in range(2):
        inits += [_weight(f"W{layer}", [2, 4 * hidden, width], layer), _weight(f"R{layer}", [2, 4 * hidden, hidden], 9)]
        nodes += [h.make_node("LSTM", [x, f"W{layer}", f"R{layer}"], [f"y{layer}"], hidden_size=hidden,
                              direction="bidirectional", name=f"lstm{layer}"),
                  h.make_node("Reshape", [f"y{layer}", "flat"], [f"h{layer}"], name=f"merge{layer}")]
        x, width = f"h{layer}", 2 * hidden
    inits.append(numpy_helper.from_array(np.array([steps, 1, 2 * hidden], np.int64), "flat"))
    return _model(nodes, [_vi("x", T.FLOAT, [steps, 1, 16])], [_vi("h1", T.FLOAT, [steps, 1, 2 * hidden])], inits,
                  name="long_lstm")


def shared_constant() -> onnx.ModelProto:
    """x [1, 8] -> Add(c) -> Relu -> Mul(c) -> y, with c one scalar Constant node read on both sides of a cut at the
    Relu's output, as PP-OCR's cls model reads its `Constant@1` after onnxsim."""
    return _model(
        [h.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(3, np.float32)), name="c"),
         h.make_node("Add", ["x", "c"], ["a"], name="add"), h.make_node("Relu", ["a"], ["r"], name="relu"),
         h.make_node("Mul", ["r", "c"], ["y"], name="mul")],
        [_vi("x", T.FLOAT, [1, 8])], [_vi("y", T.FLOAT, [1, 8])], name="shared")


def gelu_conv(length: int | str = 50) -> onnx.ModelProto:
    """Conv1d -> erf GELU -> Conv1d as torch's opset-17 export writes it (Div, Erf, Add, Mul, then Mul by 0.5): the
    QNN EP fuses the five into a GELU; onnxsim folds the 0.5 into the second Conv's weights, and the bare Erf left
    runs on the CPU."""
    return _model(
        [h.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1], name="conv1"),
         h.make_node("Div", ["a", "sqrt2"], ["d"], name="gelu_div"),
         h.make_node("Erf", ["d"], ["e"], name="gelu_erf"),
         h.make_node("Add", ["e", "one"], ["p"], name="gelu_add"),
         h.make_node("Mul", ["a", "p"], ["m"], name="gelu_mul"),
         h.make_node("Mul", ["m", "half"], ["g"], name="gelu_half"),
         h.make_node("Conv", ["g", "w2", "b2"], ["y"], pads=[1, 1], name="conv2")],
        [_vi("x", T.FLOAT, [1, 16, length])], [_vi("y", T.FLOAT, [1, 16, length])],
        [_weight("w1", [32, 16, 3]), _weight("b1", [32], 1), _weight("w2", [16, 32, 3], 2), _weight("b2", [16], 3),
         numpy_helper.from_array(np.array(np.sqrt(2), np.float32), "sqrt2"),
         numpy_helper.from_array(np.array(1, np.float32), "one"),
         numpy_helper.from_array(np.array(0.5, np.float32), "half")], name="gelu_conv")


def computed_floor() -> onnx.ModelProto:
    """A mel front end's dB floor: Clip(x, min=max(x) - 80), whose min is computed (the HTP runs a Clip with constant
    bounds only), then three MatMul/Relu layers the HTP runs."""
    nodes = [h.make_node("ReduceMax", ["x"], ["peak"], keepdims=0, name="peak"),
             h.make_node("Sub", ["peak", "range"], ["floor"], name="floor"),
             h.make_node("Clip", ["x", "floor"], ["clipped"], name="clip")]
    last = "clipped"
    for i in range(3):
        nodes += [h.make_node("MatMul", [last, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  h.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}")]
        last = f"r{i}"
    return _model(nodes, [_vi("x", T.FLOAT, [1, 16, 64])], [_vi("r2", T.FLOAT, [1, 16, 64])],
                  [*(_weight(f"w{i}", [64, 64], i) for i in range(3)),
                   numpy_helper.from_array(np.array(80, np.float32), "range")], name="floor")


def if_reading_outer() -> onnx.ModelProto:
    """An If on the data whose then-branch reads an initializer of the outer graph: ONNX Runtime's partitioning for
    the QNN EP fails on it with INVALID_GRAPH ("Nodes in a graph must be topologically sorted")."""
    then_branch = h.make_graph([h.make_node("MatMul", ["a", "w2"], ["t"], name="then_mm")], "then", [],
                               [_vi("t", T.FLOAT, [1, 64])])
    else_branch = h.make_graph([h.make_node("Neg", ["a"], ["e"], name="else_neg")], "else", [],
                               [_vi("e", T.FLOAT, [1, 64])])
    return _model(
        [h.make_node("MatMul", ["x", "w1"], ["a"], name="mm"),
         h.make_node("ReduceSum", ["a"], ["s"], keepdims=0, name="sum"),
         h.make_node("Greater", ["s", "zero"], ["pos"], name="gt"),
         h.make_node("If", ["pos"], ["y"], then_branch=then_branch, else_branch=else_branch, name="branch")],
        [_vi("x", T.FLOAT, [1, 64])], [_vi("y", T.FLOAT, [1, 64])],
        [_weight("w1", [64, 64]), _weight("w2", [64, 64], 1), numpy_helper.from_array(np.array(0, np.float32), "zero")],
        name="if_outer")


def float64_tail() -> onnx.ModelProto:
    """A network in float32, then a float64 decoding at its end (as SwiftF0's pitch): (MatMul -> Relu) x 2 -> ArgMax
    (an int64 index) -> Cast to float64 -> Mul by a float64 step -> pitch; the last Relu's output is a second
    output."""
    step = numpy_helper.from_array(np.array([2.5], np.float64), "step")
    return _model(
        [h.make_node("MatMul", ["x", "W0"], ["a0"], name="mm0"),
         h.make_node("Relu", ["a0"], ["h0"], name="relu0"),
         h.make_node("MatMul", ["h0", "W"], ["a"], name="mm"),
         h.make_node("Relu", ["a"], ["act"], name="relu"),
         h.make_node("ArgMax", ["act"], ["bin"], axis=1, keepdims=0, name="argmax"),
         h.make_node("Cast", ["bin"], ["bin64"], to=T.DOUBLE, name="to_double"),
         h.make_node("Mul", ["bin64", "step"], ["pitch"], name="scale")],
        [_vi("x", T.FLOAT, [1, 16])], [_vi("pitch", T.DOUBLE, [1]), _vi("act", T.FLOAT, [1, 32])],
        [_weight("W0", [16, 16], 1), _weight("W", [16, 32]), step], name="f64")


def residual_stack(layers: int = 6, width: int = 64, dtype=np.float16, store=None) -> onnx.ModelProto:
    """x [1, width] float32 -> Cast -> `layers` x (MatMul by a [width, width] weight, Relu), the input of every
    second layer added back after it (a skip connection) -> Cast -> y float32: an fp16 model with float32 I/O, as
    converters that keep I/O types write it; weights scaled so values stay near 1. Its weights grow with
    layers x width² and split anywhere. `store(array, name)` makes each weight's TensorProto (default: inside the
    model; benchmarks/large_model.py writes them to a data file one at a time)."""
    elem = T.FLOAT16 if dtype == np.float16 else T.FLOAT
    nodes = [h.make_node("Cast", ["x"], ["h0"], to=elem, name="cast_in")]
    inits = []
    for i in range(layers):
        w = (np.random.default_rng(i).standard_normal((width, width)) / np.sqrt(width)).astype(dtype)
        inits.append((store or numpy_helper.from_array)(w, f"w{i}"))
        nodes += [h.make_node("MatMul", [f"h{i}", f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  h.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}")]
        if i % 2:
            nodes.append(h.make_node("Add", [f"r{i}", f"h{i - 1}"], [f"h{i + 1}"], name=f"skip{i}"))
        else:
            nodes.append(h.make_node("Identity", [f"r{i}"], [f"h{i + 1}"], name=f"id{i}"))
    nodes.append(h.make_node("Cast", [f"h{layers}"], ["y"], to=T.FLOAT, name="cast_out"))
    return _model(nodes, [_vi("x", T.FLOAT, [1, width])], [_vi("y", T.FLOAT, [1, width])], inits, name="stack",
                  check=store is None)


# --- graphs the compile, validate, diagnose and inspect tests share (each writes its model) ---------------

def save_graph(graph, path: Path, metadata: dict[str, str] | None = None) -> Path:
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    for key, value in (metadata or {}).items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, path)
    return path


def sinh_graph(path: Path) -> Path:
    """Relu then Sinh: the QNN HTP has no Sinh, so with CPU fallback off the compile must fail naming it."""
    nodes = [h.make_node("Relu", ["x"], ["r"], name="relu0"), h.make_node("Sinh", ["r"], ["y"], name="bad0")]
    graph = h.make_graph(nodes, "sinh", [h.make_tensor_value_info("x", T.FLOAT, [1, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 8])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
    return path


def tiny(path: Path) -> Path:
    """Relu and Add on two float inputs, and an ArgMax with an int64 output: three dtypes, two inputs."""
    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("Add", ["r", "b"], ["y"]),
             h.make_node("ArgMax", ["y"], ["idx"], axis=1, keepdims=1)]
    graph = h.make_graph(nodes, "tiny", [h.make_tensor_value_info("x", T.FLOAT, [1, 8]),
                                         h.make_tensor_value_info("b", T.FLOAT, [1, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 8]),
                          h.make_tensor_value_info("idx", T.INT64, [1, 1])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


FRAME, LENGTH = 400, 48000  # 25 ms frames of 3 s of 16 kHz audio


def log_energy_graph() -> onnx.GraphProto:
    """A log-energy front end computed in the graph from raw audio: frames, mean square, times 1e-3, plus 1e-10,
    log. Speech has pauses whose energy times 1e-3 falls below fp16's subnormal range; random input never does."""
    return h.make_graph(
        [h.make_node("Reshape", ["audio", "shape"], ["frames"]), h.make_node("Mul", ["frames", "frames"], ["sq"]),
         h.make_node("ReduceMean", ["sq"], ["energy"], axes=[2], keepdims=0),
         h.make_node("Mul", ["energy", "gain"], ["small"]), h.make_node("Add", ["small", "eps"], ["floored"]),
         h.make_node("Log", ["floored"], ["log_energy"])], "logenergy",
        [h.make_tensor_value_info("audio", T.FLOAT, [1, LENGTH])],
        [h.make_tensor_value_info("log_energy", T.FLOAT, [1, LENGTH // FRAME])],
        [h.make_tensor("shape", T.INT64, [3], [1, LENGTH // FRAME, FRAME]), h.make_tensor("gain", T.FLOAT, [], [1e-3]),
         h.make_tensor("eps", T.FLOAT, [], [1e-10])])


def scalenorm_after_gain(gain: float = 700.0) -> onnx.ModelProto:
    """A pose model's fault in nine lines: a feature of values near `gain` (tanh times a learned scale) normalized
    by its L2 norm (ScaleNorm). The row's sum of squares (~1e7) is far above fp16's 65504, so the HTP's ReduceL2
    overflows; `feat` is where diagnose advised to cut."""
    rng = np.random.default_rng(0)
    return _model(
        [h.make_node("MatMul", ["x", "W1"], ["a"], name="embed"),
         h.make_node("Tanh", ["a"], ["t"], name="tanh"),
         h.make_node("Mul", ["t", "g"], ["feat"], name="gain"),
         h.make_node("ReduceL2", ["feat", "axes"], ["norm"], name="scalenorm_l2", keepdims=1),
         h.make_node("Div", ["feat", "norm"], ["unit"], name="scalenorm_div"),
         h.make_node("MatMul", ["unit", "W2"], ["y"], name="proj")],
        [_vi("x", T.FLOAT, [1, 32])], [_vi("y", T.FLOAT, [1, 16])],
        [numpy_helper.from_array((rng.standard_normal((32, 64)) * 0.3).astype(np.float32), "W1"),
         numpy_helper.from_array(np.full((64,), gain, np.float32), "g"),
         numpy_helper.from_array((rng.standard_normal((64, 16)) * 0.3).astype(np.float32), "W2"),
         numpy_helper.from_array(np.array([-1], np.int64), "axes")], opset=18)


def offset_free_scalenorm(scale: float, gain: float = 700.0) -> onnx.ModelProto:
    """scalenorm_after_gain with diagnose's rescale done: the norm of feat / scale, times scale (the same values on
    the CPU; the sum of squares now fits fp16)."""
    model = scalenorm_after_gain(gain)
    graph = model.graph
    nodes = list(graph.node)
    l2 = next(i for i, n in enumerate(nodes) if n.op_type == "ReduceL2")
    nodes[l2:l2 + 1] = [h.make_node("Div", ["feat", "s"], ["small"], name="shrink"),
                        h.make_node("ReduceL2", ["small", "axes"], ["small_norm"], name="scalenorm_l2", keepdims=1),
                        h.make_node("Mul", ["small_norm", "s"], ["norm"], name="grow")]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.append(numpy_helper.from_array(np.array(scale, np.float32), "s"))
    onnx.checker.check_model(model)
    return model


def masked_by_length(frames: int = 16) -> onnx.ModelProto:
    """A CTC-style graph with a length input: frames at positions >= x_lens are masked to -inf before a softmax.
    Any length from 1 to `frames` runs as the app runs it; a length of 0 masks every frame and the CPU itself
    computes NaN."""
    return _model(
        [h.make_node("Range", ["start", "limit", "delta"], ["positions"], name="positions"),
         h.make_node("Unsqueeze", ["x_lens", "one"], ["lens"], name="lens_col"),
         h.make_node("Less", ["positions", "lens"], ["valid"], name="valid_frames"),
         h.make_node("MatMul", ["x", "W"], ["proj"], name="proj"),
         h.make_node("ReduceSum", ["proj", "last"], ["scores"], name="frame_scores", keepdims=0),
         h.make_node("Where", ["valid", "scores", "low"], ["masked"], name="mask"),
         h.make_node("Softmax", ["masked"], ["attn"], name="attend", axis=-1),
         h.make_node("Mul", ["attn", "scores"], ["weighted"], name="weigh"),
         h.make_node("ReduceSum", ["weighted", "last"], ["pooled"], name="pool", keepdims=0)],
        [_vi("x", T.FLOAT, [1, frames, 4]), _vi("x_lens", T.INT32, [1])],
        [_vi("attn", T.FLOAT, [1, frames]), _vi("pooled", T.FLOAT, [1])],
        [numpy_helper.from_array(np.array(0, np.int32), "start"),
         numpy_helper.from_array(np.array(frames, np.int32), "limit"),
         numpy_helper.from_array(np.array(1, np.int32), "delta"),
         numpy_helper.from_array(np.array([1], np.int64), "one"),
         numpy_helper.from_array(np.array([-1], np.int64), "last"),
         numpy_helper.from_array(np.array(-np.inf, np.float32), "low"),
         _weight("W", (4, 4), seed=0)], opset=18)


def rounding_residue() -> onnx.ModelProto:
    """((x + 1000) - 1000) - x, kept above 0.01: exactly 0 on the CPU in float32, up to 0.24 on the HTP, whose fp16
    holds 1000 + x only to 0.5. An output judged on max abs diff (its reference is all zeros) that fails."""
    return _model(
        [h.make_node("Add", ["x", "big"], ["lifted"], name="lift"),
         h.make_node("Sub", ["lifted", "big"], ["back"], name="drop"),
         h.make_node("Sub", ["back", "x"], ["residue"], name="residue"),
         h.make_node("Sub", ["residue", "floor"], ["above"], name="above"),
         h.make_node("Relu", ["above"], ["y"], name="keep")],
        [_vi("x", T.FLOAT, [1, 256])], [_vi("y", T.FLOAT, [1, 256])],
        [numpy_helper.from_array(np.array(1000.0, np.float32), "big"),
         numpy_helper.from_array(np.array(0.01, np.float32), "floor")], opset=18)


def offset_log_softmax() -> onnx.ModelProto:
    """A classifier whose logits sit near 12000, where fp16 holds them only to 8: its log-probabilities come out
    12 dB from the CPU's, while every label (the gaps between logits are in the hundreds) stays the same."""
    rng = np.random.default_rng(0)
    return _model(
        [h.make_node("MatMul", ["x", "W"], ["z0"], name="logits"),
         h.make_node("Add", ["z0", "offset"], ["z"], name="offset"),
         h.make_node("LogSoftmax", ["z"], ["logprobs"], name="logsoftmax", axis=-1)],
        [_vi("x", T.FLOAT, [1, 16])], [_vi("logprobs", T.FLOAT, [1, 4])],
        [numpy_helper.from_array((rng.standard_normal((16, 4)) * 60).astype(np.float32), "W"),
         numpy_helper.from_array(np.array(12000.0, np.float32), "offset")], opset=18)


def tiny_decoder(vocab: int = 4096, hidden: int = 256, ffn: int = 1024, layers: int = 2, *, tied: bool = True,
                 kv: bool = True, kv_heads: int = 2, seq: int | str = "seq") -> onnx.ModelProto:
    """A decoder LLM's weights in its usual places, seeded: a token embedding (a Gather's table), `layers` blocks
    (LayerNorm, an MLP, a residual Add) and an lm_head, tied to the embedding (MatMul by its Transpose) or a weight of
    its own. With `kv`, each block also takes past_key_values.{i}.key/value [batch, kv_heads, past, head_dim] and gives
    present.{i}.* (its new key and value appended), the transformers/optimum input names, every length dynamic:
    what check sees of an exported decoder. Without, the static [1, seq] graph compile takes (the same weights)."""
    rng = np.random.default_rng(0)
    inits: list[onnx.TensorProto] = []

    def w(name: str, *shape: int) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.05).astype(np.float32), name))
        return name

    head_dim = hidden // 4
    batch, past = ("batch", "past") if kv else (1, 0)
    length = seq if kv else (seq if isinstance(seq, int) else 8)
    ids = T.INT64 if kv else T.INT32
    nodes = [h.make_node("Gather", [w("embed", vocab, hidden), "input_ids"], ["x0"], name="embed")]
    inputs = [_vi("input_ids", ids, [batch, length])]
    outputs = []
    if kv:
        inputs += [_vi("attention_mask", T.INT64, [batch, "total"]), _vi("position_ids", T.INT64, [batch, length])]
        inits.append(numpy_helper.from_array(np.array([0, 0, kv_heads, head_dim], np.int64), "kv_shape"))
    x = "x0"
    for i in range(layers):
        nodes += [h.make_node("LayerNormalization", [x, w(f"ln{i}.g", hidden), w(f"ln{i}.b", hidden)], [f"n{i}"],
                              axis=-1, name=f"ln{i}"),
                  h.make_node("MatMul", [f"n{i}", w(f"up{i}", hidden, ffn)], [f"u{i}"], name=f"up{i}"),
                  h.make_node("Relu", [f"u{i}"], [f"r{i}"], name=f"relu{i}"),
                  h.make_node("MatMul", [f"r{i}", w(f"down{i}", ffn, hidden)], [f"d{i}"], name=f"down{i}"),
                  h.make_node("Add", [x, f"d{i}"], [f"x{i + 1}"], name=f"res{i}")]
        if kv:
            for part in ("key", "value"):
                new = f"{part[0]}{i}"
                inputs.append(_vi(f"past_key_values.{i}.{part}", T.FLOAT, [batch, kv_heads, past, head_dim]))
                outputs.append(_vi(f"present.{i}.{part}", T.FLOAT, [batch, kv_heads, "total", head_dim]))
                nodes += [h.make_node("MatMul", [f"n{i}", w(f"w{new}", hidden, kv_heads * head_dim)], [f"{new}.p"]),
                          h.make_node("Reshape", [f"{new}.p", "kv_shape"], [f"{new}.r"]),
                          h.make_node("Transpose", [f"{new}.r"], [f"{new}.t"], perm=[0, 2, 1, 3]),
                          h.make_node("Concat", [f"past_key_values.{i}.{part}", f"{new}.t"], [f"present.{i}.{part}"],
                                      axis=2)]
        x = f"x{i + 1}"
    if tied:
        nodes += [h.make_node("Transpose", ["embed"], ["embed.T"], perm=[1, 0], name="tie"),
                  h.make_node("MatMul", [x, "embed.T"], ["logits"], name="lm_head")]
    else:
        nodes.append(h.make_node("MatMul", [x, w("lm_head", hidden, vocab)], ["logits"], name="lm_head"))
    logits = _vi("logits", T.FLOAT, [batch, length, vocab])
    return _model(nodes, inputs, [logits, *outputs], inits, name="decoder")

"""QDQ quantization the way onnxruntime's QNN helper sets it up (16-bit activations, 8-bit weights): what compile's
w8a16 builds and `check --precision w8a16` measures, so that both see the same quantized graph. w4a16 is that graph
with the MatMul/Gemm weights rewritten as signed int4, block-quantized along the reduction axis; and for either, the
error each quantized weight brings (quantized_layers)."""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnndeploy.model.onnxio import convert_opset, drop_initializers, external_locations, save_model, tensor_nbytes

if TYPE_CHECKING:
    import numpy as np
    import onnx

ACTIVATIONS, WEIGHTS = "QUInt16", "QUInt8"
QDQ_OPSET = 21  # the first opset with 16-bit QuantizeLinear: onnxruntime's quantizer converts older models to it
SETTINGS = {"format": "QDQ", "activation_type": ACTIVATIONS, "weight_type": WEIGHTS, "calibrate_method": "MinMax"}
# Measured with onnxruntime-qnn 2.6.0 (QAIRT 2.50.40), SM8650 and SM8750: a SIGNED int4 DequantizeLinear with a
# block_size along the reduction axis, zero point 0, feeding a MatMul or Gemm between uint16 activations, compiles
# with CPU fallback off and runs on the host emulator within 1e-2 rel L2 of the CPU; uint4 (asymmetric, what
# onnxruntime's matmul_nbits_quantizer writes by default) compiles silently and gives garbage (rel L2 ~3), so only
# int4 is written. The scales take LPBQ's form (a float scale per output channel times an integer 1..16 per block),
# so the QNN EP's enable_block_quant_weight_optimization (LPBQ, smaller binaries) stores them exactly.
INT4_BLOCK = 32
LAYER_SAMPLES = 8  # the calibration samples the per-layer errors are measured on: each one runs the float model
LPBQ_LEVELS = 16  # LPBQ's per-block multiplier is a 4-bit unsigned integer: 1..16 times the channel's scale
INT4_SETTINGS = {**SETTINGS, "matmul_weight_type": "Int4", "block_size": INT4_BLOCK, "block_scales": "lpbq",
                 "fallback_weight_type": "Int8 per channel"}
_WEIGHT_OPS = ("MatMul", "Gemm")


@dataclass(frozen=True)
class QuantizedLayer:
    """One MatMul or Gemm with a quantized constant weight, and the error that weight brings: the relative L2 norm
    of (dequantized - float weight), and of the node's product with it against the float weight's, both on the
    float model's own inputs to the node (the calibration samples), so that each layer's figure is its weight's
    alone, not what the layers before it add."""

    node: str
    weight: str  # the float model's initializer
    bits: int  # 4 or 8
    block: int | None  # the block size along the reduction axis (4-bit); None: one scale per tensor or channel
    weight_rel_l2: float
    output_rel_l2: float | None  # None: no sample reached the node

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "weight": self.weight, "bits": self.bits, "block": self.block,
                "weight_rel_l2": self.weight_rel_l2, "output_rel_l2": self.output_rel_l2}

    @classmethod
    def parse(cls, data: Any) -> QuantizedLayer:
        """From its JSON form; ValueError, TypeError or KeyError when it is not one."""
        if not isinstance(data, dict) or set(data) != {"node", "weight", "bits", "block", "weight_rel_l2",
                                                       "output_rel_l2"} or data["bits"] not in (4, 8):
            raise ValueError
        block, out = data["block"], data["output_rel_l2"]
        return cls(str(data["node"]), str(data["weight"]), int(data["bits"]), None if block is None else int(block),
                   float(data["weight_rel_l2"]), None if out is None else float(out))


@dataclass(frozen=True)
class Encoding:
    """An 8-bit activation's mapping to real numbers: real = scale * (q - zero_point), q in 0..255."""

    scale: float
    zero_point: int

    @classmethod
    def spanning(cls, low: float, high: float) -> Encoding:
        """The uint8 encoding whose range holds [low, high] and 0 exactly (an empty cache slot is 0)."""
        low, high = min(low, 0.0), max(high, 0.0)
        scale = (high - low) / 255 or 1.0
        return cls(scale, min(255, max(0, round(-low / scale))))

    def quantize(self, values: np.ndarray) -> np.ndarray:
        """Float values as uint8."""
        import numpy as np

        q: np.ndarray = np.clip(np.rint(values / np.float32(self.scale)) + self.zero_point, 0, 255)
        return q.astype(np.uint8)

    def dequantize(self, values: np.ndarray) -> np.ndarray:
        import numpy as np

        return ((values.astype(np.float32) - self.zero_point) * np.float32(self.scale)).astype(np.float32)


def uint8_io(qdq_model: Path, names: Iterable[str]) -> None:
    """Rewrite, in place, the QDQ graph's inputs and outputs named in `names` to carry their 8-bit values: an input
    fed into its QuantizeLinear becomes a uint8 input read by the DequantizeLinear nodes directly, an output made by
    a DequantizeLinear becomes the uint8 it dequantized. The app then keeps those tensors (a KV cache) in uint8, a
    quarter of float32, and the HTP moves them so (onnxruntime-qnn maps such inputs and outputs to 8-bit
    fixed-point tensors of the graph, with these encodings: read back from the binary by libQnnSystem)."""
    import onnx

    model = onnx.load(str(qdq_model), load_external_data=False)
    graph, wanted = model.graph, set(names)
    inputs = {v.name: v for v in graph.input if v.name in wanted}
    outputs = {v.name: v for v in graph.output if v.name in wanted}
    renames: dict[str, str] = {}
    dropped = []
    for node in graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] in inputs:
            renames[node.output[0]] = node.input[0]
            inputs[node.input[0]].type.tensor_type.elem_type = onnx.TensorProto.UINT8
            dropped.append(node)
        elif node.op_type == "DequantizeLinear" and node.output[0] in outputs:
            renames[node.input[0]] = node.output[0]
            outputs[node.output[0]].type.tensor_type.elem_type = onnx.TensorProto.UINT8
            dropped.append(node)
    for node in dropped:
        graph.node.remove(node)
    for node in graph.node:
        for names_of in (node.input, node.output):
            for i, name in enumerate(names_of):
                names_of[i] = renames.get(name, name)
    onnx.save(model, str(qdq_model))


@dataclass(frozen=True)
class Int8Kept:
    """A weight w4a16 leaves at 8 bits (per channel), and why."""

    weight: str
    nodes: tuple[str, ...]
    why: str

    def __str__(self) -> str:
        return f"{', '.join(self.nodes)} ({self.weight}): 8-bit weights, {self.why}"


def qdq(model: Path, samples: list[dict[str, np.ndarray]], out: Path, exclude: Sequence[str] = (),
        eight_bit: Mapping[str, Encoding] | None = None) -> Path:
    """Write `model` quantized to QDQ at `out`, calibrated (MinMax) on `samples` ({input name: array} each); the
    nodes named in `exclude` stay in float (the HTP runs them in fp16 when the compile enables fp16), and the
    tensors of `eight_bit` (a KV cache's) get 8-bit activations of the given encodings, the quantizer converting
    where they meet 16-bit ones."""
    # The quantizer writes helper files (<stem>-inferred.onnx) beside its input: give it a private copy, with the
    # external data files the model names beside it (copies: onnx refuses symbolic and hard links to them). Its
    # 16-bit activations need opset 21: converted here (convert_opset), as the quantizer's own conversion passes
    # the whole model through one protobuf, which refuses 2 GB and more.
    import numpy as np
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantType
    from onnxruntime.quantization import quantize as ort_quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    private = out.with_name(f"{out.stem}_src.onnx")
    source = onnx.load(str(model), load_external_data=False)  # the weights in external data files stay there
    convert_opset(source, QDQ_OPSET)
    onnx.save(source, str(private))
    for location in external_locations(source):
        (private.parent / location).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(model.parent / location, private.parent / location)

    class Reader(CalibrationDataReader):  # type: ignore[misc]  # onnxruntime ships no types: its base class is Any
        def __init__(self) -> None:
            self.it = iter(samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    overrides = {t: [{"quant_type": QuantType.QUInt8, "scale": np.array(e.scale, np.float32),
                      "zero_point": np.array(e.zero_point, np.uint8)}] for t, e in (eight_bit or {}).items()}
    config = get_qnn_qdq_config(str(private), Reader(), activation_type=getattr(QuantType, ACTIVATIONS),
                                weight_type=getattr(QuantType, WEIGHTS), nodes_to_exclude=list(exclude) or None,
                                init_overrides=overrides or None)
    ort_quantize(str(private), str(out), config)
    return out


def int4_weights(source: Path, qdq_model: Path, keep_int8: Iterable[str] = ()) -> list[Int8Kept]:
    """Rewrite, in place, the w8a16 QDQ graph `qdq_model` (made by qdq() from `source`) into w4a16: every constant
    2-D MatMul/Gemm weight becomes signed int4 in blocks of INT4_BLOCK along the reduction axis, with LPBQ-form
    scales. The weights of the `keep_int8` nodes, those whose reduction axis is not a multiple of the block, and
    those another kind of node reads too become signed int8 per output channel instead; they are returned, each
    with why. Weights not 2-D stay as qdq() wrote them."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    floats = _float_weights(onnx.load(str(source)))
    model = onnx.load(str(qdq_model))
    graph = model.graph
    inits = {t.name: i for i, t in enumerate(graph.initializer)}
    keep, kept = set(keep_int8), []
    for dq, weight, users in _weight_dequantizers(graph, floats):
        w, names = floats[weight], tuple(n.name for n, _ in users)
        axes = {axis for _, axis in users}
        if w.ndim != 2 or not users:
            continue
        if axes == {None}:  # no MatMul or Gemm weight (an embedding's Gather): as qdq() wrote it
            continue
        if None in axes or len(axes) != 1:  # as qdq() wrote it: one 8-bit scale for the whole tensor
            kept.append(Int8Kept(weight, names, "as w8a16 quantizes it: another kind of node reads it too"))
            continue
        axis, = axes
        assert axis is not None
        if keep.intersection(names):
            q, scale, bits = *_int8_per_channel(w, axis), 8
            kept.append(Int8Kept(weight, names, "as asked (--keep-int8)"))
        elif w.shape[axis] % INT4_BLOCK:
            q, scale, bits = *_int8_per_channel(w, axis), 8
            kept.append(Int8Kept(weight, names, f"its reduction axis ({w.shape[axis]}) is not a multiple of "
                                                f"{INT4_BLOCK}"))
        else:
            q, scale, bits = *_int4_lpbq(w, axis), 4
        x, s, z = dq.input[0], f"{weight}_scale", f"{weight}_zero_point"
        tensors = {x: _int4_tensor(x, q) if bits == 4 else numpy_helper.from_array(q, x),
                   s: numpy_helper.from_array(scale, s),
                   z: _int4_tensor(z, np.zeros(scale.shape, np.int8)) if bits == 4
                   else numpy_helper.from_array(np.zeros(scale.shape, np.int8), z)}
        for name, tensor in tensors.items():
            if name in inits:
                graph.initializer[inits[name]].CopyFrom(tensor)
            else:
                inits[name] = len(graph.initializer)
                graph.initializer.append(tensor)
        dq.domain = ""  # the ONNX operator (opset 21 has int4 and blocks), not com.microsoft's
        del dq.input[:]
        dq.input.extend([x, s, z])
        del dq.attribute[:]
        # blocked: the blocks run along the reduction axis; per channel: the scales along the output axis
        dq.attribute.extend([helper.make_attribute("axis", axis if bits == 4 else 1 - axis)]
                            + ([helper.make_attribute("block_size", INT4_BLOCK)] if bits == 4 else []))
    used = {i for n in graph.node for i in n.input}
    drop_initializers(graph, used.__contains__)
    _save(model, qdq_model)
    return kept


def quantized_layers(source: Path, qdq_model: Path, samples: list[dict[str, np.ndarray]]) -> list[QuantizedLayer]:
    """The error of each quantized MatMul/Gemm weight of `qdq_model` (qdq() or int4_weights() from `source`): the
    dequantized weight against the float one, and the node's product with each on the float model's inputs to it
    for the first LAYER_SAMPLES `samples` (those inputs are kept; each weight is dequantized once, in turn)."""
    import onnx

    model = onnx.load(str(source))
    floats = _float_weights(model)
    graph = onnx.load(str(qdq_model)).graph
    inits = {t.name: t for t in graph.initializer}
    nodes = {n.name: n for n in model.graph.node}
    found = [(dq, weight, [n for n, axis in users if axis is not None])
             for dq, weight, users in _weight_dequantizers(graph, floats)]

    def fed(node: onnx.NodeProto) -> str:  # its input in the float model, by name (unnamed: no output figure)
        return nodes[node.name].input[0] if node.name and node.name in nodes else ""

    wanted = sorted({fed(n) for _, _, users in found for n in users} - {""})
    activations = list(_tensors(model, wanted, samples[:LAYER_SAMPLES]))
    layers = []
    for dq, weight, users in found:
        deq, bits, block = _dequantized(dq, inits)
        w = floats[weight]
        err = _rel_l2(_energy(deq - w), _energy(w))
        for node in users:
            noise = energy = 0.0
            for a in (x[fed(node)] for x in activations if fed(node)):
                ref = _product(node, a, w)
                noise, energy = noise + _energy(_product(node, a, deq) - ref), energy + _energy(ref)
            out = _rel_l2(noise, energy) if fed(node) and activations else None
            layers.append(QuantizedLayer(node.name, weight, bits, block, err, out))
    return layers


def worst(layers: Iterable[QuantizedLayer], count: int) -> list[QuantizedLayer]:
    """The `count` layers whose output (else weight) error is largest, largest first."""
    return sorted(layers, key=lambda q: (q.output_rel_l2 if q.output_rel_l2 is not None else -1.0,
                                         q.weight_rel_l2), reverse=True)[:count]


# --- helpers ---------------------------------------------------------------------------------------

def _int4_lpbq(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric signed int4 in blocks along `axis` (the reduction axis): each block's scale is its channel's float
    scale times an integer 1..16 (LPBQ's form), the smallest such that the block's largest magnitude is 7 steps or
    fewer, so nothing clips. Returns (integers as int8, scales shaped as the weight with the axis in blocks)."""
    import numpy as np

    wt = np.moveaxis(w.astype(np.float32), axis, 0)  # [K, N]
    blocks = wt.reshape(wt.shape[0] // INT4_BLOCK, INT4_BLOCK, *wt.shape[1:])
    need = np.abs(blocks).max(axis=1) / 7.0  # [K/block, N]: the scale each block would take alone
    channel = need.max(axis=0, keepdims=True) / LPBQ_LEVELS
    channel = np.where(channel > 0, channel, 1.0).astype(np.float32)
    multiplier = np.clip(np.ceil(need / channel * (1 - 1e-6)), 1, LPBQ_LEVELS).astype(np.float32)
    scale = channel * multiplier
    q = np.clip(np.round(blocks / scale[:, None]), -8, 7).astype(np.int8).reshape(wt.shape)
    return np.moveaxis(q, 0, axis), np.moveaxis(scale.astype(np.float32), 0, axis)


def _int4_tensor(name: str, q: np.ndarray) -> onnx.TensorProto:
    """Integers in -8..7 as an INT4 tensor: two to a byte, the first in the low nibble (ONNX's packing), written as
    raw bytes (a Python list of a large weight's values would take gigabytes)."""
    import numpy as np
    from onnx import TensorProto, helper

    nibbles = (q.ravel().astype(np.uint8) & 0x0F)
    if nibbles.size % 2:
        nibbles = np.append(nibbles, np.uint8(0))
    packed = nibbles[0::2] | (nibbles[1::2] << 4)
    return helper.make_tensor(name, TensorProto.INT4, q.shape, packed.tobytes(), raw=True)


def _int8_per_channel(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric signed int8, one scale per output channel (the axis other than the reduction `axis`)."""
    import numpy as np

    scale = (np.abs(w).max(axis=axis) / 127.0).astype(np.float32)
    scale = np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)
    q = np.clip(np.round(w / np.expand_dims(scale, axis)), -127, 127).astype(np.int8)
    return q, scale


def _dequantized(dq: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> tuple[np.ndarray, int, int | None]:
    """A weight's DequantizeLinear computed (float32), with its integers' bits and its block size (None: none)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    x = inits[dq.input[0]]
    attrs = {a.name: a.i for a in dq.attribute}
    scale = numpy_helper.to_array(inits[dq.input[1]]).astype(np.float32)
    zero = numpy_helper.to_array(inits[dq.input[2]]).astype(np.float32) if len(dq.input) > 2 and dq.input[2] \
        else np.zeros_like(scale)
    block = attrs.get("block_size") or None
    values = numpy_helper.to_array(x).astype(np.float32)
    bits = 4 if x.data_type in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4) else 8
    return _dequantize(values, scale, zero, attrs.get("axis", 1), block), bits, block


def _dequantize(values: np.ndarray, scale: np.ndarray, zero: np.ndarray, axis: int,
                block: int | None) -> np.ndarray:
    """DequantizeLinear's arithmetic: per tensor, per axis, or in blocks along the axis."""
    import numpy as np

    if scale.ndim == 0 or scale.size == 1:
        return np.asarray((values - zero.reshape(())) * scale.reshape(()))
    if block:
        scale, zero = (np.repeat(t, block, axis=axis)[tuple(slice(0, n) for n in values.shape)]
                       for t in (scale, zero))
        return np.asarray((values - zero) * scale)
    shape = [1] * values.ndim
    shape[axis] = -1
    return np.asarray((values - zero.reshape(shape)) * scale.reshape(shape))


def _product(node: onnx.NodeProto, a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A MatMul's product, or a Gemm's op(A) @ op(B) (without alpha, beta and C: they scale both sides alike)."""
    import numpy as np

    if node.op_type == "Gemm":
        attrs = {x.name: x.i for x in node.attribute}
        a, w = (a.T if attrs.get("transA") else a), (w.T if attrs.get("transB") else w)
    return np.asarray(np.matmul(a, w))


def _energy(x: np.ndarray) -> float:
    """The sum of squares, accumulated in float64."""
    import numpy as np

    return float(np.sum(np.square(x, dtype=np.float64)))


def _rel_l2(noise: float, energy: float) -> float:
    return math.sqrt(noise / energy) if energy > 0 else (0.0 if noise == 0 else math.inf)


def _float_weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The float model's constant 2-D-or-more float initializers (float32), by name."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    return {t.name: numpy_helper.to_array(t).astype(np.float32) for t in model.graph.initializer
            if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16) and len(t.dims) >= 2
            and np.prod(t.dims) > 0}


def _weight_dequantizers(graph: onnx.GraphProto, floats: dict[str, np.ndarray]) \
        -> list[tuple[onnx.NodeProto, str, list[tuple[onnx.NodeProto, int | None]]]]:
    """The DequantizeLinear nodes of a quantized float weight (the quantizer names its integers <weight>_quantized),
    each with the weight's name and the nodes reading it: with their reduction axis for a MatMul or Gemm reading
    it as its weight, None for any other."""
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for n in graph.node:
        for i, name in enumerate(n.input):
            readers.setdefault(name, []).append((n, i))
    inits = {t.name for t in graph.initializer}
    found = []
    for n in graph.node:
        if n.op_type != "DequantizeLinear" or n.input[0] not in inits:
            continue
        weight = n.input[0].removesuffix("_quantized")
        if weight == n.input[0] or weight not in floats:
            continue
        users: list[tuple[onnx.NodeProto, int | None]] = []
        for reader, slot in readers.get(n.output[0], []):
            transposed = any(a.name == "transB" and a.i for a in reader.attribute)
            weighs = reader.op_type in _WEIGHT_OPS and slot == 1
            users.append((reader, (1 if reader.op_type == "Gemm" and transposed else 0) if weighs else None))
        found.append((n, weight, users))
    return found


def _tensors(model: onnx.ModelProto, names: list[str],
             samples: list[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
    """The values the float `model` computes for `names` (inputs included), one sample at a time."""
    import onnx
    import onnxruntime as ort

    inputs = {i.name for i in model.graph.input}
    extra = [n for n in names if n not in inputs]
    if not extra:  # (session.run of no names runs every output)
        for s in samples:
            yield {n: s[n] for n in names}
        return
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    outputs = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in extra if n not in outputs)
    with tempfile.TemporaryDirectory(prefix="qnndeploy-layers-") as tmp:
        path = Path(tmp) / "probe.onnx"
        _save(probe, path)
        del probe
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        for s in samples:
            yield {**{n: s[n] for n in names if n in inputs}, **dict(zip(extra, session.run(extra, s), strict=True))}


def _save(model: onnx.ModelProto, path: Path) -> None:
    """Save, with the weights in a file beside it when the model is beyond protobuf's 2 GB."""
    save_model(model, path, sum(tensor_nbytes(t) or 0 for t in model.graph.initializer) > 1_500_000_000)

"""`compile --precision w4a16`: block-quantized signed int4 MatMul/Gemm weights with LPBQ-form scales between 16-bit
activations, compiled by the real onnxruntime-qnn for SM8650 and SM8750 and validated on its host HTP emulator; the
per-layer quantization error in the compile record and the command's output; 8-bit weights where asked or where the
reduction axis does not split into blocks; the misuses, refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from qnndeploy.formats.records import JobRecord
from qnndeploy.model import metrics, quantize
from qnndeploy.qnn import htp
from tests.support.cli import run
from tests.support.host import require

SCHEMA = json.loads((Path(quantize.__file__).parent.parent / "schemas" / "compile-record.schema.json").read_text())
SOCS = ("SM8650", "SM8750")
HEAD = "/head/MatMul"  # the LM head, as torch's exporter names its node: kept at 8 bits, as LLM builds do


def _mlp(folder: Path) -> tuple[Path, list[dict[str, np.ndarray]]]:
    """x[8,64] -> MatMul 64x128 (fc1) -> Relu -> MatMul 128x48 (fc2) -> Gemm transB 48 -> 64 (head, K=48: no
    32-blocks): seeded Gaussian weights, and four calibration samples."""
    rng = np.random.default_rng(0)
    weights = {"w1": rng.standard_normal((64, 128)) * 0.1, "w2": rng.standard_normal((128, 48)) * 0.1,
               "wh": rng.standard_normal((64, 48)) * 0.1, "bh": np.zeros(64)}
    nodes = [h.make_node("MatMul", ["x", "w1"], ["a"], name="fc1"), h.make_node("Relu", ["a"], ["r"], name="relu"),
             h.make_node("MatMul", ["r", "w2"], ["b"], name="fc2"),
             h.make_node("Gemm", ["b", "wh", "bh"], ["y"], name="head", transB=1)]
    graph = h.make_graph(nodes, "mlp", [h.make_tensor_value_info("x", T.FLOAT, [8, 64])],
                         [h.make_tensor_value_info("y", T.FLOAT, [8, 64])],
                         [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    path = folder / "mlp.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
    return path, [{"x": rng.standard_normal((8, 64)).astype(np.float32)} for _ in range(4)]


def _weight_dq(model: onnx.ModelProto) -> dict[str, tuple[onnx.NodeProto, dict[str, onnx.TensorProto]]]:
    """Each MatMul/Gemm's weight DequantizeLinear, with the initializers it reads."""
    inits = {t.name: t for t in model.graph.initializer}
    made = {o: n for n in model.graph.node for o in n.output}
    return {n.name: (made[n.input[1]], {i: inits[i] for i in made[n.input[1]].input if i in inits})
            for n in model.graph.node if n.op_type in ("MatMul", "Gemm")}


def test_int4_weights_are_signed_blocks_of_32_with_lpbq_scales_and_8_bit_where_no_block_fits(tmp_path):
    model, samples = _mlp(tmp_path)
    qdq = quantize.qdq(model, samples, tmp_path / "qdq.onnx")
    w8 = quantize.quantized_layers(model, qdq, samples)
    kept = quantize.int4_weights(model, qdq)
    assert [(k.nodes, k.weight) for k in kept] == [(("head",), "wh")]
    assert "reduction axis (48) is not a multiple of 32" in str(kept[0])
    q = onnx.load(str(qdq))
    onnx.checker.check_model(q)
    assert not any(t.data_type in (T.UINT4, T.UINT8) for t in q.graph.initializer
                   if t.name.endswith("_quantized")), "4-bit weights are signed, never uint4"
    dq = _weight_dq(q)
    for node, axis, k in (("fc1", 0, 64), ("fc2", 0, 128)):
        deq, tensors = dq[node]
        attrs = {a.name: a.i for a in deq.attribute}
        assert deq.domain == "" and attrs == {"axis": axis, "block_size": 32}
        values, scale, zero = (tensors[i] for i in deq.input)
        assert values.data_type == zero.data_type == T.INT4 and scale.dims[0] == k // 32
        assert not numpy_helper.to_array(zero).any()
        # LPBQ's form: each block's scale is its column's smallest step times an integer 1..16
        s = numpy_helper.to_array(scale).astype(np.float64)
        step = s.max(axis=0) / 16
        multiples = s / step
        assert np.allclose(multiples, np.round(multiples), atol=1e-4) and multiples.min() >= 1 - 1e-4
    head, tensors = dq["head"]
    assert {a.name: a.i for a in head.attribute} == {"axis": 0}  # Gemm transB: its output channels are axis 0
    assert tensors[head.input[0]].data_type == T.INT8 and list(tensors[head.input[1]].dims) == [64]

    w4 = {q.node: q for q in quantize.quantized_layers(model, qdq, samples)}
    assert [(w4[n].bits, w4[n].block) for n in ("fc1", "fc2", "head")] == [(4, 32), (4, 32), (8, None)]
    for layer in w4.values():  # the figures are errors of the size each weight type gives, on every node
        assert layer.output_rel_l2 is not None and math.isfinite(layer.output_rel_l2)
        assert (0.03 < layer.weight_rel_l2 < 0.2) if layer.bits == 4 else (layer.weight_rel_l2 < 0.01)
    before = {q.node: q.weight_rel_l2 for q in w8}
    assert all(w4[n].weight_rel_l2 > 3 * before[n] for n in ("fc1", "fc2"))
    assert w4["head"].weight_rel_l2 < before["head"]  # int8 per channel beats w8a16's one uint8 scale per tensor
    assert quantize.worst(w4.values(), 1)[0].node in ("fc1", "fc2")


def test_keep_int8_gives_the_named_nodes_8_bit_weights(tmp_path):
    model, samples = _mlp(tmp_path)
    qdq = quantize.qdq(model, samples, tmp_path / "qdq.onnx")
    kept = quantize.int4_weights(model, qdq, ["fc2"])
    assert {k.nodes: k.why for k in kept}[("fc2",)] == "as asked (--keep-int8)"
    layers = {q.node: q.bits for q in quantize.quantized_layers(model, qdq, samples)}
    assert layers == {"fc1": 4, "fc2": 8, "head": 8}


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    """corpus_torch's TinyDecoder prompt graph (2 pre-norm blocks of attention and a GELU MLP, dim 128, an untied
    512-token LM head; seeded random weights) exported by torch, its GELUs fused (what any quantized HTP build of
    it needs), and 20 calibration and 3 validation prompts of valid token ids."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    from tests.support.corpus_torch import TinyDecoder, export_tiny_lm

    folder = tmp_path_factory.mktemp("tinylm")
    prefill = export_tiny_lm(folder)["prefill"]
    ready = folder / "prefill.npu.onnx"
    r = run("prepare", prefill, "-o", ready, "--fuse")
    assert r.exit_code == 0, r.output
    rng = np.random.default_rng(0)
    for name, count in (("calib", 20), ("val", 3)):
        (folder / name).mkdir()
        for i in range(count):
            ids = rng.integers(0, TinyDecoder.VOCAB, (1, TinyDecoder.CONTEXT)).astype(np.int32)
            np.savez(folder / name / f"{i}.npz", input_ids=ids)
    assert HEAD in {n.name for n in onnx.load(str(ready)).graph.node}
    builds = {}
    for precision, keep in (("w8a16", []), ("w4a16", ["--keep-int8", HEAD])):
        out = folder / f"build-{precision}"
        r = run("compile", ready, "--soc", ",".join(SOCS), "--precision", precision, "--calib", folder / "calib",
                "-o", out, "--no-cache", *keep)
        assert r.exit_code == 0, r.output
        builds[precision] = (out, r.output)
    return {"model": ready, "builds": builds, "val": folder / "val"}


@pytest.mark.slow
def test_w4a16_compiles_a_transformer_smaller_than_w8a16_and_validates_on_the_emulator(tiny_lm):
    size = {}
    for precision, (out, _) in tiny_lm["builds"].items():
        for soc in SOCS:
            data = json.loads((out / "prefill" / soc / "compile.json").read_text())
            jsonschema.validate(data, SCHEMA)
            rec = JobRecord.parse(data, out / "prefill" / soc / "compile.json")
            assert rec.to_json() == data
            assert rec.precision == precision and rec.options["cpu_fallback"] is False
            size[precision, soc] = next(o.size for o in rec.outputs if o.path == "prefill.bin")
            if precision == "w4a16":
                assert rec.options["enable_block_quant_weight_optimization"] is True
        r = run("validate", out, "--inputs", tiny_lm["val"], "--json")
        assert r.exit_code == 0, r.output
        targets = json.loads(r.stdout)["targets"]
        assert {t["soc"] for t in targets} == set(SOCS)
        assert all(t["thresholds"] == metrics.THRESHOLDS[precision] for t in targets)
    for soc in SOCS:
        assert size["w4a16", soc] < 0.8 * size["w8a16", soc], size
    # the validated w4a16 build bundles as w4a16, and bundle verify runs its binaries against the CPU again
    out = tiny_lm["builds"]["w4a16"][0]
    r = run("bundle", "build", "--from-build", out, "--name", "tinylm", "--version", "1.0.0", "-o", out.parent / "b")
    assert r.exit_code == 0, r.output
    bundle = out.parent / "b" / "tinylm-1.0.0"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert {t["precision"] for t in manifest["targets"]} == {"w4a16"}
    r = run("bundle", "verify", bundle)
    assert r.exit_code == 0, r.output


@pytest.mark.slow
def test_the_record_and_the_output_give_each_quantized_layer_its_error(tiny_lm):
    out, text = tiny_lm["builds"]["w4a16"]
    data = json.loads((out / "prefill" / "SM8750" / "compile.json").read_text())
    layers = [quantize.QuantizedLayer.parse(q) for q in data["quantized_layers"]["prefill"]]
    graph = onnx.load(str(tiny_lm["model"])).graph
    weights = {t.name for t in graph.initializer}
    # prepare's simplification turns a Linear's MatMul + Add into a Gemm: both are quantized layers
    matmuls = [n.name for n in graph.node if n.op_type in ("MatMul", "Gemm") and n.input[1] in weights]
    assert sorted(q.node for q in layers) == sorted(matmuls) and len(matmuls) >= 9
    four = [q for q in layers if q.bits == 4]
    assert four and all(q.block == 32 and 0.02 < q.weight_rel_l2 < 0.2 for q in four)
    assert all(q.output_rel_l2 is not None and 0 < q.output_rel_l2 < 0.3 for q in layers)
    assert {q.node for q in layers if q.bits == 8} == {HEAD}
    worst = quantize.worst(layers, 5)
    assert text.count("most quantization error") == 1 and f"{worst[0].node} (int{worst[0].bits}" in text
    assert "quantization error per layer: as for SM8650" in text  # the same quantization, printed once
    w8 = json.loads((tiny_lm["builds"]["w8a16"][0] / "prefill" / "SM8750" / "compile.json").read_text())
    assert all(q["bits"] == 8 and q["weight_rel_l2"] < 0.02 for q in w8["quantized_layers"]["prefill"])


def test_w4a16_misuse_is_refused_in_one_line(tmp_path):
    model, samples = _mlp(tmp_path)
    (tmp_path / "calib").mkdir()
    np.savez(tmp_path / "calib" / "0.npz", **samples[0])
    calib = ["--calib", tmp_path / "calib"]
    for args, message in (
            (["--precision", "w4a16"], "w4a16 needs --calib DIR"),
            (["--keep-int8", "fc1"], "--keep-int8 applies to --precision w4a16"),
            (["--precision", "w8a16", *calib, "--keep-int8", "fc1"], "--keep-int8 applies to --precision w4a16"),
            (["--precision", "w4a16", *calib, "--keep-int8", "fc1,nope"], "--keep-int8 nope: no node of that name"),
            (["--precision", "w4a16", *calib, "--backend", "aihub"], "--precision w4a16 needs the ort backend")):
        r = run("compile", model, "--soc", "SM8750", "-o", tmp_path / "out", *args)
        assert r.exit_code == 2, (args, r.output)
        assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_check_measures_the_int4_graph_and_estimate_gives_no_number_without_factors(tmp_path):
    """check --precision w4a16 partitions the graph compile builds (int4 weights and all) on the HTP: every node
    there; estimate of the w4a16 build says why it has no number (no chip factors are fitted for w4a16)."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    model, samples = _mlp(tmp_path)
    r = run("check", model, "--soc", "SM8750", "--precision", "w4a16", "--json")
    assert r.exit_code == 0, r.output
    (report,) = json.loads(r.stdout)["models"]
    assert report["htp"]["measured"] and not report["htp"]["cpu_nodes"], report["htp"]
    (tmp_path / "calib").mkdir()
    for i, sample in enumerate(samples):
        np.savez(tmp_path / "calib" / f"{i}.npz", **sample)
    r = run("compile", model, "--soc", "SM8750", "--precision", "w4a16", "--calib", tmp_path / "calib",
            "-o", tmp_path / "build", "--no-cache")
    assert r.exit_code == 0, r.output
    assert "head (wh): 8-bit weights, its reduction axis (48) is not a multiple of 32" in r.output
    (m,) = json.loads(run("estimate", tmp_path / "build", "--json").stdout)["models"]
    assert m["precision"] == "w4a16" and [row["ms"] for row in m["socs"]] == [None]
    assert "w4a16: no chip factors for this precision" in m["socs"][0]["reason"]

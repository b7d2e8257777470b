"""The decoder LLMs the generation tests start from (tests/support/llm.py): transformers' Qwen2 and Llama exported by
both torch exporters in the optimum layout, checked against transformers itself, tensor by tensor and greedy token by
greedy token; and the peaked weights keep greedy decoding stable where plain random weights would not."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.support import llm

PROMPT = llm.PROMPT
CASES = [pytest.param(llm.QWEN_TINY, False, id="qwen2-torchscript"),
         pytest.param(llm.QWEN_TINY, True, id="qwen2-dynamo"),
         pytest.param(llm.LLAMA_TINY, False, id="llama-torchscript"),
         pytest.param(llm.LLAMA_TINY, True, id="llama-dynamo", marks=pytest.mark.slow)]


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


@pytest.mark.parametrize(("spec", "dynamo"), CASES)
def test_the_layout_is_optimums_with_every_length_dynamic(llm_export, spec, dynamo):
    exported = llm_export(spec, dynamo=dynamo)
    graph = onnx.load(exported.path, load_external_data=False).graph
    inputs, outputs = llm.names(spec.layers)
    assert [i.name for i in graph.input] == inputs
    assert [o.name for o in graph.output] == outputs
    shapes = {v.name: _dims(v) for v in [*graph.input, *graph.output]}
    assert shapes["input_ids"] == shapes["position_ids"] == [1, "seq"]
    assert shapes["attention_mask"] == [1, "total"]
    assert shapes["past_key_values.3.value"] == [1, spec.kv_heads, "past", spec.head_dim]
    assert shapes["logits"][1:] == ["seq", spec.vocab]  # batch: 1, or TorchScript's own symbol
    total = shapes["present.0.key"][2]
    assert isinstance(total, str)  # "total" (TorchScript) or "past + seq" (torch.export's expression)
    assert shapes["present.3.value"] == [1, spec.kv_heads, total, spec.head_dim]


@pytest.mark.parametrize(("spec", "dynamo"), CASES)
@pytest.mark.parametrize(("past", "seq", "empty"), [(0, 5, 0), (9, 1, 0), (4, 3, 0), (9, 1, 5), (6, 3, 2)])
def test_the_onnx_computes_what_transformers_does(llm_export, spec, dynamo, past, seq, empty):
    """Logits and every present, from random past entries: a prompt over an empty cache, a decode step, a chunk, and
    the last two with their first cache slots masked out, as the app's fixed-size cache has them."""
    import onnxruntime as ort

    exported = llm_export(spec, dynamo=dynamo)
    feeds = llm.example(exported.model, past=past, seq=seq, seed=past, empty=empty)
    want = llm.run_torch(exported.model, feeds)
    session = ort.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
    got = dict(zip(want, session.run(list(want), feeds), strict=True))
    for name, expected in want.items():
        assert got[name].shape == expected.shape, name
        np.testing.assert_allclose(got[name], expected, rtol=1e-4, atol=1e-4, err_msg=name)
    assert got["present.1.key"].shape[2] == past + seq


@pytest.mark.parametrize(("spec", "dynamo"), CASES)
def test_greedy_tokens_on_onnxruntime_are_transformers_own(llm_export, spec, dynamo):
    exported = llm_export(spec, dynamo=dynamo)
    want = llm.generate(exported.model, PROMPT, 64)
    assert llm.generate_onnx(exported.path, PROMPT, 64) == want


def test_plain_random_weights_decode_the_same_on_onnxruntime(llm_export):
    """Without the successor table every token depends on the whole context through the cache: a cache the ONNX loop
    mishandled would show here, where the peaked model's argmax would not notice."""
    exported = llm_export(llm.QWEN_TINY_PLAIN, dynamo=False)
    want = llm.generate(exported.model, PROMPT, 64)
    assert len(set(want)) > 8  # not one token repeated
    assert llm.generate_onnx(exported.path, PROMPT, 64) == want


@pytest.mark.parametrize("spec", [llm.QWEN_TINY, llm.LLAMA_TINY], ids=["qwen2", "llama"])
def test_peaked_greedy_decoding_is_varied_and_survives_4_bit_weights_and_bf16(llm_export, spec):
    """What the HTP's w4a16 and fp16 arithmetic will do to the tokens, here in torch: they must not part."""
    import torch

    model = llm_export(spec, dynamo=False).model
    want = llm.generate(model, PROMPT, 64)
    assert len(set(want)) == 64  # the successor cycle: every step a new token
    assert llm.generate(llm.rounded(model, bits=4), PROMPT, 64) == want
    assert llm.generate(llm.rounded(model, bits=8).to(torch.bfloat16), PROMPT, 64) == want


def test_plain_random_weights_part_where_peaked_ones_do_not():
    """Why the presets are peaked: the same model without the successor table parts from itself under 4-bit weights
    within 64 steps (the best two logits of a random model are often close)."""
    model = llm.build(llm.QWEN_TINY_PLAIN)
    want = llm.generate(model, PROMPT, 64)
    assert llm.generate(llm.rounded(model, bits=4), PROMPT, 64) != want


def test_the_05b_preset_has_qwen25_05bs_published_parameter_counts():
    """0.49B parameters, 0.36B outside the embedding (Qwen2.5-0.5B's model card), counted without allocating them."""
    import torch

    tf = llm.import_transformers()
    with torch.device("meta"):
        model = tf.Qwen2ForCausalLM(llm.config(llm.QWEN_05B))
    total = sum(p.numel() for p in model.parameters())  # the tied table counted once
    assert total == 494_032_768
    assert total - model.model.embed_tokens.weight.numel() == 357_898_112
    assert model.lm_head.weight is model.model.embed_tokens.weight

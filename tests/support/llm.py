"""Decoder-only LLMs as app teams get them: transformers' own Qwen2 and Llama, exported to ONNX the way optimum
lays a decoder out, with seeded random weights (nothing is downloaded).

- `build(spec)`: a transformers model from a config (`QWEN_TINY`, `LLAMA_TINY` for tests; `QWEN_05B`, Qwen2.5-0.5B's
  published shape, for the benchmark), eager attention, weights from `torch.manual_seed(spec.seed)`.
- `export(model, path, dynamo=...)`: one ONNX with every length dynamic (batch 1): `input_ids`, `attention_mask`,
  `position_ids`, `past_key_values.{i}.key/value` in; `logits`, `present.{i}.key/value` out; by the TorchScript
  exporter (dynamo=False) or torch.export (dynamo=True).
- `generate(model, prompt, steps)`: greedy tokens from transformers' own `generate`, the truth;
  `generate_onnx(path, prompt, steps)`: the same greedy loop over the exported ONNX on onnxruntime's CPU EP, the
  cache growing by one entry a step.

Random weights give random text, and a random model's logits are close to independent draws: the best two differ
by a small fraction of their spread, so greedy tokens part at the first step where the best two are close, and
over 64 steps one always is (measured: bf16 arithmetic or int8 weights part from fp32 within 5-40 steps, at any
init std). `peaked=True` (the presets' default) makes greedy decoding stable and still varied (see `_peak`) for
prompts of token ids below min(intermediate, vocab): 128 for the tiny presets, 4864 for QWEN_05B, such as `PROMPT`.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.export import Dim


class Family(StrEnum):
    QWEN2 = "qwen2"
    LLAMA = "llama"


@dataclass(frozen=True)
class LlmSpec:
    """A decoder's shape (transformers config fields under shorter names) and how its random weights are made."""

    family: Family
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    rope_theta: float
    tied: bool  # lm_head shares the token embedding's weight (Qwen2.5 up to 3B does)
    positions: int = 4096  # max_position_embeddings
    std: float = 0.02  # transformers' initializer_range: every Linear and the embedding ~ N(0, std)
    peaked: bool = True  # the last layer's MLP made a token-successor table (_peak)
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


QWEN_TINY = LlmSpec(Family.QWEN2, vocab=512, hidden=64, layers=4, heads=4, kv_heads=2, intermediate=128,
                    rope_theta=1e6, tied=True)
LLAMA_TINY = LlmSpec(Family.LLAMA, vocab=512, hidden=64, layers=4, heads=4, kv_heads=2, intermediate=128,
                     rope_theta=1e4, tied=False)
# no successor table; init std 0.2, where a random model's greedy tokens vary (at 0.02 it repeats one token)
QWEN_TINY_PLAIN = replace(QWEN_TINY, std=0.2, peaked=False)
# Qwen2.5-0.5B's shape: Qwen's published config.json (huggingface.co/Qwen/Qwen2.5-0.5B, config.json: hidden_size 896,
# intermediate_size 4864, num_hidden_layers 24, num_attention_heads 14, num_key_value_heads 2, vocab_size 151936,
# rope_theta 1000000.0, tie_word_embeddings true, max_position_embeddings 32768), as quoted by public mirrors of that
# file (read 2026-12-06; the hub itself is not reachable from here); its model card says 0.49B parameters, 0.36B of
# them outside the embedding, which these numbers give (494,032,768 and 357,898,112).
QWEN_05B = LlmSpec(Family.QWEN2, vocab=151936, hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864,
                   rope_theta=1e6, tied=True, positions=32768)


PROMPT = (3, 17, 42, 99, 7, 100, 5, 11)  # ids every preset's successor table has


def import_transformers() -> Any:
    """transformers, imported without torchvision: torchvision 0.28 from PyPI is CUDA-built, and beside CPU torch its
    C++ ops do not load ("operator torchvision::nms does not exist"), which breaks `import transformers` models.
    None in sys.modules makes transformers' own probe say torchvision is absent. Only for the tests' process."""
    sys.modules.setdefault("torchvision", None)  # type: ignore[arg-type]
    import transformers

    return transformers


def config(spec: LlmSpec) -> Any:
    tf = import_transformers()
    cls = tf.Qwen2Config if spec.family is Family.QWEN2 else tf.LlamaConfig
    return cls(vocab_size=spec.vocab, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
               num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
               max_position_embeddings=spec.positions, rope_theta=spec.rope_theta,
               tie_word_embeddings=spec.tied, initializer_range=spec.std, attn_implementation="eager",
               bos_token_id=None, eos_token_id=None, pad_token_id=None)


def build(spec: LlmSpec) -> Any:
    """The transformers model (Qwen2ForCausalLM or LlamaForCausalLM), eval mode, float32, seeded random weights."""
    tf = import_transformers()
    cls = tf.Qwen2ForCausalLM if spec.family is Family.QWEN2 else tf.LlamaForCausalLM
    torch.manual_seed(spec.seed)
    model = cls(config(spec)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):  # transformers zeroes them (Qwen2's q/k/v); a trained model's are not zero
                p.normal_(0.0, spec.std)
        if spec.peaked:
            _peak(model, spec)
    return model


def _peak(model: Any, spec: LlmSpec) -> None:
    """Make greedy decoding stable and varied: the last layer's MLP becomes a successor table over the first
    min(intermediate, vocab) token ids, one cycle through all of them in a seeded order, so a step's best logit stands
    far above the rest (the margin survives bf16 arithmetic and 4-bit weights) and the tokens run through the cycle.

    Neuron j reads token t_j: its gate and up rows are t_j's embedding direction, so for the current token the
    matching neuron's silu(gate)*up is about hidden times any other's; its down column writes DELTA times an
    embedding's length along succ(t_j)'s embedding. The embedding is scaled (measured on the model itself) to RATIO
    times what the random layers add to the residual, so the current token still dominates it at the last MLP;
    lm_head reads the embedding (tied, or, untied, a noisy copy of it), so the written direction wins; the final
    norm's weight brings the best logit back to about LOGIT. Everything else stays random: attention, the other
    layers and their caches carry real, context-dependent numbers; only the argmax ignores the context.
    A token id outside the table has no neuron: what follows it is whatever the random rest of the model says."""
    gen = torch.Generator().manual_seed(spec.seed + 1)
    embed = model.model.embed_tokens.weight
    mlp = model.model.layers[-1].mlp
    for linear in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
        linear.weight.zero_()
    n = min(spec.intermediate, spec.vocab)
    order = torch.randperm(n, generator=gen)
    # what the random layers add, against the embedding, at the final norm's input (the last MLP now adds nothing)
    seen: list[torch.Tensor] = []
    hook = model.model.norm.register_forward_hook(lambda _m, args, _out: seen.append(args[0]))
    try:
        model(input_ids=order[None, :32])
    finally:
        hook.remove()
    own = embed[order[:32]]
    embed.mul_(RATIO * float((seen[0][0] - own).norm() / own.norm()))
    rows = embed[order]
    dirs = rows / rows.norm(dim=1, keepdim=True)
    length = float(rows.norm(dim=1).mean())
    d = spec.hidden
    mlp.gate_proj.weight[:n] = dirs
    mlp.up_proj.weight[:n] = dirs
    # the matching neuron's silu(gate)*up is about d * cos^2 (cos: the current token's share of the normalized
    # residual); its column is scaled so the MLP writes about DELTA embedding lengths
    mlp.down_proj.weight[:, :n] = (dirs.roll(-1, 0) * (DELTA * length / d)).T
    if not spec.tied:
        model.lm_head.weight.copy_(embed + torch.randn(embed.shape, generator=gen) * (0.1 * length / d**0.5))
    # a logit is (norm weight * normalized residual, of length sqrt(d)) . (a row of about `length`)
    model.model.norm.weight.fill_(LOGIT / (length * d**0.5))


RATIO = 2.0  # the embedding against the random layers' sum (measured on the tiny presets: 1.0 parts under int8)
DELTA = 3.0  # what the successor table writes, in embedding lengths
LOGIT = 30.0  # about the best logit: the next token's probability is then about 1


def names(layers: int) -> tuple[list[str], list[str]]:
    """The optimum layout's input and output names."""
    kv = [f"{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    return (["input_ids", "attention_mask", "position_ids", *(f"past_key_values.{n}" for n in kv)],
            ["logits", *(f"present.{n}" for n in kv)])


class _Flat(nn.Module):
    """The model over flat tensors, as the ONNX takes them: the past rebuilt into transformers' DynamicCache (one
    cache.update per layer), the present read back off it."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        self.layers = model.config.num_hidden_layers

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cache = import_transformers().DynamicCache(config=self.model.config)
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
        present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (out.logits, *present)


def example(model: Any, past: int, seq: int, seed: int = 0, empty: int = 0) -> dict[str, np.ndarray]:
    """Inputs by name for `past` cached entries (random numbers) and `seq` new tokens at positions past..; the first
    `empty` cache slots masked out (attention_mask 0), as a host loop with a right-aligned fixed-size cache has them."""
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    feeds = {"input_ids": torch.randint(0, cfg.vocab_size, (1, seq), generator=gen),
             "attention_mask": (torch.arange(past + seq) >= empty).to(torch.int64)[None],
             "position_ids": torch.arange(past, past + seq)[None]}
    for name in names(cfg.num_hidden_layers)[0][3:]:
        feeds[name] = torch.randn(1, cfg.num_key_value_heads, past, head_dim, generator=gen)
    return {k: v.numpy() for k, v in feeds.items()}


def run_torch(model: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs by name, from transformers itself (the wrapper the export traces)."""
    inputs, outputs = names(model.config.num_hidden_layers)
    with torch.no_grad():
        got = _Flat(model)(*(torch.from_numpy(feeds[n]) for n in inputs))
    return {n: t.numpy() for n, t in zip(outputs, got, strict=True)}


def export(model: Any, path: Path, *, dynamo: bool) -> Path:
    """The model as one ONNX in the optimum layout, batch 1, every length dynamic: seq (new tokens), past (cached
    entries), total (= past + seq: attention_mask, present). The TorchScript exporter (opset 17) writes the weights
    inline up to 2 GB and past that one file per tensor beside the ONNX (QWEN_05B: 170 files, 2,504 MB, the tied
    table stored twice, as Gather's table and as lm_head's transposed MatMul weight); the dynamo exporter (its
    default opset, 20 in torch 2.13) always writes them to one `<name>.data` (QWEN_05B: 1,979 MB, the table once),
    and names the present's length "past + seq" (torch.export's own expression; the TorchScript one says "total")."""
    path = Path(path)
    inputs, outputs = names(model.config.num_hidden_layers)
    # example lengths of 2 and more: torch.export specializes a dim whose example size is 0 or 1
    args = tuple(torch.from_numpy(a) for a in example(model, past=3, seq=2).values())
    flat = _Flat(model).eval()
    with torch.no_grad():
        if dynamo:
            seq, past = Dim("seq"), Dim("past")
            shapes = {"input_ids": {1: seq}, "attention_mask": {1: Dim("total")}, "position_ids": {1: seq},
                      "past": tuple({2: past} for _ in inputs[3:])}
            torch.onnx.export(flat, args, path, dynamo=True, input_names=inputs, output_names=outputs,
                              dynamic_shapes=shapes, verbose=False)
        else:
            axes = {"input_ids": {1: "seq"}, "attention_mask": {1: "total"}, "position_ids": {1: "seq"},
                    "logits": {1: "seq"},  # its batch the exporter leaves as an unnamed symbol (MatMullogits_dim_0)
                    **{n: {2: "past"} for n in inputs[3:]}, **{n: {2: "total"} for n in outputs[1:]}}
            # a str: a Path fails past 2 GB ("the output file must be a file path")
            torch.onnx.export(flat, args, str(path), dynamo=False, opset_version=17, input_names=inputs,
                              output_names=outputs, dynamic_axes=axes)
    return path


def generate(model: Any, prompt: Sequence[int], steps: int) -> list[int]:
    """`steps` greedy tokens after the prompt, from transformers' own generate (no end token: it never stops early)."""
    with torch.no_grad():
        out = model.generate(torch.tensor([list(prompt)]), attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
                             max_new_tokens=steps, min_new_tokens=steps, do_sample=False, num_beams=1,
                             pad_token_id=0, eos_token_id=None)
    return [int(t) for t in out[0, len(prompt):]]


def generate_onnx(path: Path, prompt: Sequence[int], steps: int) -> list[int]:
    """The same greedy tokens from the exported ONNX on onnxruntime's CPU EP: the prompt at once over an empty
    cache, then one token a step, each step's present becoming the next one's past."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    past_names = [i.name for i in session.get_inputs() if i.name.startswith("past_key_values.")]
    outputs = [o.name for o in session.get_outputs()]
    kv_heads, head_dim = (session.get_inputs()[3].shape[i] for i in (1, 3))
    past = {n: np.zeros((1, kv_heads, 0, head_dim), np.float32) for n in past_names}
    ids, pos, tokens = list(prompt), 0, []
    for _ in range(steps):
        feeds = {"input_ids": np.array([ids], np.int64),
                 "attention_mask": np.ones((1, pos + len(ids)), np.int64),
                 "position_ids": np.arange(pos, pos + len(ids), dtype=np.int64)[None], **past}
        got = dict(zip(outputs, session.run(outputs, feeds), strict=True))
        pos += len(ids)
        ids = [int(got["logits"][0, -1].argmax())]
        tokens += ids
        past = {n: got[n.replace("past_key_values.", "present.")] for n in past_names}
    return tokens


@dataclass(frozen=True)
class Exported:
    spec: LlmSpec
    model: Any = field(repr=False)  # the transformers model the ONNX came from
    path: Path
    dynamo: bool


_EXPORTS: dict[tuple[LlmSpec, bool], Exported] = {}


def cached_export(root: Path, spec: LlmSpec, *, dynamo: bool) -> Exported:
    """Each (spec, exporter) built and exported once per process under root (the tests' session fixture)."""
    key = (spec, dynamo)
    if key not in _EXPORTS:
        model = next((e.model for (s, _), e in _EXPORTS.items() if s == spec), None)
        model = build(spec) if model is None else model
        folder = Path(root) / f"{spec.family}-{'dynamo' if dynamo else 'torchscript'}-{len(_EXPORTS)}"
        folder.mkdir(parents=True)
        _EXPORTS[key] = Exported(spec, model, export(model, folder / "model.onnx", dynamo=dynamo), dynamo)
    return _EXPORTS[key]


def rounded(model: Any, bits: int, block: int = 32) -> Any:
    """A copy whose matrices (the embedding and lm_head too) hold what block-quantized int`bits` would store: each
    run of `block` weights along a row rounded to a symmetric grid of its own scale (absmax / (2**(bits-1)-1))."""
    out = copy.deepcopy(model)
    top = 2 ** (bits - 1) - 1
    with torch.no_grad():
        for p in out.parameters():
            if p.dim() == 2:
                w = p.view(p.shape[0], -1, block)
                scale = w.abs().amax(-1, keepdim=True).clamp_min(1e-12) / top
                p.copy_((torch.round(w / scale).clamp(-top - 1, top) * scale).view_as(p))
    return out

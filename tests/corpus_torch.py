"""Real model architectures (ViT, conformer, GRU with state, BERT) built in torch and exported to ONNX.

The weights are random (torch.manual_seed(0)), so nothing is downloaded and every export is reproducible; the
graphs are what torch's two exporters really write for these architectures, which is what the corpus tests.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.export import Dim


class Attention(nn.Module):
    """Multi-head self-attention written out (MatMul/Softmax), as most exported transformers have it."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-2, -1) / self.head_dim**0.5
        if bias is not None:
            scores = scores + bias
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


class FeedForward(nn.Sequential):
    def __init__(self, dim: int, hidden: int, act: nn.Module) -> None:
        super().__init__(nn.Linear(dim, hidden), act, nn.Linear(hidden, dim))


# --- ViT: patch Conv2d, class token, positional embedding, pre-norm blocks with nn.MultiheadAttention ------------

class ViTBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)  # torchvision's ViT uses this module
        self.mlp = FeedForward(dim, 4 * dim, nn.GELU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, dim: int = 192, depth: int = 4, heads: int = 3, patch: int = 16, classes: int = 1000) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (224 // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[ViTBlock(dim, heads) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.patch(pixel_values).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


# --- Conformer: half-step FFN, MHSA, conv module (pointwise, GLU, depthwise, BatchNorm, SiLU), half-step FFN -----

class ConvModule(nn.Module):
    def __init__(self, dim: int, kernel: int = 31) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.pw1, self.glu = nn.Conv1d(dim, 2 * dim, 1), nn.GLU(dim=1)
        self.dw = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        self.bn, self.act, self.pw2 = nn.BatchNorm1d(dim), nn.SiLU(), nn.Conv1d(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.glu(self.pw1(self.norm(x).transpose(1, 2)))
        return self.pw2(self.act(self.bn(self.dw(y)))).transpose(1, 2)


class ConformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ff1 = nn.Sequential(nn.LayerNorm(dim), FeedForward(dim, 4 * dim, nn.SiLU()))
        self.ff2 = nn.Sequential(nn.LayerNorm(dim), FeedForward(dim, 4 * dim, nn.SiLU()))
        self.attn_norm, self.attn = nn.LayerNorm(dim), Attention(dim, heads)
        self.conv, self.norm = ConvModule(dim), nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ff1(x)
        x = x + self.attn(self.attn_norm(x))
        x = x + self.conv(x)
        return self.norm(x + 0.5 * self.ff2(x))


class Conformer(nn.Module):
    def __init__(self, features: int = 80, dim: int = 144, heads: int = 4, depth: int = 2) -> None:
        super().__init__()
        self.proj = nn.Linear(features, dim)  # no subsampling: the output keeps the input's time axis
        self.blocks = nn.Sequential(*[ConformerBlock(dim, heads) for _ in range(depth)])

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.proj(features))


# --- Streaming GRU: the caller carries the hidden state from chunk to chunk ---------------------------------------

class StreamingGRU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(40, 128, num_layers=2, batch_first=True)

    def forward(self, x: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.gru(x, h0)


# --- BERT-style encoder: word + position + token type embeddings, post-norm layers, exact (erf) GELU -------------

class BertLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn, self.norm1 = Attention(dim, heads), nn.LayerNorm(dim, eps=1e-12)
        self.up, self.down, self.norm2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim), nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x, bias))
        return self.norm2(x + self.down(nn.functional.gelu(self.up(x))))


class Bert(nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = 128, heads: int = 2, depth: int = 2, positions: int = 512) -> None:
        super().__init__()
        self.word, self.position = nn.Embedding(vocab, dim), nn.Embedding(positions, dim)
        self.token_type, self.norm = nn.Embedding(2, dim), nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(dim, heads) for _ in range(depth))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.norm(self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids))
        bias = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, bias)
        return x


def _build(cls: type[nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    return cls().eval()


def _bert_inputs(batch: int = 2, seq: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, 1000, (batch, seq), generator=g), torch.ones(batch, seq, dtype=torch.long),
            torch.randint(0, 2, (batch, seq), generator=g))


_BERT_IO = {"input_names": ["input_ids", "attention_mask", "token_type_ids"],
            "output_names": ["last_hidden_state"],
            "dynamic_axes": {n: {0: "batch", 1: "seq"}
                             for n in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")}}

# Every example input has batch 2: torch.export specializes a dim whose example size is 0 or 1 (and the TorchScript
# exporter's traces are kept alike). The exported graphs run at any batch.


def export_vit_dynamo(out_dir: Path) -> Path:
    """Dynamo exporter at its default opset (20 in torch 2.13). It writes vit_dynamo.onnx (0.3 MB) plus
    vit_dynamo.onnx.data (8.6 MB): external_data defaults to True, so the 33 weight tensors go to the .data file
    although the model is far below 2 GB; only the 16 small shape constants stay inline."""
    path = Path(out_dir) / "vit_dynamo.onnx"
    with torch.no_grad():
        torch.onnx.export(_build(ViT), (torch.randn(2, 3, 224, 224),), path, dynamo=True,
                          input_names=["pixel_values"], output_names=["logits"],
                          dynamic_shapes={"pixel_values": {0: Dim("batch")}})
    return path


def export_conformer_dynamo(out_dir: Path) -> Path:
    """Dynamo exporter, dynamic batch and time. Like the ViT it writes conformer_dynamo.onnx (0.2 MB) plus
    conformer_dynamo.onnx.data (3.9 MB, 40 of the 49 initializers)."""
    path = Path(out_dir) / "conformer_dynamo.onnx"
    with torch.no_grad():
        torch.onnx.export(_build(Conformer), (torch.randn(2, 100, 80),), path, dynamo=True,
                          input_names=["features"], output_names=["encoder_out"],
                          dynamic_shapes={"features": {0: Dim("batch"), 1: Dim("time")}})
    return path


def export_gru_state(out_dir: Path) -> Path:
    """TorchScript exporter, opset 17: the state input and output share the symbolic "batch" with x and y."""
    path = Path(out_dir) / "gru_state.onnx"
    with torch.no_grad():
        torch.onnx.export(_build(StreamingGRU), (torch.randn(2, 16, 40), torch.zeros(2, 2, 128)), path,
                          dynamo=False, opset_version=17, input_names=["x", "h0"], output_names=["y", "hn"],
                          dynamic_axes={"x": {0: "batch"}, "h0": {1: "batch"}, "y": {0: "batch"}, "hn": {1: "batch"}})
    return path


def export_bert_gelu_erf(out_dir: Path) -> Path:
    """TorchScript exporter, opset 17: Gelu is not an ONNX op before 20, so GELU is written as Div/Erf/Add/Mul/Mul."""
    path = Path(out_dir) / "bert_gelu_erf.onnx"
    with torch.no_grad():
        torch.onnx.export(_build(Bert), _bert_inputs(), path, dynamo=False, opset_version=17, **_BERT_IO)
    return path


def export_bert_gelu_op20(out_dir: Path) -> Path:
    """The same BERT through the TorchScript exporter at opset 20 (its highest), which writes aten::gelu as one Gelu
    node per layer."""
    path = Path(out_dir) / "bert_gelu_op20.onnx"
    with torch.no_grad():
        torch.onnx.export(_build(Bert), _bert_inputs(), path, dynamo=False, opset_version=20, **_BERT_IO)
    return path


MODELS: dict[str, Callable[[Path], Path]] = {
    "vit_dynamo": export_vit_dynamo,
    "conformer_dynamo": export_conformer_dynamo,
    "gru_state": export_gru_state,
    "bert_gelu_erf": export_bert_gelu_erf,
    "bert_gelu_op20": export_bert_gelu_op20,
}


def export(name: str, cache_dir: Path) -> Path:
    """cache_dir/NAME.onnx, exported on first use. The export goes to a scratch folder first and moves in .onnx
    last, so an interrupted export never leaves a file that later runs would take for a finished one."""
    cache_dir = Path(cache_dir)
    path = cache_dir / f"{name}.onnx"
    if path.exists():
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as scratch:
        written = MODELS[name](Path(scratch))
        for extra in sorted(Path(scratch).iterdir()):  # external data (NAME.onnx.data) keeps its name
            if extra != written:
                os.replace(extra, cache_dir / extra.name)
        os.replace(written, path)
    return path

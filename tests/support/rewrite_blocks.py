"""Torch blocks whose ONNX exports have nodes the HTP leaves to the CPU and `prepare --rewrite` moves back: a LayerNorm
over two axes, nn.Unfold's 6-D im2col, Swin's window partition and reverse (6-D views), an rfft magnitude front end
(DFT), a masked_fill(-inf) attention. tests/prepare/test_rewrite.py exports each alone; corpus_torch.py builds real
architectures from them (a Swin stage, a T2T-style soft split, a separator with a global LayerNorm, a spectrum
keyword spotter)."""

from __future__ import annotations

import torch
from torch import nn


class LayerNormHW(nn.Module):  # nn.LayerNorm over (H, W): LayerNormalization axis=-2
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.norm = nn.Conv2d(4, 4, 1), nn.LayerNorm((8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))


class Unfold(nn.Module):  # nn.Unfold's im2col: a 6-D Gather, Transpose, Reshape
    def __init__(self, kernel: int = 3, stride: int = 1, padding: int = 1) -> None:
        super().__init__()
        self.unfold = nn.Unfold(kernel, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.unfold(x)


def window_partition(x: torch.Tensor, size: int) -> torch.Tensor:
    """Swin's window partition: [B, H, W, C] to [B * windows, size * size, C] through a 6-D view."""
    b, h, w, c = x.shape
    x = x.view(b, h // size, size, w // size, size, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, size * size, c)


def window_reverse(x: torch.Tensor, size: int, h: int, w: int) -> torch.Tensor:
    """Swin's window reverse: [B * windows, size * size, C] back to [B, H, W, C] through a 6-D view."""
    c = x.shape[-1]
    x = x.view(-1, h // size, w // size, size, size, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, w, c)


class Windows(nn.Module):  # Swin's window partition and reverse around a Linear (6-D views, allowzero=1 by dynamo)
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(96, 96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return window_reverse(self.linear(window_partition(x, 7)), 7, 56, 56)


class Spectrum(nn.Module):  # a magnitude-spectrum front end: frames, Hann window, rfft (DFT, onesided)
    def __init__(self, frame: int = 64, hop: int = 16) -> None:
        super().__init__()
        self.frame, self.hop = frame, hop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames = x.unfold(-1, self.frame, self.hop) * torch.hann_window(self.frame)
        return torch.fft.rfft(frames, n=self.frame).abs()


class MaskedAttention(nn.Module):  # scores.masked_fill(mask, -inf) before the Softmax: Where(mask, -inf, scores)
    def forward(self, q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = (q @ q.transpose(-1, -2)).masked_fill(mask, float("-inf"))
        return scores.softmax(-1) @ q


class Contraction(nn.Module):
    """A single Einsum that is a reshape and a MatMul (abcd,cde->abe: heads x features into one projection), which
    the HTP leaves to the CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 16, 32) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.einsum("abcd,cde->abe", x, self.w))

"""A causal attention block whose mask is torch's masked_fill(mask, float('-inf')), exported by torch's TorchScript
exporter (as sherpa-onnx's export scripts do): the Where that a w8a16 HTP compile refuses (data/htp_refusals.json);
and a folder of calibration samples for it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

DIM, STEPS = 32, 16


def export(path: Path) -> Path:
    """The block with seeded random weights, written to `path`: Where(mask, Constant(-inf), scores) at node /Where."""
    import warnings

    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v = nn.Linear(DIM, DIM), nn.Linear(DIM, DIM), nn.Linear(DIM, DIM)
            self.register_buffer("mask", torch.triu(torch.ones(STEPS, STEPS, dtype=torch.bool), 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scores = self.q(x) @ self.k(x).transpose(-1, -2) / DIM**0.5
            return torch.softmax(scores.masked_fill(self.mask, float("-inf")), -1) @ self.v(x)

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(Attention().eval(), (torch.randn(1, STEPS, DIM),), str(path), input_names=["x"],
                          output_names=["y"], opset_version=17, dynamo=False)
    return path


def calibration(folder: Path, count: int = 4, shape: tuple[int, ...] = (1, STEPS, DIM)) -> Path:
    """`count` samples of input x, one .npz each (compile --calib's layout)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        np.savez(folder / f"{i}.npz", x=np.random.default_rng(i).standard_normal(shape).astype(np.float32))
    return folder

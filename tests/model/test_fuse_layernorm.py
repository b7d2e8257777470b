"""`prepare --fuse` on the decomposed LayerNorm torch's TorchScript exporter writes below opset 17 (ReduceMean, Sub,
Pow, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta): one LayerNormalization over the last axis, with Reshapes
when it normalizes (H, W), proven equal on the CPU; a ConvNeXt-style norm over the channel axis is not a LayerNorm
over trailing axes and stays as it is."""

from __future__ import annotations

import warnings
from collections import Counter

import onnx
import pytest
import torch
from torch import nn

from qnndeploy.model import fuse
from tests.support.cli import run


class Norm(nn.Module):
    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.conv, self.norm = nn.Conv2d(4, 4, 1), nn.LayerNorm(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))


class ChannelNorm(nn.Module):  # ConvNeXt's channels_first LayerNorm: over axis 1, not trailing
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        return (x - u) / torch.sqrt(s + 1e-6)


def export(tmp_path, module, name):
    path = tmp_path / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.randn(1, 4, 8, 8),), str(path), dynamo=False, opset_version=11)
    return path


@pytest.mark.parametrize(("shape", "layer_norms", "reshapes"), [((8,), 1, 0), ((8, 8), 1, 2)])
def test_fuse_writes_one_layernormalization_over_the_last_axis(tmp_path, shape, layer_norms, reshapes):
    path = export(tmp_path, Norm(shape), "norm")
    assert len(fuse.find_layernorms(onnx.load(path))) == 1
    done = run("prepare", path, "-o", tmp_path / "fused.onnx", "--fuse")
    assert done.exit_code == 0 and "1 decomposed LayerNorm(s) fused" in done.output, done.output
    ops = Counter(n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node)
    assert ops["LayerNormalization"] == layer_norms and ops["Reshape"] == reshapes
    assert not {"ReduceMean", "Sqrt", "Pow"} & set(ops)


def test_a_norm_over_the_channel_axis_is_not_fused(tmp_path):
    assert fuse.find_layernorms(onnx.load(export(tmp_path, ChannelNorm(), "channels"))) == []

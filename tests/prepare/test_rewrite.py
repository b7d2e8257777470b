"""`prepare --rewrite` and check's offer of it, on graphs torch exports (both exporters where they differ): check
measures the CPU nodes on the real HTP compiler, prints the prepare line, the printed line runs (its CPU proof
passes) and the check of its output measures again. Each model had CPU nodes that check called "re-export"."""

from __future__ import annotations

import json
import shlex
import warnings

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from qnndeploy.model import rewrite
from qnndeploy.qnn import htp
from tests.support.cli import run
from tests.support.host import require
from tests.support.rewrite_blocks import Contraction, LayerNormHW, MaskedAttention, Spectrum, Unfold, Windows

pytestmark = pytest.mark.needs_qnn


def export(tmp_path, module: nn.Module, args: tuple[torch.Tensor, ...], dynamo: bool):
    path = tmp_path / f"m_{'dynamo' if dynamo else 'ts'}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, str(path), dynamo=dynamo, opset_version=18 if dynamo else 17)
    return path


def checked(path, *options):
    result = run("check", path, *options, "--json")
    return result.exit_code, json.loads(result.stdout)["models"][0]


def cpu_ops(report) -> list[str]:
    return sorted(n["op_type"] for n in report["htp"]["cpu_nodes"])


CASES = [
    ("layernorm-axes", LayerNormHW, lambda: (torch.randn(1, 4, 8, 8),), False, ["LayerNormalization"]),
    ("layernorm-axes", LayerNormHW, lambda: (torch.randn(1, 4, 8, 8),), True, ["LayerNormalization"]),
    ("rank", Unfold, lambda: (torch.randn(1, 4, 8, 8),), False, ["Gather", "Reshape", "Transpose"]),
    ("rank", Unfold, lambda: (torch.randn(1, 4, 8, 8),), True, ["Gather", "Reshape", "Transpose"]),
    ("reshape-allowzero,rank", Windows, lambda: (torch.randn(1, 56, 56, 96),), True,
     ["Gemm", "Reshape", "Reshape", "Reshape", "Reshape", "Transpose"]),
    ("dft", Spectrum, lambda: (torch.randn(1, 512),), True, ["DFT"]),
    ("einsum", Contraction, lambda: (torch.randn(1, 49, 4, 16),), False, ["Einsum"]),
    ("einsum", Contraction, lambda: (torch.randn(1, 49, 4, 16),), True, ["Einsum"]),
]


@pytest.mark.parametrize(("kinds", "module", "args", "dynamo", "before"), CASES,
                         ids=[f"{c[1].__name__}-{'dynamo' if c[3] else 'torchscript'}" for c in CASES])
def test_check_offers_the_rewrite_and_the_printed_prepare_puts_every_node_on_the_htp(tmp_path, kinds, module, args,
                                                                                        dynamo, before):
    require(htp.available(), "onnxruntime-qnn")
    path = export(tmp_path, module(), args(), dynamo)
    code, report = checked(path)
    assert code == 10 and cpu_ops(report) == before  # was exit 11, "re-export"
    printed = run("check", path).output.splitlines()[-1].removeprefix("next: ")
    prepare, check_again = printed.split(", then ")
    assert prepare.endswith(f"--rewrite {kinds}")
    done = run(*shlex.split(prepare)[1:])
    assert done.exit_code == 0, done.output
    assert "ok" in done.output and "FAIL" not in done.output  # prepare's proof on the CPU
    code, report = checked(*shlex.split(check_again)[2:])
    assert code == 0 and cpu_ops(report) == [] and report["htp"]["cpu_partitions"] == 0


def test_where_mask_makes_a_masked_attention_compile_at_w8a16_and_equal_after_the_softmax(tmp_path):
    require(htp.available(), "onnxruntime-qnn")
    for dynamo in (False, True):
        path = export(tmp_path, MaskedAttention(), (torch.randn(1, 16, 8), torch.rand(1, 16, 16) > 0.5), dynamo)
        _, before = checked(path, "--precision", "w8a16")
        assert not before["htp"]["measured"]  # QNN refuses the Where with the -inf fill when composing the graph
        out = tmp_path / f"masked_{dynamo}.onnx"
        done = run("prepare", path, "-o", out, "--rewrite", "where-mask")
        assert done.exit_code == 0 and "an additive mask of -1000" in done.output, done.output
        _, after = checked(out, "--precision", "w8a16")
        assert after["htp"]["measured"] and cpu_ops(after) == [], after


def test_a_rewrite_that_matches_nothing_says_so_and_an_unknown_kind_is_bad_input(tmp_path):
    path = export(tmp_path, LayerNormHW(), (torch.randn(1, 4, 8, 8),), False)
    done = run("prepare", path, "-o", tmp_path / "o.onnx", "--rewrite", "dft")
    assert done.exit_code == 0 and "--rewrite dft: nothing to rewrite" in done.output
    bad = run("prepare", path, "-o", tmp_path / "p.onnx", "--rewrite", "fft")
    assert bad.exit_code == 2 and "dft, einsum, layernorm-axes" in bad.output and not (tmp_path / "p.onnx").exists()


def test_rank_merges_only_dims_that_stay_adjacent_and_leaves_the_rest():
    assert rewrite._groups([1, 8, 7, 8, 7, 96], [0, 1, 3, 2, 4, 5]) == [[1], [3], [2], [4, 5]]
    assert rewrite._groups([2, 3, 4, 5, 6, 7], [5, 4, 3, 2, 1, 0]) == [[5], [4], [3], [2], [1], [0]]  # none: 6 runs
    x = np.arange(8 * 7 * 8 * 7 * 96, dtype=np.float32)
    six = x.reshape(1, 8, 7, 8, 7, 96).transpose(0, 1, 3, 2, 4, 5).reshape(64, 49, 96)
    four = x.reshape(8, 7, 8, 7 * 96).transpose(0, 2, 1, 3).reshape(64, 49, 96)
    assert np.array_equal(six, four)
    assert onnx.__version__  # onnx is what the rewrite writes

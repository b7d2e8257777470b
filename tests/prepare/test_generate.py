"""prepare --generate on transformers' own decoders (tests/support/llm.py: Qwen2 with a tied embedding, Llama untied,
seeded random weights), exported by both torch exporters: the parts the app runs, proven by its loop on the CPU, and
the same greedy tokens transformers itself generates."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from qnndeploy.formats.generation import GenerationPlan, Role
from qnndeploy.model import generation
from qnndeploy.model.decode import GraphCall
from qnndeploy.model.onnxio import external_locations
from qnndeploy.prepare.generate import GenerateOptions, prepare_generation
from qnndeploy.validate import generation as checking
from tests.support import llm
from tests.support.cli import run

pytestmark = pytest.mark.slow

PROMPT, CONTEXT = 8, 64


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llm")


def parts_loop(plan: GenerationPlan) -> generation.Stepper:
    return generation.Stepper(checking.layout_of(plan), plan.prompt_tokens, plan.context,
                              checking.cpu_calls(plan, Role.PROMPT), checking.cpu_calls(plan, Role.DECODE))


@pytest.mark.parametrize(("spec", "dynamo"), [(llm.QWEN_TINY, False), (llm.QWEN_TINY, True),
                                              (llm.LLAMA_TINY, False)], ids=["qwen2-torchscript", "qwen2-dynamo",
                                                                              "llama-torchscript"])
def test_the_parts_choose_the_tokens_transformers_generates(exports: Path, tmp_path: Path, spec: llm.LlmSpec,
                                                            dynamo: bool) -> None:
    made = llm.cached_export(exports, spec, dynamo=dynamo)
    plan = prepare_generation(made.path, tmp_path / "gen" / "m.onnx",
                              GenerateOptions(prompt_tokens=PROMPT, context=CONTEXT, parts=2, steps=48))
    assert plan.proof.same_tokens and plan.proof.steps == 48 and plan.proof.max_logit_diff < 1e-3
    assert [p.layers for p in plan.parts] == [(0, 1), (2, 3)]
    # the truth is transformers' own greedy generate, from a prompt of a chunk of 8, then a padded one of 4 (token ids
    # the model's successor table holds: llm._peak)
    prompt = generation.seeded_prompt(spec.intermediate, PROMPT, 3)
    tokens, _ = generation.greedy(parts_loop(plan), prompt, 48)
    assert tokens == llm.generate(made.model, prompt, 48)
    assert len(set(tokens)) > 5  # a varied text, not one token repeated

    for part in plan.parts:  # the prompt and decode graphs keep their weights in one file, each tensor once
        data = plan.path.parent / f"m-p{part.index}.data"
        held = [external_locations(onnx.load(str(plan.path.parent / g.file), load_external_data=False))
                for g in part.graphs]
        assert held == [{data.name}] * 2 and 0.9 * max(g.weight_bytes for g in part.graphs) < data.stat().st_size \
            < 0.6 * sum(g.weight_bytes for g in part.graphs)
    assert sorted(p.name for p in plan.path.parent.iterdir() if p.suffix == ".data") == ["m-p1.data", "m-p2.data"]
    for part in plan.parts:
        for graph in part.graphs:
            model = onnx.load(str(plan.path.parent / graph.file), load_external_data=False)
            shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                      for v in [*model.graph.input, *model.graph.output]}
            seq = PROMPT if graph.role == Role.PROMPT else 1
            for layer in range(part.layers[0], part.layers[1] + 1):  # the part's own cache, its new entries only
                assert shapes[f"past_key_values.{layer}.key"] == [1, spec.kv_heads, CONTEXT - seq, spec.head_dim]
                assert shapes[f"present.{layer}.value"] == [1, spec.kv_heads, seq, spec.head_dim]
            assert not any(n.startswith("present.") and int(n.split(".")[1]) not in range(
                part.layers[0], part.layers[1] + 1) for n in shapes)
            if part.index == 1:
                assert shapes["input_ids"] == [1, seq] and shapes["attention_mask"] == [1, CONTEXT]
            else:  # fed by part 1: the residual stream, and what every layer reads (mask, rotary tables)
                assert "input_ids" not in shapes and set(graph.inputs) - set(plan.parts[0].graph(graph.role).outputs) \
                    == {f"past_key_values.{i}.{k}" for i in (2, 3) for k in ("key", "value")}
    assert "logits" in plan.parts[-1].graph(Role.DECODE).outputs


def test_calibration_covers_the_whole_context(exports: Path, tmp_path: Path) -> None:
    """The rotary tables are computed from positions inside part 1: calibrated only on early positions, 16-bit
    activations clip at late ones (measured: layer 0's new keys at cosine 0.35 at position 62 of 64, while the
    tokens still agreed). Half the calibration sequences end at the context's last position."""
    made = llm.cached_export(exports, llm.QWEN_TINY, dynamo=False)
    plan = prepare_generation(made.path, tmp_path / "m.onnx", GenerateOptions(prompt_tokens=PROMPT, context=CONTEXT))
    decode = plan.calib_folder / plan.parts[0].graph(Role.DECODE).graph
    prompt = plan.calib_folder / plan.parts[0].graph(Role.PROMPT).graph
    positions = [int(np.load(f)["position_ids"].max()) for f in sorted(decode.glob("*.npz"))]
    assert len(positions) >= 20 and max(positions) == CONTEXT - 2 and min(positions) < PROMPT * 2
    assert len(list(prompt.glob("*.npz"))) >= 20
    assert "12 seeded random prompts" in plan.calibration


def test_per_layer_diff_names_the_first_layer_that_goes_wrong(exports: Path, tmp_path: Path) -> None:
    """An NPU side whose part 2 gets noise on the residual stream it reads (layer 2's input): the tokens part, and
    fed the CPU's cache and inputs on both sides, layers 0 and 1 agree and layer 2 is named."""
    made = llm.cached_export(exports, llm.QWEN_TINY, dynamo=False)
    plan = prepare_generation(made.path, tmp_path / "m.onnx", GenerateOptions(prompt_tokens=PROMPT, context=CONTEXT,
                                                                           parts=2))
    rng = np.random.default_rng(0)

    def noisy(call: GraphCall, stream: str) -> GraphCall:
        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            h = feeds[stream]
            return call({**feeds, stream: h + rng.standard_normal(h.shape).astype(h.dtype) * float(h.std())})
        return run

    npu = {}
    for role in Role:
        cpu = checking.cpu_calls(plan, role)
        stream = next(n for n in plan.parts[1].graph(role).inputs if n.endswith("Add_1_output_0"))
        npu[role] = [cpu[0], noisy(cpu[1], stream)]
    check = checking.judge(plan, "SM8750", npu, "fp16", checking.GenerationLoop(
        steps=20, prompt=tuple(generation.seeded_prompt(llm.QWEN_TINY.intermediate, PROMPT, 3))), 0, {})
    assert not check.passed and check.parts_at == 0 and check.agreement < 0.95
    assert check.clamped is None  # fp16: nothing calibrated
    assert check.first_layer == 2
    assert [d.layer for d in check.layers] == [0, 1, 2, 3]
    assert all(min(d.key_cosine, d.value_cosine) > 0.9999 for d in check.layers[:2])
    assert check.logits is not None and check.logits["cosine"] < 0.999


def test_tokens_that_part_after_every_layers_cache_are_told_by_the_logits(exports: Path, tmp_path: Path) -> None:
    """An NPU side whose last part gives the logits of the token before (what the 0.5B build's decode graphs did on
    the emulator): every layer's cache agrees, no layer is named, and the logits from the same inputs say where."""
    made = llm.cached_export(exports, llm.QWEN_TINY, dynamo=False)
    plan = prepare_generation(made.path, tmp_path / "m.onnx", GenerateOptions(prompt_tokens=PROMPT, context=CONTEXT,
                                                                           parts=2))

    def shifted(call: GraphCall) -> GraphCall:
        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            out = call(feeds)
            return {**out, plan.logits: np.roll(out[plan.logits], 1, axis=-1)}  # every row's top one id higher
        return run

    npu = {role: [*checking.cpu_calls(plan, role)[:-1], shifted(checking.cpu_calls(plan, role)[-1])] for role in Role}
    check = checking.judge(plan, "SM8750", npu, "fp16", checking.GenerationLoop(
        steps=8, prompt=tuple(generation.seeded_prompt(llm.QWEN_TINY.intermediate, PROMPT, 3))), 0, {})
    assert not check.passed and check.parts_at == 0 and check.first_layer is None
    assert all(min(d.key_cosine, d.value_cosine) > 0.9999 for d in check.layers)
    assert check.logits is not None and check.logits["npu_top"] == check.logits["cpu_top"] + 1


def test_the_parts_are_the_layers_check_planned(exports: Path, tmp_path: Path) -> None:
    """check's printed prepare writes the parts check named, layer for layer: balanced by the bytes stored at the
    precision, the embedding and the lm_head counted where they go (not layers shared out evenly), and the compile
    it prints is at that precision."""
    import shlex

    made = llm.cached_export(exports, llm.QWEN_TINY, dynamo=False)
    checked = run("check", made.path, "--soc", "SM8650", "--precision", "w4a16", "--context-gb", "0.0001", "--json")
    assert checked.exit_code == 10, checked.output
    (model,) = json.loads(checked.stdout)["models"]
    planned = next(s for s in model["load"]["stored"] if s["precision"] == "w4a16")["layers"]
    # 0.1 MB a part: the embedding (65.5 kB at 16 bits) leaves room for one layer of 20 kB (int4) in part 1
    assert planned == [[0, 0], [1, 3]]
    words = shlex.split(model["prepare_command"])
    assert words[-5:] == ["--generate", "--parts", "2", "--precision", "w4a16"]
    out = tmp_path / "gen" / "qwen.onnx"
    r = run(*words[1:words.index("-o")], "-o", out, *words[words.index("--generate"):], "--prompt-tokens", PROMPT,
            "--context-tokens", CONTEXT, "--steps", 8)
    assert r.exit_code == 0, r.output
    plan = GenerationPlan.read(tmp_path / "gen" / "qwen.generation.json")
    assert [list(p.layers) for p in plan.parts] == planned and plan.precision == "w4a16"
    assert "--precision w4a16" in r.output


def test_not_a_decoder_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    from tests.support import synth_models

    onnx.save(synth_models.log_front(), tmp_path / "front.onnx")
    r = run("prepare", tmp_path / "front.onnx", "--generate", "-o", tmp_path / "out" / "m.onnx")
    assert r.exit_code == 2 and "no past_key_values.N.key/value inputs" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_cli_writes_the_plan_and_says_the_compile(exports: Path, tmp_path: Path) -> None:
    made = llm.cached_export(exports, llm.LLAMA_TINY, dynamo=False)
    out = tmp_path / "gen" / "llama.onnx"
    r = run("prepare", made.path, "--generate", "--prompt-tokens", PROMPT, "--context-tokens", CONTEXT, "--parts", 2,
            "--steps", 16, "-o", out)
    assert r.exit_code == 0, r.output
    assert "--share llama-p1=llama-p1-prompt,llama-p1-decode" in r.output and "--calib" in r.output
    plan = GenerationPlan.read(tmp_path / "gen" / "llama.generation.json")
    assert GenerationPlan.parse(json.loads(plan.path.read_text()), plan.path) == plan
    again = run("prepare", made.path, "--generate", "-o", out)  # the files exist: refused, nothing touched
    assert again.exit_code == 2 and "--force" in again.output
    bad = run("prepare", made.path, "--generate", "--parts", 9, "-o", tmp_path / "x" / "m.onnx")
    assert bad.exit_code == 2 and "--parts 9: give 1 to 4" in bad.output
    mixed = run("prepare", made.path, "--generate", "--shape", "input_ids=1,8", "-o", tmp_path / "y" / "m.onnx")
    assert mixed.exit_code == 2 and "leave out --shape" in mixed.output
    (tmp_path / "vocab.json").write_text("{}")
    for given in (["--generate", "--tokenizer", tmp_path / "vocab.json"], ["--tokenizer", made.path]):
        words = run("prepare", made.path, *given, "-o", tmp_path / "z" / "m.onnx")
        assert words.exit_code == 2 and len(words.output.strip().splitlines()) == 1, words.output
        assert not (tmp_path / "z").exists()

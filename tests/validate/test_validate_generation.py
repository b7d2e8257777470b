"""A decoder LLM by the printed advice to a verified bundle, on the real onnxruntime-qnn: transformers' Qwen2 (tied
embedding, GQA, seeded random weights) prepared into two parts (prepare --generate), each part's prompt and decode
graph compiled into one weight-shared w4a16 context for SM8650 and SM8750 (the command prepare prints, at w4a16),
validated by the generation loop on the host HTP emulator over 64 steps (the tokens' text by a real GPT-2
tokenizer.json, the faster-whisper wheel's, read back by Hugging Face's tokenizers), bundled (format 7's "generation",
the tokenizer with it), verified and scaffolded (the glue's GenerationConfig); a manifest whose parts the app could not
run is refused."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex
import shutil
from pathlib import Path

import pytest
import tokenizers

from qnndeploy.formats.generation import GenerationPlan
from qnndeploy.formats.manifest import Manifest
from qnndeploy.model import generation
from qnndeploy.qnn import qnnsystem
from qnndeploy.verification import checks
from qnndeploy.verification.checks import verify_bundle
from tests.support import llm, whisper
from tests.support.cli import run

pytestmark = [pytest.mark.needs_qnn, pytest.mark.slow]


def compile_as_printed(prepared: str, socs: str, build: Path) -> None:
    """The compile prepare printed, for `socs` into `build`."""
    advice = next(line for line in prepared.splitlines() if line.startswith("next: qnndeploy compile"))
    words = shlex.split(advice.removeprefix("next: qnndeploy "))
    words[words.index("SOC")] = socs
    words[words.index("build")] = str(build)
    compiled = run(*words, "--no-cache")
    assert compiled.exit_code == 0, compiled.output


def test_a_decoder_goes_by_the_printed_advice_to_a_verified_w4a16_bundle(tmp_path: Path) -> None:
    made = llm.cached_export(tmp_path / "llm", llm.QWEN_TINY, dynamo=False)
    checked = run("check", made.path, "--soc", "SM8650,SM8750")
    assert checked.exit_code == 10, checked.output  # fixable: prepare --generate
    words_file = whisper.wheel_model_dir() / "tokenizer.json"
    prepared = run("prepare", made.path, "--generate", "--prompt-tokens", 8, "--context-tokens", 96, "--parts", 2,
                   "--precision", "w4a16", "--tokenizer", words_file, "-o", tmp_path / "gen" / "qwen.onnx")
    assert prepared.exit_code == 0, prepared.output
    compile_as_printed(prepared.output, "SM8650,SM8750", tmp_path / "build")
    for soc in ("SM8650", "SM8750"):  # one binary per part and SoC, both graphs in it
        for k in (1, 2):
            record = json.loads((tmp_path / "build" / f"qwen-p{k}" / soc / "compile.json").read_text())
            assert record["precision"] == "w4a16" and record["status"] == "ok"
            assert [m["graph"] for m in record["members"]] == [f"qwen-p{k}-prompt", f"qwen-p{k}-decode"]
            assert all(m["calibration"]["samples"] >= 20 for m in record["members"])

    prompt = tmp_path / "prompt.txt"
    prompt.write_text(" ".join(map(str, generation.seeded_prompt(llm.QWEN_TINY.intermediate, 8, 3))))
    reference = tokenizers.Tokenizer.from_file(str(words_file))
    r = run("validate", tmp_path / "build", "--loop", f"generation:prompt={prompt},steps=64", "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert len(summary["targets"]) == 8 and all(t["status"] == "passed" for t in summary["targets"])
    ends = [line for line in r.stderr.splitlines() if " started " not in line]  # a graph's own figures decide nothing
    assert len(ends) == 8 and all(" measured (its chain or loop decides) in " in line for line in ends), r.stderr
    for t in summary["targets"]:
        loop = t["loop"]
        assert loop["kind"] == "generation" and loop["steps"] == 64 and loop["prompt"] == 12
        assert loop["agreement"] >= loop["min_agreement"] == 0.85
        assert [d["layer"] for d in loop["layers"]] == [0, 1, 2, 3]
        assert loop["logits"]["cpu_top"] == loop["logits"]["npu_top"] and loop["logits"]["cosine"] > 0.95
        assert loop["tokens"]["cpu"][:len(loop["tokens"]["npu"])] != [] and t["inputs"]["kind"] == "loop"
        for side in ("cpu", "npu"):  # what the app would show, by the real tokenizer
            assert loop["text"][side] == reference.decode(loop["tokens"][side]).strip() != ""
    record = json.loads((tmp_path / "build" / "qwen-p2" / "SM8750" / "validation-qwen-p2-decode.json").read_text())
    assert record["loop"]["kind"] == "generation" and record["passed"]

    r = run("bundle", "build", "--from-build", tmp_path / "build", "--name", "qwen", "--version", "1", "-o",
            tmp_path / "bundles")
    assert r.exit_code == 0, r.output
    bundle = tmp_path / "bundles" / "qwen-1"
    assert verify_bundle(bundle).ok
    manifest = Manifest.parse(json.loads((bundle / "manifest.json").read_text()))
    plan = GenerationPlan.read(tmp_path / "gen" / "qwen.generation.json")
    gen = manifest.generation
    assert gen is not None and gen.precision == "w4a16" and gen.context_tokens == 96 and gen.vocab == 512
    # balanced by what w4a16 stores: the 16-bit embedding table weighs about three int4 layers
    assert [(p.prompt, p.decode, p.layers) for p in gen.parts] == [
        ("qwen-p1-prompt", "qwen-p1-decode", (0, 0)), ("qwen-p2-prompt", "qwen-p2-decode", (1, 3))]
    assert [k.part for k in gen.kv] == [1, 2, 2, 2] and len(plan.parts) == 2
    assert gen.tokenizer is not None and gen.tokenizer.path == "generation/tokenizer.json"
    # each part's prompt and decode CPU models share one data file, bundled once
    shared = [(f.path, f.graphs) for f in manifest.cpu if f.graphs]
    assert shared == [(f"cpu/qwen-p{k}.data", (f"qwen-p{k}-prompt", f"qwen-p{k}-decode")) for k in (1, 2)]
    assert {f.path for f in manifest.cpu} == {p.relative_to(bundle).as_posix() for p in (bundle / "cpu").iterdir()}
    older = tmp_path / "older"
    shutil.copytree(bundle, older)
    written = json.loads((bundle / "manifest.json").read_text())
    del written["generation"]  # what format 6 had (its schema refuses the rest)
    (older / "manifest.json").write_text(json.dumps(written | {"format_version": 6}))
    assert any(p.path == "cpu/qwen-p1.data" and "several CPU models share, which bundle format 7 introduced"
               in p.message for p in verify_bundle(older).problems)
    assert (bundle / gen.tokenizer.path).read_bytes() == words_file.read_bytes()
    app = run("scaffold", bundle, "-o", tmp_path / "app", "--package", "com.example.qwen")
    assert app.exit_code == 0, app.output
    config = (tmp_path / "app" / "src" / "com" / "example" / "qwen" / "qnndeploy" / "Generated.kt").read_text()
    assert f'tokenizer = BundleFile(path = "generation/tokenizer.json", sha256 = "{gen.tokenizer.sha256}")' in config

    data = json.loads((bundle / "manifest.json").read_text())  # a part that reads a layer it does not own
    data["generation"]["kv"][2]["part"] = 1
    data["generation"]["kv"][3]["part"] = 1
    (bundle / gen.tokenizer.path).write_text("{}")  # and a tokenizer listed with its own bytes that is none
    data["generation"]["tokenizer"] |= {"sha256": hashlib.sha256(b"{}").hexdigest(), "size": 2}
    (bundle / "manifest.json").write_text(json.dumps(data))
    report = verify_bundle(bundle)
    assert not report.ok
    assert any("reads past_key_values.2.key, which neither the loop nor an earlier part gives" in p.message
               for p in report.problems)
    assert any(p.path == gen.tokenizer.path and p.message.startswith("is not a tokenizer the app can read")
               for p in report.problems)


def test_a_uint8_kv_cache_is_what_the_binaries_take_and_give_validated_bundled_and_verified(tmp_path: Path) -> None:
    """compile --kv-bits 8: each layer's cache in uint8 in the binaries' own inputs and outputs (read back by
    libQnnSystem), its past input and present output of one encoding in the prompt and the decode graph, so that the
    app appends the new entries' bytes; the loop on the emulator gives the CPU's tokens over 64 steps; the bundle
    (format 8) says so, verifies (shallow and deep) and scaffolds it; a manifest that hides it, or binaries that
    disagree on a byte's meaning, fail verify. And what it refuses."""
    made = llm.cached_export(tmp_path / "llm", llm.QWEN_TINY, dynamo=False)
    prepared = run("prepare", made.path, "--generate", "--prompt-tokens", 8, "--context-tokens", 96, "--parts", 2,
                   "--precision", "w4a16", "-o", tmp_path / "gen" / "qwen.onnx")
    assert prepared.exit_code == 0, prepared.output
    advice = next(line for line in prepared.output.splitlines() if line.startswith("next: qnndeploy compile"))
    words = shlex.split(advice.removeprefix("next: qnndeploy "))
    words[words.index("SOC")], words[words.index("build")] = "SM8750", str(tmp_path / "build")
    refused = run(*[w if w != "w4a16" else "fp16" for w in words if w not in ("--calib", str(tmp_path / "gen" /
                                                                                        "qwen.calib"))],
                  "--kv-bits", "8")
    assert refused.exit_code == 2 and "--kv-bits 8 applies to --precision w8a16 or w4a16" in refused.output
    alone = run("compile", tmp_path / "gen" / "qwen-p1-decode.onnx", "--precision", "w4a16", "--calib",
                tmp_path / "gen" / "qwen.calib", "--soc", "SM8750", "-o", tmp_path / "x", "--kv-bits", "8")
    assert alone.exit_code == 0, alone.output  # a graph of the plan, compiled alone: the plan beside it names its cache
    compiled = run(*words, "--kv-bits", "8", "--no-cache")
    assert compiled.exit_code == 0, compiled.output

    plan = GenerationPlan.read(tmp_path / "gen" / "qwen.generation.json")
    caches = {name: pair for k_in, k_out, v_in, v_out in plan.kv for pair in ((k_in, k_out), (v_in, v_out))
              for name in pair}
    for k in (1, 2):
        shown = run("inspect", tmp_path / "build" / f"qwen-p{k}" / "SM8750" / f"qwen-p{k}.bin", "--json")
        graphs = json.loads(shown.stdout)["binaries"][0]["context"]["graphs"]
        assert len(graphs) == 2  # the prompt's and the decode's, weight-shared
        codes: dict[tuple[str, str], set] = {}
        for g in graphs:
            for t in (*g["inputs"], *g["outputs"]):
                if t["name"] in caches:
                    assert t["dtype"] == "uint8" and t["quantization"]["encoding"] == "scale_offset", t
                    codes.setdefault(caches[t["name"]], set()).add((t["quantization"]["scale"],
                                                                    t["quantization"]["offset"]))
                else:
                    assert t["dtype"] in ("float32", "int32"), t
        assert len(codes) == 2 * (plan.parts[k - 1].layers[1] - plan.parts[k - 1].layers[0] + 1)
        assert all(len(c) == 1 for c in codes.values()), codes  # past and present, prompt and decode: one encoding
    record = json.loads((tmp_path / "build" / "qwen-p2" / "SM8750" / "compile.json").read_text())
    assert sorted(record["options"]["quantization"]["uint8_io"]) == sorted(caches)  # the compile's: each job's QDQ
    # graph takes those of its own inputs and outputs

    prompt = tmp_path / "prompt.txt"
    prompt.write_text(" ".join(map(str, generation.seeded_prompt(llm.QWEN_TINY.intermediate, 8, 3))))
    r = run("validate", tmp_path / "build", "--loop", f"generation:prompt={prompt},steps=64", "--json")
    assert r.exit_code == 0, r.output
    for t in json.loads(r.stdout)["targets"]:
        assert t["loop"]["steps"] == 64 and t["loop"]["agreement"] >= t["loop"]["min_agreement"], t["loop"]
        assert all(min(d["key_cosine"], d["value_cosine"]) > 0.95 for d in t["loop"]["layers"])

    r = run("bundle", "build", "--from-build", tmp_path / "build", "--name", "qwen8", "--version", "1", "-o",
            tmp_path / "bundles")
    assert r.exit_code == 0, r.output
    bundle = tmp_path / "bundles" / "qwen8-1"
    written = json.loads((bundle / "manifest.json").read_text())
    assert written["format_version"] == 8
    assert [(k["dtype"], k["npu_dtype"]) for k in written["generation"]["kv"]] == [("float32", "uint8")] * 4
    deep = verify_bundle(bundle, deep=True)
    assert deep.ok and deep.problems == [], deep.problems
    app = run("scaffold", bundle, "-o", tmp_path / "app", "--package", "com.example.qwen")
    assert app.exit_code == 0, app.output
    config = (tmp_path / "app" / "src" / "com" / "example" / "qwen" / "qnndeploy" / "Generated.kt").read_text()
    assert config.count('dtype = "float32",\n                npuDtype = "uint8",') == 4

    hidden = tmp_path / "hidden"
    shutil.copytree(bundle, hidden)
    for k in written["generation"]["kv"]:
        del k["npu_dtype"]
    (hidden / "manifest.json").write_text(json.dumps(written))
    problems = verify_bundle(hidden).problems
    assert any(p.path == "npu/SM8750/qwen-p1-decode_ctx.onnx" and "past_key_values.0.key uint8[1, 2, 95, 16]" in
               p.message for p in problems), problems
    manifest = Manifest.parse(json.loads((bundle / "manifest.json").read_text()))
    binaries = {a.path: a.sha256 for a in manifest.targets[0].artifacts if a.path.endswith(".bin")}
    contexts, _ = checks.read_contexts(bundle, binaries)
    assert checks._kv8_problems(manifest, manifest.targets[0], contexts) == []
    info = contexts["npu/SM8750/qwen-p1.bin"]
    assert isinstance(info, qnnsystem.ContextInfo)
    decode = next(g for g in info.graphs if any(t.dims[2] == 1 for t in g.outputs if t.name == "present.0.key"))
    moved = tuple(dataclasses.replace(t, quantization=dataclasses.replace(t.quantization, offset=-1))
                  if t.name == "present.0.key" and t.quantization else t for t in decode.outputs)
    other = dataclasses.replace(info, graphs=tuple(dataclasses.replace(g, outputs=moved) if g is decode else g
                                                   for g in info.graphs))
    [problem] = checks._kv8_problems(manifest, manifest.targets[0], {**contexts, "npu/SM8750/qwen-p1.bin": other})
    assert "encode layer 0's cache past_key_values.0.key -> present.0.key in several ways" in problem.message


def test_calibrated_on_other_tokens_the_loop_fails_names_the_clamped_tensors_and_the_mend_passes(tmp_path: Path
                                                                                                   ) -> None:
    """The 0.5B benchmark's first failure, small: the decode graph calibrated only on tokens the app never feeds (ids
    outside the successor table), so the last MLP's activations on the app's tokens lie far past their calibrated
    range and the HTP clamps them. validate names them and prints the prepare that mends it; followed, it passes."""
    made = llm.cached_export(tmp_path / "llm", llm.QWEN_TINY, dynamo=False)
    table = llm.QWEN_TINY.intermediate  # ids below it have a successor
    other, own, prompt = tmp_path / "other.txt", tmp_path / "own.txt", tmp_path / "prompt.txt"
    other.write_text("".join(" ".join(str(t + table) for t in generation.seeded_prompt(512 - table, 8, 100 + k))
                             + "\n" for k in range(12)))
    own.write_text("".join(" ".join(map(str, generation.seeded_prompt(table, 8, 100 + k))) + "\n" for k in range(12)))
    prompt.write_text(" ".join(map(str, generation.seeded_prompt(table, 8, 3))))

    def build(calib: Path, *prepare: str) -> tuple[int, str, dict]:
        prepared = run(*prepare, "--calib-tokens", calib) if prepare else run(
            "prepare", made.path, "--generate", "--prompt-tokens", 8, "--context-tokens", 96, "--parts", 2,
            "--precision", "w4a16", "--calib-tokens", calib, "-o", tmp_path / "gen" / "qwen.onnx")
        assert prepared.exit_code == 0, prepared.output
        compile_as_printed(prepared.output, "SM8650", tmp_path / "build")
        r = run("validate", tmp_path / "build", "--loop", f"generation:prompt={prompt},steps=32", "--json")
        return r.exit_code, r.stderr, json.loads(r.stdout)["targets"][0]["loop"]

    code, said, loop = build(other)
    assert code == 1 and loop["parts_at"] is not None and loop["agreement"] < 0.85, said
    clamped = loop["clamped"]
    assert clamped and all(c["factor"] >= 2 and c["part"] == 2 for c in clamped), clamped
    worst = max(clamped, key=lambda c: c["factor"])
    assert worst["tensor"].startswith("/model/model/layers.3/mlp/") and worst["factor"] > 3
    assert not worst["calibrated"][0] <= worst["value"] <= worst["calibrated"][1]
    assert loop["next"][:2] == ["qnndeploy", "prepare"] and loop["next"][-3:] == ["--calib-tokens", "FILE", "--force"]
    told = run("validate", tmp_path / "build", "--loop", f"generation:prompt={prompt},steps=32").output
    assert " tensor(s) there beyond the range their calibration samples gave them" in told
    mend = next(line for line in told.splitlines() if line.startswith("next: "))
    assert shlex.split(mend.removeprefix("next: ")) == loop["next"], told
    refused = run("bundle", "build", "--from-build", tmp_path / "build", "--name", "qwen", "--version", "1", "-o",
                  tmp_path / "bundles")  # says what judged the parts: their loop, not a part's mask of -inf
    assert refused.exit_code == 2 and "qwen-p1-prompt@SM8650 (its generation loop: " in refused.output, refused.output
    words = loop["next"][1:]
    at = words.index("--calib-tokens")
    code, said, loop = build(own, *words[:at], *words[at + 2:])  # the printed command, FILE the app's own tokens
    assert code == 0 and loop["agreement"] >= 0.85 and loop["clamped"] is None, said

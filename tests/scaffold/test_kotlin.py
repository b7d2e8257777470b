"""The generated Kotlin, for real: compiled by kotlinc, its selector unit-tested on the JVM, and in agreement with
qnndeploy/decide/decision.py on the same manifests and phones; the Play glue (`scaffold --play`) likewise, its pack
handling unit-tested and its two rules (PlayRules.playGroup, expectedGroup) in agreement with
qnndeploy/formats/playplan.py over thousands of phones and plans.

There is no android.jar here, so the glue and the sample app compile against stand-ins of the Android, ONNX Runtime
and sherpa-onnx classes they use (tests/kotlin/stubs, real signatures). kotlinc is slow to start, so everything —
the ONNX Runtime sample app, the sherpa-onnx glue, the Play glue, the stand-ins and the JVM tests — compiles in one
invocation. The Play packs are real (qnndeploy.package.play writes them); Play itself cannot run here, so the JVM tests
lay the pack's folders out as Play does on a phone: an install-time pack's qnndeploy_npu/ among the app's assets, a
fast-follow pack's in a folder of its own (AiPackLocation).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
import struct
import subprocess
import sys
import zipfile
import zlib
from dataclasses import asdict
from pathlib import Path

import pytest

from qnndeploy.base import socs
from qnndeploy.base.names import CONTEXT_BINARY, EPCONTEXT, FORMAT, FORMAT_VERSION
from qnndeploy.decide import reach
from qnndeploy.decide.decision import (
    REASONS,
    DeviceIdentity,
    NpuSource,
    Platform,
    Remembered,
    decide,
    qnn_libraries,
    soc_tables,
    template_fields,
)
from qnndeploy.decide.reach import Engine
from qnndeploy.demo import run_demo
from qnndeploy.formats.manifest import Manifest
from qnndeploy.formats.playplan import FOLDER, PlayPlan, expected_group, plan_groups, play_group, read_plan
from qnndeploy.package import play as play_room
from qnndeploy.package.play import package_play
from qnndeploy.qnn import htp, markers
from qnndeploy.scaffold import GENERATED, GLUE_PACKAGE, _context, _render, _write_glue, scaffold, templates_dir
from tests.support import KOTLIN, bundles, kotlin_build
from tests.support.host import require

pytestmark = [pytest.mark.slow, pytest.mark.needs_kotlin]

HERE = KOTLIN
GLUE = templates_dir() / "glue" / "kotlin"  # the glue's plain Kotlin sources
PACKAGE = GLUE_PACKAGE  # tests/kotlin/*.kt import the glue from this package, the templates' own
UNIT_TESTS = 24  # the number of tests in tests/kotlin/SelectorTests.kt: none may silently disappear
ON_DEVICE_TESTS = 12  # the number of tests in tests/kotlin/OnDeviceTests.kt
APP_TESTS = 7  # the number of tests in tests/kotlin/SampleAppTests.kt (the sample app's SampleViewModel)
PLAY_PACKAGE = "com.example.qnnplay"  # tests/kotlin/play/*.kt import the play glue from this package
PLAY_TESTS = 12  # the number of tests in tests/kotlin/play/PlayTests.kt: none may silently disappear
PLAY_TARGETS = ("SM8550", "SM8650", "SM8750")
GENERATION_TESTS = 11  # the number of tests in tests/kotlin/GenerationTests.kt
GEN_PACKAGE = "com.example.gen"  # tests/kotlin/GeneratedGeneration.kt imports the generation glue from this package


@pytest.fixture(scope="session")
def rendered(tmp_path_factory) -> dict:
    """The sample app (ONNX Runtime) and the sherpa-onnx glue, scaffolded from real bundles; the CPU model of rec
    keeps its weights in an external data file."""
    require(htp.available(), "onnxruntime-qnn")
    root = tmp_path_factory.mktemp("kotlin-render")
    inputs = bundles.compile_inputs(root / "inputs", external=("rec",))
    app = scaffold(bundles.build(root / "b1", inputs), PACKAGE, root / "app", app=True)
    sherpa = scaffold(bundles.build(root / "b2", inputs, runtime="bundled"), "com.example.sherpa", root / "sherpa",
                      engine="sherpa-onnx")
    return {"app": app, "sherpa": sherpa, "manifest": json.loads((app.glue / "bundle/assets/qnndeploy/manifest.json")
                                                                 .read_text())}


@pytest.fixture(scope="session")
def play(tmp_path_factory) -> dict:
    """A real bundle, its fast-follow and install-time packs, the play glue scaffolded from the fast-follow one, and
    both again with Play's limits lowered: per pack to the largest NPU file, so that each group spreads its four files
    over several packs (as a model over 1.5 GB deflated per SoC must), and for the base module below its CPU models,
    which then travel in an install-time asset pack (as a CPU fallback over 500 MB must)."""
    require(htp.available(), "onnxruntime-qnn")
    root = tmp_path_factory.mktemp("play-render")
    bundle = bundles.build(root / "b", bundles.compile_inputs(root / "inputs", PLAY_TARGETS))
    fast = package_play(bundle, root / "fast", delivery="fast-follow").path
    install = package_play(bundle, root / "install", delivery="install-time").path
    glue = scaffold(bundle, PLAY_PACKAGE, root / "glue", play=fast)
    npu = [a["path"] for t in json.loads((bundle / "manifest.json").read_text())["targets"] for a in t["artifacts"]]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(play_room, "PACK_LIMIT", max(len(zlib.compress((bundle / p).read_bytes())) for p in npu))
        patch.setattr(play_room, "BASE_LIMIT", read_plan(fast).base.deflated - 1)
        split = package_play(bundle, root / "split", delivery="fast-follow").path
        split_install = package_play(bundle, root / "split-install", delivery="install-time").path
    split_glue = scaffold(bundle, PLAY_PACKAGE, root / "split-glue", play=split)  # its assets: no CPU model
    return {"bundle": bundle, "fast": fast, "install": install, "glue": glue, "root": root, "split": split,
            "split_install": split_install, "split_glue": split_glue}


def generation_manifest(root: Path | None = None, names: str = "", targets=("SM8550", "SM8750")) -> dict:
    """A generation bundle's manifest (format 7's "generation", 2 parts of one layer each, N = 4, context 16, vocab
    37), its files written under root/qnndeploy/ as placeholders with the manifest's sha256 (no model runs in the
    JVM tests: the ONNX Runtime stand-in's model is tests/kotlin/GenerationTests.kt's FakeDecoder). names: a suffix of
    the tensor names and the precision, to test their escaping."""
    n, cl, vocab, heads, dim = 4, 16, 37, 2, 3

    def file(path: str, **kind: object) -> dict:
        data = f"placeholder {path}".encode()
        if root is not None:
            (root / "qnndeploy" / path).parent.mkdir(parents=True, exist_ok=True)
            (root / "qnndeploy" / path).write_bytes(data)
        return {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data), **kind}

    def t(name: str, dtype: str, *shape: int) -> dict:
        return {"name": name, "dtype": dtype, "shape": list(shape)}

    names_of = [{h: [f"past_key_values.{i}.{h}{names}", f"present.{i}.{h}{names}"] for h in ("key", "value")}
                for i in range(2)]
    kv = [{"layer": i, "part": i + 1, **names_of[i], "heads": heads, "head_dim": dim, "dtype": "float32"}
          for i in range(2)]
    graphs, parts = [], []
    for k in (1, 2):
        layer = names_of[k - 1]
        parts.append({"index": k, "prompt": f"lm-p{k}-prompt", "decode": f"lm-p{k}-decode", "layers": [k - 1, k - 1]})
        for kind, s in (("prompt", n), ("decode", 1)):
            ins = ([t(f"input_ids{names}", "int32", 1, s), t(f"attention_mask{names}", "int32", 1, cl),
                    t(f"position_ids{names}", "int32", 1, s)] if k == 1
                   else [t("hidden", "float32", 1, s, 2), t("mask_f", "float32", 1, cl)])
            ins += [t(layer[h][0], "float32", 1, heads, cl - s, dim) for h in ("key", "value")]
            outs = [t(layer[h][1], "float32", 1, heads, s, dim) for h in ("key", "value")]
            outs += ([t("hidden", "float32", 1, s, 2), t("mask_f", "float32", 1, cl)] if k == 1
                     else [t(f"logits{names}", "float32", 1, s, vocab)])
            graphs.append({"name": f"lm-p{k}-{kind}", "inputs": ins, "outputs": outs})
    targets_json = []
    for soc in targets:
        info = socs.find(soc)
        arts = [file(f"npu/{soc}/lm-p{k}.bin", graphs=[f"lm-p{k}-prompt", f"lm-p{k}-decode"], format=CONTEXT_BINARY)
                for k in (1, 2)]
        arts += [file(f"npu/{soc}/{g['name']}_ctx.onnx", graph=g["name"], format=EPCONTEXT) for g in graphs]
        targets_json.append({"soc": soc, "soc_id": info.soc_id, "dsp_arch": info.dsp_arch, "precision": "w4a16",
                             "artifacts": arts, "validation": None})
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "name": "lm", "version": "1.0.0", "created_by": "tests",
        "qairt": bundles.manifest()["qairt"],
        "source": {"model": "lm", "sha256": None, "commit": None, "license": None},
        "graphs": graphs, "targets": targets_json,
        "cpu": [file(f"cpu/{g['name']}.onnx", graph=g["name"], format="onnx") for g in graphs],
        "runtime": bundles.manifest()["runtime"], "records": [],
        "generation": {
            "kind": "decoder", "prompt_tokens": n, "context_tokens": cl, "vocab": vocab, "precision": f"w4a16{names}",
            "inputs": {"input_ids": f"input_ids{names}", "attention_mask": f"attention_mask{names}",
                       "position_ids": f"position_ids{names}"},
            "logits": f"logits{names}", "kv": kv, "parts": parts,
            "tokenizer": file("tokenizer.json") if names else None,
        },
    }


@pytest.fixture(scope="session")
def generation_glue(tmp_path_factory) -> dict:
    """The glue (common and ort) rendered for GEN_PACKAGE from a generation manifest whose names need escaping
    (quotes, backslash, dollar, braces, non-ASCII), by scaffold's own context and writer; and that manifest (names
    no real bundle of the tests has; tests/validate/test_validate_generation.py scaffolds a real one whole)."""
    root = tmp_path_factory.mktemp("generation-glue")
    raw = generation_manifest(names=' "$x" \\ {} \u00e9\U0001f600')
    context = _context(Manifest.parse(raw), GEN_PACKAGE, "glue", Engine.ORT, None)
    dest = root / "src" / GEN_PACKAGE.replace(".", "/") / "qnndeploy"
    _write_glue(templates_dir() / "glue", ["common", "ort"], GEN_PACKAGE, context["data"], dest)
    _render(templates_dir() / "glue", context, root)  # its README, Gradle file and manifest snippet
    (root / "manifest.json").write_text(json.dumps(raw))
    return {"kotlin": sorted(dest.glob("*.kt")), "manifest": root / "manifest.json", "readme": root / "README.md"}


@pytest.fixture(scope="session")
def kotlin(rendered, play, generation_glue, tmp_path_factory) -> dict:
    """One javac run for the Java stand-ins, one kotlinc run for all Kotlin (the app, the sherpa-onnx glue, the Play
    glue and every JVM test); returns the classpath to run with. The app's glue is compiled from the templates'
    sources as they are (their package is the app's) beside the app's Generated.kt."""
    app = rendered["app"]
    templated = [p for p in sorted(app.glue.rglob("*.kt")) if p.name != GENERATED]
    generated = [*template_sources(), *(p for p in sorted(app.path.rglob("*.kt")) if p not in templated)]
    generated += [p for r in (rendered["sherpa"], play["glue"]) for p in sorted(r.path.rglob("*.kt"))]
    generated += generation_glue["kotlin"]
    tests = sorted(HERE.glob("*.kt")) + sorted((HERE / "play").glob("*.kt"))
    return {**kotlin_build.build(generated, tests, tmp_path_factory.mktemp("kotlin-build")), "templated": templated}


def kotlin_generation_sources() -> list[Path]:
    """The generation glue's sources: the common and ort folders, and Generated.kt."""
    return [*template_sources(), Path(GENERATED)]


def template_sources() -> list[Path]:
    """The glue's plain Kotlin every output has (common/) and the ONNX Runtime engine's, as in templates/."""
    return [p for folder in ("common", "ort") for p in sorted((GLUE / folder).glob("*.kt"))]


def test_the_glue_is_the_templates_sources_as_they_are(rendered, kotlin):
    """What scaffold writes for the templates' own package is the templates' sources byte for byte, and the one
    generated file, so compiling the templates (test_all_generated_kotlin_compiles) compiles the app's glue."""
    assert {p.name for p in kotlin["templated"]} == {p.name for p in template_sources()}
    for path in kotlin["templated"]:
        assert path.read_bytes() == next(p for p in template_sources() if p.name == path.name).read_bytes(), path
    assert (rendered["app"].glue / "src" / PACKAGE.replace(".", "/") / "qnndeploy" / GENERATED).is_file()


def test_all_generated_kotlin_compiles(rendered, play, kotlin):
    names = {p.name for p in [*kotlin["generated"], *kotlin["templated"]]}
    assert {"MainActivity.kt", "SampleViewModel.kt", "OrtModels.kt", "SherpaOnnxQnn.kt", "QnnSelector.kt",
            "QnnRuntime.kt", "SocCatalog.kt",
            "BundleFiles.kt", "FailureMemory.kt", "MiniJson.kt", "Reasons.kt", "BundleManifest.kt"} <= names
    assert len(kotlin["generated"]) == sum(len(r.kotlin) for r in (rendered["app"], rendered["sherpa"], play["glue"])
                                           ) + len(kotlin_generation_sources())
    assert "Generated.kt" in names
    for cls in (f"{PACKAGE.replace('.', '/')}/MainActivity.class", "com/example/sherpa/qnndeploy/SherpaOnnxQnn.class",
                f"{PACKAGE.replace('.', '/')}/qnndeploy/OrtModels.class"):
        assert (kotlin["classes"] / cls).is_file(), cls


def test_selector_unit_tests_pass_on_the_jvm(rendered, kotlin):
    manifests = kotlin["out"] / "manifests.json"
    manifests.write_text(json.dumps({"two_targets": bundles.manifest(),
                                     "bundled": bundles.manifest(runtime="bundled"),
                                     "accepted_cpu": bundles.accepted(bundles.manifest()),
                                     "shared": {**bundles.shared(bundles.manifest()),
                                                "htp": {"performance_mode": "sustained_high_performance"}}}))
    scratch = kotlin["out"] / "scratch"
    done = kotlin_build.run_jvm(kotlin, "qnndeploy.tests.SelectorTestsKt", str(manifests),
                   str(rendered["app"].glue / "bundle" / "assets"), str(scratch))
    lines = done.stdout.splitlines()
    failures = [line for line in lines if line.startswith("FAIL")]
    assert not failures and done.returncode == 0, "\n".join(failures) or done.stderr
    assert sum(line.startswith("ok ") for line in lines) == UNIT_TESTS, done.stdout


def test_on_device_compile_unit_tests_pass_on_the_jvm(rendered, kotlin):
    """The on-device path of the glue (a SoC without a target, the bundle's ONNX compiled by the QNN EP on the
    phone): the first compile writes the cache, the next open is a cache hit, a key change compiles again, a timeout
    and a failed compile give the CPU and are remembered, the progress callback gets the elapsed time. The EP's
    session creation is the stand-in of tests/kotlin/stubs (OrtEnvironment.STAND_IN_CREATE)."""
    assets = rendered["app"].glue / "bundle" / "assets"
    done = kotlin_build.run_jvm(kotlin, "qnndeploy.tests.OnDeviceTests", str(assets), str(kotlin["out"] / "on-device"))
    lines = done.stdout.splitlines()
    failures = [line for line in lines if line.startswith("FAIL")]
    assert not failures and done.returncode == 0, "\n".join(failures) or done.stderr
    assert sum(line.startswith("ok ") for line in lines) == ON_DEVICE_TESTS, done.stdout


def test_sample_app_view_model_unit_tests_pass_on_the_jvm(rendered, kotlin):
    """The sample app's SampleViewModel (templates/app/kotlin), compiled as the app has it, against stand-ins of
    AndroidX's ViewModel, AndroidViewModel, ViewModelStore and viewModelScope (lifecycle-viewmodel) and Android's
    Application (tests/kotlin/stubs), with the real kotlinx.coroutines StateFlow: the state says it is choosing, then
    shows the decision; a run turns the button off, then shows the timings or the failure; models that do not open
    are shown so; a finished screen closes the models after the opening or the run under way; with a generation
    bundle, a run shows a generation (the stand-in model of GenerationTests.kt)."""
    assets = rendered["app"].glue / "bundle" / "assets"
    generation = kotlin["out"] / "app-generation-assets"
    (generation / "qnndeploy").mkdir(parents=True, exist_ok=True)
    (generation / "qnndeploy" / "manifest.json").write_text(json.dumps(generation_manifest(generation)))
    done = kotlin_build.run_jvm(kotlin, "qnndeploy.tests.SampleAppTestsKt", str(assets), str(kotlin["out"] / "app"),
                                str(generation))
    lines = done.stdout.splitlines()
    failures = [line for line in lines if line.startswith("FAIL")]
    assert not failures and done.returncode == 0, "\n".join(failures) or done.stderr
    assert sum(line.startswith("ok ") for line in lines) == APP_TESTS, done.stdout


GEN_PHONES = ("SM8750", "SM8550", "SM8350", "unknown")  # two bundle targets, a catalog SoC without one, no SoC


def test_generation_session_unit_tests_pass_on_the_jvm(kotlin):
    """The glue's GenerationSession against ONNX Runtime's stand-in with a fake two-part decoder whose tokens depend
    on every cache entry (tests/kotlin/GenerationTests.kt): each phone's decision is the Python twin's (NPU on a
    target, its EPContext wrappers sharing each part's context; CPU elsewhere, the parts' ONNX), the tokens are the
    model's rule computed apart, prompts run in chunks of N with the cache right-aligned and masked, a stop token,
    a full context and a prompt that does not fit end or refuse a generation, a failed NPU open falls to the CPU
    with its reason, and nothing is left open."""
    assets = kotlin["out"] / "generation-assets"
    manifest = generation_manifest(assets)
    (assets / "qnndeploy" / "manifest.json").write_text(json.dumps(manifest))
    parsed = Manifest.parse(manifest)
    phones = []
    for soc in GEN_PHONES:
        d = decide(parsed, DeviceIdentity(soc, None, 35), load_errors={}, lib_dir="/data/app/lib/arm64",
                   npu_format=EPCONTEXT, app_version="1.0 (1) 1")
        phones.append({"soc": soc, "provider": d.provider.value, "reason_key": d.reason_key, "reason": d.reason,
                       "paths": d.paths})
    assert [p["provider"] for p in phones] == ["npu", "npu", "cpu", "cpu"]
    setup = kotlin["out"] / "generation.json"
    setup.write_text(json.dumps({"assets": str(assets), "scratch": str(kotlin["out"] / "generation"),
                                 "phones": phones}))
    done = kotlin_build.run_jvm(kotlin, "qnndeploy.tests.GenerationTests", str(setup))
    lines = done.stdout.splitlines()
    failures = [line for line in lines if line.startswith("FAIL")]
    assert not failures and done.returncode == 0, "\n".join(failures) or done.stderr
    assert sum(line.startswith("ok ") for line in lines) == GENERATION_TESTS, done.stdout


def fake_decoder(manifest: dict) -> tuple[list, list]:
    """The prompt and decode calls of GenerationTests.kt's FakeDecoder, in Python: the same rule (part 1's cache
    entries encode token and position, its hidden state the sum of every token so far; part 2's logits peak at
    (sum + 3 * position + 1) mod vocab), on every input the Stepper gives it."""
    import numpy as np

    g = manifest["generation"]
    cl, vocab = g["context_tokens"], g["vocab"]
    ins = g["inputs"]
    kv = {k["part"]: k for k in g["kv"]}

    def entries(per_token: np.ndarray, heads: int, dim: int, step: float) -> np.ndarray:
        h = np.arange(heads, dtype=np.float32)[None, :, None, None]
        d = np.arange(dim, dtype=np.float32)[None, None, None, :]
        return (per_token.astype(np.float32)[None, None, :, None] + h * step + d * step / 2).astype(np.float32)

    def part1(v: dict) -> dict:
        ids, mask, pos = v[ins["input_ids"]][0], v[ins["attention_mask"]][0], v[ins["position_ids"]][0]
        layer = kv[1]
        key = v[layer["key"][0]]
        s = ids.shape[0]
        valid = int(mask.sum()) - s
        held = key[0, 0, key.shape[2] - valid:, 0] if valid else np.zeros(0, np.float32)
        sums = np.float32(held.sum()) + np.cumsum(ids).astype(np.float32)
        hidden = np.stack([sums, pos.astype(np.float32)], axis=-1)[None]
        heads, dim = layer["heads"], layer["head_dim"]
        return {layer["key"][1]: entries(ids, heads, dim, 0.5), layer["value"][1]: entries(pos, heads, dim, 0.25),
                "hidden": hidden.astype(np.float32), "mask_f": mask.astype(np.float32)[None]}

    def part2(v: dict) -> dict:
        layer = kv[2]
        hidden = v["hidden"][0]
        sums, pos = hidden[:, 0], hidden[:, 1].astype(np.int64)
        nxt = (sums.astype(np.int64) + 3 * pos + 1) % vocab
        logits = -np.abs(np.arange(vocab)[None, :] - nxt[:, None]).astype(np.float32)
        heads, dim = layer["heads"], layer["head_dim"]
        return {layer["key"][1]: entries(sums, heads, dim, 0.5), layer["value"][1]: entries(pos, heads, dim, 0.25),
                g["logits"]: logits[None]}

    assert cl == 16
    return [part1, part2], [part1, part2]


TRACE_CASES = [[[5, 1, 4, 1, 5, 9, 2, 6, 5, 3], 4], [[1, 2, 3, 4, 5], 6], [[11], 3], [[7, 7, 7, 7], 20],
               [[2] * 15, 5], [[3, 1, 4, 1, 5, 9, 2, 6, 5], 100]]


def test_the_apps_generation_loop_feeds_the_graphs_what_validates_does(kotlin):
    """The glue's GenerationSession and validate's host loop (qnndeploy/model/generation.py's Stepper, what
    `validate` runs on the CPU and the emulator) on the same fake decoder: per prompt, the same tokens, the same
    graphs in the same order, and every input of every run equal (the padded ids, mask, positions, the cache's past
    entries, what part 2 reads from part 1), through prompt chunks, a last single prompt token, decode steps and a
    full cache."""
    import numpy as np

    from qnndeploy.model.generation import DecoderLayout, KvLayer, Stepper, greedy

    assets = kotlin["out"] / "trace-assets"
    manifest = generation_manifest(assets)
    (assets / "qnndeploy" / "manifest.json").write_text(json.dumps(manifest))
    setup, out = kotlin["out"] / "trace.json", kotlin["out"] / "trace-out.json"
    setup.write_text(json.dumps({"assets": str(assets), "scratch": str(kotlin["out"] / "trace"),
                                 "cases": TRACE_CASES}))
    done = kotlin_build.run_jvm(kotlin, "qnndeploy.tests.GenerationTrace", str(setup), str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(out.read_text())["cases"]
    g = manifest["generation"]
    kv = tuple(KvLayer(k["layer"], (k["key"][0], k["key"][1]), (k["value"][0], k["value"][1])) for k in g["kv"])
    lay = DecoderLayout(g["inputs"]["input_ids"], g["inputs"]["attention_mask"], g["inputs"]["position_ids"],
                        g["logits"], kv, g["kv"][0]["heads"], g["kv"][0]["head_dim"], "float32")
    prompt_calls, decode_calls = fake_decoder(manifest)
    graph_inputs = {gr["name"]: [t["name"] for t in gr["inputs"]] for gr in manifest["graphs"]}
    for (prompt, max_tokens), kotlin_case in zip(TRACE_CASES, got, strict=True):
        runs: list[tuple[str, dict]] = []

        def watch(seq: int, k: int, values: dict, runs: list = runs) -> None:
            part = g["parts"][k]
            graph = part["prompt"] if seq == g["prompt_tokens"] else part["decode"]
            runs.append((graph, {n: np.asarray(values[n]).ravel().tolist() for n in graph_inputs[graph]}))

        stepper = Stepper(lay, g["prompt_tokens"], g["context_tokens"], prompt_calls, decode_calls, watch=watch)
        tokens, _ = greedy(stepper, prompt, max_tokens)
        assert kotlin_case["tokens"] == tokens, prompt
        assert [r["graph"] for r in kotlin_case["runs"]] == [graph for graph, _ in runs], prompt
        for i, (mine, (graph, theirs)) in enumerate(zip(kotlin_case["runs"], runs, strict=True)):
            assert mine["inputs"] == theirs, (prompt, i, graph)
    assert {c["stop"] for c in got} == {"MAX_TOKENS", "CONTEXT_FULL"}


def test_generated_generation_is_the_manifests(generation_glue, rendered, kotlin):
    """Generated.GENERATION, rendered by scaffold from a manifest whose names need escaping, equals what the glue
    parses from that manifest at run time; a bundle without a generation renders null."""
    done = kotlin_build.run_jvm(kotlin, "qnndeploy.tests.GeneratedGeneration", str(generation_glue["manifest"]))
    assert done.returncode == 0 and done.stdout.startswith("ok "), done.stdout + done.stderr
    generated = next(p for p in kotlin["generated"] if p.name == GENERATED and "com/example/qnnsample" in p.as_posix())
    assert "val GENERATION: GenerationConfig? = null\n" in generated.read_text()
    readme = generation_glue["readme"].read_text()  # the glue's README says how to run it
    assert "decoder LLM's generation: 2 parts, prompt graphs of 4\n   tokens, context 16." in readme
    assert "`GenerationSession.open(context)`" in readme
    assert "GenerationSession" not in (rendered["app"].glue / "README.md").read_text()


# Device properties as odd as a vendor may set them: both twins trim ASCII whitespace only and change the case of
# ASCII letters only, so Unicode spaces, the Kelvin sign, the long s or the sharp s are kept as they are on both sides.
ODD_DEVICES = [DeviceIdentity("\u00a0SM8750", None, 34), DeviceIdentity("SM8750\u0085", None, 34),
               DeviceIdentity("\u017fm8750", None, 34), DeviceIdentity("stra\u00dfe", None, 34),
               DeviceIdentity(" Unknown\t", "\u212aalama", 30), DeviceIdentity("\x0bsm8750\x0c", None, 34),
               DeviceIdentity(None, " KALAMA\r\n", 30), DeviceIdentity(None, "\u00a0", 30),
               DeviceIdentity(None, "\x1c", 30), DeviceIdentity("\U0001f600", None, 34)]
ODD_ARCHS = ["v79", "79", "V79", "vv79", "v", "", " v79", "v\u00e9", "\U0001f600v79", "v\U0001f600"]
ODD_VERSIONS = [3, 0, -1, 1.0, 2.5, True, None, "2", 10**20, [2], {"v": 2}]
# QAIRT versions of the loaded runtime and of the bundle's qairt.min_runtime: well-formed ones compared as numbers,
# and malformed ones (which refuse nothing, on both sides).
RUNTIMES = [None, "2.49.0", "2.48.9", "2.9.0", "2.50.10", "10.0.0", "02.049.000", "999999999.999999999.999999999",
            "2.51", "v2.48.0", "2.48.0.260929181845", " 2.48.0", "2.48.0\n", "\u0662.48.0", "1234567890.0.0", "",
            "2.-1.0", "+2.48.0", "2.48.0\u0085"]
MIN_RUNTIMES = ["2.49.0", "2.10.0", "0.0.0", "2.49", "v2.49.0", " 2.49.0", "", "9999999999.0.0", 2.49, None,
                "\uff12.49.0"]


def spellings(name: str) -> list[str]:
    """A name as a phone may report it: as written, lower case, mixed case, with ASCII whitespace around it."""
    mixed = "".join(c.lower() if i % 2 else c.upper() for i, c in enumerate(name))
    return [name, name.lower(), mixed, f" \t{name}\r\n", f"\x0b{name.lower()}\x0c", f"\n{mixed} "]


def spelled_devices() -> list[DeviceIdentity]:
    """Every model and alias of the catalog in every spelling of spellings(), as Build.SOC_MODEL and ro.soc.model."""
    return [DeviceIdentity(spelled, None, sdk) for soc in socs.catalog() for name in soc.names
            for spelled in spellings(name) for sdk in (30, 35)]


def aliased_manifest(**kw) -> dict:
    """A bundle with a target for every SoC of the catalog that phones also report by another name."""
    return bundles.manifest(targets=tuple(s.model for s in socs.catalog() if s.aliases), **kw)


def agreement_cases(real_manifest: dict) -> tuple[list[dict], list[dict]]:
    """Manifests × phones × library outcomes × environments × remembered failures × engines, and the failure to set
    ADSP_LIBRARY_PATH on a smaller product; the loaded runtime's version × the bundle's min_runtime on another;
    every catalog name in every spelling × bundles with targets for them (and soc_ids the catalog does not have)."""
    two = bundles.manifest()
    bundled = bundles.manifest(runtime="bundled")
    no_v79 = bundles.manifest(runtime="bundled")
    no_v79["runtime"]["libs"] = [lib for lib in no_v79["runtime"]["libs"] if "V79" not in lib["path"]]
    core = [
        real_manifest, two, bundled, no_v79, bundles.manifest(formats=(CONTEXT_BINARY,)),
        bundles.manifest(targets=()), bundles.manifest(targets=("SM8750", "SM8850", "QCS9100")),
        {**two, "format_version": 1}, bundles.manifest(external=("det", "rec")), {**two, "format": "something-else"},
        bundles.shared(two), bundles.shared(bundles.manifest(formats=(CONTEXT_BINARY,))),
        bundles.shared(two, graphs=("det", "other")),
        bundles.split(two), bundles.split(bundled, cpu_graph="rec"),
    ]
    versions = [{**two, "format_version": v} for v in ODD_VERSIONS]
    runtimes = [{**m, "qairt": {**m["qairt"], "min_runtime": r}} for m in (two, bundled) for r in MIN_RUNTIMES]
    runtimes += [{**two, "qairt": "not an object"}, {k: v for k, v in two.items() if k != "qairt"}]
    archs = []  # a target arch the schema refuses still names the same libraries on both sides
    for arch in ODD_ARCHS[1:]:
        for m in (bundles.manifest(targets=("SM8750",)), bundles.manifest(targets=("SM8750",), runtime="bundled")):
            m["targets"][0]["dsp_arch"] = arch
            archs.append(m)
    accepts = accepted_manifests(two, bundled)
    # the target's soc_id is the manifest's, whatever the catalog says (bundle verify compares the two)
    ids = [{**two, "targets": [{**t, "soc_id": v} for t in two["targets"]]} for v in (0, 12345, 2**40)]
    named = [aliased_manifest(), aliased_manifest(runtime="bundled"), *ids]
    manifests = core + versions + archs + runtimes + accepts + named
    devices = [DeviceIdentity("SM8750", "sun", 35), DeviceIdentity("SM8750P", None, 34),
               DeviceIdentity(" sm8550 ", "kalama", 33), DeviceIdentity("SM8550", "kalama", 30),
               DeviceIdentity(None, "kalama", 30), DeviceIdentity("", "sun", 29), DeviceIdentity(None, "lito", 30),
               DeviceIdentity(None, None, 28), DeviceIdentity("unknown", "pineapple", 31),
               DeviceIdentity("s5e9945", "s5e9945", 34), DeviceIdentity("SM8650", "pineapple", 34), *ODD_DEVICES]
    for soc in socs.catalog():  # every model, alias and codename of the catalog
        devices += [DeviceIdentity(name, None, 33) for name in (soc.model, *soc.aliases)]
        devices += [DeviceIdentity(None, c, 30) for c in soc.codenames]
    loads = [{}, {"libQnnHtpV79Stub.so": 'dlopen failed: library "libcdsprpc.so" not found'},
             {"libQnnSystem.so": "a", "libQnnHtp.so": "b", "libQnnHtpV73Stub.so": "c", "libQnnHtpV79Stub.so": "d"}]
    envs = [None, "/odm/lib/rfsa/adsp;/vendor/dsp/cdsp;;", " ;\u0085;\u00a0;/odm/dsp; "]
    remembered = [None, Remembered("1.0 (1) 7", "demo 1.0.0", "QNN error 1008"),
                  Remembered("0.9 (0) 3", "demo 1.0.0", "old failure")]
    engines = (CONTEXT_BINARY, EPCONTEXT)
    sm8750 = [DeviceIdentity("SM8750", "sun", 35), DeviceIdentity(None, "sun", 30),
              DeviceIdentity(" sm8750p\n", None, 33)]
    products = [
        itertools.product(core, devices, loads, envs, remembered, [None], engines, [None]),
        itertools.product(versions, devices[:11], [{}], [None], [None], [None], engines, [None]),
        itertools.product(archs, sm8750, loads, envs[:1], remembered[:2], [None], engines, [None]),
        itertools.product(core, devices, [{}], [None], remembered[:2], ["EINVAL (Invalid argument)"], engines,
                          [None]),
        itertools.product(core[:4] + runtimes, sm8750 + devices[2:3], loads[:2], [None], remembered[:2], [None],
                          engines, RUNTIMES),
        itertools.product(accepts, sm8750 + devices[2:3] + devices[10:11], loads[:2], envs[:1], remembered[:2],
                          [None, "EINVAL (Invalid argument)"], engines, [None, "2.48.0"]),
        itertools.product([real_manifest, two, *named], spelled_devices(), loads[:2], envs[:1], remembered[:1],
                          [None], engines, [None]),
    ]
    on_device, od_products = on_device_cases(two, bundled, loads, remembered, engines)
    manifests = manifests[:-len(named)] + on_device + named  # the aliased bundles and odd soc_ids stay last
    index = {id(m): i for i, m in enumerate(manifests)}
    cases = []
    with_platform = itertools.chain(((*p, None) for p in itertools.chain(*products)), itertools.chain(*od_products))
    for manifest, device, load, env, rem, adsp_error, fmt, runtime, platform in with_platform:
        cases.append({"manifest": index[id(manifest)], "device": asdict(device), "load_errors": load,
                      "adsp_before": env, "adsp_error": adsp_error, "lib_dir": "/data/app/x/lib/arm64",
                      "npu_format": fmt, "app_version": "1.0 (1) 7", "remembered": asdict(rem) if rem else None,
                      "runtime_version": runtime, "platform": platform._asdict() if platform else None,
                      # as QnnRuntime derives it: only the ONNX Runtime glue compiles on the phone
                      "compiles_onnx": fmt == EPCONTEXT})
    return manifests, cases


# Phones the on-device path meets: a catalog SoC without a target that the bundles validated (SM8845, v81), one
# they did not (SM8350, v68, no fp16), a SoC with a target, SoCs the catalog does not know (by SOC_MODEL, by an
# unknown ro.board.platform, or reporting nothing), and the platform info the QNN backend may report for them.
OD_DEVICES = [DeviceIdentity("SM8845", None, 35), DeviceIdentity(" sm8845p\n", None, 33),
              DeviceIdentity("SM8350", "lahaina", 34), DeviceIdentity(None, "lahaina", 30),
              DeviceIdentity("SM8750", "sun", 35), DeviceIdentity("SM9999", None, 36),
              DeviceIdentity(None, "newchip", 30), DeviceIdentity(None, None, 28), DeviceIdentity("unknown", None, 31)]
OD_PLATFORMS = [None, Platform(97, "v81"), Platform(200, "v79"), Platform(201, "v99"), Platform(5, "v68"),
                Platform(0, "81")]
# below, at and above the oldest QAIRT measured to compile for every arch (2.47.0), unknown and malformed
OD_RUNTIMES = [None, "2.46.9", "2.47.0", "2.51.0", "10.0.0", "2.47", "2.9.0"]


def on_device_cases(two: dict, bundled: dict, loads: list, remembered: list, engines: tuple) -> tuple[list, list]:
    """Bundles with on_device (format 4): validated for every arch, for some, for none, per graph differently, with
    models of their own, a split model, no targets at all, a bundled runtime with and without the v81 libraries, an
    odd budget, and hand-edited shapes (a graph without an entry, a path the manifest does not list, odd arches)."""
    v81 = bundles.manifest(runtime="bundled", targets=("SM8550", "SM8750", "SM8850"))
    base = bundles.on_device(two)
    missing_rec = {**base, "on_device": {**base["on_device"], "graphs": base["on_device"]["graphs"][:1]}}
    unlisted = {**base, "on_device": {**base["on_device"], "graphs": [
        {**base["on_device"]["graphs"][0], "path": "on-device/nowhere.onnx"}, base["on_device"]["graphs"][1]]}}
    no_budget = {**base, "on_device": {k: v for k, v in base["on_device"].items() if k != "budget_s"}}
    no_options = {**base, "on_device": {**base["on_device"], "graphs": [
        {k: v for k, v in g.items() if k != "ep_options"} for g in base["on_device"]["graphs"]]}}
    manifests = [
        base, bundles.on_device(bundled), bundles.on_device(v81), bundles.on_device(two, validated=()),
        bundles.on_device(two, validated={"det": ["v73", "v79", "v81"], "rec": ["v73", "v79"]}),
        bundles.on_device(two, validated=("81", "V81", " v81", "v99")),
        bundles.on_device(bundles.split(two), own=("rec",)), bundles.on_device(two, own=("det", "rec")),
        bundles.on_device(bundles.manifest(targets=())), bundles.on_device(two, budget_s=2.5),
        {**bundles.on_device(two), "format_version": 3}, missing_rec, unlisted, no_budget, no_options,
        {**two, "format_version": 4, "on_device": "not an object"},
    ]
    v81_load = {"libQnnHtpV81Stub.so": 'dlopen failed: library "libcdsprpc.so" not found'}
    products = [
        itertools.product(manifests, OD_DEVICES, [{}], [None], [None], [None], engines, OD_RUNTIMES[:4],
                          OD_PLATFORMS),
        itertools.product(manifests[:3] + manifests[6:7], OD_DEVICES[:2] + OD_DEVICES[5:6], [{}, v81_load, loads[2]],
                          [None], remembered[:2], [None, "EINVAL (Invalid argument)"], engines[1:], OD_RUNTIMES,
                          OD_PLATFORMS[:2]),
    ]
    return manifests, products


def accepted_manifests(two: dict, bundled: dict) -> list[dict]:
    """Targets with accepted validation failures (bundle --accept): for the CPU or not, and every odd shape a
    hand-edited manifest may give them, which both twins must read alike."""
    def summaries(m: dict, graphs: object, on: object = "cpu") -> dict:
        t = m["targets"][1]  # SM8750
        return {**m, "targets": [m["targets"][0], {**t, "validation": {"passed": False, "graphs": graphs},
                                                   "accepted_on": on}]}

    odd = '<r> "$x" \\ {} \u00e9\U0001f600'
    reasons: tuple[object, ...] = ({"reason": ""}, {"reason": odd}, {"reason": 5}, {"reason": None}, "r-rec",
                                   {"why": "x"}, [])
    return [
        bundles.accepted(two), bundles.accepted(two, graphs=("det", "rec")), bundles.accepted(bundled),
        bundles.accepted(two, soc="SM8550"), bundles.accepted(bundles.shared(two), graphs=("det",)),
        *(bundles.accepted(two, on=on) for on in ("npu", None, "CPU", " cpu", 1, True, ["cpu"])),
        *(bundles.accepted(two, reasons={"rec": r}) for r in reasons),
        summaries(two, {"rec": {"accepted": {"reason": "second"}}, "det": {"accepted": {"reason": "first"}}}),
        summaries(two, {"other": {"accepted": {"reason": "x"}}}), summaries(two, []), summaries(two, None),
        summaries(two, {"rec": None, "det": 3}),
        {**two, "targets": [two["targets"][0], {**two["targets"][1], "validation": "x", "accepted_on": "cpu"}]},
    ]


def reason_calls() -> list[dict]:
    """Every function of the generated Reasons object, with odd values for its fields (quotes, backslashes, dollars,
    braces, non-ASCII), and the text Python makes of the same template."""
    calls = []
    for templates in REASONS.values():
        for key, template in templates.items():
            fields = {f: f'<{f}> "$x" \\ {{}} \u00e9\U0001f600' for f in template_fields(template)}
            calls.append({"function": _camel(key), "args": list(fields.values()), "key": key,
                          "text": template.format(**fields)})
    return calls


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p.capitalize() for p in rest)


def test_python_and_kotlin_decide_alike(rendered, kotlin):
    manifests, cases = agreement_cases(rendered["manifest"])
    reasons = reason_calls()
    path = kotlin["out"] / "agreement.json"
    path.write_text(json.dumps({"manifests": manifests, "cases": cases, "archs": ODD_ARCHS,
                                "reasons": [{"function": r["function"], "args": r["args"]} for r in reasons]}))
    done = kotlin_build.run_jvm(kotlin, "qnndeploy.tests.Agreement", str(path))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert len(out["cases"]) == len(cases) > 20_000
    models, _ = soc_tables()
    named = manifests[-5:]  # agreement_cases' last manifests: the aliased bundles, then the odd soc_ids
    assert [m["targets"][0]["soc_id"] for m in named[2:]] == [0, 12345, 2**40]
    python_keys, kotlin_keys = set(), set()
    npu_names = set()  # (the SoC, the name as the phone reported it) decided on the NPU by both twins
    parsed = [Manifest.parse(m) for m in manifests]  # once each: the cases share them
    for case, got in zip(cases, out["cases"], strict=True):
        rem = case["remembered"]
        manifest = manifests[case["manifest"]]
        platform = Platform(**case["platform"]) if case["platform"] else None
        expected = decide(parsed[case["manifest"]], DeviceIdentity(**case["device"]), load_errors=case["load_errors"],
                          lib_dir=case["lib_dir"], adsp_before=case["adsp_before"], adsp_error=case["adsp_error"],
                          npu_format=case["npu_format"], app_version=case["app_version"],
                          remembered=Remembered(**rem) if rem else None, runtime_version=case["runtime_version"],
                          platform=platform, compiles_onnx=case["compiles_onnx"])
        assert got["decision"] == asdict(expected), case
        python_keys.add(expected.reason_key)
        kotlin_keys.add(got["decision"]["reason_key"])
        calls = []  # the environment first, then the three libraries in order
        loading = ("libs_not_loaded", "runtime_too_old", "npu", "runtime_too_old_for_arch", "npu_on_device")
        if expected.reason_key in ("adsp_not_set", *loading):
            calls = ["setenv ADSP_LIBRARY_PATH"]
        if expected.reason_key in loading:
            # the arch and QNN soc_model the glue loads and passes to the QNN EP: the chosen target's; without a
            # target (the on-device path), the catalog's for a catalog SoC, else the QNN backend's platform info
            target = next((t for t in manifest["targets"] if models.get(t["soc"], t["soc"]) == expected.soc), None)
            known = next((s for s in socs.catalog() if s.model == expected.soc), None)
            if target is not None:
                arch, soc_id = target["dsp_arch"], target["soc_id"]
            elif known is not None:
                arch, soc_id = known.dsp_arch, known.soc_id
            else:
                assert platform is not None, case
                arch, soc_id = platform.dsp_arch, platform.soc_model
            libs = qnn_libraries(arch)
            calls += [f"load {libs.system}", f"load {libs.backend}", f"load {libs.stub}"]
            assert expected.soc_id == (soc_id if expected.npu else None), case
            assert expected.npu_source == ((NpuSource.PREBUILT if target else NpuSource.ON_DEVICE)
                                           if expected.npu else None), case
        elif expected.soc_id is not None:
            raise AssertionError(f"a {expected.reason_key} decision names a soc_model: {case}")
        if expected.npu_source == NpuSource.ON_DEVICE:  # each graph's session gets its ep_options besides the SoC's
            assert got["graph_options"] == {g: {**o, **got["qnn_options"]} for g, o in expected.ep_options.items()}
        else:
            assert got["graph_options"] is None, case
        if expected.npu:  # the QNN EP options of the generated OrtModels: soc_model and htp_arch always given
            assert expected.soc_id is not None and expected.dsp_arch is not None
            assert got["qnn_options"] == {"backend_path": expected.backend_lib, "htp_performance_mode": "burst",
                                          "soc_model": str(expected.soc_id),
                                          "htp_arch": expected.dsp_arch.removeprefix("v")}, case
        else:
            assert got["qnn_options"] is None, case
        if manifest is named[0] and case["device"]["soc_model"] is not None and expected.npu:
            npu_names.add((expected.soc, case["device"]["soc_model"]))
        if expected.reason_key in ("runtime_too_old", "npu", "runtime_too_old_for_arch", "npu_on_device"):
            calls.append("runtime version")  # asked once the libraries loaded, not before
        assert got["calls"] == calls, case
    # every reason of the decision is reached by both twins, so agreeing is not trivial
    assert python_keys == kotlin_keys == set(REASONS["decide"])
    # every name of every aliased SoC, in every spelling, reached its SoC's target on the NPU in both twins
    assert npu_names == {(soc.model, spelled) for soc in socs.catalog() if soc.aliases for name in soc.names
                         for spelled in spellings(name)}
    assert out["libraries"] == [list(qnn_libraries(a)) for a in ODD_ARCHS]
    assert out["reasons"] == [[r["key"], r["text"]] for r in reasons]


def reach_manifests(tmp: Path) -> list[dict]:
    """The bundles whose `qnndeploy reach` rows both twins must give: the demo's real bundle, the same with an
    on_device section (some arches validated), a bundled runtime compiling on the device (the libraries of some
    arches missing), and a target that asks for the CPU."""
    run_demo(tmp / "demo")
    demo = json.loads((next((tmp / "demo" / "bundle").iterdir()) / "manifest.json").read_text())
    compiling = {**bundles.on_device(demo, validated=("v73", "v79", "v81")), "format_version": demo["format_version"]}
    return [demo, compiling, bundles.on_device(bundles.manifest(runtime="bundled")),
            bundles.accepted(bundles.manifest())]


def test_both_twins_agree_with_every_reach_row(kotlin, tmp_path):
    """Every row of `qnndeploy reach` (each chipset x reported name, both engines) fed to the Kotlin selector as the
    app meets it on a first start, in one JVM run: the same path, reason key and reason text on every row."""
    manifests = reach_manifests(tmp_path)
    rows, cases = [], []
    for i, m in enumerate(manifests):
        for engine in reach.Engine:
            for row in reach.reach(Manifest.parse(m), engine).rows:
                rows.append(row)
                cases.append({"manifest": i, "device": asdict(reach.phone(row.spelling, row.identified_by)),
                              "load_errors": {}, "adsp_before": None, "adsp_error": None, "lib_dir": reach.LIB_DIR,
                              "npu_format": engine.npu_format.value, "app_version": "", "remembered": None,
                              "runtime_version": None, "platform": None, "compiles_onnx": engine.compiles_onnx})
    path = kotlin["out"] / "reach-agreement.json"
    path.write_text(json.dumps({"manifests": manifests, "cases": cases, "archs": [], "reasons": []}))
    done = kotlin_build.run_jvm(kotlin, "qnndeploy.tests.Agreement", str(path))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)["cases"]
    assert len(got) == len(rows) > 4 * len(reach.chipsets())
    for row, case, out in zip(rows, cases, got, strict=True):
        d = out["decision"]
        assert (d["npu_source"] or "cpu", d["reason_key"], d["reason"]) == (row.path, row.reason_key, row.reason), (
            row, case)
    # not trivially equal: the rows reach every path and the reasons of each
    assert {r.path for r in rows} == set(reach.Route)
    assert {"npu", "npu_on_device", "soc_not_in_bundle", "not_validated_on_device", "on_device_needs_ort",
            "arch_unknown", "runtime_libs_missing", "validation_failed"} <= {r.reason_key for r in rows}


# --- the version of the loaded QNN runtime, read by the glue from /proc/self/maps and the library's build marker ---

CHUNK = 256 * 1024  # RuntimeVersion.CHUNK: what the reader reads at most at a time


def wheel_library() -> Path:
    """The real x86-64 libQnnHtp.so of the onnxruntime-qnn wheel: a QNN library with its build marker."""
    import importlib.util

    spec = importlib.util.find_spec("onnxruntime_qnn")
    require(spec is not None and spec.origin is not None, "onnxruntime-qnn")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "libQnnHtp.so"


def first_marker(path: Path) -> int:
    """The offset of the first QNN build marker in a file, read in chunks as markers.Scanner does."""
    with path.open("rb") as f:
        offset, tail = 0, b""
        while chunk := f.read(4 << 20):
            data = tail + chunk
            found = markers.BUILD_RE.search(data)
            if found:
                return offset - len(tail) + found.start()
            offset += len(chunk)
            tail = data[-64:]
    raise AssertionError(f"{path} has no build marker")


def process_maps(library: Path, out: Path) -> str:
    """The real /proc/self/maps of a process that loaded the library (a Python child, with dlopen)."""
    code = "import ctypes, sys; ctypes.CDLL(sys.argv[1]); open(sys.argv[2], 'w').write(open('/proc/self/maps').read())"
    subprocess.run([sys.executable, "-c", code, str(library), str(out)], check=True, capture_output=True, timeout=60)
    return out.read_text()


def apk(path: Path, library: Path) -> dict[str, tuple[int, int]]:
    """A small APK-like zip, libraries stored as Android maps them: lib/x86_64/libQnnHtp.so (another version), then
    lib/arm64-v8a/libQnnHtp.so, a copy of the real library's bytes around its marker, which straddles the reader's
    first chunk border. Returns entry name -> (data offset, size)."""
    at = first_marker(library)
    with library.open("rb") as f:
        f.seek(at - (CHUNK - 7))
        arm64 = f.read(CHUNK + 65536)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("AndroidManifest.xml", b"<manifest/>" * 100, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("lib/x86_64/libQnnHtp.so", b"\0" * 5000 + b"v2.40.0.250101000000" + b"\0" * 100)
        z.writestr("lib/arm64-v8a/libQnnHtp.so", arm64)
        z.writestr("resources.arsc", b"\0" * 4096)
    entries = {}
    with zipfile.ZipFile(path) as z, path.open("rb") as f:
        for info in z.infolist():
            f.seek(info.header_offset + 26)
            name_len, extra_len = struct.unpack("<HH", f.read(4))
            entries[info.filename] = (info.header_offset + 30 + name_len + extra_len, info.file_size)
    return entries


def test_the_glue_reads_the_loaded_runtimes_version_from_proc_self_maps(kotlin, tmp_path):
    library = wheel_library()
    want = htp.qairt_version()
    real = process_maps(library, tmp_path / "maps")
    base = tmp_path / "data app" / "com.example.qnnsample-1" / "base.apk"  # a path with a space
    entries = apk(base, library)
    lib_at, lib_size = entries["lib/arm64-v8a/libQnnHtp.so"]
    x86_at, _ = entries["lib/x86_64/libQnnHtp.so"]

    def line(start: int, perms: str, offset: int, path: Path | str) -> str:
        return f"{start:x}-{start + 0x1000:x} {perms} {offset:08x} fd:05 4242                       {path}"

    anon = "12c00000-2ac00000 rw-p 00000000 00:00 0                                  [anon:dalvik-main space]"
    libc = line(0x7A10000000, "r-xp", 0, "/apex/com.android.runtime/lib64/bionic/libc.so")
    in_apk = [anon, line(0x7A20000000, "r--p", 0, base), line(0x7A30000000, "r--p", lib_at, base),
              line(0x7A30001000, "r-xp", lib_at + 0x1000, base), libc]
    silent = tmp_path / "silent" / "libQnnHtp.so"
    silent.parent.mkdir()
    silent.write_bytes(b"v2.51.0." + b"\0" * (CHUNK * 2 + 5))  # no marker: too few digits after the last dot
    cases = {
        "extracted": real,
        "apk": "\n".join(in_apk),
        "apk, another entry mapped": "\n".join([anon, line(0x7A30000000, "r--p", x86_at, base)]),
        "apk, the library not mapped from it": "\n".join([anon, line(0x7A20000000, "r--p", 0, base), libc]),
        "not loaded": "\n".join([anon, libc]),
        "a file that is gone": line(0x7A30000000, "r--p", 0, "/data/app/gone/lib/arm64/libQnnHtp.so"),
        "no marker": line(0x7A30000000, "r--p", 0, silent),
    }
    path = kotlin["out"] / "runtime-version.json"
    path.write_text(json.dumps({"library": str(library),
                                "cases": [{"name": n, "maps": m} for n, m in cases.items()]}))
    done = kotlin_build.run_jvm(kotlin, "qnndeploy.tests.RuntimeVersionTests", str(path))
    assert done.returncode == 0, done.stderr
    # the library itself prints a line to stdout when it loads
    out = json.loads(next(x for x in done.stdout.splitlines() if x.startswith('{"cases":')))
    got = {c["name"]: c for c in out["cases"]}
    assert want == htp.qairt_version() and markers.library_version(library) == want  # what device info/verify pass
    assert got["extracted"]["version"] == want
    assert got["apk"]["version"] == want
    assert got["apk, another entry mapped"]["version"] == "2.40.0"  # the entry the mapped offset is in
    for name in ("apk, the library not mapped from it", "not loaded", "a file that is gone", "no marker"):
        assert got[name]["version"] is None, name
    # bounded: no read over one chunk; the real library is read up to its first marker (~67 MB of 106), not whole
    assert all(c["max_read"] <= CHUNK for c in out["cases"])
    assert first_marker(library) < got["extracted"]["bytes_read"] < library.stat().st_size
    assert got["apk"]["bytes_read"] < base.stat().st_size + lib_size
    assert got["no marker"]["bytes_read"] == silent.stat().st_size
    # and the glue's own call: this JVM loads the real library, AndroidHost reads the JVM's /proc/self/maps
    assert out["loaded"] == want


# --- the Play glue (scaffold --play) -------------------------------------------------------------------

def test_play_glue_compiles(play, kotlin):
    names = {Path(p).name for p in play["glue"].kotlin}
    assert {"PlayPack.kt", "QnnRuntime.kt", "OrtModels.kt", "Reasons.kt"} <= names
    for cls in ("PlayPack", "PlayRules", "PlayPlan", "QnnRuntime"):
        assert (kotlin["classes"] / PLAY_PACKAGE.replace(".", "/") / "qnndeploy" / f"{cls}.class").is_file(), cls


def group_of(plan: PlayPlan, soc: str) -> str:
    return next(g.name for g in plan.groups if soc in g.socs)


def pack_folder(play: Path, plan: PlayPlan, soc: str, pack: int = 0) -> Path:
    p = plan.packs[pack]
    return play / p.name / "src" / "main" / "assets" / f"{p.folder}#group_{group_of(plan, soc)}"


def test_play_unit_tests_pass_on_the_jvm(play, kotlin):
    """The pack's folders as Play lays them out on a phone (the #group_ suffix stripped)."""
    work = kotlin["out"] / "phone"
    fast, install = read_plan(play["fast"]), read_plan(play["install"])
    base = play["glue"].path / "bundle" / "assets"
    fast_assets = work / "fast-follow-assets"
    shutil.copytree(base, fast_assets)
    install_assets = work / "install-time-assets"
    shutil.copytree(base, install_assets)
    shutil.copyfile(play["install"] / "play.json", install_assets / "qnndeploy" / "play.json")
    shutil.copytree(pack_folder(play["install"], install, "SM8750"), install_assets / FOLDER)
    pack, other = work / "pack" / "assets", work / "other-pack" / "assets"
    shutil.copytree(pack_folder(play["fast"], fast, "SM8750"), pack / FOLDER)
    shutil.copytree(pack_folder(play["fast"], fast, "SM8550"), other / FOLDER)
    # the split packages: the base's assets without the CPU models, the CPU pack's merged in (as a phone merges
    # install-time packs into the app's assets), each AI pack's SM8750 folder where Play puts it, or in the assets
    split, split_install = read_plan(play["split"]), read_plan(play["split_install"])
    assert len(split.packs) > 1 and split.packs == split_install.packs
    assert split.cpu_packs and [c.name for c in split.cpu_packs] == [c.name for c in split_install.cpu_packs]
    split_base = play["split_glue"].path / "bundle" / "assets"
    assert not (split_base / "qnndeploy" / "cpu").exists()
    split_assets, split_install_assets = work / "split-assets", work / "split-install-assets"
    for assets, out, plan in ((split_assets, play["split"], split), (split_install_assets, play["split_install"],
                                                                      split_install)):
        shutil.copytree(split_base, assets)
        shutil.copyfile(out / "play.json", assets / "qnndeploy" / "play.json")
        for c in plan.cpu_packs:
            shutil.copytree(out / c.name / "src" / "main" / "assets", assets, dirs_exist_ok=True)
    split_packs = {}
    for n, p in enumerate(split.packs):
        split_packs[p.name] = str(work / "split" / p.name / "assets")
        shutil.copytree(pack_folder(play["split"], split, "SM8750", n), work / "split" / p.name / "assets" / p.folder)
        shutil.copytree(pack_folder(play["split_install"], split_install, "SM8750", n), split_install_assets / p.folder)
    manifest = json.loads((play["bundle"] / "manifest.json").read_text())
    setup = {"install_assets": str(install_assets), "fast_follow_assets": str(fast_assets), "pack": str(pack),
             "other_pack": str(other), "scratch": str(work / "scratch"), "pack_name": fast.pack,
             "group": group_of(fast, "SM8750"), "other_group": group_of(fast, "SM8550"),
             "sha256": {a["path"]: a["sha256"] for t in manifest["targets"] for a in t["artifacts"]},
             "split_assets": str(split_assets), "split_install_assets": str(split_install_assets),
             "split_packs": split_packs,
             "split_files": {f.path: f.pack for g in split.groups if "SM8750" in g.socs for f in g.files}}
    path = work / "setup.json"
    path.write_text(json.dumps(setup))
    done = kotlin_build.run_jvm(kotlin, "qnndeploy.playtests.PlayTestsKt", str(path))
    lines = done.stdout.splitlines()
    failures = [line for line in lines if line.startswith("FAIL")]
    assert not failures and done.returncode == 0, "\n".join(failures) or done.stderr
    assert sum(line.startswith("ok ") for line in lines) == PLAY_TESTS, done.stdout


# --- Python and Kotlin give the same groups ---

MANUFACTURERS = ["QTI", "Qualcomm", "qti", "QUALCOMM", " QTI", "QTI ", "Samsung", "", None, "\u212aTI", "Q\u0131TI"]
SDKS = [30, 31, 35]


def odd_plans(real: dict) -> list[dict]:
    """The real plan and variations both twins must read alike: other orders, a SoC in two groups (the first in the
    file wins), selectors in odd case and spacing, a selector with no SoC (Play: every phone), another default."""
    groups = real["groups"]
    first = {**groups[-1], "name": "first", "selectors": groups[-1]["selectors"][:1]}
    odd = {**groups[0], "name": "odd", "socs": ["sm8650", "SM8650 "],
           "selectors": [{"manufacturer": "qti", "model": "sm8650"}, {"manufacturer": " QTI", "model": "SM8650 "},
                         {"manufacturer": "QTI", "model": "SM8750\u00a0"},
                         {"manufacturer": "QTI", "model": "\u017fm8750"}]}
    everyone = {**groups[0], "name": "everyone", "selectors": []}
    return [
        real,
        {**real, "groups": groups[::-1]},
        {**real, "groups": [first, *groups]},
        {**real, "groups": [odd, *groups[1:]]},
        {**real, "groups": [groups[0], everyone, *groups[1:]]},
        {**real, "groups": groups[1:], "default_group": "fallback"},
        {**real, "groups": [groups[2], groups[0]]},
    ]


def phone_models() -> list[str | None]:
    names: list[str | None] = []
    for soc in socs.catalog():
        for name in (soc.model, *soc.aliases):
            mixed = "".join(c.lower() if i % 2 else c for i, c in enumerate(name))
            names += [name, name.lower(), mixed, f" {name}", f"{name}\n"]
    return [*names, "SM8750P", "sm8750p", "unknown", "", None, "\u017fm8750", "SM8750\u00a0", "\U0001f600"]


def test_python_and_kotlin_choose_the_same_groups(play, kotlin):
    plans = odd_plans(read_plan(play["fast"]).to_json())
    models = phone_models()
    play_cases = list(itertools.product(range(len(plans)), MANUFACTURERS, models, SDKS))
    soc_values = [*(m for m in models if m is None or m.strip() == m), "SM8650 "]
    expected_cases = list(itertools.product(range(len(plans)), soc_values))
    path = kotlin["out"] / "play-agreement.json"
    path.write_text(json.dumps({"plans": plans, "play": play_cases, "expected": expected_cases}))
    done = kotlin_build.run_jvm(kotlin, "qnndeploy.playtests.PlayAgreement", str(path))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert len(out["play"]) == len(play_cases) > 20_000
    typed = [PlayPlan.parse(p) for p in plans]  # the odd ones too: parse checks types, not Play's rules
    groups = [plan_groups(p) for p in typed]
    want = [play_group(groups[i], man, model, sdk, typed[i].default_group) for i, man, model, sdk in play_cases]
    mismatches = [(c, w, g) for c, w, g in zip(play_cases, want, out["play"], strict=True) if w != g]
    assert not mismatches, mismatches[:5]
    # every name phones of a bundle SoC report (the model and each alias, e.g. SM8750-AC) lands in that SoC's group
    for group in plans[0]["groups"]:
        for name in socs.find(group["socs"][0]).names:
            for manufacturer in ("QTI", "Qualcomm"):
                i = play_cases.index((0, manufacturer, name, 35))
                assert want[i] == out["play"][i] == group["name"], (manufacturer, name)
    assert out["expected"] == [expected_group(typed[i], soc) for i, soc in expected_cases]
    # not trivially equal: each plan sends phones to several groups, and every odd group and default is reached
    for i in range(len(plans)):
        assert len({w for (j, *_), w in zip(play_cases, want, strict=True) if j == i}) >= 2, i
    assert {"first", "odd", "everyone", "fallback", "other"} <= set(want)
    assert len(set(out["expected"])) > 3

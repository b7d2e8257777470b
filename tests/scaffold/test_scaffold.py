"""`qnndeploy scaffold`: the glue, Gradle and manifest snippets, the bundle in Gradle's layout, the sample app."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import sysconfig
from functools import partial
from pathlib import Path

import pytest

from qnndeploy import __version__
from qnndeploy.base import socs
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.base.names import FORMAT, FORMAT_VERSION
from qnndeploy.decide.decision import REASONS, VENDOR_DSP_FOLDERS, soc_tables, template_fields
from qnndeploy.qnn import htp
from qnndeploy.scaffold import APP_SOURCES, APP_SOURCES_DIR, MARKER, kotlin_reasons, scaffold, templates_dir
from qnndeploy.verification.checks import verify_folder
from tests.support import REPO, bundles
from tests.support.cli import run as run_cli
from tests.support.host import require

SAMPLE = REPO / "android-sample"
SAMPLE_PACKAGE = "com.example.qnnsample"
DEMO_TARGETS = ("SM8550", "SM8650", "SM8750")  # what `qnndeploy demo` compiles for (tests/demo/test_demo.py)


@pytest.fixture(scope="session")
def inputs(tmp_path_factory) -> dict:
    require(htp.available(), "onnxruntime-qnn")
    return bundles.compile_inputs(tmp_path_factory.mktemp("scaffold-inputs"), DEMO_TARGETS, ("det", "rec"))


@pytest.fixture(scope="session")
def external(inputs, tmp_path_factory) -> Path:
    """Like the demo bundle: no runtime libraries, the Maven QNN runtime pinned to the QAIRT of onnxruntime-qnn."""
    return bundles.build(tmp_path_factory.mktemp("external"), inputs)


@pytest.fixture(scope="session")
def bundled(inputs, tmp_path_factory) -> Path:
    return bundles.build(tmp_path_factory.mktemp("bundled"), inputs, runtime="bundled")


run = partial(run_cli, "scaffold")  # every command here is `qnndeploy scaffold ...`


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(root: Path) -> set[str]:
    """Every file under root, except the bundle copy (data that scaffold copies, kept out of git)."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and "app/qnndeploy/bundle" not in p.relative_to(root).as_posix()}


def test_sample_app_is_a_conventional_gradle_project(tmp_path, external):
    app = scaffold(external, SAMPLE_PACKAGE, tmp_path / "a", app=True).path
    assert {"settings.gradle.kts", "build.gradle.kts", "app/build.gradle.kts", "app/src/main/AndroidManifest.xml",
            "app/src/main/java/com/example/qnnsample/MainActivity.kt", "app/qnndeploy/qnndeploy.gradle"} <= tree(app)
    gradle = (app / "app/build.gradle.kts").read_text()
    assert 'apply(from = "qnndeploy/qnndeploy.gradle")' in gradle and 'namespace = "com.example.qnnsample"' in gradle
    manifest = (app / "app/src/main/AndroidManifest.xml").read_text()
    assert re.search(r'<uses-native-library\s+android:name="libcdsprpc.so"\s+android:required="false"', manifest)
    assert (app / "app/qnndeploy/bundle/assets/qnndeploy/manifest.json").read_bytes() == (
        external / "manifest.json").read_bytes()


def test_sample_app_keeps_its_state_in_a_view_model_with_sourced_libraries(tmp_path, external):
    """The screen is a ComponentActivity that only collects its ViewModel's StateFlow (repeatOnLifecycle) and passes
    taps on; the ViewModel opens and times the models in viewModelScope on Dispatchers.Default. The four libraries
    that takes are in app/build.gradle.kts at the versions of data/maven.json, which has a source."""
    from qnndeploy.base import compat
    from qnndeploy.scaffold import APP_LIBRARIES

    app = scaffold(external, SAMPLE_PACKAGE, tmp_path / "a", app=True).path
    gradle = (app / "app/build.gradle.kts").read_text()
    for key in APP_LIBRARIES:
        library = compat.gradle_library(key)
        assert f'implementation("{library.version}")' in gradle and library.source.startswith("https://"), key
    assert {compat.gradle_library(k).version.rpartition(":")[0] for k in APP_LIBRARIES} == {
        "androidx.activity:activity-ktx", "androidx.lifecycle:lifecycle-runtime-ktx",
        "androidx.lifecycle:lifecycle-viewmodel-ktx", "org.jetbrains.kotlinx:kotlinx-coroutines-android"}
    sources = app / APP_SOURCES_DIR / "com/example/qnnsample"
    activity = (sources / "MainActivity.kt").read_text()
    assert "class MainActivity : ComponentActivity()" in activity and "by viewModels()" in activity
    assert "repeatOnLifecycle(Lifecycle.State.STARTED)" in activity and "model.state.collect" in activity
    model = (sources / "SampleViewModel.kt").read_text()
    assert "class SampleViewModel(application: Application) : AndroidViewModel(application)" in model
    assert "data class SampleUiState(" in model and "val state: StateFlow<SampleUiState>" in model
    assert model.count("viewModelScope.launch {") == 2 and model.count("withContext(Dispatchers.Default)") == 2
    for text in (activity, model):
        assert "Thread" not in text and "runOnUiThread" not in text and "@Synchronized" not in text
        assert not re.search(r"^object ", text, re.MULTILINE)  # no process-wide holder of the models


def test_ort_glue_gradle_and_manifest_snippets(external, tmp_path):
    r = scaffold(external, "com.example.foo", tmp_path / "qnn")
    out = r.path
    kotlin = {Path(p).name for p in r.kotlin}
    assert kotlin == {"QnnSelector.kt", "SocCatalog.kt", "MiniJson.kt", "BundleFiles.kt", "FailureMemory.kt",
                      "QnnRuntime.kt", "OrtModels.kt", "OnDeviceCompile.kt", "Reasons.kt", "BundleManifest.kt",
                      "RuntimeVersion.kt", "QnnEpPlugin.kt", "Generated.kt", "GenerationConfig.kt", "Generation.kt"}
    for p in r.kotlin:
        assert (out / p).read_text().startswith("package com.example.foo.qnndeploy\n"), p
        if Path(p).name in ("QnnSelector.kt", "SocCatalog.kt", "MiniJson.kt", "BundleFiles.kt", "FailureMemory.kt",
                            "Reasons.kt", "BundleManifest.kt", "RuntimeVersion.kt", "OnDeviceCompile.kt",
                            "QnnEpPlugin.kt", "Generated.kt", "GenerationConfig.kt"):
            assert "import android." not in (out / p).read_text(), f"{p} must run on any JVM"
    gradle = (out / "qnndeploy.gradle").read_text()
    assert "abiFilters 'arm64-v8a'" in gradle and "useLegacyPackaging = true" in gradle
    assert "implementation('com.qualcomm.qti:qnn-runtime') {\n        version { strictly '2.50.0' }" in gradle
    assert "onnxruntime-android-qnn" in gradle and "jniLibs.srcDir" not in gradle
    assert not (out / "bundle/jniLibs").exists()
    snippet = (out / "AndroidManifest-snippet.xml").read_text()
    assert '<uses-native-library android:name="libcdsprpc.so" android:required="false"/>' in snippet
    readme = (out / "README.md").read_text()
    assert 'apply(from = "qnn/qnndeploy.gradle")' in readme and "libcdsprpc.so" in readme
    assert "com.example.foo.qnndeploy.OrtModels.open(context)" in readme
    # the ABI filter's cost, and how to widen it, are in the README (one paragraph checked, not the prose)
    assert "abiFilters 'arm64-v8a'" in readme and "INSTALL_FAILED_NO_MATCHING_ABIS" in readme
    assert 'abiFilters += listOf("x86_64", "armeabi-v7a")' in readme and "32-bit" in readme
    assert r.lines[0].endswith('apply(from = "qnn/qnndeploy.gradle")') and len(r.lines) == 3
    assert "{{" not in "".join(p.read_text() for p in out.rglob("*") if p.suffix in (".kt", ".gradle", ".md", ".xml"))


def test_bundle_is_copied_in_gradles_layout(bundled, tmp_path):
    r = scaffold(bundled, "com.example.sherpa", tmp_path / "glue", engine="sherpa-onnx")
    m = json.loads((bundled / "manifest.json").read_text())
    assets = r.path / "bundle/assets/qnndeploy"
    assert (assets / "manifest.json").read_bytes() == (bundled / "manifest.json").read_bytes()
    for a in m["cpu"] + [a for t in m["targets"] for a in t["artifacts"]]:
        assert sha(assets / a["path"]) == a["sha256"], a["path"]
    jni = r.path / "bundle/jniLibs/arm64-v8a"
    libs = {lib["path"].rsplit("/", 1)[-1]: lib["sha256"] for lib in m["runtime"]["libs"]}
    assert {p.name for p in jni.iterdir()} == set(libs) and "libQnnHtpV79Skel.so" in libs  # Skels flat beside
    assert all(sha(jni / name) == digest for name, digest in libs.items())
    gradle = (r.path / "qnndeploy.gradle").read_text()
    assert "jniLibs.srcDir(new File(qnndeployDir, 'bundle/jniLibs'))" in gradle and "qnn-runtime" not in gradle
    assert {Path(p).name for p in r.kotlin} >= {"SherpaOnnxQnn.kt"} and "OrtModels.kt" not in str(r.kotlin)
    sherpa = (r.path / "src/com/example/sherpa/qnndeploy/SherpaOnnxQnn.kt").read_text()
    assert "val GRAPHS: List<String> = Generated.GRAPHS" in sherpa
    generated = (r.path / "src/com/example/sherpa/qnndeploy/Generated.kt").read_text()
    assert 'val GRAPHS: List<String> = listOf("det", "rec")' in generated
    readme = (r.path / "README.md").read_text()  # the example is this bundle's graphs, not a transducer it is not
    assert "OfflineTransducerModelConfig" not in readme and "`det`, `rec`" in readme
    assert "has no such set" in readme and "SHERPA_ONNX_ENABLE_QNN=ON" in readme
    assert r.bundle_files == 1 + len(m["cpu"]) + sum(len(t["artifacts"]) for t in m["targets"]) + len(libs)


def test_kotlin_soc_tables_are_generated_from_the_catalog(external, tmp_path):
    r = scaffold(external, "com.example.foo", tmp_path / "g")
    text = (r.path / "src/com/example/foo/qnndeploy/Generated.kt").read_text()
    blocks = dict(re.findall(r"val (\w+): [^=]+= (?:mapOf|listOf)\(\n(.*?)\n    \)", text, re.DOTALL))
    models, codenames = soc_tables()
    assert dict(re.findall(r'"([^"]+)" to "([^"]+)"', blocks["SOC_MODELS"])) == models
    assert dict(re.findall(r'"([^"]+)" to "([^"]+)"', blocks["CODENAMES"])) == codenames
    assert re.findall(r'"([^"]+)"', blocks["VENDOR_DSP_FOLDERS"]) == list(VENDOR_DSP_FOLDERS)
    assert models["SM8750P"] == "SM8750" and codenames["kalama"] == "SM8550"
    # every name phones report for a SoC, aliases included (a Galaxy S25's SM8750-AC), is in the Kotlin table
    assert all(models[name] == s.model for s in socs.catalog() for name in s.names)
    assert models["SM8750-AC"] == "SM8750" and models["SM8850-AD"] == "SM8850" and models["QCS9075"] == "QCS9100"


def test_kotlin_reasons_are_generated_from_the_data_file(external, tmp_path):
    """One function per reason of data/reasons.json, its text the template's; test_kotlin.py calls each."""
    r = scaffold(external, "com.example.foo", tmp_path / "g")
    text = (r.path / "src/com/example/foo/qnndeploy/Generated.kt").read_text()
    functions = re.findall(r'fun (\w+)\(([^)]*)\): Reason =\n        Reason\("(\w+)", "(.*)"\)\n', text)
    assert [key for _, _, key, _ in functions] == [k for templates in REASONS.values() for k in templates]
    for _, params, key, body in functions:
        template = {**REASONS["decide"], **REASONS["app"]}[key]
        fields = template_fields(template)
        assert params == ", ".join(f"{re.sub('_(.)', lambda m: m[1].upper(), f)}: String" for f in fields)
        assert re.sub(r"\$\{(\w+)\}", "{}", body).replace('\\"', '"') == re.sub(r"\{\w+\}", "{}", template)
    assert "fun socNotInBundle(soc: String, targets: String): Reason" in text


def test_kotlin_string_of_a_reason_escapes_what_kotlin_would_read():
    from qnndeploy import scaffold as sc

    template = 'a "{soc_name}" $x \\ {{braces}} \u00e9\U0001f600\n{soc_name}'
    assert sc._kotlin_string(template) == (
        'a \\"${socName}\\" \\$x \\\\ {braces} \\u00e9\\ud83d\\ude00\\u000a${socName}')


def test_kotlin_manifest_constants_come_from_python_and_the_schema(external, tmp_path):
    from qnndeploy.formats.manifest import schema

    r = scaffold(external, "com.example.foo", tmp_path / "g")
    text = (r.path / "src/com/example/foo/qnndeploy/Generated.kt").read_text()
    assert f'const val FORMAT = "{FORMAT}"' in text and f"const val FORMAT_VERSION = {FORMAT_VERSION}L" in text
    ids = re.findall(r'^    [A-Z_]+\("([^"]+)"\),$', text, re.MULTILINE)
    assert ids == schema()["$defs"]["artifact"]["properties"]["format"]["enum"]
    assert [g["about"] for g in kotlin_reasons()] and all(g["reasons"] for g in kotlin_reasons())


def test_copied_epcontext_models_load_with_their_context_binaries(external, tmp_path):
    """The layout the app gets keeps each EPContext .onnx next to the context binary it names: it loads."""
    import numpy as np
    import onnxruntime as ort

    assets = scaffold(external, "com.example.foo", tmp_path / "g").path / "bundle/assets/qnndeploy"
    x = {"x": np.full((1, 8), 0.5, dtype=np.float32)}
    cpu = ort.InferenceSession(str(assets / "cpu/det.onnx"), providers=["CPUExecutionProvider"]).run(None, x)[0]
    npu = ort.InferenceSession(str(assets / "npu/SM8750/det_ctx.onnx"),
                               htp.session_options(socs.find("SM8750"))).run(None, x)[0]
    assert np.allclose(cpu, npu, rtol=1e-2, atol=1e-2)


def test_a_bundle_that_fails_verify_is_refused_with_the_report(external, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(external, bad)
    with (bad / "npu/SM8750/det.bin").open("r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    (bad / "cpu/rec.onnx").unlink()
    r = run(bad, "--package", "com.example.foo", "-o", tmp_path / "out")
    assert r.exit_code == 1  # a bundle with problems, as in bundle verify and device verify (not a bundle: 2)
    assert "npu/SM8750/det.bin: sha256 differs from the manifest" in r.stdout
    assert "cpu/rec.onnx: is listed in the manifest but missing" in r.stdout
    assert "fails bundle verify (2 problem(s))" in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()
    with pytest.raises(QnnDeployError, match="fails bundle verify"):  # the library refuses it too
        scaffold(bad, "com.example.foo", tmp_path / "out")
    r = run(bad, "--package", "com.example.foo", "-o", tmp_path / "out", "--json")
    assert r.exit_code == 1 and json.loads(r.stdout)["ok"] is False


@pytest.mark.parametrize("package", ["foo", "com.example.new", "com.1example.app", "com..app", "com.example.fun",
                                     "com.example-app.x", "com.example.app.", "com.example.kws\n", "kotlin.foo",
                                     "java.util.app", "android.app.x", "com.\u0435xample.app", "com." + "a" * 256])
def test_invalid_package_names_are_refused(external, tmp_path, package):
    """Java's and Kotlin's rules: identifiers only (no trailing newline), no keyword, no reserved root, each part a
    file name; one line, the name shown escaped."""
    r = run(external, "--package", package, "-o", tmp_path / "out")
    assert r.exit_code == 2 and r.stderr.startswith("error: invalid package name '")
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


HOSTILE_NAMES = ["glue{{7*7}}", "glue{% raw %}", "{{ cycler.__init__.__globals__.os.popen('touch PWNED').read() }}",
                 "x\n}\nthrow GradleException(\"injected\")\n//", "it's \"quoted\" $HOME \\ `tick`", "\u202etxt.kt"]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_an_output_folder_name_is_data_never_template_code(external, tmp_path, name, monkeypatch):
    """The -o folder's name reaches no template: it is the folder's name, and inside the files it is text, escaped
    for its place; every generated line comes from a template line (the same count as for a plain name)."""
    monkeypatch.chdir(tmp_path)
    plain = scaffold(external, "com.example.foo", tmp_path / "plain").path
    r = run(external, "--package", "com.example.foo", "-o", tmp_path / name)
    assert r.exit_code == 0, r.output
    out = tmp_path / name
    assert out.is_dir() and not (tmp_path / "PWNED").exists() and not any(tmp_path.glob("glue49*"))
    for f in (p for p in plain.rglob("*") if p.is_file() and "bundle" not in p.parts):
        rendered = out / f.relative_to(plain)
        assert rendered.is_file(), f
        assert len(rendered.read_text().splitlines()) == len(f.read_text().splitlines()), rendered
    gradle = (out / "qnndeploy.gradle").read_text()
    assert "injected" not in gradle or '\\u000athrow GradleException' in gradle
    assert "\u202e" not in "".join(p.read_text() for p in out.rglob("*") if p.is_file() and "bundle" not in p.parts)


def test_the_templates_render_in_a_sandbox(tmp_path):
    """Even a template (not a value) that walks to Python's internals is refused by Jinja's sandbox."""
    from jinja2.exceptions import SecurityError

    from qnndeploy.scaffold import _render

    template = tmp_path / "t"
    (template / "{{cookiecutter.dir_name}}").mkdir(parents=True)
    (template / "cookiecutter.json").write_text('{"dir_name": "x"}')
    (template / "{{cookiecutter.dir_name}}" / "f.txt").write_text(
        "{{ cycler.__init__.__globals__.os.popen('touch " + str(tmp_path / "PWNED") + "').read() }}")
    with pytest.raises(SecurityError):
        _render(template, {}, tmp_path / "out")
    assert not (tmp_path / "PWNED").exists()


def test_output_folder_must_be_new_or_empty_unless_forced(external, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert run(external, "--package", "com.example.foo", "-o", out).exit_code == 0  # empty: fine
    assert (out / MARKER).read_text().startswith(f"qnndeploy scaffold {__version__}\n")
    (out / "mine.txt").write_text("keep")
    r = run(external, "--package", "com.example.foo", "-o", out)
    assert r.exit_code == 2 and "exists and is not empty" in r.stderr and "--force" in r.stderr
    assert (out / "mine.txt").read_text() == "keep"
    r = run(external, "--package", "com.example.bar", "-o", out, "--force")  # an earlier scaffold output: replaced
    assert r.exit_code == 0 and not (out / "mine.txt").exists()
    assert (out / "src/com/example/bar/qnndeploy/QnnSelector.kt").is_file()
    assert not (out / "src/com/example/foo").exists()


def test_force_refuses_a_folder_that_is_not_scaffold_output(external, tmp_path):
    """`-o app --force` on an app module (user code, the glue inside it) must not wipe the module."""
    module = tmp_path / "app"
    (module / "src/main/java/com/example/app").mkdir(parents=True)
    (module / "src/main/java/com/example/app/MainActivity.kt").write_text("class MainActivity")
    (module / "build.gradle.kts").write_text("plugins { }")
    glue = module / "qnndeploy"
    assert run(external, "--package", "com.example.app", "-o", glue).exit_code == 0
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")

    def files() -> dict[Path, bytes]:
        return {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    before = files()
    for target in (module, notes):
        r = run(external, "--package", "com.example.app", "-o", target, "--force")
        assert r.exit_code == 2 and "Traceback" not in r.output
        assert r.stderr == (f"error: {target} is not an earlier scaffold output (it has no {MARKER}): --force only "
                            "replaces one, never other files; choose another folder (or delete it yourself)\n")
    with pytest.raises(QnnDeployError, match="not an earlier scaffold output"):  # the library refuses it too
        scaffold(external, "com.example.app", module, force=True)
    assert files() == before
    # the glue folder inside the module is scaffold output: --force replaces it, and only it
    r = run(external, "--package", "com.example.other", "-o", glue, "--force")
    assert r.exit_code == 0, r.output
    assert (glue / "src/com/example/other/qnndeploy/OrtModels.kt").is_file()
    assert not (glue / "src/com/example/app").exists()
    assert (module / "src/main/java/com/example/app/MainActivity.kt").read_text() == "class MainActivity"
    assert notes.read_text() == "mine"


def test_sample_app_screen_is_the_templates_sources_but_for_the_package(external, tmp_path):
    """The app's own Kotlin is templates/app/kotlin copied as the glue is: for another package, only the package line
    and the imports of the glue's classes change; for the templates' own package, not a byte (android-sample/ links
    to them)."""
    sources = sorted((templates_dir() / "app" / APP_SOURCES).glob("*.kt"))
    assert {p.name for p in sources} == {"MainActivity.kt", "SampleViewModel.kt"}
    for package in ("com.example.other", SAMPLE_PACKAGE):
        app = scaffold(external, package, tmp_path / package, app=True).path
        written = app / APP_SOURCES_DIR / package.replace(".", "/")
        assert sorted(p.name for p in written.iterdir()) == [p.name for p in sources]
        for src in sources:
            ours, theirs = src.read_text().split("\n"), (written / src.name).read_text().split("\n")
            changed = [(a, b) for a, b in zip(ours, theirs, strict=True) if a != b]
            expected = [(a, a.replace(SAMPLE_PACKAGE, package, 1)) for a in ours
                        if a.startswith((f"package {SAMPLE_PACKAGE}", f"import {SAMPLE_PACKAGE}."))]
            assert changed == (expected if package != SAMPLE_PACKAGE else []), src.name
    other = tmp_path / "com.example.other" / APP_SOURCES_DIR / "com/example/other/SampleViewModel.kt"
    assert "import com.example.other.qnndeploy.OrtModels\n" in other.read_text()


def test_android_sample_holds_no_copy_of_its_screen():
    """android-sample/'s own Kotlin is links to templates/app/kotlin, as its glue's is to templates/glue/kotlin."""
    own = sorted((SAMPLE / APP_SOURCES_DIR / SAMPLE_PACKAGE.replace(".", "/")).glob("*.kt"))
    templates = (REPO / "templates" / "app" / APP_SOURCES).resolve()
    assert own and all(p.is_symlink() and p.resolve().parent == templates for p in own)
    assert sorted(p.name for p in own) == sorted(p.name for p in templates.glob("*.kt"))


def test_sample_app_output_is_marked_at_its_top_and_replaced_by_force(external, tmp_path):
    app = scaffold(external, SAMPLE_PACKAGE, tmp_path / "a", app=True).path
    assert (app / MARKER).is_file() and (app / "app/qnndeploy" / MARKER).is_file()
    (app / "app/src/main/java/com/example/qnnsample/Extra.kt").write_text("class Extra")
    again = scaffold(external, SAMPLE_PACKAGE, app, app=True, force=True).path
    assert not (again / "app/src/main/java/com/example/qnnsample/Extra.kt").exists()
    assert (again / "app/qnndeploy/qnndeploy.gradle").is_file()
    readme = (app / "README.md").read_text()  # its commands name the folder it was rendered into
    assert "--app -o a --force" in readme and "cd a && gradle wrapper" in readme and "android-sample" not in readme


def test_ort_engine_needs_epcontext_wrappers(inputs, tmp_path):
    no_ctx = {**inputs, "npu": {s: {g: [f for f in fs if f.suffix == ".bin"] for g, fs in gs.items()}
                                for s, gs in inputs["npu"].items()}}
    b = bundles.build(tmp_path / "b", no_ctx)
    r = run(b, "--package", "com.example.foo", "-o", tmp_path / "out")
    assert r.exit_code == 2
    assert "engine ort loads ort-epcontext files, but target SM8550 has none for graph 'det'" in r.stderr
    assert "--engine sherpa-onnx" in r.stderr and not (tmp_path / "out").exists()
    assert run(b, "--package", "com.example.foo", "-o", tmp_path / "out", "--engine", "sherpa-onnx").exit_code == 0


def test_epcontext_naming_the_compile_output_is_repointed(inputs, tmp_path):
    """ONNX Runtime's compile names the binary <graph>_ctx_qnn.bin; the bundle renames it and re-points the wrapper,
    so the app's copy loads <graph>.bin (bundle verify refuses a wrapper naming a missing binary)."""
    import onnx

    from qnndeploy.qnn.epcontext import context_refs

    wrapper = tmp_path / "det_ctx.onnx"
    model = onnx.load(str(inputs["npu"]["SM8750"]["det"][1]))
    for node in model.graph.node:
        for a in node.attribute:
            if a.name == "ep_cache_context":
                a.s = b"det_ctx_qnn.bin"
    onnx.save(model, str(wrapper))
    npu = {s: dict(gs) for s, gs in inputs["npu"].items()}
    npu["SM8750"]["det"] = [npu["SM8750"]["det"][0], wrapper]
    b = bundles.build(tmp_path / "b", {**inputs, "npu": npu})
    r = run(b, "--package", "com.example.foo", "-o", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert context_refs(tmp_path / "out/bundle/assets/qnndeploy/npu/SM8750/det_ctx.onnx") == ["det.bin"]


def test_archive_bundle_and_json_output(inputs, tmp_path):
    from qnndeploy.bundle.build import BundleSpec, build_bundle

    spec = BundleSpec(name="demo", version="2.0.0", cpu=inputs["cpu"], npu=inputs["npu"], qairt_version=bundles.QAIRT)
    archive = build_bundle(spec, tmp_path / "b", archive_fmt="tar.gz").archive
    r = run(archive, "--package", "com.example.foo", "-o", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    assert result["engine"] == "ort" and result["package"] == "com.example.foo"
    assert "src/com/example/foo/qnndeploy/OrtModels.kt" in result["kotlin"] and len(result["lines"]) == 3
    assert json.loads((tmp_path / "out/bundle/assets/qnndeploy/manifest.json").read_text())["version"] == "2.0.0"


def test_the_glue_may_not_be_written_into_the_bundle_it_reads(external, tmp_path):
    """-o inside the bundle would add files its manifest does not list (and replacing a folder that holds the bundle
    would delete it): refused in one line, the bundle left as it was."""
    bundle = tmp_path / "b"
    shutil.copytree(external, bundle)
    inside = run_cli("scaffold", bundle, "--package", "com.example.foo", "-o", bundle / "glue")
    assert inside.exit_code == 2 and inside.stderr == (
        f"error: -o {bundle / 'glue'} is inside the bundle {bundle}: write the output outside it\n")
    holding = run_cli("scaffold", bundle, "--package", "com.example.foo", "-o", tmp_path, "--force")
    assert holding.exit_code == 2 and len(holding.stderr.splitlines()) == 1, holding.stderr
    assert not (bundle / "glue").exists() and verify_folder(bundle).ok


def test_installed_executable(external, tmp_path):
    # the console script of the Python running the tests (a venv's, even when it is not activated), not a PATH's
    program = Path(sysconfig.get_path("scripts")) / "qnndeploy"
    done = subprocess.run([str(program), "scaffold", str(external), "--package", "com.example.foo", "-o",
                           str(tmp_path / "out")], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "add these three lines" in done.stdout and "OrtModels.open(context)" in done.stdout
    assert "the model's licence: Apache-2.0; the app ships the model under it" in done.stdout  # the bundle's


def test_templates_are_found_from_a_source_checkout_that_was_not_installed(tmp_path):
    """Importing qnndeploy.scaffold needs no installed qnndeploy.templates: the top-level templates/ serves."""
    root = REPO
    for name in ("qnndeploy", "templates"):
        shutil.copytree(root / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import qnndeploy.scaffold as s; "
            "print(s.templates_dir())")
    done = subprocess.run([sys.executable, "-S", "-c", code, str(tmp_path)], capture_output=True, text=True,
                          check=False)  # -S: without site-packages, the editable install is not seen
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "templates")


# --- runtime compatibility: the ONNX Runtime AAR and qnn-runtime pins ----------------------------------------------

def test_scaffold_pins_a_validated_set_that_loads_the_bundle():
    from qnndeploy.formats.manifest import Manifest
    from qnndeploy.scaffold import runtime_set as _ort_pins

    m = bundles.manifest()
    m["qairt"] = {"version": "2.49.40", "build": None, "min_runtime": "2.49.0"}
    m["runtime"]["maven"] = "com.qualcomm.qti:qnn-runtime:2.49.40"
    pins = _ort_pins(Manifest.parse(m), "qualcomm")
    assert (pins.aar_version, pins.ort_android, pins.qnn_runtime) == ("2.5.0", "1.26.0", "2.49.0")
    assert pins.validated is not None and "onnxruntime-qnn/pull/783" in pins.validated.source.url
    assert not any("no validated" in w for w in pins.warnings)
    m["qairt"] = {"version": "2.40.0", "build": None, "min_runtime": "2.40.0"}
    m["runtime"]["maven"] = "com.qualcomm.qti:qnn-runtime:2.40.0"
    pins = _ort_pins(Manifest.parse(m), "microsoft")
    assert (pins.aar_version, pins.ort_android, pins.qnn_runtime, pins.warnings) == ("1.26.0", None, "2.42.0", [])
    m["qairt"] = {"version": "2.45.0", "build": None, "min_runtime": "2.45.0"}  # newer than Microsoft's QNN 2.42
    m["runtime"]["maven"] = "com.qualcomm.qti:qnn-runtime:2.45.0"
    pins = _ort_pins(Manifest.parse(m), "microsoft")
    assert pins.validated is None and (pins.aar_version, pins.qnn_runtime) == ("1.26.0", "2.45.0")


def test_no_validated_set_is_said_and_the_bundle_runtime_pinned(external, tmp_path):
    """Microsoft's validated AARs go with qnn-runtime 2.42 at most: asked for Microsoft's AAR, QAIRT 2.50 binaries get
    the newest of them with the bundle's published qnn-runtime 2.50.0, an unvalidated combination, and said so."""
    r = scaffold(external, "com.example.foo", tmp_path / "qnn", ort_aar="microsoft")
    assert r.ort_aar == ("com.microsoft.onnxruntime:onnxruntime-android-qnn:1.26.0 + qnn-runtime 2.50.0 "
                         "(not a validated set)")
    assert r.runtime_set == ("runtime set: com.microsoft.onnxruntime:onnxruntime-android-qnn:1.26.0 + "
                             "com.qualcomm.qti:qnn-runtime:2.50.0 (QNN provider built in): NOT a validated set for "
                             "these QAIRT 2.50.40 binaries")
    [w] = r.warnings
    assert w.startswith("no validated com.microsoft.onnxruntime:onnxruntime-android-qnn set has a qnn-runtime that "
                        "loads these QAIRT 2.50.40 binaries (they need 2.50.0")
    gradle = (r.path / "qnndeploy.gradle").read_text()
    assert "version { strictly '2.50.0' }" in gradle
    assert ("implementation(\"com.microsoft.onnxruntime:onnxruntime-android-qnn:${findProperty('qnndeploy.ortVersion')"
            " ?: '1.26.0'}\")") in gradle
    assert 'QNN_EP_PLUGIN: QnnEpPlugin? = null' in (r.path / "src/com/example/foo/qnndeploy/Generated.kt").read_text()


QUALCOMM_SET = ("runtime set: com.qualcomm.qti:onnxruntime-android-qnn:2.6.0 + "
                "com.microsoft.onnxruntime:onnxruntime-android:1.26.0 + com.qualcomm.qti:qnn-runtime:2.50.0 (QNN "
                "plugin registered by the glue): reported to work, not confirmed as validated, for these QAIRT "
                "2.50.40 binaries (https://github.com/onnxruntime/onnxruntime-qnn/pull/796)")
REPORTED = "is reported to work with QAIRT 2.50.40 binaries, but no Qualcomm table read here validates it"


def test_the_default_is_the_newest_set_for_the_binaries_and_scaffold_says_how_sure(external, tmp_path):
    """QAIRT 2.50.40 binaries: no Microsoft AAR goes with a qnn-runtime that loads them; Qualcomm's plugin 2.6.0 is
    reported to work with onnxruntime-android 1.26.0 and qnn-runtime 2.50.0, not yet validated by a table read here:
    the default pins it, registers its plugin in the glue, and says which set and how sure in one plain line. (A
    validated set is chosen first: test_scaffold_pins_a_validated_set_that_loads_the_bundle.)"""
    r = run(external, "--package", "com.example.foo", "-o", tmp_path / "q", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["ort_aar"] == ("com.qualcomm.qti:onnxruntime-android-qnn:2.6.0 + "
                              "com.microsoft.onnxruntime:onnxruntime-android:1.26.0 + qnn-runtime 2.50.0 "
                              "(a set reported to work, not confirmed validated)")
    assert out["runtime_set"] == QUALCOMM_SET and [REPORTED in w for w in out["warnings"]] == [True]
    generated = (tmp_path / "q/src/com/example/foo/qnndeploy/Generated.kt").read_text()
    assert ('QNN_EP_PLUGIN: QnnEpPlugin? = QnnEpPlugin(library = "libonnxruntime_providers_qnn.so", '
            'epName = "QNNExecutionProvider")') in generated
    text = run(external, "--package", "com.example.foo", "-o", tmp_path / "t")
    assert f"\n  {QUALCOMM_SET}\n" in text.output


def test_ort_aar_qualcomm_in_the_gradle_file_and_json(external, tmp_path):
    r = run(external, "--package", "com.example.foo", "-o", tmp_path / "q", "--ort-aar", "qualcomm", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["ort_aar"] == ("com.qualcomm.qti:onnxruntime-android-qnn:2.6.0 + "
                              "com.microsoft.onnxruntime:onnxruntime-android:1.26.0 + qnn-runtime 2.50.0 "
                              "(a set reported to work, not confirmed validated)")
    # the glue registers the plugin: no warning that the NPU sessions fail, only how sure the set is
    assert [REPORTED in w for w in out["warnings"]] == [True]
    gradle = (tmp_path / "q" / "qnndeploy.gradle").read_text()
    assert ("implementation(\"com.microsoft.onnxruntime:onnxruntime-android:${findProperty('qnndeploy.ortVersion') "
            "?: '1.26.0'}\")") in gradle
    assert ("implementation(\"com.qualcomm.qti:onnxruntime-android-qnn:${findProperty('qnndeploy.qnnEpVersion') "
            "?: '2.6.0'}\")") in gradle
    assert "onnxruntime-android-qnn:${findProperty('qnndeploy.ortVersion')" not in gradle
    assert run(external, "--package", "com.example.foo", "-o", tmp_path / "x", "--ort-aar", "google").exit_code == 2


def test_bundle_verify_says_the_runtime_set_the_app_will_use(external):
    r = run_cli("bundle", "verify", external, "--shallow")
    assert r.exit_code == 0, r.output
    assert f"\n    {QUALCOMM_SET}\n" in r.output


def test_models_the_pinned_onnx_runtime_cannot_read_are_a_warning(inputs, tmp_path):
    """ONNX Runtime 1.26 reads IR version 13 at most (measured): a CPU model saved at IR 14 would not load on the
    phone, and the EPContext wrappers qnndeploy writes are IR 10 even when onnxruntime wrote them at 14."""
    import onnx

    newer = {**inputs, "cpu": dict(inputs["cpu"])}
    newer["cpu"]["det"] = bundles.tiny_model(tmp_path / "ir14" / "det.onnx", 8, ir_version=14)
    b = bundles.build(tmp_path / "b", newer)
    assert {onnx.load(p).ir_version for p in b.glob("npu/*/*_ctx.onnx")} == {10}
    r = scaffold(b, "com.example.foo", tmp_path / "q", ort_aar="qualcomm")
    [w] = [w for w in r.warnings if "IR version" in w]
    assert w.startswith("ONNX Runtime 1.26.0 reads ONNX IR version 13 at most (measured) and these are newer, so "
                        "they fail to load on the phone: cpu/det.onnx (IR 14)")

# --- scaffold --play: the NPU files in a Google Play AI pack (qnndeploy package play), not in the app's assets ---

def test_play_keeps_every_npu_file_out_of_the_base_assets(external, tmp_path):
    from qnndeploy.formats import playplan
    from qnndeploy.package.play import package_play

    play = package_play(external, tmp_path / "play", delivery="on-demand", pack="models").path
    r = scaffold(external, "com.example.foo", tmp_path / "g", play=play)
    m = json.loads((external / "manifest.json").read_text())
    assets = r.path / "bundle/assets"
    assert tree(assets) == {f"qnndeploy/{p}" for p in ("manifest.json", "play.json", *(a["path"] for a in m["cpu"]))}
    assert (assets / "qnndeploy/play.json").read_bytes() == (play / "play.json").read_bytes()
    assert r.bundle_files == 2 + len(m["cpu"]) and r.play == "models (on-demand)"
    assert {Path(p).name for p in r.kotlin} >= {"PlayPack.kt", "QnnRuntime.kt", "OrtModels.kt"}
    glue = r.path / "src/com/example/foo/qnndeploy"
    runtime, pack = (glue / "QnnRuntime.kt").read_text(), (glue / "PlayPack.kt").read_text()
    generated = (glue / "Generated.kt").read_text()
    # select asks the pack the data file names; the pack locates itself and gives the CPU its reason
    assert "Generated.AI_PACK" in runtime and "val AI_PACK: AiPack? = PlayPack.Files\n" in generated
    assert "locate(context, plan, " in pack and "Reasons.packNotReady(" in pack
    for name, value in (("FOLDER", playplan.FOLDER), ("GROUP_FILE", playplan.GROUP_FILE),
                        ("DEFAULT_GROUP", playplan.DEFAULT_GROUP)):
        assert f'const val {name} = Generated.PLAY_{name}' in pack
        assert f'const val PLAY_{name} = "{value}"' in generated  # one source: qnndeploy/formats/playplan.py
    assert f"const val PLAY_SOC_TARGETING_SINCE_SDK = {playplan.SOC_TARGETING_SINCE_SDK}" in generated
    assert "{{" not in runtime + pack + generated and "{%" not in runtime + pack + generated
    assert len(r.lines) == 6 and r.lines[:3] == scaffold(external, "com.example.foo", tmp_path / "g",
                                                         force=True).lines
    assert r.lines[3].endswith(f'apply(from = "{(play / "play.gradle").as_posix()}")')
    assert 'include(":models")' in r.lines[4]
    assert r.lines[5].endswith("android.experimental.enableDeviceTargetingConfigApi=true")
    # without --play the glue has no PlayPack.kt (scaffold copies it only with --play, as only the engine's file)
    assert not (glue / "PlayPack.kt").exists() and "PlayPack" not in (glue / "QnnRuntime.kt").read_text()
    assert "val AI_PACK: AiPack? = null\n" in (glue / "Generated.kt").read_text()


def test_play_of_another_bundle_is_refused(external, bundled, tmp_path):
    from qnndeploy.package.play import package_play

    other = package_play(bundled, tmp_path / "play").path
    with pytest.raises(QnnDeployError, match=r"was packaged from another bundle .*run qnndeploy package play") as e:
        scaffold(external, "com.example.foo", tmp_path / "g", play=other)
    assert "\n" not in str(e.value) and not (tmp_path / "g").exists()
    with pytest.raises(QnnDeployError, match="not a `qnndeploy package play` output"):
        scaffold(external, "com.example.foo", tmp_path / "g", play=tmp_path)
    with pytest.raises(QnnDeployError, match="--app does not take --play"):
        scaffold(external, "com.example.foo", tmp_path / "g", app=True, play=other)
    result = run(external, "--package", "com.example.foo", "-o", tmp_path / "g", "--play", other)
    assert result.exit_code != 0 and "packaged from another bundle" in result.output


def test_play_from_the_command_line(external, tmp_path):
    from qnndeploy.package.play import package_play

    play = package_play(external, tmp_path / "play").path
    result = run(external, "--package", "com.example.foo", "-o", tmp_path / "g", "--play", play, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["play"].endswith("(fast-follow)") and len(out["lines"]) == 6
    text = run(external, "--package", "com.example.foo", "-o", tmp_path / "h", "--play", play)
    assert "AI pack" in text.output and "add these six lines" in text.output


def test_with_play_the_base_module_keeps_the_on_device_models(tmp_path):
    """A phone without a target compiles the on-device models from the base module's assets (the pack holds the
    targets' files only), so scaffold --play copies them there beside the CPU models, and no target file."""
    from qnndeploy.formats.manifest import Manifest
    from qnndeploy.formats.playplan import PLAN
    from qnndeploy.scaffold import _copy_bundle

    raw = bundles.on_device(bundles.manifest(), own=("rec",))
    bundle = tmp_path / "bundle"

    def real(entry: dict) -> dict:  # the file written with the bytes its sha256 and size now say
        data = f"bytes of {entry['path']}".encode()
        (bundle / entry["path"]).parent.mkdir(parents=True, exist_ok=True)
        (bundle / entry["path"]).write_bytes(data)
        return {**entry, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}

    raw = {**raw, "cpu": [real(a) for a in raw["cpu"]],
           "on_device": {**raw["on_device"], "artifacts": [real(a) for a in raw["on_device"]["artifacts"]]}}
    (bundle / "manifest.json").write_text(json.dumps(raw))
    (tmp_path / "play").mkdir()
    (tmp_path / "play" / PLAN).write_text("{}")
    _copy_bundle(bundle, Manifest.parse(raw), tmp_path / "out", tmp_path / "play")
    assets = tmp_path / "out" / "assets" / "qnndeploy"
    copied = {p.relative_to(assets).as_posix() for p in assets.rglob("*") if p.is_file()}
    assert copied == {"manifest.json", PLAN, "cpu/det.onnx", "cpu/rec.onnx", "on-device/rec.onnx",
                      "on-device/rec.onnx.data"}


@pytest.mark.parametrize(("package", "said"), [("com." + ".".join(["a"] * 1500), "1,501 segments, over the limit"),
                                               ("com." + ".".join(["a" * 70] * 60), "bytes long, over the 4,096")])
def test_a_package_too_deep_for_the_file_system_is_one_line(external, tmp_path, package, said):
    """1,500 segments, or 60 of 70 letters, are a valid Java package, but not folders a file system (or Python's
    folder making) takes: refused in one line before anything is written (was an OSError or RecursionError
    traceback)."""
    r = run(external, "--package", package, "-o", tmp_path / "out")
    assert r.exit_code == 2 and r.stderr.startswith("error: --package "), r.output
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.output, r.output
    assert said in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_scaffold_on_a_full_disk_is_the_one_line_no_space_error(external, tmp_path):
    """The output on a tmpfs of 64 KiB (its own mount namespace, `unshare -m`): the bundle copy fills it up. One line
    naming the output and the cause, exit 2, nothing left there (was an OSError traceback)."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], check=False).returncode != 0:
        pytest.skip("no mount namespace here (unshare -m)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = (f"mount -t tmpfs -o size=64k tmpfs {mnt} || exit 99; PYTHONPATH={REPO} {sys.executable} -P -m qnndeploy "
              f"scaffold {external} --package com.example.app -o {mnt}/glue; rc=$?; ls -A {mnt}; exit $rc")
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, check=False, timeout=300)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("error: cannot write /")  # the path, shortened in the middle when it is long
    assert r.stderr.endswith("mnt/glue: no space left on the device\n"), r.stderr
    assert r.stdout.strip() == "", r.stdout  # the staging folder removed


# --- the licence manifest reaches the app ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def licensed(demo_bundle: Path) -> Path:
    """The demo's bundle: its binaries' compiler is the installed onnxruntime-qnn wheel, whose licence files it has."""
    return demo_bundle


@pytest.mark.parametrize("with_play", [False, True])
def test_the_licence_files_reach_the_apps_assets_and_the_readme_points_to_them(licensed, tmp_path, with_play):
    from qnndeploy.base.codegen import line_comment
    from qnndeploy.formats.manifest import read_manifest
    from qnndeploy.package.play import package_play

    play = package_play(licensed, tmp_path / "play").path if with_play else None
    r = scaffold(licensed, "com.example.kws", tmp_path / "glue", play=play)
    licences = read_manifest(licensed).licences
    assert licences is not None and licences.terms
    assets = r.path / "bundle/assets/qnndeploy"
    for t in licences.terms:  # with --play too: the terms go with the app, not with the pack
        assert sha(assets / t.path) == t.sha256, t.path
    readme = (r.path / "README.md").read_text()
    line = next(x for x in readme.splitlines() if x.startswith("- Licences: "))
    assert "`bundle/assets/qnndeploy/licences/`" in line
    assert line.endswith(": " + "; ".join(line_comment(o.summary) for o in licences.origins) + ".")
    if play is not None:
        assert "Licences: manifest.json's `licences` says where each Qualcomm file came from: " in (
            play / "README.md").read_text()

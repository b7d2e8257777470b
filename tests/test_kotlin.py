"""The generated Kotlin, for real: compiled by kotlinc, its selector unit-tested on the JVM, and in agreement with
qnndeploy/decision.py on the same manifests and phones.

There is no android.jar here, so the glue and the sample app compile against stand-ins of the Android, ONNX Runtime
and sherpa-onnx classes they use (tests/kotlin/stubs, real signatures). kotlinc is slow to start, so everything —
the ONNX Runtime sample app, the sherpa-onnx glue, the stand-ins and the JVM tests — compiles in one invocation.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

import bundles
import pytest
from conftest import require

from qnndeploy import htp, socs
from qnndeploy.decision import CONTEXT_BINARY, EPCONTEXT, Device, Remembered, decide
from qnndeploy.scaffold import scaffold

HERE = Path(__file__).parent / "kotlin"
PACKAGE = "com.example.qnnsample"  # tests/kotlin/*.kt import the glue from this package
UNIT_TESTS = 17  # the number of tests in tests/kotlin/SelectorTests.kt: none may silently disappear


def find_kotlinc() -> Path | None:
    """$KOTLINC, kotlinc on PATH, or the npm package kotlin-compiler."""
    if os.environ.get("KOTLINC"):
        return Path(os.environ["KOTLINC"])
    if shutil.which("kotlinc"):
        return Path(shutil.which("kotlinc"))
    if shutil.which("npm"):
        root = subprocess.run(["npm", "root", "-g"], check=False, capture_output=True, text=True).stdout.strip()
        candidate = Path(root) / "kotlin-compiler" / "bin" / "kotlinc"
        if candidate.is_file():
            return candidate
    return None


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
def kotlin(rendered, tmp_path_factory) -> dict:
    """One javac run for the Java stand-ins, one kotlinc run for all Kotlin; returns the classpath to run with."""
    kotlinc = find_kotlinc()
    require(kotlinc is not None, "kotlinc (npm install -g kotlin-compiler)")
    require(shutil.which("javac") is not None, "javac (Java 17)")
    lib = kotlinc.resolve().parent.parent / "lib"
    out = tmp_path_factory.mktemp("kotlin-build")
    stubs = out / "stubs"
    java = sorted(str(p) for p in (HERE / "stubs" / "java").rglob("*.java"))
    subprocess.run(["javac", "-nowarn", "-d", str(stubs), *java], check=True, capture_output=True, text=True)

    generated = [p for r in (rendered["app"], rendered["sherpa"]) for p in sorted(r.path.rglob("*.kt"))]
    sources = generated + sorted((HERE / "stubs" / "kotlin").rglob("*.kt")) + sorted(HERE.glob("*.kt"))
    classes = out / "classes"
    cp = os.pathsep.join([str(stubs), str(lib / "kotlin-test.jar")])
    done = subprocess.run([str(kotlinc), "-Werror", "-jvm-target", "17", "-cp", cp, "-d", str(classes),
                           *map(str, sources)], check=False, capture_output=True, text=True)
    assert done.returncode == 0, f"kotlinc failed:\n{done.stdout}\n{done.stderr}"
    run_cp = os.pathsep.join([str(classes), str(stubs), str(lib / "kotlin-stdlib.jar"), str(lib / "kotlin-test.jar")])
    return {"classes": classes, "cp": run_cp, "generated": generated, "out": out}


def run_jvm(kotlin: dict, main: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["java", "-cp", kotlin["cp"], main, *args], check=False, capture_output=True, text=True,
                          timeout=120)


def test_all_generated_kotlin_compiles(rendered, kotlin):
    names = {p.name for p in kotlin["generated"]}
    assert {"MainActivity.kt", "OrtModels.kt", "SherpaOnnxQnn.kt", "QnnSelector.kt", "QnnRuntime.kt",
            "SocCatalog.kt", "BundleFiles.kt", "FailureMemory.kt", "MiniJson.kt"} <= names
    assert len(kotlin["generated"]) == len(rendered["app"].kotlin) + len(rendered["sherpa"].kotlin)
    for cls in (f"{PACKAGE.replace('.', '/')}/MainActivity.class", "com/example/sherpa/qnndeploy/SherpaOnnxQnn.class",
                f"{PACKAGE.replace('.', '/')}/qnndeploy/OrtModels.class"):
        assert (kotlin["classes"] / cls).is_file(), cls


def test_selector_unit_tests_pass_on_the_jvm(rendered, kotlin):
    manifests = kotlin["out"] / "manifests.json"
    manifests.write_text(json.dumps({"two_targets": bundles.manifest(), "bundled": bundles.manifest(runtime="bundled")}))
    scratch = kotlin["out"] / "scratch"
    done = run_jvm(kotlin, "qnndeploy.tests.SelectorTestsKt", str(manifests),
                   str(rendered["app"].glue / "bundle" / "assets"), str(scratch))
    lines = done.stdout.splitlines()
    failures = [line for line in lines if line.startswith("FAIL")]
    assert not failures and done.returncode == 0, "\n".join(failures) or done.stderr
    assert sum(line.startswith("ok ") for line in lines) == UNIT_TESTS, done.stdout


def agreement_cases(real_manifest: dict) -> tuple[list[dict], list[dict]]:
    """Manifests × phones × library outcomes × environments × remembered failures × engines."""
    two = bundles.manifest()
    bundled = bundles.manifest(runtime="bundled")
    no_v79 = bundles.manifest(runtime="bundled")
    no_v79["runtime"]["libs"] = [lib for lib in no_v79["runtime"]["libs"] if "V79" not in lib["path"]]
    manifests = [
        real_manifest, two, bundled, no_v79, bundles.manifest(formats=(CONTEXT_BINARY,)),
        bundles.manifest(targets=()), bundles.manifest(targets=("SM8750", "SM8850", "QCS9100")),
        {**two, "format_version": 1}, bundles.manifest(external=("det", "rec")),
        {**two, "format_version": 3}, {**two, "format_version": 1.0}, {**two, "format": "something-else"},
    ]
    devices = [Device("SM8750", "sun", 35), Device("SM8750P", None, 34), Device(" sm8550 ", "kalama", 33),
               Device("SM8550", "kalama", 30), Device(None, "kalama", 30), Device("", "sun", 29),
               Device(None, "lito", 30), Device(None, None, 28), Device("unknown", "pineapple", 31),
               Device("s5e9945", "s5e9945", 34), Device("SM8650", "pineapple", 34)]
    for soc in socs.catalog():  # every model, alias and codename of the catalog
        devices += [Device(name, None, 33) for name in (soc.model, *soc.aliases)]
        devices += [Device(None, c, 30) for c in soc.codenames]
    loads = [{}, {"libQnnHtpV79Stub.so": 'dlopen failed: library "libcdsprpc.so" not found'},
             {"libQnnSystem.so": "a", "libQnnHtp.so": "b", "libQnnHtpV73Stub.so": "c", "libQnnHtpV79Stub.so": "d"}]
    envs = [None, "/odm/lib/rfsa/adsp;/vendor/dsp/cdsp;;"]
    remembered = [None, Remembered("1.0 (1) 7", "demo 1.0.0", "QNN error 1008"),
                  Remembered("0.9 (0) 3", "demo 1.0.0", "old failure")]
    cases = []
    for (mi, _), device, load, env, rem, fmt in itertools.product(
            enumerate(manifests), devices, loads, envs, remembered, (CONTEXT_BINARY, EPCONTEXT)):
        cases.append({"manifest": mi, "device": asdict(device), "load_errors": load, "adsp_before": env,
                      "lib_dir": "/data/app/x/lib/arm64", "npu_format": fmt, "app_version": "1.0 (1) 7",
                      "remembered": asdict(rem) if rem else None})
    return manifests, cases


def test_python_and_kotlin_decide_alike(rendered, kotlin):
    manifests, cases = agreement_cases(rendered["manifest"])
    path = kotlin["out"] / "agreement.json"
    path.write_text(json.dumps({"manifests": manifests, "cases": cases}))
    done = run_jvm(kotlin, "qnndeploy.tests.Agreement", str(path))
    assert done.returncode == 0, done.stderr
    kotlin_results = json.loads(done.stdout)
    assert len(kotlin_results) == len(cases)
    providers = set()
    for case, got in zip(cases, kotlin_results):
        rem = case["remembered"]
        expected = decide(manifests[case["manifest"]], Device(**case["device"]), load_errors=case["load_errors"],
                          lib_dir=case["lib_dir"], adsp_before=case["adsp_before"], npu_format=case["npu_format"],
                          app_version=case["app_version"], remembered=Remembered(**rem) if rem else None)
        assert got["decision"] == asdict(expected), case
        calls = []
        if expected.adsp_library_path is not None:  # the environment first, then the three libraries in order
            arch = expected.dsp_arch or _arch(manifests[case["manifest"]], expected.soc)
            calls = ["setenv ADSP_LIBRARY_PATH", "load libQnnSystem.so", "load libQnnHtp.so",
                     f"load libQnnHtpV{arch[1:]}Stub.so"]
        assert got["calls"] == calls, case
        providers.add((expected.provider, expected.reason.split(" ")[0]))
    # the cases reach every kind of outcome, so agreeing is not trivial
    assert {p for p, _ in providers} == {"npu", "cpu"} and len(providers) >= 6


def _arch(manifest: dict, soc: str) -> str:
    target = next(t for t in manifest["targets"] if socs.find(t["soc"]).model == soc)
    return target["dsp_arch"]

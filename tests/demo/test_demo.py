"""`qnndeploy demo`, the README's main command, end to end with the real executable; android-sample/ is its app."""

from __future__ import annotations

import filecmp
import json
import subprocess
from pathlib import Path

import pytest

from qnndeploy.base.errors import QnnDeployError
from qnndeploy.qnn import htp
from qnndeploy.scaffold import scaffold
from qnndeploy.verification.checks import verify_bundle
from tests.support import REPO
from tests.support.host import require

pytestmark = [pytest.mark.slow, pytest.mark.needs_qnn]

SAMPLE = REPO / "android-sample"
SAMPLE_PACKAGE = "com.example.qnnsample"


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    require(htp.available(), "onnxruntime-qnn")
    out = tmp_path_factory.mktemp("demo") / "run"
    done = subprocess.run(["qnndeploy", "demo", "-o", str(out)], capture_output=True, text=True, timeout=600,
                          check=False)
    return done, out


def test_demo_runs_every_stage(demo):
    done, _out = demo
    assert done.returncode == 0, done.stderr
    for stage in ("check", "prepare", "compile", "validate", "bundle"):
        assert stage in done.stdout
    assert "check before: fixable" in done.stdout and "check after: ready, 0 CPU partition(s)" in done.stdout
    assert "external: com.qualcomm.qti:qnn-runtime:2.50.0" in done.stdout
    assert "verifies clean; 3 context binaries loaded and run on the host HTP emulator" in done.stdout
    # which ONNX Runtime set the app will use, and whether it is validated for these binaries' QAIRT
    assert ("\napp: runtime set: com.qualcomm.qti:onnxruntime-android-qnn:2.6.0 + "
            "com.microsoft.onnxruntime:onnxruntime-android:1.26.0 + com.qualcomm.qti:qnn-runtime:2.50.0 (QNN plugin "
            "registered by the glue): reported to work, not confirmed as validated, for these QAIRT 2.50.40 "
            "binaries") in done.stdout
    assert "qnndeploy scaffold" in done.stdout and "qnndeploy device verify" in done.stdout
    assert "Traceback" not in done.stderr


def test_demo_bundle_is_complete_and_validated(demo):
    _, out = demo
    bundle = out / "bundle" / "kws-demo-1.0.0"
    assert verify_bundle(bundle).ok
    m = json.loads((bundle / "manifest.json").read_text())
    assert [t["soc"] for t in m["targets"]] == ["SM8550", "SM8650", "SM8750"]
    assert all(t["validation"]["passed"] for t in m["targets"])
    assert m["graphs"][0]["inputs"] == [{"name": "features", "dtype": "float32", "shape": [1, 1, 49, 10]}]
    assert m["source"]["license"] == "Apache-2.0" and m["source"]["sha256"]
    assert sorted(p.name for p in (bundle / "records").iterdir()) == ["kws_demo-SM8550-compile.json",
        "kws_demo-SM8550-validation.json", "kws_demo-SM8650-compile.json", "kws_demo-SM8650-validation.json",
        "kws_demo-SM8750-compile.json", "kws_demo-SM8750-validation.json", "logs"]


def test_demo_refuses_a_used_folder_and_json_parses(demo):
    _, out = demo
    again = subprocess.run(["qnndeploy", "demo", "-o", str(out)], capture_output=True, text=True, check=False)
    assert again.returncode == 2 and again.stderr.startswith("error: ") and "--force" in again.stderr
    forced = subprocess.run(["qnndeploy", "demo", "-o", str(out), "--force", "--json"], capture_output=True,
                            text=True, timeout=600, check=False)
    assert forced.returncode == 0, forced.stderr
    result = json.loads(forced.stdout)
    assert result["verdict_after"] == "ready"
    # what bundle verify says of the same bundle, warnings and the deep check included: the demo hides nothing
    report = verify_bundle(out / "bundle" / "kws-demo-1.0.0", deep=True)
    assert result["warnings"] == [f"{w.path}: {w.message}" for w in report.warnings]
    assert result["verified"] == report.deep and result["verified"].startswith("3 context binaries loaded and run")


def test_android_sample_is_the_demo_bundle_rendered(demo, tmp_path):
    _, out = demo
    fresh = scaffold(out / "bundle" / "kws-demo-1.0.0", SAMPLE_PACKAGE, tmp_path / SAMPLE.name, app=True).path
    regenerate = (f"android-sample/ differs from the templates: regenerate it with `qnndeploy scaffold "
                  f"qnndeploy-demo/bundle/kws-demo-1.0.0 --package {SAMPLE_PACKAGE} --app -o android-sample --force`")
    # the bundle copy is data the user renders in (android-sample/.gitignore); the rest is source, kept in sync
    files = lambda root: {p.relative_to(root).as_posix() for p in root.rglob("*")  # noqa: E731
                          if p.is_file() and not p.relative_to(root).as_posix().startswith("app/qnndeploy/bundle/")}
    assert files(SAMPLE) == files(fresh), regenerate
    for rel in sorted(files(fresh)):
        assert filecmp.cmp(SAMPLE / rel, fresh / rel, shallow=False), f"{rel}: {regenerate}"


def test_demo_bundles_given_runtime_libraries_and_cleans_up_on_failure(tmp_path):
    from tests.support.elfgen import fake_sdk

    require(htp.available(), "onnxruntime-qnn")
    sdk = fake_sdk(tmp_path / "sdk", ["v73", "v75", "v79"])
    done = subprocess.run(["qnndeploy", "demo", "-o", str(tmp_path / "d"), "--qnn-sdk-root", str(sdk)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert "runtime: bundled: 9 libraries" in done.stdout
    m = json.loads((tmp_path / "d/bundle/kws-demo-1.0.0/manifest.json").read_text())
    assert {lib["path"] for lib in m["runtime"]["libs"]} >= {"lib/hexagon-v75/libQnnHtpV75Skel.so",
                                                             "lib/arm64-v8a/libQnnHtpV79Stub.so"}
    # an SDK without the v75 Skel: the bundle stage fails, and the half-made output is removed
    (sdk / "lib/hexagon-v75/unsigned/libQnnHtpV75Skel.so").unlink()
    failed = subprocess.run(["qnndeploy", "demo", "-o", str(tmp_path / "e"), "--qnn-sdk-root", str(sdk)],
                            capture_output=True, text=True, timeout=600, check=False)
    assert failed.returncode == 2 and "libQnnHtpV75Skel.so not found" in failed.stderr
    assert not (tmp_path / "e").exists()


def test_force_replaces_only_a_demo_output(tmp_path):
    (tmp_path / "proj/model").mkdir(parents=True)
    (tmp_path / "proj/model/mine.onnx").write_text("mine")
    done = subprocess.run(["qnndeploy", "demo", "-o", str(tmp_path / "proj"), "--force"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 2 and "--force only replaces an earlier demo output" in done.stderr
    assert (tmp_path / "proj/model/mine.onnx").read_text() == "mine"
    (tmp_path / "afile").write_text("")
    done = subprocess.run(["qnndeploy", "demo", "-o", str(tmp_path / "afile")], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 2 and done.stderr == f"error: -o {tmp_path / 'afile'} is a file, not a folder\n"
    done = subprocess.run(["qnndeploy", "demo", "-o", str(tmp_path / "x"), "--soc", "SM8350"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 2 and "SM8350 (v68) has no fp16" in done.stderr and not (tmp_path / "x").exists()
    # SM7325: no QAIRT release here compiles anything for it (measured): refused before any stage runs
    done = subprocess.run(["qnndeploy", "demo", "-o", str(tmp_path / "x"), "--soc", "SM7325"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 2 and "has no fp16 on its HTP" in done.stderr and not (tmp_path / "x").exists()
    done = subprocess.run(["qnndeploy", "demo", "-o", str(tmp_path / "x"), "--soc", "SM8635"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 2 and "compiles nothing for SM8635 (soc_model 68) on the host" in done.stderr
    assert not (tmp_path / "x").exists()


def test_a_failed_forced_rerun_keeps_the_earlier_output(demo, tmp_path):
    _, out = demo
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    done = subprocess.run(["qnndeploy", "demo", "-o", str(out), "--force", "--runtime-libs", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, check=False)  # empty: the bundle stage fails
    assert done.returncode == 2 and "libQnnHtp.so not found" in done.stderr
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_sigterm_mid_run_leaves_nothing(tmp_path):
    """CI cancels and `kill` send SIGTERM: it cleans up like Ctrl-C (exit 130, no half-made output)."""
    import os
    import signal

    require(htp.available(), "onnxruntime-qnn")
    out = tmp_path / "run"
    proc = subprocess.Popen(["qnndeploy", "demo", "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "QNNDEPLOY_CACHE_DIR": str(tmp_path / "cache")})
    for line in proc.stdout:
        if line.startswith("[3/"):  # prepare is done, the compile has not started
            proc.send_signal(signal.SIGTERM)
            break
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted; nothing was left half-written" in err
    assert not out.exists()


def test_a_failed_demo_names_the_cause_not_a_file_it_rolled_back(tmp_path, monkeypatch):
    """The demo removes its half-made output on failure, so the error carries the cause, never a path inside it."""
    from types import SimpleNamespace

    from qnndeploy import demo as stage

    out = tmp_path / "d"
    failure = SimpleNamespace(soc="SM8750", error="the HTP cannot run 1 node(s): x (Det)",
                              log=out / "build/logs/kws_demo-SM8750.log")
    monkeypatch.setattr(stage, "compile_models", lambda *a, **k: SimpleNamespace(ok=False, failures=[failure]))
    with pytest.raises(QnnDeployError) as e:
        stage.run_demo(out, socs=("SM8750",))
    assert str(e.value) == "compile failed for SM8750: the HTP cannot run 1 node(s): x (Det)"
    assert str(out) not in str(e.value) and not out.exists()


def test_android_sample_holds_no_copy_of_the_glue():
    """The sample's glue sources are links to templates/glue/kotlin, the one copy of the library; only the data file
    scaffold generates for the demo bundle is its own."""
    glue = SAMPLE / "app" / "qnndeploy" / "src" / SAMPLE_PACKAGE.replace(".", "/") / "qnndeploy"
    kotlin = sorted(glue.glob("*.kt"))
    assert [p.name for p in kotlin if not p.is_symlink()] == ["Generated.kt"]
    templates = (SAMPLE.parent / "templates" / "glue" / "kotlin").resolve()
    assert len(kotlin) > 1 and all(p.resolve().is_relative_to(templates) for p in kotlin if p.is_symlink())

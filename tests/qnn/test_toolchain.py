"""compile --qairt: the onnxruntime-qnn wheel of another QAIRT release, installed by qnndeploy itself (pip --target
into the toolchains folder, here from the local wheelhouse) and run in child processes; validate follows the
build's QAIRT; bundle pins the published qnn-runtime the measured load table says loads the binaries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import onnx
import pytest

from qnndeploy.base import child, compat
from qnndeploy.qnn import toolchain
from tests.support.cli import PROGRAM, run
from tests.support.host import alive
from tests.support.synth_models import static_mlp

pytestmark = [pytest.mark.slow, pytest.mark.needs_qnn]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("m") / "mlp.onnx"
    onnx.save(static_mlp(), path)
    return path


def _other(family: str) -> toolchain.Toolchain:
    tc = toolchain.resolve(family)
    assert not toolchain.is_current(tc), "pick a release other than the installed one"
    return tc


@pytest.mark.parametrize("family", ["2.51", "2.48"])
def test_compile_with_another_qairt_then_validate_inspect_and_bundle(toolchains, model, tmp_path, family):
    tc = _other(family)
    build = tmp_path / "build"
    done = run("compile", str(model), "--soc", "SM8550", "--soc", "SM8750", "--qairt", family, "-o", str(build),
               process=True)
    assert done.returncode == 0, done.stderr
    assert f"running under {tc.name}" in done.stderr and f"QAIRT {tc.qairt}" in done.stdout
    record = json.loads((build / "mlp" / "SM8750" / "compile.json").read_text())
    assert record["qairt_version"] == tc.qairt and record["tools"]["onnxruntime-qnn"] == tc.onnxruntime_qnn

    shown = run("inspect", str(build / "mlp" / "SM8750" / "mlp.bin"), "--json", process=True)
    assert json.loads(shown.stdout)["binaries"][0]["context"]["build_id"].startswith(f"v{tc.qairt}.")

    checked = run("validate", str(build), process=True)  # the binaries' own QAIRT runs them: the child says so
    assert checked.returncode == 0, checked.stderr
    assert f"running under {tc.name}" in checked.stderr and "2 passed" in checked.stdout

    bundled = run("bundle", "build", "--from-build", str(build), "--name", "m", "--version", "1.0.0",
                  "-o", str(tmp_path / "dist"), "--json", process=True)
    pins = compat.maven_for(tc.qairt)
    if not pins:  # QAIRT 2.51: no published runtime loads it, said plainly with the two ways out
        assert bundled.returncode == 2 and "no published com.qualcomm.qti:qnn-runtime" in bundled.stderr
        newest = toolchain.default()
        assert "--runtime-libs" in bundled.stderr and f"--qairt {newest.family}" in bundled.stderr
        return
    assert bundled.returncode == 0, bundled.stderr
    manifest = json.loads((tmp_path / "dist" / "m-1.0.0" / "manifest.json").read_text())
    assert manifest["qairt"]["version"] == tc.qairt
    assert manifest["runtime"] == {"mode": "external", "maven": f"com.qualcomm.qti:qnn-runtime:{pins[0]}"}
    assert run("bundle", "verify", str(tmp_path / "dist" / "m-1.0.0"), process=True).returncode == 0


def test_the_default_qairt_pins_a_published_runtime(model, tmp_path):
    """The pinned onnxruntime-qnn's bundles pin a qnn-runtime that Maven has: the default flow works for an app."""
    here = toolchain.current()
    assert here is not None and compat.maven_for(here.qairt), "the pinned wheel must have a published runtime"
    build = tmp_path / "build"
    assert run("compile", str(model), "--soc", "SM8650", "--qairt", here.family, "-o", str(build),
               process=True).returncode == 0
    assert run("validate", str(build), process=True).returncode == 0
    done = run("bundle", "build", "--from-build", str(build), "--name", "m", "--version", "1.0.0",
               "-o", str(tmp_path / "dist"), process=True)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "dist" / "m-1.0.0" / "manifest.json").read_text())
    assert manifest["runtime"]["maven"] == f"com.qualcomm.qti:qnn-runtime:{compat.maven_for(here.qairt)[0]}"


def test_a_child_under_a_toolchain_never_imports_the_current_folder(toolchains, model, tmp_path):
    hostile = tmp_path / "cwd" / "qnndeploy"
    hostile.mkdir(parents=True)
    marker = tmp_path / "ran"
    (hostile / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    (hostile / "__main__.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    done = run("compile", str(model), "--soc", "SM8550", "--qairt", "2.51", "-o", str(tmp_path / "b"),
               cwd=tmp_path / "cwd", process=True)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


def test_unknown_releases_and_other_backends_are_one_line_errors(model, tmp_path):
    done = run("compile", str(model), "--soc", "SM8550", "--qairt", "9.9", "-o", str(tmp_path / "b"), process=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "no onnxruntime-qnn wheel carries that QAIRT release; known: 2.47 (2.47.0)" in done.stderr
    done = run("compile", str(model), "--soc", "SM8550", "--qairt", "2.51", "--backend", "qairt", "-o",
               str(tmp_path / "b"), process=True)
    assert done.returncode == 2 and "with --backend qairt the SDK of --qnn-sdk-root decides" in done.stderr


def test_an_install_that_fails_says_how_and_leaves_nothing(model, tmp_path):
    env = {**os.environ, toolchain.ENV_DIR: str(tmp_path / "toolchains"), "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(tmp_path / "empty")}
    (tmp_path / "empty").mkdir()
    done = run("compile", str(model), "--soc", "SM8550", "--qairt", "2.51", "-o", str(tmp_path / "b"), env=env,
               process=True)
    assert done.returncode == 3, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("error: pip could not install onnxruntime-qnn 2.7.0 (QAIRT 2.51.0)")
    assert " -m pip install --no-deps --target " in error  # with the Python qnndeploy runs on
    assert [p.name for p in (tmp_path / "toolchains").iterdir()] == [".onnxruntime-qnn-2.7.0.lock"]  # its lock only
    assert not (tmp_path / "b").exists()


def test_two_installs_of_one_toolchain_take_turns(toolchains, tmp_path, monkeypatch):
    """Two processes (here: threads, each with its own lock file description) install the same release into an
    empty folder at once: one installs, the other waits and finds it installed; nothing is left half-made."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setenv(toolchain.ENV_DIR, str(tmp_path / "toolchains"))
    tc = next(t for t in toolchains if not toolchain.is_current(t))
    with ThreadPoolExecutor(2) as pool:
        folders = list(pool.map(lambda _: toolchain.install(tc), range(2)))
    assert folders == [toolchain.folder(tc)] * 2 and toolchain.installed(tc)
    assert sorted(p.name for p in (tmp_path / "toolchains").iterdir()) == [f".{folders[0].name}.lock",
                                                                           folders[0].name]


# A stand-in for pip (not pip): found first on the import path of `python -m pip`, it writes part of a wheel into
# --target, says its pid, and hangs, as a large download does; or it fails at once.
STANDIN_PIP = '''import os, sys, time
target = sys.argv[sys.argv.index("--target") + 1]
if os.environ.get("STANDIN_PIP_FAIL"):
    sys.exit("ERROR: the stand-in pip fails")
with open(os.path.join(target, "onnxruntime_qnn.partial"), "wb") as f:
    f.write(bytes(1 << 20))
with open(os.environ["STANDIN_PIP_PID"] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(os.environ["STANDIN_PIP_PID"] + ".tmp", os.environ["STANDIN_PIP_PID"])
time.sleep(120)
'''


def test_a_killed_install_leaves_a_staging_folder_the_next_run_removes(model, tmp_path, monkeypatch):
    """compile --qairt SIGKILLed while pip writes the wheel: its pip dies with it, the toolchain is not installed,
    and the staging folder it left (as large as what pip wrote) is removed by the next install."""
    standin = tmp_path / "standin" / "pip"
    standin.mkdir(parents=True)
    (standin / "__init__.py").write_text("")
    (standin / "__main__.py").write_text(STANDIN_PIP)
    toolchains, said = tmp_path / "toolchains", tmp_path / "pip.pid"
    monkeypatch.setenv(toolchain.ENV_DIR, str(toolchains))  # toolchain.folder here names the children's folder
    env = {**os.environ, toolchain.ENV_DIR: str(toolchains), "STANDIN_PIP_PID": str(said),
           "PYTHONPATH": os.pathsep.join([str(standin.parent), child.HERE])}  # this tree's qnndeploy, its pip
    cli = subprocess.Popen([*PROGRAM, "compile", str(model), "--soc", "SM8550", "--qairt", "2.51", "-o",
                            str(tmp_path / "b")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not said.exists() and cli.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert said.exists(), "the stand-in pip never started"
    cli.send_signal(signal.SIGKILL)
    cli.wait()
    pip = int(said.read_text())
    deadline = time.monotonic() + 5
    while alive(pip) and time.monotonic() < deadline:
        time.sleep(0.02)
    outlived = alive(pip)
    if outlived:
        os.kill(pip, signal.SIGKILL)  # the test's own stand-in
    assert not outlived, "pip outlived the killed compile"
    tc = toolchain.resolve("2.51")
    [left] = [p for p in toolchains.iterdir() if p.name.startswith(f".{toolchain.folder(tc).name}.partial-")]
    assert (left / "onnxruntime_qnn.partial").stat().st_size == 1 << 20
    assert not toolchain.folder(tc).exists()

    done = run("compile", str(model), "--soc", "SM8550", "--qairt", "2.51", "-o", str(tmp_path / "b"),
               env={**env, "STANDIN_PIP_FAIL": "1"}, process=True)
    assert done.returncode == 3 and "the stand-in pip fails" in done.stderr, done.stderr
    assert [p.name for p in toolchains.iterdir()] == [f".{toolchain.folder(tc).name}.lock"]  # its lock only

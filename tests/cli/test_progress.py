"""Progress on the long steps when stderr is not a terminal (a CI log, a pipe): one line per step on stderr, with the
seconds since the command started, and nothing of it on stdout, so --json stays clean. CliRunner's stderr is not a
terminal. The demo's build and bundle (real context binaries), and an emulated phone for the device commands."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from qnndeploy.cli._common import QUIET_ENV, step_progress
from qnndeploy.formats.manifest import read_manifest
from qnndeploy.qnn import htp
from tests.support import bundles
from tests.support.cli import run
from tests.support.device_emulator import ort_perf_test, qnn_net_run
from tests.support.host import require

pytest_plugins = ["tests.support.device_emulator.fixtures"]

@pytest.fixture(autouse=True)
def said_at_once(monkeypatch):
    """These commands end in seconds: progress from their first step on (a user sees it after QUIET_S)."""
    monkeypatch.setenv(QUIET_ENV, "0")


LINE = re.compile(r"^\[\s*\d+\.\d s\] (?P<what>[a-z ]+): (?P<step>.+)$")


def steps(stderr: str, what: str) -> list[str]:
    """The progress lines of `what` on stderr, checked for their form; the last one says the command is done."""
    found = [m for m in map(LINE.match, stderr.splitlines()) if m and m["what"] == what]
    assert found and found[-1]["step"] == "done", stderr
    return [m["step"] for m in found]


def clean_json(stdout: str) -> object:
    assert not any(LINE.match(line) for line in stdout.splitlines()), stdout
    return json.loads(stdout)


@pytest.fixture(scope="module")
def demo(demo_run: Path) -> Path:
    return demo_run


@pytest.mark.needs_qnn
def test_bundle_verify_says_each_step_on_stderr(demo, tmp_path, monkeypatch):
    monkeypatch.setenv("QNNDEPLOY_EMULATED_DIR", str(tmp_path / "emulated"))  # run on the emulator, not cached
    bundle = demo / "bundle" / "kws-demo-1.0.0"
    r = run("bundle", "verify", bundle, "--json")
    assert r.exit_code == 0, r.output
    assert clean_json(r.stdout)["ok"] is True  # type: ignore[index]
    said = steps(r.stderr, "bundle verify")
    assert said[0].startswith(f"hashing {len(read_manifest(bundle).files())} file(s), ")  # every listed file
    assert "reading 3 context binaries with libQnnSystem" in said
    for n, soc in enumerate(("SM8550", "SM8650", "SM8750"), 1):  # the emulator's child tells each run as it starts
        assert f"running npu/{soc}/kws_demo.bin on the host HTP emulator ({n} of 3)" in said
    again = run("bundle", "verify", bundle)  # the same bytes again: from the emulator's cache, said so
    cached = "3 of 3 emulator run(s) from the cache (run before on the same bytes)"
    assert cached in steps(again.stderr, "bundle verify")
    assert "bundle verify:" not in again.stdout


@pytest.mark.needs_qnn
def test_diagnose_says_each_compile_on_stderr(demo):
    r = run("diagnose", demo / "build" / "kws_demo" / "SM8750", "--json")
    assert r.exit_code == 0, r.output
    assert clean_json(r.stdout)["ok"] is True  # type: ignore[index]
    said = steps(r.stderr, "diagnose")
    assert said[0].startswith("running the build's binary on the HTP emulator and kws_demo.npu.onnx on the CPU")
    assert any(re.fullmatch(r"probe compile 1: \d+ tensor\(s\) exposed, compiled for SM8750 and run on the HTP "
                            "emulator", s) for s in said), said


@pytest.mark.needs_qnn
def test_report_says_each_path_on_stderr(demo, tmp_path):
    r = run("report", demo / "build", demo / "bundle" / "kws-demo-1.0.0", "-o", tmp_path / "r.html", "--json")
    assert r.exit_code == 0, r.output
    clean_json(r.stdout)
    said = steps(r.stderr, "report")
    assert said[:2] == [f"reading the records under {demo / 'build'}",
                        f"reading the records under {demo / 'bundle' / 'kws-demo-1.0.0'}"]
    assert re.fullmatch(r"drawing the page: \d+ record\(s\), their tables and plots", said[2])


@pytest.fixture(scope="module")
def phone_bundle(tmp_path_factory) -> Path:
    require(htp.available(), "onnxruntime-qnn")
    compiled = bundles.compile_inputs(tmp_path_factory.mktemp("compiled"), targets=("SM8750",))
    return bundles.build(tmp_path_factory.mktemp("bundle"), compiled, runtime="bundled")


@pytest.mark.needs_adb
@pytest.mark.needs_qnn
@pytest.mark.usefixtures("no_sdk")
def test_device_verify_and_bench_say_each_step_on_stderr(device, phone_bundle, tmp_path):
    runner = qnn_net_run.write_launcher(tmp_path / "qnn-net-run")
    r = run("device", "verify", phone_bundle, "--runner", runner, "-o", tmp_path / "rec", "--json")
    assert r.exit_code == 0, r.output
    clean_json(r.stdout)
    said = steps(r.stderr, "device verify")
    assert said[0].startswith("hashing ") and "running the CPU models here on the samples (the reference)" in said
    assert any(s.startswith(f"{device.serial}: pushing ") for s in said), said
    assert any(s.startswith(f"{device.serial}: running det (") and s.endswith("on the phone with qnn-net-run")
               for s in said), said

    ort = ort_perf_test.write_launcher(tmp_path / "onnxruntime_perf_test")
    b = run("device", "bench", phone_bundle, "--graph", "det", "--runs", "5", "--blocks", "2", "--runner", runner,
            "--ort-runner", ort, "-o", tmp_path / "bench", "--json")
    assert b.exit_code == 0, b.output
    clean_json(b.stdout)
    said = steps(b.stderr, "device bench")
    assert said[0].startswith("hashing ") and any(s.startswith(f"{device.serial}: pushing ") for s in said)
    assert any(s.startswith(f"{device.serial} det: block 2: NPU ") for s in said), said


def test_a_quick_bad_input_is_one_error_line_and_a_long_step_is_said_after_the_quiet_period(tmp_path, monkeypatch,
                                                                                          capsys):
    """Progress starts once the command has run QUIET_S: an error found at once stays the one line on stderr, and
    the step under way when the quiet period ends is said then, with every step after it."""
    monkeypatch.delenv(QUIET_ENV)
    (tmp_path / "empty").mkdir()
    r = run("report", tmp_path / "empty", "-o", tmp_path / "r.html")
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and len(r.stderr.splitlines()) == 1, r.stderr
    monkeypatch.setenv(QUIET_ENV, "1")
    with step_progress("test") as shown:
        shown.step("a first, short step")
        shown.step("a long step")
        err, deadline = "", time.monotonic() + 120
        while "a long step" not in err and time.monotonic() < deadline:  # said once the quiet period is over
            time.sleep(0.05)
            err += capsys.readouterr().err
        shown.step("the last step")
    said = [m["step"] for m in map(LINE.match, (err + capsys.readouterr().err).splitlines()) if m]
    assert said == ["a long step", "the last step", "done"]

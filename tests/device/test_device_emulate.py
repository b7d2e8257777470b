"""Trying the phone side without a phone (issue 39, item 5), as the README documents it: `python -m
tests.support.device_emulator` starts the emulated phone (a STAND-IN) behind a private real adb server with its host
runners, and prints the lines to paste; they are run here as printed, each as a process of its own, on the bundle of
`qnndeploy demo`, and the records must say what ran."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from qnndeploy.base.errors import EXIT_NOT_RUN
from qnndeploy.qnn import htp
from tests.support.cli import run
from tests.support.host import require

pytestmark = [pytest.mark.needs_adb, pytest.mark.needs_qnn, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
COMMAND = "python -m tests.support.device_emulator"


def _started(args: list[str]) -> tuple[subprocess.Popen[str], list[str]]:
    """The emulator as a user starts it from the checkout; its output up to "ready"."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.device_emulator", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    said: list[str] = []
    for line in proc.stdout:
        said.append(line.rstrip("\n"))
        if line.startswith("ready"):
            return proc, said
    proc.wait(30)
    raise AssertionError("the emulator ended before it was ready:\n" + "\n".join(said))


def _as_printed(line: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A printed `qnndeploy ...` line run as a process, its shell variables expanded as a shell would."""
    words = shlex.split(line)
    assert words[0] == "qnndeploy", line
    old = os.environ.copy()
    try:
        os.environ.clear()
        os.environ.update(env)
        words = [os.path.expandvars(w) for w in words]
    finally:
        os.environ.clear()
        os.environ.update(old)
    return run(*words[1:], process=True, cwd=cwd, env=env)


def test_the_documented_emulated_phone_runs_device_list_verify_and_bench_as_printed(tmp_path):
    require(htp.available(), "onnxruntime-qnn")
    assert COMMAND in (REPO / "README.md").read_text() and COMMAND in (REPO / "docs/command-details.md").read_text()
    demo = run("demo", "-o", tmp_path / "qnndeploy-demo")
    assert demo.exit_code == 0, demo.output
    bundle = tmp_path / "qnndeploy-demo/bundle/kws-demo-1.0.0"
    proc, said = _started(["--bundle", str(bundle), "--dir", str(tmp_path / "phone")])
    try:
        assert said[0].startswith("STAND-IN phone, not a phone: Emulated SM8750 Phone"), said
        assert any("not a phone's" in line for line in said)  # what it imitates, and what it does not
        lines = [line.strip() for line in said if line.startswith("  ")]
        export, *commands = lines
        assert export.startswith("export ANDROID_ADB_SERVER_PORT=") and " ANDROID_SERIAL=127.0.0.1:" in export
        env = {**os.environ, **dict(w.split("=", 1) for w in shlex.split(export)[1:])}
        env.pop("QNN_SDK_ROOT", None)
        assert [c.split()[:3] for c in commands] == [["qnndeploy", "device", "list"],
                                                     ["qnndeploy", "device", "info"],
                                                     ["qnndeploy", "device", "verify"],
                                                     ["qnndeploy", "device", "bench"]]
        listed, info, verified, benched = (_as_printed(c, env, tmp_path) for c in commands)
        serial = env["ANDROID_SERIAL"]
        assert listed.returncode == 0 and serial in listed.stdout and "SM8750" in listed.stdout, listed.stderr
        assert info.returncode == 0 and "NPU, target SM8750" in info.stdout, info.stderr
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert "PASS  kws_demo" in verified.stdout
        (record,) = (tmp_path / "device-records").glob("kws-demo-1.0.0_*.json")
        d = json.loads(record.read_text())
        assert (d["ok"], d["outcome"]) == (True, "passed")
        assert [(g["graph"], g["status"], g["ran_on"]) for g in d["graphs"]] == [("kws_demo", "passed", "npu")]
        assert benched.returncode == 0, benched.stdout + benched.stderr
        bench = json.loads((tmp_path / "device-records" / f"bench-{serial.replace(':', '_')}-kws_demo.json")
                           .read_text())
        assert (bench["settings"]["npu_tool"], bench["settings"]["cpu_tool"]) == ("qnn-net-run",
                                                                                  "onnxruntime_perf_test -e cpu")
        assert bench["paths"]["npu"]["runs"] > 0 and bench["paths"]["cpu"]["runs"] > 0

        # the demo's own printed device verify line, with the SDK it names set up (here: the stand-in's)
        (line,) = [c.strip() for c in demo.stdout.splitlines() if c.strip().startswith("qnndeploy device verify")]
        assert '--qnn-sdk-root "$QNN_SDK_ROOT"' in line
        sdk = next(w for w in shlex.split(commands[2]) if w.endswith("/qairt"))
        (tmp_path / "again").mkdir()
        (tmp_path / "bare").mkdir()
        again = _as_printed(line.split("  #")[0], {**env, "QNN_SDK_ROOT": sdk}, tmp_path / "again")
        assert again.returncode == 0, again.stdout + again.stderr
        # and without a runner: pushed and checked, nothing run, never exit 0
        bare = _as_printed(f"qnndeploy device verify {shlex.quote(str(bundle))}", env, tmp_path / "bare")
        assert bare.returncode == EXIT_NOT_RUN, bare.stdout + bare.stderr
        assert "NOT RUN kws_demo" in bare.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.rstrip().endswith("stopped"), out

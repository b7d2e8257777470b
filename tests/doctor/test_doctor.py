"""`qnndeploy doctor`: this machine as it is, the stand-in QAIRT SDK, a fake python3.10, macOS refused."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess

import pytest

from qnndeploy import doctor as stage
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.qnn import htp
from tests.support import QAIRT_STANDIN as STANDIN
from tests.support.cli import run
from tests.support.host import require


@pytest.fixture
def private_adb(monkeypatch):
    """doctor runs `adb devices`, which starts an adb server: give it a private port and stop it afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(port))
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    yield port
    if shutil.which("adb"):
        subprocess.run(["adb", "-P", str(port), "kill-server"], capture_output=True, timeout=20, check=False)


def checks(result) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(result.stdout)["checks"]}


def test_this_machine_is_ready_and_optional_parts_say_what_to_do(private_adb):
    require(htp.available(), "onnxruntime-qnn")
    require(shutil.which("adb") is not None, "adb")
    result = run("doctor", "--json")
    assert result.exit_code == 0, result.output
    c = checks(result)
    assert c["os"]["status"] == "ok" and "x86_64" in c["os"]["detail"] and "CPU cores" in c["os"]["detail"]
    assert c["onnxruntime-qnn"]["status"] == "ok" and f"QAIRT {htp.qairt_version()}" in c["onnxruntime-qnn"]["detail"]
    assert c["qairt-sdk"]["status"] == "missing" and not c["qairt-sdk"]["required"]
    assert "--qnn-sdk-root" in c["qairt-sdk"]["fix"]
    assert c["check-linux-dependency"]["status"] == "missing"
    assert c["adb"]["status"] == "ok" and c["adb"]["detail"].startswith("Android Debug Bridge")
    assert c["devices"]["status"] == "warn" and "adb connect" in c["devices"]["fix"]  # a fresh private server
    assert set(c) >= {"python", "python3.10", "sdk-python-packages", "ndk-build"}
    text = run("doctor")
    assert text.exit_code == 0 and "ready to compile and validate" in text.output
    shown, _, optional = text.output.partition("optional, not here (")
    assert "missing" not in shown and "qairt-sdk" not in shown  # an optional part's absence is not a fault
    assert "qairt-sdk                no --qnn-sdk-root" in optional and "; only for --backend qairt" in optional


def test_standin_sdk_and_its_python(private_adb, tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3.10").write_text('#!/bin/sh\ncase "$*" in *numpy*) echo "1.26.4 1.17.0";; *) echo 3.10.14;; esac\n')
    (fake / "python3.10").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    c = checks(run("doctor", "--json", "--qnn-sdk-root", STANDIN))
    assert c["qairt-sdk"]["status"] == "ok" and "QAIRT 2.50.40.260831" in c["qairt-sdk"]["detail"]
    linux = c["check-linux-dependency"]
    assert linux["status"] == "ok" and "check-linux-dependency.sh" in linux["detail"]
    assert c["check-python-dependency"]["status"] == "ok"
    assert c["python3.10"]["status"] == "ok" and "3.10.14" in c["python3.10"]["detail"]
    assert c["sdk-python-packages"]["status"] == "ok"
    (fake / "python3.10").write_text('#!/bin/sh\ncase "$*" in *numpy*) echo "2.1.0 1.18.0";; *) echo 3.10.14;; esac\n')
    c = checks(run("doctor", "--json", "--qnn-sdk-root", STANDIN))
    assert c["sdk-python-packages"]["status"] == "warn" and "numpy<2" in c["sdk-python-packages"]["fix"]
    monkeypatch.setenv("QNN_SDK_ROOT", str(tmp_path / "nowhere"))
    c = checks(run("doctor", "--json"))
    assert c["qairt-sdk"]["status"] == "missing" and "no such folder" in c["qairt-sdk"]["detail"]


def test_macos_is_refused_with_the_docker_or_vm_advice(monkeypatch):
    monkeypatch.setattr(stage.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(stage.platform, "mac_ver", lambda: ("15.1", ("", "", ""), "arm64"))
    result = run("doctor")
    assert result.exit_code == 3
    assert result.output.startswith("refused  os")
    assert "Linux VM" in result.output and "Docker with --platform linux/amd64" in result.output
    report = json.loads(run("doctor", "--json").stdout)
    assert report["ok"] is False and [c["name"] for c in report["checks"]] == ["os"]


def test_missing_onnxruntime_qnn_is_required(private_adb, monkeypatch):
    def missing():
        raise QnnDeployError("onnxruntime-qnn is not installed: pip install onnxruntime-qnn")

    monkeypatch.setattr(htp, "qairt_version", missing)
    result = run("doctor")
    assert result.exit_code == 3
    assert "missing  onnxruntime-qnn" in result.output and "pip install onnxruntime-qnn" in result.output
    assert "not ready" in result.output


"""`qnndeploy doctor`: is this machine ready to compile, validate and talk to phones? One line per need.

Required: Linux x86-64 and onnxruntime-qnn (the HTP compiler and emulator). The QAIRT SDK, its Python 3.10
environment, the NDK, adb and a phone are optional: each is needed by one path only, and its line says which.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from qnndeploy.base.errors import QnnDeployError
from qnndeploy.compile.qairt import find_sdk
from qnndeploy.qnn import aihub, htp, toolchain

MAC_ADVICE = ("the QNN compilers and the HTP emulator run on Linux x86-64 only: use a Linux VM or cloud machine, "
              "or Docker with --platform linux/amd64 (works on Apple silicon, slowly, emulated)")
QAIRT_HOWTO = ("only for --backend qairt: download QAIRT from Qualcomm (softwarecenter.qualcomm.com, free account; "
               "check its licence), unzip, then `source qairt/<version>/bin/envsetup.sh` or pass --qnn-sdk-root")


class CheckStatus(StrEnum):
    """A check's verdict: the part is there and works, is not there, works with a caveat, or cannot work here."""

    OK = "ok"
    MISSING = "missing"
    WARN = "warn"
    REFUSED = "refused"


@dataclass
class DoctorCheck:
    name: str
    status: CheckStatus
    detail: str
    fix: str | None = None
    required: bool = False


@dataclass
class DoctorReport:
    ok: bool  # every required check passed
    checks: list[DoctorCheck]


def doctor(qnn_sdk_root: Path | None = None) -> DoctorReport:
    system, machine = platform.system(), platform.machine()
    if system == "Darwin":
        return DoctorReport(False, [DoctorCheck("os", CheckStatus.REFUSED, f"macOS {platform.mac_ver()[0]} ({machine})",
                                                MAC_ADVICE, True)])
    checks = [_os(system, machine), _python(), _onnxruntime_qnn(system, machine), _toolchains()]
    checks += _sdk(qnn_sdk_root)
    checks += _sdk_python()
    checks.append(_tool("ndk-build", "only for aarch64-android model libraries (--backend qairt): install the "
                        "Android NDK and put its folder on PATH"))
    checks += _adb()
    checks.append(_aihub())
    return DoctorReport(all(c.status == CheckStatus.OK for c in checks if c.required), checks)


def _os(system: str, machine: str) -> DoctorCheck:
    detail = f"{system} {platform.release()} {machine}, {os.cpu_count()} CPU cores"
    if system == "Linux" and machine in ("x86_64", "AMD64"):
        return DoctorCheck("os", CheckStatus.OK, detail, required=True)
    if system == "Windows":
        return DoctorCheck("os", CheckStatus.MISSING, detail,
                           "qnndeploy needs Linux x86-64: use WSL2 (Ubuntu) or a Linux machine", True)
    return DoctorCheck("os", CheckStatus.MISSING, detail, "onnxruntime-qnn's HTP compiler exists for Linux x86-64 "
                       "only: use an x86-64 Linux machine or VM", True)


def _python() -> DoctorCheck:
    return DoctorCheck("python", CheckStatus.OK, f"Python {platform.python_version()} runs qnndeploy", required=True)


def _onnxruntime_qnn(system: str, machine: str) -> DoctorCheck:
    try:
        ort_version = version("onnxruntime")
        qnn_version = version("onnxruntime-qnn")
        qairt = htp.qairt_version()
        htp._devices()
    except (PackageNotFoundError, QnnDeployError, ImportError, OSError) as e:
        fix = ("pip install onnxruntime-qnn (Linux x86-64 wheel: the HTP compiler and emulator)"
               if system == "Linux" and machine == "x86_64" else "needs Linux x86-64")
        return DoctorCheck("onnxruntime-qnn", CheckStatus.MISSING, str(e) or type(e).__name__, fix, True)
    return DoctorCheck("onnxruntime-qnn", CheckStatus.OK, f"onnxruntime-qnn {qnn_version} (QAIRT {qairt}) on "
                       f"onnxruntime {ort_version}: compiles context binaries and emulates the HTP", required=True)


def _toolchains() -> DoctorCheck:
    """The other QAIRT releases compile --qairt can use, and which are installed already."""
    others = [t for t in toolchain.known() if not toolchain.is_current(t)]
    have = [t.qairt for t in others if toolchain.installed(t)]
    rest = [t.qairt for t in others if t.qairt not in have]
    detail = (f"compile --qairt: {', '.join(have) or 'none'} installed in {toolchain.root()}"
              + (f"; {', '.join(rest)} install on first use (pip, about 100 MB each)" if rest else ""))
    return DoctorCheck("qairt-toolchains", CheckStatus.OK, detail)


def _sdk(root: Path | None) -> list[DoctorCheck]:

    try:
        sdk = find_sdk(root)
    except QnnDeployError as e:
        given = root or os.environ.get("QNN_SDK_ROOT")
        missing = "comes with the QAIRT SDK (see qairt-sdk)"
        detail = str(e) if given else "no --qnn-sdk-root and no QNN_SDK_ROOT"
        return [DoctorCheck("qairt-sdk", CheckStatus.MISSING, detail, QAIRT_HOWTO),
                DoctorCheck("check-linux-dependency", CheckStatus.MISSING, "no SDK", missing),
                DoctorCheck("check-python-dependency", CheckStatus.MISSING, "no SDK", missing)]
    checks = [DoctorCheck("qairt-sdk", CheckStatus.OK, f"QAIRT {sdk.version} at {sdk.root}")]
    for name, script, run in (("check-linux-dependency", "check-linux-dependency.sh", "sudo bash {}"),
                              ("check-python-dependency", "check-python-dependency", "python3 {}")):
        path = sdk.root / "bin" / script
        if path.is_file():
            checks.append(DoctorCheck(name, CheckStatus.OK, f"present; run once to install the SDK's dependencies: "
                                      f"{run.format(path)}"))
        else:
            checks.append(DoctorCheck(name, CheckStatus.MISSING, f"no {path}",
                                      "this SDK looks incomplete: unzip it again"))
    return checks


def _sdk_python() -> list[DoctorCheck]:
    """The SDK's converters want Python 3.10 with numpy<2 and onnx 1.17."""
    out = _output(["python3.10", "-c", "import sys; print(sys.version.split()[0])"])
    if out is None:
        return [DoctorCheck("python3.10", CheckStatus.MISSING, "no working python3.10 on PATH",
                            "only for --backend qairt: install Python 3.10 and make a venv for the SDK's converters "
                            "(python3.10 -m venv ~/qairt-venv)"),
                DoctorCheck("sdk-python-packages", CheckStatus.MISSING, "needs python3.10 first",
                            "python3.10 -m pip install 'numpy<2' onnx==1.17.0")]
    checks = [DoctorCheck("python3.10", CheckStatus.OK, f"Python {out} for the SDK's converters")]
    pkgs = _output(["python3.10", "-c", "import numpy, onnx; print(numpy.__version__, onnx.__version__)"])
    fix = "python3.10 -m pip install 'numpy<2' onnx==1.17.0"
    if pkgs is None:
        checks.append(DoctorCheck("sdk-python-packages", CheckStatus.MISSING,
                                  "numpy or onnx is not installed for python3.10", fix))
    else:
        numpy_version, onnx_version = pkgs.split()
        good = int(numpy_version.split(".")[0]) < 2 and onnx_version.startswith("1.17.")
        checks.append(DoctorCheck("sdk-python-packages", CheckStatus.OK if good else CheckStatus.WARN,
                                  f"numpy {numpy_version}, onnx {onnx_version} (the SDK wants numpy<2, onnx 1.17)",
                                  None if good else fix))
    return checks


def _tool(name: str, fix: str) -> DoctorCheck:
    path = shutil.which(name)
    if path:
        return DoctorCheck(name, CheckStatus.OK, path, None)
    return DoctorCheck(name, CheckStatus.MISSING, f"{name} is not on PATH", fix)


def _adb() -> list[DoctorCheck]:
    if shutil.which("adb") is None:
        return [DoctorCheck("adb", CheckStatus.MISSING, "adb is not on PATH",
                            "apt install adb, or Android SDK platform-tools"),
                DoctorCheck("devices", CheckStatus.MISSING, "needs adb", None)]
    version = (_output(["adb", "version"]) or "adb (version unknown)").splitlines()[0]
    checks = [DoctorCheck("adb", CheckStatus.OK, version)]
    listing = _output(["adb", "devices"], timeout=20)
    if listing is None:
        return [*checks, DoctorCheck("devices", CheckStatus.WARN, "`adb devices` failed or timed out",
                                     "adb kill-server; adb devices")]
    rows = [line.split("\t") for line in listing.splitlines()[1:] if "\t" in line]
    ready = [serial for serial, state in rows if state == "device"]
    others = [f"{serial} ({state})" for serial, state in rows if state != "device"]
    if not rows:
        return [*checks, DoctorCheck("devices", CheckStatus.WARN, "no phone connected",
                                     "plug in a phone with USB debugging on, or adb connect HOST:PORT")]
    described = [f"{serial}: {_output(['adb', '-s', serial, 'shell', 'getprop', 'ro.soc.model']) or '?'}"
                 for serial in ready]
    status = CheckStatus.OK if ready and not others else CheckStatus.WARN
    fix = "accept the USB debugging prompt on the phone, or reconnect it" if others else None
    return [*checks, DoctorCheck("devices", status, "; ".join(described + others), fix)]


def _aihub() -> DoctorCheck:
    """The qai-hub client and its configuration (whether a token is set, never the token)."""
    hub = aihub.status()
    if not hub.installed:
        return DoctorCheck("qai-hub", CheckStatus.MISSING, "the AI Hub client is not installed",
                           f"only for --backend aihub and device verify --aihub: {aihub.INSTALL}")
    if not hub.configured:
        return DoctorCheck("qai-hub", CheckStatus.MISSING,
                           f"qai-hub {hub.version}, not configured (no API token in {hub.config})",
                           f"only for --backend aihub and device verify --aihub: {aihub.CONFIGURE}")
    return DoctorCheck("qai-hub", CheckStatus.OK,
                       f"qai-hub {hub.version}, configured for {hub.api_url or 'the default server'} ({hub.config})")


def _output(cmd: list[str], timeout: float = 10) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None

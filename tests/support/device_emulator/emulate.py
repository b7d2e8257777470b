"""Try the phone side without a phone: an emulated phone (a STAND-IN, not a phone) for users, from a checkout.

    python -m tests.support.device_emulator [--preset sm8750] [--bundle BUNDLE] [--dir DIR]

starts, until Ctrl-C (or SIGTERM):
- the emulated phone of device.py on 127.0.0.1, speaking the real adb transport protocol;
- a private real adb server (`adb`, on a free port, its own HOME), `adb connect`ed to it, so nothing touches the
  user's own adb server or phones;
- in DIR, the host runners it can run: a stand-in QAIRT SDK (DIR/qairt: bin/aarch64-android/qnn-net-run, the
  qnn_net_run.py stand-in, which runs a context binary on this machine's HTP emulator of onnxruntime-qnn, and
  stand-in QNN libraries of this machine's QAIRT build) and DIR/bin/onnxruntime_perf_test (the ort_perf_test.py
  stand-in: the CPU path and the on-device compile, with this machine's onnxruntime);

and prints the `export` line and the exact qnndeploy command lines to paste into another shell (device list, info,
verify, bench), then "ready". What is a stand-in and what it imitates is printed first: the figures are this
machine's, never a phone's. The tests (tests/device/test_device_emulate.py) run the printed lines as printed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.elfgen import fake_sdk

from . import ort_perf_test, qnn_net_run, qnn_profile_viewer
from .device import PRESETS, EmulatedDevice

DEFAULT_BUNDLE = Path("qnndeploy-demo/bundle/kws-demo-1.0.0")  # where `qnndeploy demo` puts its bundle
ARCHES = ("v68", "v69", "v73", "v75", "v79", "v81")  # the stand-in SDK's Stub and Skel libraries
USER_PRESETS = ("sm8750", "sm8845", "android11", "sm8350", "exynos")  # "hostile" is for the tests of escaping


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def runners(folder: Path) -> tuple[Path, Path]:
    """(the stand-in QAIRT SDK, with its qnn-net-run and qnn-profile-viewer, the onnxruntime_perf_test stand-in) in
    `folder`."""
    sdk = fake_sdk(folder / "qairt", list(ARCHES))
    (sdk / "bin/aarch64-android").mkdir(parents=True, exist_ok=True)
    qnn_net_run.write_launcher(sdk / "bin/aarch64-android/qnn-net-run")
    qnn_profile_viewer.write_launcher(sdk / "bin/aarch64-android/qnn-profile-viewer")
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    return sdk, ort_perf_test.write_launcher(folder / "bin/onnxruntime_perf_test")


@contextmanager
def adb_server(home: Path) -> Iterator[dict[str, str]]:
    """A private adb server (its own port and HOME); yields its environment; killed at the end."""
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(_free_port()), "HOME": str(home)}
    env.pop("ANDROID_SERIAL", None)
    started = subprocess.run(["adb", "start-server"], env=env, capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL, check=False)
    if started.returncode != 0:
        raise SystemExit(f"error: adb start-server failed: {started.stderr.strip()}")
    try:
        yield env
    finally:
        subprocess.run(["adb", "kill-server"], env=env, capture_output=True, timeout=30, stdin=subprocess.DEVNULL,
                       check=False)


def _connect(env: dict[str, str], serial: str) -> None:
    subprocess.run(["adb", "connect", serial], env=env, capture_output=True, timeout=30, stdin=subprocess.DEVNULL,
                   check=False)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        listed = subprocess.run(["adb", "devices"], env=env, capture_output=True, text=True, timeout=30,
                                stdin=subprocess.DEVNULL, check=False).stdout
        if f"{serial}\tdevice" in listed:
            return
        time.sleep(0.1)
    raise SystemExit(f"error: the adb server does not list {serial} as a device")


def lines(port: int, serial: str, bundle: Path, sdk: Path, ort: Path) -> list[str]:
    """The command lines to paste, in order."""
    b, q = shlex.quote(str(bundle)), shlex.quote
    return [f"export ANDROID_ADB_SERVER_PORT={port} ANDROID_SERIAL={serial}",
            "qnndeploy device list",
            f"qnndeploy device info --bundle {b}",
            f"qnndeploy device verify {b} --qnn-sdk-root {q(str(sdk))} --ort-runner {q(str(ort))}",
            f"qnndeploy device bench {b} --qnn-sdk-root {q(str(sdk))} --ort-runner {q(str(ort))} --runs 10"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.device_emulator",
        description="An emulated phone (a STAND-IN) behind a private adb server, with host stand-ins of qnn-net-run "
                    "and onnxruntime_perf_test, to try device list, info, verify and bench without a phone.")
    parser.add_argument("--preset", choices=USER_PRESETS, default="sm8750",
                        help="the phone: sm8750 (a bundle target), sm8845 (no target, HTP v81: the on-device "
                             "compile), android11, sm8350, exynos (no Snapdragon: the CPU) [default: sm8750]")
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE,
                        help=f"the bundle the printed lines name [default: {DEFAULT_BUNDLE}, qnndeploy demo's]")
    parser.add_argument("--dir", type=Path, help="where the phone's files and the runners go [default: a temporary "
                                                 "folder, removed at the end]")
    args = parser.parse_args(argv)
    if shutil.which("adb") is None:
        print("error: adb is not installed (Debian: apt-get install adb): the emulated phone needs a real adb server",
              file=sys.stderr)
        sys.exit(3)
    with tempfile.TemporaryDirectory(prefix="qnndeploy-emulated-phone-") as tmp:
        folder = (args.dir or Path(tmp)).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        sdk, ort = runners(folder)
        phone = EmulatedDevice(args.preset, base=folder / "phone").start()
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):  # SIGINT too where it came in ignored (a `&` job of a script)
            signal.signal(sig, lambda *_: stop.set())
        try:
            with adb_server(folder / "adb-home") as env:
                _connect(env, phone.serial)
                props = PRESETS[args.preset]["props"]
                print(f"STAND-IN phone, not a phone: {props['ro.product.model']} (Android "
                      f"{props['ro.build.version.release']}, ro.soc.model {props.get('ro.soc.model', '-')}), the "
                      f"adb-protocol emulated device of tests/support/device_emulator at {phone.serial}, behind a "
                      f"private adb server on port {env['ANDROID_ADB_SERVER_PORT']}.")
                print("It imitates what qnndeploy sees of a phone over adb (properties, files, shell, push and pull); "
                      "its qnn-net-run and onnxruntime_perf_test are stand-ins that run on this machine: the NPU is "
                      "the host HTP emulator of onnxruntime-qnn, the CPU is this CPU, the battery and temperatures "
                      "follow a model of the load. Outputs are really computed; times and energy are not a phone's.")
                print(f"runners: {sdk} (stand-in QAIRT SDK: bin/aarch64-android/qnn-net-run, qnn-profile-viewer and "
                      f"QNN libraries), {ort} (stand-in onnxruntime_perf_test)")
                print("paste into another shell (the bundle: `qnndeploy demo` makes this one):")
                for line in lines(int(env["ANDROID_ADB_SERVER_PORT"]), phone.serial, args.bundle, sdk, ort):
                    print(f"  {line}")
                print("ready; Ctrl-C to stop", flush=True)
                while not stop.wait(0.5):
                    pass
                subprocess.run(["adb", "disconnect", phone.serial], env=env, capture_output=True, timeout=30,
                               stdin=subprocess.DEVNULL, check=False)
        finally:
            phone.stop()
    print("stopped", flush=True)

"""pytest fixtures: a private adb server (its own port and HOME) and emulated devices registered with it.

Use from a test module with `pytest_plugins = ["tests.support.device_emulator.fixtures"]`.
- adb_server (session): the real Debian adb server on a free port; killed at the end.
- emulated_devices (function): start(*presets, **options) -> list of EmulatedDevice, each `adb connect`ed and
  shown as "device"; ANDROID_ADB_SERVER_PORT points qnndeploy/adbutils at the private server for the test.
- device (function): one SM8750 phone.
- no_sdk (function): QNN_SDK_ROOT unset, so that a QAIRT SDK set up on this machine gives no verify or bench a
  runner the test did not give (`pytestmark = pytest.mark.usefixtures("no_sdk")`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.host import require

from .device import EmulatedDevice


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class AdbServer:
    port: int
    env: dict[str, str]

    def adb(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(["adb", *args], env=self.env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)

    def client(self):
        import adbutils

        return adbutils.AdbClient(host="127.0.0.1", port=self.port)

    def states(self) -> dict[str, str]:
        """serial -> state, as `adb devices` lists them."""
        out = self.adb("devices").stdout.splitlines()[1:]
        return dict(line.split("\t", 1) for line in out if "\t" in line)

    def wait_for(self, serial: str, state: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while (now := self.states().get(serial)) != state:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{serial} is {now!r}, not {state!r}, after {timeout} s")
            time.sleep(0.1)

    def connect(self, device: EmulatedDevice) -> None:
        """`adb connect`; a device that never answers is only registered (adb waits 10 s for it otherwise)."""
        if device.state == "offline":
            subprocess.Popen(["adb", "connect", device.serial], env=self.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        else:
            self.adb("connect", device.serial)
        self.wait_for(device.serial, device.state)

    def disconnect(self, device: EmulatedDevice) -> None:
        self.adb("disconnect", device.serial)


@pytest.fixture(scope="session")
def adb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbServer]:
    require(shutil.which("adb") is not None, "adb (Debian package adb)")
    home = tmp_path_factory.mktemp("adb-home")  # the server's own ~/.android (keys), not the user's
    env = {**os.environ, "ANDROID_ADB_SERVER_PORT": str(_free_port()), "HOME": str(home)}
    env.pop("ANDROID_SERIAL", None)
    server = AdbServer(int(env["ANDROID_ADB_SERVER_PORT"]), env)
    started = server.adb("start-server")
    assert started.returncode == 0, started.stderr
    yield server
    server.adb("kill-server")


@pytest.fixture
def emulated_devices(adb_server: AdbServer, tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., list[EmulatedDevice]]]:
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(adb_server.port))
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    started: list[EmulatedDevice] = []

    def start(*presets: str, **options) -> list[EmulatedDevice]:
        devices = []
        for preset in presets or ("sm8750",):
            device = EmulatedDevice(preset, base=tmp_path / f"device{len(started)}", **options).start()
            started.append(device)
            adb_server.connect(device)
            devices.append(device)
        return devices

    yield start
    for device in started:
        adb_server.disconnect(device)
        device.stop()


@pytest.fixture
def device(emulated_devices: Callable[..., list[EmulatedDevice]]) -> EmulatedDevice:
    return emulated_devices("sm8750")[0]


@pytest.fixture
def no_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)

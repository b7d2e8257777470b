"""An emulated Android device on a TCP port of 127.0.0.1: what a phone's adbd looks like to `adb connect`."""

from __future__ import annotations

import signal
import socket
import tempfile
import threading
import time
from pathlib import Path

from .sandbox import Sandbox, kill_group
from .services import shell_service, sync_service
from .transport import Connection

# No features: the adb server then uses exactly what is implemented here (shell v1, sync v1 requests).
FEATURES: tuple[str, ...] = ()

_DSP_DIRS = ("/vendor/dsp/cdsp", "/vendor/lib/rfsa/adsp")
_ELF_STUB = b"\x7fELF\x02\x01\x01" + bytes(57)  # enough of an aarch64 ELF header to be a file, not a library

def _phone(name: str, label: str, release: str, sdk: str, kernel_soc_id: int, *, soc_model: str | None = None,
           manufacturer: str | None = "QTI", platform: str | None = None, dsp: bool = True) -> dict:
    """A preset: an arm64 phone named emu_NAME with these SoC properties (None: not set) and kernel soc_id."""
    soc = {"ro.soc.model": soc_model, "ro.soc.manufacturer": manufacturer if soc_model else None,
           "ro.board.platform": platform}
    props = {**{k: v for k, v in soc.items() if v is not None},
             "ro.build.version.release": release, "ro.build.version.sdk": sdk, "ro.product.cpu.abi": "arm64-v8a",
             "ro.product.model": f"Emulated {label} Phone", "ro.product.manufacturer": "qnndeploy",
             "ro.product.name": f"emu_{name}", "ro.product.device": f"emu_{name}"}
    files: dict[str, bytes | str] = {"/sys/devices/soc0/soc_id": f"{kernel_soc_id}\n"}
    if dsp:
        files["/vendor/lib64/libcdsprpc.so"] = _ELF_STUB
    return {"props": props, "files": files, "dirs": _DSP_DIRS if dsp else ()}


PRESETS: dict[str, dict] = {
    # A Snapdragon 8 Elite phone on Android 15.
    "sm8750": _phone("sm8750", "SM8750", "15", "35", 618, soc_model="SM8750", platform="sun"),
    # A Snapdragon 888 phone on Android 11: no ro.soc.model yet (API 31+), only the board codename.
    "android11": _phone("a11", "Android 11", "11", "30", 439, platform="lahaina"),
    # A phone of a SoC no bundle here has a target for (SM8845, HTP v81): the on-device compile path. ro.soc.model
    # and kernel soc_id 685 as reported in google-ai-edge/LiteRT#7516 (the catalog's source for them); no board
    # codename (the catalog has none for it).
    "sm8845": _phone("sm8845", "SM8845", "16", "36", 685, soc_model="SM8845"),
    # A Snapdragon 888 phone on Android 12: HTP v68, no fp16 (no on-device compile of an fp16 bundle). Kernel
    # soc_id 415, one of the catalog's for SM8350.
    "sm8350": _phone("sm8350", "SM8350", "12", "31", 415, soc_model="SM8350", platform="lahaina"),
    # A phone whose SoC is in no bundle (Exynos): the app must take the CPU path.
    "exynos": _phone("exynos", "Exynos", "14", "34", 0, soc_model="s5e9945", manufacturer="Samsung",
                     platform="s5e9945", dsp=False),
}
# A hostile phone: terminal escape sequences in its properties and in a library's file name, and an API level of
# 5,000 digits (Python's int() refuses more than 4,300). What a buggy or malicious device can send.
PRESETS["hostile"] = _phone("hostile", "Hostile", "15\x1b[31mred", "9" * 5000, 618,
                            soc_model="SM8750\x1b[2J", manufacturer="QTI\x1b]0;pwned\x07", platform="sun")
PRESETS["hostile"]["props"].update({"ro.product.model": "Emulated \x1b]0;title\x07Phone\x1b[2J",
                                    "ro.product.manufacturer": "qnndeploy\x9b31m"})
PRESETS["hostile"]["files"]["/vendor/lib64/libQnn\x1b[2J\x1b]0;x\x07.so"] = b"vendor copy"


class EmulatedDevice:
    """A device with a sandboxed file system, configurable props and battery, and failure injections.

    state: "device" (answers CNXN), "unauthorized" (asks for an RSA key it never accepts) or "offline" (never
    answers), as `adb devices` then shows them.

    Hostile behaviours, for the tests of qnndeploy's deadlines and caps (each a stand-in for what a broken or
    malicious phone can do; the transport and adb server in between stay real):
    - misbehave(tool, how): getprop, sha256sum, getconf or dumpsys sleeps for ever, floods (100 MB) or trickles
      (a byte a second); adbd's hang-up on a closed stream ends it.
    - stall_during_send(after_bytes): the sync receiver stops reading mid-push and never answers again; the
      partial file stays where it was being written.
    - drop_during_send(after_bytes): the connection is cut mid-push.
    - throttle_send(bytes_per_second): a slow phone, which still makes progress.
    - preset "hostile": escape sequences in property values and a file name, a 5,000-digit API level.
    """

    def __init__(self, preset: str = "sm8750", props: dict[str, str] | None = None,
                 files: dict[str, bytes | str] | None = None, state: str = "device", page_size: int = 4096,
                 base: Path | None = None) -> None:
        config = PRESETS[preset]
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if base is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="emu-device-")
            base = Path(self._tmp.name)
        self.sandbox = Sandbox(base)
        self.root = self.sandbox.root
        self.sandbox.set_props({**config["props"], **(props or {})})
        self.sandbox.set_page_size(page_size)
        for folder in config["dirs"]:
            self.sandbox.host_path(folder).mkdir(parents=True, exist_ok=True)
        for path, data in {**config["files"], **(files or {})}.items():
            self.sandbox.write(path, data)
        self.state = state
        self.port = 0
        self._drop_after: int | None = None
        self._stall_after: int | None = None
        self._bytes_per_second: float | None = None
        self._groups: set[int] = set()
        self._connections: list[Connection] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None

    @property
    def serial(self) -> str:
        """The serial the adb server gives a device added with `adb connect`."""
        return f"127.0.0.1:{self.port}"

    @property
    def props(self) -> dict[str, str]:
        return self.sandbox.props

    def set_prop(self, key: str, value: str | None) -> None:
        props = dict(self.sandbox.props)
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
        self.sandbox.set_props(props)

    def set_battery(self, **values: object) -> None:
        self.sandbox.set_battery(**values)

    def set_screen(self, on: bool) -> None:
        """The screen state `dumpsys power` reports (off by default: a phone set up for a bench)."""
        self.sandbox.set_screen(on)

    def write_file(self, device_path: str, data: bytes | str, mode: int = 0o644) -> Path:
        return self.sandbox.write(device_path, data, mode)

    def host_path(self, device_path: str) -> Path:
        return self.sandbox.host_path(device_path)

    def drop_during_send(self, after_bytes: int) -> None:
        """Failure injection, once: the first sync SEND that has received after_bytes of file data cuts the TCP
        connection (the adb server then reconnects by itself, as it does for `adb connect` devices)."""
        self._drop_after = after_bytes

    def stall_during_send(self, after_bytes: int) -> None:
        """Failure injection, once: the first sync SEND that has received after_bytes of file data writes them and
        stops reading (a hung adbd): the host's writes back up until it gives up and closes the stream."""
        self._stall_after = after_bytes

    def throttle_send(self, bytes_per_second: float | None) -> None:
        """A slow phone: the sync receiver takes at most bytes_per_second of file data (None: as fast as it can)."""
        self._bytes_per_second = bytes_per_second

    def misbehave(self, tool: str, how: str | None) -> None:
        """Make `tool` (getprop, sha256sum, getconf, dumpsys) "sleep", "flood" or "trickle"; None: behave again."""
        self.sandbox.set_misbehaviour(tool, how)

    def drop_connections(self) -> None:
        for conn in list(self._connections):
            conn.drop()

    # --- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> EmulatedDevice:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True, name=f"emu-{self.port}").start()
        return self

    def stop(self) -> None:
        """Close the port and every connection, and kill every process started on the device."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self.drop_connections()
        for pgid in list(self._groups):
            kill_group(pgid, signal.SIGKILL)
        if self._tmp is not None:
            self._tmp.cleanup()

    def _accept(self) -> None:
        services = {"shell:": shell_service(self.sandbox, self._groups.add),
                    "exec:": shell_service(self.sandbox, self._groups.add),
                    "sync:": sync_service(self.sandbox, self._drop_point, self._stall_point, self._pace)}
        while (listener := self._listener) is not None:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(sock, self._banner(), self.state, services)
            self._connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        conn.run()
        self._connections.remove(conn)

    def _drop_point(self, received: int) -> bool:
        with self._lock:
            if self._drop_after is None or received < self._drop_after:
                return False
            self._drop_after = None
            return True

    def _stall_point(self, received: int, length: int) -> int | None:
        """How much of the DATA block at `received` is written before the receiver stops; None: it goes on."""
        with self._lock:
            if self._stall_after is None or received + length < self._stall_after:
                return None
            kept, self._stall_after = self._stall_after - received, None
            return kept

    def _pace(self, length: int) -> None:
        if self._bytes_per_second:
            time.sleep(length / self._bytes_per_second)

    def _banner(self) -> str:
        p = self.sandbox.props
        fields = [f"ro.product.{k}={p.get('ro.product.' + k, '')}" for k in ("name", "model", "device")]
        if FEATURES:
            fields.append("features=" + ",".join(FEATURES))
        return "device::" + ";".join(fields)

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

PRESETS: dict[str, dict] = {
    # A Snapdragon 8 Elite phone on Android 15.
    "sm8750": {
        "props": {"ro.soc.model": "SM8750", "ro.soc.manufacturer": "QTI", "ro.board.platform": "sun",
                  "ro.build.version.release": "15", "ro.build.version.sdk": "35",
                  "ro.product.cpu.abi": "arm64-v8a", "ro.product.model": "Emulated SM8750 Phone",
                  "ro.product.manufacturer": "qnndeploy", "ro.product.name": "emu_sm8750",
                  "ro.product.device": "emu_sm8750"},
        "files": {"/sys/devices/soc0/soc_id": "618\n", "/vendor/lib64/libcdsprpc.so": _ELF_STUB},
        "dirs": _DSP_DIRS,
    },
    # A Snapdragon 888 phone on Android 11: no ro.soc.model yet (API 31+), only the board codename.
    "android11": {
        "props": {"ro.board.platform": "lahaina", "ro.build.version.release": "11", "ro.build.version.sdk": "30",
                  "ro.product.cpu.abi": "arm64-v8a", "ro.product.model": "Emulated Android 11 Phone",
                  "ro.product.manufacturer": "qnndeploy", "ro.product.name": "emu_a11",
                  "ro.product.device": "emu_a11"},
        "files": {"/sys/devices/soc0/soc_id": "439\n", "/vendor/lib64/libcdsprpc.so": _ELF_STUB},
        "dirs": _DSP_DIRS,
    },
    # A hostile phone: terminal escape sequences in its properties and in a library's file name, and an API
    # level of 5,000 digits (Python's int() refuses more than 4,300). What a buggy or malicious device can send.
    "hostile": {
        "props": {"ro.soc.model": "SM8750\x1b[2J", "ro.soc.manufacturer": "QTI\x1b]0;pwned\x07",
                  "ro.board.platform": "sun", "ro.build.version.release": "15\x1b[31mred",
                  "ro.build.version.sdk": "9" * 5000, "ro.product.cpu.abi": "arm64-v8a",
                  "ro.product.model": "Emulated \x1b]0;title\x07Phone\x1b[2J",
                  "ro.product.manufacturer": "qnndeploy\x9b31m", "ro.product.name": "emu_hostile",
                  "ro.product.device": "emu_hostile"},
        "files": {"/sys/devices/soc0/soc_id": "618\n", "/vendor/lib64/libcdsprpc.so": _ELF_STUB,
                  "/vendor/lib64/libQnn\x1b[2J\x1b]0;x\x07.so": b"vendor copy"},
        "dirs": _DSP_DIRS,
    },
    # A phone of a SoC no bundle here has a target for (SM8845, HTP v81): the on-device compile path. ro.soc.model
    # and kernel soc_id 685 as reported in google-ai-edge/LiteRT#7516 (the catalog's source for them); no board
    # codename (the catalog has none for it).
    "sm8845": {
        "props": {"ro.soc.model": "SM8845", "ro.soc.manufacturer": "QTI",
                  "ro.build.version.release": "16", "ro.build.version.sdk": "36",
                  "ro.product.cpu.abi": "arm64-v8a", "ro.product.model": "Emulated SM8845 Phone",
                  "ro.product.manufacturer": "qnndeploy", "ro.product.name": "emu_sm8845",
                  "ro.product.device": "emu_sm8845"},
        "files": {"/sys/devices/soc0/soc_id": "685\n", "/vendor/lib64/libcdsprpc.so": _ELF_STUB},
        "dirs": _DSP_DIRS,
    },
    # A Snapdragon 888 phone on Android 12: HTP v68, no fp16 (no on-device compile of an fp16 bundle).
    "sm8350": {
        "props": {"ro.soc.model": "SM8350", "ro.soc.manufacturer": "QTI", "ro.board.platform": "lahaina",
                  "ro.build.version.release": "12", "ro.build.version.sdk": "31",
                  "ro.product.cpu.abi": "arm64-v8a", "ro.product.model": "Emulated SM8350 Phone",
                  "ro.product.manufacturer": "qnndeploy", "ro.product.name": "emu_sm8350",
                  "ro.product.device": "emu_sm8350"},
        "files": {"/sys/devices/soc0/soc_id": "415\n", "/vendor/lib64/libcdsprpc.so": _ELF_STUB},
        "dirs": _DSP_DIRS,
    },
    # A phone whose SoC is in no bundle (Exynos): the app must take the CPU path.
    "exynos": {
        "props": {"ro.soc.model": "s5e9945", "ro.soc.manufacturer": "Samsung", "ro.board.platform": "s5e9945",
                  "ro.build.version.release": "14", "ro.build.version.sdk": "34",
                  "ro.product.cpu.abi": "arm64-v8a", "ro.product.model": "Emulated Exynos Phone",
                  "ro.product.manufacturer": "qnndeploy", "ro.product.name": "emu_exynos",
                  "ro.product.device": "emu_exynos"},
        "files": {"/sys/devices/soc0/soc_id": "0\n"},
        "dirs": (),
    },
}


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

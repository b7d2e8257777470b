"""Phones through the standard adb server (adbutils): choose a device, read props, run shell commands with their
exit status, move files, and push a folder incrementally and atomically (what `device verify` builds on).

Every adb failure becomes a QnnDeployError that says what to do: no device, several devices without -s,
unauthorized, offline, or a connection lost in the middle of a transfer.
"""

from __future__ import annotations

import os
import posixpath
import re
import secrets
import shlex
import socket
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnndeploy.errors import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_MISSING_TOOL,
    QnnDeployError,
    first_line,
)
from qnndeploy.fileio import staging_file

Progress = Callable[[int], None]

_STATE_ADVICE = {
    "unauthorized": "unlock the phone and accept the 'Allow USB debugging' prompt, then run again",
    "offline": "the phone does not answer: replug it (or `adb reconnect`), then run again",
    "no permissions": "adb may not open the USB device: check the udev rules (see `adb devices`)",
}
_PROP_LINE = re.compile(r"^\[(.+?)\]: \[(.*)\]$")
SYNC_DATA_MAX = 64 * 1024  # the largest DATA block of adb's sync protocol


@dataclass(frozen=True)
class DeviceEntry:
    """One line of `adb devices -l`."""
    serial: str
    state: str
    model: str = ""
    product: str = ""


@dataclass(frozen=True)
class ShellResult:
    code: int
    output: str  # stdout and stderr together: adb's shell v1 carries them on one stream


@dataclass(frozen=True)
class LocalFile:
    path: Path
    sha256: str


@dataclass
class PushReport:
    """What push_folder did: files sent (with their bytes), files already right on the phone, leftovers removed."""
    remote_dir: str
    sent: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    bytes_sent: int = 0


def _check_server_port() -> None:
    """adbutils reads ANDROID_ADB_SERVER_PORT when it is imported and fails with a traceback on a bad value."""
    port = os.environ.get("ANDROID_ADB_SERVER_PORT", "5037")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise QnnDeployError(f"ANDROID_ADB_SERVER_PORT={port!r} is not a port number: unset it or set it to the "
                             "adb server's port (5037 by default)")


def _client() -> Any:  # adbutils.AdbClient (adbutils ships no types)
    _check_server_port()
    import adbutils

    return adbutils.AdbClient()  # ANDROID_ADB_SERVER_HOST / _PORT, like the adb command


def _server_error(e: Exception) -> QnnDeployError:
    port = os.environ.get("ANDROID_ADB_SERVER_PORT", "5037")
    return QnnDeployError(f"cannot use the adb server on port {port} ({str(e) or type(e).__name__}): install adb "
                          "(Debian/Ubuntu: apt install adb) or start it with `adb start-server`", EXIT_MISSING_TOOL)


def list_devices() -> list[DeviceEntry]:
    """Every device the adb server knows, in any state."""
    _check_server_port()
    from adbutils.errors import AdbError

    try:
        infos = _client().list(extended=True)
    except (AdbError, OSError) as e:
        raise _server_error(e) from None
    return [DeviceEntry(i.serial, i.state, i.tags.get("model", "").replace("_", " "), i.tags.get("product", ""))
            for i in infos]


def connect(serial: str | None = None) -> Device:
    """The device to work on: -s SERIAL (or $ANDROID_SERIAL), else the only one connected."""
    serial = serial or os.environ.get("ANDROID_SERIAL") or None
    entries = list_devices()
    if serial:
        entry = next((e for e in entries if e.serial == serial), None)
        if entry is None:
            listed = ", ".join(e.serial for e in entries) or "none"
            raise QnnDeployError(f"no device {serial} (connected: {listed}); check `adb devices`", EXIT_BAD_INPUT)
    elif not entries:
        raise QnnDeployError("no device connected: plug in a phone with USB debugging on (or `adb connect "
                             "HOST:PORT`) and check `adb devices`", EXIT_BAD_INPUT)
    elif len(entries) > 1:
        listed = ", ".join(f"{e.serial} ({e.state})" for e in entries)
        raise QnnDeployError(f"{len(entries)} devices connected: {listed}; choose one with -s SERIAL",
                             EXIT_BAD_INPUT)
    else:
        entry = entries[0]
    if entry.state != "device":
        advice = _STATE_ADVICE.get(entry.state, "check `adb devices`")
        raise QnnDeployError(f"{entry.serial} is {entry.state}: {advice}", EXIT_BAD_INPUT)
    return Device(entry.serial)


class Device:
    """One ready device; methods raise QnnDeployError when the connection is lost."""

    def __init__(self, serial: str) -> None:
        self.serial = serial
        self._dev = _client().device(serial)

    def _lost(self, doing: str, e: Exception) -> QnnDeployError:
        return QnnDeployError(f"lost the connection to {self.serial} while {doing} ({first_line(e)}): reconnect the "
                              "phone, check `adb devices` and run the command again", EXIT_CHECK_FAILED)

    # --- shell -----------------------------------------------------------------------------------------------
    def run(self, command: str, check: bool = False) -> ShellResult:
        """Run a shell command line; the exit status travels back behind a marker, as shell v1 has none."""
        from adbutils.errors import AdbError

        marker = f"QNNDEPLOY-EXIT-{secrets.token_hex(4)}:"
        try:
            raw = self._dev.shell(f"( {command}\n); echo {marker}$?", encoding=None, rstrip=False)
        except (AdbError, OSError, EOFError) as e:
            raise self._lost(f"running `{command[:60]}`", e) from None
        out = raw.decode("utf-8", "replace")
        head, sep, tail = out.rpartition(marker)
        if not sep or not tail.strip().isdigit():
            raise self._lost(f"running `{command[:60]}`", EOFError("the output ended early"))
        result = ShellResult(int(tail.strip()), head)
        if check and result.code != 0:
            raise QnnDeployError(f"`{command[:80]}` failed on {self.serial} (exit {result.code}): "
                                 f"{head.strip()[-300:] or 'no output'}", EXIT_CHECK_FAILED)
        return result

    def getprops(self) -> dict[str, str]:
        """All properties in one round trip."""
        props = {}
        for line in self.run("getprop").output.splitlines():
            if m := _PROP_LINE.match(line.strip()):
                props[m.group(1)] = m.group(2)
        return props

    def read_text(self, path: str) -> str | None:
        """A small text file (/sys, /proc), or None when it cannot be read."""
        r = self.run(f"cat {shlex.quote(path)} 2>/dev/null")
        return r.output if r.code == 0 else None

    # --- files -----------------------------------------------------------------------------------------------
    def push(self, local: Path, remote: str, mode: int = 0o644) -> int:
        """Send one file; adbd creates the remote parent folders and removes a half-received file."""
        return self.push_files([(local, remote)], mode)

    def push_files(self, items: list[tuple[Path, str]], mode: int = 0o644, progress: Progress | None = None) -> int:
        """Send several files over ONE sync session, as `adb push` of a folder does; the bytes sent.

        adbutils' push opens two connections per file (a STAT, then the SEND), each with a fixed 10 ms pause on
        close, and sends 4 KiB blocks where adbd takes 64 KiB: for a bundle of small files that set-up, not the
        data, was most of the time.
        """
        from adbutils.errors import AdbError

        def read(c: Any, n: int) -> bytes:  # c: adbutils' connection (untyped)
            data: bytes = c.read(n)
            if len(data) < n:
                raise EOFError("the sync session ended early")
            return data

        total, local, sent = 0, None, 0
        try:
            with self._dev.open_transport(timeout=None) as c:
                # The small DONE after the data would otherwise wait for a delayed ACK (Nagle), ~40 ms a file.
                c.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                c.send_command("sync:")
                c.check_okay()
                for local, remote in items:
                    sent = 0
                    if not local.is_file():
                        raise QnnDeployError(f"{local} is not a file: nothing to push", EXIT_BAD_INPUT)
                    spec = f"{remote},{0o100000 | mode}".encode()
                    c.conn.sendall(b"SEND" + struct.pack("<I", len(spec)) + spec)
                    with local.open("rb") as f:
                        while data := f.read(SYNC_DATA_MAX):
                            c.conn.sendall(b"DATA" + struct.pack("<I", len(data)) + data)
                            sent += len(data)
                            if progress is not None:
                                progress(len(data))
                    c.conn.sendall(b"DONE" + struct.pack("<I", int(time.time())))
                    reply, length = read(c, 4), struct.unpack("<I", read(c, 4))[0]
                    if reply == b"FAIL":
                        why = read(c, length).decode("utf-8", "replace")
                        if "directory" in why.lower():  # adbd: "couldn't create file: Is a directory"
                            raise QnnDeployError(f"{self.serial} refused to write {remote} ({why}): it is a folder, "
                                                 "push to a file path", EXIT_BAD_INPUT)
                        raise QnnDeployError(f"{self.serial} refused to write {remote} ({why}): is the folder "
                                             "read-only or the storage full?", EXIT_CHECK_FAILED)
                    if reply != b"OKAY":
                        raise EOFError(f"unexpected sync reply {reply!r}")
                    total += sent
                c.conn.sendall(b"QUIT" + struct.pack("<I", 0))
        except (AdbError, OSError, EOFError) as e:
            doing = "pushing"
            if local is not None:
                size = local.stat().st_size
                doing = f"pushing {local.name} ({sent} of {size} bytes sent{', not confirmed' if sent == size else ''})"
            raise self._lost(doing, e) from None
        return total

    def pull(self, remote: str, local: Path) -> int:
        """Fetch one file; the local file appears only when complete."""
        from adbutils.errors import AdbError

        with staging_file(local, force=True) as tmp:
            try:
                return int(self._dev.sync.pull_file(remote, tmp))
            except AdbError as e:
                if len(e.args) == 2 and e.args[1] == remote:  # the device's FAIL message, e.g. no such file
                    raise QnnDeployError(f"cannot pull {remote} from {self.serial}: {e.args[0]}",
                                         EXIT_CHECK_FAILED) from None
                raise self._lost(f"pulling {remote}", e) from None
            except (OSError, EOFError) as e:
                raise self._lost(f"pulling {remote}", e) from None

    def sha256s(self, remote_dir: str) -> dict[str, str] | None:
        """sha256 of every file under remote_dir by relative path, or None when the folder does not exist."""
        r = self.run(f"cd {shlex.quote(remote_dir)} 2>/dev/null || exit 7; find . -type f -exec sha256sum {{}} +")
        if r.code == 7:
            return None
        if r.code != 0:
            raise QnnDeployError(f"sha256sum failed on {self.serial} in {remote_dir}: {r.output.strip()[-200:]}",
                                 EXIT_CHECK_FAILED)
        hashes = {}
        for line in r.output.splitlines():
            digest, _, name = line.partition("  ")
            if len(digest) == 64 and name.startswith("./"):
                hashes[name[2:]] = digest
        return hashes

    def push_folder(self, files: Mapping[str, LocalFile], remote_dir: str,
                    progress: Progress | None = None) -> PushReport:
        """Make remote_dir hold exactly `files` (relative POSIX path -> local file and its sha256).

        Incremental: only files whose sha256 on the phone differs are sent. Atomic: the files go to
        remote_dir.staging (a copy of remote_dir to start with), are checked there, and the staging folder is
        renamed into place at the end. A run cut short leaves the staging folder, so the next run resumes it.
        """
        remote_dir = remote_dir.rstrip("/")
        staging, old = remote_dir + ".staging", remote_dir + ".old"
        want = {rel: f.sha256 for rel, f in files.items()}
        report = PushReport(remote_dir)
        have = self.sha256s(staging)
        if have is None:
            current = self.sha256s(remote_dir)
            if current == want:
                report.unchanged = sorted(want)
                return report
            q_dir, q_stage = shlex.quote(remote_dir), shlex.quote(staging)
            start = f"cp -a {q_dir} {q_stage}" if current is not None else f"mkdir -p {q_stage}"
            self.run(f"mkdir -p {shlex.quote(posixpath.dirname(staging))} && {start}", check=True)
            have = current or {}
        report.removed = sorted(set(have) - set(want))
        if report.removed:
            self.run("rm -f " + " ".join(shlex.quote(f"{staging}/{rel}") for rel in report.removed), check=True)
        todo = [rel for rel in sorted(want) if have.get(rel) != want[rel]]
        report.unchanged = [rel for rel in sorted(want) if have.get(rel) == want[rel]]
        report.bytes_sent = self.push_files([(files[rel].path, f"{staging}/{rel}") for rel in todo], progress=progress)
        report.sent = todo
        final = self.sha256s(staging) or {}
        wrong = sorted(rel for rel in want if final.get(rel) != want[rel])
        if wrong:
            raise QnnDeployError(f"{len(wrong)} file(s) differ on {self.serial} after the push ({wrong[0]} ...): "
                                 "is the phone's storage full? run again to resend them", EXIT_CHECK_FAILED)
        q = {k: shlex.quote(v) for k, v in (("d", remote_dir), ("s", staging), ("o", old))}
        self.run(f"rm -rf {q['o']} && {{ test ! -e {q['d']} || mv {q['d']} {q['o']}; }} && mv {q['s']} {q['d']} "
                 f"&& rm -rf {q['o']}", check=True)
        return report


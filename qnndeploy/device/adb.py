"""Phones through the standard adb server (adbutils): choose a device, read props, run shell commands with their
exit status, move files, and push a folder incrementally and atomically (what `device verify` builds on).

Every adb failure becomes a QnnDeployError that says what to do: no device, several devices without -s,
unauthorized, offline, or a connection lost in the middle of a transfer.

Nothing a phone sends is trusted to end: every call has a deadline and a byte cap (Limit; docs/command-details.md,
"Deadlines and caps"). A shell command must end within its deadline and send at most its cap; a push or pull must
move data at least every STALL_S seconds (a 1 GB binary takes as long as it takes, a phone that stops reading is
abandoned); past either, a one-line error names the phone, the step and what happened. `timeout` (the commands'
--timeout) replaces every deadline; the caps stay.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import secrets
import shlex
import socket
import struct
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnndeploy.base import numbers
from qnndeploy.base.errors import BadInput, CheckFailed, MissingTool, QnnDeployError, first_line
from qnndeploy.base.fileio import ByteProgress, open_regular, staging_file

_STATE_ADVICE = {
    "unauthorized": "unlock the phone and accept the 'Allow USB debugging' prompt, then run again",
    "offline": "the phone does not answer: replug it (or `adb reconnect`), then run again",
    "no permissions": "adb may not open the USB device: check the udev rules (see `adb devices`)",
}
_PROP_LINE = re.compile(r"^\[(.+?)\]: \[(.*)\]$")
SYNC_DATA_MAX = 64 * 1024  # the largest DATA block of adb's sync protocol
API_LEVEL = "ro.build.version.sdk"
_API_DIGITS = re.compile(r"[0-9]{1,4}")  # Build.VERSION.SDK_INT; int() refuses over 4,300 digits, isdigit() takes '²'
MiB = 1024 * 1024


@dataclass(frozen=True)
class Limit:
    """How long one adb call may take (seconds) and how much it may send back (max_bytes)."""
    seconds: float
    max_bytes: int


# The defaults (docs/command-details.md, "Deadlines and caps"); --timeout replaces every deadline, never a cap.
SERVER_S = 30.0  # one request to the adb server on this machine (the device list, opening a transport)
COMMAND = Limit(30, MiB)  # a short shell command: getprop, getconf, test, find in /vendor, a /sys or /proc read
HASHING = Limit(300, 4 * MiB)  # sha256sum of every file of a bundle folder on the phone
FILES = Limit(300, MiB)  # cp -a, mv, rm -rf of a bundle folder on the phone
RUN = Limit(1800, 16 * MiB)  # one qnn-net-run: a context load and N inferences
STALL_S = 30.0  # a push or pull that moves no data for this long is abandoned (no total deadline)
PULL_MAX = 1024 * MiB  # the largest file a pull takes, unless the caller says how large it may be; within FILES' time


def parse_int(text: str | None) -> int | None:
    """A number a phone printed, or None: ASCII digits only, at most 20 ('²' and 5,000-digit strings are not); the
    bounded reader's (base/numbers.py)."""
    return numbers.integer(text)


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n:,} bytes"


@dataclass(frozen=True)
class Upload:
    """One file to push: its local path, where it goes, and (when known) the sha256 the bytes sent must have."""
    local: Path
    remote: str
    sha256: str | None = None
    name: str = ""  # in messages (e.g. the bundle path npu/SM8750/det.bin); default: the local file's name

    @property
    def label(self) -> str:
        return self.name or self.local.name


class _Changed(Exception):
    """The file hashed to something else while it was being sent."""

    def __init__(self, digest: str) -> None:
        super().__init__(digest)
        self.digest = digest


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
    if not re.fullmatch(r"[0-9]{1,5}", port) or not 0 < int(port) < 65536:  # isdigit() would take '²'
        raise QnnDeployError(f"ANDROID_ADB_SERVER_PORT={port!r} is not a port number: unset it or set it to the "
                             "adb server's port (5037 by default)")


def _client(timeout: float | None = None) -> Any:  # adbutils.AdbClient (adbutils ships no types)
    _check_server_port()
    import adbutils

    # ANDROID_ADB_SERVER_HOST / _PORT, like the adb command; every read from the server bounded
    return adbutils.AdbClient(socket_timeout=timeout or SERVER_S)


def _server_error(e: Exception) -> QnnDeployError:
    port = os.environ.get("ANDROID_ADB_SERVER_PORT", "5037")
    return MissingTool(f"cannot use the adb server on port {port} ({str(e) or type(e).__name__}): install adb "
                       "(Debian/Ubuntu: apt install adb) or start it with `adb start-server`")


def list_devices(timeout: float | None = None) -> list[DeviceEntry]:
    """Every device the adb server knows, in any state."""
    _check_server_port()
    from adbutils.errors import AdbError

    try:
        infos = _client(timeout).list(extended=True)
    except (AdbError, OSError) as e:
        raise _server_error(e) from None
    return [DeviceEntry(i.serial, i.state, i.tags.get("model", "").replace("_", " "), i.tags.get("product", ""))
            for i in infos]


def connect(serial: str | None = None, timeout: float | None = None) -> Device:
    """The device to work on: -s SERIAL (or $ANDROID_SERIAL), else the only one connected. `timeout` replaces
    every deadline of the calls to it (None: each step's default)."""
    serial = serial or os.environ.get("ANDROID_SERIAL") or None
    entries = list_devices(timeout)
    if serial:
        entry = next((e for e in entries if e.serial == serial), None)
        if entry is None:
            listed = ", ".join(e.serial for e in entries) or "none"
            raise BadInput(f"no device {serial} (connected: {listed}); check `adb devices`")
    elif not entries:
        raise BadInput("no device connected: plug in a phone with USB debugging on (or `adb connect "
                       "HOST:PORT`) and check `adb devices`")
    elif len(entries) > 1:
        listed = ", ".join(f"{e.serial} ({e.state})" for e in entries)
        raise BadInput(f"{len(entries)} devices connected: {listed}; choose one with -s SERIAL")
    else:
        entry = entries[0]
    if entry.state != "device":
        advice = _STATE_ADVICE.get(entry.state, "check `adb devices`")
        raise BadInput(f"{entry.serial} is {entry.state}: {advice}")
    return Device(entry.serial, timeout)


class Device:
    """One ready device; methods raise QnnDeployError when the connection is lost, or when the phone misses a
    deadline or sends more than a cap. `timeout` replaces every step's default deadline (None: the defaults)."""

    def __init__(self, serial: str, timeout: float | None = None) -> None:
        self.serial = serial
        self.timeout = timeout
        self._dev = _client(timeout).device(serial)

    def _lost(self, doing: str, e: Exception) -> QnnDeployError:
        return CheckFailed(f"lost the connection to {self.serial} while {doing} ({first_line(e)}): reconnect the "
                           "phone, check `adb devices` and run the command again")

    def _overdue(self, doing: str, seconds: float, got: int) -> QnnDeployError:
        what = f"not finished in {seconds:g} s ({got:,} bytes so far)" if got else f"no answer in {seconds:g} s"
        return CheckFailed(f"{self.serial}: {doing}: {what}; the phone may be hung (replug or reboot it), or allow "
                           "more time with --timeout SECONDS")

    def _seconds(self, default: float) -> float:
        return self.timeout or default

    @contextmanager
    def _transport(self, seconds: float, service: str) -> Iterator[Any]:  # adbutils' connection (untyped)
        """A connection to `service` on the phone whose every read waits at most `seconds`."""
        with self._dev.open_transport(timeout=seconds) as c:
            c.send_command(service)
            c.check_okay()
            yield c

    # --- shell -----------------------------------------------------------------------------------------------
    def _shell(self, command: str, doing: str, limit: Limit) -> bytes:
        """The whole output of a shell command, read until the phone closes the stream: within the deadline and
        the cap, else the stream is closed (adbd then hangs up the command) and the error says which."""
        from adbutils.errors import AdbError, AdbTimeout

        seconds = self._seconds(limit.seconds)
        deadline = time.monotonic() + seconds
        out = bytearray()
        try:
            with self._transport(seconds, "shell:" + command) as c:
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError
                    c.conn.settimeout(left)
                    chunk = c.conn.recv(SYNC_DATA_MAX)
                    if not chunk:
                        break
                    out += chunk
                    if len(out) > limit.max_bytes:
                        raise CheckFailed(f"{self.serial}: {doing}: more than {_size(limit.max_bytes)} of output, "
                                          "stopped reading: the phone does not answer as this step expects")
        except (TimeoutError, AdbTimeout):
            raise self._overdue(doing, seconds, len(out)) from None
        except (AdbError, OSError, EOFError) as e:
            raise self._lost(doing, e) from None
        return bytes(out)

    def run(self, command: str, check: bool = False, doing: str | None = None, limit: Limit = COMMAND) -> ShellResult:
        """Run a shell command line; the exit status travels back behind a marker, as shell v1 has none. `doing`
        names the step in errors (default: the command); `limit` is its deadline and output cap."""
        doing = doing or f"running `{command[:60]}`"
        marker = f"QNNDEPLOY-EXIT-{secrets.token_hex(4)}:"
        raw = self._shell(f"( {command}\n); echo {marker}$?", doing, limit)
        out = raw.decode("utf-8", "replace")
        head, sep, tail = out.rpartition(marker)
        code = parse_int(tail) if sep else None
        if code is None:
            raise self._lost(doing, EOFError("the output ended early"))
        result = ShellResult(code, head)
        if check and result.code != 0:
            raise CheckFailed(f"`{command[:80]}` failed on {self.serial} (exit {result.code}): "
                              f"{head.strip()[-300:] or 'no output'}")
        return result

    def getprops(self) -> dict[str, str]:
        """All properties in one round trip. An API level (ro.build.version.sdk) that is not 1 to 4 ASCII digits
        is left out: the decision reads it as unknown, as on a phone that reports none."""
        props = {}
        for line in self.run("getprop", doing="reading properties (getprop)").output.splitlines():
            if m := _PROP_LINE.match(line.strip()):
                props[m.group(1)] = m.group(2)
        if API_LEVEL in props and not _API_DIGITS.fullmatch(props[API_LEVEL]):
            del props[API_LEVEL]
        return props

    def read_text(self, path: str, doing: str | None = None) -> str | None:
        """A small text file (/sys, /proc), or None when it cannot be read."""
        r = self.run(f"cat {shlex.quote(path)} 2>/dev/null", doing=doing or f"reading {path}")
        return r.output if r.code == 0 else None

    # --- files -----------------------------------------------------------------------------------------------
    def push(self, local: Path, remote: str, mode: int = 0o644, sha256: str | None = None, name: str = "") -> int:
        """Send one file; adbd creates the remote parent folders and removes a half-received file."""
        return self.push_files([Upload(local, remote, sha256, name)], mode)

    def push_files(self, items: Sequence[Upload], mode: int = 0o644, progress: ByteProgress | None = None) -> int:
        """Send several files over ONE sync session, as `adb push` of a folder does; the bytes sent.

        adbutils' push opens two connections per file (a STAT, then the SEND), each with a fixed 10 ms pause on
        close, and sends 4 KiB blocks where adbd takes 64 KiB: for a bundle of small files that set-up, not the
        data, was most of the time.

        Each file is opened without following a symlink and must be a regular file, and is hashed as it is sent:
        one with an Upload.sha256 the bytes sent do not have (it changed since it was checked) is abandoned before
        its DONE, which makes adbd drop it, and removed. A phone that takes no 64 KiB block for STALL_S seconds
        (or --timeout), or whose file stops growing while its reply is awaited (_sync_reply), is abandoned; the
        whole push has no deadline, so a 1 GB file takes as long as it takes.
        """
        from adbutils.errors import AdbError, AdbTimeout

        stall = self._seconds(STALL_S)
        total, item, sent, size = 0, None, 0, 0
        try:
            with self._transport(stall, "sync:") as c:
                # The small DONE after the data would otherwise wait for a delayed ACK (Nagle), ~40 ms a file.
                c.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for item in items:
                    sent = 0
                    with open_regular(item.local, what="file to push") as f:
                        size = os.fstat(f.fileno()).st_size
                        digest = hashlib.sha256()
                        spec = f"{item.remote},{0o100000 | mode}".encode()
                        c.conn.settimeout(stall)  # each sendall below: one block, within the stall deadline
                        c.conn.sendall(b"SEND" + struct.pack("<I", len(spec)) + spec)
                        while data := f.read(SYNC_DATA_MAX):
                            digest.update(data)
                            c.conn.sendall(b"DATA" + struct.pack("<I", len(data)) + data)
                            sent += len(data)
                            if progress is not None:
                                progress(len(data))
                    if item.sha256 is not None and digest.hexdigest() != item.sha256:
                        raise _Changed(digest.hexdigest())
                    c.conn.sendall(b"DONE" + struct.pack("<I", int(time.time())))
                    head = self._sync_reply(c, stall, item.remote, sent)
                    reply, length = head[:4], struct.unpack("<I", head[4:])[0]
                    if reply == b"FAIL":
                        why = _recv_exact(c, min(length, 1024), time.monotonic() + stall).decode("utf-8", "replace")
                        if "directory" in why.lower():  # adbd: "couldn't create file: Is a directory"
                            raise BadInput(f"{self.serial} refused to write {item.remote} ({why}): it is a "
                                           "folder, push to a file path")
                        raise CheckFailed(f"{self.serial} refused to write {item.remote} ({why}): is the folder "
                                          "read-only or the storage full?")
                    if reply != b"OKAY":
                        raise EOFError(f"unexpected sync reply {reply!r}")
                    total += sent
                c.conn.settimeout(stall)
                c.conn.sendall(b"QUIT" + struct.pack("<I", 0))
        except _Changed as e:  # the session is closed: adbd drops the file it was receiving
            assert item is not None and item.sha256 is not None
            self._forget(item.remote)
            raise CheckFailed(f"{item.label} changed while it was being pushed to {self.serial}: the bytes read "
                              f"hash to {e.digest[:12]}..., not to the sha256 that was checked "
                              f"({item.sha256[:12]}...); it was not left on the phone: check the files (`qnndeploy "
                              "bundle verify`) and run again") from None
        except (TimeoutError, AdbTimeout):
            if item is None:
                raise self._overdue("starting a push (sync)", stall, 0) from None
            doing = f"pushing {item.label}"
            done = f"all {size:,} bytes sent, not confirmed" if sent == size else f"{sent:,} of {size:,} bytes sent"
            state = "is not confirmed" if sent == size else "is incomplete"
            raise CheckFailed(f"{self.serial}: {doing}: no progress in {stall:g} s ({done}): the phone stopped "
                              f"reading, the push was abandoned and the file on the phone {state}; replug or "
                              "reboot the phone, or allow more time with --timeout SECONDS") from None
        except (AdbError, OSError, EOFError) as e:
            doing = "pushing"
            if item is not None:
                doing = f"pushing {item.label} ({sent} of {size} bytes sent{', not confirmed' if sent == size else ''})"
            raise self._lost(doing, e) from None
        return total

    def _sync_reply(self, c: Any, stall: float, remote: str, sent: int) -> bytes:  # c: adbutils' connection
        """The 8-byte reply to a SEND's DONE. The buffers between here and the phone may still hold much of the file
        when its last block has left: while the file on the phone grows by a block (64 KiB, or the rest of the
        `sent` bytes) per stall period, wait on (so a stuck phone is given up after one to two periods)."""
        reply, seen = b"", -SYNC_DATA_MAX
        while len(reply) < 8:
            c.conn.settimeout(stall)
            try:
                chunk = c.conn.recv(8 - len(reply))
            except TimeoutError:
                size = self._remote_size(remote, stall)
                if size is None or size > sent or size < min(seen + SYNC_DATA_MAX, sent) or size == seen:
                    raise
                seen = size
                continue
            if not chunk:
                raise EOFError("the sync session ended early")
            reply += chunk
        return reply

    def _remote_size(self, remote: str, seconds: float) -> int | None:
        """The size of a file on the phone, or None when it does not say within `seconds`."""
        try:
            r = self.run(f"stat -c %s {shlex.quote(remote)} 2>/dev/null", doing=f"checking the push of {remote}",
                         limit=Limit(seconds, 1024))
        except QnnDeployError:
            return None
        return parse_int(r.output) if r.code == 0 else None

    def _forget(self, remote: str) -> None:
        """Remove a file that must not stay on the phone; best effort, within the short deadline."""
        with suppress(QnnDeployError):  # the phone does not answer either: the caller's error says what to do
            self.run(f"rm -f {shlex.quote(remote)}", doing=f"removing {remote}")

    def pull(self, remote: str, local: Path, max_bytes: int = PULL_MAX) -> int:
        """Fetch one file; the local file appears only when complete. It must come within FILES' deadline (or
        --timeout) and hold at most max_bytes."""
        from adbutils.errors import AdbError, AdbTimeout

        seconds = self._seconds(FILES.seconds)
        deadline = time.monotonic() + seconds
        got = 0
        with staging_file(local, force=True) as tmp:
            try:
                with self._transport(seconds, "sync:") as c, tmp.open("wb") as f:
                    path = remote.encode()
                    c.conn.sendall(b"RECV" + struct.pack("<I", len(path)) + path)
                    while True:
                        head = _recv_exact(c, 8, deadline)
                        kind, n = head[:4], struct.unpack("<I", head[4:])[0]
                        if kind == b"DONE":
                            break
                        if kind == b"FAIL":  # the device's message, e.g. no such file
                            why = _recv_exact(c, min(n, 1024), deadline).decode("utf-8", "replace")
                            raise CheckFailed(f"cannot pull {remote} from {self.serial}: {why}")
                        if kind != b"DATA":
                            raise EOFError(f"unexpected sync reply {kind!r}")
                        if got + n > max_bytes:
                            raise CheckFailed(f"{self.serial}: pulling {remote}: more than {_size(max_bytes)}, "
                                              "stopped reading: it is not the file this step expects")
                        f.write(_recv_exact(c, n, deadline))
                        got += n
                    c.conn.settimeout(seconds)
                    c.conn.sendall(b"QUIT" + struct.pack("<I", 0))
            except (TimeoutError, AdbTimeout):
                raise self._overdue(f"pulling {remote}", seconds, got) from None
            except (AdbError, OSError, EOFError) as e:
                raise self._lost(f"pulling {remote}", e) from None
        return got

    def sha256s(self, remote_dir: str) -> dict[str, str] | None:
        """sha256 of every file under remote_dir by relative path, or None when the folder does not exist."""
        r = self.run(f"cd {shlex.quote(remote_dir)} 2>/dev/null || exit 7; find . -type f -exec sha256sum {{}} +",
                     doing=f"hashing files on the phone (sha256sum in {remote_dir})", limit=HASHING)
        if r.code == 7:
            return None
        if r.code != 0:
            raise CheckFailed(f"sha256sum failed on {self.serial} in {remote_dir}: {r.output.strip()[-200:]}")
        hashes = {}
        for line in r.output.splitlines():
            digest, _, name = line.partition("  ")
            if len(digest) == 64 and name.startswith("./"):
                hashes[name[2:]] = digest
        return hashes

    def push_folder(self, files: Mapping[str, LocalFile], remote_dir: str,
                    progress: ByteProgress | None = None) -> PushReport:
        """Make remote_dir hold exactly `files` (relative POSIX path -> local file and its sha256).

        Incremental: only files whose sha256 on the phone differs are sent. Atomic: the files go to
        remote_dir.staging (a copy of remote_dir to start with), are checked there, and the staging folder is
        renamed into place at the end. A run cut short leaves the staging folder, so the next run resumes it; a
        file left incomplete there (a stalled push) is found by its sha256 and sent again. What is sent must hash
        to the given sha256 (see push_files).
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
            self.run(f"mkdir -p {shlex.quote(posixpath.dirname(staging))} && {start}", check=True,
                     doing=f"preparing {staging}", limit=FILES)
            have = current or {}
        report.removed = sorted(set(have) - set(want))
        if report.removed:
            self.run("rm -f " + " ".join(shlex.quote(f"{staging}/{rel}") for rel in report.removed), check=True,
                     doing=f"removing old files from {staging}", limit=FILES)
        todo = [rel for rel in sorted(want) if have.get(rel) != want[rel]]
        report.unchanged = [rel for rel in sorted(want) if have.get(rel) == want[rel]]
        uploads = [Upload(files[rel].path, f"{staging}/{rel}", files[rel].sha256, rel) for rel in todo]
        try:
            report.bytes_sent = self.push_files(uploads, progress=progress)
        except QnnDeployError as e:
            raise e.reworded(f"{e}; {remote_dir} was not changed (the next run resumes from {staging})") from None
        report.sent = todo
        final = self.sha256s(staging) or {}
        wrong = sorted(rel for rel in want if final.get(rel) != want[rel])
        if wrong:
            raise CheckFailed(f"{len(wrong)} file(s) differ on {self.serial} after the push ({wrong[0]} ...): "
                              "is the phone's storage full? run again to resend them")
        q = {k: shlex.quote(v) for k, v in (("d", remote_dir), ("s", staging), ("o", old))}
        self.run(f"rm -rf {q['o']} && {{ test ! -e {q['d']} || mv {q['d']} {q['o']}; }} && mv {q['s']} {q['d']} "
                 f"&& rm -rf {q['o']}", check=True, doing=f"putting {remote_dir} in place", limit=FILES)
        return report


def _recv_exact(c: Any, n: int, deadline: float) -> bytes:  # c: adbutils' connection (untyped)
    """n bytes from the connection, all before `deadline` (time.monotonic()); TimeoutError past it."""
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        c.conn.settimeout(left)
        chunk = c.conn.recv(min(n - len(buf), SYNC_DATA_MAX))
        if not chunk:
            raise EOFError("the sync session ended early")
        buf += chunk
    return bytes(buf)

"""The two services the device offers over a stream: `shell:` (v1, no pty) and `sync:` (legacy file transfer).

shell v1 (as adbd's raw mode): stdout and stderr merged onto the stream, WRTEs from the host go to stdin, the
stream closes when the command's output ends; the exit status is not sent (clients append `; echo $?`).

sync (adbd's file_sync_service, the v1 requests only, since the device advertises no stat_v2/sendrecv_v2):
each request is id(4) + length(le32) + path; STAT -> "STAT" mode size mtime; LIST -> "DENT" mode size mtime
namelen name ... "DONE"; SEND "path,mode" then DATA len bytes ... DONE mtime -> "OKAY" 0 or "FAIL" len msg;
RECV -> DATA len bytes ... DONE 0, or FAIL; QUIT ends the session. A failed SEND removes the partial file.

Failure injection (EmulatedDevice): the connection cut mid-SEND (drop_point), a receiver that stops reading
mid-SEND (stall_point) the way an adbd stuck on a storage write does: it takes no more data, never answers, and
keeps the partial file (a stuck adbd never gets to clean up; the worst case for the host), and a slow receiver
(pace: it sleeps after each block, as a phone writing to slow storage takes its time).
"""

from __future__ import annotations

import os
import signal
import stat
import struct
import threading
from collections.abc import Callable
from pathlib import Path

from .sandbox import Sandbox, kill_group
from .transport import Stream, StreamClosed

SYNC_DATA_MAX = 64 * 1024


def shell_service(sandbox: Sandbox, started: Callable[[int], None]) -> Callable[[Stream, str], None]:
    def run(stream: Stream, command: str) -> None:
        proc = sandbox.popen(command)
        stdin, stdout = proc.stdin, proc.stdout
        assert stdin is not None and stdout is not None  # popen asks for both pipes
        started(proc.pid)

        def feed_stdin() -> None:
            while (data := stream.read()) is not None:
                try:
                    stdin.write(data)
                    stdin.flush()
                except OSError:
                    pass
            if stream.closed_by_host and proc.poll() is None:
                kill_group(proc.pid, signal.SIGHUP)  # adbd hangs up the command when the client goes away

        threading.Thread(target=feed_stdin, daemon=True).start()
        held = b""
        try:
            while chunk := os.read(stdout.fileno(), stream.conn.max_payload):
                ready, held = sandbox.unmap_output(held + chunk, final=False)
                if ready:
                    stream.write(ready)
            if held:
                stream.write(sandbox.unmap_output(held, final=True)[0])
        finally:
            stdout.close()
            stdin.close()
            if not stream.closed_by_host:
                proc.wait()
            else:  # hung up (or left running if it ignores SIGHUP): reaped whenever it ends, as adbd does
                threading.Thread(target=proc.wait, daemon=True).start()

    return run


class _Reader:
    """Exact-size reads over the stream's WRTE payloads, which split sync messages anywhere."""

    def __init__(self, stream: Stream) -> None:
        self.stream, self.buf = stream, bytearray()

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            data = self.stream.read()
            if data is None:
                raise StreamClosed
            self.buf += data
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def message(self) -> tuple[bytes, int]:
        head = self.exact(8)
        return head[:4], struct.unpack("<I", head[4:])[0]


class _Writer:
    """Collects small sync replies into WRTEs of up to the negotiated payload size."""

    def __init__(self, stream: Stream) -> None:
        self.stream, self.buf = stream, bytearray()

    def put(self, *parts: bytes) -> None:
        for part in parts:
            self.buf += part
        if len(self.buf) >= self.stream.conn.max_payload:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            data, self.buf = bytes(self.buf), bytearray()
            self.stream.write(data)


def _u32(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}I", *(v & 0xFFFFFFFF for v in values))


def sync_service(sandbox: Sandbox, drop_point: Callable[[int], bool],
                 stall_point: Callable[[int, int], int | None],
                 pace: Callable[[int], None] = lambda _n: None) -> Callable[[Stream, str], None]:
    """drop_point(bytes_received_in_this_send) returns True when the failure injection cuts the connection;
    stall_point(bytes_received_before, block_length) the number of bytes of this block the receiver writes before
    it stops reading, or None; pace(block_length) is called after each block written (a slow phone sleeps there)."""

    def run(stream: Stream, _arg: str) -> None:
        rd, wr = _Reader(stream), _Writer(stream)
        while True:
            cmd, length = rd.message()
            if cmd == b"QUIT":
                return
            path = rd.exact(length).decode("utf-8", "replace")
            if cmd == b"STAT":
                _stat(sandbox, path, wr)
            elif cmd == b"LIST":
                _list(sandbox, path, wr)
            elif cmd == b"RECV":
                _recv(sandbox, path, wr)
            elif cmd == b"SEND":
                if not _send(sandbox, path, rd, wr, drop_point, stall_point, pace, stream):
                    return
            else:
                _fail(wr, f"unknown sync command {cmd!r}")
                return
            wr.flush()

    return run


def _fail(wr: _Writer, message: str) -> None:
    msg = message.encode()
    wr.put(b"FAIL", _u32(len(msg)), msg)
    wr.flush()


def _stat(sandbox: Sandbox, path: str, wr: _Writer) -> None:
    try:
        st = os.lstat(sandbox.host_path(path))
        wr.put(b"STAT", _u32(st.st_mode, st.st_size, int(st.st_mtime)))
    except OSError:
        wr.put(b"STAT", _u32(0, 0, 0))


def _list(sandbox: Sandbox, path: str, wr: _Writer) -> None:
    folder = sandbox.host_path(path)
    try:
        names = [".", "..", *sorted(p.name for p in folder.iterdir())]
    except OSError:
        names = []
    for name in names:
        try:
            st = os.lstat(folder / name)
        except OSError:
            continue
        raw = name.encode()
        wr.put(b"DENT", _u32(st.st_mode, st.st_size, int(st.st_mtime), len(raw)), raw)
    wr.put(b"DONE", _u32(0, 0, 0, 0))


def _recv(sandbox: Sandbox, path: str, wr: _Writer) -> None:
    try:
        with sandbox.host_path(path).open("rb") as f:
            while chunk := f.read(SYNC_DATA_MAX):
                wr.put(b"DATA", _u32(len(chunk)), chunk)
    except OSError as e:
        _fail(wr, e.strerror or str(e))
        return
    wr.put(b"DONE", _u32(0))


def _send(sandbox: Sandbox, spec: str, rd: _Reader, wr: _Writer, drop_point: Callable[[int], bool],
          stall_point: Callable[[int, int], int | None], pace: Callable[[int], None], stream: Stream) -> bool:
    """Receive one file; False when the stream is gone. Like adbd: parents are created, and a transfer that
    fails part-way leaves no file behind (except a stalled one, see the module docstring)."""
    device_path, _, mode_text = spec.rpartition(",")
    mode = int(mode_text) if mode_text.isdigit() else 0o644
    target = sandbox.host_path(device_path or spec)
    if stat.S_ISLNK(mode):
        _fail(wr, "symlinks are not supported by this emulated device")
        return False
    received = 0
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        f = target.open("wb")
    except OSError as e:
        _fail(wr, f"couldn't create file: {e.strerror}")
        return False
    try:
        with f:
            while True:
                cmd, length = rd.message()
                if cmd == b"DONE":
                    mtime = length
                    break
                if cmd != b"DATA" or length > SYNC_DATA_MAX:
                    raise ValueError(f"unexpected {cmd!r} in SEND")
                data = rd.exact(length)
                if (kept := stall_point(received, length)) is not None:
                    f.write(data[:kept])
                    f.flush()
                    stream.wait_closed()  # reads nothing more: the host's sends back up, then it gives up
                    return False  # the partial file stays
                f.write(data)
                pace(length)
                received += length
                if drop_point(received):
                    stream.conn.drop()
                    raise StreamClosed
        target.chmod(stat.S_IMODE(mode))
        os.utime(target, (mtime, mtime))
    except (StreamClosed, ValueError, OSError) as e:
        Path(target).unlink(missing_ok=True)
        if isinstance(e, StreamClosed):
            return False
        _fail(wr, str(e))
        return False
    wr.put(b"OKAY", _u32(0))
    return True

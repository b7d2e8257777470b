"""The device's end of one adb transport (one TCP connection from the adb server): handshake and streams.

Like adbd: the host opens a stream with OPEN(host_id, 0, "service:..."), the device answers OKAY(dev_id, host_id)
or CLSE(0, host_id). Each WRTE is acknowledged with OKAY once its payload is consumed, and a side sends its
next WRTE on a stream only after the previous one was acknowledged. CLSE ends a stream.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import socket
import threading
from collections.abc import Callable

from . import protocol as P


class StreamClosed(Exception):
    """The host closed the stream, or the whole connection went away."""


class Stream:
    """One service stream; services run in their own thread and use read() / write() / close()."""

    def __init__(self, conn: Connection, local_id: int, remote_id: int) -> None:
        self.conn, self.local_id, self.remote_id = conn, local_id, remote_id
        self._inbox: queue.Queue[bytes | None] = queue.Queue()
        self._acked = threading.Event()
        self._acked.set()
        self._gone = threading.Event()
        self.closed = False
        self.closed_by_host = False

    # called by the connection's reader thread
    def _on_write(self, data: bytes) -> None:
        self._inbox.put(data)

    def _on_okay(self) -> None:
        self._acked.set()

    def _on_close(self, by_host: bool) -> None:
        self.closed = True
        self.closed_by_host = by_host
        self._inbox.put(None)
        self._acked.set()
        self._gone.set()

    # called by the service
    def read(self) -> bytes | None:
        """Next payload from the host (acknowledged with OKAY), or None once the stream is closed."""
        data = self._inbox.get()
        if data is None:
            self._inbox.put(None)  # stay closed for later readers
            return None
        if not self.closed:
            self.conn.send(P.Packet(P.A_OKAY, self.local_id, self.remote_id))
        return data

    def wait_closed(self) -> None:
        """Block until the stream is closed, reading nothing: what a service that stopped reading does."""
        self._gone.wait()

    def write(self, data: bytes) -> None:
        """Send data in WRTE packets of at most the negotiated size, each after the previous one's OKAY."""
        view = memoryview(data)
        for start in range(0, len(view), self.conn.max_payload):
            self._acked.wait()
            if self.closed:
                raise StreamClosed
            self._acked.clear()
            self.conn.send(P.Packet(P.A_WRTE, self.local_id, self.remote_id,
                                    bytes(view[start:start + self.conn.max_payload])))
        self._acked.wait()  # the last packet too: the host has taken everything once write() returns
        if self.closed:
            raise StreamClosed

    def close(self) -> None:
        if self.closed:
            return
        self._on_close(by_host=False)
        self.conn.send(P.Packet(P.A_CLSE, self.local_id, self.remote_id))
        self.conn.forget(self)


Service = Callable[[Stream, str], None]


class Connection:
    """Reads packets from the adb server and dispatches them; one thread per connection."""

    def __init__(self, sock: socket.socket, banner: str, state: str, services: dict[str, Service]) -> None:
        self.sock, self.banner, self.state, self.services = sock, banner, state, services
        self.version = P.A_VERSION
        self.max_payload = P.MAX_PAYLOAD
        self.online = False
        self._send_lock = threading.Lock()
        self._streams: dict[int, Stream] = {}
        self._ids = itertools.count(1)

    def send(self, packet: P.Packet) -> None:
        try:
            with self._send_lock:
                self.sock.sendall(P.pack(packet, with_checksum=self.version < P.A_VERSION_SKIP_CHECKSUM))
        except OSError:
            raise StreamClosed from None

    def forget(self, stream: Stream) -> None:
        self._streams.pop(stream.local_id, None)

    def drop(self) -> None:
        """Cut the TCP connection, as an unplugged cable does; the listener keeps accepting new ones."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def run(self) -> None:
        try:
            while True:
                packet = P.read_packet(self.sock, self.online and self.version < P.A_VERSION_SKIP_CHECKSUM,
                                       self.max_payload)
                self._handle(packet)
        except (EOFError, OSError, P.ProtocolError):
            pass
        finally:
            for stream in list(self._streams.values()):
                stream._on_close(by_host=True)
            self._streams.clear()
            self.sock.close()

    def _handle(self, p: P.Packet) -> None:
        if p.command == P.A_CNXN:
            self.version = min(P.A_VERSION, p.arg0)
            self.max_payload = min(P.MAX_PAYLOAD, p.arg1)
            if self.version < P.A_VERSION_MIN:
                raise P.ProtocolError(f"host protocol version {p.arg0:#x} is too old")
            if self.state == "device":
                self._go_online()
            elif self.state == "unauthorized":
                self._send_auth_token()
            return  # "offline": never answers, as a device stuck at boot
        if p.command == P.A_AUTH:
            if self.state == "unauthorized" and p.arg0 == P.AUTH_SIGNATURE:
                self._send_auth_token()  # no key is ever accepted; an RSAPUBLICKEY would wait for the user
            return
        if not self.online:
            return
        if p.command == P.A_OPEN:
            self._open(p.arg0, p.data.rstrip(b"\0").decode("utf-8", "replace"))
            return
        stream = self._streams.get(p.arg1)
        if stream is None:
            return
        if p.command == P.A_OKAY:
            stream._on_okay()
        elif p.command == P.A_WRTE:
            stream._on_write(p.data)
        elif p.command == P.A_CLSE:
            self.forget(stream)
            stream._on_close(by_host=True)

    def _go_online(self) -> None:
        self.online = True
        self.send(P.Packet(P.A_CNXN, self.version, self.max_payload, self.banner.encode()))

    def _send_auth_token(self) -> None:
        self.send(P.Packet(P.A_AUTH, P.AUTH_TOKEN, 0, os.urandom(20)))

    def _open(self, remote_id: int, service: str) -> None:
        prefix, _, arg = service.partition(":")
        handler = self.services.get(prefix + ":")
        if handler is None:
            self.send(P.Packet(P.A_CLSE, 0, remote_id))
            return
        stream = Stream(self, next(self._ids), remote_id)
        self._streams[stream.local_id] = stream
        self.send(P.Packet(P.A_OKAY, stream.local_id, remote_id))
        threading.Thread(target=_run_service, args=(handler, stream, arg), daemon=True,
                         name=f"adb-{prefix}-{stream.local_id}").start()


def _run_service(handler: Service, stream: Stream, arg: str) -> None:
    try:
        handler(stream, arg)
    except StreamClosed:
        pass
    finally:
        with contextlib.suppress(StreamClosed):
            stream.close()

"""The adb transport protocol as a device speaks it: 24-byte headers, six uint32 little-endian fields.

Field order: command, arg0, arg1, data_length, data_check, magic (= command ^ 0xffffffff). data_check is the
byte sum of the payload; from A_VERSION_SKIP_CHECKSUM on, both sides may send 0 and skip checking it.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass


def _cmd(name: bytes) -> int:
    return struct.unpack("<I", name)[0]


A_CNXN = _cmd(b"CNXN")
A_AUTH = _cmd(b"AUTH")
A_OPEN = _cmd(b"OPEN")
A_OKAY = _cmd(b"OKAY")
A_CLSE = _cmd(b"CLSE")
A_WRTE = _cmd(b"WRTE")
A_SYNC = _cmd(b"SYNC")

A_VERSION_MIN = 0x01000000
A_VERSION_SKIP_CHECKSUM = 0x01000001
A_VERSION = 0x01000001
MAX_PAYLOAD = 1024 * 1024  # what this device offers; CNXN settles on the smaller of both sides

AUTH_TOKEN, AUTH_SIGNATURE, AUTH_RSAPUBLICKEY = 1, 2, 3

HEADER = struct.Struct("<6I")


class ProtocolError(Exception):
    """The peer sent something that is not an adb packet."""


@dataclass
class Packet:
    command: int
    arg0: int
    arg1: int
    data: bytes = b""

    @property
    def name(self) -> str:
        return struct.pack("<I", self.command).decode("ascii", "replace")


def checksum(data: bytes) -> int:
    return sum(data) & 0xFFFFFFFF


def pack(p: Packet, with_checksum: bool) -> bytes:
    check = checksum(p.data) if with_checksum else 0
    return HEADER.pack(p.command, p.arg0, p.arg1, len(p.data), check, p.command ^ 0xFFFFFFFF) + p.data


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("peer closed the connection")
        buf += chunk
    return bytes(buf)


def read_packet(sock: socket.socket, verify_checksum: bool, max_payload: int) -> Packet:
    command, arg0, arg1, length, check, magic = HEADER.unpack(_read_exact(sock, HEADER.size))
    if magic != command ^ 0xFFFFFFFF:
        raise ProtocolError(f"bad magic in packet header {command:#x}")
    if length > max_payload:
        raise ProtocolError(f"payload of {length} bytes exceeds the negotiated {max_payload}")
    data = _read_exact(sock, length) if length else b""
    if verify_checksum and check != checksum(data):
        raise ProtocolError("payload checksum mismatch")
    return Packet(command, arg0, arg1, data)

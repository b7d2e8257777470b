"""An ONNX file's protobuf bytes without its big weights, read through mmap: what check, verify and the other
read-only stages parse, so that their memory follows the graph, not the weight bytes.

onnx.load parses the whole file (the bytes, then protobuf's copy, then whatever copies a later serialisation
makes): about 6x a 400 MB model's size at peak. Here the wire format is walked field by field and every
initializer of the main graph whose data is over SMALL_BYTES is re-encoded without its data fields; everything
else is copied as it is. Small constants (shapes, scales, settings) keep their values, which the graph reading
needs; a stripped tensor keeps its name, dims and element type, and has no data.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from pathlib import Path

SMALL_BYTES = 64 << 10  # initializer data up to this size is kept
_LEN, _VARINT, _I64, _I32 = 2, 0, 1, 5  # protobuf wire types
_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5  # ModelProto.graph, GraphProto.initializer
# TensorProto's data fields: float_data, int32_data, string_data, int64_data, raw_data, double_data, uint64_data.
_TENSOR_DATA = frozenset({4, 5, 6, 7, 9, 10, 11})


class WireError(ValueError):
    """The bytes are not well-formed protobuf (a truncated or foreign file)."""


def _varint(buf: mmap.mmap, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireError("a truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(buf: mmap.mmap, start: int, end: int) -> Iterator[tuple[int, bool, int, int, int]]:
    """(field number, length-delimited?, field start, payload start, field end) of each field in buf[start:end];
    a length-delimited field's payload is buf[payload start:field end]."""
    pos = start
    while pos < end:
        key, payload = _varint(buf, pos, end)
        wire = key & 7
        if wire == _VARINT:
            _, nxt = _varint(buf, payload, end)
        elif wire == _LEN:
            size, payload = _varint(buf, payload, end)
            nxt = payload + size
        elif wire in (_I64, _I32):
            nxt = payload + (8 if wire == _I64 else 4)
        else:
            raise WireError(f"wire type {wire} (groups are not used by ONNX)")
        if nxt > end:
            raise WireError("a field runs past the end of its message")
        yield key >> 3, wire == _LEN, pos, payload, nxt
        pos = nxt


def _stripped_tensor(buf: mmap.mmap, start: int, end: int) -> bytes:
    """A TensorProto's bytes without its data fields, when they hold more than SMALL_BYTES."""
    spans = [(field, s, nxt) for field, _, s, _, nxt in _fields(buf, start, end)]
    if sum(nxt - s for field, s, nxt in spans if field in _TENSOR_DATA) <= SMALL_BYTES:
        return bytes(buf[start:end])
    return b"".join(buf[s:nxt] for field, s, nxt in spans if field not in _TENSOR_DATA)


def _rewritten(buf: mmap.mmap, start: int, end: int, field_number: int,
               rewrite: Callable[[mmap.mmap, int, int], bytes]) -> bytes:
    """The message in buf[start:end] with the payload of each length-delimited `field_number` field replaced by
    rewrite(buf, payload start, payload end); every other field copied as it is."""
    out = bytearray()
    for field, delimited, s, payload, nxt in _fields(buf, start, end):
        if field == field_number and delimited:
            new = rewrite(buf, payload, nxt)
            out += _encode_varint(field << 3 | _LEN) + _encode_varint(len(new)) + new
        else:
            out += buf[s:nxt]
    return bytes(out)


def _graph(buf: mmap.mmap, start: int, end: int) -> bytes:
    return _rewritten(buf, start, end, _GRAPH_INITIALIZER, _stripped_tensor)


def without_weights(path: Path) -> bytes:
    """The ModelProto bytes of the file at `path` with its big initializer data left out (module docstring)."""
    with path.open("rb") as f:
        if path.stat().st_size == 0:
            return b""
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _rewritten(buf, 0, len(buf), _MODEL_GRAPH, _graph)

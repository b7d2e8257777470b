"""Just enough ELF to tell an Android library from a Hexagon Skel, its arch, and its page alignment; and the one
change qnndeploy makes to a library, proven on its bytes: raising its PT_LOAD segments' p_align to 16 KB."""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

EM_QDSP6 = 164  # Hexagon: Skel libraries run on the DSP
EM_AARCH64 = 183  # Android arm64-v8a
PT_LOAD = 1
MIN_ANDROID_ALIGN = 16384  # Android 15+ devices with 16 KB pages refuse libraries aligned to less


class NotElf(ValueError):
    """The file is not a (complete) ELF file; the message says why."""


@dataclass(frozen=True)
class Load:
    """A PT_LOAD segment: where it is in the file and in memory, its alignment, and where its p_align field is."""

    offset: int  # p_offset
    vaddr: int  # p_vaddr
    align: int  # p_align
    align_at: int  # the file offset of its p_align field
    align_size: int  # 4 (ELF32) or 8 (ELF64) bytes


@dataclass(frozen=True)
class ElfInfo:
    bits: int  # 32 or 64
    machine: int
    flags: int
    loads: tuple[Load, ...] = ()  # every PT_LOAD segment, in file order

    @property
    def load_aligns(self) -> tuple[int, ...]:
        """p_align of every PT_LOAD segment."""
        return tuple(s.align for s in self.loads)

    @property
    def hexagon_arch(self) -> str | None:
        """Hexagon libraries carry their arch in e_flags as hex digits: 0x79 is v79."""
        return f"v{self.flags & 0xfff:x}" if self.machine == EM_QDSP6 else None

    @property
    def min_load_align(self) -> int | None:
        return min(self.load_aligns) if self.load_aligns else None


def read_elf(path: Path) -> ElfInfo:
    with path.open("rb") as f:
        return parse_elf(f)


def parse_elf(f: BinaryIO) -> ElfInfo:
    """The ELF header and program headers of the file open in f, read from its start."""
    head = f.read(64)
    ident = head[:16]
    if ident[:4] != b"\x7fELF":
        raise NotElf("not an ELF file")
    if len(ident) < 16:
        raise NotElf("truncated ELF header")
    if ident[4] not in (1, 2) or ident[5] != 1:
        raise NotElf("not a little-endian ELF32/ELF64 file")
    bits = 32 if ident[4] == 1 else 64
    if bits == 32:
        hdr_fmt, ph_fmt, offsets = "<HHIIIIIHHHHHH", "<IIIIIIII", (1, 2, 7)  # p_offset, p_vaddr, p_align indexes
    else:
        hdr_fmt, ph_fmt, offsets = "<HHIQQQIHHHHHH", "<IIQQQQQQ", (2, 3, 7)
    raw = head[16:16 + struct.calcsize(hdr_fmt)]
    if len(raw) < struct.calcsize(hdr_fmt):
        raise NotElf("truncated ELF header")
    _, machine, _, _, phoff, _, flags, _, phentsize, phnum, _, _, _ = struct.unpack(hdr_fmt, raw)
    size = struct.calcsize(ph_fmt)
    if phnum and phentsize < size:
        raise NotElf("corrupt ELF program header size")
    field = 4 if bits == 32 else 8  # p_align is the last field in both layouts
    loads = []
    for i in range(phnum):
        f.seek(phoff + i * phentsize)
        ph = f.read(size)
        if len(ph) < size:
            raise NotElf("truncated ELF program headers")
        fields = struct.unpack(ph_fmt, ph)
        if fields[0] == PT_LOAD:
            o, v, a = (fields[k] for k in offsets)
            loads.append(Load(o, v, a, phoff + i * phentsize + size - field, field))
    return ElfInfo(bits, machine, flags, tuple(loads))


def parse_elf_bytes(data: bytes) -> ElfInfo:
    return parse_elf(io.BytesIO(data))


def realign_problem(info: ElfInfo, to: int = MIN_ANDROID_ALIGN) -> str | None:
    """Why raising the PT_LOAD segments' p_align to `to` would not give a library that loads the same, or None.
    A loader maps each segment at p_vaddr rounded down to the page, from p_offset rounded down alike: only when
    p_offset and p_vaddr are congruent modulo `to` do the same bytes land at the same addresses with `to`-byte
    pages. A segment aligned to more already is left as it is."""
    if not info.loads:
        return "it has no PT_LOAD segment"
    for i, s in enumerate(info.loads):
        if s.align < to and s.offset % to != s.vaddr % to:
            return (f"its PT_LOAD segment {i} has p_offset {s.offset:#x} and p_vaddr {s.vaddr:#x}, not congruent "
                    f"modulo {to}: its file layout must change, which only relinking does")
    return None


def realigned(data: bytes, to: int = MIN_ANDROID_ALIGN) -> bytes:
    """The library's bytes with every PT_LOAD p_align below `to` raised to `to`, and nothing else changed; proven
    on the result (prove_realigned). NotElf, or ValueError naming why it is not safe (realign_problem)."""
    info = parse_elf_bytes(data)
    why = realign_problem(info, to)
    if why is not None:
        raise ValueError(why)
    out = bytearray(data)
    for s in info.loads:
        if s.align < to:
            out[s.align_at:s.align_at + s.align_size] = to.to_bytes(s.align_size, "little")
    result = bytes(out)
    prove_realigned(data, result, to)
    return result


def prove_realigned(before: bytes, after: bytes, to: int = MIN_ANDROID_ALIGN) -> None:
    """That `after` is `before` with only PT_LOAD p_align fields changed, and that it reads back as an ELF file of
    the same kind whose every PT_LOAD is aligned to `to` or more: ValueError naming the first difference else."""
    old, new = parse_elf_bytes(before), parse_elf_bytes(after)
    if len(before) != len(after) or (old.bits, old.machine, old.flags) != (new.bits, new.machine, new.flags):
        raise ValueError("the re-aligned file differs in size or ELF header")
    fields = {i for s in old.loads for i in range(s.align_at, s.align_at + s.align_size)}
    changed = next((i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b and i not in fields),
                   None)
    if changed is not None:
        raise ValueError(f"byte {changed:#x} changed outside the PT_LOAD p_align fields")
    if [(s.offset, s.vaddr) for s in old.loads] != [(s.offset, s.vaddr) for s in new.loads]:
        raise ValueError("the PT_LOAD segments moved")
    if min(new.load_aligns, default=0) < to:
        raise ValueError(f"a PT_LOAD segment is still aligned to {new.min_load_align}")


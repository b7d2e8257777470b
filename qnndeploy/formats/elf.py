"""Just enough ELF to tell an Android library from a Hexagon Skel, its arch, and its page alignment."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

EM_QDSP6 = 164  # Hexagon: Skel libraries run on the DSP
EM_AARCH64 = 183  # Android arm64-v8a
PT_LOAD = 1
MIN_ANDROID_ALIGN = 16384  # Android 15+ devices with 16 KB pages refuse libraries aligned to less


class NotElf(ValueError):
    """The file is not a (complete) ELF file; the message says why."""


@dataclass(frozen=True)
class ElfInfo:
    bits: int  # 32 or 64
    machine: int
    flags: int
    load_aligns: tuple[int, ...]  # p_align of every PT_LOAD segment

    @property
    def hexagon_arch(self) -> str | None:
        """Hexagon libraries carry their arch in e_flags as hex digits: 0x79 is v79."""
        return f"v{self.flags & 0xfff:x}" if self.machine == EM_QDSP6 else None

    @property
    def min_load_align(self) -> int | None:
        return min(self.load_aligns) if self.load_aligns else None


def read_elf(path: Path) -> ElfInfo:
    with path.open("rb") as f:
        ident = f.read(16)
        if ident[:4] != b"\x7fELF":
            raise NotElf("not an ELF file")
        if len(ident) < 16:
            raise NotElf("truncated ELF header")
        if ident[4] not in (1, 2) or ident[5] != 1:
            raise NotElf("not a little-endian ELF32/ELF64 file")
        bits = 32 if ident[4] == 1 else 64
        if bits == 32:
            hdr_fmt, ph_fmt = "<HHIIIIIHHHHHH", "<IIIIIIII"
        else:
            hdr_fmt, ph_fmt = "<HHIQQQIHHHHHH", "<IIQQQQQQ"
        raw = f.read(struct.calcsize(hdr_fmt))
        if len(raw) < struct.calcsize(hdr_fmt):
            raise NotElf("truncated ELF header")
        _, machine, _, _, phoff, _, flags, _, phentsize, phnum, _, _, _ = struct.unpack(hdr_fmt, raw)
        if phnum and phentsize < struct.calcsize(ph_fmt):
            raise NotElf("corrupt ELF program header size")
        aligns = []
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            ph = f.read(struct.calcsize(ph_fmt))
            if len(ph) < struct.calcsize(ph_fmt):
                raise NotElf("truncated ELF program headers")
            fields = struct.unpack(ph_fmt, ph)
            if fields[0] == PT_LOAD:  # p_type; p_align is the last field in both layouts
                aligns.append(fields[7])
    return ElfInfo(bits, machine, flags, tuple(aligns))

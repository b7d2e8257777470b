"""The HTP (Hexagon) architecture of a chip: files and messages spell it "v79", QNN's options and the context
binaries' markers take the number 79. One type reads every spelling, so that each place compares, sorts and writes
it the same way."""

from __future__ import annotations

import re
from dataclasses import dataclass

from qnndeploy.base.errors import BadInput

_SPELLED = re.compile(r"[vV]?([1-9][0-9]{1,2})")  # v79, V79, 79: two or three digits, as the schemas allow


@dataclass(frozen=True, order=True)
class HtpArch:
    """An HTP arch, ordered by its number (v68 < v73 < v79); `str()` gives "v79", as files write it."""

    number: int

    @classmethod
    def parse(cls, arch: str | int) -> HtpArch:
        """From "v79", "V79", "79" or 79; anything else is a BadInput naming it."""
        if isinstance(arch, int) and not isinstance(arch, bool) and 10 <= arch <= 999:
            return cls(arch)
        found = _SPELLED.fullmatch(arch) if isinstance(arch, str) else None
        if found is None:
            raise BadInput(f"{arch!r} is not an HTP arch: give it as v79 (or 79)")
        return cls(int(found.group(1)))

    def __str__(self) -> str:
        return f"v{self.number}"

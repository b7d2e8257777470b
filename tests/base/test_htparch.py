"""The HTP arch is read once, whatever its spelling, and written as files write it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qnndeploy.base.errors import BadInput
from qnndeploy.base.htparch import HtpArch
from qnndeploy.base.socs import catalog


def test_every_spelling_is_one_arch() -> None:
    assert HtpArch.parse("v79") == HtpArch.parse(79) == HtpArch.parse("V79") == HtpArch.parse("79") == HtpArch(79)
    assert HtpArch.parse("v79").number == 79
    assert str(HtpArch.parse(79)) == "v79"


def test_arches_sort_by_number_not_text() -> None:
    assert sorted(["v81", "v100", "v69", "v73"], key=HtpArch.parse) == ["v69", "v73", "v81", "v100"]
    assert HtpArch(68) < HtpArch(73) <= HtpArch.parse("v73")


@pytest.mark.parametrize("garbage", ["", "v", "vv79", " v79", "v79 ", "v7", "v079", "v1000", "v\u0667\u0669",
                                     "x79", 7, 1000, True, None, 79.0])
def test_garbage_is_one_line_bad_input(garbage: object) -> None:
    with pytest.raises(BadInput) as e:
        HtpArch.parse(garbage)  # type: ignore[arg-type]
    assert "\n" not in str(e.value) and "v79" in str(e.value)


def test_the_catalog_spells_every_arch_as_it_reads() -> None:
    """socs.json writes each arch the way HtpArch writes it back, so reading and writing it changes nothing."""
    for soc in catalog():
        assert str(soc.htp_arch) == soc.dsp_arch and soc.arch_number == soc.htp_arch.number


# The spellings of a hand-made arch parse or print: int(arch[1:]), arch.removeprefix("v"), f"v{number}".
HAND_PARSED = re.compile(r"""arch[a-z_]*\)?\[1:\]|(?:removeprefix|lstrip)\(["']v["']\)|f["']v\{[a-z_.]*arch""")
# Where it stays, and why: the decision's library names must match its Kotlin twin's for any string (it drops one
# leading "v" as Kotlin's removePrefix does, so garbage gives the same names on both sides); `socs` prints the
# catalog's measured arch numbers, and the CLI reaches the library through qnndeploy.api alone, which has no HtpArch.
LENIENT = {"qnndeploy/decide/decision.py", "qnndeploy/cli/socs.py"}


def test_no_module_parses_an_arch_by_hand() -> None:
    package = Path(__file__).resolve().parents[2] / "qnndeploy"
    found = [f"{path.relative_to(package.parent)}:{n}: {line.strip()}"
             for path in sorted(package.rglob("*.py")) if path.relative_to(package.parent).as_posix() not in LENIENT
             for n, line in enumerate(path.read_text().splitlines(), 1) if HAND_PARSED.search(line)]
    assert not found, f"read and write an HTP arch with base.htparch.HtpArch: {found}"

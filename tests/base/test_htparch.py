"""The HTP arch is read once, whatever its spelling, and written as files write it."""

from __future__ import annotations

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

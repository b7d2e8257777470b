"""The bounded reader of numbers from phones, tools and records (qnndeploy/base/numbers.py)."""

from __future__ import annotations

import json
import math

import pytest

from qnndeploy.base import numbers
from qnndeploy.base.fileio import write_json


@pytest.mark.parametrize(("text", "problem"), [
    ("1.2.3", "is not a number"), ("9" * 5000, "5,000 digits, over the limit of 40"), ("-1", "is negative"),
    ("1e400", "is not finite"), ("nan", "is not a number"), ("inf", "is not a number"), ("²", "is not a number"),
    ("١٢", "is not a number"), ("0x10", "is not a number"), ("1e99999", "is not a number"), ("2e6", "is over 1e+06"),
])
def test_garbage_is_none_with_its_reason(text, problem):
    reading = numbers.read(text, low=0, high=1e6)
    assert reading.value is None and reading.problem is not None and problem in reading.problem, reading


def test_numbers_read_as_numbers():
    assert numbers.read(" 0.000123 ").value == 0.000123 and numbers.read("5.").value == 5.0
    assert numbers.read(".5e-3").value == 0.0005 and numbers.integer("-42") == -42
    assert numbers.integer("1" * 20) == int("1" * 20) and numbers.integer("1" * 21) is None
    assert numbers.integer("1.5") is None and numbers.read(None) == (None, None) and numbers.read("  ") == (None, None)
    assert numbers.integer("7", high=6) is None and numbers.decimal("3", low=0) == 3.0


def test_strict_nulls_what_json_cannot_hold_and_names_it(tmp_path):
    data, nulled = numbers.strict({"a": [1.0, math.inf], "b": {"c": -math.inf, "d": math.nan}, "e": "inf"})
    assert data == {"a": [1.0, None], "b": {"c": None, "d": None}, "e": "inf"}
    assert nulled == ["a[1]: inf", "b.c: -inf", "b.d: nan"]
    write_json(tmp_path / "r.json", {"x": math.inf, "y": [math.nan], "z": 1})

    def refuse(name: str) -> object:
        raise ValueError(name)
    assert json.loads((tmp_path / "r.json").read_text(), parse_constant=refuse) == {"x": None, "y": [None], "z": 1}

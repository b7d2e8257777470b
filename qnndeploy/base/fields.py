"""One field of a JSON object, read leniently: what every reader of a qnndeploy file that must take old or broken
files (the bench and estimate records, the report, a record's figures judged again) shares, so a value reads the
same wherever it is read.

A missing or wrongly typed optional field reads as "not there" (None, empty); a field that names the record is
required and its absence is BadInput, whose message says which field. The rules, one per JSON type:
- a number is a JSON int or float, never a bool (Python's bool is an int) and finite (NaN and Infinity, which
  Python's json reads, measure nothing); it reads as a float;
- an integer is a JSON int, never a bool;
- text that is not a string but is there reads as its str() (an old record's number where text is now written).
An object that is not a mapping has no fields: every reader takes any value as `m`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from qnndeploy.base.errors import BadInput


def is_number(value: object) -> TypeGuard[float]:
    """Whether the value is a number by the rule above."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _get(m: object, key: str) -> Any:
    return m.get(key) if isinstance(m, Mapping) else None


def _required(m: object, key: str) -> Any:
    if not isinstance(m, Mapping):
        raise BadInput(f"an object is expected where {key!r} is read")
    if key not in m:
        raise BadInput(f"it has no {key!r}")
    return m[key]


def number(m: object, key: str) -> float | None:
    """A figure: a number, or None where it was not measured (null, absent or not a number)."""
    value = _get(m, key)
    return float(value) if is_number(value) else None


def numbers(values: object) -> list[float]:
    """The numbers of a list, the rest left out; empty when it is not a list."""
    return [float(v) for v in values if is_number(v)] if isinstance(values, list) else []


def integer(m: object, key: str) -> int | None:
    value = _get(m, key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def flag(m: object, key: str) -> bool | None:
    value = _get(m, key)
    return value if isinstance(value, bool) else None


def required_flag(m: object, key: str) -> bool:
    value = _required(m, key)
    if not isinstance(value, bool):
        raise BadInput(f"{key!r} is not true or false")
    return value


def text(m: object, key: str) -> str:
    """Text that names the record: BadInput when it is absent or not a string."""
    value = _required(m, key)
    if not isinstance(value, str):
        raise BadInput(f"{key!r} is not text")
    return value


def opt_text(m: object, key: str) -> str | None:
    value = _get(m, key)
    return value if isinstance(value, str) else None if value is None else str(value)


def texts(m: object, key: str) -> list[str]:
    """A list's items as text (str() of each); empty when it is absent or not a list."""
    value = _get(m, key)
    return [str(v) for v in value] if isinstance(value, list) else []


def obj(m: object, key: str) -> dict[str, Any]:
    """The object under key (a copy); empty when it is absent or not an object."""
    value = _get(m, key)
    return dict(value) if isinstance(value, Mapping) else {}


def items(m: object, key: str) -> list[Any]:
    """The list under key; empty when it is absent or not a list."""
    value = _get(m, key)
    return value if isinstance(value, list) else []


def objects(m: object, key: str, *, required: bool = False) -> list[Mapping[str, Any]]:
    """The list of objects under key; empty when it is absent or null (unless required). BadInput when it is
    something else: a list of objects that is not one is a broken record, not an old one."""
    value = _required(m, key) if required else _get(m, key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise BadInput(f"{key!r} is not a list of objects")
    return value

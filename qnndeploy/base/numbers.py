"""Numbers read from a phone, a tool or a record, through one bounded reader: ASCII digits only, a digit limit, a
finite value, sign and range checks; garbage is None with the reason in words (the caller's null and note, or its
one-line error), never an exception. And the other way: a JSON value made strict, its non-finite numbers null."""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

INT_DIGITS = 20  # up to 2**64, e.g. date +%s%N; int() refuses over 4,300 digits, isdigit() takes '²'
DECIMAL_DIGITS = 40  # digits of a decimal, before its exponent: a tool prints about 10
_INT = re.compile(r"[+-]?([0-9]+)")
_DECIMAL = re.compile(r"[+-]?(?:([0-9]+)(?:\.([0-9]*))?|\.([0-9]+))(?:[eE]([+-]?[0-9]{1,4}))?")


class Reading(NamedTuple):
    """A number read from text: its value, or None with `problem`, why (None too when there was no text at all)."""

    value: float | None
    problem: str | None = None


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else f"{text[:20]}…{text[-8:]} ({len(text):,} characters)")


def read(text: str | None, *, integer: bool = False, digits: int | None = None, low: float | None = None,
         high: float | None = None) -> Reading:
    """`text` (surrounding space ignored) as a number: an integer (`integer`) or a decimal with an optional exponent,
    of at most `digits` digits, finite, within [low, high]. Anything else is None and the reason ("'1.2.3' is not a
    number", "-5 is negative", "has 5,000 digits, over the limit of 20")."""
    if text is None or not text.strip():
        return Reading(None)
    text = text.strip()
    limit = digits if digits is not None else INT_DIGITS if integer else DECIMAL_DIGITS
    m = (_INT if integer else _DECIMAL).fullmatch(text)
    if m is None:
        return Reading(None, f"{_shown(text)} is not {'an integer' if integer else 'a number'}")
    count = sum(len(g) for g in (m.groups() if integer else m.groups()[:3]) if g)
    if count > limit:
        return Reading(None, f"{_shown(text)} has {count:,} digits, over the limit of {limit}")
    value: float = int(text) if integer else float(text)
    if not math.isfinite(value):
        return Reading(None, f"{_shown(text)} is not finite")
    if low is not None and value < low:
        return Reading(None, f"{_shown(text)} is negative" if low == 0 else f"{_shown(text)} is below {low:g}")
    if high is not None and value > high:
        return Reading(None, f"{_shown(text)} is over {high:g}")
    return Reading(value)


def integer(text: str | None, *, digits: int = INT_DIGITS, low: int | None = None,
            high: int | None = None) -> int | None:
    """An integer a phone or tool printed, or None (see read)."""
    value = read(text, integer=True, digits=digits, low=low, high=high).value
    return int(value) if value is not None else None


def decimal(text: str | None, *, digits: int = DECIMAL_DIGITS, low: float | None = None,
            high: float | None = None) -> float | None:
    """A finite decimal a phone or tool printed, or None (see read)."""
    return read(text, digits=digits, low=low, high=high).value


def strict(data: Any, where: str = "") -> tuple[Any, list[str]]:
    """A copy of JSON-like `data` (dicts, lists, tuples, scalars) whose non-finite floats (NaN, Infinity, which strict
    JSON cannot hold) are None, and the dotted names of the figures so nulled ("paths.npu.latency_ms.p50: inf")."""
    nulled: list[str] = []

    def walk(value: Any, at: str) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            nulled.append(f"{at or '(top)'}: {value}")
            return None
        if isinstance(value, dict):
            return {k: walk(v, f"{at}.{k}" if at else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, f"{at}[{i}]") for i, v in enumerate(value)]
        return value

    return walk(data, where), nulled


def figure(value: object, *, low: float | None = None, high: float | None = None) -> float | None:
    """A number as parsed JSON or a client library gives it: a finite int or float within [low, high] as a float,
    else None (a bool, text, NaN, Infinity, an integer beyond 2**64 that float() would overflow on)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int) and value.bit_length() > 64:
        return None
    number = float(value)
    if not math.isfinite(number) or (low is not None and number < low) or (high is not None and number > high):
        return None
    return number

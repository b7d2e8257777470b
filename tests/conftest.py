"""Shared test helpers. Under CI=true a missing tool fails the test; on a developer machine it skips."""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def require(present: bool, what: str) -> None:
    """Skip locally, fail in CI: CI must install every tool the suite needs."""
    if present:
        return
    if IN_CI:
        pytest.fail(f"{what} is missing in CI: .ci/run must install it")
    pytest.skip(f"{what} is not installed")

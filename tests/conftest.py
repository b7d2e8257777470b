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


@pytest.fixture(autouse=True, scope="session")
def private_compile_cache(tmp_path_factory):
    """Every compile in the suite really compiles: no hits from the user's ~/.cache/qnndeploy or an earlier run."""
    os.environ["QNNDEPLOY_CACHE_DIR"] = str(tmp_path_factory.mktemp("compile-cache"))
    yield
    os.environ.pop("QNNDEPLOY_CACHE_DIR", None)

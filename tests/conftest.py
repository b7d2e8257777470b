"""Shared test helpers. Under CI=true a missing tool fails the test; on a developer machine it skips.

Markers (pyproject.toml): slow (the fast tier is `pytest -m "not slow"`), needs_adb, needs_kotlin, needs_qnn; a
test marked needs_X is skipped locally, and failed in CI, when X is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def require(present: bool, what: str) -> None:
    """Skip locally, fail in CI: CI must install every tool the suite needs."""
    if present:
        return
    if IN_CI:
        pytest.fail(f"{what} is missing in CI: .ci/run must install it")
    pytest.skip(f"{what} is not installed")


@cache
def find_kotlinc() -> Path | None:
    """$KOTLINC, kotlinc on PATH, or the npm package kotlin-compiler."""
    if os.environ.get("KOTLINC"):
        return Path(os.environ["KOTLINC"])
    found = shutil.which("kotlinc")
    if found:
        return Path(found)
    if shutil.which("npm"):
        root = subprocess.run(["npm", "root", "-g"], check=False, capture_output=True, text=True).stdout.strip()
        candidate = Path(root) / "kotlin-compiler" / "bin" / "kotlinc"
        if candidate.is_file():
            return candidate
    return None


def _qnn() -> bool:
    from qnndeploy.qnn import htp

    return htp.available()


NEEDS = {
    "needs_adb": (lambda: shutil.which("adb") is not None, "adb (Debian package adb)"),
    "needs_kotlin": (lambda: find_kotlinc() is not None, "kotlinc (npm package kotlin-compiler)"),
    "needs_qnn": (_qnn, "onnxruntime-qnn (the QNN HTP backend)"),
}


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker, (present, what) in NEEDS.items():
        if item.get_closest_marker(marker):
            require(present(), what)


@pytest.fixture(autouse=True, scope="session")
def private_compile_cache(tmp_path_factory):
    """Every compile in the suite really compiles: no hits from the user's ~/.cache/qnndeploy or an earlier run."""
    os.environ["QNNDEPLOY_CACHE_DIR"] = str(tmp_path_factory.mktemp("compile-cache"))
    os.environ["QNNDEPLOY_EMULATED_DIR"] = str(tmp_path_factory.mktemp("emulated"))  # what deep verify loaded
    yield
    os.environ.pop("QNNDEPLOY_CACHE_DIR", None)
    os.environ.pop("QNNDEPLOY_EMULATED_DIR", None)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def pids_mentioning(text: str) -> list[int]:
    """Processes whose command line contains `text` (a compile worker names its job spec inside the build folder)."""
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if text in (p / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(p.name))
        except OSError:
            pass  # ended meanwhile
    return found


WHEELHOUSE_ENV = "QNNDEPLOY_TEST_WHEELS"  # .ci/run downloads every toolchain's wheels there (tests/qnn_facts.py)


def wheelhouse() -> Path:
    return Path(os.environ.get(WHEELHOUSE_ENV) or Path.home() / ".cache" / "qnndeploy-tests" / "wheels")


@pytest.fixture(scope="session")
def toolchains():
    """Every toolchain of runtime.json installed by qnndeploy's own installer (pip --target) from the local
    wheelhouse, never from the network (PIP_NO_INDEX): compile --qairt's real install path. The toolchains folder
    is kept between runs on a developer machine; CI starts without it."""
    from qnndeploy.qnn import toolchain

    house = wheelhouse()
    missing = [w for tc in toolchain.known() if not toolchain.is_current(tc)
               if not any(house.glob(f"onnxruntime_qnn-{tc.onnxruntime_qnn}-*.whl"))
               for w in [tc.onnxruntime_qnn]]
    require(not missing, f"the wheels of onnxruntime-qnn {', '.join(missing)} in {house} "
                         "(pip download --no-deps -d DIR $(python -m tests.qnn_facts --wheels))")
    saved = {k: os.environ.get(k) for k in (toolchain.ENV_DIR, "PIP_NO_INDEX", "PIP_FIND_LINKS")}
    os.environ[toolchain.ENV_DIR] = str(house.parent / "toolchains")
    os.environ["PIP_NO_INDEX"], os.environ["PIP_FIND_LINKS"] = "1", str(house)
    for tc in toolchain.known():
        if not toolchain.is_current(tc):
            toolchain.install(tc)
    yield toolchain.known()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v

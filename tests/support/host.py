"""The machine the tests run on: which tools it has (under CI=true a missing tool fails the test; on a developer
machine it skips), its processes, and the local wheelhouse of the toolchains."""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def shipped_files(folder: Path) -> list[Path]:
    """The files under a package folder as the package ships them: not the bytecode caches (__pycache__/*.pyc) an
    import writes there, e.g. into templates/ after an editable install."""
    return sorted(p for p in Path(folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix not in (".pyc", ".pyo"))


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


WHEELHOUSE_ENV = "QNNDEPLOY_TEST_WHEELS"  # .ci/run downloads every toolchain's wheels there (support/qnn_facts.py)


def wheelhouse() -> Path:
    return Path(os.environ.get(WHEELHOUSE_ENV) or Path.home() / ".cache" / "qnndeploy-tests" / "wheels")

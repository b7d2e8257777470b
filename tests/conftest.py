"""The suite's hooks and session fixtures; the helpers are in support/. Under CI=true a missing tool fails the
test; on a developer machine it skips.

Markers (pyproject.toml): slow (the fast tier is `pytest -m "not slow"`), needs_adb, needs_kotlin, needs_qnn; a
test marked needs_X is skipped locally, and failed in CI, when X is missing.
"""

from __future__ import annotations

import functools
import os
import shutil

import pytest

from tests.support.host import find_kotlinc, require, wheelhouse


def _qnn() -> bool:
    from qnndeploy.qnn import htp

    return htp.available()


NEEDS = {
    "needs_adb": (lambda: shutil.which("adb") is not None, "adb (Debian package adb)"),
    "needs_kotlin": (lambda: find_kotlinc() is not None, "kotlinc (npm package kotlin-compiler)"),
    "needs_qnn": (_qnn, "onnxruntime-qnn (the QNN HTP backend)"),
}


# The longest files, measured (pytest --durations=0): a third of the suite's time. Collected first, so that
# pytest-xdist's --dist loadfile starts them on both workers at once and the short files fill in the end; collected
# in their place, the fuzz tier started last and ran alone for its two minutes.
LONGEST_FIRST = ("tests/cli/test_fuzz.py", "tests/test_corpus.py", "tests/test_benchmarks.py",
                 "tests/scaffold/test_kotlin.py", "tests/validate/test_validate.py",
                 "tests/validate/test_validate_loop.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {f: i for i, f in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker, (present, what) in NEEDS.items():
        if item.get_closest_marker(marker):
            require(present(), what)


@pytest.fixture(autouse=True, scope="session")
def private_compile_cache(tmp_path_factory):
    """Every compile in the suite really compiles: no hits from the user's ~/.cache/qnndeploy or an earlier run."""
    os.environ["QNNDEPLOY_CACHE_DIR"] = str(tmp_path_factory.mktemp("compile-cache"))
    os.environ["QNNDEPLOY_EMULATED_DIR"] = str(tmp_path_factory.mktemp("emulated"))  # what deep verify loaded
    # Without a terminal, progress lines start once a command has run 2 s: on a loaded machine a quick command's
    # one-line error would gain one. Here they never start, except in the tests of progress, which set their own.
    os.environ["QNNDEPLOY_PROGRESS_QUIET_S"] = "3600"
    yield
    os.environ.pop("QNNDEPLOY_CACHE_DIR", None)
    os.environ.pop("QNNDEPLOY_EMULATED_DIR", None)


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
                         "(pip download --no-deps -d DIR $(python -m tests.support.qnn_facts --wheels))")
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


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """A `qnndeploy demo` output folder (model/, build/, bundle/) made by the installed onnxruntime-qnn, one per test
    module: a module may change it."""
    from qnndeploy.demo import run_demo
    from qnndeploy.qnn import htp

    require(htp.available(), "onnxruntime-qnn")
    out = tmp_path_factory.mktemp("demo") / "run"
    run_demo(out)
    return out


@pytest.fixture(scope="module")
def demo_bundle(demo_run):
    """The demo's bundle folder (demo_run's bundle/kws-demo-1.0.0)."""
    return next((demo_run / "bundle").iterdir())


@pytest.fixture(scope="session")
def llm_export(tmp_path_factory):
    """Decoder LLMs exported once per session (tests/support/llm.py): llm_export(spec, dynamo=...) -> Exported."""
    from tests.support import llm

    return functools.partial(llm.cached_export, tmp_path_factory.mktemp("llm"))

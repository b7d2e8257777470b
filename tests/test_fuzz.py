"""The fuzz tier: every case of tests/fuzz.py run as a user would, one process each, under the invariant that
fuzz.py states. Run alone with `pytest -m fuzz`; it is part of the slow tier."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bundles
import fuzz
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.fuzz, pytest.mark.needs_qnn]

DOCUMENTED_EXITS = {0, 1, 2, 3, 10, 11}
TIME_LIMIT_S = 10.0
MEMORY_LIMIT_MB = 300


@pytest.fixture(scope="module")
def good_bundle(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("good")
    return bundles.build(root / "bundles", bundles.compile_inputs(root / "inputs", targets=("SM8550", "SM8750"),
                                                                  graphs=("det", "rec"), external=("det",)))


def run_case(case: fuzz.Case, folder: Path) -> str | None:
    """None when the case keeps the invariant, else what broke it."""
    home, tmp = folder / "home", folder / "tmp"
    for d in (home, tmp):
        d.mkdir(parents=True)
    case.setup(folder)
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(home / ".cache")}
    start = time.monotonic()
    with (folder / "stdout").open("w") as out, (folder / "stderr").open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "qnndeploy", *case.args], cwd=folder, env=env, stdout=out,
                                stderr=err, stdin=subprocess.DEVNULL)
        timer = threading.Timer(TIME_LIMIT_S, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)  # this process's own peak memory, not the suite's
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait or signal again
    seconds = time.monotonic() - start
    stderr = (folder / "stderr").read_text(errors="replace")
    (folder / "stdout").unlink()
    (folder / "stderr").unlink()
    if seconds >= TIME_LIMIT_S:
        return f"hangs (over {TIME_LIMIT_S:.0f} s)"
    if usage.ru_maxrss / 1024 > MEMORY_LIMIT_MB:
        return f"used {usage.ru_maxrss / 1024:.0f} MB"
    done = subprocess.CompletedProcess(case.args, proc.returncode, "", stderr)
    if done.returncode < 0:
        return f"killed by signal {-done.returncode}: {done.stderr[-300:]}"
    if "Traceback" in done.stderr:
        return f"traceback: {done.stderr.strip().splitlines()[-1]}"
    if done.returncode not in DOCUMENTED_EXITS:
        return f"undocumented exit {done.returncode}"
    if case.broken and done.returncode == 0:
        return "accepted (exit 0)"
    if done.returncode == 2 and len(done.stderr.strip().splitlines()) != 1:
        return f"bad input but not a one-line error: {done.stderr[:300]!r}"
    left = [p.relative_to(folder).as_posix() for d in (home, tmp) for p in d.rglob("*")]
    return f"left files behind: {left[:5]}" if left else None


def test_every_hostile_input_is_refused_cleanly(good_bundle, tmp_path):
    cases = fuzz.all_cases(good_bundle)
    assert len(cases) >= 500
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda ic: run_case(ic[1], tmp_path / str(ic[0])), enumerate(cases)))
    broken = [f"{case.name}: {why}" for case, why in zip(cases, results, strict=True) if why]
    assert broken == [], f"{len(broken)} of {len(cases)} cases broke the invariant:\n" + "\n".join(broken[:80])

"""The fuzz tier: every case of tests/fuzz.py run as a user would, one process each, under the invariant that
fuzz.py states. Run alone with `pytest -m fuzz`; it is part of the slow tier."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bundles
import fuzz
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.fuzz, pytest.mark.needs_qnn]

DOCUMENTED_EXITS = {0, 1, 2, 3, 10, 11}
TIME_LIMIT_S = 10.0
MEMORY_LIMIT_MB = 300
# Runs the command as its child and writes the child's peak RSS (kB): a process forked straight from this test
# process would count the test's own memory in its peak. A signal that ends the child ends this launcher too.
MEASURE = """import os, resource, signal, subprocess, sys
code = subprocess.run(sys.argv[2:], check=False).returncode
with open(sys.argv[1], "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


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
    before = snapshot(folder) if case.unchanged else None
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(home / ".cache")}
    with (folder / "stdout").open("w") as out, (folder / "stderr").open("w") as err:
        proc = subprocess.Popen([sys.executable, "-c", MEASURE, str(folder / "rss"), sys.executable, "-m", "qnndeploy",
                                 *case.args], cwd=folder, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            proc.wait(timeout=TIME_LIMIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return f"hangs (over {TIME_LIMIT_S:.0f} s)"
    stderr = (folder / "stderr").read_text(errors="replace")
    peak_mb = int((folder / "rss").read_text()) / 1024
    for name in ("stdout", "stderr", "rss"):
        (folder / name).unlink()
    if peak_mb > MEMORY_LIMIT_MB:
        return f"used {peak_mb:.0f} MB"
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
    if left:
        return f"left files behind: {left[:5]}"
    if before is not None and snapshot(folder) != before:
        after = snapshot(folder)
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        return f"wrote or changed files: {changed[:5]}"
    return None


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under a case's folder: a file's sha256, 'dir', or a symlink's target (never followed)."""
    out = {}
    for top, dirs, files in os.walk(folder):  # not into symlinked folders
        for name in dirs + files:
            p = Path(top, name)
            out[p.relative_to(folder).as_posix()] = (f"-> {p.readlink()}" if p.is_symlink() else "dir" if p.is_dir()
                                                     else hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def test_every_hostile_input_is_refused_cleanly(good_bundle, tmp_path):
    cases = fuzz.all_cases(good_bundle)
    assert len(cases) >= 280, len(cases)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda ic: run_case(ic[1], tmp_path / str(ic[0])), enumerate(cases)))
    broken = [f"{case.name}: {why}" for case, why in zip(cases, results, strict=True) if why]
    assert broken == [], f"{len(broken)} of {len(cases)} cases broke the invariant:\n" + "\n".join(broken[:80])

"""Start-up time of the command line: `qnndeploy --help`, `qnndeploy check --help` and `qnndeploy bundle verify
--help`, each against `python -c "import click"` in the same run (issue 23: at most 100 ms more). The CLI imports
a command's module only when that command runs or its help is asked for; what is left is Python's own start, click
and the modules every command shares. The contenders alternate; prints medians of --repeat runs (a start-up is
tens of milliseconds, so the default is many runs). Each runs once untimed first, with PYTHONDONTWRITEBYTECODE
unset, so that qnndeploy's modules are timed from their .pyc files as after `pip install` (which compiles them),
as click's are: compiling qnndeploy's sources at every start would time the compiler, not the start-up.

    python benchmarks/startup.py [--repeat 21] [--smoke]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchlib import QNNDEPLOY, Target, fail, median, parse, parser, table

REFERENCE = "python -c 'import click'"
CONTENDERS = {REFERENCE: [sys.executable, "-c", "import click"],
              "qnndeploy --help": [*QNNDEPLOY, "--help"],
              "qnndeploy check --help": [*QNNDEPLOY, "check", "--help"],
              "qnndeploy bundle verify --help": [*QNNDEPLOY, "bundle", "verify", "--help"]}
LIMIT_MS = 100
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(cmd: list[str]) -> float:
    """Seconds from start to exit (benchlib.run polls for peak RSS every 20 ms: too coarse for a start-up)."""
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          env=ENV, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        fail(f"{' '.join(cmd[2:])} exited {done.returncode}: {done.stderr.decode(errors='replace').strip()}")
    return elapsed


def main() -> None:
    args = parse(parser(__doc__, repeat=21))
    for cmd in CONTENDERS.values():
        wall(cmd)  # writes the .pyc files
    seconds: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    for _ in range(args.repeat):
        for name, cmd in CONTENDERS.items():
            seconds[name].append(wall(cmd))
    ref = median(seconds[REFERENCE]) * 1000
    print(f"median of {args.repeat} run(s) each, alternating; {sys.executable}")
    rows, targets = [], []
    for name, times in seconds.items():
        ms = median(times) * 1000
        rows.append([name, f"{ms:.0f}", "reference" if name == REFERENCE else f"{ms - ref:+.0f}",
                     "" if name == REFERENCE else f"{ms / ref:.2f}x"])
        targets.append([] if name == REFERENCE else [Target("more than import click", ms - ref, "<=", LIMIT_MS,
                                                            " ms")])
    table(["", "ms", "difference ms", "ratio"], rows, targets)


if __name__ == "__main__":
    main()

"""The one runner of qnndeploy's command line for the tests, and the reader of its --json output.

`run(...)` invokes the CLI in this process through click's CliRunner and returns click's Result (exit_code,
stdout, stderr, output, exception): fast, and a test sees an uncaught exception as such. `run(..., process=True)`
starts it the way a user does, as a process of its own, and returns the CompletedProcess (returncode, stdout,
stderr): for what only a process shows (a fresh interpreter, signals, another toolchain's onnxruntime, the real
start-up). Arguments may be any objects (paths, numbers); each is passed as str().
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, overload

from click.testing import CliRunner, Result

from qnndeploy.cli import cli

# The qnndeploy this Python imports, as its own process; -P keeps the working folder off sys.path, as the
# `qnndeploy` console script does (a test may run it in a folder of hostile files).
PROGRAM = [sys.executable, "-P", "-m", "qnndeploy"]
TIMEOUT_S = 600  # a process that runs longer is a hang: the test fails instead of waiting forever


@overload
def run(*args: object, process: Literal[False] = False, color: bool = False, catch_exceptions: bool = True,
        input: str | None = None) -> Result: ...
@overload
def run(*args: object, process: Literal[True], cwd: Path | None = None, env: Mapping[str, str] | None = None,
        input: str | None = None, timeout: float | None = TIMEOUT_S) -> subprocess.CompletedProcess[str]: ...
def run(*args: object, process: bool = False, color: bool = False, catch_exceptions: bool = True,
        input: str | None = None, cwd: Path | None = None, env: Mapping[str, str] | None = None,
        timeout: float | None = TIMEOUT_S) -> Result | subprocess.CompletedProcess[str]:
    """`qnndeploy ARGS...`. In process (default): `color` as on a terminal (click strips nothing itself),
    `catch_exceptions=False` lets an uncaught exception propagate into the test. `input`: stdin's text. As a
    process: `cwd` and `env` (the whole environment; default: this one's) of the child, and its `timeout`."""
    argv = [str(a) for a in args]
    if process:
        return subprocess.run([*PROGRAM, *argv], capture_output=True, text=True, timeout=timeout, check=False,
                              cwd=cwd, env=env, input=input)
    return CliRunner().invoke(cli, argv, color=color, catch_exceptions=catch_exceptions, input=input)


def parsed(stdout: str) -> Any:
    """A command's --json output, or None when it printed none (or something else)."""
    try:
        return json.loads(stdout) if stdout.strip() else None
    except ValueError:
        return None

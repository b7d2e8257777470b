"""How qnndeploy starts its Python children (compile workers, the libQnnSystem reader, a command under another QAIRT
toolchain): this qnndeploy, by module name, with the current folder never on the import path, so that a
`qnndeploy/` (or `onnx/`, `numpy/`…) folder where the user runs a command is never imported and run."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import qnndeploy
from qnndeploy.base import interrupt

HERE = str(Path(qnndeploy.__file__).resolve().parents[1])  # the folder this qnndeploy package is in


def python(*args: str) -> list[str]:
    """`python -P ARGS`: -P (safe path) keeps the current folder and the script's folder off sys.path."""
    return [sys.executable, "-P", *args]


def module(name: str, *args: str) -> list[str]:
    """`python -P -m qnndeploy.NAME ARGS` (NAME may be empty for `python -m qnndeploy`)."""
    return python("-m", f"qnndeploy.{name}" if name else "qnndeploy", *args)



# Run before a tool's own exec: PR_SET_PDEATHSIG (1) = SIGKILL (9), so the tool dies with its parent even when the
# parent is killed with SIGKILL; the parent check covers a parent that died before prctl took effect. A separate
# exec, not a preexec_fn: code run between fork and exec in a threaded process can deadlock.
_DIE_WITH_PARENT = ("import ctypes, os, sys\n"
                    "ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"
                    "os.getppid() == int(sys.argv[1]) or os._exit(1)\n"
                    "os.execvp(sys.argv[2], sys.argv[2:])\n")


def dies_with_parent(cmd: list[str]) -> list[str]:
    """`cmd` run so that it gets SIGKILL when this process dies (Linux; elsewhere `cmd` as is): a killed command
    leaves no child writing on after it."""
    if not sys.platform.startswith("linux"):
        return cmd
    return [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), *cmd]


def environ(first: list[str] | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: the import path starts with `first`, then this qnndeploy's folder, then what
    PYTHONPATH held; PYTHONSAFEPATH for any Python the child starts in turn."""
    env = dict(os.environ if base is None else base)
    paths = [*(first or []), HERE, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    return {**env, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)), "PYTHONSAFEPATH": "1"}


def wait(proc: subprocess.Popen[bytes], timeout: float | None, tick: Callable[[], None] | None = None) -> int | None:
    """Wait for a child started with start_new_session=True, checking for a stop request (interrupt.check raises
    it) and calling `tick` every 0.1 s; its exit code, or None when `timeout` ran out. A child that is still running
    when this returns or raises (stopped, over time, Ctrl-C) is killed with its process group: no native compile
    outlives the wait."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            try:
                return proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                interrupt.check()
                if deadline is not None and time.monotonic() > deadline:
                    return None
            finally:
                if tick is not None:
                    tick()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def trim_heap() -> None:
    """Give the heap's freed pages back to the system before starting children that need the memory: glibc keeps
    them. Measured: compile's calibration loop over Whisper large-v3's parts left 7.2 GB resident after its
    onnxruntime sessions were gone (78 MB after this), and the compile worker started next was OOM-killed."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing kept this way, or nothing to ask
        ctypes.CDLL("libc.so.6").malloc_trim(0)

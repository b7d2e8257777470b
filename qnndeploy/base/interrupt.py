"""Stopping at safe points, and what was published before: state of one run, owned by its caller, not the library.

A SIGTERM handler may only set a flag (raising inside it could land in a native module's import); long loops call
check() at safe points and unwind through their usual cleanup. The flag, and the list of outputs published so far,
belong to the Run the caller entered (`with Run() as run:`, as the CLI does per command, or a script that wants to
stop work from another thread). Library code finds it through a context variable, so two runs in one process (tests,
a notebook) never see each other's stop, and work started with no Run is never stopped and records nothing. Worker
threads see their caller's Run only when started through base/pool.py's Pool (a plain ThreadPoolExecutor starts its
tasks in an empty context).
"""

from __future__ import annotations

import contextvars
import threading
from pathlib import Path
from types import TracebackType


class Run:
    """One run's stop request and publications. Enter it around the work; stop() from any thread or a handler."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self.published: list[Path] = []  # complete outputs put in place, in order, for an honest interrupt message
        self._token: contextvars.Token[Run | None] | None = None

    def stop(self) -> None:
        """Ask the work to stop at its next safe point."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def __enter__(self) -> Run:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None


_CURRENT: contextvars.ContextVar[Run | None] = contextvars.ContextVar("qnndeploy_run", default=None)


def current() -> Run | None:
    """The Run the calling code runs in, if any."""
    return _CURRENT.get()


def requested() -> bool:
    """Whether the current run was asked to stop."""
    run = _CURRENT.get()
    return run is not None and run.stopping


def check() -> None:
    """A safe point: raise KeyboardInterrupt when the current run was asked to stop, so the cleanup unwinds it."""
    if requested():
        raise KeyboardInterrupt


def record(path: Path) -> None:
    """`path` was published, complete (fileio.replace, the commit point)."""
    run = _CURRENT.get()
    if run is not None:
        run.published.append(path)


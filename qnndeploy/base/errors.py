"""The library's exceptions: one per exit code, each carrying the one-line message a user sees."""

from __future__ import annotations

# Exit codes, the documented contract of the command line (README "Exit codes").
EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # the thing checked has problems (bundle verify, validate, a failed compile job)
EXIT_BAD_INPUT = 2  # bad input or usage: nothing was written
EXIT_MISSING_TOOL = 3  # a tool or package the command needs is not installed
EXIT_NOT_RUN = 4  # device verify: nothing failed, but some graph ran nowhere on the phone (no runner, CPU fallback)


class QnnDeployError(Exception):
    """A failure the user can fix; str() is the whole message, one line. The subclass says which exit code it
    ends in, so callers tell failures apart with `except MissingTool`, not by comparing numbers."""

    exit_code: int = EXIT_BAD_INPUT

    def __init__(self, message: str) -> None:
        super().__init__(message)

    def reworded(self, message: str) -> QnnDeployError:
        """The same kind of failure (and exit code) with another message, e.g. naming the file it came from."""
        return type(self)(message)


class CheckFailed(QnnDeployError):
    """The thing checked has problems: a failed verify, validation or compile job, a phone that failed (exit 1)."""

    exit_code = EXIT_CHECK_FAILED


class BadInput(QnnDeployError):
    """Bad input or usage; nothing was written (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class MissingTool(QnnDeployError):
    """A tool or package the command needs is not installed (exit 3)."""

    exit_code = EXIT_MISSING_TOOL


BY_EXIT_CODE: dict[int, type[QnnDeployError]] = {e.exit_code: e for e in (CheckFailed, BadInput, MissingTool)}


def error_for(exit_code: int, message: str) -> QnnDeployError:
    """The exception for an exit code read back from a child process's answer (an unknown code is a failed check)."""
    return BY_EXIT_CODE.get(exit_code, CheckFailed)(message)


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (native libraries raise multi-line ones), or its type's name."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__

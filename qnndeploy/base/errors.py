"""The one exception type of the library: it carries the one-line message a user sees."""

from __future__ import annotations

# Exit codes, the documented contract of the command line (README "Exit codes").
EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # the thing checked has problems (bundle verify, validate, a failed compile job)
EXIT_BAD_INPUT = 2  # bad input or usage: nothing was written
EXIT_MISSING_TOOL = 3  # a tool or package the command needs is not installed


class QnnDeployError(Exception):
    """A failure the user can fix; str() is the whole message, one line."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (native libraries raise multi-line ones), or its type's name."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__

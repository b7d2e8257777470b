"""The API's own error kind: a refused bundle that carries its report (light, so that the CLI's error handling can
name it without importing a room)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qnndeploy.base.errors import CheckFailed

if TYPE_CHECKING:
    from qnndeploy.verification.checks import VerifyReport


class Unverified(CheckFailed):
    """A bundle that fails `bundle verify`, refused before anything is built on it (exit code 1): the message is
    the one line, `report` the VerifyReport that says why (the CLI shows it first, as `bundle verify` would)."""

    def __init__(self, message: str, report: VerifyReport) -> None:
        super().__init__(message)
        self.report = report

    def reworded(self, message: str) -> Unverified:
        return Unverified(message, self.report)

"""One exception per exit code: the CLI ends in the code of the exception the library raised, and a failure read
back from a child process keeps its kind (so `except MissingTool` sees a missing libQnnSystem, not a number)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qnndeploy.base.errors import BadInput, CheckFailed, MissingTool, QnnDeployError
from qnndeploy.cli import validate as validate_cmd
from qnndeploy.qnn import qnnsystem
from tests.support.cli import run

KINDS = [(CheckFailed, 1), (BadInput, 2), (MissingTool, 3)]  # README "Exit codes"


@pytest.mark.parametrize(("kind", "code"), KINDS)
def test_the_cli_ends_in_the_exit_code_of_the_exception_raised(monkeypatch, tmp_path, kind, code):
    def failing(_build: Path) -> None:
        raise kind("the build says no: do this instead")

    monkeypatch.setattr(validate_cmd, "emulated_qairts", failing)  # the name the command calls
    r = run("validate", tmp_path)
    assert r.exit_code == code and r.stderr == "error: the build says no: do this instead\n"
    r = run("validate", tmp_path, "--json")
    assert r.exit_code == code and json.loads(r.stdout) == {"error": "the build says no: do this instead",
                                                            "exit_code": code}


@pytest.mark.parametrize(("kind", "code"), KINDS)
def test_a_childs_failure_keeps_its_kind(kind, code):
    answer = qnnsystem._answer(Path("a.bin"), json.dumps({"error": "said the child", "exit_code": code}).encode())
    assert type(answer) is kind and isinstance(answer, QnnDeployError) and str(answer) == "said the child"
    reworded = answer.reworded("a.bin: said the child")
    assert type(reworded) is kind and reworded.exit_code == code and str(reworded) == "a.bin: said the child"


def test_a_child_failure_without_a_code_is_a_failed_check():
    assert type(qnnsystem._answer(Path("a.bin"), b'{"error": "crashed"}')) is CheckFailed

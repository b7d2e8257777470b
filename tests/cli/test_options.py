"""The option glossary (qnndeploy/data/options.json): every option of every command is in it as the command takes it,
one name per meaning, and each old name still works where its option is, hidden from --help, with one warning on
stderr and never on stdout."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import click
import pytest

from qnndeploy.base.errors import EXIT_BAD_INPUT
from qnndeploy.cli import cli
from qnndeploy.cli._common import Group, Renamed, glossary
from tests import docgen
from tests.support.cli import run

# Every old name in every command that takes its option: (command, the arguments it needs, the old spelling with
# its value, the new one). A multiple option is given twice: the warning is still said once.
ALIASES = [
    ("prepare", ["m.onnx", "-o", "o.onnx"], ["--cpu", "tail"], ["--cpu-part", "tail"]),
    ("check", ["m.onnx"], ["--qairt-version", "2.49"], ["--qairt", "2.49"]),
    ("compile", ["m.onnx", "--soc", "SM8650", "-o", "build"], ["--qairt-version", "2.49"], ["--qairt", "2.49"]),
    ("bundle build", ["--name", "x", "--version", "1"], ["--qairt-version", "2.51.0"], ["--qairt", "2.51.0"]),
    ("bundle build", ["--name", "x", "--version", "1"], ["--model-name", "whisper"],
     ["--source-model-name", "whisper"]),
    ("bundle build", ["--name", "x", "--version", "1"], ["--perf-mode", "balanced"],
     ["--performance-mode", "balanced"]),
    ("device bench", ["B"], ["--perf-mode", "burst", "--perf-mode=balanced"],
     ["--performance-mode", "burst", "--performance-mode", "balanced"]),
    ("device profile", ["--pid", "1"], ["--minutes", "2"], ["--duration", "120"]),
    ("device bench", ["B"], ["--minutes", "2"], ["--duration", "120"]),
    *((path, needed, ["--samples", "3"], ["--random", "3"])
      for path, needed in (("validate", ["build"]), ("diagnose", ["build/g/SM8650"]), ("device verify", ["B"]),
                           ("device bench", ["B"]))),
]


def command(path: str) -> click.Command:
    found = {ctx.command_path.removeprefix("qnndeploy "): c
             for c, ctx in docgen.commands(cli, click.Context(cli, info_name="qnndeploy", **cli.context_settings))}
    return found[path]


def long_name(option: click.Option) -> str:
    return max(option.opts, key=len)


def test_every_option_is_in_the_glossary_as_the_commands_take_it() -> None:
    seen: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path, option in docgen.command_options():
        found = seen[long_name(option)]
        found["commands"].add(path)
        found["type"].add(docgen.option_kind(option))
        found["metavar"].add(option.metavar or "")
        found["short"].update(o for o in option.opts if not o.startswith("--"))
    entries = glossary()
    assert sorted(seen) == sorted(entries), "an option the glossary lacks, or an entry no command uses"
    for name, found in seen.items():
        entry = entries[name]
        assert found["commands"] == set(entry["commands"]), f"{name}: the commands that take it"
        assert found["type"] == {entry["type"]}, f"{name}: one type everywhere, the glossary's"
        assert found["metavar"] - {""} == set(entry["metavar"]), f"{name}: its metavars"
        assert found["short"] == ({entry["short"]} if "short" in entry else set()), f"{name}: its short name"


def test_one_name_per_meaning() -> None:
    """Names and meanings are each the glossary's once; one parameter of the commands is filled by one option name
    wherever it is; an old name is no longer a name of a command that takes its option."""
    raw = json.loads((docgen.PACKAGE / "data" / "options.json").read_text())["options"]
    names = [e["name"] for e in raw]
    meanings = [e["meaning"].lower() for e in raw]
    assert len(set(names)) == len(names) and names == sorted(names)
    assert len(set(meanings)) == len(meanings)
    filled_by: dict[str, set[str]] = defaultdict(set)
    for _, option in docgen.command_options():
        assert option.name is not None
        filled_by[option.name].add(long_name(option))
    assert not {dest: n for dest, n in filled_by.items() if len(n) > 1}
    for entry in raw:
        assert set(entry) <= {"name", "short", "meaning", "type", "metavar", "commands", "old_names", "old_units"}
        assert set(entry.get("old_units", {})) <= set(entry["old_names"]), entry["name"]
        for path in entry["commands"]:
            taken = {o for p in command(path).params for o in (*p.opts, *p.secondary_opts)}
            assert not taken & set(entry["old_names"]), f"{path}: an old name of {entry['name']} is still an option"


def test_each_old_name_works_wherever_its_option_is() -> None:
    """An option with old names is Renamed (which takes them from the glossary) in every command that has it; no
    command has another hidden option."""
    for path, option in docgen.command_options():
        assert isinstance(option, Renamed) == bool(glossary()[long_name(option)]["old_names"]), (path, option.opts)
    hidden = {(ctx.command_path.removeprefix("qnndeploy "), o)
              for c, ctx in docgen.commands(cli, click.Context(cli, info_name="qnndeploy", **cli.context_settings))
              for p in c.params if isinstance(p, click.Option) and p.hidden for o in p.opts}
    assert not hidden
    covered = {(path, old[0]) for path, _, old, _ in ALIASES}
    assert covered == {(path, old) for e in glossary().values() for path in e["commands"] for old in e["old_names"]}


@pytest.mark.parametrize(("path", "needed", "old", "new"), ALIASES, ids=lambda v: v if isinstance(v, str) else None)
def test_an_old_name_still_works_warns_once_and_is_hidden(path: str, needed: list[str], old: list[str],
                                                          new: list[str], capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cmd = command(path)
    monkeypatch.setattr(Group, "args", [*needed, *old])
    by_new = cmd.make_context(path, [*needed, *new], **cli.context_settings).params
    assert capsys.readouterr().err == ""
    ctx = cmd.make_context(path, [*needed, *old], **cli.context_settings)
    assert ctx.params == by_new
    warning = capsys.readouterr().err
    assert warning.startswith(f"warning: {old[0]} is renamed {new[0]}") and warning.count("\n") == 1
    assert warning.endswith("; the old name goes in the next release\n")
    assert not re.search(rf"{old[0]}(?![\w-])", cmd.get_help(ctx)), f"{path} --help shows {old[0]}"
    if old[1:] == new[1:]:  # a run again under another toolchain (cli/_toolchain.py) is given the new name
        assert not any(a == old[0] or a.startswith(f"{old[0]}=") for a in Group.args) and new[0] in Group.args


def test_an_old_name_in_another_unit_is_converted_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """bench's --minutes M is --duration M*60 (the bench still counts minutes)."""
    bench = command("device bench").make_context("device bench", ["B", "--minutes", "0.5"], **cli.context_settings)
    assert bench.params["minutes"] == 0.5
    assert "--minutes is renamed --duration, which takes 60 times the number (--minutes 2 is --duration 120)" \
        in capsys.readouterr().err
    done = run("device", "bench", "B", "--minutes", "soon")
    assert done.exit_code == EXIT_BAD_INPUT and "'soon' is not a valid float" in done.stderr


def test_an_old_name_beside_its_new_one_is_a_usage_error() -> None:
    done = run("prepare", "m.onnx", "-o", "o.onnx", "--cpu", "tail", "--cpu-part", "head")
    assert done.exit_code == EXIT_BAD_INPUT
    assert "--cpu is the old name of --cpu-part: give --cpu-part alone" in done.stderr


def test_the_warning_stays_off_json_stdout(tmp_path: Path) -> None:
    done = run("device", "bench", tmp_path / "no-bundle", "--perf-mode", "burst", "--json")
    assert done.exit_code == EXIT_BAD_INPUT
    assert json.loads(done.stdout)["exit_code"] == EXIT_BAD_INPUT
    assert done.stderr.count("warning: --perf-mode is renamed --performance-mode") == 1

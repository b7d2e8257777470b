"""The command line as a whole: every command's --help, bare groups, `bundle build` and its alias, one exit code
for a path that is not a bundle, and `qnndeploy cache` over a cache filled by real compiles."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import re
import subprocess
import sys
import typing
import zipfile
from pathlib import Path

import click
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from qnndeploy.base.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED
from qnndeploy.cli import cli
from qnndeploy.cli._common import Renamed
from qnndeploy.compile.cache import TAG_FILE
from tests.support import REPO, bundles
from tests.support.cli import run

ROOT: click.Command = cli  # the top group, as the start of functools.reduce(sub, words, ROOT)


def sub(group: click.Command, word: str) -> click.Command:
    """A group's command by name, as click finds it (the top level loads its commands on demand)."""
    assert isinstance(group, click.Group)
    command = group.get_command(click.Context(group), word)
    assert command is not None, word
    return command


def command_paths(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and group under `group`, as the words that call it."""
    found = []
    for name in group.list_commands(click.Context(group)):
        command = sub(group, name)
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += command_paths(command, (*prefix, name))
    return found


# --- help ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [(), *command_paths()], ids=lambda p: " ".join(p) or "qnndeploy")
def test_every_command_has_help_and_every_option_says_what_it_does(path):
    r = run(*path, "--help")
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"Usage: {' '.join(('cli', *path))} ")  # CliRunner names the program after the group
    command = functools.reduce(sub, path, ROOT)
    assert (command.help or "").strip(), f"{' '.join(path)} has no help text"
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden and param.name != "help":
            assert (param.help or "").strip(), f"{' '.join(path)} {param.opts[0]} has no help text"


@pytest.mark.parametrize("path", [p for p in command_paths() if not isinstance(functools.reduce(sub, p, ROOT),
                                                                              click.Group)], ids=" ".join)
def test_a_command_with_many_options_takes_them_as_one_dataclass(path):
    """cli/_common.gathered: a command with more than 7 parameters takes `args`, a frozen dataclass with one field
    per option (named as the option's parameter, --json apart), and none more."""
    command = functools.reduce(sub, path, ROOT)
    assert command.callback is not None
    fn = inspect.unwrap(command.callback)
    params = list(inspect.signature(fn).parameters)
    options = {p.name for p in command.params} - {"as_json"}
    if params[0] != "args":
        assert len(params) <= 7, f"{' '.join(path)}: {len(params)} parameters; gather them (cli/_common.gathered)"
        return
    kind = typing.get_type_hints(fn)["args"]
    assert dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert {f.name for f in dataclasses.fields(kind)} == options


def test_the_listing_is_each_commands_own_first_help_line():
    from qnndeploy.cli import COMMANDS

    for name, (_, _, line) in COMMANDS.items():
        assert sub(cli, name).get_short_help_str(limit=1000) == line, name


def test_help_imports_no_command_module():
    """`qnndeploy --help` and a command's parsing load only the modules that command needs: the CLI starts fast."""
    code = ("import json, sys\nfrom qnndeploy.cli import main\nsys.argv = ['qnndeploy', *sys.argv[1:]]\ntry:\n"
            "    main()\nexcept SystemExit:\n    pass\nprint(json.dumps(sorted(sys.modules)))")

    def loaded(*args: str, of: tuple[str, ...] = ("qnndeploy", "onnx")) -> list[str]:
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
        return [m for m in json.loads(done.stdout.splitlines()[-1]) if m.split(".")[0] in of or m in of]

    # the group and what every command shares (errors, files), no command and no QAIRT toolchain machinery
    assert loaded("--help") == ["qnndeploy", "qnndeploy.api", "qnndeploy.api._errors", "qnndeploy.base",
                                "qnndeploy.base.errors", "qnndeploy.base.interrupt", "qnndeploy.cli",
                                "qnndeploy.cli._common"]
    # nor the standard library's slow imports that only some commands need (package metadata parses email headers)
    assert loaded("--help", of=("importlib.metadata", "ctypes", "email")) == []
    assert not any(m.startswith(("qnndeploy.cli.compile", "qnndeploy.compile", "qnndeploy.device"))
                   for m in loaded("socs", "--help"))
    assert "onnx" not in loaded("socs", "SM8750")


def test_the_listing_follows_the_pipeline():
    names = [line.split()[0] for line in run("--help").output.split("Commands:\n")[1].splitlines() if line.strip()]
    assert names == ["demo", "socs", "check", "prepare", "estimate", "compile", "validate", "diagnose", "bundle",
                     "inspect", "scaffold", "package", "reach", "device", "report", "doctor",
                     "cache"]


@pytest.mark.parametrize("group", [(), ("bundle",), ("device",), ("cache",)], ids=lambda g: " ".join(g) or "qnndeploy")
def test_a_bare_group_prints_its_help_and_exits_0(group):
    r = run(*list(group))
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("Usage: ") and "Commands:" in r.stdout and r.stderr == ""
    if group == ("bundle",):
        assert "build " in r.stdout and "verify " in r.stdout


def test_the_installed_command_prints_help_when_run_bare():
    r = subprocess.run(["qnndeploy"], capture_output=True, text=True, check=False)
    assert r.returncode == 0 and r.stdout.startswith("Usage: qnndeploy [OPTIONS] COMMAND") and r.stderr == ""
    r = subprocess.run([sys.executable, "-m", "qnndeploy", "device"], capture_output=True, text=True, check=False)
    assert r.returncode == 0 and r.stdout.startswith("Usage: qnndeploy device [OPTIONS] COMMAND") and r.stderr == ""


# --- bundle build and its alias -----------------------------------------------------------------------------------

def test_bundle_options_before_a_subcommand_are_an_error(tmp_path):
    for args in (["bundle", "--name", "x", "verify", tmp_path], ["bundle", "--json", "verify", tmp_path],
                 ["bundle", "--name", "x", "--version", "1", "build", "--name", "x"]):
        r = run(*args)
        assert r.exit_code == 2, r.output
        assert "options go after the subcommand" in r.output
    r = subprocess.run(["qnndeploy", "bundle", "--name", "x", "verify", str(tmp_path)], capture_output=True,
                       text=True, check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: options go after the subcommand (`qnndeploy bundle verify …`)")


def test_bundle_with_options_and_no_subcommand_is_bundle_build(tmp_path):
    """The alias runs build itself: same checks, same messages; an option value that reads like a subcommand is a
    value ("--name verify")."""
    for prefix in (["bundle"], ["bundle", "build"]):
        r = run(*prefix, "--name", "verify", "--version", "1", "--cpu", "enc", "-o", tmp_path)
        assert r.exit_code == 2 and "--cpu 'enc' is not of the form GRAPH=model.onnx" in r.output, r.output
        r = run(*prefix, "--version", "1")
        assert r.exit_code == 2 and "Missing option '--name'" in r.output, r.output
    assert list(tmp_path.iterdir()) == []


# --- one exit code for "not a bundle" -----------------------------------------------------------------------------

def not_bundles(root: Path) -> dict[str, Path]:
    """Folders and an archive that are not bundles at all."""
    empty = root / "empty"
    empty.mkdir()
    garbled = root / "garbled"
    garbled.mkdir()
    (garbled / "manifest.json").write_text("{ not json")
    foreign = root / "foreign"
    foreign.mkdir()
    (foreign / "manifest.json").write_text(json.dumps({"format": "something-else", "name": "x"}))
    future = root / "future"
    future.mkdir()
    (future / "manifest.json").write_text(json.dumps({**bundles.manifest(), "format_version": 99}))
    archive = root / "nothing-1.0.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("nothing-1.0/readme.txt", "no manifest here")
    return {"empty": empty, "garbled": garbled, "foreign": foreign, "future": future, "archive": archive}


@pytest.mark.parametrize("kind", ["empty", "garbled", "foreign", "future", "archive"])
def test_a_path_that_is_not_a_bundle_is_bad_input_in_every_command(tmp_path, kind):
    path = not_bundles(tmp_path)[kind]
    commands = {
        "bundle verify": ["bundle", "verify", path],
        "device verify": ["device", "verify", path, "-o", tmp_path / "records"],
        "scaffold": ["scaffold", path, "--package", "com.example.foo", "-o", tmp_path / "glue"],
        "device info --bundle": ["device", "info", "--bundle", path],
    }
    for name, args in commands.items():
        r = run(*args)
        assert r.exit_code == EXIT_BAD_INPUT, f"{name}: {r.output}"
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, f"{name}: {r.stderr}"
        assert r.stdout == "" and "Traceback" not in r.output, name
        assert "qnndeploy-verify-" not in r.stderr, f"{name} names a temporary folder: {r.stderr}"
        r = run(*args, "--json")
        assert r.exit_code == EXIT_BAD_INPUT and json.loads(r.stdout)["exit_code"] == EXIT_BAD_INPUT, name
    assert not (tmp_path / "glue").exists() and not (tmp_path / "records").exists()


def test_a_manifest_that_fails_its_schema_is_a_bundle_with_problems(tmp_path):
    """A qnndeploy manifest that reads but breaks the schema is a bundle with problems: exit 1 with every problem,
    in the commands that verify a bundle."""
    b = tmp_path / "demo-1.0.0"
    b.mkdir()
    m = bundles.manifest()
    del m["graphs"]
    (b / "manifest.json").write_text(json.dumps(m))
    for args in (["bundle", "verify", b], ["scaffold", b, "--package", "com.example.foo", "-o", tmp_path / "glue"],
                 ["device", "verify", b, "-o", tmp_path / "records"]):
        r = run(*args)
        assert r.exit_code == EXIT_CHECK_FAILED, r.output
        assert "FAIL" in r.stdout and "schema: (top): 'graphs' is a required property" in r.stdout, r.stdout


# --- qnndeploy cache ----------------------------------------------------------------------------------------------

def relu(path: Path) -> Path:
    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="relu0")], "relu",
                         [h.make_tensor_value_info("x", T.FLOAT, [1, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 8])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
    return path


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A private cache, found the default way ($QNNDEPLOY_CACHE_DIR), filled by two real compiles."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("QNNDEPLOY_CACHE_DIR", str(cache))
    r = run("compile", relu(tmp_path / "relu.onnx"), "--soc", "SM8550", "--soc", "SM8750", "-o", tmp_path / "b1")
    assert r.exit_code == 0 and "2 compiled, 0 cached" in r.output, r.output
    return cache


@pytest.mark.needs_qnn
def test_cache_list_and_size_show_the_compiles(cache_dir, tmp_path):
    listing = json.loads(run("cache", "list", "--json").stdout)
    assert listing["path"] == str(cache_dir) and listing["other"] == []
    entries = listing["entries"]
    assert sorted((e["graph"], e["soc"], e["status"], e["precision"]) for e in entries) == [
        ("relu", "SM8550", "ok", "fp16"), ("relu", "SM8750", "ok", "fp16")]
    for e in entries:
        folder = cache_dir / e["key"]
        assert e["backend"] == "ort" and e["model"] == str((tmp_path / "relu.onnx").resolve())
        assert e["bytes"] == sum(p.stat().st_size for p in folder.iterdir()) > 0
        assert e["files"] == len(list(folder.iterdir()))
    size = json.loads(run("cache", "size", "--json").stdout)
    assert size == {"path": str(cache_dir), "entries": 2, "bytes": sum(e["bytes"] for e in entries)}
    text = run("cache", "list").output
    assert "relu" in text and "SM8550" in text and "SM8750" in text and "2 entries" in text
    assert run("cache", "size").output.startswith(f"2 entries, {size['bytes'] / 1e6:.1f} MB in {cache_dir}")
    assert (cache_dir / TAG_FILE).read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")


@pytest.mark.needs_qnn
def test_cache_clear_removes_the_entries_and_nothing_else(cache_dir, tmp_path):
    (cache_dir / "notes.txt").write_text("mine")
    (cache_dir / ".0123456789ab.x1y2z3").mkdir()  # an entry a killed compile was writing
    (cache_dir / ".0123456789ab.x1y2z3" / "relu.bin").write_bytes(b"half")
    damaged = cache_dir / ("f" * 64)
    damaged.mkdir()
    (damaged / "relu.bin").write_bytes(b"no record")
    statuses = sorted(e["status"] for e in json.loads(run("cache", "list", "--json").stdout)["entries"])
    assert statuses == ["damaged", "ok", "ok", "partial"]
    r = run("cache", "clear", "--json")
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    assert result["removed"] == 4 and result["kept"] == ["notes.txt"] and result["failed"] == []
    assert sorted(p.name for p in cache_dir.iterdir()) == [TAG_FILE, "notes.txt"]
    assert run("cache", "size").output.startswith("0 entries")
    r = run("compile", tmp_path / "relu.onnx", "--soc", "SM8750", "-o", tmp_path / "b2")
    assert "1 compiled, 0 cached" in r.output, r.output  # cleared: compiled again, and cached again
    assert json.loads(run("cache", "size", "--json").stdout)["entries"] == 1


def test_cache_commands_refuse_a_folder_that_is_not_a_cache(tmp_path):
    mine = tmp_path / "projects"
    (mine / "app").mkdir(parents=True)
    (mine / "app" / "main.kt").write_text("fun main() {}")
    (mine / "README.md").write_text("mine")
    for command in ("list", "size", "clear"):
        r = run("cache", command, "--cache-dir", mine)
        assert r.exit_code == EXIT_BAD_INPUT, r.output
        assert "does not look like a qnndeploy compile cache (it holds README.md, app/" in r.stderr
    assert (mine / "app" / "main.kt").read_text() == "fun main() {}" and (mine / "README.md").is_file()
    (tmp_path / "file").write_text("x")
    r = run("cache", "clear", "--cache-dir", tmp_path / "file")
    assert r.exit_code == EXIT_BAD_INPUT and "is a file, not a compile cache folder" in r.stderr
    r = run("cache", "list", "--cache-dir", tmp_path / "new")  # no cache yet: empty, not an error
    assert r.exit_code == 0 and r.output == f"{tmp_path / 'new'}: empty\n"


@pytest.mark.needs_qnn
def test_a_damaged_cache_entry_is_replaced_by_the_next_compile(cache_dir, tmp_path):
    entry = next(p for p in cache_dir.iterdir() if p.is_dir())
    record = json.loads((entry / "compile.json").read_text())
    soc = record["soc"]
    binary = entry / next(o["path"] for o in record["outputs"] if o["path"].endswith(".bin"))
    data = bytearray(binary.read_bytes())
    data[len(data) // 2] ^= 0xFF
    binary.write_bytes(bytes(data))
    r = run("compile", tmp_path / "relu.onnx", "--soc", soc, "-o", tmp_path / "b3", "--json")
    assert [j["status"] for j in json.loads(r.stdout)["jobs"]] == ["ok"]  # compiled, not restored from damage
    fresh = json.loads((entry / "compile.json").read_text())
    sha = {o["path"]: o["sha256"] for o in fresh["outputs"]}
    assert hashlib.sha256(binary.read_bytes()).hexdigest() == sha[binary.name]  # the entry was stored again
    r = run("compile", tmp_path / "relu.onnx", "--soc", soc, "-o", tmp_path / "b4")
    assert "0 compiled, 1 cached" in r.output and "restored from the cache" in r.output, r.output


# --- the command reference (docs/commands.md, generated from --help by tests/docgen.py) --------------------------

def reference_sections() -> dict[str, str]:
    """docs/commands.md: each "## `qnndeploy …`" heading's command path -> its text."""
    text = (REPO / "docs" / "commands.md").read_text()
    sections = {}
    for part in text.split("\n## `")[1:]:
        heading, _, body = part.partition("\n")
        sections[heading.split("`")[0]] = heading + "\n" + body
    return sections


@pytest.mark.parametrize("path", [p for p in command_paths() if not isinstance(
    functools.reduce(sub, p, ROOT), click.Group)], ids=" ".join)
def test_the_command_reference_documents_every_command_and_option(path):
    text = reference_sections().get(" ".join(("qnndeploy", *path)))
    assert text, f"docs/commands.md has no section for qnndeploy {' '.join(path)}"
    command = functools.reduce(sub, path, ROOT)
    for param in command.params:
        if isinstance(param, click.Option) and param.name != "help":  # by any of its names, e.g. -o or --output
            assert param.help, f"qnndeploy {' '.join(path)} {'/'.join(param.opts)} has no help"
            assert any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text) for o in param.opts), \
                f"docs/commands.md: qnndeploy {' '.join(path)} does not mention {' / '.join(param.opts)}"


# --- one dialect: the same option for the same thing in every command -------------------------------------------

SAMPLE_COMMANDS = [("validate",), ("diagnose",), ("device", "verify")]
SOC_COMMANDS = [("check",), ("compile",), ("demo",), ("device", "verify")]
# each concept's option: its metavar, wherever a command takes it
CONCEPTS = {"--inputs": "DIR", "--calib": "DIR", "--preprocess": "SPEC|FILE.json", "--random": "N", "--seed": "S",
            "--soc": "SOC[,SOC]"}


def options_of(path: tuple[str, ...]) -> dict[str, click.Option]:
    command = functools.reduce(sub, path, ROOT)
    return {o: p for p in command.params if isinstance(p, click.Option) for o in p.opts}


def test_the_same_concept_is_the_same_option_with_the_same_metavar_and_help_in_every_command():
    every = {p: options_of(p) for p in command_paths() if not isinstance(functools.reduce(sub, p, ROOT), click.Group)}
    for path in SAMPLE_COMMANDS:
        assert {"--inputs", "--preprocess", "--random", "--seed"} <= set(every[path]), path
    assert {"--calib", "--preprocess"} <= set(every[("compile",)])  # compile's samples are its calibration data
    for path in SOC_COMMANDS:
        assert every[path]["--soc"].multiple, path
    helps: dict[str, set[str]] = {}
    for path, options in every.items():
        for name, metavar in CONCEPTS.items():
            if name in options:
                assert options[name].metavar == metavar, f"{' '.join(path)} {name}: {options[name].metavar}"
                helps.setdefault(name, set()).add(options[name].help or "")
    assert len(helps["--preprocess"]) == 1 and len(helps["--seed"]) == 1  # written once
    random = options_of(("device", "verify"))["--random"]
    assert isinstance(random, Renamed) and "--samples" in random.old_names  # still accepted (tests/cli/test_options.py)


def test_soc_is_repeatable_and_comma_separated_alike(tmp_path):
    model = tmp_path / "m.onnx"
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4])])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), model)
    r = run("check", model, "--no-measure", "--soc", "SM8650,sm8750-ac", "--soc", "SM8650", "--json")
    assert r.exit_code == 0, r.output
    assert [m["htp"]["soc"] for m in json.loads(r.stdout)["models"]] == ["SM8650", "SM8750"]  # each SoC once
    r = run("check", model, "--no-measure", "--soc", "SM8650", "--soc", "SM8750")
    assert r.exit_code == 0 and r.output.count(": READY") == 2
    assert r.output.splitlines()[-1] == f"next: qnndeploy compile {model} --soc SM8650,SM8750 -o build"
    for args in (["check", model, "--no-measure"], ["compile", model, "-o", tmp_path / "b"],
                 ["demo", "-o", tmp_path / "d"]):
        r = run(*args, "--soc", "SM8750,SM9999")
        assert r.exit_code == EXIT_BAD_INPUT, (args, r.output)
        assert r.stderr.startswith("error: unknown SoC 'SM9999'") and r.stderr.count("\n") == 1, (args, r.stderr)
    assert not (tmp_path / "b").exists() and not (tmp_path / "d").exists()


def test_a_wrong_file_type_is_one_line_and_exit_2_in_every_command(tmp_path):
    model, binary = tmp_path / "m.onnx", tmp_path / "x.bin"
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4])])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), model)
    binary.write_bytes(b"\0" * 64)
    cases = {
        ("validate", binary): "x.bin is a QNN context binary, not a build folder",
        ("validate", model): "m.onnx is an ONNX model, not a build folder",
        ("diagnose", binary): "x.bin is a QNN context binary, not a job folder",
        ("bundle", "build", "--name", "a", "--version", "1", "--from-build", model): "is an ONNX model, not a build",
        ("bundle", "verify", model): "m.onnx is an ONNX model, not a bundle",
        ("inspect", model): "m.onnx is an ONNX model",
        ("scaffold", binary, "--package", "a.b", "-o", tmp_path / "s"): "x.bin is a QNN context binary, not a bundle",
        ("package", "play", model, "-o", tmp_path / "p"): "m.onnx is an ONNX model, not a bundle",
        ("device", "verify", model): "m.onnx is an ONNX model, not a bundle",
        ("device", "info", "--bundle", binary): "x.bin is a QNN context binary, not a bundle",
        ("check", binary): "is not a readable ONNX model",
        ("prepare", binary, "-o", tmp_path / "o.onnx"): "is not a readable ONNX model",
        ("compile", binary, "--soc", "SM8750", "-o", tmp_path / "b"): "expected an .onnx model",
        ("report", binary, "-o", tmp_path / "r.html"): "x.bin is a QNN context binary, not a record",
    }
    for args, message in cases.items():
        r = run(*args)
        assert r.exit_code == EXIT_BAD_INPUT, (args, r.output)
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and message in r.stderr, (args, r.stderr)
        assert r.stdout == "", (args, r.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "x.bin"]  # nothing written

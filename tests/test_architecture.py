"""The package's folders are its floors: read from the code's own imports, a module imports only from floors below
its own and from its own folder, a command's room never imports another room, nothing forms a cycle, and qnndeploy's
own modules are imported at module top. The rule is FLOORS below, folder by folder, not a list of modules: a new
module is placed by the folder it is put in."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from qnndeploy.cli import COMMANDS

PACKAGE = Path(__file__).resolve().parents[1] / "qnndeploy"

# Lowest first: each entry is a floor, the folders (or top-level modules) on it, and what they are for.
FLOORS: list[tuple[str, tuple[str, ...], str]] = [
    ("base", ("base",), ("what every floor uses: errors, safe file writing, the SoC catalog and the HTP arch, "
                         "the format names, child processes, text escaped for generated code, runtime "
                         "compatibility facts, JSON fields read leniently")),
    ("model", ("model",), ("ONNX models as data: the graph read without its weights, shapes, fusions, "
                           "quantization, input samples and media files, comparison metrics")),
    ("qnn", ("qnn",), ("the QNN stack on the host: HTP op support, libQnnSystem's reader, the HTP emulator, "
                       "EPContext wrappers, toolchains, the AI Hub client")),
    ("formats", ("formats",), ("the files qnndeploy writes and the rules that read them: the bundle manifest, "
                               "compile, validation, split, bench, estimate and device verify records, the Play "
                               "plan, their schemas; archives, ELF reading")),
    ("decide", ("decide",), ("the on-device decision, NPU or CPU, the Python twin of the Kotlin selector, and the "
                             "phones a bundle reaches by it")),
    ("verification", ("verification",), ("every check on a bundle (what `bundle verify` reports, and the jobs run "
                                         "on the host emulator to prove its targets)")),
    ("rooms", ("check", "prepare", "estimate", "compile", "validate", "diagnose", "bundle", "inspect", "scaffold",
               "package", "reach", "device", "report"),
     "one room per command, each the library its command calls; no room imports another"),
    ("runners", ("demo", "doctor"), "what runs several rooms: the demo, the environment report"),
    ("api", ("api",), ("the public Python API, and the command line's one door to the rooms and runners: the rules "
                       "every command shares (a bundle must verify)")),
    ("cli", ("cli",), "the command line: parses options, calls one library function, renders its result"),
    ("entry points", ("__main__", "data"), "`python -m qnndeploy` and the demo model's generator"),
]
ROOMS = next(units for name, units, _ in FLOORS if name == "rooms")
RUNNERS = next(units for name, units, _ in FLOORS if name == "runners")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(path: Path, known: set[str]) -> list[tuple[str, bool]]:
    """(imported qnndeploy module, inside a function?) for every import in the file."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            names: list[str] = []
            if isinstance(child, ast.ImportFrom) and child.module and child.module.startswith("qnndeploy"):
                names = [f"{child.module}.{a.name}" if f"{child.module}.{a.name}" in known else child.module
                         for a in child.names]
            elif isinstance(child, ast.Import):
                names = [a.name for a in child.names if a.name.startswith("qnndeploy")]
            found.extend((n, in_function) for n in names if n in known)
            visit(child, inner)

    visit(ast.parse(path.read_text()), False)
    return found


def unit(name: str) -> str:
    """The folder (or top-level module) a module belongs to: qnndeploy.formats.manifest -> formats."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def floor_of(name: str) -> int:
    if name == "qnndeploy":
        return -1  # the package itself (its version) is below everything
    for i, (_, units, _) in enumerate(FLOORS):
        if unit(name) in units:
            return i
    raise AssertionError(f"{name} is on no floor: put it in a folder of FLOORS in {Path(__file__).name}")


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: {target for target, _ in imports(path, known) if target != name} for name, path in mods.items()}


def test_every_module_is_on_a_floor():
    for name in modules():
        floor_of(name)


def test_imports_go_only_down():
    """Down a floor, or within the module's own folder; never sideways into another room."""
    wrong = [f"{source} -> {target}" for source, targets in graph().items() for target in targets
             if unit(target) != unit(source) and floor_of(target) >= floor_of(source)]
    assert wrong == []


def test_each_room_is_a_command():
    """A reader finds a command's library from its name: the room is named as the command."""
    assert set(ROOMS) <= set(COMMANDS)
    assert all((PACKAGE / room).is_dir() or (PACKAGE / f"{room}.py").is_file() for room in ROOMS)


def test_no_loose_modules():
    """Every module is in a floor's folder, or is a room or runner of its own: the tree shows the floors."""
    loose = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert loose <= {u for _, units, _ in FLOORS for u in units}


def test_no_cycles():
    edges = graph()
    state: dict[str, int] = {}
    cycle: list[str] = []

    def walk(node: str, path: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycle.extend([*path[path.index(nxt):], node, nxt] if nxt in path else [node, nxt])
                return True
            if state.get(nxt) is None and walk(nxt, [*path, node]):
                return True
        state[node] = 2
        return False

    for start in sorted(edges):
        if state.get(start) is None and walk(start, []):
            break
    assert cycle == []


def test_commands_go_through_the_api():
    """The command line is a client of qnndeploy.api: every command's module (cli/MODULE.py of COMMANDS) imports
    qnndeploy.api, and no module of qnndeploy/cli/ imports a room or a runner (FLOORS "rooms" and "runners"), so what
    a command runs and the rules commands share (a bundle must verify) are the API's, written once. The floors below
    the rooms (base, model, qnn, formats: value types, option choices, helpers of the renderers) stay open to it."""
    mods = modules()
    cli = {name: path for name, path in mods.items() if unit(name) == "cli"}
    edges = {name: {target for target, _ in imports(path, set(mods))} for name, path in cli.items()}
    commands = {f"qnndeploy.cli.{module}" for module, _, _ in COMMANDS.values()}
    assert [c for c in sorted(commands) if "qnndeploy.api" not in {t.split("._")[0] for t in edges[c]}] == []
    inside = [f"{source} -> {target}" for source, targets in edges.items() for target in targets
              if unit(target) in ROOMS + RUNNERS]
    assert inside == []


def test_the_api_imports_no_room():
    """`import qnndeploy.api` is light: each name is imported from its room on first use, so a command (and
    `qnndeploy --help`) loads only the rooms it calls."""
    code = "import json, sys\nimport qnndeploy.api\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = {m for m in json.loads(done.stdout) if m.startswith("qnndeploy.")}
    assert {m for m in loaded if unit(m) in ROOMS + RUNNERS} == set()
    assert loaded <= {"qnndeploy.api", "qnndeploy.api._errors", "qnndeploy.base", "qnndeploy.base.errors"}


@pytest.mark.parametrize("name", sorted(modules()))
def test_own_modules_are_imported_at_the_top(name):
    """Only heavy third-party packages (onnx, onnxruntime, numpy…) are imported inside functions, to keep
    `qnndeploy --help` instant; qnndeploy's own modules are light and imported where a reader looks first."""
    mods = modules()
    inside = [target for target, in_function in imports(mods[name], set(mods)) if in_function]
    assert inside == []


def test_few_functions_take_more_than_seven_parameters():
    """Parameters that travel together are one value (a request, a checked plan, a target): at most 10 functions of
    the package take more than 7 (self and cls not counted). Raising the bound needs a reason, not a new row."""
    wide = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = [p for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")]
                if len(params) > 7:
                    wide.append(f"{name}.{node.name} ({len(params)})")
    assert len(wide) <= 10, sorted(wide)


def test_every_package_folder_ships():
    """pyproject.toml lists the packages a wheel holds: a new floor's folder left out works in the editable install
    the suite runs and fails in a user's `pip install` (the README's first command caught one so)."""
    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {module_name(p) for p in PACKAGE.rglob("__init__.py")}
    assert folders - listed == set()

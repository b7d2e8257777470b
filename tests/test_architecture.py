"""The module graph is one-way: read from the code's own imports, it has no cycle, every import goes to a lower
layer (a stage never imports another stage), and qnndeploy's own modules are imported at module top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "qnndeploy"

# Lowest first. A module may import only from layers below its own, and from its own package's lower modules.
LAYERS = [
    {"qnndeploy", "qnndeploy.bundle", "qnndeploy.device", "qnndeploy.errors", "qnndeploy.onnxwire"},
    {"qnndeploy.fileio", "qnndeploy.socs", "qnndeploy.onnxio", "qnndeploy.formats", "qnndeploy.bundle.elf",
     "qnndeploy.quantize", "qnndeploy.compat", "qnndeploy.plot", "qnndeploy.child", "qnndeploy.codegen"},
    {"qnndeploy.bundle.archive", "qnndeploy.records", "qnndeploy.markers", "qnndeploy.epcontext",
     "qnndeploy.media", "qnndeploy.metrics",
     "qnndeploy.htp", "qnndeploy.shapes", "qnndeploy.fuse", "qnndeploy.decision", "qnndeploy.bundle.manifest",
     "qnndeploy.device.adb", "qnndeploy.compile.logs", "qnndeploy.compile.jobs",
     "qnndeploy.qnnsystem", "qnndeploy.playplan", "qnndeploy.aihub", "qnndeploy.toolchain"},
    {"qnndeploy.samples"},  # a graph's input samples: NumPy files, random ones, or media files through media.py
    {"qnndeploy.fold", "qnndeploy.rules", "qnndeploy.contextcheck", "qnndeploy.compile.cache", "qnndeploy.emulator",
     "qnndeploy.prepare.edits", "qnndeploy.prepare.equivalence"},
    {"qnndeploy.bundle.verify"},  # the bundle format's rules, which bundle build and every reader of bundles apply
    # the stages: each a command's library, none importing another
    {"qnndeploy.onnxcheck", "qnndeploy.prepare", "qnndeploy.compile", "qnndeploy.validate", "qnndeploy.bundle.build",
     "qnndeploy.scaffold", "qnndeploy.device.info", "qnndeploy.device.profile", "qnndeploy.device.verify",
     "qnndeploy.device.runner", "qnndeploy.compile.ort", "qnndeploy.compile.qairt",
     "qnndeploy.contextinfo", "qnndeploy.prepare.split", "qnndeploy.diagnose", "qnndeploy.play",
     "qnndeploy.compile.aihub", "qnndeploy.device.hosted"},
    # what runs stages: the demo and the environment report, then the command line
    {"qnndeploy.demo", "qnndeploy.doctor"},
    {"qnndeploy.cli"},
    {"qnndeploy.__main__", "qnndeploy.data.make_demo_model"},  # entry points: `python -m qnndeploy`, a generator
]
# Within the stage layer, a package's modules may use each other downward (the compile stage runs its backends).
INSIDE_STAGES = {("qnndeploy.compile", "qnndeploy.compile.ort"),
                 ("qnndeploy.compile", "qnndeploy.compile.aihub"), ("qnndeploy.compile", "qnndeploy.compile.qairt"),
                 ("qnndeploy.device.verify", "qnndeploy.device.runner"),
                 ("qnndeploy.device.hosted", "qnndeploy.device.verify"),
                 ("qnndeploy.doctor", "qnndeploy.compile.qairt")}


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


def layer_of(name: str) -> int:
    for i, layer in enumerate(LAYERS):
        if name in layer or (name.startswith("qnndeploy.cli.") and "qnndeploy.cli" in layer):
            return i
    raise AssertionError(f"{name} is in no layer: add it to LAYERS in {Path(__file__).name}")


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: {target for target, _ in imports(path, known) if target != name} for name, path in mods.items()}


def test_every_module_has_a_layer():
    for name in modules():
        layer_of(name)


def test_imports_go_only_down():
    upward = []
    for source, targets in graph().items():
        for target in targets:
            if target == "qnndeploy" or (source, target) in INSIDE_STAGES:
                continue
            if source.startswith("qnndeploy.cli") and target.startswith("qnndeploy.cli."):
                continue  # the command line's own modules
            if layer_of(target) >= layer_of(source):
                upward.append(f"{source} -> {target}")
    assert upward == []


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


@pytest.mark.parametrize("name", sorted(modules()))
def test_own_modules_are_imported_at_the_top(name):
    """Only heavy third-party packages (onnx, onnxruntime, numpy…) are imported inside functions, to keep
    `qnndeploy --help` instant; qnndeploy's own modules are light and imported where a reader looks first."""
    mods = modules()
    inside = [target for target, in_function in imports(mods[name], set(mods)) if in_function]
    assert inside == []

"""One name per concept: no two classes (or type aliases, which read like classes) in the package share a name, so
that a name met in a traceback, a signature or a review says which thing it is without its module."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "qnndeploy"

# A module-level name bound to a type: CapWords (`Sample`, `_Fields`), not a CONSTANT; or any name bound to a generic
# container type (`JSON = dict[str, Any]`).
CAP_WORDS = re.compile(r"_?[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*")
GENERICS = {"dict", "list", "tuple", "set", "frozenset", "type", "Callable", "Mapping", "Sequence", "Iterable",
            "Iterator"}


def _is_type(value: ast.expr) -> bool:
    """Whether a module-level value reads as a type: a generic (`dict[str, int]`), a union, or another type's name."""
    if isinstance(value, ast.BinOp):
        return isinstance(value.op, ast.BitOr) and all(_is_type(side) or (isinstance(side, ast.Constant) and
                                                       side.value is None) for side in (value.left, value.right))
    return isinstance(value, (ast.Subscript, ast.Attribute, ast.Name))


def type_names(tree: ast.Module) -> list[str]:
    """The classes defined anywhere in a module, and the type aliases at its top level."""
    names = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and ast.unparse(node.annotation).endswith("TypeAlias"):
            names.append(node.target.id)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
            generic = isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) \
                and value.value.id in GENERICS
            if generic or (CAP_WORDS.fullmatch(name) and _is_type(value)):
                names.append(name)
    return names


def defined() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in type_names(ast.parse(path.read_text())):
            found[name].append(path.relative_to(PACKAGE.parent).as_posix())
    return found


def test_no_two_types_share_a_name() -> None:
    shared = {name: where for name, where in defined().items() if len(where) > 1}
    assert not shared, ("name each by what it is (CompileJob, EmulatorJob), or keep one where they are the same "
                        f"concept: {shared}")


def test_aliases_are_found() -> None:
    """The rule sees the aliases it is about: a generic, a union, another type's name, an annotated alias; and not a
    CONSTANT or a number."""
    tree = ast.parse("import typing\nCounts = dict[str, int]\nMaybe = int | None\nAnyOne = typing.Any\n"
                     "Size: typing.TypeAlias = int\nLIMIT = int\nMiB = 1024\nFIRST = LIMITS[0]\nJSON = dict[str, int]\n"
                     "class Outer:\n    class Inner: ...\n")
    assert type_names(tree) == ["Outer", "Inner", "Counts", "Maybe", "AnyOne", "Size", "JSON"]

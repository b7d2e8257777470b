"""The documentation: the generated pages are what the code makes now, every relative link of README.md and docs/
resolves (to a file, and to a heading where it names one), the README stays short and keeps the set-up commands
that .ci/readme-demo and CI run as written."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import click
import pytest

from qnndeploy.base import socs
from qnndeploy.base.names import FORMAT_VERSION
from qnndeploy.cli import cli
from tests import docgen
from tests.support.corpus import MODELS

ROOT = docgen.ROOT
PACKAGE_DATA = ROOT / "qnndeploy" / "data"
PAGES = [ROOT / "README.md", *sorted(docgen.DOCS.glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def headings(page: Path) -> set[str]:
    """The anchors of a page's headings, outside code blocks."""
    found, in_code = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(docgen.anchor(line.lstrip("#").strip()))
    return found


def links(page: Path) -> list[str]:
    """The link targets of a page, outside code blocks and inline code."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return LINK.findall(re.sub(r"`[^`\n]*`", "", text))


@pytest.mark.parametrize("name", sorted(docgen.PAGES))
def test_the_generated_page_is_what_the_code_makes(name: str) -> None:
    assert name not in docgen.stale(), f"docs/{name} is out of date: run python -m tests.docgen --write"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    checked = 0
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.name}: link to {target}: no such file"
        if fragment and file.suffix == ".md":
            assert fragment in headings(file), f"{page.name}: link to {target}: no such heading in {file.name}"
        checked += 1
    assert checked, f"{page.name} links nowhere"


def test_every_command_has_its_details_and_every_page_is_linked() -> None:
    details = headings(docgen.DOCS / docgen.DETAILS)
    for command, ctx in docgen.commands(cli, click.Context(cli, info_name="qnndeploy")):
        if not isinstance(command, click.Group):
            assert docgen.details_anchor(ctx.command_path, details), ctx.command_path
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    assert set(PAGES[1:]) <= linked, "a page of docs/ the README does not link"


def test_the_readme_is_short_and_points_onward() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 250
    for section in ("## Set up", "## Commands", "## Exit codes", "## Limitations", "## Documentation"):
        assert f"\n{section}" in text, section


def test_the_readme_set_up_commands_are_the_ones_ci_runs() -> None:
    """.ci/readme-demo takes the first code block under "## Set up" and runs it as written; then the fast tier after
    `pip install -e '.[test]'` in a venv, and .ci/run, the whole suite."""
    script = (ROOT / ".ci" / "readme-demo").read_text()
    awk = re.search(r"awk '([^']*)' README.md", script)
    assert awk, "readme-demo no longer reads the command with awk"
    first = subprocess.run(["awk", awk.group(1), "README.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert first.stdout == "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/qnndeploy demo\n"
    setup = (ROOT / "README.md").read_text().split("\n## Set up", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```\n(.*?)\n```", setup, flags=re.DOTALL)
    assert blocks[1] == ("python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && "
                         '.venv/bin/python -m pytest -m "not slow" -n 2')
    assert blocks[2] == "bash .ci/run" and 'bash .ci/run -m "not slow"' in setup


def test_every_option_a_synopsis_of_the_details_names_is_the_command_s() -> None:
    """command-details.md is hand-written: the synopsis under each command's heading must not name an option the
    command does not have (a renamed or removed option), which the generated reference would no longer show."""
    lines = (docgen.DOCS / docgen.DETAILS).read_text().splitlines()
    checked = 0
    for i, line in enumerate(lines[:-2]):
        heading = re.fullmatch(r"#+ qnndeploy ([a-z ]+)", line)
        if not heading or not lines[i + 2].startswith("`qnndeploy "):
            continue
        command: click.Command = cli
        for name in heading.group(1).split():
            assert isinstance(command, click.Group), line
            sub = command.get_command(click.Context(command), name)
            assert sub is not None, f"{line}: no such command"
            command = sub
        ctx = click.Context(command)
        members = ([c for n in command.list_commands(ctx) if (c := command.get_command(ctx, n))]
                   if isinstance(command, click.Group) else [command])  # `qnndeploy cache`: its subcommands'
        options = {o for c in members for p in c.params for o in (*p.opts, *p.secondary_opts)}
        named = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", lines[i + 2]))
        assert named <= options, f"{line}: the synopsis names {sorted(named - options)}, which the command lacks"
        checked += 1
    assert checked >= 15


def test_the_counts_the_docs_state_are_the_code_s() -> None:
    """The figures a code change would silently falsify: the bundle format version, the catalog's size, the corpus."""
    assert f"[format v{FORMAT_VERSION}](docs/bundle-format.md)" in (ROOT / "README.md").read_text()
    assert (docgen.DOCS / "bundle-format.md").read_text().startswith(f"# Bundle format v{FORMAT_VERSION}\n")
    assert f"(`qnndeploy/data/socs.json`, {len(socs.catalog())} SoCs)" in (docgen.DOCS / docgen.DETAILS).read_text()
    assert f"`tests/support/corpus.py` names {len(MODELS)} real models" in (docgen.DOCS / "testing.md").read_text()


def test_every_file_the_hand_written_pages_name_exists() -> None:
    """A path in backticks (`qnndeploy/base/compat.py`, `tests/support/elfgen.py`) is a promise that the file is
    there: a module moved or renamed must take the docs with it. Placeholders (`qnndeploy/cli/COMMAND.py`,
    `<graph>`) are not paths."""
    named = re.compile(r"`((?:qnndeploy|tests|benchmarks|templates|android-sample|\.ci|docs)/[^`\s]*)`")
    missing = []
    for page in PAGES:
        if page.name in docgen.PAGES:
            continue
        for found in named.findall(page.read_text()):
            path = found.rstrip(".,;:")
            if re.search(r"[<>*{}…]|/[A-Z]+\.", path):
                continue
            if not (ROOT / path).exists():
                missing.append(f"{page.name}: {path}")
    assert not missing, missing


def table(text: str, header: str) -> list[list[str]]:
    """The body rows of the Markdown table whose header line starts with `header`, cells stripped."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_runtime_tables_are_the_measured_data() -> None:
    """decision-and-runtime.md quotes two measured tables of qnndeploy/data/runtime.json: which runtime loads which
    release's binaries, and which onnxruntime-qnn wheel carries which QAIRT. A re-measurement
    (python -m tests.qnn_facts --write) that changes a cell must change the page too."""
    data = json.loads((PACKAGE_DATA / "runtime.json").read_text())
    text = (docgen.DOCS / "decision-and-runtime.md").read_text()
    header = next(line for line in text.split("\n") if line.startswith("| binary \\ runtime |"))
    runtimes = [cell.strip() for cell in header.strip("|").split("|")][1:]
    shown = {(row[0], runtime): cell == "loads"
             for row in table(text, "| binary \\ runtime |") for runtime, cell in zip(runtimes, row[1:], strict=True)}
    assert shown == {(r["binary"], r["runtime"]): r["loads"] for r in data["loads"]["rows"]}
    wheels = {(row[1], row[2]) for row in table(text, "| `--qairt` |")}
    assert wheels == {(w["onnxruntime_qnn"], w["qairt"]) for w in data["compilers"]["wheels"]}

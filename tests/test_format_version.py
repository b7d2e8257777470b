"""The bundle format's version comes from the code (base/names.py FORMAT_VERSION): the schema accepts every version
up to it, and every text that says "format vN" names that one (tests/test_docs.py checks the README's and the
format page's). Older versions are written as "format N" or "(vN)" where a text says what a version added, so a
new version leaves no text stale (the bundle package's docstring once said v3 while bundle build wrote v4)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from qnndeploy.base.names import FORMAT_VERSION

REPO = Path(__file__).resolve().parents[1]
SAYS_VERSION = re.compile(r"\bformat v(\d+)\b", re.IGNORECASE)


def texts() -> list[Path]:
    """What a reader takes for the truth: the README, the docs, the package's code and the templates it renders."""
    found = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "qnndeploy").rglob("*.py"))]
    found += [p for p in sorted((REPO / "templates").rglob("*")) if p.is_file() and p.suffix in (".kt", ".md", ".kts")]
    return found


def test_the_schema_accepts_every_version_up_to_it() -> None:
    schema = json.loads((REPO / "qnndeploy" / "schemas" / "manifest.schema.json").read_text())
    assert schema["properties"]["format_version"]["enum"] == list(range(1, FORMAT_VERSION + 1))


def test_no_text_names_another_version_as_the_format() -> None:
    stale = [f"{p.relative_to(REPO)}:{text[:m.start()].count(chr(10)) + 1}: {m.group(0)}"
             for p in texts() for text in [p.read_text(errors="replace")] for m in SAYS_VERSION.finditer(text)
             if int(m.group(1)) != FORMAT_VERSION]
    assert not stale, f"FORMAT_VERSION is {FORMAT_VERSION}; say an older one as 'format N': {stale}"

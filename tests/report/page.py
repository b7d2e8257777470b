"""Reading a report page the way a browser does: headless Chromium (Debian's chromium package) renders it, its
serialized DOM is parsed into a small tree, and its screenshot is decoded with Pillow."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from tests.support.host import require

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
TIMEOUT_S = 60


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        """Every element below this one (depth first) with that tag and those attribute values (data_x: data-x)."""
        want = {k.replace("_", "-"): v for k, v in attrs.items()}
        found = []
        for c in self.children:
            if isinstance(c, Node):
                if (tag is None or c.tag == tag) and all(c.attrs.get(k) == v for k, v in want.items()):
                    found.append(c)
                found += c.all(tag, **attrs)
        return found


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root


def chromium() -> str:
    found = shutil.which("chromium")
    require(found is not None, "chromium (Debian package chromium)")
    assert found is not None
    return found


def _start(page: Path, profile: Path, *args: str, stdout: int | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             f"--user-data-dir={profile}", *args, page.resolve().as_uri()],
                            stdout=stdout if stdout is not None else subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)


def render(page: Path, work: Path, size: tuple[int, int] = (1200, 2000)) -> tuple[Node, Path]:
    """Chromium's DOM of `page` after rendering it, and its screenshot (PNG), taken by two Chromiums at once."""
    shot = work / f"{page.stem}.png"
    dom = _start(page, work / "profile-dom", "--dump-dom", stdout=subprocess.PIPE)
    snap = _start(page, work / "profile-shot", f"--screenshot={shot}", f"--window-size={size[0]},{size[1]}")
    try:
        out, _ = dom.communicate(timeout=TIMEOUT_S)
        snap.wait(timeout=TIMEOUT_S)
    finally:  # a hung browser fails the test, and is not left running
        for p in (dom, snap):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert dom.returncode == 0 and snap.returncode == 0, (dom.returncode, snap.returncode)
    return parse(out.decode("utf-8")), shot


def dom_only(page: Path, work: Path) -> Node:
    dom = _start(page, work / "profile-dom", "--dump-dom", stdout=subprocess.PIPE)
    try:
        out, _ = dom.communicate(timeout=TIMEOUT_S)
    finally:
        if dom.poll() is None:
            dom.kill()
            dom.wait()
    assert dom.returncode == 0
    return parse(out.decode("utf-8"))

"""What QNN binaries embed: the QAIRT build string ("v2.51.0.260929181845") and, in context binaries, the SoC and
HTP arch they were compiled for ("soc_type=SM8750;arch=79"). Compile records them; bundle verify checks them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from qnndeploy.base.fileio import ByteProgress, sha256_file

BUILD_RE = re.compile(rb"v(\d{1,2}\.\d{1,3}\.\d{1,3})\.(\d{6,14})")
TARGET_RE = re.compile(rb"soc_type=([A-Za-z0-9]{2,16});arch=(\d{2,3})")


def build_version(build: str) -> str:
    """'v2.51.0.260929181845' -> '2.51.0'."""
    return build[1:].rsplit(".", 1)[0]


class Scanner:
    """A chunk callback for fileio.sha256_file: finds the markers in the same read, also across chunk borders."""

    OVERLAP = 64

    def __init__(self) -> None:
        self.tail = b""
        self.builds: set[str] = set()
        self.targets: set[tuple[str, int]] = set()  # (soc_type, arch)

    def __call__(self, chunk: bytes) -> None:
        data = self.tail + chunk
        self.builds.update(f"v{m.group(1).decode()}.{m.group(2).decode()}" for m in BUILD_RE.finditer(data))
        self.targets.update((m.group(1).decode(), int(m.group(2))) for m in TARGET_RE.finditer(data))
        self.tail = data[-self.OVERLAP:]


@dataclass
class FileFacts:
    """What one read of a file tells: its hash and size, and the QNN markers embedded in it."""

    sha256: str
    size: int
    builds: set[str] = field(default_factory=set)
    context_targets: set[tuple[str, int]] = field(default_factory=set)


def scan_file(path: Path, markers: bool, progress: ByteProgress | None = None,
              copy_to: Path | None = None) -> FileFacts:
    """Hash a file (and copy it, for `bundle`) in one read, collecting QNN markers when `markers` is set."""
    scanner = Scanner() if markers else None
    digest = sha256_file(path, progress, scanner, copy_to)
    facts = FileFacts(digest, path.stat().st_size)
    if scanner:
        facts.builds, facts.context_targets = scanner.builds, scanner.targets
    return facts


def library_version(path: Path) -> str | None:
    """The QAIRT version ("2.51.0") a QNN library's build markers name; None when it has none, names several, or is
    not there: what the app's glue reads from the libQnnHtp.so it loaded (RuntimeVersion.kt), read on the host."""
    if not path.is_file():
        return None
    versions = {build_version(b) for b in scan_file(path, markers=True).builds}
    return versions.pop() if len(versions) == 1 else None

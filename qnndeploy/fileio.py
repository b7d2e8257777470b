"""Streaming hashes and all-or-nothing writes, shared by every stage that writes files."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from qnndeploy.errors import QnnDeployError

CHUNK = 1 << 20
# A JSON object as read from or written to a record, manifest or catalog file. Its fields are checked where it is
# read (by the JSON Schemas or by the reader), not by the type checker.
JSON = dict[str, Any]


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once at import: os.umask can only be read by setting it, which races with threads


def publish(tmp: Path, final: Path, mode: int = 0o666) -> None:
    """Rename a finished temporary file into place with normal permissions (mkstemp makes it owner-only)."""
    tmp.chmod(mode & ~_UMASK)
    tmp.replace(final)

Progress = Callable[[int], None]  # called with the number of bytes just processed


def sha256_file(path: Path, progress: Progress | None = None, scan: Callable[[bytes], None] | None = None,
                copy_to: Path | None = None) -> str:
    """sha256 in constant memory, in one pass that can also feed `scan` and write a copy to `copy_to`."""
    digest = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    try:
        with path.open("rb", buffering=0) as f, (copy_to.open("wb") if copy_to else nullcontext()) as out:
            while n := f.readinto(buf):
                digest.update(view[:n])
                if scan is not None:
                    scan(bytes(view[:n]))
                if out is not None:
                    out.write(view[:n])
                if progress is not None:
                    progress(n)
    except OSError as e:
        raise QnnDeployError(f"cannot {'copy' if copy_to else 'read'} {path}: {e.strerror or e}") from None
    return digest.hexdigest()


def write_json(path: Path, data: object) -> None:
    """Write JSON through a temporary file and a rename, so a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=False)
            f.write("\n")
        publish(Path(tmp), path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def staging_dir(final: Path, force: bool = False) -> Iterator[Path]:
    """Yield an empty sibling folder of `final`; on success it becomes `final`, on any error it is removed.

    The rename is atomic on one file system, so `final` is either absent, the old one, or complete.
    """
    if final.exists() and not force:
        raise QnnDeployError(f"{final} already exists; remove it or pass --force")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))
    tmp.chmod(0o777 & ~_UMASK)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        final.replace(old)
    tmp.replace(final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()


@contextmanager
def staging_file(final: Path, force: bool = False) -> Iterator[Path]:
    """Like staging_dir, for one file."""
    if final.exists() and not force:
        raise QnnDeployError(f"{final} already exists; remove it or pass --force")
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.partial-", dir=final.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    publish(tmp, final)

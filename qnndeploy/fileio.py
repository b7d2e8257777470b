"""Streaming hashes and all-or-nothing writes, shared by every stage that writes files."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, BinaryIO

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


_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFLNK: "a symlink"}


def open_regular(path: Path, limit: int | None = None, what: str = "file", follow: bool = False) -> BinaryIO:
    """Open a regular file for reading, refusing at once anything else: a FIFO, device or socket (reading one would
    hang or never end), a symlink (unless `follow`: then the link is resolved first and its target must be a regular
    file, opened with O_NOFOLLOW so that it cannot be swapped in between), or a file over `limit` bytes."""
    target = Path(os.path.realpath(path)) if follow else Path(path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(target, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise QnnDeployError(f"{path} is a symlink; a {what} must be a regular file") from None
        try:  # a socket cannot be opened at all (ENXIO): name it as what it is
            mode = os.lstat(target).st_mode
        except OSError:
            mode = stat.S_IFREG
        _regular(path, mode, what)
        raise QnnDeployError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        _regular(path, st.st_mode, what)
        if limit is not None and st.st_size > limit:
            raise QnnDeployError(f"{path} has {st.st_size:,} bytes, over the limit of {limit:,} for a {what}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _regular(path: Path, mode: int, what: str) -> None:
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise QnnDeployError(f"{path} is {kind}, not a regular file; a {what} must be a regular file")


def read_limited(path: Path, limit: int, what: str = "file") -> bytes:
    """The whole of a regular file of at most `limit` bytes (see open_regular), read in one go."""
    with open_regular(path, limit, what) as f:
        data = f.read(limit + 1)
    if len(data) > limit:  # it grew after the fstat
        raise QnnDeployError(f"{path} has more than {limit:,} bytes, over the limit for a {what}")
    return data


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

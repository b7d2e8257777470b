"""Streaming hashes and all-or-nothing writes, shared by every stage that writes files."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
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
                check_stop()  # a safe point: a SIGTERM stops a long hash or copy here
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


# --- interruption: a signal handler only sets a flag; long loops call check_stop() at safe points ----------------

_STOP = threading.Event()
_PUBLISHED: list[Path] = []  # what this process published (complete), for an honest message after an interrupt


def request_stop() -> None:
    """Ask the running work to stop at its next safe point (what the CLI's SIGTERM handler does, and nothing else)."""
    _STOP.set()


def stop_requested() -> bool:
    return _STOP.is_set()


def clear_stop() -> None:
    """Forget an earlier stop request and publications (for tests running several commands in one process)."""
    _STOP.clear()
    _PUBLISHED.clear()


def check_stop() -> None:
    """A safe point: raise KeyboardInterrupt if a stop was requested, so the usual cleanup unwinds the work."""
    if _STOP.is_set():
        raise KeyboardInterrupt


def published() -> list[Path]:
    """The outputs this process has published so far, in order."""
    return list(_PUBLISHED)


# --- atomic publication -------------------------------------------------------------------------------------------

AT_FDCWD = -100
RENAME_EXCHANGE = 2


def _load_renameat2() -> Callable[..., int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not Linux, or a libc older than glibc 2.28
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _load_renameat2()


def exchange(a: Path, b: Path) -> bool:
    """Swap the names `a` and `b` in one atomic step (renameat2 RENAME_EXCHANGE). False, with nothing changed,
    where the platform or the file system cannot (no renameat2, ENOSYS, EINVAL): the caller falls back."""
    if _renameat2 is None:
        return False
    if _renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with suppress(OSError):
            path.unlink()


def replace(staged: Path, final: Path, mode: int | None = None) -> None:
    """Put the complete `staged` file or folder at `final` (the commit point): at every instant `final` holds the
    old or the new output, never nothing. With renameat2 the two names are exchanged and the old output, now under
    the staged name, is removed; a file over a file is one rename(2). Only where neither can do it (a folder over a
    folder without RENAME_EXCHANGE: not Linux, or a file system without it) does it fall back to two renames, with
    a moment in between where `final` is absent (the old output is then `.NAME.old-PID`, removed by the next run).
    `mode`: the staged file's permissions (less the umask) before it is published (mkstemp makes it owner-only).
    """
    if mode is not None:
        staged.chmod(mode & ~_UMASK)
    if not os.path.lexists(final) or (not staged.is_dir() and not final.is_dir()):
        staged.replace(final)
    elif exchange(staged, final):
        _remove(staged)  # the old output, under the staged name: a kill here leaves a stale .partial-, cleaned later
    else:
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        final.replace(old)
        try:
            staged.replace(final)
        except BaseException:
            old.replace(final)
            raise
        _remove(old)
    _PUBLISHED.append(final)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(final: Path, prefix: str | None = None) -> None:
    """Remove what earlier, killed runs left beside `final`: `.NAME.partial-PID-*` staging and `.NAME.old-PID`
    replaced outputs of that exact name, and only those whose process is gone (a live run's staging stays)."""
    prefix = prefix or f".{final.name}."
    # partial-<mkdtemp suffix> without a PID: made by an earlier version of qnndeploy, taken as stale
    pattern = re.compile(re.escape(prefix) + r"(?:partial-(?:(\d+)-)?[a-z0-9_]+|old-(\d+))")
    try:
        paths = list(final.parent.iterdir())
    except OSError:
        return
    for path in paths:
        m = pattern.fullmatch(path.name)
        if m is None:
            continue
        pid = m.group(1) or m.group(2)
        if pid is None or not _pid_alive(int(pid)):
            _remove(path)


def partial_prefix(final: Path, stem: str | None = None) -> str:
    """The staging name prefix of `final`: `.NAME.partial-PID-` (remove_stale knows it)."""
    return f".{stem or final.name}.partial-{os.getpid()}-"


def partial_file(final: Path) -> Path:
    """A new empty file beside `final` under its staging name, to be published with `replace`."""
    fd, name = tempfile.mkstemp(prefix=partial_prefix(final), dir=final.parent)
    os.close(fd)
    return Path(name)


def check_replaceable(out: Path, force: bool, marker: str, what: str) -> None:
    """An output folder a command may write: new, empty, or (with force) an earlier output of that command, which
    holds `marker`; never someone else's folder."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise QnnDeployError(f"{out} exists and is not empty; choose another folder or pass --force to replace "
                                 f"an earlier {what} output")
        if not (out / marker).is_file():
            raise QnnDeployError(f"{out} is not an earlier {what} output (it has no {marker}): --force only "
                                 "replaces one, never other files; choose another folder (or delete it yourself)")


@contextmanager
def staging_dir(final: Path, force: bool = False) -> Iterator[Path]:
    """Yield an empty sibling folder of `final`; on success it replaces `final` in one step (see `replace`), on
    any error or interrupt it is removed. Leftovers of earlier killed runs for the same name are removed first."""
    if final.exists() and not force:
        raise QnnDeployError(f"{final} already exists; remove it or pass --force")
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(final)
    tmp = Path(tempfile.mkdtemp(prefix=partial_prefix(final), dir=final.parent))
    tmp.chmod(0o777 & ~_UMASK)
    try:
        yield tmp
        replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def staging_file(final: Path, force: bool = False) -> Iterator[Path]:
    """Like staging_dir, for one file: written under a temporary name beside `final`, then one rename."""
    if final.exists() and not force:
        raise QnnDeployError(f"{final} already exists; remove it or pass --force")
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(final)
    tmp = partial_file(final)
    try:
        yield tmp
        replace(tmp, final, 0o666)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

"""Streaming hashes and all-or-nothing writes, shared by every stage that writes files."""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from qnndeploy.base import interrupt, numbers
from qnndeploy.base.errors import BadInput, QnnDeployError

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

ByteProgress = Callable[[int], None]  # called with the number of bytes just processed


_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFLNK: "a symlink"}


def open_regular(path: Path, limit: int | None = None, what: str = "file", follow: bool = False,
                 beneath: Path | None = None) -> BinaryIO:
    """Open a regular file for reading, refusing at once anything else: a FIFO, device or socket (reading one would
    hang or never end), a symlink (unless `follow`: then the link is resolved first and its target must be a regular
    file, opened with O_NOFOLLOW so that it cannot be swapped in between), or a file over `limit` bytes.
    `beneath`: a folder that holds `path`; then no folder between it and the file may be a symlink either (each is
    opened with O_NOFOLLOW in turn), so a folder swapped for a link cannot lead the open outside it."""
    target = Path(os.path.realpath(path)) if follow else Path(path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = _open_beneath(target, beneath, flags) if beneath is not None else os.open(target, flags)
    except _LinkOnTheWay as e:
        raise BadInput(f"{path}: {e.folder} is a symlink; a {what} must be a regular file inside "
                       f"{beneath}, reached through no symlink") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise BadInput(f"{path} is a symlink; a {what} must be a regular file") from None
        try:  # a socket cannot be opened at all (ENXIO): name it as what it is
            mode = os.lstat(target).st_mode
        except OSError:
            mode = stat.S_IFREG
        _regular(path, mode, what)
        raise BadInput(f"cannot read {path}: {cause(e)}") from None
    try:
        st = os.fstat(fd)
        _regular(path, st.st_mode, what)
        if limit is not None and st.st_size > limit:
            raise BadInput(f"{path} has {st.st_size:,} bytes, over the limit of {limit:,} for a {what}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class _LinkOnTheWay(Exception):
    def __init__(self, folder: Path) -> None:
        super().__init__(str(folder))
        self.folder = folder


def _open_beneath(path: Path, root: Path, flags: int) -> int:
    """os.open(path, flags) where path lies inside root, opening every folder below root with O_NOFOLLOW."""
    try:
        parts = Path(path).relative_to(root).parts
    except ValueError:
        raise BadInput(f"{path} is not inside {root}") from None
    if not parts or ".." in parts:
        raise BadInput(f"{path} is not a file inside {root}")
    folder_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))  # root itself: as named
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                nfd = os.open(part, folder_flags, dir_fd=dfd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR) and Path(root, *parts[:i + 1]).is_symlink():
                    raise _LinkOnTheWay(Path(root, *parts[:i + 1])) from None
                raise
            os.close(dfd)
            dfd = nfd
        return os.open(parts[-1], flags, dir_fd=dfd)
    finally:
        os.close(dfd)


def _regular(path: Path, mode: int, what: str) -> None:
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise BadInput(f"{path} is {kind}, not a regular file; a {what} must be a regular file")


def read_limited(path: Path, limit: int, what: str = "file") -> bytes:
    """The whole of a regular file of at most `limit` bytes (see open_regular), read in one go."""
    with open_regular(path, limit, what) as f:
        data = f.read(limit + 1)
    if len(data) > limit:  # it grew after the fstat
        raise BadInput(f"{path} has more than {limit:,} bytes, over the limit for a {what}")
    return data


# --- OSError -> one line ----------------------------------------------------------------------------------------

# What an errno means for the user, in words (the one mapping every command uses: cause, write_error, writing).
CAUSES = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "read-only file system",
    errno.ENAMETOOLONG: "a name is too long for the file system",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied (operation not permitted)",
    errno.EFBIG: "a file is larger than the file system or the file size limit (ulimit -f) allows",
    errno.ENOENT: "no such file or folder",
    errno.EEXIST: "it already exists",
    errno.EISDIR: "it is a folder",
    errno.ELOOP: "too many symlinks on the path",
    errno.EIO: "input/output error (the device failed)",
    errno.EMFILE: "too many open files",
    errno.ENFILE: "too many open files on the system",
    errno.EXDEV: "it is on another file system",
    errno.EBUSY: "it is in use",
    errno.ENOTEMPTY: "a folder is not empty",
    errno.EMLINK: "too many links in a folder",
    errno.ETXTBSY: "the file is being executed",
}


# The errnos that say the place written cannot take the bytes, whatever is being written: never about an input.
FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


def no_room(folder: Path, nbytes: int) -> OSError | None:
    """The OSError that writing `nbytes` into `folder` meets now (no space, quota, read-only, file size limit), or
    None when they fit: a real reservation (posix_fallocate of a temporary file, removed at once), for telling a
    full disk from a tool's own failure after the fact. None too where the file system cannot reserve space."""
    try:
        fd, name = tempfile.mkstemp(prefix=".qnndeploy-room-", dir=folder)
    except OSError as e:
        return e if e.errno in FULL else None
    try:
        os.posix_fallocate(fd, 0, max(nbytes, 1))
    except OSError as e:
        return e if e.errno in FULL else None
    finally:
        os.close(fd)
        with suppress(OSError):
            Path(name).unlink()
    return None


def cause(e: OSError) -> str:
    """Why an OSError happened, in words: "no space left on the device", "read-only file system", ... For a name
    over the file system's limit, the name and its length in bytes."""
    words = CAUSES.get(e.errno or 0) or (e.strerror or str(e) or type(e).__name__).lower()
    if e.errno == errno.ENAMETOOLONG:
        names = [os.fsencode(n) for f in (e.filename, e.filename2) if f for n in Path(os.fsdecode(f)).parts]
        longest = max(names, key=len, default=b"")
        if len(longest) > 255:
            text = os.fsdecode(longest)
            words += f" ('{text[:24]}…' has {len(longest)} bytes; a name may have at most 255)"
    return words


def write_error(e: OSError, target: Path | str) -> QnnDeployError:
    """The one-line error for an OSError met while writing `target` (the output the user named, not a staging
    name): "cannot write TARGET: CAUSE", exit 2 (the documented code: nothing was left half-written)."""
    where = ""
    if e.filename is not None:  # name the file only when it is not the target or a staging name of it
        name = os.fsdecode(e.filename)
        stem = Path(target).name
        if stem not in name and not Path(name).name.startswith(f".{stem}."):
            where = f" ({name})"
    return BadInput(f"cannot write {shortened(target)}: {cause(e)}{shortened(where)}")


@contextmanager
def writing(target: Path | str) -> Iterator[None]:
    """Turn an OSError raised inside into write_error(e, target): put it outside the staging context, so that the
    staged files are removed first and the message names the output the user asked for."""
    try:
        yield
    except OSError as e:
        raise write_error(e, target) from None


def _nearest(path: Path) -> Path:
    """`path` or its nearest ancestor that exists (never raises: a name too long does not exist)."""
    path = Path(path).absolute()
    return next((p for p in (path, *path.parents) if os.path.lexists(p)), Path(path.anchor or "/"))


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(Path(path).stat().st_mode)
    except (OSError, ValueError):
        return False


def _is_link(path: Path) -> bool:
    try:
        return Path(path).is_symlink()
    except (OSError, ValueError):  # a path over PATH_MAX
        return False


def name_max(folder: Path) -> int:
    """The longest name (bytes) the file system takes in `folder` or its nearest existing parent."""
    try:
        return os.pathconf(_nearest(folder), "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def shortened(path: Path | str, keep: int = 80) -> str:
    """A path for a message: at most `keep` characters, the middle elided."""
    text = str(path)
    return text if len(text) <= keep else f"{text[:keep // 2]}…{text[-keep // 2:]}"


# A staging name is .NAME.partial-PID-XXXXXXXX (mkdtemp's 8 characters), PID of up to 7 digits (Linux's pid_max)
STAGING_OVERHEAD = len(".") + len(".partial-") + 7 + len("-") + 8
PATH_MAX = 4096  # Linux's limit on a whole path given to a system call


def check_writable(final: Path, option: str = "-o") -> None:
    """Refuse at once, before any work, an output name that could not be published, in one line each:
    a symlink (the rename that publishes an output replaces the link itself, not what it points to: give the
    folder or file itself, or a new name), a name over the file system's limit (the output's own name must leave
    room for its staging name .NAME.partial-PID-XXXXXXXX), a nearest existing parent that is not a folder, is on
    a read-only file system, or is not writable. Folders above the output may be symlinks: they are followed."""
    final = Path(final)
    shown = shortened(final)
    limit = name_max(final.parent)
    for part in final.absolute().parts[1:]:
        size = len(os.fsencode(part))
        if size > limit:
            raise BadInput(f"{option} {shown}: the name '{part[:24]}…' has {size} bytes, over the file "
                           f"system's limit of {limit}; give a shorter name")
    size = len(os.fsencode(final.name))
    if size + STAGING_OVERHEAD > limit:
        raise BadInput(f"{option} {shown}: the name has {size} bytes; an output's name may have at most "
                       f"{limit - STAGING_OVERHEAD} (it is written under .NAME.partial-PID-XXXXXXXX first, "
                       f"and a name may have {limit}); give a shorter name")
    total = len(os.fsencode(str(final.absolute())))
    if total + STAGING_OVERHEAD > PATH_MAX:
        raise BadInput(f"{option} {shown}: the path has {total} bytes, over the limit of {PATH_MAX} for a "
                       "whole path (less its staging name's); give a shorter path")
    if _is_link(final):
        raise BadInput(f"{option} {shown} is a symlink (to {final.readlink()}): an output is put in place "
                       "by a rename, which would replace the link, not what it points to; give the target "
                       "itself or a new name")
    existing = _nearest(final.parent)
    if not _is_dir(existing):
        raise BadInput(f"cannot write {option} {shown}: {existing} is not a folder")
    try:
        read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        raise BadInput(f"cannot write {option} {shown}: {existing} is on a read-only file system")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BadInput(f"cannot write {option} {shown}: permission denied in {existing}")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_apart(output: Path, inputs: Iterable[tuple[str, Path | None]], option: str = "-o",
                holding: bool = True) -> None:
    """Refuse, before anything is written, an output that is one of the inputs or lies inside an input folder
    (it would write into what it reads), or, with `holding` (the output is replaced whole), one that holds an
    input (replacing it would delete the input). Symlinks are resolved on both sides first, so a link does not
    hide an overlap. inputs: (what it is, path) pairs; None paths are skipped."""
    out = Path(os.path.realpath(output))
    for what, given in inputs:
        if given is None:
            continue
        path = Path(os.path.realpath(given))
        if _inside(out, path):
            where = "is" if out == path else "is inside"
            raise BadInput(f"{option} {output} {where} the {what} {given}: write the output outside it")
        if holding and _inside(path, out):
            raise BadInput(f"{option} {output} holds the {what} {given}, which replacing it would delete: "
                           "write the output elsewhere")


def resolve_named(path: Path) -> Path:
    """A path the user named: a symlink is resolved here, once, to the file it names, so that the O_NOFOLLOW
    opens that follow take that file and a link swapped in later is refused. Other paths are returned as given."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


@dataclass(frozen=True)
class Copied:
    """What copy_verified wrote: the sha256 and size of the bytes written."""

    sha256: str
    size: int


@dataclass(frozen=True)
class Expected:
    """What a file's bytes must be, from the manifest or record that listed them (None: not listed), and how to say
    that they are not: "SRC changed since SINCE (how); ADVICE"."""

    sha256: str | None = None
    size: int | None = None
    since: str = "it was verified"
    advice: str = "nothing was published from it"


def copy_verified(src: Path, dest: Path, *, expect: Expected = Expected(), beneath: Path | None = None,
                  what: str = "file", progress: ByteProgress | None = None,
                  scan: Callable[[bytes], None] | None = None) -> Copied:
    """Copy the regular file `src` to the new file `dest` and return the sha256 and size of the bytes written.

    - `src` is opened with O_NOFOLLOW: a symlink is refused, and so is anything but a regular file (a FIFO, a device,
      a folder), in one line. With `beneath` (a folder holding src), no folder between it and src may be a symlink.
    - `dest` must not exist (O_EXCL|O_NOFOLLOW: a planted file or link is not written through).
    - Bounded chunks (CHUNK bytes): each one is hashed and written from the same buffer, so the digest returned is
      that of the bytes written, never of another read. `scan` sees each chunk, `progress` its length.
    - `expect`: what the bytes must be (from a manifest or record that was checked). When the bytes written differ:
      QnnDeployError "SRC changed since SINCE (how); ADVICE", as soon as it grows past the expected size.
    - No partial destination: on any failure or interrupt (a safe point between chunks: interrupt.check), `dest` is
      removed.
    - Errors: a QnnDeployError for the source (refused, unreadable, changed); an OSError for writing `dest`
      propagates as it is (its errno says why: ENOSPC, EROFS, ...), so that the caller's `writing(OUTPUT)` names the
      output it is publishing.
    """
    src, dest = Path(src), Path(dest)
    size = expect.size
    digest, total = hashlib.sha256(), 0
    buf = bytearray(CHUNK)
    view = memoryview(buf)

    def changed(detail: str) -> QnnDeployError:
        return BadInput(f"{src} changed since {expect.since} ({detail}); {expect.advice}")

    with open_regular(src, what=what, beneath=beneath) as f:
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                      0o666)
        try:
            try:
                while True:
                    interrupt.check()  # a safe point: a SIGTERM stops a long copy here
                    try:
                        n = os.readv(f.fileno(), [buf])  # straight from the fd: no second buffer
                    except OSError as e:
                        raise BadInput(f"cannot read {src}: {cause(e)}") from None
                    if not n:
                        break
                    total += n
                    if size is not None and total > size:
                        raise changed(f"it has more than the {size:,} bytes recorded")
                    chunk = view[:n]
                    digest.update(chunk)
                    if scan is not None:
                        scan(bytes(chunk))
                    written = 0
                    while written < n:
                        written += os.write(out, chunk[written:])
                    if progress is not None:
                        progress(n)
            finally:
                os.close(out)
            if size is not None and total != size:
                raise changed(f"it has {total:,} bytes, not the {size:,} recorded")
            if expect.sha256 is not None and digest.hexdigest() != expect.sha256:
                raise changed("its sha256 is not the one recorded")
        except BaseException:
            with suppress(OSError):
                dest.unlink()
            raise
    return Copied(digest.hexdigest(), total)


def first_missing(folder: Path) -> Path | None:
    """The outermost ancestor of `folder` (or itself) that does not exist yet: what creating it makes."""
    missing = None
    for p in (Path(folder).absolute(), *Path(folder).absolute().parents):
        if os.path.lexists(p):
            break
        missing = p
    return missing


def remove_made(folder: Path, top: Path | None) -> None:
    """Remove `folder` and its parents up to `top` (first_missing's answer before they were made), as far as they
    are empty: a failed run leaves no empty folders it created."""
    if top is None:
        return
    for p in (Path(folder).absolute(), *Path(folder).absolute().parents):
        try:
            p.rmdir()
        except OSError:
            return
        if p == top:
            return


def sha256_file(path: Path, progress: ByteProgress | None = None, scan: Callable[[bytes], None] | None = None,
                copy_to: Path | None = None) -> str:
    """sha256 in constant memory, in one pass that can also feed `scan` and write a copy to `copy_to`."""
    digest = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    try:
        with path.open("rb", buffering=0) as f, (copy_to.open("wb") if copy_to else nullcontext()) as out:
            while n := f.readinto(buf):
                interrupt.check()  # a safe point: a SIGTERM stops a long hash or copy here
                digest.update(view[:n])
                if scan is not None:
                    scan(bytes(view[:n]))
                if out is not None:
                    out.write(view[:n])
                if progress is not None:
                    progress(n)
    except OSError as e:
        raise BadInput(f"cannot {'copy' if copy_to else 'read'} {path}: {cause(e)}") from None
    return digest.hexdigest()


def read_json(path: Path, what: str, writer: str) -> object:
    """The JSON value of the `what` file at `path` (`writer`: the command that writes one); BadInput in one line when
    it cannot be read or holds no JSON."""
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise BadInput(f"{path}: cannot read the {what} ({e.strerror or e})") from None
    except ValueError:
        raise BadInput(f"{path}: not a {what} ({writer})") from None


def write_json(path: Path, data: object) -> None:
    """Write strict JSON through a temporary file and a rename, so a crash never leaves half a file. A number that is
    not finite (NaN, Infinity: not JSON) is written as null; a writer that can say why nulls it first, with a note
    (numbers.strict)."""
    data, _ = numbers.strict(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=False, allow_nan=False)
            f.write("\n")
        publish(Path(tmp), path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- atomic publication -------------------------------------------------------------------------------------------

AT_FDCWD = -100
RENAME_EXCHANGE = 2


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """libc's renameat2, loaded on first use (ctypes is not needed at start-up)."""
    import ctypes  # noqa: PLC0415 only for renameat2: not at start-up

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not Linux, or a libc older than glibc 2.28
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def exchange(a: Path, b: Path) -> bool:
    """Swap the names `a` and `b` in one atomic step (renameat2 RENAME_EXCHANGE). False, with nothing changed,
    where the platform or the file system cannot (no renameat2, ENOSYS, EINVAL): the caller falls back."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    import ctypes  # noqa: PLC0415 loaded by _renameat2 already

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
    interrupt.record(final)


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


@contextmanager
def work_beside(record: Path, stem: str) -> Iterator[Path]:
    """A scratch folder beside `record` (`.STEM.partial-PID-*`, an earlier killed run's removed first), removed
    after; when the body fails, the folders made for `record` go too: a failed run leaves nothing."""
    folder = record.parent
    made = first_missing(folder)
    try:
        with writing(record):
            folder.mkdir(parents=True, exist_ok=True)
            remove_stale(record, prefix=f".{stem}.")
            work = Path(tempfile.mkdtemp(prefix=partial_prefix(record, stem), dir=folder))
            try:
                yield work
            finally:
                shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        remove_made(folder, made)
        raise


def partial_file(final: Path) -> Path:
    """A new empty file beside `final` under its staging name, to be published with `replace`."""
    fd, name = tempfile.mkstemp(prefix=partial_prefix(final), dir=final.parent)
    os.close(fd)
    return Path(name)


def check_replaceable(out: Path, force: bool, marker: str, what: str) -> None:
    """An output folder a command may write: new, empty, or (with force) an earlier output of that command, which
    holds `marker`; never someone else's folder. A symlink is refused, even to an empty folder: the output is
    put in place by a rename, which would replace the link, not the folder it points to."""
    if out.is_symlink():
        raise BadInput(f"{out} is a symlink (to {out.readlink()}): the output is put in place by a rename, "
                       "which would replace the link, not the folder it points to; give the folder itself or "
                       "a new name")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise BadInput(f"{out} exists and is not empty; choose another folder or pass --force to replace "
                           f"an earlier {what} output")
        if not (out / marker).is_file():
            raise BadInput(f"{out} is not an earlier {what} output (it has no {marker}): --force only "
                           "replaces one, never other files; choose another folder (or delete it yourself)")


def _beside(final: Path, force: bool, tidy: bool, make: Callable[[], Path]) -> tuple[Path | None, Path]:
    """What staging_dir and staging_file do first: refuse an existing `final` without force, make its parent, clear
    earlier runs' leftovers, then `make` the temporary sibling; on failure remove the parents this made (tidy)."""
    if final.exists() and not force:
        raise BadInput(f"{final} already exists; remove it or pass --force")
    made = first_missing(final.parent) if tidy else None
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(final)
        return made, make()
    except BaseException:
        remove_made(final.parent, made)
        raise


@contextmanager
def staging_dir(final: Path, force: bool = False, tidy: bool = False) -> Iterator[Path]:
    """Yield an empty sibling folder of `final`; on success it replaces `final` in one step (see `replace`), on
    any error or interrupt it is removed. Leftovers of earlier killed runs for the same name are removed first.
    `tidy`: on failure, also remove the parent folders this call had to create (a failed run leaves no empty
    folder behind); off where concurrent jobs share a parent (compile)."""
    made, tmp = _beside(final, force, tidy,
                        lambda: Path(tempfile.mkdtemp(prefix=partial_prefix(final), dir=final.parent)))
    try:
        tmp.chmod(0o777 & ~_UMASK)
        yield tmp
        replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_made(final.parent, made)
        raise


@contextmanager
def staging_file(final: Path, force: bool = False, tidy: bool = False) -> Iterator[Path]:
    """Like staging_dir, for one file: written under a temporary name beside `final`, then one rename."""
    made, tmp = _beside(final, force, tidy, lambda: partial_file(final))
    try:
        yield tmp
        replace(tmp, final, 0o666)
    except BaseException:
        tmp.unlink(missing_ok=True)
        remove_made(final.parent, made)
        raise

"""Packing a bundle into .tar.gz/.zip, and unpacking one safely in one bounded pass: unsafe members and members
over the limits are refused before they are extracted."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import IO, Any, BinaryIO

from qnndeploy.base.errors import BadInput, CheckFailed, first_line
from qnndeploy.base.fileio import CHUNK, open_regular
from qnndeploy.base.names import file_kind


class ArchiveKind(StrEnum):
    """A bundle archive's kind, as its file name ends (bundle build --archive)."""

    TAR_GZ = "tar.gz"
    ZIP = "zip"


def archive_format(path: Path) -> ArchiveKind:
    name = path.name.lower()
    if name.endswith((".tar.gz", ".tgz")):
        return ArchiveKind.TAR_GZ
    if name.endswith(".zip"):
        return ArchiveKind.ZIP
    raise BadInput(f"{path} is {file_kind(path.name)}, not a bundle: give a bundle folder or its .tar.gz/.zip")


def write_archive(folder: Path, dest: Path, fmt: ArchiveKind, top: str) -> None:
    """Pack `folder` under one top folder `top`, members sorted so that archives are reproducible."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    root = PurePosixPath(top)
    if fmt == ArchiveKind.ZIP:
        with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
            for p in files:
                z.write(p, str(root / p.relative_to(folder).as_posix()))
    else:
        with tarfile.open(dest, "w:gz", compresslevel=6) as t:
            for p in files:
                info = t.gettarinfo(p, str(root / p.relative_to(folder).as_posix()))
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                with p.open("rb") as f:
                    t.addfile(info, f)


# Limits of the archive reader, checked from the headers before a member is extracted (configurable constants).
MAX_MEMBERS = 4_096  # a bundle of 20 SoCs x 10 graphs with runtime and records has about 600 files; a tar.gz is
# counted while it is extracted, so this also bounds the files a refused tar.gz writes (seconds on a slow disk)
MAX_TOTAL_BYTES = 64 << 30  # uncompressed bytes of all members together
MAX_RATIO = 200  # uncompressed : compressed, per zip member (for a tar.gz: of the whole archive so far) ...
RATIO_FLOOR = 1 << 20  # ... once the member (the archive so far) is over 1 MiB; ONNX weights compress about 1.1:1
MAX_DEPTH = 64  # path segments of a member name; a bundle needs 4
MAX_TRAILING = 1 << 20  # bytes after the tar end-of-archive marker (tar pads to 10 KiB)
MAX_TAR_HEADER = 1 << 20  # a tar extension header (pax, GNU long name), which tarfile reads into memory whole
ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2",
               zipfile.ZIP_LZMA: "lzma"}

REFUSED = "archive refused before extraction"


class _Stop(Exception):
    """A limit that ends the one pass over an archive: (member, why)."""

    def __init__(self, member: str, why: str) -> None:
        super().__init__(why)
        self.member, self.why = member, why


def _unsafe(name: str) -> str | None:
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "has an absolute path"
    if ".." in p.parts:
        return "has a '..' path segment"
    if len(p.parts) > MAX_DEPTH:
        return f"is {len(p.parts):,} folders deep, over the limit of {MAX_DEPTH}"
    return None


class _Totals:
    """Members and uncompressed bytes seen so far; each new member header is checked against the limits."""

    def __init__(self, packed: int) -> None:
        self.packed, self.members, self.bytes = packed, 0, 0  # packed: the archive's size

    def add(self, name: str, size: int, packed: int | None) -> None:
        """packed: the member's compressed size, or None for a tar.gz (then the archive's size so far counts)."""
        self.members += 1
        self.bytes += size
        if self.members > MAX_MEMBERS:
            raise _Stop(name, f"is member {self.members:,}: the archive has more than the limit of "
                              f"{MAX_MEMBERS:,} members; {REFUSED}")
        if self.bytes > MAX_TOTAL_BYTES:
            raise _Stop(name, f"brings the archive to {self.bytes:,} uncompressed bytes, over the limit of "
                              f"{MAX_TOTAL_BYTES:,} (qnndeploy.formats.archive.MAX_TOTAL_BYTES); {REFUSED}")
        ratio_of, whole = (size, packed) if packed is not None else (self.bytes, self.packed)
        if ratio_of > RATIO_FLOOR and ratio_of > MAX_RATIO * max(whole, 1):
            what = "its" if packed is not None else "the archive's"
            raise _Stop(name, f"expands {what} {whole:,} compressed bytes to {ratio_of:,}, over the limit of "
                              f"{MAX_RATIO}:1 (a zip bomb?); {REFUSED}")


def _zip_refusal(info: zipfile.ZipInfo) -> str | None:
    why = _unsafe(info.filename)
    kind = stat.S_IFMT(info.external_attr >> 16)  # 0: no Unix type recorded, a plain member
    if why is None and kind == stat.S_IFLNK:
        why = "is a symlink"
    elif why is None and kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        why = "is a device file or FIFO"
    elif why is None and info.flag_bits & 0x1:
        why = "is encrypted"
    elif why is None and info.compress_type not in ZIP_METHODS:
        why = (f"uses compression method {info.compress_type}, which qnndeploy does not read (it reads "
               f"{', '.join(ZIP_METHODS.values())})")
    return why and f"{why}: {REFUSED}"


def _tar_refusal(m: tarfile.TarInfo) -> str | None:
    why = _unsafe(m.name)
    if why is None and (m.issym() or m.islnk()):
        why = "is a symlink or hard link"
    elif why is None and m.issparse():
        why = "is a sparse file"
    elif why is None and not (m.isfile() or m.isdir()):
        why = "is a device file or FIFO"
    return why and f"{why}: {REFUSED}"


def _write(tmp: Path, name: str, is_dir: bool, src: IO[bytes] | None, made: set[Path]) -> None:
    """Extract one checked member (a regular file or folder with a safe name) under tmp, with the permissions of a
    new file; `made` holds the folders made so far."""
    dest = tmp.joinpath(*PurePosixPath(name.replace("\\", "/")).parts)
    folder = dest if is_dir else dest.parent
    if folder not in made:
        folder.mkdir(parents=True, exist_ok=True)
        made.update(folder.parents)
        made.add(folder)
    if is_dir or src is None:
        return
    with dest.open("xb") as out:  # "x": a name twice in one archive is refused, not silently overwritten
        while chunk := src.read(CHUNK):
            out.write(chunk)


def _extract_zip(f: BinaryIO, path: Path, tmp: Path) -> list[tuple[str, str]]:
    """Check every header (the central directory) against the limits, then extract, CRCs checked on the way."""
    with zipfile.ZipFile(f) as z:
        infos = z.infolist()
        totals = _Totals(os.fstat(f.fileno()).st_size)
        refused: list[tuple[str, str]] = []
        try:
            for info in infos:
                why = _zip_refusal(info)
                if why:
                    refused.append((info.filename, why))
                else:
                    totals.add(info.filename, info.file_size, info.compress_size)
        except _Stop as stop:
            return [*refused, (stop.member, stop.why)]
        if refused:
            return refused
        made: set[Path] = {tmp}
        for info in infos:
            with nullcontext() if info.is_dir() else z.open(info) as src:  # at most file_size bytes, CRC checked
                _write(tmp, info.filename, info.is_dir(), src, made)
    return []


class _Bounded(io.RawIOBase):
    """A decompressed stream that stops with _Stop once it has given more bytes than the limits allow, whatever
    the headers claim (tar extension headers are read into memory before anyone can look at them)."""

    def __init__(self, raw: io.BufferedIOBase, path: Path, packed: int) -> None:
        self.raw, self.path, self.given = raw, path, 0
        self.limit = min(MAX_TOTAL_BYTES, MAX_RATIO * packed + RATIO_FLOOR) + MAX_TRAILING

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self.raw.readinto(b)
        self.given += n
        if self.given > self.limit:
            raise _Stop(self.path.name, f"decompresses to more than {self.limit:,} bytes, over the limits of "
                                        f"{MAX_RATIO}:1 and {MAX_TOTAL_BYTES:,} bytes; {REFUSED}")
        return int(n)


_EXTENSIONS = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
               tarfile.GNUTYPE_LONGLINK)


class _CheckedInfo(tarfile.TarInfo):
    """A tar header that refuses an extension header over MAX_TAR_HEADER bytes before tarfile reads it."""

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _EXTENSIONS and self.size > MAX_TAR_HEADER:
            raise _Stop(self.name, f"is an extension header of {self.size:,} bytes, over the limit of "
                                   f"{MAX_TAR_HEADER:,}; {REFUSED}")
        info: tarfile.TarInfo = super()._proc_member(tar)  # type: ignore[misc]
        return info


def _extract_tar(f: BinaryIO, path: Path, tmp: Path) -> list[tuple[str, str]]:
    """One streaming pass: each member's header is checked, then the member extracted, before the next is read.
    The first member over a limit ends the pass; unsafe members are all listed, and nothing more is extracted."""
    packed = os.fstat(f.fileno()).st_size
    totals = _Totals(packed)
    refused: list[tuple[str, str]] = []
    made: set[Path] = {tmp}
    with gzip.GzipFile(fileobj=f, mode="rb") as gz:
        stream = _Bounded(gz, path, packed)
        try:
            with tarfile.open(fileobj=stream, mode="r|", tarinfo=_CheckedInfo) as t:
                for m in t:
                    why = _tar_refusal(m)
                    if why and m.issparse():
                        return [*refused, (m.name, why)]  # its data size is not its size: stop reading here
                    if why:
                        refused.append((m.name, why))
                    totals.add(m.name, m.size, None)
                    if not refused:
                        _write(tmp, m.name, m.isdir(), t.extractfile(m), made)
            while stream.read(CHUNK):  # to the gzip trailer, so that its CRC and length are checked
                pass
        except _Stop as stop:
            return [*refused, (stop.member, stop.why)]
    return refused


@contextmanager
def extracted(path: Path) -> Iterator[tuple[Path, list[tuple[str, str]]]]:
    """Yield (bundle root, refused members as (name, why)). With refusals the root is a dummy and nothing of the
    archive may be used.

    The archive must be a regular file (a symlink to one is followed; a FIFO, device or socket is refused at
    once). It is read in one pass that checks each member against the limits above and extracts it: a damaged
    archive (bad CRC, truncated) is a QnnDeployError with exit code 1."""
    fmt = archive_format(path)
    with open_regular(path, what=f"{fmt} archive", follow=True) as f:
        tmp = Path(tempfile.mkdtemp(prefix="qnndeploy-verify-"))
        try:
            try:
                refused = _extract_zip(f, path, tmp) if fmt == ArchiveKind.ZIP else _extract_tar(f, path, tmp)
            except OSError as e:
                if e.errno is None:  # gzip.BadGzipFile and the like: the archive, not the temp folder
                    raise CheckFailed(f"{path} is a damaged archive ({first_line(e)}): copy or download it "
                                      "again") from None
                raise CheckFailed(f"{path} could not be extracted to {tempfile.gettempdir()}: "
                                  f"{e.strerror} (a member named twice, or as both file and folder, does this "
                                  "too)") from None
            except (EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError, NotImplementedError,
                    RuntimeError, ValueError) as e:
                why = first_line(e)
                raise CheckFailed(f"{path} is a damaged archive ({why}): copy or download it again") from None
            yield (_bundle_root(tmp, path) if not refused else tmp), refused
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _bundle_root(tmp: Path, archive: Path) -> Path:
    """The archive's single top folder, or the archive root if the manifest sits there."""
    entries = list(tmp.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not (tmp / "manifest.json").exists():
        return entries[0]
    if not (tmp / "manifest.json").exists():
        raise BadInput(f"{archive} is not a bundle archive: it must hold one folder with manifest.json "
                       f"(it holds {', '.join(sorted(e.name for e in entries)[:4]) or 'nothing'})")
    return tmp

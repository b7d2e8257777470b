"""Packing a bundle into .tar.gz/.zip, and unpacking one safely: unsafe members are refused before extraction."""

from __future__ import annotations

import gzip
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from qnndeploy.errors import EXIT_CHECK_FAILED, QnnDeployError

FORMATS = ("tar.gz", "zip")


def archive_format(path: Path) -> str:
    name = path.name.lower()
    if name.endswith((".tar.gz", ".tgz")):
        return "tar.gz"
    if name.endswith(".zip"):
        return "zip"
    raise QnnDeployError(f"{path} is neither a bundle folder nor a .tar.gz/.zip archive")


def write_archive(folder: Path, dest: Path, fmt: str, top: str) -> None:
    """Pack `folder` under one top folder `top`, members sorted so that archives are reproducible."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    root = PurePosixPath(top)
    if fmt == "zip":
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


def _unsafe(name: str) -> str | None:
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "has an absolute path"
    if ".." in p.parts:
        return "has a '..' path segment"
    return None


def _check_intact(path: Path, fmt: str) -> None:
    """Read the whole archive once so that a damaged one is called damaged, not reported as missing files."""
    try:
        if fmt == "zip":
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
            if bad is None:
                return
            why = f"member {bad} fails its CRC check"
        else:
            with gzip.open(path, "rb") as g:
                while g.read(1 << 20):
                    pass
            return
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile) as e:
        why = str(e) or type(e).__name__
    raise QnnDeployError(f"{path} is a damaged archive ({why}): copy or download it again", EXIT_CHECK_FAILED)


def _refusals(path: Path, fmt: str) -> list[tuple[str, str]]:
    """(member, why) for every member that must not be extracted."""
    refused = []
    try:
        if fmt == "zip":
            with zipfile.ZipFile(path) as z:
                for info in z.infolist():
                    why = _unsafe(info.filename)
                    kind = stat.S_IFMT(info.external_attr >> 16)  # 0: no Unix type recorded, a plain member
                    if why is None and kind == stat.S_IFLNK:
                        why = "is a symlink"
                    elif why is None and kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                        why = "is a device file or FIFO"
                    if why:
                        refused.append((info.filename, f"{why}: archive refused before extraction"))
        else:
            with tarfile.open(path, "r:*") as t:
                for m in t.getmembers():
                    why = _unsafe(m.name)
                    if why is None and (m.issym() or m.islnk()):
                        why = "is a symlink or hard link"
                    elif why is None and not (m.isfile() or m.isdir()):
                        why = "is a device file or FIFO"
                    if why:
                        refused.append((m.name, f"{why}: archive refused before extraction"))
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
        raise QnnDeployError(f"{path} is not a readable {fmt} archive: {e}") from None
    return refused


@contextmanager
def extracted(path: Path) -> Iterator[tuple[Path, list[tuple[str, str]]]]:
    """Yield (bundle root, refused members as (name, why)). With refusals nothing is extracted and root is a
    dummy."""
    fmt = archive_format(path)
    _check_intact(path, fmt)
    refused = _refusals(path, fmt)
    tmp = Path(tempfile.mkdtemp(prefix="qnndeploy-verify-"))
    try:
        if not refused:
            try:
                if fmt == "zip":
                    with zipfile.ZipFile(path) as z:
                        z.extractall(tmp)
                else:
                    with tarfile.open(path, "r:*") as t:
                        t.extractall(tmp, filter="data")
            except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
                raise QnnDeployError(f"{path} could not be extracted: {e}") from None
        yield (_bundle_root(tmp, path) if not refused else tmp), refused
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bundle_root(tmp: Path, archive: Path) -> Path:
    """The archive's single top folder, or the archive root if the manifest sits there."""
    entries = list(tmp.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not (tmp / "manifest.json").exists():
        return entries[0]
    if not (tmp / "manifest.json").exists():
        raise QnnDeployError(f"{archive} is not a bundle archive: it must hold one folder with manifest.json "
                             f"(it holds {', '.join(sorted(e.name for e in entries)[:4]) or 'nothing'})")
    return tmp

"""The compile cache: every finished job kept under its cache key, so an unchanged job is never compiled twice.

Layout (content-addressed; nothing else is written there):
  <cache>/CACHEDIR.TAG               marks the folder as a cache (backup tools skip it; `cache clear` knows it)
  <cache>/<key>/compile.json         the job's compile record; its cache_key is the folder's name
  <cache>/<key>/<graph>.bin …        the job's outputs, as in the build folder
  <cache>/<key>/compile.log          the original compile's log
  <cache>/.<key[:12]>.<random>/      an entry being written, renamed to <key> when complete
The key is the sha256 of everything that decides the outputs (cache_key). The cache never evicts by itself:
`qnndeploy cache list | size | clear` shows and empties it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from qnndeploy import __version__
from qnndeploy.base.errors import BadInput, QnnDeployError
from qnndeploy.base.fileio import sha256_file, staging_dir, write_json
from qnndeploy.base.kinds import Precision
from qnndeploy.base.socs import Soc
from qnndeploy.compile.jobs import Backend, CompileJob, with_input_paths
from qnndeploy.formats.records import RECORD_FILE, RECORD_VERSION, JobRecord, read_record

LOG_FILE = "compile.log"
TAG_FILE = "CACHEDIR.TAG"
TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"  # https://bford.info/cachedir/
       "# This folder is the qnndeploy compile cache: `qnndeploy cache clear` empties it.\n")
_KEY = re.compile(r"[0-9a-f]{64}")
_PARTIAL = re.compile(r"\.[0-9a-f]{12}\..+")  # tempfile.mkdtemp(prefix=".<key[:12]>.") in add()


def default_cache_dir() -> Path:
    """$QNNDEPLOY_CACHE_DIR, else $XDG_CACHE_HOME/qnndeploy/compile, else ~/.cache/qnndeploy/compile."""
    if env := os.environ.get("QNNDEPLOY_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "qnndeploy" / "compile"


def cache_key(graph: str, model_sha256: str, soc: Soc, be: Backend, precision: Precision,
              options: dict[str, Any]) -> str:
    """The sha256 of everything that decides a job's outputs (not where the model or the samples lie)."""
    options = {**options, "calibration": options["calibration"] and
               {k: v for k, v in options["calibration"].items() if k != "path"}}
    data = {"record_version": RECORD_VERSION, "qnndeploy": __version__, "graph": graph, "model": model_sha256,
            "soc": [soc.model, soc.soc_id, soc.dsp_arch, soc.vtcm_mb], "backend": be.name, "tools": be.identity(),
            "precision": precision, "options": options}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


# --- used by compile --------------------------------------------------------------------------------------------

def restore(job: CompileJob, cache: Path) -> JobRecord | None:
    """Fill the job's folder from its cache entry and return the entry's record, or None on a miss. An entry that
    no longer matches its record is removed, so the compile that follows stores a good one in its place."""
    entry = cache / job.cache_key
    if not entry.is_dir():
        return None
    record = read_record(entry / RECORD_FILE)
    if not record or record.cache_key != job.cache_key or not all(
            (entry / o.path).is_file() for o in record.outputs):
        shutil.rmtree(entry, ignore_errors=True)
        return None
    try:
        with staging_dir(job.folder, force=True) as work:
            for o in record.outputs:
                shutil.copy2(entry / o.path, work / o.path)
            if not outputs_intact(work, record):
                shutil.rmtree(entry, ignore_errors=True)
                raise OSError("the cache entry's files differ from its record")
            record = with_input_paths(job, record)
            write_json(work / RECORD_FILE, record.to_json())
    except OSError:
        return None  # a damaged or half-deleted entry, or a build folder that cannot be written: compile again
    original = entry / LOG_FILE
    body = original.read_text(errors="replace") if original.is_file() else ""
    job.log.write_text(f"qnndeploy: cache hit {job.cache_key}: outputs restored from {entry}; "
                       f"the original compile log follows\n{body}")
    return record


def add(job: CompileJob, cache: Path) -> None:
    """Keep a finished job in the cache. Best effort: a full disk must not fail the build."""
    entry = cache / job.cache_key
    if entry.exists():
        return
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tag = cache / TAG_FILE
        if not tag.exists():
            tag.write_text(TAG)
        tmp = Path(tempfile.mkdtemp(prefix=f".{job.cache_key[:12]}.", dir=cache))
        try:
            for p in job.folder.iterdir():
                if p.is_file() and not p.name.startswith("validation"):
                    shutil.copy2(p, tmp / p.name)
            shutil.copy2(job.log, tmp / LOG_FILE)
            tmp.replace(entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except OSError:
        pass


def outputs_intact(folder: Path, record: JobRecord) -> bool:
    """Every output the record lists is in `folder` with its size and sha256."""
    try:
        return bool(record.outputs) and all(
            (folder / o.path).stat().st_size == o.size and sha256_file(folder / o.path) == o.sha256
            for o in record.outputs)
    except (OSError, QnnDeployError):
        return False


# --- used by `qnndeploy cache` ----------------------------------------------------------------------------------

class EntryState(StrEnum):
    OK = "ok"
    DAMAGED = "damaged"  # no record naming its key
    PARTIAL = "partial"  # being written, or left by a kill


@dataclass
class CacheEntry:
    key: str  # the folder's name (for a partial entry: the folder's name too)
    status: EntryState
    files: int
    bytes: int
    graph: str | None = None
    soc: str | None = None
    backend: str | None = None
    precision: str | None = None
    qairt_version: str | None = None
    model: str | None = None  # the model it was last compiled or restored from
    created: str | None = None


@dataclass
class CacheListing:
    path: Path
    entries: list[CacheEntry] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # names in the folder that are not the cache's: never removed
    bytes: int = 0


@dataclass
class ClearResult:
    path: Path
    removed: int = 0
    bytes: int = 0
    kept: list[str] = field(default_factory=list)  # names that are not the cache's, left in place
    failed: list[str] = field(default_factory=list)  # entries that could not be removed

    @property
    def ok(self) -> bool:
        return not self.failed


def scan(cache_dir: Path | None = None) -> CacheListing:
    """The entries of a compile cache (default: default_cache_dir()), with their size and what they hold.

    Refuses a folder that does not look like a compile cache: one with other things in it but neither the cache
    tag nor a single valid entry (a folder given by mistake)."""
    path = Path(cache_dir or default_cache_dir()).expanduser()
    listing = CacheListing(path)
    if not path.exists():
        return listing
    if not path.is_dir():
        raise BadInput(f"{path} is a file, not a compile cache folder")
    try:
        children = sorted(path.iterdir(), key=lambda p: p.name)
    except OSError as e:
        raise BadInput(f"cannot read {path}: {e.strerror or e}") from None
    tagged = False
    for child in children:
        is_dir = child.is_dir() and not child.is_symlink()
        if is_dir and _KEY.fullmatch(child.name):
            listing.entries.append(_entry(child))
        elif is_dir and _PARTIAL.fullmatch(child.name):
            listing.entries.append(CacheEntry(child.name, EntryState.PARTIAL, *_usage(child)))
        elif child.name == TAG_FILE and child.is_file() and not child.is_symlink() \
                and child.read_text(errors="replace").startswith(TAG.splitlines()[0]):
            tagged = True
        else:
            listing.other.append(child.name + ("/" if child.is_dir() else ""))
    if listing.other and not tagged and not any(e.status == EntryState.OK for e in listing.entries):
        shown = ", ".join(listing.other[:4]) + (f" and {len(listing.other) - 4} more" if len(listing.other) > 4 else "")
        raise BadInput(f"{path} does not look like a qnndeploy compile cache (it holds {shown}, and no cache "
                       f"entry): give the cache folder with --cache-dir (default {default_cache_dir()})")
    listing.bytes = sum(e.bytes for e in listing.entries)
    return listing


def clear(cache_dir: Path | None = None) -> ClearResult:
    """Remove every entry of a compile cache (finished, damaged or partial); nothing else in the folder is touched,
    and a folder that does not look like a compile cache is refused (see scan)."""
    listing = scan(cache_dir)
    result = ClearResult(listing.path, kept=listing.other)
    for e in listing.entries:
        folder = listing.path / e.key
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            result.failed.append(e.key)
        else:
            result.removed += 1
            result.bytes += e.bytes
    return result


def _usage(folder: Path) -> tuple[int, int]:
    """(files, bytes) under a folder, links not followed."""
    files = size = 0
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            try:
                size += Path(dirpath, name).lstat().st_size
                files += 1
            except OSError:
                pass
    return files, size


def _entry(folder: Path) -> CacheEntry:
    files, size = _usage(folder)
    record = read_record(folder / RECORD_FILE)
    if not record or record.cache_key != folder.name:
        return CacheEntry(folder.name, EntryState.DAMAGED, files, size)
    return CacheEntry(folder.name, EntryState.OK, files, size, record.graph, record.soc, record.backend,
                      record.precision, record.qairt_version, record.input.path if record.input else None,
                      record.created)

"""The licence manifest's origins: where each Qualcomm file of a bundle came from (an onnxruntime-qnn wheel, a QAIRT
SDK folder, a folder of runtime libraries, Qualcomm AI Hub, a Maven artifact the app fetches), and the licence and
notice files that came with it, found where that origin keeps them (never at a guessed path), for bundle build to
copy under licences/<origin>/. An origin whose files cannot be found here has terms None: unknown."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from qnndeploy.base.fileio import JSON
from qnndeploy.base.kinds import BackendName
from qnndeploy.base.names import LICENCES_DIR
from qnndeploy.formats.manifest import BundleFile, Origin, OriginKind
from qnndeploy.qnn import toolchain

# A file named like a licence or notice text: LICENSE, LICENCE.txt, NOTICE, ThirdPartyNotices.txt,
# Qualcomm_LICENSE.pdf, COPYING; code and libraries never.
_NAMED = re.compile(r"(?i)licen[cs]e|notice|copying")
_NOT_TEXT = (".py", ".pyc", ".so", ".dll", ".dylib", ".json")
WHEEL = "onnxruntime-qnn"


@dataclass(frozen=True)
class FoundOrigin:
    """One origin of Qualcomm files. terms: (source file, its path in the bundle) of each licence or notice file
    found with it; None when none was found: the terms are unknown."""

    id: str  # its folder under licences/, and how the manifest's files name it
    kind: OriginKind
    found_in: str  # where its terms were looked for, in words
    version: str | None = None  # the wheel's, the SDK's, the Maven artifact's
    qairt: str | None = None  # the QAIRT release it carries
    coordinate: str | None = None  # a Maven artifact's
    terms: tuple[tuple[Path, str], ...] | None = None

    def as_origin(self, terms: tuple[BundleFile, ...] | None) -> Origin:
        """Its manifest entry, with its terms files as written in the bundle (None: unknown)."""
        return Origin(self.id, self.kind, self.found_in, self.version, self.qairt, self.coordinate, terms)


def named_like_licence(name: str) -> bool:
    return bool(_NAMED.search(name)) and not name.lower().endswith(_NOT_TEXT)


def _at_root(origin_id: str, folder: Path) -> tuple[tuple[Path, str], ...] | None:
    """The licence and notice files at the root of a folder (not below: an SDK's samples carry their own)."""
    found = sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink() and named_like_licence(p.name))
    return tuple((p, f"{LICENCES_DIR}/{origin_id}/{p.name}") for p in found) or None


def sdk(root: Path) -> FoundOrigin:
    """A QAIRT SDK folder (--qnn-sdk-root): the licence files at its root. Its QAIRT is the bundle's (bundle build
    fills it in from the libraries' build strings)."""
    return FoundOrigin("qairt-sdk", OriginKind.QAIRT_SDK, f"the root of the QAIRT SDK folder {root.name}",
                       terms=_at_root("qairt-sdk", root))


def runtime_folder(root: Path) -> FoundOrigin:
    """A folder of runtime libraries (--runtime-libs): the licence files beside them."""
    return FoundOrigin("runtime-libs", OriginKind.RUNTIME_LIBS, f"the runtime-libs folder {root.name}",
                       terms=_at_root("runtime-libs", root))


def maven(coordinate: str) -> FoundOrigin:
    """The external runtime the app fetches from Maven: not in the bundle, nor its terms."""
    return FoundOrigin("maven-" + coordinate.replace(":", "-"), OriginKind.MAVEN,
                       "not in the bundle: the app gets the artifact, and its terms, from Maven",
                       version=coordinate.rpartition(":")[2], coordinate=coordinate)


def wheel(version: str, qairt: str | None) -> FoundOrigin:
    """An onnxruntime-qnn wheel of `version`: the installed one or a toolchain folder's (toolchain.folder), each
    found by its package metadata, whose file list names its licence and notice files."""
    from importlib import metadata  # noqa: PLC0415 email.* at start-up

    origin_id = f"{WHEEL}-{version}"
    places: list[tuple[Path | None, str]] = [(None, f"the installed {WHEEL}")]
    tc = next((t for t in toolchain.known() if t.onnxruntime_qnn == version), None)
    if tc is not None:
        folder = toolchain.folder(tc)
        places.append((folder, f"the toolchain folder {folder}"))
    for path, where in places:
        found = metadata.distributions(name=WHEEL, path=[str(path)] if path is not None else sys.path)
        dist = next((d for d in found if d.version == version), None)
        if dist is not None:
            files = sorted(f for f in dist.files or () if named_like_licence(f.name))
            terms = tuple((Path(str(dist.locate_file(f))), f"{LICENCES_DIR}/{origin_id}/{f.as_posix()}")
                          for f in files)
            return FoundOrigin(origin_id, OriginKind.WHEEL, f"{where} ({WHEEL} {version})", version=version,
                               qairt=qairt, terms=terms or None)
    return FoundOrigin(origin_id, OriginKind.WHEEL,
                       f"{WHEEL} {version} is neither installed here nor a toolchain folder", version=version,
                       qairt=qairt)


def aihub(qairt: str | None) -> FoundOrigin:
    return FoundOrigin("qualcomm-ai-hub", OriginKind.AIHUB,
                       "compiled by Qualcomm AI Hub: no licence file comes with its binaries", qairt=qairt)


UNKNOWN_COMPILER = FoundOrigin("unknown-compiler", OriginKind.UNKNOWN, "given without a compile record (bundle build "
                               "--npu): the compiler is unknown")


def compiler(record: JSON | None, sdk_origin: FoundOrigin | None) -> FoundOrigin:
    """The origin of a context binary, from what its compile record says of its backend and tools: the `ort`
    backend's onnxruntime-qnn wheel, the `qairt` backend's SDK (its terms those of the SDK folder given to bundle
    build, of the same QAIRT build since one bundle has one), AI Hub; unknown without a record."""
    if record is None:
        return UNKNOWN_COMPILER
    backend, tools, qairt = record.get("backend"), record.get("tools") or {}, record.get("qairt")
    if backend == BackendName.ORT and isinstance(tools.get(WHEEL), str):
        return wheel(tools[WHEEL], qairt)
    if backend == BackendName.QAIRT:
        if sdk_origin is not None:
            return sdk_origin
        version = tools.get("qairt_sdk") if isinstance(tools.get("qairt_sdk"), str) else qairt
        return FoundOrigin(f"qairt-sdk-{version}", OriginKind.QAIRT_SDK, "the QAIRT SDK it was compiled with was not "
                           "given to bundle build (--qnn-sdk-root)", version=version, qairt=qairt)
    if backend == BackendName.AIHUB:
        return aihub(qairt)
    return UNKNOWN_COMPILER

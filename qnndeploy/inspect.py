"""`inspect`: what QNN context binaries say about themselves — one .bin, or every context binary of a bundle with
the target (SoC) it belongs to. Read by libQnnSystem (qnnsystem.py); where that library is missing or refuses a
file, the QAIRT and SoC markers in its bytes (markers.py) are what is left, and the report says so."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from qnndeploy.base import socs
from qnndeploy.base.errors import MissingTool, QnnDeployError
from qnndeploy.base.fileio import open_regular
from qnndeploy.formats import archive
from qnndeploy.formats.manifest import BundleFile, FileFormat, Manifest, Target, load_json
from qnndeploy.qnn import qnnsystem
from qnndeploy.qnn.markers import scan_file
from qnndeploy.qnn.qnnsystem import ContextInfo
from qnndeploy.verification.emulated import check_bundle

QNN_SYSTEM = "qnnsystem"  # the sources of a BinaryReport
MARKERS = "markers"


@dataclass(frozen=True)
class Markers:
    """What a byte scan finds: QAIRT build strings and (SoC, HTP arch) pairs."""

    builds: tuple[str, ...]
    targets: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class BinaryReport:
    """One context binary: read by libQnnSystem (`context`), or by markers with the `reason`. `problem` is set when
    libQnnSystem refused or crashed on the file: the binary is damaged, or not a context binary."""

    path: str  # as given, or relative to the bundle root
    size: int
    source: str  # QNN_SYSTEM or MARKERS
    context: ContextInfo | None
    markers: Markers | None = None
    reason: str = ""  # why markers were used
    problem: str = ""
    soc: str | None = None  # in a bundle: the target this artifact belongs to, as the manifest says
    soc_id: int | None = None
    target_arch: str | None = None
    graphs: tuple[str, ...] = ()  # in a bundle: the graph names the manifest gives this artifact
    binary_soc: str | None = None  # the catalog's name for the binary's own soc_model (SM8750 for 69)
    warnings: tuple[str, ...] = ()  # in a bundle: where the binary disagrees with its target
    emulated: str | None = None  # in a bundle: what loading it on the host HTP emulator found (None: not loaded)


class InspectKind(StrEnum):
    """What was inspected: one context binary, or a bundle (each of its context binaries)."""

    BINARY = "binary"
    BUNDLE = "bundle"


@dataclass(frozen=True)
class InspectResult:
    path: str
    kind: InspectKind
    binaries: tuple[BinaryReport, ...]
    bundle: str | None = None  # "name version" of a bundle
    qairt: str | None = None  # the bundle's declared QAIRT build
    notes: tuple[str, ...] = ()
    ok: bool = True  # False when libQnnSystem refused a file (see BinaryReport.problem)
    deep: str | None = None  # in a bundle: what loading the binaries on the host emulator did (None: --shallow)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _result(path: Path, kind: InspectKind, binaries: tuple[BinaryReport, ...], **more: Any) -> InspectResult:
    return InspectResult(str(path), kind, binaries, **more, ok=not any(b.problem for b in binaries))


def inspect(path: Path, library: Path | None = None, deep: bool = True) -> InspectResult:
    """Inspect a context binary, or a bundle folder or .tar.gz/.zip archive. `library`: a libQnnSystem.so to use
    (default: $QNNDEPLOY_QNN_SYSTEM_LIB, else the onnxruntime-qnn wheel's). With `deep`, a bundle's binaries are
    also loaded and run on the host emulator against their CPU models (verification/emulated.py)."""
    path = Path(path)
    if not os.path.lexists(path):
        raise QnnDeployError(f"{path} does not exist")
    lib, missing = _library(library)
    if path.is_dir():
        return _bundle(path, path, lib, missing, deep)
    if path.name.lower().endswith((".tar.gz", ".tgz", ".zip")):
        with archive.extracted(path) as (root, refused):
            if refused:
                name, why = refused[0]
                raise QnnDeployError(f"{path} is not a safe bundle archive: {name}: {why}")
            return _bundle(path, root, lib, missing, deep)
    if path.suffix.lower() in NOT_BINARIES:
        raise QnnDeployError(f"{path} is {NOT_BINARIES[path.suffix.lower()]}, not a QNN context binary: inspect takes "
                             "a .bin or a bundle (folder, .tar.gz, .zip)")
    return _result(path, InspectKind.BINARY, (_binary(path, str(path), lib, missing),))


# files users pass to inspect by mistake, by suffix: a wrong file type is bad input (exit 2), not a damaged binary
NOT_BINARIES = {".onnx": "an ONNX model (qnndeploy check reads models)", ".json": "a JSON file",
                ".data": "an ONNX external data file", ".so": "a shared library"}


def _library(library: Path | None) -> tuple[Path | None, str]:
    """(the library, "") or (None, why it is unavailable). It is loaded only in the child that reads a binary: one
    that does not load is reported there, per binary, as a reason to fall back."""
    try:
        return library or qnnsystem.library_path(), ""
    except QnnDeployError as e:
        return None, str(e)


def _binary(file: Path, shown: str, lib: Path | None, missing: str, follow: bool = True) -> BinaryReport:
    size = _size(file, follow)
    return _report(file, shown, size, qnnsystem.read_contexts([file], lib)[0] if lib is not None else None, missing)


def _size(file: Path, follow: bool) -> int:
    # a regular file, or a one-line error now: reading a FIFO or device would hang (a bundle's may not be a symlink)
    with open_regular(file, what="context binary", follow=follow) as f:
        return os.fstat(f.fileno()).st_size


def _report(file: Path, shown: str, size: int, answer: ContextInfo | QnnDeployError | None,
            missing: str) -> BinaryReport:
    """What libQnnSystem's `answer` says of the file, or (refused, or no library: None) what its markers say."""
    if isinstance(answer, ContextInfo):
        return BinaryReport(shown, size, QNN_SYSTEM, answer, binary_soc=_soc_name(answer.soc_model))
    if answer is None:
        reason, problem = missing, ""
    elif isinstance(answer, MissingTool):
        reason, problem = str(answer), ""
    else:
        reason = problem = str(answer)
    facts = scan_file(file, markers=True)
    found = Markers(tuple(sorted(facts.builds)), tuple(sorted(facts.context_targets)))
    if not problem and not found.builds and not found.targets:
        problem = f"{shown} holds no QAIRT build or SoC marker: not a QNN context binary"
    return BinaryReport(shown, size, MARKERS, None, found, reason, problem)


def _soc_name(soc_model: int | None) -> str | None:
    if soc_model is None:
        return None
    try:
        return socs.find(soc_model).model
    except QnnDeployError:
        return None


def _disagreements(report: BinaryReport, target: Target) -> tuple[str, ...]:
    """Where a binary read by libQnnSystem says another SoC or arch than the manifest's target."""
    found = []
    c = report.context
    if c is not None and c.soc_model is not None and target.soc_id != c.soc_model:
        found.append(f"compiled for soc_model {c.soc_model} ({report.binary_soc or 'not in the catalog'}), "
                     f"but the target is {target.soc} (soc_model {target.soc_id})")
    if c is not None and c.dsp_arch and target.dsp_arch != c.dsp_arch:
        found.append(f"compiled for HTP {c.dsp_arch}, but the target {target.soc} is {target.dsp_arch}")
    return tuple(found)


def _bundle(shown: Path, root: Path, lib: Path | None, missing: str, deep: bool) -> InspectResult:
    manifest = Manifest.parse(load_json(root))
    jobs: list[tuple[Target, BundleFile]] = []
    top = root.resolve()
    for target in manifest.targets:
        for artifact in target.artifacts:
            if artifact.format != FileFormat.QNN_CONTEXT_BINARY:
                continue
            file = root / artifact.path
            if not file.resolve().is_relative_to(top) or not os.path.lexists(file):
                raise QnnDeployError(f"{shown}: {artifact.path} is missing or outside the bundle "
                                     "(run `qnndeploy bundle verify`)")
            jobs.append((target, artifact))
    paths = list(dict.fromkeys(a.path for _, a in jobs))  # each file read once, however often it is listed
    sizes = [_size(root / p, follow=False) for p in paths]
    # one libQnnSystem child for all of them (qnnsystem.read_contexts), as bundle verify reads them
    answers = qnnsystem.read_contexts([root / p for p in paths], lib) if lib is not None else [None] * len(paths)
    read = {p: _report(root / p, p, n, a, missing) for p, n, a in zip(paths, sizes, answers, strict=True)}
    emulated, done = _emulated(root, manifest, read) if deep and read else ({}, None)

    def one(job: tuple[Target, BundleFile]) -> BinaryReport:
        target, artifact = job
        report = read[artifact.path]
        return BinaryReport(**{**report.__dict__, "soc": target.soc, "soc_id": target.soc_id,
                               "target_arch": target.dsp_arch, "graphs": tuple(artifact.served),
                               "warnings": _disagreements(report, target), "emulated": emulated.get(artifact.path)})

    binaries = tuple(map(one, jobs))
    notes = () if binaries else ("the bundle holds no QNN context binary",)
    result = _result(shown, InspectKind.BUNDLE, binaries, bundle=manifest.bundle_version,
                     qairt=manifest.qairt.shown, notes=notes, deep=done)
    problems = any(e and not e.startswith(MATCHES) for e in emulated.values())
    return InspectResult(**{**result.__dict__, "ok": result.ok and not problems})


MATCHES = "loads and computes what its CPU model does"


def _emulated(root: Path, manifest: Manifest, read: dict[str, BinaryReport]
              ) -> tuple[dict[str, str], str]:
    """(bundle path -> what the host emulator made of it, what was done): the binaries libQnnSystem read."""
    names = {p: [g.name for g in r.context.graphs] for p, r in read.items() if r.context is not None}
    try:
        found = check_bundle(root, manifest, names)
    except QnnDeployError as e:
        return {}, f"not loaded on the host emulator: {e}"
    if not found.done.startswith(tuple("0123456789")):  # "not loaded (why)": nothing was run
        return {}, found.done
    told = dict([*found.problems, *found.warnings])
    return {p: told.get(p, MATCHES) for p in names if p in _single_graph_binaries(manifest)}, found.done


def _single_graph_binaries(manifest: Manifest) -> set[str]:
    return {a.path for t in manifest.targets for a in t.artifacts
            if a.format == FileFormat.QNN_CONTEXT_BINARY and len(a.served) == 1}

"""Runtime compatibility: which Maven qnn-runtime release an app can get for a bundle's context binaries, the oldest
runtime that loads them, and the app dependency sets (ONNX Runtime AAR + qnn-runtime) Microsoft or Qualcomm validated.

Pure functions over data/runtime.json, where every fact carries its source: the Maven releases public pages show,
and the load table measured on the host HTP emulator (which runtime release loads which release's binaries). Version
mismatches are the failures users hit most after packaging ("Could not create context from binary"), so `bundle`,
`bundle verify` and `scaffold` all decide from this one table.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any

from qnndeploy.base.errors import BadInput
from qnndeploy.base.kinds import choices

ORT_ANDROID = "com.microsoft.onnxruntime:onnxruntime-android"  # the stock ORT that Qualcomm's plugin AAR goes with
_VERSION = re.compile(r"\d+(\.\d+){1,3}")


class Aar(StrEnum):
    """The ONNX Runtime AAR an app builds with (--ort-aar): Microsoft's onnxruntime-android-qnn, with the QNN
    provider built in, or Qualcomm's plugin AAR beside a stock onnxruntime-android."""

    MICROSOFT = "microsoft"
    QUALCOMM = "qualcomm"


def parse_aar(name: str) -> Aar:
    if name not in choices(Aar):
        raise BadInput(f"unknown ONNX Runtime AAR '{name}'; use one of {', '.join(choices(Aar))}")
    return Aar(name)


@dataclass(frozen=True)
class Citation:
    url: str
    says: str


@dataclass(frozen=True)
class BlobRow:
    """The HTP context blob version a QAIRT release writes, and the oldest runtime known to read it."""

    qairt: str  # "X.Y.Z": the release the row is about (later releases write this blob or a newer one)
    blob: str  # "X.Y"
    min_runtime: str  # "X.Y.Z": the oldest runtime known to read the blob
    source: Citation


@dataclass(frozen=True)
class ValidatedSet:
    """One ONNX Runtime AAR release with the qnn-runtime (and, for Qualcomm's plugin, the onnxruntime-android) it
    was built or validated with, or, when `reported`, that public sources show together but no vendor table read
    here calls validated (the newest plugin, whose matrix is not public yet)."""

    aar: Aar
    aar_version: str
    ort_android: str | None  # the stock onnxruntime-android the plugin AAR needs; None for Microsoft's (it is ORT)
    qnn_runtime: str
    source: Citation
    reported: bool = False

    @property
    def maven(self) -> str:
        return f"{_data()['aars'][self.aar]['maven']}:{self.aar_version}"

    def describe(self) -> str:
        ort = f" + {ORT_ANDROID}:{self.ort_android}" if self.ort_android else ""
        return f"{self.maven}{ort} + qnn-runtime {self.qnn_runtime}"


@dataclass(frozen=True)
class LoadRow:
    """One measurement: whether the runtime of QAIRT `runtime` loaded a context binary of QAIRT `binary`."""

    binary: str  # "X.Y.Z" of the compiler
    runtime: str  # "X.Y.Z" of the libQnnHtp that loaded it
    loads: bool


@dataclass(frozen=True)
class GradleLibrary:
    """A Maven library or Gradle plugin qnndeploy writes into an app's Gradle files (data/maven.json)."""

    version: str  # group:artifact:version, or a bare version (a minimum the files state)
    source: str  # the URL where it was seen
    read: str  # when (YYYY-MM-DD)


@cache
def gradle_library(key: str) -> GradleLibrary:
    raw = json.loads(resources.files("qnndeploy").joinpath("data/maven.json").read_text(encoding="utf-8"))[key]
    return GradleLibrary(raw.get("coordinate") or raw["version"], raw["source"]["url"], raw["source"]["read"])


@cache
def _data() -> dict[str, Any]:
    text = resources.files("qnndeploy").joinpath("data/runtime.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def rows() -> dict[str, Any]:
    """The table's sourced rows by kind: for the README and the tests."""
    d = _data()
    return {k: d[k] for k in ("maven", "compilers", "loads", "onnx_ir", "rules", "context_blobs", "validated_sets")}


def _source(row: dict[str, Any]) -> Citation:
    return Citation(row["source"]["url"], row["source"]["says"])


def _rule(rule_id: str) -> Citation:
    return _source(next(r for r in _data()["rules"] if r["id"] == rule_id))


def blob_rows() -> list[BlobRow]:
    return [BlobRow(r["qairt"], r["blob"], r["min_runtime"], _source(r)) for r in _data()["context_blobs"]]


def all_sets() -> list[ValidatedSet]:
    return [ValidatedSet(Aar(r["aar"]), r["aar_version"], r["ort_android"], r["qnn_runtime"], _source(r),
                         r.get("status") == "reported") for r in _data()["validated_sets"]]


def published() -> dict[str, Citation]:
    """The com.qualcomm.qti:qnn-runtime releases a public source shows on Maven, oldest first, with that source: the
    only versions qnndeploy writes into an app's Gradle files by itself."""
    return {r["version"]: _source(r) for r in _data()["maven"]["published"]}


def not_published(version: str) -> Citation | None:
    """The source saying `version` was never on Maven (a QAIRT build number such as 2.49.40), or None."""
    return next((_source(r) for r in _data()["maven"]["not_published"] if r["version"] == version), None)


def load_rows() -> list[LoadRow]:
    return [LoadRow(r["binary"], r["runtime"], r["loads"]) for r in _data()["loads"]["rows"]]


def max_ir(onnxruntime: str) -> int | None:
    """The newest ONNX IR version ONNX Runtime `onnxruntime` reads (measured), None when not measured."""
    return next((r["max_ir"] for r in _data()["onnx_ir"]["rows"] if r["onnxruntime"] == onnxruntime), None)


def portable_ir() -> int:
    """The newest IR version every measured ONNX Runtime reads: what EPContext wrappers are written at, so that the
    app's ONNX Runtime (1.22 reads IR 10 at most; the host's 1.32 writes 14) can load them."""
    return min(int(r["max_ir"]) for r in _data()["onnx_ir"]["rows"])


def loads_measured() -> str | None:
    """The date the load table was measured, None before it was."""
    date: str | None = _data()["loads"]["measured"]
    return date


def version_key(version: str) -> tuple[int, ...]:
    """(2, 49, 40) for "2.49.40": versions compare numerically, part by part ("2.49.0" < "2.49.40" < "2.50.0")."""
    if not _VERSION.fullmatch(version):
        raise BadInput(f"{version!r} is not a version such as 2.51.0")
    return tuple(int(p) for p in version.split("."))


def is_release(version: str) -> bool:
    """A plain release version X.Y.Z (what a runtime pin must be to compare it)."""
    return re.fullmatch(r"\d+\.\d+\.\d+", version) is not None


def satisfies(runtime: str, min_runtime: str) -> bool:
    """Whether a runtime release (a qnn-runtime pin, or the QAIRT version of bundled libraries) is at least
    min_runtime."""
    return version_key(runtime) >= version_key(min_runtime)


def _family(version: str) -> tuple[int, ...]:
    return version_key(version)[:2]


def _blob_row_for(qairt: str) -> BlobRow | None:
    """The row of the newest release at or before `qairt`: its blob version (or a later one: blob versions only
    grow) is what these binaries hold."""
    older = [r for r in blob_rows() if version_key(r.qairt) <= version_key(qairt)]
    return max(older, key=lambda r: version_key(r.qairt), default=None)


def min_runtime_for_qairt(qairt: str) -> str:
    """The oldest runtime release ("X.Y.Z") known to load context binaries of QAIRT `qairt` ("X.Y.Z").

    No runtime older than the binaries' own release family loads them (measured: every older release refuses), and
    Maven publishes a release's runtime as X.Y.0, so X.Y.0 is the floor, raised to the oldest reader of their
    context blob (2.48.40 already writes blob 4.0, which no earlier runtime is known to read), but never above the
    binaries' own release, whose runtime always loads them (measured).
    """
    major, minor = _family(qairt)
    floor = f"{major}.{minor}.0"
    row = _blob_row_for(qairt)
    reader = min_runtime_for_blob(row.blob) if row is not None else None
    if reader is not None and not satisfies(floor, reader):
        floor = reader
    return qairt if is_release(qairt) and satisfies(floor, qairt) else floor


def min_runtime_for_blob(blob: str) -> str | None:
    """The oldest runtime release known to read HTP context blob version `blob` ("X.Y", as libQnnSystem reports it
    for a binary), or None when no row says."""
    key = version_key(blob)[:2]
    readers = [r.min_runtime for r in blob_rows() if version_key(r.blob) == key]
    return min(readers, key=version_key) if readers else None


def loads(binary: str, runtime: str) -> bool | None:
    """Whether a runtime release loads context binaries of QAIRT `binary`, by the measured table: compared by release
    family (X.Y), since Maven publishes a QAIRT X.Y release's runtime as X.Y.0 or X.Y.1 (maven.family in the data).
    None when no row was measured for the two families."""
    found = {r.loads for r in load_rows()
             if _family(r.binary) == _family(binary) and _family(r.runtime) == _family(runtime)}
    return found.pop() if len(found) == 1 else None


def maven_for(qairt: str) -> list[str]:
    """The published qnn-runtime releases that load QAIRT `qairt` binaries by the measured table and are not older
    than min_runtime_for_qairt: the binaries' own release family first (the runtime Maven publishes for that
    compiler), then newer families, newest first within each."""
    need = min_runtime_for_qairt(qairt)
    found = [v for v in published() if loads(qairt, v) and satisfies(v, need)]
    return sorted(found, key=lambda v: (_family(v) == _family(qairt), version_key(v)), reverse=True)


def no_maven_runtime(qairt: str) -> str:
    """The one-line message for binaries no published runtime is known to load, with the two ways out."""
    loadable = sorted({r.binary for r in load_rows() if r.loads and maven_for(r.binary)}, key=version_key)
    newest = published()
    top = max(newest, key=version_key) if newest else None
    way = (f"or compile with --qairt {'.'.join(loadable[-1].split('.')[:2])}, whose runtime "
           f"com.qualcomm.qti:qnn-runtime:{maven_for(loadable[-1])[0]} is published") if loadable else \
        "or compile with an older QAIRT"
    return (f"no published com.qualcomm.qti:qnn-runtime is known to load QAIRT {qairt} context binaries (the newest on "
            f"Maven that a public source shows is {top}; docs/decision-and-runtime.md, Runtime compatibility): bundle "
            f"the QAIRT SDK's own runtime libraries (bundle build --runtime-libs DIR or --qnn-sdk-root DIR), {way}")


def pin_problem(pin: str, qairt: str) -> str | None:
    """Why qnn-runtime `pin` cannot run QAIRT `qairt` binaries, in one line, or None when nothing says it cannot: a
    version Maven never had, a measured refusal, or a runtime of an older release family (which refuses a newer
    context blob)."""
    gone = not_published(pin)
    if gone is not None:
        return f"qnn-runtime {pin} is not on Maven ({gone.url}: {gone.says})"
    measured = loads(qairt, pin)
    if measured is False:
        return (f"the QAIRT {'.'.join(pin.split('.')[:2])} runtime refuses QAIRT {qairt} context binaries (measured on "
                f"the host HTP emulator, {loads_measured()}: docs/decision-and-runtime.md, Runtime compatibility)")
    if measured is None and _family(pin) < _family(qairt):
        return (f"qnn-runtime {pin} is older than QAIRT {qairt}: an older runtime refuses a newer context binary "
                f"('Unsupported context binary version', {_rule('older-runtime-refuses-newer-binary').url})")
    return None


def pin_warnings(pin: str, qairt: str) -> list[str]:
    """What cannot be confirmed about a qnn-runtime pin that pin_problem lets through: a release no source shows on
    Maven, a pair the load table has not measured, a release in no validated or reported set (a reported set's pin is
    said by the runtime set line every command that checks a bundle prints: reported, not confirmed)."""
    warnings = []
    if pin not in published():
        warnings.append(f"no public source shows qnn-runtime {pin} on Maven (known: {', '.join(published())}): if it "
                        "is not there the app's Gradle build fails to resolve it")
    if loads(qairt, pin) is None:
        warnings.append(f"no measurement says whether a qnn-runtime {pin} loads QAIRT {qairt} context binaries: "
                        "test on phones (qnndeploy device verify)")
    if not any(s.qnn_runtime == pin for s in all_sets()):  # a reported set's pin: its runtime set line says so
        known = ", ".join(sorted({s.qnn_runtime for s in all_sets()}, key=version_key))
        warnings.append(f"qnn-runtime {pin} is in no validated ONNX Runtime set (validated: {known}; "
                        "docs/decision-and-runtime.md, Runtime compatibility): Qualcomm and Microsoft validate exact "
                        "sets only")
    return warnings


def validated_sets(min_runtime: str, aar: str | None = None) -> list[ValidatedSet]:
    """The validated sets whose qnn-runtime is published and loads binaries that need `min_runtime`, newest first
    and validated before reported (of one AAR kind when `aar` is given)."""
    kind = None if aar is None else parse_aar(aar)
    found = [s for s in all_sets() if (kind is None or s.aar == kind) and satisfies(s.qnn_runtime, min_runtime)
             and s.qnn_runtime in published()]
    return sorted(found, key=lambda s: (not s.reported, version_key(s.qnn_runtime), version_key(s.aar_version)),
                  reverse=True)


def is_validated(aar: str, aar_version: str, ort_android: str | None, qnn_runtime: str) -> bool:
    """Whether (AAR, its version, onnxruntime-android, qnn-runtime) is one of the sets Microsoft or Qualcomm
    validated."""
    return any((s.aar, s.aar_version, s.ort_android, s.qnn_runtime) == (aar, aar_version, ort_android, qnn_runtime)
               and not s.reported for s in all_sets())


@dataclass(frozen=True)
class QnnPlugin:
    """How an app registers Qualcomm's QNN execution provider plugin with ONNX Runtime's Java API (runtime.json
    aars.qualcomm.registers, each fact with its source): the library file the AAR ships and the EP name its devices
    carry."""

    library: str  # registerExecutionProviderLibrary's libraryPath: "libonnxruntime_providers_qnn.so"
    ep_name: str  # OrtEpDevice.getEpName() of the plugin's devices: "QNNExecutionProvider"
    registration_name: str
    sources: tuple[Citation, ...]


def qnn_plugin() -> QnnPlugin:
    raw = _data()["aars"][Aar.QUALCOMM]["registers"]
    return QnnPlugin(raw["library"], raw["ep_name"], raw["registration_name"],
                     tuple(Citation(s["url"], s["says"]) for s in raw["sources"]))


@dataclass(frozen=True)
class AppSet:
    """The ONNX Runtime set an app gets for a bundle: the AAR with its versions, the QNN runtime, and whether the set
    is one Microsoft or Qualcomm validated whose qnn-runtime loads the bundle's binaries."""

    aar: Aar
    aar_version: str
    ort_android: str | None  # Qualcomm's plugin goes beside this stock onnxruntime-android
    qnn_runtime: str  # the Maven qnn-runtime pinned; for a bundle with its own libraries, their QAIRT
    bundled: bool  # the QNN libraries come from the bundle, not from Maven
    qairt: str  # the binaries' QAIRT
    validated: ValidatedSet | None
    warnings: list[str] = field(default_factory=list)

    @property
    def maven(self) -> str:
        return f"{aar_maven(self.aar)}:{self.aar_version}"

    @property
    def describe(self) -> str:
        ort = f" + {ORT_ANDROID}:{self.ort_android}" if self.ort_android else ""
        what = "not a validated set" if self.validated is None else "a validated set"
        if self.validated is not None and self.validated.reported:
            what = "a set reported to work, not confirmed validated"
        return f"{self.maven}{ort} + qnn-runtime {self.qnn_runtime} ({what})"

    def line(self) -> str:
        """One plain line: the set the app will use and whether it is validated for these binaries."""
        ort = f" + {ORT_ANDROID}:{self.ort_android}" if self.ort_android else ""
        qnn = (f"the bundle's QAIRT {self.qnn_runtime} libraries" if self.bundled
               else f"com.qualcomm.qti:qnn-runtime:{self.qnn_runtime}")
        how = "QNN plugin registered by the glue" if self.aar == Aar.QUALCOMM else "QNN provider built in"
        if self.validated is not None and self.validated.reported:
            verdict = (f"reported to work, not confirmed as validated, for these QAIRT {self.qairt} binaries "
                       f"({self.validated.source.url})")
        elif self.validated is not None:
            verdict = f"validated for these QAIRT {self.qairt} binaries ({self.validated.source.url})"
        elif self.bundled:
            verdict = (f"not a validated set for these QAIRT {self.qairt} binaries: validated sets name a Maven "
                       "qnn-runtime, not a bundle's libraries")
        else:
            verdict = f"NOT a validated set for these QAIRT {self.qairt} binaries"
        return f"runtime set: {self.maven}{ort} + {qnn} ({how}): {verdict}"


def app_set(qairt: str, min_runtime: str | None, pin: str | None, aar: str | None = None) -> AppSet:
    """The ONNX Runtime set scaffold pins for binaries of QAIRT `qairt` needing `min_runtime` (None: derived from
    qairt), with the bundle's Maven qnn-runtime `pin` (None: the bundle carries its own libraries).

    aar None: the newest validated set of either AAR whose qnn-runtime is published and loads the binaries
    (Microsoft's and Qualcomm's alike; else a reported set, with a warning), else Microsoft's AAR unvalidated. With
    an AAR named, the newest validated (else reported) set of that AAR, else its newest known release with the
    bundle's runtime and a warning saying the combination is not validated.
    """
    need = min_runtime or min_runtime_for_qairt(qairt)
    bundled = pin is None
    bundle_runtime = qairt if pin is None else pin
    sets = validated_sets(need, aar)
    if sets:
        s = sets[0]
        said = [] if bundled or not s.reported else [
            (f"{s.describe()} is reported to work with QAIRT {qairt} binaries, but no Qualcomm table read here "
             f"validates it ({s.source.url}): test it on phones (qnndeploy device verify)")]
        return AppSet(s.aar, s.aar_version, s.ort_android, bundle_runtime if bundled else s.qnn_runtime, bundled,
                      qairt, None if bundled else s, said)
    kind = Aar.MICROSOFT if aar is None else parse_aar(aar)
    newest = validated_sets("0.0.0", kind)[0]
    warning = (f"no validated {aar_maven(kind)} set has a qnn-runtime that loads these QAIRT {qairt} binaries (they "
               f"need {need}; the newest validated is {newest.describe()}): pinned {aar_maven(kind)}:"
               f"{newest.aar_version} with qnn-runtime {bundle_runtime}, an unvalidated combination; test it on "
               "phones (qnndeploy device verify), or compile with the QAIRT of a validated set")
    return AppSet(kind, newest.aar_version, newest.ort_android, bundle_runtime, bundled, qairt, None, [warning])


def aar_maven(aar: str) -> str:
    """group:artifact of an ONNX Runtime AAR kind."""
    return str(_data()["aars"][parse_aar(aar)]["maven"])

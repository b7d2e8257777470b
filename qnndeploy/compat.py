"""Runtime compatibility: the oldest QNN runtime that loads a bundle's context binaries, and the app dependency sets
(ONNX Runtime AAR + qnn-runtime) that Microsoft or Qualcomm validated.

Pure functions over data/runtime.json, where every fact carries its source; version mismatches are the failures
users hit most after packaging ("Could not create context from binary", a newer context binary on an old SDK), so
`bundle`, `bundle verify` and `scaffold` all decide from this one table.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from itertools import pairwise
from typing import Any

from qnndeploy.errors import QnnDeployError

AARS = ("microsoft", "qualcomm")  # --ort-aar: Microsoft's onnxruntime-android-qnn, or Qualcomm's plugin AAR
ORT_ANDROID = "com.microsoft.onnxruntime:onnxruntime-android"  # the stock ORT that Qualcomm's plugin AAR goes with
_VERSION = re.compile(r"\d+(\.\d+){1,3}")


@dataclass(frozen=True)
class Source:
    url: str
    says: str


@dataclass(frozen=True)
class BlobRow:
    """The HTP context blob version a QAIRT release family writes, and the oldest runtime that reads it."""

    qairt: str  # "X.Y"
    blob: str  # "X.Y"
    min_runtime: str  # "X.Y.Z"
    source: Source


@dataclass(frozen=True)
class ValidatedSet:
    """One ONNX Runtime AAR release with the qnn-runtime (and, for Qualcomm's plugin, the onnxruntime-android) it
    was built or validated with."""

    aar: str  # "microsoft" | "qualcomm"
    aar_version: str
    ort_android: str | None  # the stock onnxruntime-android the plugin AAR needs; None for Microsoft's (it is ORT)
    qnn_runtime: str
    source: Source

    @property
    def maven(self) -> str:
        return f"{_data()['aars'][self.aar]['maven']}:{self.aar_version}"

    def describe(self) -> str:
        ort = f" + {ORT_ANDROID}:{self.ort_android}" if self.ort_android else ""
        return f"{self.maven}{ort} + qnn-runtime {self.qnn_runtime}"


@cache
def _data() -> dict[str, Any]:
    text = resources.files("qnndeploy").joinpath("data/runtime.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def rows() -> dict[str, list[dict[str, Any]]]:
    """The table's sourced rows by kind (rules, context_blobs, validated_sets): for the README and the tests."""
    d = _data()
    return {k: d[k] for k in ("rules", "context_blobs", "validated_sets")}


def _source(row: dict[str, Any]) -> Source:
    return Source(row["source"]["url"], row["source"]["says"])


def _rule(rule_id: str) -> Source:
    return _source(next(r for r in _data()["rules"] if r["id"] == rule_id))


def blob_rows() -> list[BlobRow]:
    return [BlobRow(r["qairt"], r["blob"], r["min_runtime"], _source(r)) for r in _data()["context_blobs"]]


def all_sets() -> list[ValidatedSet]:
    return [ValidatedSet(r["aar"], r["aar_version"], r["ort_android"], r["qnn_runtime"], _source(r))
            for r in _data()["validated_sets"]]


def version_key(version: str) -> tuple[int, ...]:
    """(2, 49, 40) for "2.49.40": versions compare numerically, part by part ("2.49.0" < "2.49.40" < "2.50.0")."""
    if not _VERSION.fullmatch(version):
        raise QnnDeployError(f"{version!r} is not a version such as 2.51.0")
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
    """The blob row of the newest release family at or before `qairt` (its blob version, or a later one, is what
    these binaries hold: blob versions only grow)."""
    older = [r for r in blob_rows() if version_key(r.qairt) <= _family(qairt)]
    return max(older, key=lambda r: version_key(r.qairt), default=None)


def min_runtime_for_qairt(qairt: str) -> str:
    """The oldest runtime release ("X.Y.Z") that loads context binaries of QAIRT `qairt` ("X.Y.Z").

    A runtime refuses a context blob newer than its own release writes, so no runtime older than the binaries' own
    release family is known to load them; a patch release's binaries load on X.Y.0 (Maven publishes patch releases
    as X.Y.0). A sourced blob row (QAIRT 2.49 moved the HTP blob to 4.0) can only raise that floor.
    """
    major, minor = _family(qairt)
    floor = f"{major}.{minor}.0"
    row = _blob_row_for(qairt)
    return row.min_runtime if row is not None and not satisfies(floor, row.min_runtime) else floor


def min_runtime_for_blob(blob: str) -> str | None:
    """The oldest runtime release that reads HTP context blob version `blob` ("X.Y", as libQnnSystem reports it for
    a binary), or None when no sourced row says."""
    key = version_key(blob)[:2]
    return next((r.min_runtime for r in blob_rows() if version_key(r.blob) == key), None)


def _why(runtime: str, qairt: str) -> tuple[str, str]:
    """(why `runtime` cannot load QAIRT `qairt` binaries, the source): the blob move when it is what `runtime`
    misses, else the rule that an older runtime refuses a newer context binary."""
    blob = next((r for r in sorted(blob_rows(), key=lambda r: version_key(r.qairt), reverse=True)
                 if version_key(r.qairt) <= _family(qairt) and not satisfies(runtime, r.min_runtime)), None)
    if blob is not None:
        why = (f"QAIRT {blob.qairt} moved the HTP context blob to {blob.blob}, which no runtime before "
               f"{blob.min_runtime} reads")
        return why, blob.source.url
    why = ("a runtime older than the binaries' QAIRT release refuses their context blob "
           "('Unsupported context binary version')")
    return why, _rule("older-runtime-refuses-newer-binary").url


def pin_problem(pin: str, min_runtime: str, qairt: str) -> str | None:
    """Why qnn-runtime `pin` cannot run a bundle of QAIRT `qairt` whose binaries need `min_runtime`, in one line, or
    None when it can."""
    if satisfies(pin, min_runtime):
        return None
    why, url = _why(pin, qairt)
    return (f"qnn-runtime {pin} is older than {min_runtime}, the oldest runtime that loads these QAIRT {qairt} context "
            f"binaries: {why} ({url}); pin {min_runtime} or newer, or compile with the QAIRT of the runtime you ship")


def _major_starts() -> list[BlobRow]:
    """The rows where a new HTP blob major version begins (its family's blob major differs from the row before)."""
    ordered = sorted(blob_rows(), key=lambda r: version_key(r.qairt))
    return [r for prev, r in pairwise(ordered) if r.blob.split(".")[0] != prev.blob.split(".")[0]]


def pin_warnings(pin: str, qairt: str) -> list[str]:
    """What cannot be confirmed about a loadable qnn-runtime pin: a release in no validated set, or a runtime past a
    blob major change the binaries predate (newer runtimes load older binaries of the same blob major; no source
    says a runtime reads the previous major)."""
    warnings = []
    if not any(s.qnn_runtime == pin for s in all_sets()):
        known = ", ".join(sorted({s.qnn_runtime for s in all_sets()}, key=version_key))
        warnings.append(f"qnn-runtime {pin} is in no validated ONNX Runtime set (validated: {known}; README, "
                        "Runtime compatibility): Qualcomm and Microsoft validate exact sets only")
    crossed = [r for r in _major_starts() if _family(qairt) < version_key(r.qairt) <= _family(pin)]
    if crossed:
        r = crossed[-1]
        warnings.append(f"qnn-runtime {pin} reads HTP context blob {r.blob} (QAIRT {r.qairt} and later) and these "
                        f"QAIRT {qairt} binaries predate it: no source confirms that it loads the older blob "
                        f"({r.source.url})")
    return warnings


def validated_sets(min_runtime: str, aar: str | None = None) -> list[ValidatedSet]:
    """The validated sets whose qnn-runtime loads binaries that need `min_runtime`, newest first (of one AAR kind
    when `aar` is given)."""
    if aar is not None and aar not in AARS:
        raise QnnDeployError(f"unknown ONNX Runtime AAR '{aar}'; use one of {', '.join(AARS)}")
    found = [s for s in all_sets() if (aar is None or s.aar == aar) and satisfies(s.qnn_runtime, min_runtime)]
    return sorted(found, key=lambda s: (version_key(s.qnn_runtime), version_key(s.aar_version)), reverse=True)


def is_validated(aar: str, aar_version: str, ort_android: str | None, qnn_runtime: str) -> bool:
    """Whether (AAR, its version, onnxruntime-android, qnn-runtime) is one of the sets Microsoft or Qualcomm
    validated."""
    return any((s.aar, s.aar_version, s.ort_android, s.qnn_runtime) == (aar, aar_version, ort_android, qnn_runtime)
               for s in all_sets())


def aar_maven(aar: str) -> str:
    """group:artifact of an ONNX Runtime AAR kind."""
    if aar not in AARS:
        raise QnnDeployError(f"unknown ONNX Runtime AAR '{aar}'; use one of {', '.join(AARS)}")
    return str(_data()["aars"][aar]["maven"])

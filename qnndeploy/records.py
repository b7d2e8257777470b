"""The build folder compile writes and validate and bundle read: <graph>/<SoC>/compile.json beside each job's
outputs, and validation.json once validated. The record names and the typed readers live here, below the three
stages; the files' full form is in schemas/compile-record.schema.json and validation-record.schema.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qnndeploy.errors import QnnDeployError
from qnndeploy.fileio import JSON

RECORD = "qnndeploy-compile"
RECORD_VERSION = 1
RECORD_FILE = "compile.json"
VALIDATION_RECORD = "qnndeploy-validation"
VALIDATION_VERSION = 1
VALIDATION_FILE = "validation.json"


@dataclass(frozen=True)
class JobFile:
    """One file a compile job made, in its job folder."""

    path: str
    sha256: str
    size: int
    format: str


@dataclass(frozen=True)
class CompileRecord:
    """What validate and bundle use of a compile record (the file keeps more: tools, options, log, timings)."""

    folder: Path  # <build>/<graph>/<SoC>
    graph: str
    soc: str
    soc_id: int
    dsp_arch: str
    backend: str
    qairt_version: str
    precision: str
    status: str  # "ok" | "failed"
    source: Path  # the .onnx it was compiled from
    source_sha256: str
    outputs: tuple[JobFile, ...]
    cache_key: str | None

    @classmethod
    def from_json(cls, folder: Path, data: dict[str, Any]) -> CompileRecord:
        return cls(folder, data["graph"], data["soc"], data["soc_id"], data["dsp_arch"], data["backend"],
                   data["qairt_version"], data["precision"], data["status"], Path(data["input"]["path"]),
                   data["input"]["sha256"], tuple(JobFile(**o) for o in data.get("outputs", [])),
                   data.get("cache_key"))

    def output(self, fmt: str) -> JobFile | None:
        return next((o for o in self.outputs if o.format == fmt), None)


@dataclass(frozen=True)
class ValidationRecord:
    """What bundle uses of a validation record: the verdict, per output, and which binary it was made for."""

    passed: bool
    thresholds: dict[str, float]
    outputs: tuple[dict[str, Any], ...]
    binary_sha256: str | None

    @classmethod
    def read(cls, folder: Path) -> ValidationRecord | None:
        """The job folder's validation record, or None when it was not validated."""
        path = folder / VALIDATION_FILE
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        return cls(data["passed"], data["thresholds"], tuple(data["outputs"]), (data.get("binary") or {}).get("sha256"))


def read_record(path: Path) -> JSON | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("record") == RECORD else None


def read_build(build: Path) -> list[CompileRecord]:
    """The compile record of every <graph>/<SoC>/compile.json under `build`, sorted."""
    build = Path(build)
    if not build.is_dir():
        raise QnnDeployError(f"{build}: no such build folder (qnndeploy compile -o {build} makes one)")
    found = []
    for path in sorted(build.glob(f"*/*/{RECORD_FILE}")):
        record = read_record(path)
        if record is None:
            raise QnnDeployError(f"{path}: not a qnndeploy compile record")
        found.append(CompileRecord.from_json(path.parent, record))
    if not found:
        raise QnnDeployError(f"{build}: no compile records (<graph>/<SoC>/{RECORD_FILE}); run qnndeploy compile first")
    return found

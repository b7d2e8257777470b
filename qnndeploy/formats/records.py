"""The build folder compile writes and validate and bundle read: <graph>/<SoC>/compile.json beside each job's
outputs, and validation.json once validated. The record names and the typed readers live here, below the three
stages; the files' full form is in schemas/compile-record.schema.json and validation-record.schema.json."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from qnndeploy import __version__
from qnndeploy.base.errors import BadInput
from qnndeploy.base.fields import integer, obj, objects, opt_text, required_flag, text
from qnndeploy.base.fileio import JSON, read_json, sha256_file, write_json
from qnndeploy.base.kinds import BackendName, Precision
from qnndeploy.base.names import EPCONTEXT, SPLIT_RECORD, file_kind
from qnndeploy.model import split as cutting
from qnndeploy.model.quantize import QuantizedLayer

RECORD = "qnndeploy-compile"
RECORD_VERSION = 1
RECORD_FILE = "compile.json"
VALIDATION_RECORD = "qnndeploy-validation"
VALIDATION_VERSION = 1
VALIDATION_FILE = "validation.json"
SPLIT_VERSION = 1


class RecordStatus(StrEnum):
    """A compile record's outcome: its job made the binary, or failed (the record says why)."""

    OK = "ok"
    FAILED = "failed"


@dataclass(frozen=True)
class JobStarted:
    """A job of a build (graph, SoC) has started: what compile's and validate's progress callbacks get before the
    job's result, so that a log can say what runs and for how long."""

    graph: str
    soc: str


@dataclass(frozen=True)
class JobMeasured:
    """A validate job whose verdict is not its own: a split's part or a loop's graph, measured, judged with the
    others once all have run. Progress says so instead of a status its chain or loop may overturn."""

    graph: str
    soc: str
    status: str = "measured (its chain or loop decides)"


_Result = TypeVar("_Result")
# Compile's and validate's progress: (jobs done, jobs total, the job just finished, or JobStarted when one starts).
JobProgress = Callable[[int, int, _Result | JobStarted | None], None]


@dataclass(frozen=True)
class JobFile:
    """One file a compile job made, in its job folder."""

    path: str
    sha256: str
    size: int
    format: str
    graph: str | None = None  # in a shared context's folder: the member graph it is for
    twin: bool = False  # a shared context's member compiled alone, run by the host emulator, never bundled


@dataclass(frozen=True)
class HtpSettings:
    """HTP compile settings: chosen on compile's command line, read back from its record, written into the manifest
    (all but keep_fp16, keep_int8 and kv8, which only the compile uses). None/False leaves the compiler's default."""
    vtcm_mb: int | None = None  # VTCM the graphs may use (default: all of the SoC's)
    optimization_mode: int | None = None  # graph finalization optimization, 1-3: 3 compiles slowest, runs fastest
    spill_fill: bool = False  # a spill-fill buffer shared by the graphs of a context (ORT enable_htp_spill_fill_buffer)
    keep_fp16: tuple[str, ...] = ()  # w8a16, w4a16: nodes left unquantized, which the HTP then runs in fp16
    keep_int8: tuple[str, ...] = ()  # w4a16: nodes whose weights stay 8-bit (per channel), e.g. an LLM's lm_head
    # w8a16, w4a16 --kv-bits 8: the KV cache's inputs and outputs, 8-bit in the graph's I/O: (name, scale, zero point)
    kv8: tuple[tuple[str, float, int], ...] = ()

    def manifest_json(self) -> JSON:
        """A target's "compile" in manifest.json."""
        return {"vtcm_mb": self.vtcm_mb, "optimization_mode": self.optimization_mode, "spill_fill": self.spill_fill}

    def __str__(self) -> str:
        return (f"--vtcm-mb {self.vtcm_mb or 'default'}, --optimization-mode {self.optimization_mode or 'default'}, "
                f"spill-fill {'on' if self.spill_fill else 'off'}")


@dataclass(frozen=True)
class JobInput:
    """A model a compile job read: its absolute path and its bytes' sha256."""

    path: str
    sha256: str

    def to_json(self) -> JSON:
        return {"path": self.path, "sha256": self.sha256}


@dataclass(frozen=True)
class RecordMember:
    """One graph of a shared context (compile --share), as its record lists it."""

    graph: str
    input: JobInput
    calibration: JSON | None  # as options' calibration, for this graph

    def to_json(self) -> JSON:
        return {"graph": self.graph, "input": self.input.to_json(), "calibration": self.calibration}


def _job_file(data: Mapping[str, Any]) -> JobFile:
    if set(data) - {"path", "sha256", "size", "format", "graph", "twin"} or data.get("twin", True) is not True:
        raise ValueError
    graph = data.get("graph")
    return JobFile(str(data["path"]), str(data["sha256"]), int(data["size"]), str(data["format"]),
                   None if graph is None else str(graph), bool(data.get("twin", False)))


def _job_file_json(f: JobFile) -> JSON:
    return {"path": f.path, "sha256": f.sha256, "size": f.size, "format": f.format,
            **({"graph": f.graph} if f.graph is not None else {}), **({"twin": True} if f.twin else {})}


@dataclass(frozen=True)
class JobRecord:
    """A compile record, the whole file (<build>/<graph>/<SoC>/compile.json, and the cache entry's copy): one job's
    request, tools, outputs and outcome. A shared context's record has `members` and no `input`; context, shared and
    aihub are written only when there is one."""

    graph: str  # a shared context's: the context's name
    soc: str
    soc_id: int
    dsp_arch: str
    backend: BackendName
    qairt_version: str
    qairt_build: str | None  # what the context binary embeds
    precision: Precision
    options: JSON  # the backend settings used (part of the cache key)
    tools: dict[str, str]  # tool name -> version
    input: JobInput | None
    members: tuple[RecordMember, ...]
    outputs: tuple[JobFile, ...]  # empty when it failed
    log: str  # relative to the build folder
    created: str
    duration_s: float
    warnings: tuple[str, ...]
    status: RecordStatus
    error: str | None
    cache_key: str | None
    context: JSON | None = None  # the binary as libQnnSystem read it back (contextcheck.summary)
    shared: JSON | None = None  # {"shared_bytes", "separate_bytes"}
    aihub: JSON | None = None  # backend aihub: its remote jobs
    # a quantized build (ort backend): per graph, each quantized MatMul/Gemm weight and the error it brings
    layers: Mapping[str, tuple[QuantizedLayer, ...]] = field(default_factory=dict)

    def to_json(self) -> JSON:
        inputs: JSON = {"members": [m.to_json() for m in self.members]} if self.members else {
            "input": self.input.to_json() if self.input else None}
        return {
            "record": RECORD, "version": RECORD_VERSION, "graph": self.graph, "soc": self.soc, "soc_id": self.soc_id,
            "dsp_arch": self.dsp_arch, "backend": self.backend.value, "qairt_version": self.qairt_version,
            "qairt_build": self.qairt_build, "precision": self.precision.value, "options": self.options,
            "tools": self.tools, **inputs, "outputs": [_job_file_json(f) for f in self.outputs], "log": self.log,
            "created": self.created, **({"context": self.context} if self.context is not None else {}),
            **({"shared": self.shared} if self.shared is not None else {}),
            **({"aihub": self.aihub} if self.aihub is not None else {}),
            **({"quantized_layers": {g: [q.to_json() for q in found] for g, found in self.layers.items()}}
               if self.layers else {}),
            "duration_s": self.duration_s, "warnings": list(self.warnings), "status": self.status.value,
            "error": self.error, "cache_key": self.cache_key,
        }

    @classmethod
    def parse(cls, data: object, path: Path) -> JobRecord:
        """From the JSON value of the record at `path` (strict on what names the job, its inputs and outcome; the
        bookkeeping fields a record of ours always has read as empty when absent): BadInput, in one line, else."""
        try:
            if not isinstance(data, dict) or data["record"] != RECORD or not isinstance(data["options"], dict):
                raise ValueError
            members = tuple(RecordMember(str(m["graph"]), JobInput(str(m["input"]["path"]),
                                                                   str(m["input"]["sha256"])), m.get("calibration"))
                            for m in data.get("members") or ())
            given = None if members else data["input"]
            build, error, key = data.get("qairt_build"), data.get("error"), data.get("cache_key")
            return cls(
                str(data["graph"]), str(data["soc"]), int(data["soc_id"]), str(data["dsp_arch"]),
                BackendName(data["backend"]), str(data["qairt_version"]), None if build is None else str(build),
                Precision(data["precision"]), data["options"],
                {str(k): str(v) for k, v in (data.get("tools") or {}).items()},
                None if given is None else JobInput(str(given["path"]), str(given["sha256"])), members,
                tuple(_job_file(o) for o in data.get("outputs") or ()), str(data.get("log") or ""),
                str(data.get("created") or ""), float(data.get("duration_s") or 0.0),
                tuple(str(w) for w in data.get("warnings") or ()), RecordStatus(data["status"]),
                None if error is None else str(error), None if key is None else str(key),
                data.get("context"), data.get("shared"), data.get("aihub"),
                {str(g): tuple(QuantizedLayer.parse(q) for q in found)
                 for g, found in (data.get("quantized_layers") or {}).items()})
        except (ValueError, TypeError, KeyError, AttributeError):
            raise BadInput(f"{path}: not a qnndeploy compile record") from None


@dataclass(frozen=True)
class CompileRecord:
    """What validate and bundle use of a compile record, per graph (JobRecord is the whole file)."""

    folder: Path  # <build>/<graph>/<SoC>
    graph: str
    soc: str
    soc_id: int
    dsp_arch: str
    backend: BackendName
    qairt_version: str
    precision: Precision
    status: RecordStatus
    source: Path  # the .onnx it was compiled from
    source_sha256: str
    outputs: tuple[JobFile, ...]  # for a member of a shared context: the shared binary and its own wrapper
    cache_key: str | None
    shared: str | None = None  # the shared context (compile --share) this graph was compiled into
    twins: tuple[JobFile, ...] = ()  # for a member of a shared context: itself compiled alone, for the emulator
    htp: HtpSettings | None = None  # the HTP settings it was compiled with
    calibration: tuple[Path, str] | None = None  # the samples folder it was calibrated on and their fingerprint

    @classmethod
    def of(cls, folder: Path, record: JobRecord) -> list[CompileRecord]:
        """The record's graphs: one, or each member of a shared context."""
        common = (record.soc, record.soc_id, record.dsp_arch, record.backend, record.qairt_version,
                  record.precision, record.status)
        htp = htp_settings(record.options)
        if not record.members:
            if record.input is None:
                raise BadInput(f"{folder / RECORD_FILE}: not a qnndeploy compile record")
            return [cls(folder, record.graph, *common, Path(record.input.path), record.input.sha256, record.outputs,
                        record.cache_key, htp=htp, calibration=_calibration_folder(record.options.get("calibration")))]
        files = record.outputs
        return [cls(folder, m.graph, *common, Path(m.input.path), m.input.sha256,
                    tuple(f for f in files if not f.twin and f.graph in (None, m.graph)), record.cache_key,
                    record.graph, tuple(f for f in files if f.twin and f.graph == m.graph), htp,
                    _calibration_folder(m.calibration))
                for m in record.members]

    def output(self, fmt: str) -> JobFile | None:
        return next((o for o in self.outputs if o.format == fmt), None)

    def twin(self, fmt: str) -> JobFile | None:
        return next((o for o in self.twins if o.format == fmt), None)

    @property
    def emulated(self) -> JobFile | None:
        """The EPContext model the host emulator runs: a shared context's twin (its graphs share weights, which the
        emulator cannot load), else the job's own."""
        return self.twin(EPCONTEXT) if self.shared else self.output(EPCONTEXT)

    @property
    def validation_file(self) -> Path:
        """validation.json, or validation-<graph>.json in a shared context's folder (one per member)."""
        return self.folder / (f"validation-{self.graph}.json" if self.shared else VALIDATION_FILE)


@dataclass(frozen=True)
class ValidationRecord:
    """A validation record (validation.json beside a job's compile.json): the verdict of a (graph, SoC), per output,
    on which inputs, and which binary it was made for. chain and loop: a split's part judged in its chain, a decode
    loop's graph judged as the loop (validate writes them once the others are judged)."""

    graph: str
    soc: str
    soc_id: int
    dsp_arch: str
    precision: str
    backend: str
    qairt_version: str
    passed: bool
    thresholds: dict[str, float]
    inputs: JSON | None  # how its samples were made (samples.for_graph's record of them)
    task: JSON | None  # the task's verdict, or the task (tasks.TaskVerdict / Task .json())
    outputs: tuple[dict[str, Any], ...]
    context: JSON  # the file the app loads: path, sha256
    binary: JSON | None  # its context binary: path, sha256
    compile_cache_key: str | None
    emulator: JSON  # seconds_per_run, note
    qnndeploy: str
    created: str
    threshold_reason: str | None = None  # why a looser threshold judged it (validate --reason)
    emulated: JSON | None = None  # a shared context's member: the twin the emulator ran (path, sha256, note)
    chain: JSON | None = None
    loop: JSON | None = None  # the decode loop that judged it (validate --loop): loop.LoopCheck's form

    @property
    def binary_sha256(self) -> str | None:
        return (self.binary or {}).get("sha256")

    @property
    def task_given(self) -> str | None:
        """validate --task for it (None: the task its graph makes plain)."""
        given = (self.task or {}).get("given")
        return given if isinstance(given, str) else None

    @property
    def loop_described(self) -> JSON | None:
        """The loop it was judged in, as decode.Loop.json writes it."""
        described = (self.loop or {}).get("described")
        return described if isinstance(described, dict) else None

    def to_json(self) -> JSON:
        return {
            "record": VALIDATION_RECORD, "version": VALIDATION_VERSION, "graph": self.graph, "soc": self.soc,
            "soc_id": self.soc_id, "dsp_arch": self.dsp_arch, "precision": self.precision, "backend": self.backend,
            "qairt_version": self.qairt_version, "passed": self.passed, "thresholds": self.thresholds,
            **({"threshold_reason": self.threshold_reason} if self.threshold_reason else {}),
            "inputs": self.inputs, "task": self.task, "outputs": list(self.outputs), "context": self.context,
            "binary": self.binary, **({"emulated": self.emulated} if self.emulated is not None else {}),
            "compile_cache_key": self.compile_cache_key, "emulator": self.emulator,
            "tools": {"qnndeploy": self.qnndeploy}, "created": self.created,
            **({"chain": self.chain} if self.chain is not None else {}),
            **({"loop": self.loop} if self.loop is not None else {}),
        }

    @classmethod
    def parse(cls, data: object, path: Path) -> ValidationRecord:
        """From the JSON value of the record at `path` (strict): BadInput, in one line, for anything else."""
        try:
            if not isinstance(data, dict) or data["record"] != VALIDATION_RECORD or type(data["passed"]) is not bool:
                raise ValueError
            return cls(
                str(data["graph"]), str(data["soc"]), int(data["soc_id"]), str(data["dsp_arch"]),
                str(data["precision"]), str(data["backend"]), str(data["qairt_version"]), data["passed"],
                dict(data["thresholds"]), data.get("inputs"), data.get("task"), tuple(data["outputs"]),
                dict(data.get("context") or {}), data.get("binary"), data.get("compile_cache_key"),
                dict(data.get("emulator") or {}),
                str((data.get("tools") or {}).get("qnndeploy") or ""), str(data.get("created") or ""),
                data.get("threshold_reason"), data.get("emulated"), data.get("chain"), data.get("loop"))
        except (ValueError, TypeError, KeyError, AttributeError):
            raise BadInput(f"{path}: not a validation record (qnndeploy validate writes one)") from None

    @classmethod
    def lenient(cls, data: Mapping[str, Any]) -> ValidationRecord:
        """As the report reads old or broken records: what names the record (graph, SoC), its verdict and its
        outputs are required (BadInput, naming the field); any other field that is absent or of another type reads
        as empty or None."""
        return cls(
            text(data, "graph"), text(data, "soc"), integer(data, "soc_id") or 0, opt_text(data, "dsp_arch") or "",
            opt_text(data, "precision") or "", opt_text(data, "backend") or "", opt_text(data, "qairt_version") or "",
            required_flag(data, "passed"), obj(data, "thresholds"), data.get("inputs"), obj(data, "task") or None,
            tuple(dict(o) for o in objects(data, "outputs", required=True)), obj(data, "context"),
            obj(data, "binary") or None, opt_text(data, "compile_cache_key"), obj(data, "emulator"),
            opt_text(obj(data, "tools"), "qnndeploy") or "", opt_text(data, "created") or "",
            opt_text(data, "threshold_reason"), obj(data, "emulated") or None, obj(data, "chain") or None,
            obj(data, "loop") or None)

    @classmethod
    def read(cls, path: Path) -> ValidationRecord | None:
        """A validation record (CompileRecord.validation_file), or None when it was not validated."""
        if not path.is_file():
            return None
        return cls.parse(json.loads(path.read_text()), path)


def _calibration_folder(described: JSON | None) -> tuple[Path, str] | None:
    """The folder a record's calibration entry names (compile's `_calibration`) and its fingerprint, if any."""
    if not isinstance(described, dict) or not described.get("path") or "preprocess" in described:
        return None  # preprocessed media files are not the samples the backend read
    return Path(str(described["path"])), str(described.get("sha256"))


def htp_settings(options: dict[str, Any]) -> HtpSettings:
    """The HTP settings a compile record's backend options hold (ort: the QNN EP's options; qairt: its HTP
    config)."""
    config = options.get("htp_config") or {}
    uint8 = (options.get("quantization") or {}).get("uint8_io") or {}
    return HtpSettings(options.get("vtcm_mb", config.get("vtcm_mb")),
                       options.get("htp_graph_finalization_optimization_mode", config.get("O")),
                       bool(options.get("enable_htp_spill_fill_buffer")),
                       kv8=tuple((str(n), float(sc), int(zp)) for n, (sc, zp) in sorted(uint8.items())))


@dataclass(frozen=True)
class SplitPart:
    name: str  # "head"/"tail", or "1", "2"… by size
    path: Path  # beside the record
    sha256: str
    runs_on: str  # "cpu" or "npu"
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class SplitRecord:
    """OUT.split.json (`prepare --split-at/--split-size`): the parts in the order they run, each reading the
    tensors earlier parts made; chained on the CPU they compute the source model (prepare proved it). `path` is
    where it is (its parts are beside it), not a field of the file."""

    path: Path
    parts: tuple[SplitPart, ...]  # in running order
    cut: tuple[str, ...]
    source: str = ""  # the model split, resolved
    source_sha256: str = ""
    qnndeploy: str = ""  # the version that wrote it
    created: str = ""

    def to_json(self) -> JSON:
        return {"record": SPLIT_RECORD, "version": SPLIT_VERSION,
                "source": {"path": self.source, "sha256": self.source_sha256},
                "cut": list(self.cut), "order": [p.name for p in self.parts],
                "parts": [{"name": p.name, "path": p.path.name, "runs_on": p.runs_on, "sha256": p.sha256,
                           "inputs": list(p.inputs), "outputs": list(p.outputs)} for p in self.parts],
                "tools": {"qnndeploy": self.qnndeploy}, "created": self.created}

    @classmethod
    def parse(cls, data: object, path: Path) -> SplitRecord:
        """The record at `path` from its JSON value (strict): BadInput, in one line, for anything else."""
        try:
            if not isinstance(data, dict) or data["record"] != SPLIT_RECORD:
                raise ValueError
            by_name = {p["name"]: SplitPart(str(p["name"]), path.parent / p["path"], str(p["sha256"]),
                                            str(p["runs_on"]), tuple(p["inputs"]), tuple(p["outputs"]))
                       for p in data["parts"]}
            source, tools = data.get("source") or {}, data.get("tools") or {}
            return cls(path, tuple(by_name[n] for n in data["order"]), tuple(data.get("cut") or ()),
                       str(source.get("path") or ""), str(source.get("sha256") or ""),
                       str(tools.get("qnndeploy") or ""), str(data.get("created") or ""))
        except (ValueError, TypeError, KeyError, AttributeError):
            raise BadInput(f"{path}: not a split record (qnndeploy prepare --split-at writes one)") from None

    @classmethod
    def read(cls, path: Path) -> SplitRecord:
        """The record at `path`; anything else is bad input, said in one line."""
        path = Path(path)
        return cls.parse(read_json(path, "split record", "qnndeploy prepare --split-at writes one"), path)

    def part_of(self, model: Path, sha256: str) -> SplitPart | None:
        """The part that is `model` with these bytes, if any."""
        return next((p for p in self.parts if p.path.resolve() == Path(model).resolve() and p.sha256 == sha256),
                    None)


def write_split(path: Path, source: Path, cut: Sequence[str], parts: Sequence[cutting.Part]) -> SplitRecord:
    """Write OUT.split.json for parts just written beside it: the source, the cut, and the parts in the order they
    run, each with its bytes' sha256; the record as written."""
    record = SplitRecord(
        path, tuple(SplitPart(p.name, path.parent / Path(p.path).name, sha256_file(Path(p.path)), str(p.runs_on),
                              tuple(i.name for i in p.inputs), tuple(o.name for o in p.outputs)) for p in parts),
        tuple(cut), str(source.resolve()), sha256_file(source), __version__,
        datetime.now(UTC).isoformat(timespec="seconds"))
    write_json(path, record.to_json())
    return record


def split_records(models: dict[Path, str]) -> list[Path]:
    """The split records (`prepare --split-at/--split-size`) beside these models (path -> sha256) that name one of
    them, unchanged, as a part: a build compiled from parts is bundled with its record (`bundle build --split`), or
    the app would not know the other parts and their order."""
    return [r.path for r in splits_of(models)]


def splits_of(models: dict[Path, str]) -> list[SplitRecord]:
    """split_records, read."""
    found: list[SplitRecord] = []
    for folder in dict.fromkeys(Path(p).parent for p in models):
        for path in sorted(folder.glob("*.split.json")):
            try:
                record = SplitRecord.read(path)
            except BadInput:
                continue  # not a split record, or not ours to judge here: bundle --split reads it for real
            if any(record.part_of(model, sha) is not None for model, sha in models.items()):
                found.append(record)
    return found


def whole_splits(parts: Mapping[str, tuple[SplitRecord, SplitPart]]) -> dict[str, list[str]]:
    """Each split all of whose parts are among `parts` (graph -> its split and part), by name (OUT of
    OUT.split.json), with its parts' graphs in running order: a decode loop's encoder or decoder may be one."""
    found: dict[str, list[str]] = {}
    for split in {s.path: s for s, _ in parts.values()}.values():
        graphs = [next((g for g, (s, q) in parts.items() if s.path == split.path and q == p), None)
                  for p in split.parts]
        if all(graphs):
            found[split.path.name.removesuffix(".split.json")] = [g for g in graphs if g]
    return found


def read_record(path: Path) -> JobRecord | None:
    """The compile record at `path`, or None when there is none there, it cannot be read or it is not one of ours (a
    job folder or cache entry that is then made again)."""
    try:
        return JobRecord.parse(json.loads(path.read_text()), path)
    except (OSError, ValueError, BadInput):
        return None


def read_build(build: Path) -> list[CompileRecord]:
    """The compile record of every <graph>/<SoC>/compile.json under `build`, sorted."""
    build = Path(build)
    if build.is_file():
        raise BadInput(f"{build} is {file_kind(build.name)}, not a build folder: give the folder that qnndeploy "
                       "compile -o wrote")
    if not build.is_dir():
        raise BadInput(f"{build}: no such build folder (qnndeploy compile -o {build} makes one)")
    found = []
    for path in sorted(build.glob(f"*/*/{RECORD_FILE}")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = None
        found += CompileRecord.of(path.parent, JobRecord.parse(data, path))
    if not found:
        raise BadInput(f"{build}: no compile records (<graph>/<SoC>/{RECORD_FILE}); run qnndeploy compile first")
    return found

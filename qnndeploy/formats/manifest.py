"""The bundle manifest: reading it, validating it against schemas/manifest.schema.json, and its typed form.

`Manifest.parse` reads the JSON once into frozen dataclasses, field for field like the Kotlin twin's
BundleManifest.kt (the same names in snake case, the same defaults), plus what only the Python readers use
(sizes, library roles, records, validation summaries). Every reader takes the typed form, after the schema check.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from qnndeploy.base.errors import QnnDeployError, first_line
from qnndeploy.base.fields import is_number
from qnndeploy.base.fileio import JSON, read_limited
from qnndeploy.base.names import (
    CONTEXT_BINARY,
    EPCONTEXT,
    EXTERNAL_DATA,
    FORMAT,
    FORMAT_VERSION,
    LICENCES_DIR,
    MANIFEST,
    ONNX,
)
from qnndeploy.formats import schemas
from qnndeploy.model import decode
from qnndeploy.model.onnxio import external_locations, load_model, tensor_info

if TYPE_CHECKING:
    import onnx


def schema() -> JSON:
    return schemas.load("manifest")


def schema_errors(data: object) -> list[str]:
    return schemas.problems("manifest", data)


# Limits of the manifest reader: a hostile manifest is refused in one line, before it costs memory or recursion.
MAX_MANIFEST_BYTES = 16 << 20  # a 200-target bundle's manifest is about 200 KB
MAX_JSON_DEPTH = 64  # nested arrays and objects; a manifest needs 6
MAX_INT_DIGITS = 100  # sizes of 64 GiB have 11 digits; Python refuses int() of over 4,300 digits with a ValueError

_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEP = [0] * 256
_DEPTH_STEP[ord("[")] = _DEPTH_STEP[ord("{")] = 1
_DEPTH_STEP[ord("]")] = _DEPTH_STEP[ord("}")] = -1


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text, counted without recursion (strings skipped)."""
    brackets = _STRINGS.sub(b"", data).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def parse_json(data: bytes, path: Path) -> Any:
    """JSON text parsed within the limits above: each refusal is one QnnDeployError naming the file and the limit."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise QnnDeployError(f"{path} is not valid UTF-8 (byte {e.start}): a manifest is UTF-8 JSON") from None
    depth = json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise QnnDeployError(f"{path} nests arrays/objects {depth:,} deep, over the limit of {MAX_JSON_DEPTH}")

    def parse_int(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise QnnDeployError(f"{path} has an integer of {len(digits.lstrip('-')):,} digits, over the limit of "
                                 f"{MAX_INT_DIGITS}")
        return int(digits)

    try:
        value = json.loads(text, parse_int=parse_int)
        json.dumps(value, ensure_ascii=False).encode("utf-8")  # lone surrogates from \ud800-style escapes
    except UnicodeEncodeError as e:
        raise QnnDeployError(f"{path} has a string with a lone surrogate ({e.object[e.start:e.end]!a}): "
                             "strings must be valid Unicode") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise QnnDeployError(f"{path} is not readable JSON: {first_line(e)}") from None
    return value


# --- the typed manifest ------------------------------------------------------------------------------------------


class FileFormat(StrEnum):
    """What a bundle file is; the value is its "format" in manifest.json."""

    QNN_CONTEXT_BINARY = CONTEXT_BINARY
    ORT_EPCONTEXT = EPCONTEXT
    ONNX = ONNX
    ONNX_EXTERNAL_DATA = EXTERNAL_DATA


class RuntimeMode(StrEnum):
    """Where the QNN runtime libraries come from: the bundle itself, or a Maven artifact (none in the bundle)."""

    BUNDLED = "bundled"
    EXTERNAL = "external"


class LibRole(StrEnum):
    """What a runtime library of a bundled runtime is ("role" in manifest.json)."""

    HTP = "htp"
    SYSTEM = "system"
    PREPARE = "prepare"
    STUB = "stub"
    SKEL = "skel"


class Provider(StrEnum):
    """Where the app runs the models: the decision's provider, and the values of a target's accepted_on."""

    NPU = "npu"
    CPU = "cpu"


@dataclass(frozen=True)
class BundleFile:
    """A file of the bundle: a model, a context binary, an external data file, a runtime library or a record."""

    path: str
    sha256: str
    size: int = 0
    graph: str = ""  # the graph it belongs to; empty for a runtime library, a record and a shared context binary
    format: FileFormat | None = None  # None for a runtime library and a record
    graphs: tuple[str, ...] = ()  # a context binary shared by several graphs (format 3): their names
    role: LibRole | None = None  # a runtime library's
    abi: str = ""  # a runtime library's: arm64-v8a or hexagon-vXX
    dsp_arch: str | None = None  # a Stub's or Skel's HTP arch

    @property
    def served(self) -> list[str]:
        """The graphs it serves: its graph, or the graphs of a shared context binary."""
        return list(self.graphs or (self.graph,))

    def serves(self, graph: str) -> bool:
        return self.graph == graph or graph in self.graphs

    def to_json(self) -> JSON:
        """Its manifest entry: path, hash and size, then only the fields of its kind."""
        kind = {"graph": self.graph, "graphs": list(self.graphs), "format": self.format and self.format.value,
                "role": self.role and self.role.value, "abi": self.abi, "dsp_arch": self.dsp_arch}
        return {"path": self.path, "sha256": self.sha256, "size": self.size, **{k: v for k, v in kind.items() if v}}


@dataclass(frozen=True)
class Tensor:
    """An input or output of a graph; a dynamic dimension is its symbol (or "?") as the model writes it."""

    name: str
    dtype: str
    shape: tuple[int | str, ...] = ()

    @classmethod
    def parse(cls, m: Mapping[str, Any]) -> Tensor:
        shape = _list(m, "shape")
        if not all(isinstance(d, (int, str)) and not isinstance(d, bool) for d in shape):
            _bad("shape", m)
        return cls(_text(m, "name"), _text(m, "dtype"), tuple(shape))

    def to_json(self) -> JSON:
        """As manifest.json writes it (and graph_signature reads a model's)."""
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


@dataclass(frozen=True)
class Graph:
    name: str
    inputs: tuple[Tensor, ...] = ()
    outputs: tuple[Tensor, ...] = ()
    cpu_only: bool = False  # a split model's part that always runs on the CPU (prepare --split-at)

    def to_json(self) -> JSON:
        return {"name": self.name, "inputs": [t.to_json() for t in self.inputs],
                "outputs": [t.to_json() for t in self.outputs], **({"cpu_only": True} if self.cpu_only else {})}


@dataclass(frozen=True)
class Target:
    """The files for one SoC. accepted: graph -> the reason its failed validation was shipped with (bundle --accept);
    accepted_on: where the app runs such a target, as written ("cpu": the CPU fallback; None or "npu": the NPU; the
    decision reads any other value as asking nothing, as the Kotlin twin does)."""

    soc: str
    soc_id: int
    dsp_arch: str
    precision: str = ""
    artifacts: tuple[BundleFile, ...] = ()
    validation: JSON | None = None  # the validation summary as written (None: not validated)
    accepted: Mapping[str, str] = field(default_factory=dict)
    accepted_on: str | None = None
    compile: JSON | None = None  # the HTP settings its binaries were compiled with, as written

    @property
    def validations(self) -> dict[str, JSON]:
        """Its per-graph validation summaries (graph -> summary); empty when it was not validated."""
        return graph_validations(self.validation)

    def to_json(self) -> JSON:
        return {"soc": self.soc, "soc_id": self.soc_id, "dsp_arch": self.dsp_arch, "precision": self.precision,
                "artifacts": [a.to_json() for a in self.artifacts], "validation": self.validation,
                **({"accepted_on": self.accepted_on} if self.accepted_on is not None else {}),
                **({"compile": self.compile} if self.compile is not None else {})}


@dataclass(frozen=True)
class OnDeviceGraph:
    """One graph the app compiles on the phone (format 4): its ONNX, the QNN EP options besides the SoC's own, and
    the HTP arches that compile passed validation for on the host."""

    graph: str
    path: str
    ep_options: Mapping[str, str] = field(default_factory=dict)
    validated: tuple[str, ...] = ()

    def to_json(self) -> JSON:
        return {"graph": self.graph, "path": self.path, "ep_options": dict(self.ep_options),
                "validated": list(self.validated)}


DEFAULT_COMPILE_BUDGET_S = 60.0  # the first run's on-device compile budget when bundle build is given none


@dataclass(frozen=True)
class OnDevice:
    """What a phone whose SoC has no target compiles (bundle build --on-device-compile). artifacts: the models
    that differ from their CPU model, with their external data; a graph whose CPU model is the same file names it."""

    budget_s: float = DEFAULT_COMPILE_BUDGET_S
    graphs: tuple[OnDeviceGraph, ...] = ()
    artifacts: tuple[BundleFile, ...] = ()

    def graph(self, name: str) -> OnDeviceGraph | None:
        return next((g for g in self.graphs if g.graph == name), None)

    def to_json(self) -> JSON:
        return {"budget_s": self.budget_s, "artifacts": [a.to_json() for a in self.artifacts],
                "graphs": [g.to_json() for g in self.graphs]}


@dataclass(frozen=True)
class BundleLoop:
    """An encoder-decoder's decode loop (format 5), as validate --loop ran it: what the app runs over two of the
    bundle's graphs, and the tokenizer file that gives the tokens their text."""

    loop: decode.Loop  # its tokenizer is None: the bundle's is `tokenizer`
    tokenizer: BundleFile | None = None

    def to_json(self) -> JSON:
        return {**self.loop.description(), **({"tokenizer": self.tokenizer.to_json()} if self.tokenizer else {})}


@dataclass(frozen=True)
class GenerationKv:
    """One layer's KV cache in a generation: the part whose graphs read and write it, its key's and value's
    (past input, present output) names, and its per-entry shape [1, heads, entries, head_dim] and element type; on
    the NPU (format 8's npu_dtype, None: the same) uint8 where compile --kv-bits 8 made it so, the CPU's staying."""

    layer: int
    part: int
    key: tuple[str, str]
    value: tuple[str, str]
    heads: int
    head_dim: int
    dtype: str = "float32"
    npu_dtype: str | None = None

    def to_json(self) -> JSON:
        return {"layer": self.layer, "part": self.part, "key": list(self.key), "value": list(self.value),
                "heads": self.heads, "head_dim": self.head_dim, "dtype": self.dtype,
                **({} if self.npu_dtype is None else {"npu_dtype": self.npu_dtype})}


@dataclass(frozen=True)
class GenerationPart:
    """One part of a generation: its prompt graph, its decode graph and its layers, as the manifest lists them."""

    index: int
    prompt: str
    decode: str
    layers: tuple[int, ...] = ()

    def to_json(self) -> JSON:
        return {"index": self.index, "prompt": self.prompt, "decode": self.decode, "layers": list(self.layers)}


@dataclass(frozen=True)
class Generation:
    """A decoder LLM's generation (format 7, `prepare --generate`): prompt graphs of prompt_tokens and decode graphs
    of one token at context_tokens, in parts, with one KV cache per layer; what the app's GenerationSession runs.
    Field for field the manifest's "generation" object (and the Kotlin twin's GenerationConfig)."""

    kind: str
    prompt_tokens: int
    context_tokens: int
    vocab: int
    precision: str
    inputs: tuple[tuple[str, str], ...]  # (input_ids | attention_mask | position_ids, the graph input's name)
    logits: str
    kv: tuple[GenerationKv, ...]
    parts: tuple[GenerationPart, ...]
    tokenizer: BundleFile | None = None

    def to_json(self) -> JSON:
        return {"kind": self.kind, "prompt_tokens": self.prompt_tokens, "context_tokens": self.context_tokens,
                "vocab": self.vocab, "precision": self.precision, "inputs": dict(self.inputs), "logits": self.logits,
                "kv": [k.to_json() for k in self.kv], "parts": [p.to_json() for p in self.parts],
                "tokenizer": self.tokenizer.to_json() if self.tokenizer else None}


class OriginKind(StrEnum):
    """Where Qualcomm files of a bundle came from ("kind" of a licences origin in manifest.json)."""

    WHEEL = "onnxruntime-qnn"  # an onnxruntime-qnn wheel (the `ort` backend's compiler)
    QAIRT_SDK = "qairt-sdk"  # a QAIRT SDK folder (the `qairt` backend, or --qnn-sdk-root's runtime libraries)
    RUNTIME_LIBS = "runtime-libs"  # a folder of runtime libraries (--runtime-libs)
    AIHUB = "aihub"  # Qualcomm AI Hub (the `aihub` backend)
    MAVEN = "maven"  # the external runtime the app fetches from Maven (not in the bundle)
    UNKNOWN = "unknown"  # binaries given without a compile record


@dataclass(frozen=True)
class Origin:
    """A licences origin: what it is, and its licence and notice files as copied into the bundle (None: the terms
    are unknown)."""

    id: str
    kind: OriginKind
    found_in: str = ""
    version: str | None = None
    qairt: str | None = None
    coordinate: str | None = None
    terms: tuple[BundleFile, ...] | None = None

    @property
    def summary(self) -> str:
        """One line: the origin, and its terms files or "unknown"."""
        what = {OriginKind.MAVEN: self.coordinate}.get(self.kind) or " ".join(
            x for x in (self.kind.value, self.version) if x)
        shown = (f"{LICENCES_DIR}/{self.id}/ ({', '.join(t.path.rsplit('/', 1)[-1] for t in self.terms)})"
                 if self.terms else "terms unknown")
        return f"{what} -> {shown}"

    def to_json(self) -> JSON:
        given = {"version": self.version, "qairt": self.qairt, "coordinate": self.coordinate}
        return {"id": self.id, "kind": self.kind.value, **{k: v for k, v in given.items() if v},
                "found_in": self.found_in, "terms": None if self.terms is None else [t.to_json() for t in self.terms]}


@dataclass(frozen=True)
class QualcommFile:
    """A Qualcomm file of the bundle (a runtime library or a context binary) and its origin. original_sha256: the
    file's hash as it came, when bundle build --align-16k raised its p_align (sha256 is then the re-aligned one)."""

    path: str
    sha256: str
    origin: str
    original_sha256: str | None = None

    def to_json(self) -> JSON:
        return {"path": self.path, "sha256": self.sha256, "origin": self.origin,
                **({"original_sha256": self.original_sha256} if self.original_sha256 is not None else {})}


@dataclass(frozen=True)
class Licences:
    """Format 6's licences: the origins, and each Qualcomm file of the bundle with the origin it came from."""

    origins: tuple[Origin, ...] = ()
    files: tuple[QualcommFile, ...] = ()

    @property
    def terms(self) -> tuple[BundleFile, ...]:
        return tuple(t for o in self.origins for t in o.terms or ())

    def to_json(self) -> JSON:
        return {"origins": [o.to_json() for o in self.origins], "files": [f.to_json() for f in self.files]}


@dataclass(frozen=True)
class Qairt:
    """The one QAIRT of the bundle. min_runtime: the oldest QNN runtime that loads its context binaries; None when
    the manifest has none (older bundles)."""

    version: str = ""
    build: str | None = None
    min_runtime: str | None = None

    @property
    def shown(self) -> str:
        """One spelling for every summary: the version, and the build string the binaries carry beside it."""
        return f"{self.version} (build {self.build})" if self.build and self.version else self.build or self.version

    def to_json(self) -> JSON:
        return {"version": self.version, "build": self.build, "min_runtime": self.min_runtime}


@dataclass(frozen=True)
class Source:
    model: str = ""
    sha256: str | None = None
    commit: str | None = None
    license: str | None = None

    def to_json(self) -> JSON:
        return {"model": self.model, "sha256": self.sha256, "commit": self.commit, "license": self.license}


@dataclass(frozen=True)
class Runtime:
    mode: RuntimeMode = RuntimeMode.EXTERNAL
    libs: tuple[BundleFile, ...] = ()  # bundled
    maven: str = ""  # external: the Maven coordinate

    @property
    def bundled(self) -> bool:
        return self.mode == RuntimeMode.BUNDLED

    def to_json(self) -> JSON:
        if self.bundled:
            return {"mode": self.mode.value, "libs": [lib.to_json() for lib in self.libs]}
        return {"mode": self.mode.value, "maven": self.maven}


@dataclass(frozen=True)
class Manifest:
    """manifest.json, parsed once (Manifest.parse). format and format_version are kept as written (any JSON value),
    so that an unknown one can be named; a manifest of a format this qnndeploy does not read has only those."""

    format: object = FORMAT
    format_version: object = FORMAT_VERSION
    name: str = ""
    version: str = ""
    created_by: str = ""
    qairt: Qairt = Qairt()
    source: Source = Source()
    graphs: tuple[Graph, ...] = ()
    targets: tuple[Target, ...] = ()
    cpu: tuple[BundleFile, ...] = ()  # the CPU fallback: one ONNX model per graph, and their external data files
    runtime: Runtime = Runtime()
    records: tuple[BundleFile, ...] = ()
    htp_performance_mode: str | None = None  # bundle --performance-mode; None: the glue's default
    pipeline_order: tuple[str, ...] = ()  # the order the app runs the graphs in; empty: the graphs' order
    on_device: OnDevice | None = None  # format 4: what SoCs without a target compile on the phone
    loop: BundleLoop | None = None  # format 5: the decode loop the app runs over an encoder and a decoder
    licences: Licences | None = None  # format 6: where each Qualcomm file came from, and its terms
    generation: Generation | None = None  # format 7: a decoder's prompt and decode graphs, its parts and KV cache

    @property
    def pipeline(self) -> list[str]:
        return list(self.pipeline_order) or [g.name for g in self.graphs]

    @property
    def supported(self) -> bool:
        """Whether this qnndeploy reads the manifest's format and version."""
        return self.format == FORMAT and type(self.format_version) is int and 1 <= self.format_version <= FORMAT_VERSION

    @property
    def format_number(self) -> int:
        """format_version as a number (0 for one this qnndeploy does not read)."""
        return self.format_version if self.supported and type(self.format_version) is int else 0

    @property
    def bundle_version(self) -> str:
        """Changes with every bundle release: a remembered NPU failure counts only for the same one."""
        return f"{self.name} {self.version}"

    @property
    def model_files(self) -> list[BundleFile]:
        """Every bundle file the app may copy to its storage: the CPU files, every target's, the tokenizer."""
        return [*self.cpu, *(a for t in self.targets for a in t.artifacts), *self.on_device_files,
                *self.loop_files, *self.generation_files]

    @property
    def loop_files(self) -> tuple[BundleFile, ...]:
        return (self.loop.tokenizer,) if self.loop is not None and self.loop.tokenizer is not None else ()

    @property
    def generation_files(self) -> tuple[BundleFile, ...]:
        g = self.generation
        return (g.tokenizer,) if g is not None and g.tokenizer is not None else ()

    @property
    def on_device_files(self) -> tuple[BundleFile, ...]:
        return self.on_device.artifacts if self.on_device is not None else ()

    @property
    def cpu_only(self) -> list[str]:
        """The graphs that always run on the CPU (a split model's parts), in the manifest's order."""
        return [g.name for g in self.graphs if g.cpu_only]

    def to_json(self) -> JSON:
        """manifest.json as bundle build writes it; the optional sections only when present."""
        return {
            "format": self.format, "format_version": self.format_version, "name": self.name,
            "version": self.version, "created_by": self.created_by, "qairt": self.qairt.to_json(),
            "source": self.source.to_json(), "graphs": [g.to_json() for g in self.graphs],
            **({"htp": {"performance_mode": self.htp_performance_mode}} if self.htp_performance_mode else {}),
            **({"pipeline": list(self.pipeline_order)} if self.pipeline_order else {}),
            **({"loop": self.loop.to_json()} if self.loop is not None else {}),
            "targets": [t.to_json() for t in self.targets],
            "cpu": [a.to_json() for a in self.cpu],
            "runtime": self.runtime.to_json(),
            "records": [r.to_json() for r in self.records],
            **({"on_device": self.on_device.to_json()} if self.on_device is not None else {}),
            **({"licences": self.licences.to_json()} if self.licences is not None else {}),
            **({"generation": self.generation.to_json()} if self.generation is not None else {}),
        }

    def files(self) -> list[tuple[str, BundleFile]]:
        """Every file the manifest lists, with what it is: 'cpu', 'npu:<SoC>', 'on-device', 'loop', 'generation',
        'lib', 'licence' or 'record'."""
        entries = [("cpu", a) for a in self.cpu]
        entries += [(f"npu:{t.soc}", a) for t in self.targets for a in t.artifacts]
        entries += [("on-device", a) for a in self.on_device_files]
        entries += [("loop", a) for a in self.loop_files]
        entries += [("generation", a) for a in self.generation_files]
        entries += [("lib", lib) for lib in self.runtime.libs if self.runtime.bundled]
        entries += [("licence", t) for t in (self.licences.terms if self.licences else ())]
        return entries + [("record", r) for r in self.records]

    @classmethod
    def parse(cls, data: object) -> Manifest:
        """From the JSON value of manifest.json: the format and its version first, the rest only when this
        qnndeploy reads that format. Lenient where the Kotlin twin is (accepted reasons, accepted_on,
        min_runtime, performance mode: a value of another type counts as none), so both decide alike on any
        manifest; any other field of the wrong type is a QnnDeployError (the schema check, run first, says which)."""
        if not isinstance(data, dict):
            raise QnnDeployError("the bundle manifest is not a JSON object")
        header = cls(format=data.get("format"), format_version=data.get("format_version"))
        if not header.supported:
            return header
        qairt, source, runtime = (_object(data, key) for key in ("qairt", "source", "runtime"))
        htp = data.get("htp")
        return cls(
            format=header.format, format_version=header.format_version,
            name=_text(data, "name"), version=_text(data, "version"), created_by=_optional(data, "created_by") or "",
            qairt=Qairt(_optional(qairt, "version") or "", _optional(qairt, "build"), _optional(qairt, "min_runtime")),
            source=Source(_optional(source, "model") or "", _optional(source, "sha256"), _optional(source, "commit"),
                          _optional(source, "license")),
            graphs=tuple(Graph(_text(g, "name"), tuple(map(Tensor.parse, _objects(g, "inputs"))),
                               tuple(map(Tensor.parse, _objects(g, "outputs"))), cpu_only=g.get("cpu_only") is True)
                         for g in _objects(data, "graphs")),
            targets=tuple(map(_target, _objects(data, "targets"))),
            cpu=tuple(map(_file, _objects(data, "cpu"))),
            runtime=Runtime(_mode(runtime), tuple(map(_file, _objects(runtime, "libs"))),
                            _optional(runtime, "maven") or ""),
            records=tuple(map(_file, _objects(data, "records"))),
            htp_performance_mode=_optional(htp, "performance_mode") if isinstance(htp, dict) else None,
            pipeline_order=tuple(_strings(data, "pipeline")),
            on_device=_on_device(data["on_device"]) if isinstance(data.get("on_device"), dict) else None,
            loop=_loop(data["loop"]) if isinstance(data.get("loop"), dict) else None,
            licences=_licences(data["licences"]) if isinstance(data.get("licences"), dict) else None,
            generation=_generation(data["generation"]) if isinstance(data.get("generation"), dict) else None,
        )


def _bad(key: str, where: Mapping[str, Any]) -> NoReturn:
    raise QnnDeployError(f'the bundle manifest has no valid "{key}" in {json.dumps(where)[:200]}: check it with '
                         "qnndeploy bundle verify")


def _text(m: Mapping[str, Any], key: str) -> str:
    value = m.get(key)
    return value if isinstance(value, str) else _bad(key, m)


def _optional(m: Mapping[str, Any], key: str) -> str | None:
    """The string under key; None when it is absent or not a string."""
    value = m.get(key)
    return value if isinstance(value, str) else None


def _list(m: Mapping[str, Any], key: str) -> list[Any]:
    """The list under key; empty when the key is absent."""
    value = m.get(key)
    if value is None:
        return []
    return value if isinstance(value, list) else _bad(key, m)


def _object(m: Mapping[str, Any], key: str) -> JSON:
    """The object under key; empty when it is absent or not an object (as the Kotlin twin reads qairt and runtime)."""
    value = m.get(key)
    return value if isinstance(value, dict) else {}


def _objects(m: Mapping[str, Any], key: str) -> list[JSON]:
    values = _list(m, key)
    return values if all(isinstance(v, dict) for v in values) else _bad(key, m)


def _strings(m: Mapping[str, Any], key: str) -> list[str]:
    values = _list(m, key)
    return values if all(isinstance(v, str) for v in values) else _bad(key, m)


E = TypeVar("E", bound=StrEnum)


def _enum(kind: type[E], m: Mapping[str, Any], key: str) -> E | None:
    value = m.get(key)
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        return _bad(key, m)


def _mode(runtime: JSON) -> RuntimeMode:
    return _enum(RuntimeMode, runtime, "mode") or RuntimeMode.EXTERNAL


def _file(m: JSON) -> BundleFile:
    size = m.get("size", 0)
    if type(size) is not int:
        _bad("size", m)
    return BundleFile(_text(m, "path"), _text(m, "sha256"), size, _optional(m, "graph") or "",
                      _enum(FileFormat, m, "format"), tuple(_strings(m, "graphs")), _enum(LibRole, m, "role"),
                      _optional(m, "abi") or "", _optional(m, "dsp_arch"))


def _target(m: JSON) -> Target:
    soc_id = m.get("soc_id")
    if type(soc_id) is not int:
        _bad("soc_id", m)
    validation, compiled = m.get("validation"), m.get("compile")
    validation = validation if isinstance(validation, dict) else None
    accepted = accepted_reasons(validation)
    return Target(_text(m, "soc"), soc_id, _text(m, "dsp_arch"), _optional(m, "precision") or "",
                  tuple(map(_file, _objects(m, "artifacts"))), validation, accepted, _optional(m, "accepted_on"),
                  compiled if isinstance(compiled, dict) else None)


def _loop(m: JSON) -> BundleLoop:
    try:
        loop = decode.described(m)
    except (KeyError, TypeError, ValueError, AttributeError):
        _bad("loop", m)
    return BundleLoop(loop, _file(m["tokenizer"]) if isinstance(m.get("tokenizer"), dict) else None)


def _count(m: Mapping[str, Any], key: str) -> int:
    value = m.get(key)
    return value if type(value) is int and value >= 0 else _bad(key, m)


def _pair(m: Mapping[str, Any], key: str) -> tuple[str, str]:
    names = _strings(m, key)
    return (names[0], names[1]) if len(names) == 2 else _bad(key, m)


def _generation(m: JSON) -> Generation:
    inputs = _object(m, "inputs")
    if not all(isinstance(v, str) for v in inputs.values()):
        _bad("inputs", m)
    kv = tuple(GenerationKv(_count(k, "layer"), _count(k, "part"), _pair(k, "key"), _pair(k, "value"),
                            _count(k, "heads"), _count(k, "head_dim"), _optional(k, "dtype") or "float32",
                            _optional(k, "npu_dtype"))
               for k in _objects(m, "kv"))
    parts = []
    for p in _objects(m, "parts"):
        layers = _list(p, "layers")
        if not all(type(n) is int for n in layers):
            _bad("layers", p)
        parts.append(GenerationPart(_count(p, "index"), _text(p, "prompt"), _text(p, "decode"), tuple(layers)))
    tokenizer = m.get("tokenizer")
    return Generation(_text(m, "kind"), _count(m, "prompt_tokens"), _count(m, "context_tokens"), _count(m, "vocab"),
                      _optional(m, "precision") or "", tuple(inputs.items()), _text(m, "logits"), kv, tuple(parts),
                      _file(tokenizer) if isinstance(tokenizer, dict) else None)


def _licences(m: JSON) -> Licences:
    origins = []
    for o in _objects(m, "origins"):
        terms = o.get("terms")
        origins.append(Origin(_text(o, "id"), _enum(OriginKind, o, "kind") or _bad("kind", o),
                              _optional(o, "found_in") or "", _optional(o, "version"), _optional(o, "qairt"),
                              _optional(o, "coordinate"),
                              None if terms is None else tuple(map(_file, _objects(o, "terms")))))
    files = tuple(QualcommFile(_text(f, "path"), _text(f, "sha256"), _text(f, "origin"),
                               _optional(f, "original_sha256")) for f in _objects(m, "files"))
    return Licences(tuple(origins), files)


def _on_device(m: JSON) -> OnDevice:
    budget = m.get("budget_s", DEFAULT_COMPILE_BUDGET_S)
    if not is_number(budget):
        _bad("budget_s", m)
    graphs = []
    for g in _objects(m, "graphs"):
        options = _object(g, "ep_options")
        if not all(isinstance(v, str) for v in options.values()):
            _bad("ep_options", g)
        graphs.append(OnDeviceGraph(_text(g, "graph"), _text(g, "path"), options, tuple(_strings(g, "validated"))))
    return OnDevice(float(budget), tuple(graphs), tuple(map(_file, _objects(m, "artifacts"))))


def verified_bytes(bundle: Path, manifest: Manifest) -> bytes:
    """manifest.json's bytes, read once, when they still parse to `manifest` (the one verify checked): what a
    command publishes as the manifest, and hashes for a plan, is then the verified manifest."""
    path = bundle / MANIFEST
    raw = read_limited(path, MAX_MANIFEST_BYTES, "bundle manifest")
    try:
        same = Manifest.parse(parse_json(raw, path)) == manifest
    except QnnDeployError:  # not a manifest any more
        same = False
    if not same:
        raise QnnDeployError(f"{path} changed since it was verified; nothing was published from it")
    return raw


def read_json(bundle: Path) -> JSON:
    """Parse manifest.json and check its format and version; schema validation is separate (see load_manifest).
    The file must be a regular file within the limits above."""
    path = bundle / MANIFEST
    if not os.path.lexists(path):
        raise QnnDeployError(f"{bundle} is not a bundle: it has no {MANIFEST}")
    data = parse_json(read_limited(path, MAX_MANIFEST_BYTES, "bundle manifest"), path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise QnnDeployError(f"{path} is not a qnndeploy bundle manifest (format must be '{FORMAT}')")
    version = data.get("format_version")
    if type(version) is not int or not 1 <= version <= FORMAT_VERSION:
        raise QnnDeployError(f"{path} has format_version {version!r}; this qnndeploy reads versions 1 to "
                             f"{FORMAT_VERSION}" + ("; upgrade qnndeploy" if type(version) is int
                                                    and version > FORMAT_VERSION else ""))
    return data


def read_manifest(bundle: Path) -> Manifest:
    """The manifest of a bundle that `bundle verify` has checked against the schema (read_json, parsed)."""
    return Manifest.parse(read_json(bundle))


def load_json(bundle: Path) -> JSON:
    """manifest.json as JSON, when it is safe to use: right format, right version, valid against the schema."""
    data = read_json(bundle)
    errors = schema_errors(data)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise QnnDeployError(f"{bundle / MANIFEST} fails the schema: {errors[0]}{more}")
    return data


def load_manifest(bundle: Path) -> Manifest:
    """The manifest of load_json, parsed."""
    return Manifest.parse(load_json(bundle))


def external_data_path(model: str, location: str | bytes) -> str | None:
    """The bundle path of the data file `location` named by the model at bundle path `model`, or None when the
    location could leave the model's folder (absolute, '..', '.', empty segments, backslashes) or is not text (protobuf
    gives bytes for a location that is not valid UTF-8)."""
    if not isinstance(location, str):
        return None
    if "\\" in location or "\x00" in location or any(p in ("", ".", "..") for p in location.split("/")):
        return None
    return f"{model.rsplit('/', 1)[0]}/{location}"


@dataclass
class Signature:
    inputs: list[JSON]  # {"name", "dtype", "shape"} as in the manifest's graphs
    outputs: list[JSON]
    external_data: list[str]  # the data files it names, relative to its folder


def graph_signature(path: Path) -> Signature:
    """The inputs and outputs of an ONNX model (CPU fallback or EPContext wrapper), read without its weights."""
    model = load_model(path, weights=False)
    inits = {t.name for t in model.graph.initializer}

    def tensors(values: Iterable[onnx.ValueInfoProto]) -> list[JSON]:
        # dims as the file writes them, a dynamic one as its symbol or "?"
        return [{"name": t.name, "dtype": t.dtype, "shape": t.shape or []}
                for t in (tensor_info(v, written=True) for v in values) if t.name not in inits]

    return Signature(tensors(model.graph.input), tensors(model.graph.output), sorted(external_locations(model)))


# --- validation summaries: what failed, and why it was shipped anyway (bundle --accept) ----------------------------

ACCEPTED_BY = "bundle --accept"  # the "by" of an accepted failure that `bundle --accept` recorded


def graph_validations(validation: object) -> dict[str, JSON]:
    """A target's per-graph validation summaries (graph -> summary) from its "validation"; empty when it was not
    validated."""
    graphs = validation.get("graphs") if isinstance(validation, dict) else None
    return {g: s for g, s in graphs.items() if isinstance(s, dict)} if isinstance(graphs, dict) else {}


def accepted_reasons(validation: JSON | None) -> dict[str, str]:
    """graph -> the reason its failed validation was shipped with, of a target's "validation"."""
    return {g: reason for g, s in graph_validations(validation).items() if (reason := accepted_reason(s)) is not None}


def accepted_reason(summary: JSON) -> str | None:
    """The reason a graph's failed validation was shipped with (its summary's accepted.reason), or None."""
    accepted = summary.get("accepted")
    reason = accepted.get("reason") if isinstance(accepted, dict) else None
    return reason if isinstance(reason, str) else None


def worst_metric(summary: JSON) -> str:
    """How a failed graph missed its thresholds, from its validation summary: the loop or chain that judged it, else
    its lowest-SNR failed output's first missed test, e.g. "snr 12.4 dB < 30" (the output named when the graph has
    several)."""
    if isinstance(summary.get("decided_by"), str):  # a loop's or a chain's verdict (bundle build's summary)
        return str(summary["decided_by"])
    given = summary.get("thresholds")
    limits: JSON = given if isinstance(given, dict) else {}
    outputs = [o for o in summary.get("outputs") or [] if isinstance(o, dict)]
    failed = [o for o in outputs if o.get("passed") is False]
    if not failed:
        return "failed"
    worst = min(failed, key=lambda o: o["snr_db"] if is_number(o.get("snr_db")) else float("inf"))
    snr, cosine, diff = worst.get("snr_db"), worst.get("cosine"), worst.get("max_abs_diff")
    min_snr, min_cosine, atol = limits.get("min_snr_db"), limits.get("min_cosine"), limits.get("atol")
    if worst.get("judged_on") == "finite":
        text = "NaN or Inf in the NPU output"
    elif worst.get("judged_on") == "max_abs_diff" and is_number(diff) and is_number(atol):
        text = f"max abs diff {diff:.3g} > atol {atol:g}"
    elif is_number(snr) and is_number(min_snr) and snr < min_snr:
        text = f"snr {snr:.1f} dB < {min_snr:g}"
    elif is_number(cosine) and is_number(min_cosine) and cosine < min_cosine:
        text = f"cosine {cosine:.4g} < {min_cosine:g}"
    else:
        text = f"failed, judged on {worst.get('judged_on') or 'its metrics'}"
    return f"{worst.get('name')}: {text}" if len(outputs) > 1 else text

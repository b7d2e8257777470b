"""`bundle`: assemble a bundle folder from context binaries, CPU fallbacks and runtime libraries.

Everything is written into a staging folder, checked with the same rules as `bundle verify`, and only then put in
place in one step (fileio.replace: renameat2 RENAME_EXCHANGE onto an old bundle), so at every instant the final name
holds the old or the new complete bundle. The archive (--archive) is written under a temporary name beside its final
name and renamed into place right after the bundle, with no safe point in between. Leftovers of earlier killed runs
(.NAME.partial-PID-*, .NAME.old-PID, of this bundle's and archive's names only) are removed first.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as replace_spec
from pathlib import Path
from typing import Any

from qnndeploy import __version__
from qnndeploy.base import compat, socs
from qnndeploy.base.errors import BadInput
from qnndeploy.base.fileio import (
    JSON,
    ByteProgress,
    Expected,
    check_apart,
    check_writable,
    copy_verified,
    first_missing,
    partial_file,
    remove_made,
    remove_stale,
    replace,
    resolve_named,
    sha256_file,
    staging_dir,
    write_json,
    writing,
)
from qnndeploy.base.htparch import HtpArch
from qnndeploy.base.kinds import Precision, choices
from qnndeploy.base.names import (
    ACCEPT_ON,
    CONTEXT_BINARY,
    EPCONTEXT,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    MAVEN_RUNTIME,
    PERFORMANCE_MODES,
    graph_name,
    path_problem,
)
from qnndeploy.base.pool import Pool
from qnndeploy.bundle import licences
from qnndeploy.decide.decision import BACKEND_LIB, SYSTEM_LIB, qnn_libraries
from qnndeploy.formats import archive, elf
from qnndeploy.formats.generation import GenerationPlan, plans_of, to_manifest
from qnndeploy.formats.manifest import (
    ACCEPTED_BY,
    DEFAULT_COMPILE_BUDGET_S,
    BundleFile,
    BundleLoop,
    FileFormat,
    Generation,
    Graph,
    LibRole,
    Licences,
    Manifest,
    OnDevice,
    OnDeviceGraph,
    OriginKind,
    Qairt,
    QualcommFile,
    Runtime,
    RuntimeMode,
    Source,
    Target,
    Tensor,
    accepted_reason,
    accepted_reasons,
    external_data_path,
    graph_signature,
    schema,
    worst_metric,
)
from qnndeploy.formats.ondevicerecord import OnDeviceRecord
from qnndeploy.formats.records import (
    RECORD_FILE,
    VALIDATION_FILE,
    CompileRecord,
    HtpSettings,
    RecordStatus,
    SplitRecord,
    ValidationRecord,
    read_build,
    read_record,
    splits_of,
)
from qnndeploy.model import decode, samples
from qnndeploy.qnn import epcontext, ondevice
from qnndeploy.qnn.markers import FileFacts, Scanner, build_version, scan_file
from qnndeploy.verification.checks import CONTROL, Contexts, Problem, check_manifest, check_warnings, read_contexts

PREPARE_LIB = "libQnnHtpPrepare.so"  # only for graphs prepared on the phone: shipped when the SDK has it


@dataclass(frozen=True)
class OnDeviceRequest:
    """bundle build --on-device-compile: phones without a target compile the CPU models on first run, within
    budget_s, with these HTP settings; which arches may do so is measured while the bundle is built."""

    budget_s: float = DEFAULT_COMPILE_BUDGET_S
    vtcm_mb: int | None = None
    optimization_mode: int | None = None


@dataclass(frozen=True)
class BundleSpec:
    """What goes into a bundle, built in one call (or from a build, spec_from_build, then changed with
    dataclasses.replace). npu maps a SoC name (as the user wrote it) to graph -> files."""

    name: str
    version: str
    cpu: Mapping[str, Path]
    npu: Mapping[str, Mapping[str, Sequence[Path]]]
    sdk_root: Path | None = None  # QAIRT layout: lib/aarch64-android, lib/hexagon-vXX/unsigned
    libs_dir: Path | None = None  # a flat folder of the same libraries; neither: external runtime
    precision: str = Precision.FP16  # a Precision, or another the binaries were built with (bundle --precision)
    qairt_version: str | None = None
    maven_version: str | None = None  # external runtime: the qnn-runtime release to pin (default: the QAIRT version)
    source_model: str | None = None
    source_path: Path | None = None
    commit: str | None = None
    license: str | None = None
    records: Mapping[str, Path] = field(default_factory=dict)  # name under records/ -> file
    validation: Mapping[str, JSON] = field(default_factory=dict)  # SoC model -> validation summary
    htp: Mapping[str, HtpSettings] = field(default_factory=dict)  # SoC model -> the HTP settings it was compiled with
    accepted_on: Mapping[str, str] = field(default_factory=dict)  # SoC model -> where the app runs accepted failures
    performance_mode: str | None = None  # the HTP performance mode the glue sets (None: the glue's default)
    expected_sha256: Mapping[Path, str] = field(default_factory=dict)  # inputs whose hash a compile record holds
    cpu_only: Sequence[str] = ()  # graphs that always run on the CPU (a split model's part)
    pipeline: Sequence[str] = ()  # the order the app runs the graphs in (empty: none given)
    loop: JSON | None = None  # the decode loop validate ran over two graphs (decode.Loop.json), shipped as validated
    generation: Generation | None = None  # a decoder LLM's parts (prepare --generate): its loop, as the app runs it
    generation_tokenizer: Path | None = None  # the generation's tokenizer file (prepare --tokenizer)
    build: Path | None = None  # the `compile` output folder it comes from (--from-build): an input folder
    on_device: OnDeviceRequest | None = None
    compilers: Mapping[Path, JSON] = field(default_factory=dict)  # context binary -> its record's backend and tools
    align_16k: bool = False  # raise runtime libraries' PT_LOAD p_align to 16 KB where proven safe (--align-16k)


@dataclass
class BundleResult:
    path: Path
    archive: Path | None
    name: str
    version: str
    qairt: str
    targets: list[str]
    runtime: str
    files: int
    bytes: int
    warnings: list[Problem]
    on_device: list[OnDeviceGraph] = field(default_factory=list)  # what --on-device-compile validated
    licences: list[str] = field(default_factory=list)  # per origin of its Qualcomm files: its terms files or unknown


def spec_from_build(build: Path, name: str, version: str, accept: Mapping[tuple[str, str], str] | None = None,
                    accept_on: str | None = None, split: Path | None = None) -> BundleSpec:
    """A BundleSpec from a `compile` output folder: its jobs' outputs, records, logs and validation results.

    Every job must have succeeded, and every file must still be what its compile record hashed: a bundle says
    what was compiled and validated, so a model or binary changed since then is refused. A graph that failed
    validation is refused too, unless `accept` gives a reason for it: (graph, SoC or "*") -> reason; `accept_on`
    ("npu", the default, or "cpu") says where the app runs the targets with accepted failures. `split` is the
    record of the split the build's models are parts of (add_split); a build of parts without it is refused.
    """
    jobs = read_build(Path(build))
    failed = [f"{rec.graph}/{rec.soc}" for rec in jobs if rec.status != RecordStatus.OK]
    if failed:
        raise BadInput(f"{build} has failed compile jobs ({', '.join(failed)}): fix them (the logs say why) "
                       "or compile again without them, then bundle")
    cpu: dict[str, Path] = {}
    npu: dict[str, dict[str, list[Path]]] = {}
    expected: dict[Path, str] = {}
    compilers: dict[Path, JSON] = {}
    htp: dict[str, HtpSettings] = {}
    records: dict[str, Path] = {}
    validation: dict[str, JSON] = {}
    loops: dict[str, JSON] = {}  # the decode loops the records ran, each once
    for rec in jobs:
        # the model the record names (a link the user compiled through is followed once: its hash is checked)
        graph, soc, source, job = rec.graph, rec.soc, resolve_named(rec.source), rec.folder
        if cpu.setdefault(graph, source) != source:
            raise BadInput(f"graph {graph} was compiled from two models ({cpu[graph]} and {source})")
        expected[source] = rec.source_sha256
        outputs = [o for o in rec.outputs if o.format in (CONTEXT_BINARY, EPCONTEXT)]
        npu.setdefault(soc, {})[graph] = [job / o.path for o in outputs]
        expected.update({job / o.path: o.sha256 for o in outputs})
        compilers.update(dict.fromkeys((job / o.path for o in outputs if o.format == CONTEXT_BINARY),
                                       _compiler(rec)))
        if rec.htp is not None and htp.setdefault(soc, rec.htp) != rec.htp:
            raise BadInput(f"{build} has {soc} graphs compiled with different HTP settings ({htp[soc]}; "
                           f"{rec.htp} for {graph}): compile them with the same --vtcm-mb, "
                           "--optimization-mode and --spill-fill")
        records[f"{rec.shared or graph}-{soc}-{RECORD_FILE}"] = job / RECORD_FILE
        target = validation.setdefault(soc, {"passed": True, "graphs": {}})
        summary, validated = _validation_summary(rec)
        if validated is not None:
            records[f"{graph}-{soc}-{VALIDATION_FILE}"] = rec.validation_file
            if validated.loop_described is not None:
                loops.setdefault(json.dumps(validated.loop_described, sort_keys=True), validated.loop_described)
        target["graphs"][graph] = summary
        verdicts = [g["passed"] for g in target["graphs"].values()]
        target["passed"] = False if False in verdicts else None if None in verdicts else True
    precisions = {rec.precision for rec in jobs}
    if len(precisions) > 1:
        raise BadInput(f"{build} mixes precisions {sorted(precisions)}; bundle one precision at a time")
    for log in sorted((Path(build) / "logs").glob("*.log")):
        records[f"logs/{log.name}"] = log
    if len(loops) > 1:
        raise BadInput(f"{build} was validated with {len(loops)} different decode loops (--loop): validate it again "
                       "with the one the app runs")
    loop = next(iter(loops.values()), None)
    if loop is not None:
        try:
            decode.described(loop)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise BadInput(f"{build}'s decode loop was recorded by an older qnndeploy without its tensors: validate "
                           "it again (--loop), then bundle") from None
        if loop.get("tokenizer"):
            expected[Path(loop["tokenizer"]["path"])] = loop["tokenizer"]["sha256"]
    precision = precisions.pop()
    uint8 = {frozenset(n for n, _, _ in rec.htp.kv8) if rec.htp else frozenset() for rec in jobs}
    if len(uint8) > 1:
        raise BadInput(f"{build} mixes jobs compiled with and without --kv-bits 8 (or with other caches in uint8): "
                       "compile every SoC the same way, then bundle")
    plan = _generation_plan(Path(build), cpu)
    words = Path(plan.tokenizer[0]) if plan is not None and plan.tokenizer else None
    if plan is not None and plan.tokenizer:
        expected[Path(plan.tokenizer[0])] = plan.tokenizer[1]  # copied only as prepare --generate hashed it
    spec = BundleSpec(name, version, cpu, npu, precision=precision, records=records, validation=validation,
                      htp=htp, accepted_on=_accept(validation, Path(build), accept or {}, accept_on),
                      expected_sha256=expected, build=Path(build), loop=loop, compilers=compilers,
                      generation=None if plan is None else to_manifest(plan, precision, uint8.pop()),
                      generation_tokenizer=words)
    if split is not None:
        return with_split(spec, split)
    looped = set(decode.described(loop).graphs) if loop is not None else set()
    named = [r.path for r in splits_of({p: expected[p] for p in cpu.values()})
             if not {g for g, p in cpu.items() if r.part_of(p, expected[p]) is not None} <= looped]
    if named:  # a split whose parts the decode loop runs is carried by the loop: it names them in order
        raise BadInput(f"the models of {build} are parts of a split: bundle them with its record, --split "
                       f"{named[0]}, or the app gets neither the other parts nor their order")
    return spec


def _generation_plan(build: Path, cpu: Mapping[str, Path]) -> GenerationPlan | None:
    """The generation the build's graphs are the parts of (prepare --generate), all of them: the app needs every
    part, and one generation per bundle."""
    plans = {p.path: p for p in plans_of(cpu).values()}
    if not plans:
        return None
    if len(plans) > 1:
        raise BadInput(f"{build} holds the parts of {len(plans)} generations ({', '.join(map(str, plans))}): "
                       "bundle one at a time")
    plan = next(iter(plans.values()))
    missing = [g for g in plan.graph_files() if g not in cpu]
    if missing:
        raise BadInput(f"{build} lacks {', '.join(missing)} of {plan.path.name}: the app runs every part; compile "
                       "them all, then bundle")
    return plan


def _compiler(rec: CompileRecord) -> JSON:
    """What a compile record says of the compiler that made its binary: backend, QAIRT and the tools' versions
    (the whole record's "tools": CompileRecord keeps only what validate and bundle check)."""
    record = read_record(rec.folder / RECORD_FILE)
    return {"backend": rec.backend, "qairt": rec.qairt_version, "tools": dict(record.tools) if record else {}}


def _validation_summary(rec: CompileRecord) -> tuple[JSON, ValidationRecord | None]:
    """A job's validation summary for the manifest, and the validation record of this binary that made it."""
    v = ValidationRecord.read(rec.validation_file)
    binary = rec.output(CONTEXT_BINARY)
    if v is None:
        return {"passed": None, "note": "not validated: run qnndeploy validate"}, None
    if v.binary_sha256 not in (None, binary.sha256 if binary else None):
        return {"passed": None, "note": f"not validated: {rec.validation_file.name} is of an earlier compile; "
                                        "run qnndeploy validate"}, None
    return {"passed": v.passed, "thresholds": v.thresholds, "inputs": samples.in_words(v.inputs),
            **({"threshold_reason": v.threshold_reason} if v.threshold_reason else {}),
            **({"decided_by": decider} if (decider := _decided_by(v)) else {}),
            "outputs": [{k: o[k] for k in ("name", "passed", "max_abs_diff", "rel_l2", "cosine", "snr_db",
                                           "judged_on")} for o in v.outputs]}, v


def _decided_by(v: ValidationRecord) -> str | None:
    """What judged a graph run in a loop or a split's chain, in words: that verdict is the graph's, not its own
    outputs' figures (a part's attention mask holds -inf by design)."""
    loop, chain = v.loop or {}, v.chain or {}
    if "error" in loop or "error" in chain:
        return f"its {'loop' if loop else 'chain'} could not run: {loop.get('error') or chain.get('error')}"
    if loop.get("kind") == "generation":
        return (f"its generation loop: {loop['agreement']:.1%} of {loop['steps']} greedy steps choose the CPU's token "
                f"(at least {loop['min_agreement']:.0%})")
    if loop:
        return f"its decode loop: word error rate {loop['error_rate']:.2%} against the CPU's texts"
    if chain:
        return f"its split's chain against the source model: {'passed' if chain.get('passed') else 'failed'}"
    return None


ANY_SOC = "*"  # --accept GRAPH@*: every SoC on which GRAPH failed
MAX_REASON = 500


def _accept(validation: Mapping[str, JSON], build: Path, accept: Mapping[tuple[str, str], str],
            accept_on: str | None) -> dict[str, str]:
    """Record each accepted failure in its validation summary, and refuse a failure without a reason or a reason
    without a failure (it would record a false one): a failed graph is never shipped silently. Returns where the
    app runs each SoC with an accepted failure (SoC model -> npu or cpu)."""
    if accept_on is not None and accept_on not in ACCEPT_ON:
        raise BadInput(f"--accept-on {accept_on!r}: use one of {', '.join(ACCEPT_ON)}")
    if accept_on is not None and not accept:
        raise BadInput("--accept-on says where the app runs accepted failures: give them with "
                       "--accept GRAPH@SOC=REASON")
    summaries = {(g, socs.find(soc).model): s for soc, v in validation.items() for g, s in v["graphs"].items()}
    failed = [pair for pair, s in summaries.items() if s["passed"] is False]
    reasons: dict[tuple[str, str], str] = {}
    for (graph, soc), reason in sorted(accept.items(), key=lambda kv: kv[0][1] != ANY_SOC):  # GRAPH@* first
        form = f"--accept {graph}@{soc}"
        text = reason.strip()
        if not text or len(text) > MAX_REASON or CONTROL.search(text):
            raise BadInput(f"{form}: give a reason of one line, 1 to {MAX_REASON} characters "
                           f"({form}=\"cosine 0.998 is fine for this feature\")")
        if soc == ANY_SOC:
            pairs = [p for p in failed if p[0] == graph]
            if not pairs:
                raise BadInput(f"{form}: graph {graph} failed validation on no SoC of {build}; drop it")
        else:
            pair = (graph, socs.find(soc).model)
            if pair not in failed:
                state = ("is not in the build" if pair not in summaries else
                         "passed validation" if summaries[pair]["passed"] else "was not validated")
                raise BadInput(f"{form}: {graph}@{pair[1]} {state}, so there is no failure to accept (the "
                               "reason would be recorded as one): drop it")
            pairs = [pair]
        reasons.update(dict.fromkeys(pairs, text))
    silent = [p for p in failed if p not in reasons]
    if silent:
        listed = ", ".join(f"{g}@{soc} ({worst_metric(summaries[(g, soc)])})" for g, soc in silent)
        graph, soc = silent[0]
        raise BadInput(f"validation failed for {listed}: fix the graph (qnndeploy validate {build} shows every "
                       f"output), or ship it with a reason: --accept {graph}@{soc}=\"REASON\" for each "
                       "(GRAPH@* for all its SoCs; add --accept-on cpu to make the app use the CPU there)")
    for (graph, soc), text in reasons.items():
        summaries[(graph, soc)]["accepted"] = {"reason": text, "by": ACCEPTED_BY}
    return {soc: accept_on or "npu" for _, soc in reasons}


def with_split(spec: BundleSpec, record: Path) -> BundleSpec:
    """The spec with a split model (`prepare --split-at`): its CPU part joins as a CPU-only graph named after its
    file, its NPU part must be a graph of the build, and the record's order becomes the pipeline the app runs."""
    try:
        split = SplitRecord.read(Path(record))
    except BadInput as e:
        raise BadInput(f"--split {e}") from None
    names: dict[str, str] = {}
    models, cpu_only = dict(spec.cpu), list(spec.cpu_only)
    for part in split.parts:
        path = part.path.resolve()
        if sha256_file(_need_file(path, f"{part.name} part")) != part.sha256:
            raise BadInput(f"{path} changed since it was split: split again")
        if part.runs_on == "cpu":
            cpu = names[part.name] = graph_name(path.name)  # named as compile names the NPU part
            if models.setdefault(cpu, path) != path:
                raise BadInput(f"--split: graph {cpu} is already another model ({models[cpu]})")
            cpu_only.append(cpu)
        else:
            graph = next((g for g, p in models.items() if Path(p).resolve() == path), None)
            if graph is None:
                raise BadInput(f"--split: the NPU part {path} is in no compiled graph: compile it (qnndeploy "
                               "compile), then bundle build --from-build that build")
            names[part.name] = graph
    return replace_spec(spec, cpu=models, cpu_only=cpu_only, pipeline=[names[p.name] for p in split.parts])


def _need_file(path: Path, what: str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{what} {path} does not exist or is not a file")
    if not os.access(path, os.R_OK):
        raise BadInput(f"{what} {path} is not readable")
    return path


def _cpu_files(spec: BundleSpec) -> tuple[list[Graph], dict[str, list[tuple[Path, str]]]]:
    """The graphs' signatures, and per graph its CPU model's files: (source, path in the bundle), the model first.

    External data files keep the location the model names, beside it in cpu/, so ONNX Runtime finds them.
    """
    graphs, files = [], {}
    for g, p in spec.cpu.items():
        path = _need_file(p, f"CPU model for graph {g}")
        sig = graph_signature(path)
        graphs.append(Graph(g, tuple(map(Tensor.parse, sig.inputs)), tuple(map(Tensor.parse, sig.outputs)),
                            cpu_only=g in spec.cpu_only))
        files[g] = [(path, f"cpu/{g}.onnx")]
        for location in sig.external_data:
            rel = external_data_path(files[g][0][1], location)
            if rel is None:
                raise BadInput(f"CPU model {path} keeps its weights in '{location}', which is not a plain "
                               "relative path beside the model: save the model with its data file next to it "
                               "(onnx.save(..., location='NAME.data'))")
            files[g].append((path.parent / location, rel))
    sources: dict[str, Path] = {}
    for src, rel in (pair for pairs in files.values() for pair in pairs):  # one data file several models name is
        if sources.setdefault(rel, src.resolve()) != src.resolve():  # theirs (a generation part's), bundled once
            raise BadInput(f"two CPU model files would both be {rel} in the bundle: give the models' external "
                           "data files distinct names")
    return graphs, files


def _targets(spec: BundleSpec) -> dict[str, tuple[socs.Soc, Mapping[str, Sequence[Path]]]]:
    targets: dict[str, tuple[socs.Soc, Mapping[str, Sequence[Path]]]] = {}
    given: dict[str, str] = {}
    for name, graphs in spec.npu.items():
        soc = socs.find(name)
        if soc.model in targets:
            raise BadInput(f"SoC {soc.model} is given twice (as {given[soc.model]} and {name}); "
                           "a bundle has one target per SoC")
        given[soc.model] = name
        if spec.precision == Precision.FP16 and soc.fp16 is False:
            raise BadInput(f"{soc.model} ({soc.marketing_name or soc.dsp_arch}) has no fp16 on its HTP; "
                           "build it as w8a16 or leave it to the CPU fallback")
        missing = sorted(set(spec.cpu) - set(graphs) - set(spec.cpu_only))
        extra = sorted(set(graphs) - set(spec.cpu))
        if missing:
            raise BadInput(f"{soc.model} has no context binary for graph(s) {', '.join(missing)}")
        if extra:
            raise BadInput(f"{soc.model} has graph(s) {', '.join(extra)} with no CPU fallback model (--cpu)")
        for graph, files in graphs.items():
            for f in files:
                _need_file(f, f"context binary for {soc.model}:{graph}")
            if not any(Path(f).suffix == ".bin" for f in files):
                raise BadInput(f"{soc.model}:{graph} needs a QNN context binary (.bin)")
        targets[soc.model] = (soc, graphs)
    return targets


def _runtime_libs(spec: BundleSpec, archs: set[str], optional: set[str]) -> list[tuple[Path, JSON]]:
    """The Android and Hexagon libraries to ship: the common ones and only the Stub/Skel of the targets' archs, and
    of the `optional` archs (those phones may compile on the device) where the folder has them."""
    if spec.sdk_root is not None and spec.libs_dir is not None:
        raise BadInput("give either --qnn-sdk-root or --runtime-libs, not both")
    given = spec.sdk_root or spec.libs_dir
    if given is None:
        return []
    base = Path(given)
    if not base.is_dir():
        raise BadInput(f"{base} is not a folder")
    android = base / "lib" / "aarch64-android" if spec.sdk_root else base

    def where(arch: str) -> Path:  # the folder of an arch's Skel
        return base / "lib" / f"hexagon-{arch}" / "unsigned" if spec.sdk_root else base

    out: list[tuple[Path, JSON]] = []
    for name, role in ((BACKEND_LIB, "htp"), (SYSTEM_LIB, "system"), (PREPARE_LIB, "prepare")):
        path = android / name
        if path.is_file():
            out.append((path, {"role": role, "abi": "arm64-v8a"}))
        elif role != "prepare":
            raise BadInput(f"{name} not found in {android}; the HTP runtime needs it")
    for arch in sorted(archs | optional, key=HtpArch.parse):
        stub, skel = (folder / name
                      for folder, name in zip((android, where(arch)), qnn_libraries(arch)[2:], strict=True))
        if arch not in archs and not (stub.is_file() and skel.is_file()):
            continue
        for path in (stub, skel):
            if not path.is_file():
                raise BadInput(f"{path.name} not found in {path.parent}; targets with arch {arch} need it")
        out.append((stub, {"role": "stub", "abi": "arm64-v8a", "dsp_arch": arch}))
        out.append((skel, {"role": "skel", "abi": f"hexagon-{arch}", "dsp_arch": arch}))
    return out


def _npu_plan(model: str, graph_files: Mapping[str, Sequence[Path]], graphs: list[str]
              ) -> tuple[list[tuple[Path, str, bool]], dict[str, list[str]], dict[str, str]]:
    """One target's NPU files: (source, path in the bundle, read markers) for each; the graphs of each binary; the
    binary each EPContext wrapper loads. A binary given for several graphs is a shared context: it keeps its own
    name (compile --share names it after the share); any other is renamed <graph>.bin."""
    users: dict[Path, list[str]] = {}
    for g, files in graph_files.items():
        for f in files:
            if Path(f).suffix == ".bin":
                users.setdefault(Path(f), []).append(g)
    plan, bin_graphs, loads = [], {}, {}
    for f, gs in users.items():
        dest = f"{gs[0]}.bin" if len(gs) == 1 else f.name
        if len(gs) > 1 and f.stem in graphs:
            raise BadInput(f"{f} holds graphs {', '.join(gs)} but is named after graph {f.stem}: name a shared "
                           "context binary after its share (compile --share NAME=...)")
        plan.append((f, f"npu/{model}/{dest}", True))
        bin_graphs[f"npu/{model}/{dest}"] = gs
        for g in gs:
            loads[g] = dest
    for g, files in graph_files.items():
        plan += [(Path(f), f"npu/{model}/{g}_ctx.onnx", True) for f in files if Path(f).suffix != ".bin"]
    return plan, bin_graphs, loads


def _pointed_at_bin(ctx: Path, scratch: Path, rel: str, binary: str) -> Path:
    """The EPContext wrapper to copy: as given if it loads `binary` and phones' ONNX Runtime reads it, else a
    re-pointed copy in `scratch` (at the portable IR version: wrappers of earlier compiles are IR 14)."""
    if epcontext.context_refs(ctx) == [binary] and epcontext.ir_version(ctx) <= compat.portable_ir():
        return ctx
    fixed = scratch / rel.replace("/", "_")
    epcontext.retarget(ctx, fixed, binary)
    return fixed


def _graph_of(rel: str, bin_graphs: dict[str, list[str]]) -> dict[str, Any]:
    """An NPU artifact's graph, or graphs for a shared context binary (BundleFile's fields)."""
    return _owners(bin_graphs.get(rel) or [rel.rsplit("/", 1)[-1].removesuffix("_ctx.onnx")])


def _owners(graphs: Sequence[str]) -> dict[str, Any]:
    """BundleFile's fields for a file of one graph, or of several (a shared context binary or data file)."""
    return {"graph": graphs[0]} if len(graphs) == 1 else {"graphs": tuple(graphs)}


def _cpu_owners(cpu_files: Mapping[str, list[tuple[Path, str]]]) -> dict[str, list[str]]:
    """Each CPU file's path in the bundle -> the graphs whose models it is or holds weights of, in graph order."""
    owners: dict[str, list[str]] = {}
    for g, pairs in cpu_files.items():
        for _, rel in pairs:
            owners.setdefault(rel, []).append(g)
    return owners


def _check_name(value: str, what: str, key: str) -> None:
    import jsonschema

    sub = schema()["$defs"]["name"] if key == "name" else schema()["properties"]["version"]
    try:
        jsonschema.validate(value, sub)
    except jsonschema.ValidationError:
        raise BadInput(f"{what} '{value}' is not valid: use letters, digits, '.', '_' or '-' "
                       "(starting with a letter or digit, at most 64)") from None


def _qairt(spec: BundleSpec, facts: dict[str, FileFacts], marked: list[str]) -> Qairt:
    """The bundle's one QAIRT version: given, or read from the build strings the binaries embed."""
    found: dict[str, list[str]] = {}
    for path in marked:
        for b in facts[path].builds:
            found.setdefault(b, []).append(path)
    versions = {build_version(b) for b in found}
    if len(versions) > 1:
        detail = "; ".join(f"{b} in {', '.join(ps[:2])}" for b, ps in sorted(found.items()))
        raise BadInput(f"the inputs come from several QAIRT versions ({detail}); "
                       "compile and runtime libraries must come from one QAIRT version")
    if spec.qairt_version and versions and versions != {spec.qairt_version}:
        raise BadInput(f"--qairt {spec.qairt_version} contradicts the binaries, which say QAIRT "
                       f"{', '.join(sorted(found))}: drop --qairt")
    version = spec.qairt_version or (versions.pop() if versions else None)
    if version is None:
        raise BadInput("cannot tell the QAIRT version: no build string found in the context binaries or "
                       "libraries; pass --qairt")
    builds = sorted(found)
    return Qairt(version, builds[0] if len(builds) == 1 else None)


def _runtime_pin(spec: BundleSpec, qairt: Qairt, bundled: bool) -> tuple[str, str | None]:
    """(qairt.min_runtime: the oldest runtime that loads the binaries, the qnn-runtime release to pin: the one given,
    else the newest published release the load table says loads them; None with bundled libraries). A pin that
    cannot load them, or binaries no published runtime loads, are refused here in one line rather than as a verify
    problem of the finished bundle."""
    need = compat.min_runtime_for_qairt(qairt.version)
    if bundled:
        return need, None
    if spec.maven_version:
        why = compat.pin_problem(spec.maven_version, qairt.version)
        if why is not None:
            raise BadInput(f"--maven-runtime-version {spec.maven_version}: {why}")
        return need, spec.maven_version
    found = compat.maven_for(qairt.version)
    if not found:
        raise BadInput(compat.no_maven_runtime(qairt.version))
    return need, found[0]


def _copy(src: Path, dest: Path, markers: bool, expected: str | None, progress: ByteProgress | None,
          build: Path | None) -> FileFacts:
    """Copy one input into the staging folder (fileio.copy_verified: O_NOFOLLOW, a symlink or special file refused;
    inside the build folder, a symlinked folder on the way too) and return the facts of the bytes written: their
    sha256 and size, and the QNN markers read from them. A file with a compile record's sha256 must still have it."""
    scanner = Scanner() if markers else None
    beneath = build if build is not None and Path(src).is_relative_to(build) else None
    copied = copy_verified(src, dest, expect=Expected(expected, since="it was compiled",
                                                      advice="compile again, then bundle"),
                           beneath=beneath, what="bundle input", progress=progress, scan=scanner)
    facts = FileFacts(copied.sha256, copied.size)
    if scanner is not None:
        facts.builds, facts.context_targets = scanner.builds, scanner.targets
    return facts


def _check_apart(spec: BundleSpec, out_dir: Path, final: Path, archive_path: Path | None, sources: list[Path]
                 ) -> None:
    """-o must not be inside an input folder (the build folder, the SDK or runtime-libs folder: it would write
    into what it reads), and the bundle and archive names it replaces must hold no input (replacing would delete
    it): refused before anything is written."""
    folders = [("build folder", spec.build), ("QAIRT SDK folder", spec.sdk_root),
               ("runtime-libs folder", spec.libs_dir)]
    check_apart(out_dir, folders, holding=False)
    inputs = [*folders, *(("input", p) for p in sources), ("source model", spec.source_path)]
    for path in (final, archive_path):
        if path is not None:
            check_apart(path, inputs, option="the bundle" if path == final else "the archive")


@dataclass(frozen=True)
class _Plan:
    """Every file of the bundle and where it comes from, decided (and refused when wrong) before anything is
    written."""

    graphs: list[Graph]  # the graphs' signatures
    cpu_files: dict[str, list[tuple[Path, str]]]  # graph -> (source, path in the bundle), the model first
    targets: dict[str, tuple[socs.Soc, Mapping[str, Sequence[Path]]]]  # SoC model -> its graphs' files
    files: list[tuple[Path, str, bool]]  # (source, path in the bundle, read QNN markers?) of every file
    bin_graphs: dict[str, list[str]]  # bundle path of each context binary -> its graphs
    loads: dict[str, str]  # bundle path of each EPContext wrapper -> the binary's name it loads
    libs: dict[str, JSON]  # bundle path of each runtime library -> its role, ABI and arch
    records: dict[str, Path]  # name under records/ -> file
    source_path: Path | None
    tokenizer: str | None = None  # the loop's or the generation's tokenizer: its path in the bundle
    origins: dict[str, licences.FoundOrigin] = field(default_factory=dict)  # the Qualcomm files' origins, by id
    origin_of: dict[str, str] = field(default_factory=dict)  # bundle path of each Qualcomm file -> its origin id
    realign: set[str] = field(default_factory=set)  # bundle paths of the libraries --align-16k re-aligns


def build_bundle(spec: BundleSpec, out_dir: Path, *, force: bool = False, archive_fmt: str | None = None,
                 progress: ByteProgress | None = None, steps: Callable[[str], None] | None = None) -> BundleResult:
    """Write the bundle `spec` describes to OUT_DIR/NAME-VERSION (and its archive), verified before it is put in
    place; bad input is refused before anything is written. steps: told of each long step (the on-device
    compile's validation), in words."""
    out_dir = Path(out_dir)
    final, archive_path = _check_request(spec, out_dir, force, archive_fmt)
    plan = _plan(spec)
    _check_apart(spec, out_dir, final, archive_path, [src for src, _, _ in plan.files])

    archive_tmp: Path | None = None
    if archive_path is not None:
        remove_stale(archive_path)
    made = first_missing(out_dir)  # the folders -o makes: removed again when nothing is published
    try:
        with writing(final), staging_dir(final, force) as tmp:
            facts = _stage(spec, plan, tmp, progress)
            originals = _realign(plan, tmp, facts)
            qairt = _qairt(spec, facts, [rel for _, rel, m in plan.files if m and rel.endswith((".bin", "Skel.so"))])
            on_device = _on_device(spec, plan, qairt.version, tmp, facts, steps)
            parsed = _manifest(spec, plan, facts, qairt, on_device, originals)
            write_json(tmp / MANIFEST, parsed.to_json())
            contexts, missing = _verify_staged(parsed, plan, facts, tmp)
            if archive_path is not None and archive_fmt is not None:
                archive_tmp = partial_file(archive_path)
                archive.write_archive(tmp, archive_tmp, archive.ArchiveKind(archive_fmt), top=final.name)
        # The bundle is published (the commit point); its archive follows at once, with no safe point between.
        if archive_tmp is not None and archive_path is not None:
            with writing(archive_path):
                replace(archive_tmp, archive_path, 0o666)
    except BaseException:
        if archive_tmp is not None:
            archive_tmp.unlink(missing_ok=True)
        if not final.exists():
            remove_made(out_dir, made)
        raise
    rt = parsed.runtime
    return BundleResult(
        path=final, archive=archive_path, name=spec.name, version=spec.version,
        qairt=parsed.qairt.shown,
        targets=[f"{t.soc} ({t.dsp_arch})" for t in parsed.targets],
        runtime=f"bundled: {len(rt.libs)} libraries" if rt.bundled else f"external: {rt.maven} (the app must bring it)",
        files=len(facts), bytes=sum(f.size for f in facts.values()),
        warnings=_warnings(spec, parsed, facts, contexts, missing),
        on_device=list(parsed.on_device.graphs) if parsed.on_device else [],
        licences=[o.summary for o in parsed.licences.origins] if parsed.licences else [],
    )


def _check_request(spec: BundleSpec, out_dir: Path, force: bool, archive_fmt: str | None) -> tuple[Path, Path | None]:
    """The names and options checked, and the bundle's and archive's final paths."""
    _check_name(spec.name, "bundle name", "name")
    _check_name(spec.version, "bundle version", "version")
    if not spec.cpu:
        raise BadInput("a bundle needs a CPU fallback model for every graph (--cpu GRAPH=model.onnx)")
    if not spec.npu:
        raise BadInput("a bundle needs context binaries: --npu SOC:GRAPH=graph.bin, or --from-build build/")
    if spec.qairt_version and not re.fullmatch(r"\d+\.\d+\.\d+", spec.qairt_version):
        raise BadInput(f"--qairt {spec.qairt_version!r} is not a version X.Y.Z (e.g. 2.51.0)")
    if spec.performance_mode is not None and spec.performance_mode not in PERFORMANCE_MODES:
        raise BadInput(f"--performance-mode {spec.performance_mode!r}: use one of {', '.join(PERFORMANCE_MODES)}")
    if spec.maven_version and not re.fullmatch(r"\d+\.\d+\.\d+", spec.maven_version):
        raise BadInput(f"--maven-runtime-version {spec.maven_version!r} is not a version X.Y.Z (e.g. 2.51.0)")
    check_writable(out_dir / f"{spec.name}-{spec.version}")  # names, links, place: before any stat of -o
    if out_dir.exists() and not out_dir.is_dir():
        raise BadInput(f"-o {out_dir} is a file, not a folder")
    if archive_fmt is not None and archive_fmt not in choices(archive.ArchiveKind):
        raise BadInput(f"unknown archive format '{archive_fmt}'; use one of {', '.join(choices(archive.ArchiveKind))}")
    final = out_dir / f"{spec.name}-{spec.version}"
    archive_path = final.with_name(f"{final.name}.{archive_fmt}") if archive_fmt else None
    for p in (final, archive_path):
        if p is not None and p.exists() and not force:
            raise BadInput(f"{p} already exists; remove it or pass --force")
    if archive_path is not None and archive_path.is_dir():
        raise BadInput(f"{archive_path} is a folder: remove it or choose another -o")
    if archive_path is not None:
        check_writable(archive_path, "--archive")
    return final, archive_path


def _plan(spec: BundleSpec) -> _Plan:
    """Every input checked (files there and readable, graphs and targets consistent, bundle paths valid) and
    placed: (source, path in bundle, read markers?) for every file, which one parallel pass then copies and hashes."""
    graphs, cpu_files = _cpu_files(spec)
    targets = _targets(spec)
    libs = _runtime_libs(spec, {soc.dsp_arch for soc, _ in targets.values()},
                         ondevice.candidate_archs() if spec.on_device is not None else set())
    if spec.maven_version and libs:
        raise BadInput("--maven-runtime-version pins the external runtime: it cannot go with bundled libraries")
    source_path = _need_file(spec.source_path, "source model") if spec.source_path else None
    records = {name: _need_file(p, "record") for name, p in spec.records.items()}
    files: list[tuple[Path, str, bool]] = list({rel: (src, rel, False) for pairs in cpu_files.values()
                                                for src, rel in pairs}.values())
    bin_graphs: dict[str, list[str]] = {}
    loads: dict[str, str] = {}
    for model, (_, graph_files) in targets.items():
        npu, graphs_of, binary_of = _npu_plan(model, graph_files, list(spec.cpu))
        files += npu
        bin_graphs.update(graphs_of)
        loads.update({f"npu/{model}/{g}_ctx.onnx": b for g, b in binary_of.items()})
    lib_entries = {}
    realign = set()
    for path, meta in libs:
        rel = f"lib/{meta['abi']}/{path.name}"
        files.append((path, rel, True))
        lib_entries[rel] = meta
        if _needs_realign(path, spec.align_16k):
            realign.add(rel)
    files += [(p, f"records/{name}", False) for name, p in records.items()]
    looped = (spec.loop or {}).get("tokenizer")
    given = [(Path(looped["path"]), "loop")] if looped else []
    given += [(spec.generation_tokenizer, "generation")] if spec.generation_tokenizer else []
    if len(given) > 1:
        raise BadInput("a bundle holds one tokenizer: bundle the decode loop and the generation apart")
    tokenizer = None  # the loop's or the generation's tokenizer: its path in the bundle
    for found, folder in given:
        tokenizer = f"{folder}/{_need_file(found, f'the {folder} tokenizer').name}"
        files.append((found, tokenizer, False))
    origins, origin_of = _origins(spec, files, lib_entries)
    files += list(dict.fromkeys((src, rel, False) for o in origins.values() for src, rel in o.terms or ()))
    for src, rel, _ in files:
        why = path_problem(rel)
        if why is not None:  # verify would refuse the bundle: refused before anything is written
            raise BadInput(f"{src} would be bundled as {rel}: {why}; rename it")
    return _Plan(graphs, cpu_files, targets, files, bin_graphs, loads, lib_entries, records, source_path, tokenizer,
                 origins, origin_of, realign)


def _needs_realign(path: Path, allowed: bool) -> bool:
    """Whether a runtime library's PT_LOAD p_align must be raised to 16 KB (--align-16k, where its segments allow it);
    one below 16 KB is refused otherwise, before anything is written. Skels count as much as Android libraries:
    the app packs them in lib/arm64-v8a/ beside them (scaffold's jniLibs), where Play's 16 KB check reads every .so.
    A file that is no such library is left to verify's rules, which refuse it with their own message."""
    try:
        info = elf.read_elf(path)
    except (elf.NotElf, OSError):
        return False
    if info.machine not in (elf.EM_AARCH64, elf.EM_QDSP6) or not info.loads \
            or (info.min_load_align or 0) >= elf.MIN_ANDROID_ALIGN:
        return False
    told = (f"{path} has PT_LOAD alignment {info.min_load_align}, and Google Play and phones with 16 KB pages need "
            f"{elf.MIN_ANDROID_ALIGN}")
    relink = ("relink it with -Wl,-z,max-page-size=16384" if info.machine == elf.EM_AARCH64 else
              "use a Skel built 16 KB-aligned")
    if not allowed:
        raise BadInput(f"{told}: {relink}, or pass --align-16k to raise its p_align (done only where its segments "
                       "allow it, proven on the file); nothing was written")
    if (why := elf.realign_problem(info)) is not None:
        raise BadInput(f"{told}, and --align-16k cannot raise it: {why}; {relink}; nothing was written")
    return True


def _origins(spec: BundleSpec, files: list[tuple[Path, str, bool]], libs: Mapping[str, JSON]
             ) -> tuple[dict[str, licences.FoundOrigin], dict[str, str]]:
    """The origins of the bundle's Qualcomm files (by id), and each file's origin id by its path in the bundle: the
    runtime libraries' folder, and each context binary's compiler (its compile record's, else unknown)."""
    runtime = (licences.sdk(Path(spec.sdk_root)) if spec.sdk_root is not None else
               licences.runtime_folder(Path(spec.libs_dir)) if spec.libs_dir is not None else None)
    origins: dict[str, licences.FoundOrigin] = {}
    origin_of: dict[str, str] = {}
    for src, rel, _ in files:
        if rel in libs and runtime is not None:
            origin = runtime
        elif rel.startswith("npu/") and rel.endswith(".bin"):
            origin = licences.compiler(spec.compilers.get(src), runtime if spec.sdk_root is not None else None)
        else:
            continue
        origins.setdefault(origin.id, origin)
        origin_of[rel] = origin.id
    return origins, origin_of


def _realign(plan: _Plan, tmp: Path, facts: dict[str, FileFacts]) -> dict[str, str]:
    """--align-16k: each planned library's staged copy with its PT_LOAD p_align raised to 16 KB, proven on its bytes
    (elf.realigned: only p_align fields changed, the result read back), its facts updated; returns the sha256 each
    had as it came, by its path in the bundle."""
    originals = {}
    for rel in sorted(plan.realign):
        before = (tmp / rel).read_bytes()
        try:
            after = elf.realigned(before)
        except ValueError as e:  # NotElf is one
            raise BadInput(f"{rel}: cannot raise its p_align to {elf.MIN_ANDROID_ALIGN}: {e}; nothing was written"
                           ) from None
        (tmp / rel).write_bytes(after)
        originals[rel] = facts[rel].sha256
        facts[rel] = scan_file(tmp / rel, True)
    return originals


def _stage(spec: BundleSpec, plan: _Plan, tmp: Path, progress: ByteProgress | None) -> dict[str, FileFacts]:
    """Copy every file into the staging folder `tmp` in parallel (EPContext wrappers re-pointed at their binary's
    bundle name where needed); the facts of each file written, by its path in the bundle."""
    with tempfile.TemporaryDirectory() as scratch:
        for _, rel, _ in plan.files:
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        files = [(_pointed_at_bin(src, Path(scratch), rel, plan.loads[rel]), rel, m) if rel in plan.loads
                 else (src, rel, m) for src, rel, m in plan.files]
        with Pool(max_workers=os.cpu_count() or 1) as pool:
            results = list(pool.map(lambda item: _copy(item[0], tmp / item[1], item[2],
                                                       spec.expected_sha256.get(item[0]), progress, spec.build),
                                    files))
    return {rel: f for (_, rel, _), f in zip(files, results, strict=True)}


def _on_device(spec: BundleSpec, plan: _Plan, qairt: str, tmp: Path, facts: dict[str, FileFacts],
               steps: Callable[[str], None] | None) -> OnDevice | None:
    """manifest.json's on_device for --on-device-compile: each graph's CPU model compiled on the host for each arch,
    as the phone's QNN EP will, and compared with itself on the emulator; the records of every arch written into
    the staging folder `tmp` (and their facts added)."""
    if spec.on_device is None:
        return None
    request = spec.on_device
    options = ondevice.ep_options(spec.precision, request.vtcm_mb, request.optimization_mode)
    models = {g: src for g, [(src, _), *_] in plan.cpu_files.items() if g not in spec.cpu_only}
    checks = ondevice.validate(models, options, spec.precision, qairt, steps)
    for c in checks:
        rel = f"records/{c.graph}-on-device-{c.arch}.json"
        write_json(tmp / rel, OnDeviceRecord.of(c, options, qairt).to_json())
        facts[rel] = scan_file(tmp / rel, False)
    return OnDevice(request.budget_s, tuple(
        OnDeviceGraph(g, plan.cpu_files[g][0][1], options,
                      tuple(sorted((c.arch for c in checks if c.graph == g and c.passed), key=HtpArch.parse)))
        for g in models))


def _manifest(spec: BundleSpec, plan: _Plan, facts: dict[str, FileFacts], qairt: Qairt, on_device: OnDevice | None,
              originals: Mapping[str, str]) -> Manifest:
    """The manifest of the staged files."""

    def entry(rel: str, **kind: Any) -> BundleFile:
        return BundleFile(rel, facts[rel].sha256, facts[rel].size, **kind)

    min_runtime, pin = _runtime_pin(spec, qairt, bool(plan.libs))
    models = {pairs[0][1] for pairs in plan.cpu_files.values()}
    return Manifest(
        format=FORMAT, format_version=FORMAT_VERSION, name=spec.name, version=spec.version,
        created_by=f"qnndeploy {__version__}", qairt=replace_spec(qairt, min_runtime=min_runtime),
        source=Source(spec.source_model or spec.name,
                      scan_file(plan.source_path, False).sha256 if plan.source_path else None, spec.commit,
                      spec.license),
        graphs=tuple(plan.graphs),
        targets=tuple(
            Target(model, soc.soc_id, soc.dsp_arch, spec.precision,
                   tuple(entry(rel, **_graph_of(rel, plan.bin_graphs),
                               format=FileFormat.QNN_CONTEXT_BINARY if rel.endswith(".bin") else
                               FileFormat.ORT_EPCONTEXT)
                         for _, rel, _ in plan.files if rel.startswith(f"npu/{model}/")),
                   spec.validation.get(model), accepted_reasons(spec.validation.get(model)),
                   spec.accepted_on.get(model), spec.htp[model].manifest_json() if model in spec.htp else None)
            for model, (soc, _) in plan.targets.items()),
        cpu=tuple(entry(rel, **_owners(gs), format=FileFormat.ONNX if rel in models else FileFormat.ONNX_EXTERNAL_DATA)
                  for rel, gs in _cpu_owners(plan.cpu_files).items()),
        runtime=Runtime(RuntimeMode.BUNDLED, tuple(entry(rel, role=LibRole(meta["role"]), abi=meta["abi"],
                                                         dsp_arch=meta.get("dsp_arch"))
                                                   for rel, meta in plan.libs.items()))
        if plan.libs else Runtime(RuntimeMode.EXTERNAL, maven=f"{MAVEN_RUNTIME}:{pin}"),
        records=tuple([entry(f"records/{name}") for name in plan.records]
                      + [entry(rel) for rel in facts if rel.startswith("records/") and rel.removeprefix("records/")
                         not in plan.records]),
        htp_performance_mode=spec.performance_mode, pipeline_order=tuple(spec.pipeline), on_device=on_device,
        loop=BundleLoop(decode.described(spec.loop), entry(plan.tokenizer) if plan.tokenizer else None)
        if spec.loop else None,
        generation=replace_spec(spec.generation, tokenizer=entry(plan.tokenizer) if plan.tokenizer else None)
        if spec.generation else None,
        licences=_licences(plan, facts, qairt, pin, originals))


def _licences(plan: _Plan, facts: dict[str, FileFacts], qairt: Qairt, pin: str | None, originals: Mapping[str, str]
              ) -> Licences:
    """The manifest's licences: each origin with its terms files as copied (None: unknown), the Maven runtime the
    app fetches as one more origin, and each Qualcomm file with its origin (and its hash as it came, re-aligned)."""
    origins = list(plan.origins.values()) + ([licences.maven(f"{MAVEN_RUNTIME}:{pin}")] if pin else [])
    shipped = qairt.build or qairt.version  # the runtime libraries' QAIRT: the bundle's one
    origins = [replace_spec(o, qairt=shipped) if o.qairt is None and o.kind in (OriginKind.QAIRT_SDK,
                                                                                 OriginKind.RUNTIME_LIBS) else o
               for o in origins]
    return Licences(
        tuple(o.as_origin(tuple(BundleFile(rel, facts[rel].sha256, facts[rel].size) for _, rel in o.terms)
                          if o.terms else None) for o in origins),
        tuple(QualcommFile(rel, facts[rel].sha256, origin, originals.get(rel))
              for rel, origin in plan.origin_of.items()))


def _verify_staged(manifest: Manifest, plan: _Plan, facts: dict[str, FileFacts], tmp: Path
                   ) -> tuple[Contexts, str | None]:
    """Check the staged bundle by bundle verify's rules (its binaries read by libQnnSystem when it is here), and
    refuse it in one line when it would not verify; the binaries' metadata and why some were not read."""
    contexts, missing = read_contexts(tmp, {rel: facts[rel].sha256 for rel in plan.bin_graphs if rel in facts})
    problems = check_manifest(manifest, facts, set(facts), tmp, contexts=contexts)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise BadInput(f"the bundle would not verify: {problems[0].path}: {problems[0].message}{more}")
    return contexts, missing


def _warnings(spec: BundleSpec, manifest: Manifest, facts: dict[str, FileFacts], contexts: Contexts,
              missing: str | None) -> list[Problem]:
    """What verify warns of in the written bundle, and each graph shipped without a passed validation."""
    warnings = check_warnings(manifest, facts, contexts)
    if missing:
        warnings.append(Problem(MANIFEST, f"context binaries checked by their markers only: {missing}"))
    for soc, v in spec.validation.items():
        for graph, g in v.get("graphs", {}).items():
            if g["passed"] is not True and accepted_reason(g) is None:  # an accepted one: check_warnings says it
                warnings.append(Problem(f"records/{graph}-{soc}-validation.json", g.get("note") or
                                        "FAILED validation on the host HTP emulator: the NPU output differs from "
                                        "the CPU model's beyond the thresholds"))
    return warnings

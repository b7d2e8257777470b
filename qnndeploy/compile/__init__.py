"""Compile ONNX graphs into QNN context binaries: one job per (graph, SoC), cached, run in parallel, each recorded.

The build folder is the contract `bundle` reads:
  <out>/<graph>/<SoC>/<graph>.bin       QNN context binary
  <out>/<graph>/<SoC>/<graph>_ctx.onnx  ORT EPContext wrapper naming <graph>.bin (ort backend)
  <out>/<graph>/<SoC>/compile.json      compile record (schemas/compile-record.schema.json)
  <out>/logs/<graph>-<SoC>.log          the tools' full log
A job folder is replaced whole (staged, then put in place in one step), so it never mixes two compiles; its log is
written under a staging name beside logs/<graph>-<SoC>.log and renamed into place right after the job folder, so a
log never describes another compile than its folder's. The tools die with the CLI (child.dies_with_parent), and a
SIGTERM stops the compile at the main loop's next poll.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from qnndeploy import __version__
from qnndeploy.base import child, fileio, interrupt
from qnndeploy.base import socs as catalog
from qnndeploy.base.errors import BadInput, MissingTool, QnnDeployError
from qnndeploy.base.fileio import JSON, sha256_file, staging_dir, write_json
from qnndeploy.base.htparch import HtpArch
from qnndeploy.base.kinds import BackendName, Precision, choices
from qnndeploy.base.names import CONTEXT_BINARY, EPCONTEXT, graph_name
from qnndeploy.base.pool import Pool
from qnndeploy.base.socs import Soc
from qnndeploy.compile import cache, logs
from qnndeploy.compile.aihub import AihubBackend
from qnndeploy.compile.jobs import Backend, Compiled, CompileError, CompileJob, Member, Tools, with_input_paths
from qnndeploy.compile.ort import OrtBackend
from qnndeploy.compile.qairt import QairtBackend
from qnndeploy.formats.generation import plans_of
from qnndeploy.formats.manifest import graph_signature
from qnndeploy.formats.records import (
    RECORD_FILE,
    HtpSettings,
    JobFile,
    JobInput,
    JobProgress,
    JobRecord,
    JobStarted,
    RecordMember,
    RecordStatus,
    read_record,
    splits_of,
    whole_splits,
)
from qnndeploy.model import decode
from qnndeploy.model.media import Preprocess
from qnndeploy.model.onnxio import external_locations, load_model, model_inputs, require_model_file
from qnndeploy.model.quantize import Encoding, QuantizedLayer, worst
from qnndeploy.model.samples import fingerprint, for_graph, load_samples, sample_source, write_samples
from qnndeploy.qnn import contextcheck, htp, qnnsystem
from qnndeploy.qnn import loop as loop_run
from qnndeploy.qnn.markers import build_version, scan_file
from qnndeploy.qnn.qnnsystem import ContextInfo

# .quantized.partial-PID-*: the QDQ graphs a quantized compile's jobs share, removed when it ends
QUANTIZED = "quantized"
WORST_LAYERS = 5  # the quantized weights a compile's output names per graph, those that lose the most
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # the bundle manifest's name rule


class JobStatus(StrEnum):
    """A job's outcome: compiled now, its outputs already there or restored from the cache, or failed."""

    OK = "ok"
    CACHED = "cached"
    FAILED = "failed"


KV_BITS = 16  # a quantized build's KV cache: the activations' bits unless --kv-bits says 8


@dataclass(frozen=True)
class CompileOptions:
    """How compile_models compiles, as the command line's options say (same defaults)."""

    backend: BackendName | None = None  # None: ort where onnxruntime-qnn is installed or no SDK is given, else qairt
    precision: Precision = Precision.FP16
    calib: Path | None = None  # w8a16, w4a16: a samples folder as validate's --inputs
    preprocess: str | Path | None = None  # how calib's audio or image files become inputs
    loop: str | None = None  # an encoder-decoder's decode loop (validate's --loop): calib holds the encoder's samples
    jobs: int | None = None  # at once; None: one per CPU core (aihub: all)
    use_cache: bool = True
    cache_dir: Path | None = None  # None: cache.default_cache_dir()
    qnn_sdk_root: Path | None = None  # the QAIRT SDK for the qairt backend; None: $QNN_SDK_ROOT
    shares: dict[str, list[str]] = field(default_factory=dict)  # shared context name -> its graphs
    htp: HtpSettings = field(default_factory=HtpSettings)
    kv_bits: int = KV_BITS  # 8: a generation's KV cache in uint8 in the graphs' inputs and outputs (w8a16, w4a16)


@dataclass
class JobResult:
    graph: str
    soc: str
    status: JobStatus
    folder: Path
    log: Path
    duration_s: float
    outputs: tuple[JobFile, ...]  # what the job folder holds, as its compile.json lists it
    warnings: list[str]
    findings: list[logs.LogFinding]
    error: str | None = None
    note: str | None = None  # for a cache hit: "up to date" or "restored from the cache"
    members: list[str] = field(default_factory=list)  # the graphs of a shared context
    shared: JSON | None = None  # {"shared_bytes", "separate_bytes"}: the shared binary against one per graph
    # a quantized build: per graph, the WORST_LAYERS weights whose error is largest (the record has them all)
    worst_layers: dict[str, list[QuantizedLayer]] = field(default_factory=dict)


@dataclass
class CompileSummary:
    out: Path
    backend: BackendName
    precision: Precision
    qairt_version: str
    duration_s: float
    jobs: list[JobResult]
    ok: bool

    @property
    def failures(self) -> list[JobResult]:
        return [j for j in self.jobs if j.status == JobStatus.FAILED]




def models_from_args(args: list[str]) -> dict[str, Path]:
    """`path.onnx` (graph named after the file, formats.graph_name: det.npu.onnx is det) or `name=path.onnx`, as
    the command line takes them.

    NAME=PATH only when NAME could be a graph name (no '/') and the whole argument is not itself a file:
    `dir/a=b/m.onnx` and an existing `a=b.onnx` are paths.
    """
    models: dict[str, Path] = {}
    for arg in args:
        name, sep, path = arg.partition("=")
        if not sep or "/" in name or (Path(arg).is_file() and not Path(path).is_file()):
            name, path = graph_name(arg), arg
        if name in models:
            raise BadInput(f"two models would both be graph '{name}': name them, e.g. {name}2=PATH.onnx")
        models[name] = Path(path)
    return models


def get_backend(name: str | None, qnn_sdk_root: Path | None = None) -> Backend:
    """`ort` where onnxruntime-qnn is installed, else `qairt` when an SDK is given; None picks that way."""

    if name is None:
        name = BackendName.ORT if htp.available() or not (qnn_sdk_root or os.environ.get("QNN_SDK_ROOT")) \
            else BackendName.QAIRT
    if name == BackendName.ORT:
        return OrtBackend()
    if name == BackendName.QAIRT:
        return QairtBackend(qnn_sdk_root)
    if name == BackendName.AIHUB:
        return AihubBackend()
    raise BadInput(f"unknown backend '{name}': use one of {', '.join(choices(BackendName))}")


def shares_from_args(args: list[str]) -> dict[str, list[str]]:
    """`NAME=g1,g2,...` as --share takes it."""
    shares: dict[str, list[str]] = {}
    for arg in args:
        name, sep, members = arg.partition("=")
        graphs = [g.strip() for g in members.split(",") if g.strip()]
        if not sep or not name:
            raise BadInput(f"--share {arg}: write NAME=GRAPH1,GRAPH2 (e.g. --share llm=prefill,decode)")
        if name in shares:
            raise BadInput(f"--share {name} is given twice")
        shares[name] = graphs
    return shares


@dataclass(frozen=True)
class _Checked:
    """compile_models' request once every option is checked: what the jobs are planned from."""

    graphs: dict[str, Path]
    targets: list[Soc]
    out: Path
    backend: Backend
    precision: Precision
    shares: dict[str, list[str]]
    htp: HtpSettings
    store: Path | None
    jobs: int | None


def compile_models(models: dict[str, Path], socs: list[str], out: Path, options: CompileOptions = CompileOptions(),
                   progress: JobProgress[JobResult] | None = None) -> CompileSummary:
    """Compile every model for every SoC into `out`; the graphs of each share (name -> graphs) into one context
    binary with shared weights. Bad input raises before anything is written; a failing job is reported in the
    summary and does not stop the others."""
    start = time.monotonic()
    o = options
    if not models:
        raise BadInput("no model given: pass one or more MODEL.onnx files")
    if not socs:
        raise BadInput("no SoC given: pass --soc, e.g. --soc SM8750 (qnndeploy socs lists them)")
    if o.precision not in choices(Precision):
        raise BadInput(f"unknown precision '{o.precision}': use one of {', '.join(choices(Precision))}")
    precision, calib, jobs = Precision(o.precision), o.calib, o.jobs
    if precision.quantized and calib is None:
        raise BadInput(f"{precision} needs --calib DIR with real input samples (.npz, .npy, or .wav/.png/.jpg with "
                       "--preprocess) to calibrate the 16-bit activations; random data would give wrong ranges")
    if precision == Precision.FP16 and calib is not None:
        raise BadInput("--calib applies to --precision w8a16 or w4a16 only; fp16 needs no calibration")
    if o.loop is not None and calib is None:
        raise BadInput("--loop calibrates a decode loop's graphs on what the loop feeds them: give it with --precision "
                       "w8a16 or w4a16 and --calib DIR (the encoder's samples, as validate --loop reads --inputs)")
    prep = sample_source(calib, None, o.preprocess, "--calib")
    if jobs is not None and jobs < 1:
        raise BadInput("-j must be 1 or more")
    targets = _targets(socs)
    graphs = _graphs(models)
    looped = decode.parse(o.loop, graphs, _splits(graphs)) if o.loop is not None else None
    out = Path(out).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise BadInput(f"-o {out} is a file; give a folder for the build")
    _check_w4(precision, o.backend)  # before the backend starts: AI Hub's asks for its client
    be = get_backend(o.backend, o.qnn_sdk_root)
    _check_w4(precision, be.name)
    shares = _check_shares(o.shares, graphs, targets, be.name)
    htp = _check_htp(o.htp, targets)
    _check_keep(htp, precision, be.name, graphs)
    kv = _kv_pairs(o.kv_bits, precision, be.name, graphs, looped)
    for soc in targets:  # what the catalog knows this QAIRT cannot build, refused before any job runs
        refused = catalog.refusal(soc, be.qairt_version, precision)
        if refused:
            raise BadInput(f"{refused}: drop --soc {soc.model}; its phones keep the CPU fallback")
    store = Path(o.cache_dir or cache.default_cache_dir()).expanduser() if o.use_cache else None
    if store is not None and store.exists() and not store.is_dir():
        raise BadInput(f"the compile cache {store} is a file, not a folder: give a folder with --cache-dir "
                       "(or $QNNDEPLOY_CACHE_DIR), or pass --no-cache")

    checked = _Checked(graphs, targets, out, be, precision, shares, htp, store, jobs)
    if calib is None:
        return _compile(checked, progress, start, {})
    with tempfile.TemporaryDirectory(prefix="qnndeploy-calib-") as made:  # samples made here, while jobs run
        calibration = {} if looped is None else _loop_calibration(looped, str(o.loop), graphs, calib, prep,
                                                                   Path(made), progress)
        calibration.update({g: _calibration(calib, g, model, prep, Path(made)) for g, model in graphs.items()
                            if g not in calibration})
        if kv:
            checked = dataclasses.replace(checked, htp=dataclasses.replace(
                htp, kv8=_kv_encodings(kv, graphs, calibration)))
        return _compile(checked, progress, start, calibration)


def _compile(c: _Checked, progress: JobProgress[JobResult] | None, start: float,
             calibration: dict[str, tuple[Path, JSON]]) -> CompileSummary:
    """Plan the jobs and run them; `calibration`: per graph, the folder the backends read and its record."""
    plan = []
    digests = {graph: sha256_file(model) for graph, model in c.graphs.items()}
    calibs = {graph: folder for graph, (folder, _) in calibration.items()}
    cals = {graph: record for graph, (_, record) in calibration.items()}
    shared = {g for members in c.shares.values() for g in members}
    groups = {**c.shares, **{g: [g] for g in c.graphs if g not in shared}}
    for name, group in groups.items():
        members = tuple(Member(g, c.graphs[g], digests[g], calibs.get(g), cals.get(g))
                        for g in group) if name in c.shares else ()
        digest = hashlib.sha256("".join(f"{m.graph}\0{m.model_sha256}\0{(cals.get(m.graph) or {}).get('sha256')}\n"
                                        for m in members).encode()).hexdigest() if members else digests[name]
        for soc in c.targets:
            options = {**c.backend.options(soc, c.precision, c.htp),
                       "calibration": None if members else cals.get(name)}
            if members:
                options["share_ep_contexts"] = True
            key = cache.cache_key(name, digest, soc, c.backend, c.precision, options)
            plan.append(CompileJob(name, c.graphs[group[0]], digest, soc, c.precision, calibs.get(group[0]), options,
                                   key, c.out / name / soc.model, c.out / "logs" / f"{name}-{soc.model}.log", members))

    try:
        (c.out / "logs").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"cannot create {c.out / 'logs'}: {e.strerror}") from None
    for job in plan:
        _remove_leftovers(job)
    fileio.remove_stale(c.out / QUANTIZED)
    if not c.precision.quantized:
        return _run_plan(c, plan, progress, start)
    try:
        quantized = Path(tempfile.mkdtemp(prefix=fileio.partial_prefix(c.out / QUANTIZED), dir=c.out))
    except OSError as e:
        raise BadInput(f"cannot write in {c.out}: {e.strerror}") from None
    try:
        return _run_plan(c, [dataclasses.replace(j, quantized=quantized) for j in plan], progress, start)
    finally:
        shutil.rmtree(quantized, ignore_errors=True)


def _run_plan(c: _Checked, plan: list[CompileJob], progress: JobProgress[JobResult] | None, start: float
              ) -> CompileSummary:
    """Run the jobs, a SoC's after another's, so that the jobs running at once are of different graphs and the
    later SoCs' jobs reuse the quantized graphs; the results in the plan's order."""
    results: list[JobResult] = []
    if progress:
        progress(0, len(plan), None)
    tools = Tools()
    # Remote jobs wait on AI Hub, not on this machine's cores: all of them are submitted at once.
    workers = c.jobs or (len(plan) if c.backend.name == BackendName.AIHUB else os.cpu_count() or 1)
    pool = Pool(max_workers=max(1, workers))
    try:
        def run(job: CompileJob) -> JobResult:
            if progress:
                progress(len(results), len(plan), JobStarted(job.graph, job.soc.model))
            return _run_job(job, c.backend, c.store, c.out, tools)

        soc_order = [soc.model for soc in c.targets]
        pending = {pool.submit(run, job) for job in sorted(plan, key=lambda j: soc_order.index(j.soc.model))}
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for fut in done:
                results.append(fut.result())
                if progress:
                    progress(len(results), len(plan), results[-1])
            interrupt.check()  # a safe point: a SIGTERM (the handler only sets the flag) stops the compile here
    except BaseException:  # Ctrl-C, SIGTERM (its flag, raised as KeyboardInterrupt at a safe point), or a bug
        _cancel(pool, tools)
        raise
    pool.shutdown()
    order = {(j.graph, j.soc.model): i for i, j in enumerate(plan)}
    results.sort(key=lambda r: order[(r.graph, r.soc)])
    return CompileSummary(c.out, c.backend.name, c.precision, c.backend.qairt_version,
                          round(time.monotonic() - start, 3), results,
                          all(r.status != JobStatus.FAILED for r in results))


def _cancel(pool: Pool, tools: Tools) -> None:
    """Stop the running tools, drop the queued jobs and wait until every job thread has removed its partial
    folder, even through more Ctrl-C presses: after this, nothing writes into the build."""
    while True:
        try:
            tools.stop()
            pool.shutdown(wait=True, cancel_futures=True)
            return
        except KeyboardInterrupt:
            continue


def _remove_leftovers(job: CompileJob) -> None:
    """Remove what an earlier, killed compile of this job left: its staging and replaced folders
    (.<SoC>.partial-PID-*, .<SoC>.old-PID) and its staged log, those whose process is gone."""
    fileio.remove_stale(job.folder)
    fileio.remove_stale(job.log)


# --- planning --------------------------------------------------------------------------------------

def _targets(names: list[str]) -> list[Soc]:
    targets: list[Soc] = []
    for name in names:
        soc = catalog.find(name)
        if soc not in targets:
            targets.append(soc)
    return targets


def _check_w4(precision: Precision, backend: BackendName | None) -> None:
    if precision == Precision.W4A16 and backend not in (None, BackendName.ORT):
        raise BadInput(f"--precision w4a16 needs the ort backend (onnxruntime-qnn's block-quantized int4 weights); "
                       f"the {backend} backend builds fp16 and w8a16 here")


def _check_keep(htp: HtpSettings, precision: Precision, backend: BackendName, graphs: dict[str, Path]) -> None:
    if htp.keep_int8 and precision != Precision.W4A16:
        raise BadInput("--keep-int8 applies to --precision w4a16 (w8a16 has 8-bit weights everywhere)")
    if not htp.keep_fp16 and not htp.keep_int8:
        return
    if htp.keep_fp16 and not precision.quantized:
        raise BadInput("--keep-fp16 applies to --precision w8a16 or w4a16 (fp16 already runs every node in fp16)")
    if htp.keep_fp16 and backend != BackendName.ORT:
        raise BadInput("--keep-fp16 needs the ort backend; with qairt, give qnn-onnx-converter a "
                       "--quantization_overrides file with float encodings for those tensors")
    names = {n.name for path in graphs.values() for n in load_model(path, weights=False).graph.node}
    for option, asked in (("--keep-fp16", htp.keep_fp16), ("--keep-int8", htp.keep_int8)):
        unknown = [n for n in asked if n not in names]
        if unknown:
            raise BadInput(f"{option} {', '.join(unknown)}: no node of that name in the models (node names, "
                           "as qnndeploy diagnose prints them)")


def _kv_pairs(bits: int, precision: Precision, backend: BackendName, graphs: dict[str, Path],
              looped: decode.Loop | None) -> list[tuple[str, str]]:
    """--kv-bits 8: each cache input and the output whose new entries go into it, as the generation plan beside the
    graphs (prepare --generate) names them; [] for --kv-bits 16."""
    if bits == KV_BITS:
        return []
    if bits != 8:
        raise BadInput(f"--kv-bits {bits}: use 8, or {KV_BITS} (the activations' bits, the default)")
    if not precision.quantized or backend != BackendName.ORT:
        raise BadInput("--kv-bits 8 applies to --precision w8a16 or w4a16 with the ort backend (fp16 keeps the cache "
                       "in fp16)")
    if looped is not None:
        raise BadInput("--kv-bits 8 takes the graphs of prepare --generate, whose app loop (the glue's generation "
                       "session) keeps uint8 caches; an encoder-decoder's --loop keeps its cache in float")
    plans = {plan.path: plan for plan in plans_of(graphs).values()}.values()
    pairs = [pair for plan in plans for k_in, k_out, v_in, v_out in plan.kv for pair in ((k_in, k_out), (v_in, v_out))]
    if not pairs:
        raise BadInput("--kv-bits 8: no graph has a KV cache qnndeploy knows: compile the graphs prepare --generate "
                       "wrote (its plan beside them)")
    return pairs


def _kv_encodings(pairs: list[tuple[str, str]], graphs: dict[str, Path], calibration: dict[str, tuple[Path, JSON]]
                  ) -> tuple[tuple[str, float, int], ...]:
    """One uint8 encoding per cache, for its input and the output that fills it in every graph (the prompt's and the
    decode's), so that the app appends the new entries' bytes as they come: the range of what the calibration
    samples hold in that cache (the CPU's loop filled it)."""
    import numpy as np

    ranges: dict[str, tuple[float, float]] = {}
    pasts = {past for past, _ in pairs}
    for graph, model in graphs.items():
        specs = [t for t in model_inputs(model) if t.name in pasts]
        for sample in load_samples(calibration[graph][0], specs) if specs else ():
            for name, values in sample.items():
                low, high = ranges.get(name, (0.0, 0.0))
                ranges[name] = (min(low, float(np.min(values))), max(high, float(np.max(values))))
    found = []
    for past, new in pairs:  # the caches of the graphs compiled (a part's graphs may be compiled alone)
        if past in ranges:
            e = Encoding.spanning(*ranges[past])
            found += [(past, e.scale, e.zero_point), (new, e.scale, e.zero_point)]
    return tuple(found)


def _check_htp(htp: HtpSettings, targets: list[Soc]) -> HtpSettings:
    if htp.optimization_mode is not None and htp.optimization_mode not in (1, 2, 3):
        raise BadInput(f"--optimization-mode {htp.optimization_mode}: use 1, 2 or 3 (3: slowest compile, "
                       "fastest graph)")
    if htp.vtcm_mb is not None:
        if htp.vtcm_mb < 1:
            raise BadInput(f"--vtcm-mb {htp.vtcm_mb}: give 1 or more MB")
        small = [f"{soc.model} ({soc.vtcm_mb} MB)" for soc in targets
                 if soc.vtcm_mb is not None and htp.vtcm_mb > soc.vtcm_mb]
        if small:
            raise BadInput(f"--vtcm-mb {htp.vtcm_mb} is more VTCM than {', '.join(small)} has: a graph that "
                           "needs it cannot run there; give at most the smallest target's")
    return htp


SHARE_MIN_ARCH = HtpArch(73)  # ONNX Runtime's QNN EP shares weights across graphs on v73 and newer HTPs


def _check_shares(shares: dict[str, list[str]], graphs: dict[str, Path], targets: list[Soc],
                  backend: BackendName) -> dict[str, list[str]]:
    if not shares:
        return shares
    if backend != BackendName.ORT:
        raise BadInput("--share needs the ort backend (onnxruntime-qnn's ep.share_ep_contexts)")
    seen: dict[str, str] = {}
    for name, members in shares.items():
        if not NAME_RE.match(name):
            raise BadInput(f"--share name '{name}' must be letters, digits, '.', '_' or '-' (at most 64)")
        if name in graphs:
            raise BadInput(f"--share name '{name}' is also a graph's name: give the shared context its own")
        if len(set(members)) < 2:
            raise BadInput(f"--share {name} needs two or more different graphs, e.g. {name}=prefill,decode")
        for g in members:
            if g not in graphs:
                raise BadInput(f"--share {name}: no model is graph '{g}' (graphs: {', '.join(graphs)})")
            if g in seen:
                raise BadInput(f"graph '{g}' is in --share {seen[g]} and --share {name}: one share per graph")
            seen[g] = name
    old = [soc.model for soc in targets if soc.htp_arch < SHARE_MIN_ARCH]
    if old:
        raise BadInput(f"--share needs an HTP of {SHARE_MIN_ARCH} or newer; {', '.join(old)} is older: "
                       "compile those SoCs without --share")
    return {name: list(dict.fromkeys(members)) for name, members in shares.items()}


def _graphs(models: dict[str, Path]) -> dict[str, Path]:
    """Every model must be a readable ONNX file with static inputs: an empty, damaged or wrong file is bad input,
    refused before any job starts."""

    graphs: dict[str, Path] = {}
    for name, given in models.items():
        if not NAME_RE.match(name):
            raise BadInput(f"graph name '{name}' must be letters, digits, '.', '_' or '-' (at most 64), "
                           f"starting with a letter or digit: pass NAME=PATH.onnx")
        path = Path(given).expanduser().resolve()
        require_model_file(path)
        if path.suffix.lower() != ".onnx":
            raise BadInput(f"{path}: expected an .onnx model")
        for spec in model_inputs(path):
            if spec.dynamic:
                raise BadInput(f"{name}: input '{spec.name}' has dynamic size {spec.shape_text()}; the NPU runs "
                               f"fixed sizes only: fix it first (qnndeploy prepare)")
        graphs[name] = path
    return graphs


def _calibration(calib: Path, graph: str, model: Path, prep: Preprocess | None, made: Path) -> tuple[Path, JSON]:
    """One graph's calibration samples, read now as validate reads --inputs (bad input fails before any job starts)
    and fingerprinted: (the folder the backends read, the record's entry). NumPy samples are read where they are;
    audio and image files are preprocessed once, here, into .npz files under `made`."""

    feeds, used = for_graph(model, graph, Path(calib).expanduser().resolve(), preprocess=prep)
    folder = Path(used["folder"])
    # the same files through another preprocessing are other samples
    preprocessed = json.dumps(used["preprocess"], sort_keys=True) if "preprocess" in used else ""
    record: JSON = {"path": str(folder), "files": len(used["files"]), "samples": len(feeds)}
    digest = fingerprint(folder, used["files"], preprocessed)
    if "preprocess" in used:
        record["preprocess"] = used["preprocess"]
        folder = made / graph
        folder.mkdir()
        write_samples(folder, feeds)
    return folder, {**record, "sha256": digest}


def _splits(graphs: dict[str, Path]) -> dict[str, list[str]]:
    """Each split (prepare --split-size) whose parts are all among `graphs` (records.whole_splits)."""
    shas = {path: sha256_file(path) for path in graphs.values()}
    return whole_splits({g: (split, part) for split in splits_of(shas) for g, path in graphs.items()
                         if (part := split.part_of(path, shas[path])) is not None})


def _loop_calibration(loop: decode.Loop, given: str, graphs: dict[str, Path], calib: Path, prep: Preprocess | None,
                      made: Path, progress: JobProgress[JobResult] | None) -> dict[str, tuple[Path, JSON]]:
    """Each loop graph's calibration samples: what it reads in the loop run on the CPU over the encoder's samples
    (`calib`), written under `made`, fingerprinted by those samples and the loop."""
    first = loop.encoders[0]
    features, used = for_graph(graphs[first], first, Path(calib).expanduser().resolve(), preprocess=prep)
    if progress is not None:
        progress(0, 0, JobStarted(f"--loop {given}", "on the CPU (the calibration samples)"))
    counts = loop_run.record_inputs(loop, graphs, features, made)
    child.trim_heap()  # the loop's sessions are gone; the compile workers get their memory
    how = json.dumps(used["preprocess"], sort_keys=True) if "preprocess" in used else ""
    digest = fingerprint(Path(used["folder"]), used["files"], f"{how}\0--loop {given}")
    return {graph: (made / graph, {"path": used["folder"], "files": len(used["files"]), "samples": count,
                                   "loop": given, "sha256": digest}) for graph, count in counts.items()}


# --- one job ---------------------------------------------------------------------------------------

def _run_job(job: CompileJob, be: Backend, store: Path | None, out: Path, tools: Tools) -> JobResult:
    start = time.monotonic()
    if store is not None:
        current = _up_to_date(job)
        hit = current or cache.restore(job, store)
        if hit is not None:
            cache.add(job, store)  # a folder made with --no-cache still fills the cache
            note = "up to date" if current else "restored from the cache"
            return _result(job, hit, JobStatus.CACHED, logs.parse_file(job.log), time.monotonic() - start, note)
    staged_log = fileio.partial_file(job.log)  # published right after the job folder: they always agree
    try:
        with staged_log.open("w") as log:
            log.write(f"qnndeploy {__version__}: compile {job.graph} for {job.soc.model} ({job.soc.dsp_arch}), "
                      f"backend {be.name}, QAIRT {be.qairt_version}, {job.precision}\n")
            log.flush()
            with staging_dir(job.folder, force=True) as work:
                try:
                    compiled = be.compile(dataclasses.replace(job, log=staged_log), work, log, tools)
                    log.flush()
                    findings = logs.parse_file(staged_log)
                    record = _ok_record(job, be, work, compiled, findings, time.monotonic() - start, out)
                except (CompileError, QnnDeployError, OSError) as e:  # this job failed; the others go on
                    error = failure(e, work, job.model)
                    log.write(f"\nqnndeploy: FAILED: {error}\n")
                    log.flush()
                    for p in work.iterdir():
                        shutil.rmtree(p) if p.is_dir() else p.unlink()
                    findings = logs.parse_file(staged_log)
                    record = _failed_record(job, be, error, findings, time.monotonic() - start, out)
                except BaseException:
                    log.write("\nqnndeploy: interrupted: this job's outputs were discarded\n")
                    raise
                write_json(work / RECORD_FILE, record.to_json())
                log.flush()
        fileio.replace(staged_log, job.log, 0o666)
    except BaseException:
        if not job.folder.exists():  # no earlier compile's folder it could contradict: keep the log saying why
            with contextlib.suppress(OSError):
                fileio.replace(staged_log, job.log, 0o666)
        staged_log.unlink(missing_ok=True)
        raise
    if record.status == RecordStatus.OK and store is not None:
        cache.add(job, store)
    return _result(job, record, JobStatus(record.status), findings, time.monotonic() - start)


def _up_to_date(job: CompileJob) -> JobRecord | None:
    """The job folder's record when its outputs are already those of this job (same cache key, files intact)."""
    current = read_record(job.folder / RECORD_FILE)
    if not (current and current.status == RecordStatus.OK and current.cache_key == job.cache_key
            and cache.outputs_intact(job.folder, current)):
        return None
    moved = with_input_paths(job, current)
    if moved != current:
        write_json(job.folder / RECORD_FILE, moved.to_json())
    if not job.log.is_file():  # a hit still leaves a log
        job.log.write_text(f"qnndeploy: cache hit {job.cache_key}: {job.folder} is up to date\n")
    return moved


def _result(job: CompileJob, record: JobRecord, status: JobStatus, findings: list[logs.LogFinding], seconds: float,
            note: str | None = None) -> JobResult:
    return JobResult(job.graph, job.soc.model, status, job.folder, job.log, round(seconds, 3), record.outputs,
                     list(record.warnings), findings, record.error, note, [m.graph for m in job.members],
                     record.shared, {g: worst(found, WORST_LAYERS) for g, found in record.layers.items()})


def _record(job: CompileJob, be: Backend, out: Path, seconds: float, warnings: list[str],
            error: str | None = None) -> JobRecord:
    """The record of a job that failed with `error`, or (None) the start of one that compiled, its outputs yet to
    be added."""
    members = tuple(RecordMember(m.graph, JobInput(str(m.model), m.model_sha256), m.calibration_record)
                    for m in job.members)
    return JobRecord(
        job.graph, job.soc.model, job.soc.soc_id, job.soc.dsp_arch, be.name, be.qairt_version, None, job.precision,
        job.options, {"qnndeploy": __version__, **be.identity()},
        None if members else JobInput(str(job.model), job.model_sha256), members, (),
        job.log.relative_to(out).as_posix(), datetime.now(UTC).isoformat(timespec="seconds"), round(seconds, 3),
        tuple(warnings), RecordStatus.OK if error is None else RecordStatus.FAILED, error, job.cache_key)


def _ok_record(job: CompileJob, be: Backend, work: Path, compiled: Compiled, findings: list[logs.LogFinding],
               seconds: float, out: Path) -> JobRecord:
    warnings = [str(f) for f in findings if f.kind != logs.ERROR] + compiled.warnings
    qairt_build, qairt_version = None, be.qairt_version
    targets: set[tuple[str, int]] = set()  # the (SoC, arch) markers of the binary
    outputs: list[JobFile] = []
    for name, fmt in compiled.files:
        path = work / name
        if not path.is_file():
            raise CompileError(f"the {be.name} backend did not write {name}")
        twin = name in compiled.twins
        facts = scan_file(path, markers=fmt == CONTEXT_BINARY)  # hash, size and QNN markers in one read
        if fmt == CONTEXT_BINARY and not twin:
            qairt_build = min(facts.builds, default=None)
            if compiled.aihub is not None and qairt_build:  # AI Hub chose the QAIRT: the binary says which
                qairt_version = build_version(qairt_build)
            targets = facts.context_targets
        outputs.append(JobFile(name, facts.sha256, facts.size, fmt, compiled.graphs.get(name), twin))
    binary = next((o.path for o in outputs if o.format == CONTEXT_BINARY and not o.twin), None)
    if binary is None:
        raise CompileError(f"the {be.name} backend made no QNN context binary")
    summary = None
    try:
        with _READING:  # a fresh binary of our own compile: read in this process (0.3 ms, not a 0.2 s child)
            context = qnnsystem.read_context_here(work / binary)
    except MissingTool:
        warnings += _target_warnings(job.soc, targets)  # no library: the markers say what they can
    except QnnDeployError as e:
        raise CompileError(f"libQnnSystem cannot read the compiled {binary}: {e}") from None
    else:
        summary = contextcheck.summary(context)
        warnings += _context_findings(job, work, context, outputs)
    return dataclasses.replace(_record(job, be, out, seconds, warnings), qairt_version=qairt_version,
                               qairt_build=qairt_build, outputs=tuple(outputs), context=summary,
                               shared=compiled.shared_saving, aihub=compiled.aihub, layers=compiled.layers)


_READING = threading.Lock()  # libQnnSystem is not documented as thread-safe; the job threads read one at a time


def _context_findings(job: CompileJob, work: Path, context: ContextInfo, outputs: list[JobFile]) -> list[str]:
    """The compiled binary read back: each graph must have its model's signature (else the job fails); its SoC,
    arch and VTCM give warnings."""
    members = job.members or (Member(job.graph, job.model, job.model_sha256, job.calibration),)
    wrappers = {o.graph or job.graph: work / o.path for o in outputs if o.format == EPCONTEXT and not o.twin}
    signatures = {}
    for m in members:
        sig = graph_signature(m.model)
        signatures[m.graph] = (sig.inputs, sig.outputs)
    problems = contextcheck.graph_problems(context, {m.graph: wrappers.get(m.graph) for m in members}, signatures)
    if problems:
        raise CompileError(f"the compiled binary does not hold what was compiled: {problems[0]}")
    return contextcheck.target_problems(context, job.soc) + contextcheck.resource_warnings(context, job.soc, job.graph)


def failure(e: BaseException, work: Path, model: Path) -> str:
    """A failed job's error, saying so when the disk it writes to has no room for the model's size: a compiler on a
    full disk writes empty or cut files and then fails on them in its own words ("Empty cache file encountered")."""
    try:
        data = external_locations(load_model(model, weights=False))
    except QnnDeployError:
        data = set()
    size = sum(p.stat().st_size for p in (model, *(model.parent / d for d in data)) if p.is_file())
    full = fileio.no_room(work, size)
    return str(e) if full is None else (f"{e} (no room to write in {work.parent}: {fileio.cause(full)}; make room "
                                        "and compile again)")


def _failed_record(job: CompileJob, be: Backend, error: str, findings: list[logs.LogFinding], seconds: float,
                   out: Path) -> JobRecord:
    return _record(job, be, out, seconds, [str(f) for f in findings if f.kind != logs.ERROR], error)


def _target_warnings(soc: Soc, targets: set[tuple[str, int]]) -> list[str]:
    if not targets:
        return ["the context binary does not name its target (soc_type/arch): cannot confirm the SoC"]
    warnings = []
    for soc_type, arch in sorted(targets):
        if arch != soc.arch_number:
            warnings.append(f"the context binary targets arch {arch}, the catalog says {soc.dsp_arch} for "
                            f"{soc.model}: check on a {soc.model} phone (qnndeploy device verify)"
                            + (f"; catalog note: {soc.note}" if soc.note else ""))
        if soc_type != soc.model:
            warnings.append(f"the context binary names soc_type {soc_type}, not {soc.model}")
    return warnings

"""Validate a build: run each compiled context on the host HTP emulator and the source ONNX on CPU with the same
inputs, compare every output by metrics.py's rules, and write validation.json next to compile.json.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from qnndeploy import __version__
from qnndeploy.base import interrupt, socs
from qnndeploy.base.errors import BadInput, QnnDeployError
from qnndeploy.base.fileio import JSON, sha256_file, write_json
from qnndeploy.base.kinds import Precision
from qnndeploy.base.names import CONTEXT_BINARY, EPCONTEXT
from qnndeploy.base.pool import Pool
from qnndeploy.formats.records import (
    VALIDATION_RECORD,
    VALIDATION_VERSION,
    CompileRecord,
    JobStarted,
    RecordStatus,
    read_build,
    split_records,
)
from qnndeploy.model import samples
from qnndeploy.model.metrics import (
    OPTIONAL_THRESHOLDS,
    THRESHOLDS,
    OutputMetrics,
    Thresholds,
    judge_model,
    thresholds_for,
)
from qnndeploy.model.samples import Sample
from qnndeploy.qnn import htp

EMULATOR_NOTE = ("Outputs come from the host HTP emulator (x86-64): the HTP's arithmetic, not its speed. "
                 "Emulator timings say nothing about phone timings; measure on a phone (qnndeploy device profile).")


class TargetStatus(StrEnum):
    """A job's validation: judged and passed or failed, not run (the reason says why), or it could not run."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"


@dataclass(frozen=True)
class ValidateOptions:
    """Which jobs validate runs, on what samples, judged how: the command line's options (same defaults)."""

    inputs: Path | None = None  # a samples folder (DIR/<graph>/ when it exists, else DIR); None: random samples
    random: int | None = None  # random seeded samples per graph (default 1 without inputs)
    seed: int = 0
    preprocess: str | Path | None = None  # how a one-input graph's .wav or .png/.jpg files become inputs
    thresholds: Thresholds = field(default_factory=dict)  # overrides, for every precision
    reason: str | None = None  # why a looser threshold is right: required with one, recorded
    graphs: list[str] | None = None  # None: every graph of the build
    soc_names: list[str] | None = None  # None: every SoC of the build
    jobs: int | None = None  # at once; None: default_jobs()


@dataclass
class TargetValidation:
    graph: str
    soc: str
    precision: Precision | None
    status: TargetStatus
    reason: str | None = None
    outputs: list[OutputMetrics] = field(default_factory=list)
    samples: int = 0
    thresholds: Thresholds | None = None
    emulator_s_per_run: float | None = None
    record: Path | None = None
    shared: str | None = None  # the shared context it belongs to: its twin ran (TWIN_NOTE)


@dataclass
class ValidationSummary:
    build: Path
    inputs: JSON  # how the samples were made
    targets: list[TargetValidation]
    ok: bool
    emulator_note: str = EMULATOR_NOTE
    splits: list[Path] = field(default_factory=list)  # split records naming the build's models: bundle --split each


TWIN_NOTE = ("the shared context's graphs share weights, which the host emulator cannot load (QAIRT 2.51 crashes): "
             "this graph compiled alone with the same options ran instead; check the shared binary on a phone")
Progress = Callable[[int, int, "TargetValidation | JobStarted | None"], None]  # as compile's
Given = tuple[list[Sample], JSON]  # samples from --inputs, and how they were made
Reference = tuple[list[Sample], list[Sample], JSON]  # samples, their CPU outputs, how the samples were made


def validate_build(build: Path, options: ValidateOptions = ValidateOptions(),
                   progress: Progress | None = None) -> ValidationSummary:
    """Validate every compiled (graph, SoC) in `build`, the selected ones (options) `jobs` at once, the results in
    the build's order. The samples: `inputs` (*.npz with one array per input name, or <input>.npy; for a one-input
    graph .wav or .png/.jpg files through `preprocess`, media.parse_preprocess), otherwise `random` seeded ones.
    `thresholds` overrides min_cosine / min_snr_db / atol / min_topk_jaccard; one looser than a default needs
    `reason`, which the records keep (a pass is then a pass by that reason)."""
    o = options
    inputs, random, seed, thresholds, reason, jobs = o.inputs, o.random, o.seed, o.thresholds, o.reason, o.jobs
    prep = samples.sample_source(inputs, random, o.preprocess)
    check_thresholds(thresholds)
    if reason is not None and ("\n" in reason or len(reason) > 500):
        raise BadInput("--reason must be one line of at most 500 characters")
    if jobs is not None and jobs < 1:
        raise BadInput("-j must be 1 or more")
    compiled = read_build(build)
    plan = select(compiled, o.graphs, o.soc_names)
    loosened = looser_thresholds(thresholds, {r.precision for r in plan})
    if loosened and not (reason or "").strip():
        raise BadInput(f"--{', --'.join(loosened)} is looser than the default: say why with --reason \"...\" "
                       "(it is recorded in every validation record and the bundle)")
    htp._require()
    # Samples that do not fit are bad input: refuse them before anything runs or is written.
    given: dict[str, Given] = {}
    for record in plan if inputs is not None else []:
        if _validatable(record) and record.graph not in given and record.source.is_file():
            given[record.graph] = samples.for_graph(record.source, record.graph, inputs, preprocess=prep)
    random = random if random is not None or inputs is not None else 1
    described: JSON = ({"kind": "files", "folder": str(Path(inputs).resolve()),
                        **({"preprocess": prep.given} if prep is not None else {})} if inputs is not None
                       else {"kind": "random", "samples": random, "seed": seed, "distribution": samples.RANDOM_NOTE})
    per_graph: dict[str, Reference | QnnDeployError] = {}
    locks = {r.graph: threading.Lock() for r in plan}  # a graph's CPU reference is computed once, for all its SoCs
    results: dict[int, TargetValidation] = {}
    if progress:
        progress(0, len(plan), None)

    def run(i: int, record: CompileRecord) -> tuple[int, TargetValidation]:
        if progress:
            progress(len(results), len(plan), JobStarted(record.graph, record.soc))
        return i, _validate_one(record, random, seed, thresholds, per_graph, locks[record.graph], given,
                                reason.strip() if loosened and reason else None)

    pool = Pool(max_workers=jobs or default_jobs())
    try:
        pending = {pool.submit(run, i, record) for i, record in enumerate(plan)}
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for fut in done:
                i, result = fut.result()
                results[i] = result
                if progress:
                    progress(len(results), len(plan), result)
            interrupt.check()  # a safe point: SIGTERM stops between runs (a running emulator run ends first)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    ordered = [results[i] for i in range(len(plan))]
    validated = [t for t in ordered if t.status in (TargetStatus.PASSED, TargetStatus.FAILED)]
    ok = bool(validated) and all(t.status in (TargetStatus.PASSED, TargetStatus.SKIPPED) for t in ordered)
    return ValidationSummary(Path(build), described, ordered, ok,
                             splits=split_records({r.source: r.source_sha256 for r in compiled}))


def default_jobs() -> int:
    """Half the cores: each job's CPU reference run takes every core onnxruntime gets, and the emulator one more,
    so a 2-core machine validates one job at a time."""
    return max(1, (os.cpu_count() or 1) // 2)


def select(records: list[CompileRecord], graphs: list[str] | None, soc_names: list[str] | None
           ) -> list[CompileRecord]:
    """The jobs of `graphs` on `soc_names` (catalog names, in any spelling the catalog knows); a name the build
    does not hold is bad input, said with the names it does."""
    if graphs:
        known = sorted({r.graph for r in records})
        missing = [g for g in graphs if g not in known]
        if missing:
            raise BadInput(f"--graph {', '.join(missing)}: not in the build, which holds {', '.join(known)}")
        records = [r for r in records if r.graph in graphs]
    if soc_names:
        known = sorted({r.soc for r in records})
        wanted = {socs.find(n).model for n in soc_names}
        missing = sorted(wanted - set(known))
        if missing:
            raise BadInput(f"--soc {', '.join(missing)}: the build has no job for it"
                           + (f" (its jobs are for {', '.join(known)})" if known else ""))
        records = [r for r in records if r.soc in wanted]
    return records


def looser_thresholds(thresholds: Thresholds, precisions: set[str]) -> list[str]:
    """The overrides that would pass what a default of these precisions refuses: a lower cosine, SNR or Jaccard,
    a higher atol."""
    found = []
    for name, value in thresholds.items():
        defaults = [{**THRESHOLDS.get(p, THRESHOLDS["fp16"]), **OPTIONAL_THRESHOLDS}[name] for p in precisions]
        if any(value > d if name == "atol" else value < d for d in defaults):
            found.append(f"{name.replace('_', '-')} {value:g}")
    return found


def check_thresholds(thresholds: Thresholds) -> None:
    """Refuse names and values no output could be judged by: a cosine outside [-1, 1], a NaN or infinite SNR,
    a negative atol, a top-k Jaccard outside [0, 1]."""
    unknown = set(thresholds) - set(THRESHOLDS["fp16"]) - set(OPTIONAL_THRESHOLDS)
    if unknown:
        raise BadInput(f"unknown threshold(s) {', '.join(sorted(unknown))}")
    cosine, snr, atol = (thresholds.get(k) for k in ("min_cosine", "min_snr_db", "atol"))
    if cosine is not None and not -1 <= cosine <= 1:
        raise BadInput(f"--min-cosine {cosine:g}: a cosine similarity lies between -1 and 1 (1 = identical)")
    if snr is not None and not math.isfinite(snr):
        raise BadInput(f"--min-snr-db {snr:g}: give a finite number of dB, e.g. 30")
    if atol is not None and not (math.isfinite(atol) and atol >= 0):
        raise BadInput(f"--atol {atol:g}: give a finite absolute tolerance of 0 or more, e.g. 1e-3")
    jaccard = thresholds.get("min_topk_jaccard")
    if jaccard is not None and not 0 <= jaccard <= 1:
        raise BadInput(f"--min-topk-jaccard {jaccard:g}: a Jaccard index lies between 0 and 1 (1 = same set)")


def emulated_qairts(build: Path) -> set[str]:
    """The QAIRT releases of the binaries validate would run on the host emulator (not the failed jobs, not the
    qairt backend's, which have no EPContext wrapper): the toolchain validate must run under."""
    return {r.qairt_version for r in read_build(build) if _validatable(r)}


def _validatable(record: CompileRecord) -> bool:
    return record.status == RecordStatus.OK and record.output(EPCONTEXT) is not None


def _validate_one(record: CompileRecord, random: int | None, seed: int, overrides: Thresholds,
                  per_graph: dict[str, Reference | QnnDeployError], lock: threading.Lock, given: dict[str, Given],
                  reason: str | None) -> TargetValidation:
    folder, graph, soc_name, precision = record.folder, record.graph, record.soc, record.precision
    result = TargetValidation(graph, soc_name, precision, TargetStatus.SKIPPED, shared=record.shared)
    if record.status != RecordStatus.OK:
        result.reason = "the compile failed: nothing to validate"
        return result
    ctx, binary = record.output(EPCONTEXT), record.output(CONTEXT_BINARY)
    if ctx is None:
        result.reason = (f"no ORT EPContext wrapper ({record.backend} backend): the host emulator cannot load "
                         f"this context; check it on a phone (qnndeploy device verify)")
        return result
    # A shared context's graphs share weights, which the host emulator cannot load: its twin (the graph compiled
    # alone with the same options) is what runs here.
    run = record.twin(EPCONTEXT) if record.shared else ctx
    if run is None:
        result.status = TargetStatus.ERROR
        result.reason = f"{folder} has no twin of {graph} for the emulator: compile again"
        return result
    result.thresholds = limits = thresholds_for(precision, overrides)
    try:
        for o in (ctx, binary, *record.twins):
            if o is not None and sha256_file(folder / o.path) != o.sha256:
                raise BadInput(f"{folder / o.path} changed since it was compiled: compile again")
        with lock:
            if graph not in per_graph:
                try:
                    per_graph[graph] = _reference(record, given.get(graph), random, seed)
                except QnnDeployError as e:
                    per_graph[graph] = e
            reference = per_graph[graph]
        if isinstance(reference, QnnDeployError):
            raise reference
        feeds, expected, used = reference
        outputs, seconds = _run_htp(folder / run.path, soc_name, precision, feeds)
    except QnnDeployError as e:
        result.status, result.reason = TargetStatus.ERROR, str(e)
        return result
    result.samples = len(feeds)
    result.emulator_s_per_run = round(seconds / len(feeds), 3)
    result.outputs = judge_model(record.source, expected, outputs, limits)
    result.status = TargetStatus.PASSED if all(m.passed for m in result.outputs) else TargetStatus.FAILED
    result.record = record.validation_file
    write_json(result.record, {
        "record": VALIDATION_RECORD, "version": VALIDATION_VERSION,
        "graph": graph, "soc": soc_name, "soc_id": record.soc_id, "dsp_arch": record.dsp_arch,
        "precision": precision, "backend": record.backend, "qairt_version": record.qairt_version,
        "passed": result.status == TargetStatus.PASSED,
        "thresholds": limits,
        **({"threshold_reason": reason} if reason else {}),
        "inputs": used,
        "outputs": [vars(m) for m in result.outputs],
        "context": {"path": ctx.path, "sha256": ctx.sha256},
        "binary": {"path": binary.path, "sha256": binary.sha256} if binary else None,
        **({"emulated": {"path": run.path, "sha256": run.sha256, "note": TWIN_NOTE}} if record.shared else {}),
        "compile_cache_key": record.cache_key,
        "emulator": {"seconds_per_run": result.emulator_s_per_run, "note": EMULATOR_NOTE},
        "tools": {"qnndeploy": __version__},
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    })
    return result


def _reference(record: CompileRecord, given: Given | None, random: int | None, seed: int) -> Reference:
    """The graph's input samples (`given` from --inputs, else random) and the CPU outputs for them (computed once
    per graph, shared by its SoCs)."""
    source = record.source
    if not source.is_file():
        raise BadInput(f"the source model {source} is gone: the CPU reference needs it")
    if sha256_file(source) != record.source_sha256:
        raise BadInput(f"{source} changed since the compile: compile again, then validate")
    feeds, used = given or samples.for_graph(source, record.graph, count=random or 1, seed=seed)
    return feeds, samples.cpu_outputs(source, feeds), used


def _run_htp(ctx: Path, soc_name: str, precision: Precision | None, feeds: list[Sample]) -> tuple[list[Sample], float]:
    try:
        return htp.run_model(ctx, socs.find(soc_name), feeds, fp16=precision == Precision.FP16)
    except QnnDeployError as e:
        raise BadInput(f"the HTP emulator could not run {ctx.name}: {e}") from None

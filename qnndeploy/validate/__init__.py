"""Validate a build: run each compiled context on the host HTP emulator and the source ONNX on CPU with the same
inputs, compare every output by metrics.py's rules, and write validation.json next to compile.json.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from qnndeploy import __version__
from qnndeploy.base import interrupt, socs
from qnndeploy.base.errors import BadInput, QnnDeployError
from qnndeploy.base.fileio import JSON, sha256_file, write_json
from qnndeploy.base.kinds import Precision
from qnndeploy.base.names import CONTEXT_BINARY, EPCONTEXT
from qnndeploy.base.pool import Pool
from qnndeploy.formats import chain, estimaterecord
from qnndeploy.formats.estimaterecord import EstimateRecord
from qnndeploy.formats.generation import GenerationPlan, plans_of
from qnndeploy.formats.records import (
    CompileRecord,
    JobMeasured,
    JobProgress,
    JobStarted,
    RecordStatus,
    SplitPart,
    SplitRecord,
    ValidationRecord,
    read_build,
    splits_of,
    whole_splits,
)
from qnndeploy.model import decode, samples, tasks
from qnndeploy.model.metrics import (
    LOOSER_WHEN_HIGHER,
    OPTIONAL_THRESHOLDS,
    THRESHOLDS,
    OutputMetrics,
    Thresholds,
    judge_model,
    thresholds_for,
)
from qnndeploy.model.onnxio import INT_DTYPES, TensorInfo, load_model, real_inputs, tensor_info
from qnndeploy.model.samples import Ranges, Sample
from qnndeploy.qnn import htp, loop
from qnndeploy.validate import generation

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
    ranges: Ranges = field(default_factory=dict)  # --range NAME=LO:HI: integer inputs' values for random samples
    tasks: dict[str | None, str] = field(default_factory=dict)  # --task: GRAPH (None: every graph) -> KIND[:...]
    loop: str | None = None  # --loop: an encoder-decoder's decode loop (decode.parse), which decides both graphs
    estimate: bool = False  # --estimate: each validated graph x SoC estimated too (formats/estimaterecord.py)


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
    inputs: JSON | None = None  # how its samples were made (a split's part: by the parts before it)
    chain: ChainCheck | None = None  # a split's NPU part: the whole chain against the source model on the CPU
    task: JSON | None = None  # the task and its verdict, as the record keeps it (tasks.TaskVerdict.json)
    loop: JSON | None = None  # an encoder-decoder's graph: the decode loop on this SoC (loop.LoopCheck.json)
    estimate: EstimateRecord | None = None  # --estimate: its estimate record (written as estimate.json)


@dataclass
class ChainCheck:
    """A split model run as the app runs it on one SoC: its CPU parts on the CPU, its NPU parts on the HTP emulator,
    each fed what the parts before it made, against the source model's outputs on the CPU."""

    split: Path
    soc: str
    passed: bool
    outputs: list[OutputMetrics]
    emulator_runs: int  # extra emulator runs: NPU parts after the first one read the HTP's values
    error: str | None = None  # the chain could not run


@dataclass
class ValidationSummary:
    build: Path
    inputs: JSON  # how the samples were made
    targets: list[TargetValidation]
    ok: bool
    emulator_note: str = EMULATOR_NOTE
    splits: list[Path] = field(default_factory=list)  # split records naming the build's models: bundle --split each
    # (not those whose parts a decode loop runs: the loop names them, and the bundle carries it)
    guessed: list[str] = field(default_factory=list)  # integer inputs whose random values no range bounded
    not_claimed: str | None = None  # --estimate: what the estimates do not claim (estimaterecord.NOT_CLAIMED)


TWIN_NOTE = ("the shared context's graphs share weights, which the host emulator cannot load (QAIRT 2.51 crashes): "
             "this graph compiled alone with the same options ran instead; check the shared binary on a phone")
Given = tuple[list[Sample], JSON]  # samples from --inputs, and how they were made
# a split part's record and HTP outputs, until its chain ran
Held = dict[tuple[str, str], tuple[ValidationRecord, list[Sample]]]
Reference = tuple[list[Sample], list[Sample], JSON]  # samples, their CPU outputs, how the samples were made
K = TypeVar("K")
V = TypeVar("V")


def validate_build(build: Path, options: ValidateOptions = ValidateOptions(),
                   progress: JobProgress[TargetValidation | JobMeasured] | None = None) -> ValidationSummary:
    """Validate every compiled (graph, SoC) in `build`, the selected ones (options) `jobs` at once, the results in
    the build's order. The samples: `inputs` (*.npz with one array per input name, or <input>.npy; for a one-input
    graph .wav or .png/.jpg files through `preprocess`, media.parse_preprocess), otherwise `random` seeded ones.
    `thresholds` overrides min_cosine / min_snr_db / atol / min_topk_jaccard / min_top1 / max_error_rate; one looser
    than a default needs `reason`, which the records keep (a pass is then a pass by that reason). What decides: the
    task of the output the app reads (tasks.judge), a split's part's chain, an encoder-decoder's decode loop."""
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
    splits = splits_of({r.source: r.source_sha256 for r in compiled})
    links = _links(plan, splits)
    sources = {r.graph: r.source for r in plan}
    gens = plans_of(sources)  # a decoder LLM's parts (prepare --generate): judged by its loop
    generating = _generation_loop(o.loop, gens)
    try:
        looped = decode.parse(o.loop, sources, whole_splits(links)) if o.loop and generating is None else None
    except BadInput as e:
        raise e.reworded(f"{e}{_partial_splits(links)}") from None
    if looped is not None and not set(looped.graphs) <= set(sources):
        lacking = ", ".join(g for g in looped.graphs if g not in sources)
        raise BadInput(f"--loop: the build (or --graph) lacks {lacking}")
    loop_graphs = set(looped.graphs) if looped is not None else set()
    links = {g: link for g, link in links.items() if g not in loop_graphs}  # the loop feeds and judges its parts
    _check_ranges(o.ranges, plan, links)
    judged_by = _tasks(o.tasks, plan)
    loosened = looser_thresholds(thresholds, {r.precision for r in plan})
    if generating is not None and generating.min_agreement is not None and any(
            generating.min_agreement < generation.min_agreement(r.precision) for r in plan if r.graph in gens):
        loosened.append(f"loop generation:min_agreement={generating.min_agreement:g}")
    if loosened and not (reason or "").strip():
        raise BadInput(f"--{', --'.join(loosened)} is looser than the default: say why with --reason \"...\" "
                       "(it is recorded in every validation record and the bundle)")
    htp._require()
    # Samples that do not fit are bad input: refuse them before anything runs or is written.
    given: dict[str, Given] = {}
    for record in plan if inputs is not None else []:
        if _validatable(record) and record.graph not in given and record.source.is_file() \
                and record.graph not in links and (looped is None or record.graph not in looped.graphs[1:]):
            given[record.graph] = samples.for_graph(record.source, record.graph, inputs, preprocess=prep)
    random = random if random is not None or inputs is not None else 1
    described: JSON = ({"kind": "files", "folder": str(Path(inputs).resolve()),
                        **({"preprocess": prep.given} if prep is not None else {})} if inputs is not None
                       else {"kind": "random", "samples": random, "seed": seed, "distribution": samples.RANDOM_NOTE})
    per_graph: dict[str, Reference | QnnDeployError] = {}
    locks = {r.graph: threading.Lock() for r in plan}  # a graph's CPU reference is computed once, for all its SoCs
    chains: dict[Path, chain.Chain | QnnDeployError] = {}  # each split's CPU chain, once for all its parts
    chain_lock = threading.Lock()
    for graph, (split, _) in links.items() if inputs is not None else ():  # its samples are bad input too
        if split.path not in chains:
            chains[split.path] = chain.run_cpu(split, graph, inputs, preprocess=prep)

    cpu_loops: dict[str, loop.CpuRun | QnnDeployError] = {}  # the CPU's decode loops, once for both graphs
    loop_lock = threading.Lock()
    by_graph = {r.graph: r for r in plan}

    def cpu_loop() -> loop.CpuRun:
        assert looped is not None
        for graph in looped.graphs:
            _source(by_graph[graph])
        first = looped.encoders[0]  # it reads the samples (a split encoder's later parts: what the parts make)
        features, used = given.get(first) or samples.for_graph(
            sources[first], first, count=random or 1, seed=seed, ranges=o.ranges)
        return loop.run_cpu(looped, sources, features, used)

    gen_evidence: dict[Path, dict[str, list[Sample]] | QnnDeployError] = {}

    def make_reference(record: CompileRecord) -> Reference:
        if record.graph in gens:
            made_plan = gens[record.graph]
            assert generating is not None
            feeds = _once(gen_evidence, made_plan.path, loop_lock, lambda: generation.evidence(
                made_plan, generating, seed))[record.graph]
            return feeds, samples.cpu_outputs(record.source, feeds), {
                "kind": "loop", "graph": record.graph, "samples": {"kind": "generation", "plan": str(made_plan.path)}}
        if looped is not None and record.graph in loop_graphs:
            made = _once(cpu_loops, "", loop_lock, cpu_loop)
            role = "encoder" if record.graph in looped.encoders else "decoder"
            cut = record.graph in (*looped.encoder_parts, *looped.decoder_parts)
            described = {"kind": "loop", "graph": role, **({"part": record.graph} if cut else {}),
                         "samples": made.used}
            feeds, expected = made.evidence[record.graph]
            return feeds, expected, described
        link = links.get(record.graph)
        if link is None:
            return _reference(record, given.get(record.graph), random, seed, o.ranges)
        split, part = link
        made_chain = _once(chains, split.path, chain_lock,
                           lambda: chain.run_cpu(split, record.graph, inputs, random or 1, seed, prep, o.ranges))
        return made_chain.feeds(part), made_chain.cpu(part), made_chain.described(part)
    results: dict[int, TargetValidation] = {}
    held: Held = {}
    if progress:
        progress(0, len(plan), None)

    def run(i: int, record: CompileRecord) -> tuple[int, TargetValidation]:
        if progress:
            progress(len(results), len(plan), JobStarted(record.graph, record.soc))
        return i, _validate_one(record, thresholds, per_graph, locks[record.graph], make_reference,
                                reason.strip() if loosened and reason else None, judged_by.get(record.graph),
                                held if record.graph in links or record.graph in loop_graphs or record.graph in gens
                                else None)

    pool = Pool(max_workers=jobs or default_jobs())
    try:
        pending = {pool.submit(run, i, record) for i, record in enumerate(plan)}
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for fut in done:
                i, result = fut.result()
                results[i] = result
                if progress:
                    measured = (result.graph, result.soc) in held
                    progress(len(results), len(plan), JobMeasured(result.graph, result.soc) if measured else result)
            interrupt.check()  # a safe point: SIGTERM stops between runs (a running emulator run ends first)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    ordered = [results[i] for i in range(len(plan))]
    _check_chains(plan, ordered, links, chains, held)
    made_loop = cpu_loops.get("")
    if looped is not None and isinstance(made_loop, loop.CpuRun):
        _check_loops(looped, plan, ordered, made_loop, held)
    if generating is not None:
        _check_generations(gens, plan, ordered, held, generating, seed)
    _write_held(ordered, held)
    if o.estimate:
        _estimate(plan, ordered)
    validated = [t for t in ordered if t.status in (TargetStatus.PASSED, TargetStatus.FAILED)]
    ok = bool(validated) and all(t.status in (TargetStatus.PASSED, TargetStatus.SKIPPED) for t in ordered)
    guessed = list(dict.fromkeys(n for t in ordered for n in samples.guessed(_made(t.inputs))))
    looped_splits = {split.path for g, (split, _) in _links(plan, splits).items() if g in loop_graphs}
    return ValidationSummary(Path(build), described, ordered, ok,
                             splits=[s.path for s in splits if s.path not in looped_splits],
                             guessed=guessed, not_claimed=estimaterecord.NOT_CLAIMED if o.estimate else None)


def _estimate(plan: list[CompileRecord], results: list[TargetValidation]) -> None:
    """--estimate: each graph that validated (passed or failed) estimated once for its SoCs here, its record
    written beside each job's validation.json and kept on the result. A graph the cost model cannot estimate gets
    no number, with the reason, never a failed validation."""
    by_graph: dict[tuple[str, Path, str], list[tuple[CompileRecord, TargetValidation]]] = {}
    for record, result in zip(plan, results, strict=True):
        if result.status in (TargetStatus.PASSED, TargetStatus.FAILED):
            by_graph.setdefault((record.graph, record.source, str(record.precision)), []).append((record, result))
    for (graph, _, _), jobs in by_graph.items():
        interrupt.check()
        first = jobs[0][0]
        chosen = [socs.find(record.soc) for record, _ in jobs]
        made = estimaterecord.estimate_or_why(graph, first.source, chosen, str(first.precision))
        rows = {row.soc: row for row in made.socs}
        for record, result in jobs:
            result.estimate = estimaterecord.make(made, rows[record.soc], str(record.precision),
                                                  "validate --estimate", source_sha256=record.source_sha256)
            estimaterecord.write(estimaterecord.record_file(record), result.estimate)


def _made(inputs: JSON | None) -> JSON:
    """How the samples themselves were made (for a split's part or a decode loop's graph: the model's own)."""
    inputs = inputs or {}
    return inputs.get("samples") or {} if inputs.get("kind") in (chain.CHAIN, "loop") else inputs


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
    """The overrides that would pass what a default of these precisions refuses: a lower cosine, SNR, Jaccard or
    top-1 agreement, a higher atol or text error rate."""
    found = []
    for name, value in thresholds.items():
        defaults = [{**THRESHOLDS.get(p, THRESHOLDS["fp16"]), **OPTIONAL_THRESHOLDS}[name] for p in precisions]
        if any(value > d if name in LOOSER_WHEN_HIGHER else value < d for d in defaults):
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
    for key, what in (("min_topk_jaccard", "a Jaccard index lies between 0 and 1 (1 = same set)"),
                      ("min_top1", "a share of labels lies between 0 and 1 (1 = every label the same)"),
                      ("max_error_rate", "an error rate lies between 0 and 1 (0 = every text the same)")):
        value = thresholds.get(key)
        if value is not None and not 0 <= value <= 1:
            raise BadInput(f"--{key.replace('_', '-')} {value:g}: {what}")


def emulated_qairts(build: Path) -> set[str]:
    """The QAIRT releases of the binaries validate would run on the host emulator (not the failed jobs, not the
    qairt backend's, which have no EPContext wrapper): the toolchain validate must run under."""
    return {r.qairt_version for r in read_build(build) if _validatable(r)}


def _validatable(record: CompileRecord) -> bool:
    return record.status == RecordStatus.OK and record.output(EPCONTEXT) is not None


def _validate_one(record: CompileRecord, overrides: Thresholds, per_graph: dict[str, Reference | QnnDeployError],
                  lock: threading.Lock, make_reference: Callable[[CompileRecord], Reference], reason: str | None,
                  task: tasks.Task | None = None, held: Held | None = None) -> TargetValidation:
    """One job on the emulator against its CPU reference (made once per graph); its record is written now, or for
    a split's part (`held`) kept with its HTP outputs until the chain is judged too."""
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
    run = record.emulated  # a shared context's twin: the graph compiled alone with the same options
    if run is None:
        result.status = TargetStatus.ERROR
        result.reason = f"{folder} has no twin of {graph} for the emulator: compile again"
        return result
    result.thresholds = limits = thresholds_for(precision, overrides)
    try:
        for o in (ctx, binary, *record.twins):
            if o is not None and sha256_file(folder / o.path) != o.sha256:
                raise BadInput(f"{folder / o.path} changed since it was compiled: compile again")
        feeds, expected, used = _once(per_graph, graph, lock, lambda: make_reference(record))
        outputs, seconds = _run_htp(folder / run.path, soc_name, precision, feeds)
    except QnnDeployError as e:
        result.status, result.reason = TargetStatus.ERROR, str(e)
        return result
    result.samples, result.inputs = len(feeds), used
    result.emulator_s_per_run = round(seconds / len(feeds), 3)
    task = task or tasks.detect(record.source)
    result.outputs, verdict, passed = tasks.judge(task, record.source, expected, outputs, limits)
    result.task = verdict.json() if verdict else task.json()
    result.status = TargetStatus.PASSED if passed else TargetStatus.FAILED
    result.record = record.validation_file
    payload = ValidationRecord(
        graph, soc_name, record.soc_id, record.dsp_arch, precision, record.backend, record.qairt_version,
        result.status == TargetStatus.PASSED, limits, used, result.task, tuple(vars(m) for m in result.outputs),
        {"path": ctx.path, "sha256": ctx.sha256}, {"path": binary.path, "sha256": binary.sha256} if binary else None,
        record.cache_key, {"seconds_per_run": result.emulator_s_per_run, "note": EMULATOR_NOTE}, __version__,
        datetime.now(UTC).isoformat(timespec="seconds"), threshold_reason=reason or None,
        emulated={"path": run.path, "sha256": run.sha256, "note": TWIN_NOTE} if record.shared else None)
    if held is None:
        write_json(result.record, payload.to_json())
    else:
        held[(graph, soc_name)] = payload, outputs
    return result


def _once(cache: dict[K, V | QnnDeployError], key: K, lock: threading.Lock, make: Callable[[], V]) -> V:
    """`make()` once per key for every thread that asks (its failure too, raised to each of them)."""
    with lock:
        if key not in cache:
            try:
                cache[key] = make()
            except QnnDeployError as e:
                cache[key] = e
        value = cache[key]
    if isinstance(value, QnnDeployError):
        raise value
    return value


def _source(record: CompileRecord) -> Path:
    """The job's source model, as it was compiled: the CPU reference runs it."""
    source = record.source
    if not source.is_file():
        raise BadInput(f"the source model {source} is gone: the CPU reference needs it")
    if sha256_file(source) != record.source_sha256:
        raise BadInput(f"{source} changed since the compile: compile again, then validate")
    return source


def _reference(record: CompileRecord, given: Given | None, random: int | None, seed: int, ranges: Ranges
               ) -> Reference:
    """The graph's input samples (`given` from --inputs, else random) and the CPU outputs for them (computed once
    per graph, shared by its SoCs)."""
    source = _source(record)
    feeds, used = given or samples.for_graph(source, record.graph, count=random or 1, seed=seed, ranges=ranges)
    return feeds, samples.cpu_outputs(source, feeds), used


Link = tuple[SplitRecord, SplitPart]


def _tasks(given: Mapping[str | None, str], plan: list[CompileRecord]) -> dict[str, tasks.Task]:
    """Each graph's task, once for all its SoCs: its --task (GRAPH=KIND... for one graph, KIND... for all), parsed
    against its model before anything runs, else the one its graph makes plain (tasks.detect)."""
    graphs = {r.graph: r.source for r in plan}
    unknown = sorted(g for g in given if g is not None and g not in graphs)
    if unknown:
        raise BadInput(f"--task {unknown[0]}=...: no graph {unknown[0]} among those validated "
                       f"({', '.join(sorted(graphs))})")
    found = {}
    for graph, source in graphs.items():
        text = given.get(graph, given.get(None))
        if text is not None and source.is_file():
            found[graph] = tasks.parse(text, source)
        elif source.is_file():
            with contextlib.suppress(QnnDeployError):  # a source that no longer reads: its job says why
                found[graph] = tasks.detect(source)
    return found


def _links(plan: list[CompileRecord], splits: list[SplitRecord]) -> dict[str, Link]:
    """The graphs that are an NPU part of a split, with their split and part: they are fed what the parts before
    them make from the chain's samples, and judged with the whole chain too."""
    found: dict[str, Link] = {}
    for record in plan:
        for split in splits:
            part = split.part_of(record.source, record.source_sha256)
            if part is not None and part.runs_on == "npu":
                found[record.graph] = (split, part)
    return found


def _check_ranges(ranges: Ranges, plan: list[CompileRecord], links: dict[str, Link]) -> None:
    """--range names an integer input of a graph validated here (or of a split's chain), with values its type holds:
    anything else is bad input before anything runs (a typo would silently leave the input's values guessed)."""
    if not ranges:
        return
    models = {r.source for r in plan} | {p.path for split, _ in links.values() for p in split.parts}
    known: dict[str, TensorInfo] = {}
    for model in models:
        if model.is_file():
            known.update((i.name, i) for i in map(tensor_info, real_inputs(load_model(model, weights=False).graph))
                         if i.dtype in INT_DTYPES)
    unknown = sorted(set(ranges) - set(known))
    if unknown:
        raise BadInput(f"--range {', '.join(unknown)}: no integer input of that name in the graphs validated here"
                       + (f" (they have {', '.join(sorted(known))})" if known else " (they have none)"))
    samples.int_ranges_given(list(known.values()), ranges)


def _check_chains(plan: list[CompileRecord], results: list[TargetValidation], links: dict[str, Link],
                  chains: Mapping[Path, chain.Chain | QnnDeployError], held: Held) -> None:
    """Each split on each SoC whose NPU parts all ran: the parts chained as the app chains them, judged against the
    source model's outputs; a part passes only when its chain does."""
    by_job = {(r.graph, r.soc): (r, t) for r, t in zip(plan, results, strict=True)}
    for made in chains.values():
        if isinstance(made, QnnDeployError):
            continue
        npu = [p for p in made.split.parts if p.runs_on == "npu"]
        graphs = [next((g for g, (s, q) in links.items() if s.path == made.split.path and q == p), "") for p in npu]
        for soc in dict.fromkeys(r.soc for r in plan):
            if not all((g, soc) in held for g in graphs):
                continue  # a part not compiled, not selected or not run for this SoC: no chain to judge
            ran = {p.name: (*by_job[(g, soc)], held[(g, soc)][1]) for p, g in zip(npu, graphs, strict=True)}
            check = _chain_check(made, soc, ran)
            for _, t, _ in ran.values():
                t.chain = check
                if not check.passed:
                    t.status = TargetStatus.FAILED


def _check_loops(looped: decode.Loop, plan: list[CompileRecord], results: list[TargetValidation],
                 cpu: loop.CpuRun, held: Held) -> None:
    """Each SoC whose loop graphs (an encoder's and a decoder's, or their parts) all ran: the decode loop on the
    emulator against the CPU's, a split's parts chained; its verdict decides every one of them."""
    by_job = {(r.graph, r.soc): (r, t) for r, t in zip(plan, results, strict=True)}
    models = {r.graph: r.source for r in plan}
    for soc in dict.fromkeys(r.soc for r in plan):
        if not all((g, soc) in held for g in looped.graphs):
            continue
        jobs = {g: by_job[(g, soc)] for g in looped.graphs}
        record, target = jobs[looped.decoders[0]]
        fp16 = record.precision == Precision.FP16
        contexts = {g: _emulated(r) for g, (r, _) in jobs.items()}
        try:
            measured = held[(looped.encoders[0], soc)][1]  # the first graph's own run read the samples themselves
            if looped.encoder_parts:  # the later parts again on the emulator, fed what the HTP made before them
                rest = loop.npu_call(looped.encoders[1:], models, contexts, soc, fp16)
                encoded = [rest({**f, **m}) for f, m in zip(cpu.features, measured, strict=True)]
            else:
                encoded = measured
            decoder = loop.npu_call(looped.decoders, models, contexts, soc, fp16)
            npu = loop.run_npu(looped, encoded, decoder, loop.cache_shapes(looped, models))
            check = {**loop.judge(looped, soc, cpu, npu, target.thresholds or {}, decode.references(looped)).json(),
                     "described": looped.json()}
        except QnnDeployError as e:
            check = {"soc": soc, "passed": False, "error": str(e)}
        for _, t in jobs.values():
            t.loop = check
            t.status = TargetStatus.PASSED if check["passed"] else TargetStatus.FAILED


def _partial_splits(links: dict[str, Link]) -> str:
    """What a loop could not use: the splits some of whose parts are missing from the build (or --graph)."""
    whole = {g for parts in whole_splits(links).values() for g in parts}
    partial = {s.path: s for g, (s, _) in links.items() if g not in whole}
    return "".join(f" ({', '.join(g for g, (s, _) in links.items() if s.path == path)} of the {len(split.parts)} "
                   f"parts of {path} are here: compile and validate all of them)" for path, split in partial.items())


def _generation_loop(given: str | None, gens: Mapping[str, GenerationPlan]) -> generation.GenerationLoop | None:
    """--loop generation[:...] (or nothing, for a build of a generation plan's parts): how its loop runs."""
    kind = (given or "").partition(":")[0]
    if kind != "generation" and (given or not gens):
        return None
    if not gens:
        raise BadInput("--loop generation: the build holds no graph of a generation plan (prepare --generate)")
    _, options = tasks.key_values("--loop", given or "generation", ("steps", "prompt", "text", "min_agreement"),
                                  "steps=N, prompt=FILE, text=FILE or min_agreement=X")
    return generation.parse(options, f"--loop {given}")


def _check_generations(gens: Mapping[str, GenerationPlan], plan: list[CompileRecord],
                       results: list[TargetValidation], held: Held, loop: generation.GenerationLoop,
                       seed: int) -> None:
    """Each generation plan on each SoC whose graphs all ran: its loop on the emulator against the CPU's; the
    verdict decides every graph of the plan."""
    by_job = {(r.graph, r.soc): (r, t) for r, t in zip(plan, results, strict=True)}
    for made in {id(p): p for p in gens.values()}.values():
        graphs = list(made.graph_files())
        for soc in dict.fromkeys(r.soc for r in plan):
            if not all((g, soc) in held for g in graphs):
                continue
            jobs = {g: by_job[(g, soc)] for g in graphs}
            record = jobs[graphs[0]][0]
            try:
                generation.check_unchanged(made)
                check = generation.check(made, soc, {g: _emulated(r) for g, (r, _) in jobs.items()},
                                         record.precision, loop, seed,
                                         {g: r.calibration for g, (r, _) in jobs.items() if r.calibration}).json()
            except QnnDeployError as e:
                check = {"kind": "generation", "soc": soc, "passed": False, "error": str(e)}
            for _, t in jobs.values():
                t.loop = check
                t.status = TargetStatus.PASSED if check["passed"] else TargetStatus.FAILED


def _write_held(results: list[TargetValidation], held: Held) -> None:
    """The records of the graphs judged with others (a split's chain, a decode loop), now that they are."""
    for t in results:
        if (t.graph, t.soc) in held and t.record is not None:
            payload = held[(t.graph, t.soc)][0]
            chained = None if t.chain is None else {
                "split": str(t.chain.split), "passed": t.chain.passed, "outputs": [vars(m) for m in t.chain.outputs],
                "emulator_runs": t.chain.emulator_runs, **({"error": t.chain.error} if t.chain.error else {})}
            payload = dataclasses.replace(payload, chain=chained if chained is not None else payload.chain,
                                          loop=t.loop if t.loop is not None else payload.loop,
                                          passed=t.status == TargetStatus.PASSED)
            write_json(t.record, payload.to_json())


def _chain_check(made: chain.Chain, soc: str,
                 ran: Mapping[str, tuple[CompileRecord, TargetValidation, list[Sample]]]) -> ChainCheck:
    """The chain on `soc`: CPU parts on the CPU, NPU parts on the emulator, each fed what the chain made so far.
    The first NPU part reads exactly what its own validation fed it, so its measured outputs are reused."""
    split = made.split
    extra = 0
    npu_before = False

    def runner(part: SplitPart, feeds: list[Sample]) -> list[Sample]:
        nonlocal extra, npu_before
        if part.runs_on == "cpu":
            return samples.cpu_outputs(part.path, feeds)
        record, _, measured = ran[part.name]
        if not npu_before:
            npu_before = True
            return measured
        extra += len(feeds)
        return _run_htp(_emulated(record), soc, record.precision, feeds)[0]

    limits = next(iter(ran.values()))[1].thresholds or thresholds_for(None)
    try:
        values = chain.run(split, made.inputs, runner)
    except QnnDeployError as e:
        return ChainCheck(split.path, soc, False, [], extra, str(e))
    finals = chain.outputs(split)
    judged: list[OutputMetrics] = []
    for part in dict.fromkeys(chain.producer(split, n) for n in finals):
        names = [n for n in part.outputs if n in finals]
        judged += judge_model(part.path, [{n: v[n] for n in names} for v in made.values],
                              [{n: v[n] for n in names} for v in values], limits)
    return ChainCheck(split.path, soc, all(m.passed for m in judged), judged, extra)


def _emulated(record: CompileRecord) -> Path:
    """The EPContext model a job's validation ran (it ran: it has one)."""
    run = record.emulated
    assert run is not None
    return record.folder / run.path


def _run_htp(ctx: Path, soc_name: str, precision: Precision | None, feeds: list[Sample]) -> tuple[list[Sample], float]:
    try:
        return htp.run_model(ctx, socs.find(soc_name), feeds, fp16=precision == Precision.FP16)
    except QnnDeployError as e:
        raise BadInput(f"the HTP emulator could not run {ctx.name}: {e}") from None

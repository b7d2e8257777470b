"""Diagnose a compiled graph that validates badly: find the first tensor along the graph where the host HTP
emulator's numbers part from the CPU's, the node that made it, and the value ranges that explain it (fp16 overflow,
underflow into fp16's subnormals, huge dynamic range, cancellation), with remedies as commands.

How: a copy of the source model exposes some intermediate tensors as extra outputs; it is compiled for the job's
SoC and precision (CPU fallback off) and run on the emulator and on the CPU with the same samples, and each exposed
tensor gets validate's metrics. One compile probes several tensors spread over the topological order; the next
narrows between the last good and the first bad probe (plus the first bad node's own inputs, so that a branch
joining there is not missed), until they are adjacent; one more compile confirms the pair. A graph of N tensors
takes about log_(K+1)(N) + 1 compiles for K probes per compile, instead of N. Few tensors per compile also matter
for the numbers: exposing a tensor splits the HTP's fusion of its node with the next, and exposing every tensor
can make the failure vanish (basic_pitch: 0 bad tensors with all 179 exposed, an output at 27.9 dB with few).

A split is advised only once it is measured: both directions are cut as `prepare --split-at` cuts (model/split.py),
the NPU part compiled for the job's SoC and the chain run on the same samples against the whole model on the CPU,
so a split that keeps the error is never printed as the fix, and the advice does not flip with the threshold.
"""

from __future__ import annotations

import math
import shlex
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from qnndeploy.base import socs
from qnndeploy.base.errors import BadInput, QnnDeployError, first_line
from qnndeploy.base.fileio import FULL, JSON, check_writable, sha256_file, write_error
from qnndeploy.base.kinds import Precision, Side
from qnndeploy.base.names import EPCONTEXT, file_kind
from qnndeploy.formats import chain
from qnndeploy.formats.records import (
    CompileRecord,
    HtpSettings,
    SplitPart,
    ValidationRecord,
    read_build,
    splits_of,
    write_split,
)
from qnndeploy.model import samples, tasks
from qnndeploy.model import split as cutting
from qnndeploy.model.metrics import (
    MetricFit,
    OutputMetrics,
    Thresholds,
    TopK,
    fits,
    fitting_thresholds,
    judge_outputs,
    metrics,
    thresholds_for,
    topk_outputs,
    verdict,
)
from qnndeploy.model.onnxio import load_model, save_model
from qnndeploy.model.samples import Sample
from qnndeploy.qnn import htp

if TYPE_CHECKING:
    import numpy as np
    import onnx

FP16_MAX = 65504.0  # fp16's largest finite value
FP16_MIN_NORMAL = 6.103515625e-05  # below it fp16 is subnormal: fewer significant bits
FP16_FLUSH = 2.98e-08  # half the smallest fp16 subnormal (5.96e-8): below it a value rounds to 0
PROBES_PER_COMPILE = 8
_TINY_SHARE = 0.01  # a tensor with at least this share of nonzero values below FP16_MIN_NORMAL underflows
_SPREAD = 2048.0  # max magnitude over the median one beyond fp16's 11 significant bits
_CANCELLATION = 100.0  # an Add/Sub whose inputs are this many times larger (RMS) than its result
_TINY_OPS = {"Log": "the log", "Div": "the division", "Reciprocal": "the reciprocal", "Sqrt": "the square root",
             "Pow": "the power", "Exp": "the exp"}
_SUMS = {"Add", "Sub", "Sum", "ReduceSum", "ReduceMean"}
_UNMEASURED = "advice, not measured: it changes the model, which diagnose cannot do for you"
_FLOATS = {1, 10, 11, 16}  # onnx TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16
_MOVES = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Expand", "Slice", "Gather",
          "Concat", "Split", "Pad", "DepthToSpace", "SpaceToDepth"}  # copy values, compute nothing


@dataclass
class TensorRange:
    """The CPU values of one tensor, as far as fp16 cares."""

    tensor: str
    min: float
    max: float
    max_abs: float
    min_nonzero_abs: float | None  # None when all zero
    over_fp16_max: float  # share of values whose magnitude is above 65504
    subnormal_share: float  # share of nonzero values below 6.1e-5 in magnitude
    flushed_share: float  # share of nonzero values that fp16 rounds to 0
    dynamic_range: float | None  # max / min nonzero magnitude
    spread: float | None  # max / median nonzero magnitude


@dataclass
class Probe:
    tensor: str
    op_type: str  # of the node that produced it
    node: str
    position: int  # the producing node's index in topological order
    snr_db: float | None
    cosine: float | None
    max_abs_diff: float
    bad: bool
    compile_round: int  # which compile probed it (1-based)
    ranges: TensorRange


class Cause(StrEnum):
    """Why a tensor's fp16 values went wrong."""

    OVERFLOW = "overflow"
    ACCUMULATION = "accumulation"  # an overflow inside a node whose output fits: its sum of squares
    UNDERFLOW = "underflow"
    DYNAMIC_RANGE = "dynamic-range"
    CANCELLATION = "cancellation"
    ROUNDING = "rounding"


class RemedyKind(StrEnum):
    SPLIT = "split"
    CLAMP = "clamp"
    RESCALE = "rescale"
    KEEP_FP16 = "keep-fp16"
    THRESHOLD = "threshold"
    CPU = "cpu"


@dataclass
class Explanation:
    kind: Cause
    tensor: str
    text: str


@dataclass
class RemedyRun:
    """A remedy done and run before it is printed: its worst output's figures, judged by validate's rules."""

    passed: bool
    snr_db: float | None
    cosine: float | None


@dataclass
class Remedy:
    kind: RemedyKind
    text: str
    command: str | None = None  # one copy-pasteable line, when the remedy is a command
    measured: RemedyRun | None = None  # None: advice not measured (a rescale or clamp changes the model)


@dataclass
class SplitTrial:
    """One split diagnose considered, done as `prepare --split-at` would do it: the NPU part compiled for the job's
    SoC, the parts chained (CPU parts on onnxruntime's CPU, NPU parts on the HTP emulator) on diagnose's samples and
    judged against the whole model on the CPU."""

    split_at: list[str]
    cpu_part: Side
    reason: str  # why the cut is there
    command: str  # the prepare line that makes it
    measured: RemedyRun | None  # None: it could not be cut or compiled (error says why)
    outputs: list[OutputMetrics] = field(default_factory=list)
    npu_nodes: int = 0
    cpu_nodes: int = 0
    cpu_weight_bytes: int = 0  # the weights the split moves to the CPU: its cost, with cpu_nodes
    weight_bytes: int = 0  # the model's, as the parts store them
    seconds: float = 0.0
    error: str = ""




@dataclass
class DiagnoseResult:
    target: Path  # BUILD/<graph>/<SoC>
    graph: str
    soc: str
    precision: Precision
    source: Path
    inputs: JSON  # how the samples were made
    min_snr_db: float
    nodes: int  # nodes in the graph (Constant nodes aside)
    candidates: int  # float tensors that could be probed
    probes: list[Probe]  # by position
    first_bad: Probe | None  # the first probed tensor below the threshold, its node's inputs all good
    last_good: Probe | None  # the probe just before first_bad in topological order
    input_ranges: list[TensorRange]  # first_bad's node's inputs (graph inputs, weights, tensors)
    explanations: list[Explanation]
    remedies: list[Remedy]
    outputs_snr_db: float | None  # the worst graph output's SNR, here or in validate's record
    ok: bool  # every graph output is above the threshold
    compiles: int
    seconds: float
    note: str = ""
    split_at: list[str] = field(default_factory=list)  # where the best passing split cuts; empty: none passes
    cpu_part: Side | Literal[""] | None = None  # the part that split keeps on the CPU; "": no split passes
    split_reason: str = ""
    splits: list[SplitTrial] = field(default_factory=list)  # every split measured, the best first
    rescaled: RemedyRun | None = None  # an L2 norm's rescale remedy, done in the graph and run, when it applies
    blamed: str = ""  # why first_bad is before the tensor the threshold found, when it is
    outputs_cosine: float | None = None  # the worst graph output's cosine, here or in validate's record
    # The build's own binary (what validate runs, no tensor exposed) on the same samples, by validate's rules: the
    # figures the probes must explain; `ok` is its verdict.
    reference: list[OutputMetrics] = field(default_factory=list)
    samples_from: str = ""  # "validate's record" or "the options given"
    fits: list[MetricFit] = field(default_factory=list)  # what each failing output's error is made of
    answer: str = ""  # when no probed tensor is to blame: what was measured, and why the probes cannot tell


@dataclass(frozen=True)
class DiagnoseOptions:
    """The samples and the threshold diagnose probes with: the command line's options (same defaults)."""

    inputs: Path | None = None  # a samples folder, as validate takes it; None: validate's samples, else random
    random: int | None = None  # random seeded samples (1 when neither these nor validate's are there)
    seed: int = 0
    preprocess: str | Path | None = None  # how audio and image files become inputs
    min_snr_db: float | None = None  # None: validate's record's, else the precision's default
    graph: str | None = None  # in a shared context's job folder: which member graph
    probes_per_compile: int = PROBES_PER_COMPILE
    ranges: samples.Ranges = field(default_factory=dict)  # --range NAME=LO:HI: random integer inputs' values


@dataclass
class _Tensor:
    name: str
    position: int
    op_type: str
    node: str
    inputs: list[str] = field(default_factory=list)


def diagnose(target: Path, options: DiagnoseOptions = DiagnoseOptions(),
             steps: Callable[[str], None] | None = None) -> DiagnoseResult:
    """Diagnose one compiled job, BUILD/<graph>/<SoC>, with the samples the options give. The probe copies are
    compiled from the source ONNX alone, as a shared context's twin is: the emulator cannot load shared weights.
    `steps` hears of each long step as it starts (the build's binary, each probe compile, each split measured before
    it is advised, and its verdict)."""
    start = time.monotonic()
    say = steps or (lambda _text: None)
    o = options
    inputs, random, seed, min_snr_db, probes_per_compile = o.inputs, o.random, o.seed, o.min_snr_db, \
        o.probes_per_compile
    prep = samples.sample_source(inputs, random, o.preprocess)
    if min_snr_db is not None and not math.isfinite(min_snr_db):
        raise BadInput(f"--min-snr-db {min_snr_db:g}: give a finite number of dB, e.g. 30")
    if probes_per_compile < 1:
        raise BadInput("probes per compile must be 1 or more")
    record = job_record(Path(target), o.graph)
    if record.precision != Precision.FP16:
        raise BadInput(f"{target} was compiled at {record.precision}: diagnose supports fp16 jobs only so far "
                       "(a quantized copy that exposes a tensor quantizes it differently, e.g. a MatMul output "
                       "with its Relu's range); compile the graph at --precision fp16 and diagnose that")
    source = record.source
    if not source.is_file():
        raise BadInput(f"the source model {source} is gone: diagnose runs it on the CPU and the emulator")
    if sha256_file(source) != record.source_sha256:
        raise BadInput(f"{source} changed since the compile: compile again, then diagnose")
    htp._require()
    # validate's failure first: its samples and thresholds (unless others are given), the build's own binary.
    validated = ValidationRecord.read(record.validation_file)
    made_by = next(iter(splits_of({source: record.source_sha256})), None)
    part = made_by.part_of(source, record.source_sha256) if made_by is not None else None
    if inputs is None and random is None and validated is not None and validated.inputs:
        feeds, used = _validated_samples(record, validated.inputs)
        samples_from = "validate's record"
    elif made_by is not None and part is not None and part.runs_on == "npu":  # fed what the parts before it make
        made = chain.run_cpu(made_by, record.graph, inputs, random or 1, seed, prep, o.ranges)
        feeds, used = made.feeds(part), made.described(part)
        samples_from = "the options given" if inputs is not None or random is not None else "diagnose's default"
    else:
        feeds, used = samples.for_graph(source, record.graph, inputs, count=random or 1, seed=seed,
                                        preprocess=prep, ranges=o.ranges)
        samples_from = "the options given" if inputs is not None or random is not None else "diagnose's default"
    limit = thresholds_for(record.precision, {**(validated.thresholds if validated else {}),
                                              **({} if min_snr_db is None else {"min_snr_db": min_snr_db})})
    say(f"running the build's binary on the HTP emulator and {source.name} on the CPU, {len(feeds)} sample(s)")
    expected = samples.cpu_outputs(source, feeds)
    actual = _run_binary(record, feeds)
    task = tasks.recorded(validated.task_given if validated is not None else None, source)
    reference, _, ok = tasks.judge(task, source, expected, actual, limit)  # validate's verdict
    model = _load_full(source)
    tensors, outputs = _candidates(model)
    if not tensors:
        raise BadInput(f"{source} has no float tensors to compare")
    session = _Session(model, record, feeds, limit, topk_outputs(source), say)
    try:
        first_bad, last_good = _bisect(session, tensors, outputs, probes_per_compile)
        found, last_good = _blame(session, tensors, first_bad, last_good) if first_bad else (None, None)
        blamed = "" if found is None or first_bad is None or found.tensor == first_bad.tensor else (
            f"{found.tensor} measured {_db(found.snr_db)}, above the threshold, but its {found.op_type} "
            f"overflows fp16 inside: {first_bad.tensor} ({first_bad.op_type}), the first tensor below the "
            "threshold, reads it, so the error is made at " + found.tensor)
        first_bad = found
        ranges = _input_ranges(session, model, tensors, feeds, first_bad)
        nodes = sum(1 for n in model.graph.node if n.op_type != "Constant")
        candidates, no_tail = _split_points(session, tensors, first_bad, last_good, ranges) if first_bad else ([], "")
        trials = _prove(session, source, candidates, expected, task) if candidates else []
        rescaled = _rescale_trial(session, source, model, first_bad, ranges, expected, task) if first_bad else None
    except OSError as e:  # the probe models in TMPDIR: a full disk or a file size limit, said in one line
        if e.errno not in FULL:
            raise
        raise write_error(e, Path(tempfile.gettempdir())) from None
    finally:
        session.close()
    probes = sorted(session.probes.values(), key=lambda p: (p.position, p.tensor))
    explanations = explain(first_bad, ranges) if first_bad else []
    result = DiagnoseResult(Path(target), record.graph, record.soc, record.precision, source, used,
                            limit["min_snr_db"], nodes, len(tensors), probes, first_bad, last_good, ranges,
                            explanations, [], None, ok, session.compiles, 0.0, reference=reference,
                            samples_from=samples_from, fits=[] if ok else fits(source, expected, actual, limit),
                            splits=trials, blamed=blamed, rescaled=rescaled)
    result.outputs_snr_db = min((m.snr_db for m in reference if m.snr_db is not None), default=None)
    result.outputs_cosine = min((m.cosine for m in reference if m.cosine is not None), default=None)
    best = next((t for t in trials if t.measured is not None and t.measured.passed), None)
    if best is not None:
        result.split_at, result.cpu_part, result.split_reason = best.split_at, best.cpu_part, best.reason
    elif first_bad is not None:
        result.cpu_part, result.split_reason = "", no_tail or "no split measured passes as a chain"
    if first_bad is not None:
        result.remedies = remedies(result)
        if blamed:
            result.note = blamed
        elif first_bad.op_type in _MOVES and last_good is not None:
            result.note = (f"{first_bad.op_type} only moves values: the error is made before it, in the HTP's fused "
                           f"ops ending at {last_good.op_type} {last_good.node}; exposing a tensor splits its node's "
                           f"fusion with the next one and changes the HTP's numbers (here {last_good.tensor} measured "
                           f"{last_good.snr_db or 0:.1f} dB so exposed)")
        elif ok:
            result.note = ("the graph's outputs pass: this tensor's error does not reach them (fp16 error that a "
                           "later node absorbs)")
    elif not ok:
        result.answer = unblamed(result, session.probes)
        result.remedies = [Remedy(RemedyKind.CPU, (
            f"or run {result.graph} on the CPU on {result.soc} (bundle --accept {result.graph}@{result.soc}=REASON "
            "--accept-on cpu)"))]
    if not ok:
        threshold = _threshold_remedy(result, limit)
        if threshold is not None:
            result.remedies.insert(0 if first_bad is None else len(result.remedies), threshold)
    result.seconds = round(time.monotonic() - start, 2)
    return result


def _validated_samples(record: CompileRecord, given: JSON) -> tuple[list[Sample], JSON]:
    """The samples validate's record says it used: its folder (and preprocessing), its random count, seed and
    ranges, or for a split's part what the parts before it made of those."""
    if given.get("kind") == chain.CHAIN:
        made, part = chain.replay(given, record.graph, record.source, record.source_sha256)
        return made.feeds(part), made.described(part)
    if given.get("kind") == "loop":  # validate --loop: the encoder's samples are its own; the decoder's, the loop's
        if given.get("graph") != "encoder" or not isinstance(given.get("samples"), dict):
            raise BadInput(f"{record.graph} was validated inside its decode loop, whose inputs diagnose does not make "
                           "again: give them with --inputs DIR (or --random N)")
        given = given["samples"]
    if given.get("kind") != "files":
        return samples.for_graph(record.source, record.graph, count=int(given.get("samples") or 1),
                                 seed=int(given.get("seed") or 0), ranges=samples.recorded_ranges(given))
    folder = Path(str(given.get("folder")))
    if not folder.is_dir():
        raise BadInput(f"validate's samples {folder} are gone: pass them again with --inputs DIR (or --random "
                       "N)")
    return samples.for_graph(record.source, record.graph, folder, preprocess=samples.recorded_preprocess(given))


def _run_binary(record: CompileRecord, feeds: list[Sample]) -> list[Sample]:
    """The job's own EPContext model (a shared context's twin, as validate runs it) on the emulator."""
    run = record.emulated
    if run is None:
        raise BadInput(f"{record.folder} has no EPContext model of {record.graph} for the emulator: compile "
                       "again")
    path = record.folder / run.path
    if not path.is_file() or sha256_file(path) != run.sha256:
        raise BadInput(f"{path} changed since it was compiled: compile again, then diagnose")
    try:
        return htp.run_model(path, socs.find(record.soc), feeds, fp16=True)[0]
    except QnnDeployError as e:
        raise BadInput(f"the HTP emulator could not run {path.name}: {e}") from None


def unblamed(result: DiagnoseResult, probes: dict[str, Probe]) -> str:
    """What was measured when the build's binary fails and no probed tensor does: each failing output's figure in
    the binary against its figure with tensors exposed."""
    parts = []
    for m in result.reference:
        if m.passed:
            continue
        p = probes.get(m.name)
        probed = (f"{_figure(p.snr_db, p.cosine)} with tensors exposed" if p is not None else
                  "not probed (not a float tensor the probes expose)")
        parts.append(f"{m.name} {_figure(m.snr_db, m.cosine)} in the build's binary, {probed}")
    return ("no probed tensor is to blame: " + "; ".join(parts) + ". Exposing a tensor splits the HTP's fusion of its "
            "node with the next one, which changes its numbers: the probes measure another computation than the "
            "binary's, so they cannot say where its error is made. What the failing metric measures on the output "
            "says whether another metric fits it:")


def _figure(snr: float | None, cosine: float | None) -> str:
    return f"{'-' if snr is None else f'{snr:.1f}'} dB (cosine {'-' if cosine is None else f'{cosine:.7f}'})"


def _threshold_remedy(result: DiagnoseResult, limits: Thresholds) -> Remedy | None:
    """validate run as diagnose measured, with thresholds every output passes (fitting_thresholds), as a command."""
    options = fitting_thresholds(result.fits, result.reference, limits)
    if not options:
        return None
    build = result.target.parent.parent
    i = result.inputs
    if i.get("kind") == "files":
        spec = samples.recorded_preprocess(i)
        given = f" --inputs {_q(i['folder'])}" + ("" if spec is None else f" --preprocess {_q(spec)}")
    else:
        given = f" --random {i.get('samples', 1)} --seed {i.get('seed', 0)}"
    looser = [k for k, v in options.items() if (v > limits[k] if k == "atol" else v < limits.get(k, 1.0))]
    flags = "".join(f" --{k.replace('_', '-')} {v:.10g}" for k, v in options.items())
    reach = result.outputs_snr_db
    weak = (" (under 20 dB the outputs barely resemble the CPU's: not advised)"
            if reach is not None and reach < 20 else "")
    return Remedy(RemedyKind.THRESHOLD, (
        "validate with the thresholds that fit, only with a reason why they are enough, which validate records"
        + (f": the outputs reach {reach:.1f} dB{weak}" if reach is not None else "")),
        f"qnndeploy validate {_q(build)} --graph {_q(result.graph)} --soc {result.soc}{given}{flags}"
        + (' --reason "REASON"' if looser else ""),
        RemedyRun(True, result.outputs_snr_db, result.outputs_cosine))  # what the build's binary measured


def _db(snr: float | None) -> str:
    return "- dB" if snr is None else f"{snr:.1f} dB"


def check_plot(path: Path) -> None:
    """Refuse a --plot FILE.png that could not be written, before the run (which compiles several times): a missing
    or read-only folder, a folder or symlink in its place, a name too long (fileio.check_writable)."""
    path = Path(path)
    check_writable(path, "--plot")
    if not path.parent.is_dir():
        raise BadInput(f"--plot {path}: the folder {path.parent} does not exist; create it or choose another "
                       "place")
    if path.is_dir():
        raise BadInput(f"--plot {path} is a folder; give a file name, e.g. {path / 'curve.png'}")


def job_record(target: Path, graph: str | None = None) -> CompileRecord:
    """The compile record of BUILD/<graph>/<SoC>; in a shared context's folder, the member `graph`."""
    if target.is_file():
        raise BadInput(f"{target} is {file_kind(target.name)}, not a job folder: pass BUILD/<graph>/<SoC>")
    if not (target / "compile.json").is_file():
        raise BadInput(f"{target}: no compile record (compile.json); pass a job folder, BUILD/<graph>/<SoC>")
    records = [r for r in read_build(target.parent.parent) if r.folder.resolve() == target.resolve()]
    if not records:
        raise BadInput(f"{target}: no compile record found under {target.parent.parent}")
    names = [r.graph for r in records]
    if graph is not None and graph not in names:
        raise BadInput(f"{target} holds graph(s) {', '.join(names)}, not {graph}")
    if graph is None and len(records) > 1:
        raise BadInput(f"{target} is a shared context of graphs {', '.join(names)}: pass --graph GRAPH")
    record = next(r for r in records if graph in (None, r.graph))
    if record.status != "ok" or record.output(EPCONTEXT) is None:
        raise BadInput(f"{target}: the compile failed or made no EPContext model: nothing to diagnose")
    return record


# --- the probe runs -------------------------------------------------------------------------------------------------

class _Session:
    """Compiles and runs probe models: each run exposes some tensors and records their Probes."""

    def __init__(self, model: onnx.ModelProto, record: CompileRecord, feeds: list[Sample], limits: Thresholds,
                 topk: dict[str, TopK], steps: Callable[[str], None] = lambda _text: None) -> None:
        self.model, self.record, self.feeds = model, record, feeds
        self.limits, self.topk, self.steps = limits, topk, steps
        self.tmp = tempfile.TemporaryDirectory(prefix="qnndeploy-diagnose-")
        self.probes: dict[str, Probe] = {}
        self.compiles = 0

    def close(self) -> None:
        self.tmp.cleanup()

    def run(self, names: list[str], tensors: dict[str, _Tensor], again: bool = False) -> None:
        """One compile exposing `names` (the graph outputs come along); a tensor probed before is measured again
        only when it is in `names` and `again` is set."""
        import numpy as np

        self.compiles += 1
        self.steps(f"probe compile {self.compiles}: {len(names)} tensor(s) exposed, compiled for {self.record.soc} "
                   "and run on the HTP emulator")
        path = Path(self.tmp.name) / f"probe{self.compiles}.onnx"
        names_out, expected = self._on_cpu(names, path)
        try:
            actual = htp.run_model(path, socs.find(self.record.soc), self.feeds, fp16=True,
                                   provider=_provider(self.record))[0]
        except QnnDeployError as e:
            raise BadInput(f"the HTP emulator could not compile or run the probe model exposing "
                           f"{len(names)} tensor(s) for {self.record.soc}: {e}") from None
        # The graph's outputs by validate's rules (top-k sets, gathered rows aligned), the other tensors by its verdict.
        own = [o.name for o in self.model.graph.output]
        judged = {m.name: m for m in judge_outputs([{n: e[n] for n in own} for e in expected],
                                                   [{n: a[n] for n in own} for a in actual], self.limits,
                                                   topk=self.topk)}
        for name in names_out:
            t = tensors.get(name)
            if t is None or (name in self.probes and not (again and name in names)):
                continue
            ref = np.stack([e[name] for e in expected])
            out = np.stack([a[name] for a in actual])
            m = metrics(ref, out)
            if name in judged:
                o = judged[name]
                snr, cosine, diff, bad = o.snr_db, o.cosine, o.max_abs_diff, not o.passed
            else:
                snr, cosine, diff, bad = m["snr_db"], m["cosine"], m["max_abs_diff"], not verdict(m, self.limits)[0]
            self.probes[name] = Probe(name, t.op_type, t.node, t.position, snr, cosine, diff, bad, self.compiles,
                                      ranges(name, ref))

    def cpu_ranges(self, names: list[str]) -> dict[str, TensorRange]:
        """The ranges of `names` on the CPU alone: no compile."""
        import numpy as np

        _, runs = self._on_cpu(names, Path(self.tmp.name) / "ranges.onnx")
        return {n: ranges(n, np.stack([r[n] for r in runs])) for n in names}

    def _on_cpu(self, names: list[str], path: Path) -> tuple[list[str], list[dict[str, Any]]]:
        """Write the model exposing `names` at `path` and run it on the CPU: its output names, one run per sample."""
        import onnxruntime as ort

        _write_probe_model(self.model, names, path)
        try:
            cpu = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            got = [o.name for o in cpu.get_outputs()]
            return got, [dict(zip(got, cpu.run(None, s), strict=True)) for s in self.feeds]
        except Exception as e:  # noqa: BLE001 onnxruntime's own error types
            raise BadInput(f"onnxruntime could not run the probe model on the CPU: {first_line(e)}") from None


def _provider(record: CompileRecord) -> dict[str, str]:
    """The QNN EP options the job was compiled with that change how the HTP computes (VTCM, optimization mode)."""
    settings = record.htp or HtpSettings()
    found = {"vtcm_mb": settings.vtcm_mb, "htp_graph_finalization_optimization_mode": settings.optimization_mode}
    return {k: str(v) for k, v in found.items() if v not in (None, False)}


def _bisect(session: _Session, tensors: dict[str, _Tensor], outputs: list[str], k: int
            ) -> tuple[Probe | None, Probe | None]:
    """Narrow to the first bad probe whose earlier neighbour in topological order and whose node's inputs are all
    good. Returns (first bad, last good before it).

    Exposing a tensor can change the HTP's numbers (it breaks the fusion of its node with the next), so the verdict
    is confirmed by one more compile that exposes the candidate, its neighbour and its node's inputs together; when
    that moves the first bad tensor, narrowing goes on (each candidate is confirmed once)."""
    order = sorted(tensors.values(), key=lambda t: t.position)
    index = {t.name: i for i, t in enumerate(order)}
    session.run([order[i].name for i in _spread(list(range(len(order))), k, ends=True)], tensors)
    confirmed: set[int] = set()
    while True:
        bad = [index[p.tensor] for p in session.probes.values() if p.bad]
        if not bad:
            return None, None
        b = min(bad)
        a = max((index[n] for n in session.probes if index[n] < b), default=-1)
        gap = [i for i in range(a + 1, b) if order[i].name not in session.probes]
        own = [n for n in order[b].inputs if n in tensors and n not in session.probes]
        if gap or own:
            session.run(list(dict.fromkeys([order[i].name for i in _spread(gap, k)] + own)), tensors)
            continue
        inputs = [n for n in order[b].inputs if n in tensors]
        if b in confirmed or (a < 0 and not inputs):  # confirmed, or nothing before it to measure it with
            return session.probes[order[b].name], session.probes[order[a].name] if a >= 0 else None
        confirmed.add(b)
        together = ([order[a].name] if a >= 0 else []) + [order[b].name] + inputs
        session.run(list(dict.fromkeys(together)), tensors, again=True)


def _spread(items: list[int], k: int, ends: bool = False) -> list[int]:
    """k items evenly spread: with `ends`, the first and last among them; else cutting the list into k+1 parts."""
    if len(items) <= k:
        return items
    if ends:
        return sorted({items[round(j * (len(items) - 1) / max(k - 1, 1))] for j in range(k)})
    return sorted({items[(j + 1) * len(items) // (k + 1)] for j in range(k)})


def _input_ranges(session: _Session, model: onnx.ModelProto, tensors: dict[str, _Tensor], feeds: list[Sample],
                  first_bad: Probe | None) -> list[TensorRange]:
    """Ranges of what first_bad's node reads: graph inputs from the samples, weights, tensors as probed."""
    import numpy as np
    from onnx import numpy_helper

    if first_bad is None:
        return []
    inits = {t.name: t for t in model.graph.initializer}
    found = []
    for name in dict.fromkeys(tensors[first_bad.tensor].inputs):
        if name in session.probes:
            found.append(session.probes[name].ranges)
        elif name in feeds[0] and np.issubdtype(feeds[0][name].dtype, np.floating):
            found.append(ranges(name, np.stack([s[name] for s in feeds])))
        elif name in inits and inits[name].data_type in _FLOATS:
            found.append(ranges(name, numpy_helper.to_array(inits[name])))
    return found


# --- the model's tensors and probe copies ---------------------------------------------------------------------------

def _load_full(source: Path) -> onnx.ModelProto:
    """The source model with its weights (external data too), checked by onnxio's loader first."""
    import onnx

    load_model(source, weights=False)
    try:
        return onnx.load(str(source))
    except Exception as e:  # noqa: BLE001 onnx raises several types for unreadable external data
        raise BadInput(f"cannot read {source} with its weights: {first_line(e)}") from None


def _candidates(model: onnx.ModelProto) -> tuple[dict[str, _Tensor], list[str]]:
    """Every float tensor a node makes (Constant nodes aside), with a known type: name -> _Tensor; and the graph's
    float outputs."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 a model shape inference cannot follow: use the declared types only
        inferred = model
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*g.value_info, *g.output, *g.input)
             if v.type.WhichOneof("value") == "tensor_type"}
    found: dict[str, _Tensor] = {}
    position = 0
    for node in model.graph.node:
        if node.op_type == "Constant":
            continue
        for out in node.output:
            if out and types.get(out) in _FLOATS:
                found[out] = _Tensor(out, position, node.op_type, node.name or f"{node.op_type}_{position}",
                                     [i for i in node.input if i])
        position += 1
    outputs = [o.name for o in model.graph.output if o.name in found]
    return found, outputs


def _write_probe_model(model: onnx.ModelProto, names: list[str], path: Path) -> None:
    """A copy of `model` whose outputs are its own plus `names`, typed by shape inference."""
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    inferred = onnx.shape_inference.infer_shapes(probe)
    typed = {v.name: v for v in inferred.graph.value_info}
    have = {o.name for o in probe.graph.output}
    for name in names:
        if name in have:
            continue
        value = typed.get(name)
        if value is None:
            raise BadInput(f"shape inference gives no type for tensor {name}: it cannot be exposed as an "
                           "output")
        probe.graph.output.append(value)
    save_model(probe, path, probe.ByteSize() > 1_800_000_000)


# --- what the numbers say ---------------------------------------------------------------------------------------

def ranges(name: str, values: np.ndarray) -> TensorRange:
    import numpy as np

    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if not v.size:
        return TensorRange(name, math.nan, math.nan, math.nan, None, 0.0, 0.0, 0.0, None, None)
    mag = np.abs(v)
    nonzero = mag[mag > 0]
    low = float(nonzero.min()) if nonzero.size else None
    return TensorRange(name, float(v.min()), float(v.max()), float(mag.max()), low,
                  float((mag > FP16_MAX).mean()),
                  float((nonzero < FP16_MIN_NORMAL).mean()) if nonzero.size else 0.0,
                  float((nonzero < FP16_FLUSH).mean()) if nonzero.size else 0.0,
                  float(mag.max()) / low if low else None,
                  float(mag.max() / np.median(nonzero)) if nonzero.size else None)


def explain(bad: Probe, inputs: list[TensorRange]) -> list[Explanation]:
    """Why fp16 cannot hold the guilty tensor or what its node reads, from the CPU values; each reason once."""
    seen = [bad.ranges, *inputs]
    found = [Explanation(Cause.OVERFLOW, r.tensor, (
        f"fp16 overflow: {r.tensor} reaches {r.max_abs:.3g} on the CPU ({r.over_fp16_max:.1%} of its values above "
        f"65504, fp16's largest value)")) for r in seen if r.over_fp16_max > 0]
    found += [Explanation(Cause.UNDERFLOW, r.tensor, (
        f"fp16 underflow: {r.subnormal_share:.0%} of {r.tensor}'s nonzero values are below 6.1e-5, fp16's subnormal "
        f"range (down to {r.min_nonzero_abs:.2g}; {r.flushed_share:.0%} are below 3e-8 and become 0)"))
        for r in seen if r.subnormal_share >= _TINY_SHARE]
    found += [Explanation(Cause.DYNAMIC_RANGE, r.tensor, (
        f"huge dynamic range in {r.tensor}: magnitudes from {r.min_nonzero_abs:.2g} to {r.max_abs:.3g} (max/min "
        f"nonzero {r.dynamic_range:.2g}; max/median {r.spread:.2g}, beyond fp16's 11 significant bits)"))
        for r in seen if r.spread is not None and r.spread > _SPREAD and r.dynamic_range is not None]
    inner = _inner_sum(bad, inputs)
    if inner is not None:
        found.append(Explanation(Cause.ACCUMULATION, bad.tensor, (
            f"fp16 overflow inside {bad.op_type} {bad.node}: its sum of squares reaches {inner[0]:.3g} "
            f"({inner[1]}), above 65504, fp16's largest value, although its output fits")))
    if bad.op_type in _SUMS and inputs:
        big = max(inputs, key=lambda r: r.max_abs)
        out = max(abs(bad.ranges.min), abs(bad.ranges.max))
        if out > 0 and big.max_abs / out > _CANCELLATION:
            found.append(Explanation(Cause.CANCELLATION, bad.tensor, (
                f"cancellation in {bad.op_type} {bad.node}: it reads values up to {big.max_abs:.3g} ({big.tensor}), "
                f"where fp16's step is {_ulp(big.max_abs):.2g}, and returns values up to {out:.3g}")))
    if not found:
        found.append(Explanation(Cause.ROUNDING, bad.tensor, (
            f"no value out of fp16's range: {bad.op_type} {bad.node} loses precision to fp16 rounding (values "
            f"{bad.ranges.min:.3g} to {bad.ranges.max:.3g})")))
    return found


def _inner_sum(bad: Probe, inputs: list[TensorRange]) -> tuple[float, str] | None:
    """The sum of squares an L2 norm accumulates, when fp16 cannot hold it: ReduceL2's is its output squared (a
    ScaleNorm over values near 700 sums 1e7), an LpNormalization's at least its largest input squared."""
    if bad.op_type == "ReduceL2" and bad.ranges.max_abs ** 2 > FP16_MAX:
        return bad.ranges.max_abs ** 2, f"the square of its largest output, {bad.ranges.max_abs:.3g}"
    if bad.op_type == "LpNormalization" and inputs and max(r.max_abs for r in inputs) ** 2 > FP16_MAX:
        big = max(inputs, key=lambda r: r.max_abs)
        return big.max_abs ** 2, f"at least the square of {big.tensor}'s largest value, {big.max_abs:.3g}"
    return None


def _l2_scale(sum_of_squares: float) -> float:
    """The power of two that brings an L2 norm's sum of squares to 8192 or less."""
    return float(2 ** math.ceil(math.log2(math.sqrt(sum_of_squares / 8192))))


def _rescale_trial(session: _Session, source: Path, model: onnx.ModelProto, bad: Probe, inputs: list[TensorRange],
                   expected: list[Sample], task: tasks.Task) -> RemedyRun | None:
    """The rescale remedy of an L2 norm whose sum of squares overflows fp16, done in a copy of the graph (Mul by 1/s
    before the norm; for ReduceL2 Mul by s after it: an LpNormalization's output does not change) and the whole model
    run on the HTP emulator on diagnose's samples, judged against the CPU by validate's rules; None when it does not
    apply or cannot be run."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    inner = _inner_sum(bad, inputs)
    node = next((n for n in model.graph.node if n.name == bad.node), None)
    if inner is None or node is None:
        return None
    scale = _l2_scale(inner[0])
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    nodes = list(copy.graph.node)
    target = next(n for n in nodes if n.name == bad.node)
    x, y = target.input[0], target.output[0]
    copy.graph.initializer.extend([numpy_helper.from_array(np.array(1 / scale, np.float32), f"{x}__rescale_in"),
                                   numpy_helper.from_array(np.array(scale, np.float32), f"{y}__rescale_out")])
    before = helper.make_node("Mul", [x, f"{x}__rescale_in"], [f"{x}__rescaled"], name=f"{target.name}__rescale_in")
    target.input[0] = f"{x}__rescaled"
    after = []
    if target.op_type == "ReduceL2":
        target.output[0] = f"{y}__rescaled"
        after = [helper.make_node("Mul", [f"{y}__rescaled", f"{y}__rescale_out"], [y],
                                  name=f"{target.name}__rescale_out")]
    at = nodes.index(target)
    copy.graph.ClearField("node")
    copy.graph.node.extend([*nodes[:at], before, target, *after, *nodes[at + 1:]])
    path = Path(session.tmp.name) / "rescaled" / source.name
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(copy, str(path))
    try:
        made = htp.run_model(path, socs.find(session.record.soc), session.feeds, fp16=True,
                             provider=_provider(session.record))[0]
    except QnnDeployError:
        return None
    names = list(expected[0])
    judged, _, passed = tasks.judge(task, source, expected, [{n: o[n] for n in names} for o in made], session.limits)
    return RemedyRun(passed, min((m.snr_db for m in judged if m.snr_db is not None), default=None),
                     min((m.cosine for m in judged if m.cosine is not None), default=None))


def _ulp(x: float) -> float:
    """fp16's spacing at magnitude x (normal range)."""
    return 2.0 ** (math.floor(math.log2(max(x, FP16_MIN_NORMAL))) - 10)


def _unsafe(r: TensorRange) -> bool:
    """Values fp16 cannot hand over: over 65504, or a share of them in its subnormal range."""
    return r.over_fp16_max > 0 or r.subnormal_share >= _TINY_SHARE


def _blame(session: _Session, tensors: dict[str, _Tensor], bad: Probe, good: Probe | None
           ) -> tuple[Probe, Probe | None]:
    """The tensor where the error is made: first_bad, or a probed tensor its node reads whose own node overflows
    fp16 (values over 65504, or an L2 norm's sum of squares) although it measured above the threshold (a ReduceL2
    at 1 dB passes --min-snr-db 0). So the blame, and the splits tried, do not move with the threshold."""
    for _ in range(64):
        found = next((session.probes[n] for n in tensors[bad.tensor].inputs
                      if n in session.probes and session.probes[n].position < bad.position
                      and _overflows(session, tensors, session.probes[n])), None)
        if found is None:
            break
        bad = found
        good = max((p for p in session.probes.values() if p.position < bad.position),
                   key=lambda p: p.position, default=None)
    return bad, good


def _overflows(session: _Session, tensors: dict[str, _Tensor], probe: Probe) -> bool:
    reads = [session.probes[n].ranges for n in tensors[probe.tensor].inputs if n in session.probes]
    return probe.ranges.over_fp16_max > 0 or _inner_sum(probe, reads) is not None


@dataclass(frozen=True)
class _SplitPoint:
    """A split worth measuring: the tensors it cuts at, the part left on the CPU, and why this cut."""

    at: list[str]
    cpu: Side
    why: str


def _split_points(session: _Session, tensors: dict[str, _Tensor], bad: Probe, good: Probe | None,
                  inputs: list[TensorRange]) -> tuple[list[_SplitPoint], str]:
    """The splits worth measuring, and why there is no tail split when there is none.
    Both directions: the front end up to the bad tensor on the CPU; and the tail after the last good tensor,
    moved back while the tensor the NPU would hand over cannot be held in fp16 (values the NPU has already flushed
    to 0 or made infinite, which the CPU tail cannot recover; such a tensor may still show a good SNR)."""
    found = [_SplitPoint([bad.tensor], Side.HEAD, f"the front end up to {bad.tensor} ({bad.op_type} {bad.node})")]
    if good is None:
        return found, f"nothing before {bad.tensor} measured good"
    cut, why = [good.tensor], "the last good tensor"
    before = [n for n in tensors[good.tensor].inputs if n in tensors]
    if bad.op_type in _MOVES and before:  # the error is made in the node before it: that node goes too
        cut, why = before, f"the input of {good.op_type} {good.node}, whose fused output goes wrong"
    frontier = next((r.tensor for r in inputs if _unsafe(r) and r.tensor in tensors), None)
    for _ in range(64):  # along the chain of tensors fp16 cannot hold, towards the inputs
        if frontier is None:
            break
        feeding = list(dict.fromkeys(n for n in tensors[frontier].inputs if n in tensors))
        if not feeding:
            return found, (f"{frontier} is already out of fp16's range, and so is what makes it, from the graph's "
                           "inputs on")
        ranged = session.cpu_ranges(feeding)
        worse = [n for n in feeding if _unsafe(ranged[n])]
        cut, why = feeding, (f"{frontier} is out of fp16's range: the NPU would hand it over flushed to 0 or "
                             "infinite")
        frontier = worse[0] if worse else None
    return [*found, _SplitPoint(cut, Side.TAIL, why)], ""


def _prove(session: _Session, source: Path, candidates: list[_SplitPoint], expected: list[Sample],
           task: tasks.Task) -> list[SplitTrial]:
    """Each split done before it is advised: cut as prepare --split-at cuts, the NPU part compiled for the job's SoC
    with the probes' settings, the chain run on diagnose's samples and judged against the whole model on the CPU by
    validate's rules. The best first (_rank)."""
    trials = []
    for k, point in enumerate(candidates):
        label = f"split --split-at {','.join(point.at)} --cpu-part {point.cpu}"
        session.steps(f"{label}: cut, compiled and run as a chain ({k + 1} of {len(candidates)})")
        trial = _trial(session, source, Path(session.tmp.name) / f"split{k}" / source.name, point, expected, task)
        trials.append(trial)
        session.steps(f"{label}: {'passes' if trial.measured is not None and trial.measured.passed else 'fails'} "
                      "as a chain")
    return sorted(trials, key=_rank)


def _rank(t: SplitTrial) -> tuple[bool, int, int, float, float]:
    """Passing first; among those, the cheapest: the fewest weight bytes, then nodes, moved to the CPU (what a split
    costs the app: both pass validate's rules, and the front end up to a late bad tensor on the CPU always measures
    best), then by the worst output's SNR and cosine."""
    m = t.measured
    if m is None:
        return (True, 0, 0, math.inf, math.inf)
    cost = (t.cpu_weight_bytes, t.cpu_nodes) if m.passed else (0, 0)
    return (not m.passed, *cost, -(m.snr_db if m.snr_db is not None else -math.inf),
            -(m.cosine if m.cosine is not None else -math.inf))


def _trial(session: _Session, source: Path, out: Path, point: _SplitPoint, expected: list[Sample],
           task: tasks.Task) -> SplitTrial:
    """One split cut into `out`'s folder, compiled and run as a chain (see _prove)."""
    start = time.monotonic()
    command = (f"qnndeploy prepare {_q(source)} --split-at {_q(','.join(point.at))} --cpu-part {point.cpu} "
               f"-o {_q(_split_out(source))}")
    trial = SplitTrial(point.at, point.cpu, point.why, command, None)
    try:
        out.parent.mkdir(parents=True)
        slim = load_model(source, weights=False)
        plans = cutting.in_two(slim.graph, point.at, point.cpu)
        values, cut = cutting.cut_values(slim, plans)
        head, tail, record = cutting.split_paths(out)
        parts = cutting.write_parts(source, plans, [head, tail], values)
        split = write_split(record, source, cut, parts)
        trial.npu_nodes = sum(len(p.nodes) for p in plans if p.runs_on == "npu")
        trial.cpu_nodes = sum(len(p.nodes) for p in plans if p.runs_on == "cpu")
        trial.cpu_weight_bytes = sum(p.weight_bytes for p in parts if p.runs_on == "cpu")
        trial.weight_bytes = sum(p.weight_bytes for p in parts)

        def runner(part: SplitPart, feeds: list[Sample]) -> list[Sample]:
            if part.runs_on == "cpu":
                return samples.cpu_outputs(part.path, feeds)
            try:
                return htp.run_model(part.path, socs.find(session.record.soc), feeds, fp16=True,
                                     provider=_provider(session.record))[0]
            except QnnDeployError as e:
                raise BadInput(f"the NPU part did not compile or run on the HTP emulator: {e}") from None

        values_run = chain.run(split, session.feeds, runner)
        names = list(expected[0])
        judged, _, passed = tasks.judge(task, source, expected, [{n: v[n] for n in names} for v in values_run],
                                        session.limits)
    except QnnDeployError as e:
        trial.error = first_line(e)
    else:
        trial.outputs = judged
        trial.measured = RemedyRun(passed, min((m.snr_db for m in judged if m.snr_db is not None), default=None),
                                   min((m.cosine for m in judged if m.cosine is not None), default=None))
    trial.seconds = round(time.monotonic() - start, 2)
    return trial


def _split_out(source: Path) -> Path:
    """Where a printed split writes its parts (model.split.advised_output, as check prints it)."""
    return cutting.advised_output(source)


def remedies(result: DiagnoseResult) -> list[Remedy]:
    """What to do about first_bad, as commands where one exists: each split that passed as a chain, the best first,
    with what it measured (else the CPU); clamping or rescaling advice by the explanation, not measured (it changes
    the model); the threshold remedy is _threshold_remedy's."""
    bad = result.first_bad
    assert bad is not None
    out = _split_out(result.source)
    kinds = {e.kind for e in result.explanations}
    found: list[Remedy] = []
    for t in result.splits:
        if t.measured is None or not t.measured.passed:
            continue
        npu, cpu = (Side.TAIL, Side.HEAD) if t.cpu_part == Side.HEAD else (Side.HEAD, Side.TAIL)
        where = (f"keep {t.reason} on the CPU, the rest on the NPU" if t.cpu_part == Side.HEAD else
                 f"keep the tail after {', '.join(t.split_at)} on the CPU, the front on the NPU (cut there: "
                 f"{t.reason})")
        found.append(Remedy(RemedyKind.SPLIT, (
            f"{where}: {out.stem}-{npu}.onnx compiled for the NPU, {out.stem}-{cpu}.onnx on the CPU, which moves "
            f"{_cost(t)} to the CPU; measured as a chain: {_measured(t.measured)}"), t.command, t.measured))
    if not found:
        tried = "; ".join(f"{t.command.split(' --split-at ')[1].split(' -o ')[0]}: {_trial_figure(t)}"
                          for t in result.splits)
        found.append(Remedy(RemedyKind.CPU, (
            f"no split passes: {result.split_reason}" + (f" (measured as chains: {tried})" if tried else "")
            + f"; run {result.graph} on the CPU on {result.soc} (bundle --accept {result.graph}@{result.soc}=REASON "
            "--accept-on cpu), or rescale the model")))
    low = [r for r in result.input_ranges if r.subnormal_share >= _TINY_SHARE and r.min_nonzero_abs is not None]
    if bad.op_type in _TINY_OPS and low and bad.op_type != "Exp":
        r = min(low, key=lambda r: r.min_nonzero_abs or 0.0)
        what = "denominator" if bad.op_type in ("Div", "Reciprocal") else "input"
        found.append(Remedy(RemedyKind.CLAMP, (
            f"{bad.op_type} of values down to {r.min_nonzero_abs:.2g}: add Max({r.tensor}, 1e-4) before it (a "
            f"floor on its {what} that fp16 holds), or compute {_TINY_OPS[bad.op_type]} on the CPU (split); "
            + _UNMEASURED)))
    elif (inner := _inner_sum(bad, result.input_ranges)) is not None:
        reads = max(result.input_ranges, key=lambda r: r.max_abs, default=None)
        scale, done = _l2_scale(inner[0]), result.rescaled
        undo = f" and multiply its result by {scale:g}" if bad.op_type == "ReduceL2" else ""
        found.append(Remedy(RemedyKind.RESCALE, (
            f"divide {reads.tensor if reads else 'its input'} by {scale:g} before {bad.node}{undo} (an L2 norm of "
            f"x/{scale:g} is the norm of x over {scale:g}: the sum of squares then fits), in the model's code, or "
            "compute it on the CPU (split); " + (
                f"measured with the scale put into the graph, on the HTP emulator: {_measured(done)}" if done else
                _UNMEASURED)), measured=done))
    elif bad.op_type == "Exp" and "overflow" in kinds:
        found.append(Remedy(RemedyKind.CLAMP, (
            f"Exp overflows fp16 above 11.09: subtract the max first (as Softmax does) or add Min(x, 11) before "
            f"{bad.node}; " + _UNMEASURED)))
    elif "overflow" in kinds:
        over = bad.ranges if bad.ranges.over_fp16_max > 0 else max(
            (r for r in result.input_ranges if r.over_fp16_max > 0), key=lambda r: r.max_abs)
        scale = 10 ** math.ceil(math.log10(over.max_abs / 8192))
        found.append(Remedy(RemedyKind.RESCALE, (
            f"{over.tensor} reaches {over.max_abs:.3g}: scale it down by {scale:g} where it is made (e.g. in the "
            f"weights or constants before it) and undo the scale later, or compute it on the CPU (split); "
            + _UNMEASURED)))
    elif "cancellation" in kinds or "underflow" in kinds:
        found.append(Remedy(RemedyKind.RESCALE, (
            f"rescale before {bad.node} so that its inputs and result lie between 1e-3 and 1e3 (subtract a large "
            f"offset or normalize first, in the CPU part if needed); " + _UNMEASURED)))
    return found


def _measured(m: RemedyRun) -> str:
    return (f"{'passes' if m.passed else 'fails'}, worst output {_db(m.snr_db)}"
            + ("" if m.cosine is None else f", cosine {m.cosine:.6f}"))


def _cost(t: SplitTrial) -> str:
    """What a split moves to the CPU: its nodes and weights, of the whole model's."""
    nodes = f"{t.cpu_nodes} of {t.cpu_nodes + t.npu_nodes} nodes"
    return nodes if not t.weight_bytes else f"{nodes} and {_mb(t.cpu_weight_bytes)} of {_mb(t.weight_bytes)} of weights"


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} KB"


def _trial_figure(t: SplitTrial) -> str:
    return _measured(t.measured) if t.measured is not None else f"not measured ({t.error})"


def _q(value: object) -> str:
    return shlex.quote(str(value))

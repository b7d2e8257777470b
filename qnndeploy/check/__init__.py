"""NPU readiness of an ONNX model: what would stop a static HTP compile, measured where it can be.

Findings come from reading the graph (shapes, dtypes, quantization, control flow, size) and from partitioning
the model for the real QNN HTP backend on the host (onnxruntime-qnn): every node the HTP does not take is
listed. The graph is read without its weights, so checking a model of many GB is quick.
"""

from __future__ import annotations

import logging
import math
import shlex
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base import socs
from qnndeploy.base.errors import first_line
from qnndeploy.base.htparch import HtpArch
from qnndeploy.base.kinds import Precision
from qnndeploy.base.names import PREPARED_SUFFIX
from qnndeploy.base.socs import Soc
from qnndeploy.check import rules
from qnndeploy.check.rules import PARAM_DTYPES, Finding, PrepareFix, Severity, merged
from qnndeploy.model import fuse, loadplan, quantize, rewrite, samples
from qnndeploy.model import split as cutting
from qnndeploy.model.onnxio import (
    MAX_FOLDED_BYTES,
    TensorInfo,
    all_tensors,
    default_opset,
    dtype_name,
    int_input_ranges,
    load_model,
    oversized_constants,
    real_inputs,
    tensor_info,
)
from qnndeploy.qnn import htp, refusals
from qnndeploy.qnn.htp import CpuNode, HtpMeasurement, htp_takes_nothing, measure_htp, soc_takes_nothing

if TYPE_CHECKING:
    import onnx

# Exit codes of `qnndeploy check` (README "Exit codes").
EXIT_READY, EXIT_FIXABLE, EXIT_NOT_READY = 0, 10, 11


class Verdict(StrEnum):
    READY = "ready"
    FIXABLE = "fixable"  # prepare fixes it
    NOT_READY = "not ready"  # needs a re-export


VERDICT_EXIT = {Verdict.READY: EXIT_READY, Verdict.FIXABLE: EXIT_FIXABLE, Verdict.NOT_READY: EXIT_NOT_READY}

# The findings on a decoder's export that prepare --generate fixes by making its static prompt and decode graphs.
DECODER_FIXES = frozenset({"dynamic-dims", "batch", "int64", "output-shape"})

LONG_MEASUREMENT_S = 30  # a measurement expected to take up to this long gets no notice
# A w8a16/w4a16 measure quantizes the whole model: Whisper large-v3's encoder (3.0 GB of fp32 weights) was killed by
# the OOM killer at 23.6 GB on a 24 GB machine. Above this the refusals measured here are read off the graph.
QUANTIZED_MEASURE_MAX = 2 << 30


@dataclass
class CheckReport:
    path: str
    graph: str
    opset: int
    nodes: int
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    parameters: int
    weight_mb_fp16: float
    weight_mb_8bit: float
    htp: HtpMeasurement
    findings: list[Finding]
    prepare_command: str | None  # one line fixing every fixable finding, when there are any
    placeholders: list[str]  # words in prepare_command to replace with the app's sizes or values (D2, VALUE…)
    verdict: Verdict
    load: rules.LoadAdvice | None = None  # the parts it needs on this SoC at each precision, and why

    @property
    def exit_code(self) -> int:
        return VERDICT_EXIT[self.verdict]


# --- the check ------------------------------------------------------------------------------------

def check_model(path: Path, soc: str | Soc | None = None, measure: bool = True,
                precision: Precision = Precision.FP16,
                timeout: float | None = htp.DEFAULT_TIMEOUT_S, say: Callable[[str], None] | None = None,
                context_bytes: int | None = None) -> CheckReport:
    """Read the graph, measure op support on the HTP when shapes allow, and give a verdict with fixes.
    With precision w8a16 or w4a16 the measured graph is the QDQ-quantized one compile would build. The measurement gets
    `timeout` seconds; `say` hears what to expect before a measurement that may take long. A model whose weights
    stores more than `context_bytes` (default: the load budget data/load_budget.json gives the SoC's arch) is told
    to split, and a decoder whose KV cache is an input how many parts `prepare --generate` should make."""

    path = Path(path)
    model = load_model(path, weights=False)
    graph = model.graph
    target = soc if isinstance(soc, socs.Soc) else socs.find(socs.DEFAULT_SOC if soc is None else soc)
    inputs = [tensor_info(v) for v in real_inputs(graph)]
    outputs = [tensor_info(v) for v in graph.output]
    params = sum(math.prod(t.dims) for t in all_tensors(graph) if dtype_name(t.data_type) in PARAM_DTYPES)

    op_findings = rules.ops(graph)
    frozen = {name for f in op_findings if f.prepare for name in f.prepare.freeze}  # no int32 wrapper for those
    findings = (rules.shapes(inputs, outputs) + rules.declared_outputs(model)
                + rules.dtypes(graph, inputs, outputs, frozen) + op_findings)
    load = rules.load_advice(graph, target.model, _budget(target, context_bytes), _source_decoder(graph))
    too_large = None
    if load.decoder_layers:  # --generate makes the static graphs with int32 ids itself: one finding says it all
        findings = [f for f in findings if f.code not in DECODER_FIXES] + [rules.decoder_parts(load, precision)]
    elif too_large := rules.context_size(graph, load, precision):
        findings.append(too_large)
    if precision == Precision.FP16:  # what a w8a16 build would refuse: the refusals measured here, read from the graph
        findings += [_w8a16_refusal(fact, nodes) for fact, nodes in refusals.predicted(graph, Precision.W8A16)]
    qairt = htp.qairt_version() if htp.available() else ""
    refused = socs.refusal(target, qairt, precision)
    if refused:
        other = Precision.W8A16 if precision == Precision.FP16 else Precision.FP16
        findings.append(Finding(
            "soc", Severity.BLOCKER, f"{refused}: no {precision} build of any model runs there, whatever the export",
            "target another SoC (qnndeploy socs lists them)"
            + (f", or check --precision {other}" if not socs.refusal(target, qairt, other) else "")
            + f", or leave {target.model}'s phones on the CPU fallback"))
    mismatch = socs.arch_mismatch(target, qairt)
    if mismatch:
        findings.append(Finding("soc", Severity.WARNING, mismatch,
                                f"confirm on a {target.model} phone (qnndeploy device verify) before shipping it"))

    if not measure:
        htp_result = HtpMeasurement(target.model, False, "not requested (--no-measure)")
    elif refused:
        htp_result = HtpMeasurement(target.model, False, refused, qairt=qairt)
    elif too_large or (precision != Precision.FP16 and params * 4 > QUANTIZED_MEASURE_MAX):
        htp_result = HtpMeasurement(target.model, False, "more weights than one context holds: check each part of "
                                    "the split" if too_large else f"{params * 4 / 1e9:.1f} GB of fp32 weights, over "
                                    f"the {QUANTIZED_MEASURE_MAX >> 30} GB quantized here in memory (compile measures "
                                    "it; or check the parts of a split)")
        findings += [_refusal_first(fact, nodes, precision) for fact, nodes in refusals.predicted(graph, precision)]
    elif (too_big := htp.measure_refusal(graph)) is not None:
        htp_result = HtpMeasurement(target.model, False, too_big)
        oversized = oversized_constants(graph)
        findings.append(Finding(
            "size", Severity.BLOCKER if oversized else Severity.WARNING,
            f"op support on the HTP not measured: {too_big}" if not oversized else
            f"{'; '.join(oversized[:3])}: over {MAX_FOLDED_BYTES >> 20} MiB built from constants alone (op support "
            "on the HTP not measured: a session would fold it into memory)",
            "re-export so that the graph does not build it from constants" if oversized else
            "split the model into smaller graphs to measure each, or compile it directly"))
    elif any(i.dynamic for i in inputs):
        htp_result = HtpMeasurement(target.model, False, "the inputs have dynamic dims; prepare the model first")
        findings.append(Finding("htp", Severity.INFO,
                                "op support on the HTP not measured: the inputs have dynamic dims",
                                "run prepare, then check the prepared model"))
    else:
        layers, steps = htp.recurrent_steps(model)
        expected = [round(steps * rate) for rate in htp.SECONDS_PER_CELL_STEP]
        if say and expected[1] >= LONG_MEASUREMENT_S:
            say(f"{path.name}: the HTP compiler unrolls {layers} recurrent layer(s) into {steps:,} cell steps: "
                f"measuring op support may take {expected[0]:,}-{expected[1]:,} s (the budget is "
                f"{'none' if timeout is None else f'{timeout:g} s'}: --timeout; --no-measure skips it)")
        if precision == Precision.FP16:
            htp_result = measure_htp(path, target, graph, timeout=timeout)
        else:
            htp_result = _measure_quantized(path, target, graph, precision, timeout)
        if htp_result.timed_out:
            findings.append(Finding(
                "htp", Severity.WARNING, f"op support on the HTP not measured: {htp_result.reason}"
                + (f" ({layers} recurrent layer(s), {steps:,} unrolled cell steps)" if steps else ""),
                "check again with a larger --timeout (or none: --timeout 0), or compile it directly: compile "
                "refuses any node the HTP does not take"))
        elif htp_result.measured and htp_result.cpu_nodes and not htp_result.qnn_partitions \
                and htp_takes_nothing(target):
            findings.append(Finding("htp", Severity.BLOCKER, soc_takes_nothing(target, htp_result.qairt),
                                    f"target another SoC (qnndeploy socs lists them), or leave {target.model}'s "
                                    "phones on the CPU fallback; a newer QAIRT may support it"))
        elif fixed := _fixed_by_prepare(model, htp_result):
            findings += _prepare_findings(fixed, htp_result, precision, model)
        elif not htp_result.measured and htp_result.refused:
            findings += [_refused(refusals.explain(r, graph, precision, path, target.model))
                         for r in htp_result.refused]
        elif htp_result.measured and htp_result.cpu_nodes and (split := rules.edge_split(model, htp_result)):
            findings.append(split)
        else:
            findings += rules.measured(htp_result, graph) + rules.htp_rules(htp_result.cpu_nodes, model)
        if htp_result.measured and htp_result.total_nodes and not htp_result.cpu_nodes:
            findings = [rules.taken_by_the_htp(f) if f.code == "control-flow" and f.severity == Severity.BLOCKER else f
                        for f in findings]
        if any(f.code == "setting-input" for f in findings):  # the frozen value folds what it sizes: judge after
            findings = [rules.after_freezing(f) if f.code == "htp" and f.severity == Severity.BLOCKER else f
                        for f in findings]

    if any(f.code == "float64" and f.severity == Severity.BLOCKER for f in findings) and \
            (split := rules.float64_split(model)) is not None:
        findings = [split if f.code == "float64" else f for f in findings]
        if not htp_result.measured and htp_result.reason.startswith("the HTP compile failed"):
            # the whole graph failed to compile, its float64 part included: the NPU part is measured after the split
            findings = [Finding("htp", Severity.INFO, f"op support on the HTP not measured: {htp_result.reason}",
                                "check the NPU part after the split")
                        if f.code == "htp" and f.severity == Severity.BLOCKER else f for f in findings]
    fixes = [f.prepare for f in findings if f.severity == Severity.FIXABLE and f.prepare is not None]
    fix = merged(fixes) if fixes else None
    nodes = sum(1 for n in graph.node if n.op_type != "Constant")
    severities = {f.severity for f in findings}
    verdict = Verdict.NOT_READY if Severity.BLOCKER in severities else Verdict.FIXABLE \
        if Severity.FIXABLE in severities else Verdict.READY
    return CheckReport(
        path=str(path), graph=graph.name, opset=default_opset(model), nodes=nodes, inputs=inputs,
        outputs=outputs, parameters=params, weight_mb_fp16=round(params * 2 / 1e6, 1),
        weight_mb_8bit=round(params / 1e6, 1), htp=htp_result, findings=findings,
        prepare_command=_command(path, fix) if fix else None, placeholders=fix.placeholders() if fix else [],
        verdict=verdict, load=load)


def _budget(soc: Soc, given: int | None) -> loadplan.Budget:
    """One part's load budget on the SoC: the data's for its arch, or the bytes check --context-gb gave."""
    if given is None:
        return loadplan.budget_for(soc.arch_number)
    arch = str(HtpArch(soc.arch_number))
    return loadplan.Budget(arch, given, loadplan.BudgetStatus.GIVEN, "check --context-gb",
                           "the budget check --context-gb gave", "")


def _source_decoder(graph: onnx.GraphProto) -> int:
    """The layers of a decoder exported with its KV cache as dynamic inputs (what prepare --generate takes); 0 for
    any other model, the static graphs prepare --generate writes included (their KV inputs have fixed sizes)."""
    layers = loadplan.kv_layers(graph)
    if not layers:
        return 0
    past = [tensor_info(v) for v in real_inputs(graph) if v.name.startswith("past_key_values.")]
    return layers if any(t.dynamic for t in past) else 0


def _command(path: Path, fix: PrepareFix) -> str:
    # X.onnx -> X.npu.onnx (X.npu.onnx -> X.npu.npu.onnx), whose graph is still X; a split of X or of X.npu.onnx ->
    # X-parts/X.onnx, graphs X-head and X-tail (X-1, X-2… by size)
    split = fix.split_at or fix.split_size or fix.generate_parts
    out = cutting.advised_output(path) if split else path.with_name(
        path.name.removesuffix(".onnx") + PREPARED_SUFFIX + ".onnx")
    return shlex.join(["qnndeploy", "prepare", str(path), "-o", str(out), *fix.args()])


# --- measured op support --------------------------------------------------------------------------

def _measure_quantized(path: Path, soc: Soc, graph: onnx.GraphProto, precision: Precision,
                       timeout: float | None) -> HtpMeasurement:
    """Op support of the QDQ graph compile's w8a16 or w4a16 builds, quantized here on a few random samples (ranges
    do not matter for which ops the HTP takes)."""

    if not htp.available():
        return HtpMeasurement(soc.model, False, "onnxruntime-qnn is not installed")
    ranges = {k: (lo, hi - 1) for k, (lo, hi, _) in int_input_ranges(graph).items()}
    calibration = samples.random_samples([tensor_info(v) for v in real_inputs(graph)], 2, 0, ranges)
    with tempfile.TemporaryDirectory(prefix="qnndeploy-check-qdq-") as tmp:
        qdq = Path(tmp) / "model_qdq.onnx"
        logging.disable(logging.WARNING)  # the quantizer's advice to its own users, on the root logger
        try:
            with htp.quiet_native_stdout():
                quantize.qdq(path, calibration, qdq)
                if precision == Precision.W4A16:
                    quantize.int4_weights(path, qdq)
        except Exception as e:  # noqa: BLE001 the quantizer raises whatever onnxruntime and onnx raise
            return HtpMeasurement(soc.model, False, f"quantizing to {precision} failed: {first_line(e)}")
        finally:
            logging.disable(logging.NOTSET)
        measured = measure_htp(qdq, soc, fp16=False, timeout=timeout)
    # The QDQ graph has a Quantize/Dequantize pair around every op: count the model's own nodes only.
    measured.total_nodes = sum(1 for n in graph.node if n.op_type != "Constant")
    measured.cpu_nodes = [n for n in measured.cpu_nodes if n.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    return measured


def _w8a16_refusal(fact: refusals.Fact, nodes: list[str]) -> Finding:
    """Plain check's note on what a w8a16 compile refuses: a w8a16 measurement would cost a quantization and a
    second compile (about three times the check), the facts measured here cost a read of the graph."""
    return Finding("w8a16", Severity.INFO, _refuses(fact, nodes, Precision.W8A16),
                   f"before a w8a16 build: prepare {' '.join(fact.rewrite)} (then check --precision w8a16)")


def _refusal_first(fact: refusals.Fact, nodes: list[str], precision: Precision) -> Finding:
    """A refusal measured here, read off a graph too big to measure whole: prepared first (before a split, as the
    parts are cut from the prepared model)."""
    fix = PrepareFix(fuse=fact.rewrite[:1] == ("--fuse",),
                     rewrite=list(fact.rewrite[1:]) if fact.rewrite[:1] == ("--rewrite",) else [])
    return Finding("htp", Severity.FIXABLE, _refuses(fact, nodes, precision),
                   f"prepare {' '.join(fact.rewrite)} ({fact.remedy}) first, then check again", prepare=fix)


def _refuses(fact: refusals.Fact, nodes: list[str], precision: Precision) -> str:
    names = ", ".join(nodes[:3]) + (f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")
    qnn = f" → QNN {fact.qnn_op}" if fact.qnn_op else ""
    code = f", error {fact.code}" if fact.code is not None else ""
    return (f"a {precision} compile refuses {len(nodes)} {fact.onnx_op} node(s) ({names}{qnn}{code}): "
            f"{fact.pattern} ({fact.at(precision)})")


def _refused(explained: refusals.Explained) -> Finding:
    """A node QNN refused while composing the measured graph, named; fixable by prepare when the refusal is one
    measured here, whose rewrite prepare does."""
    options = explained.fact.rewrite if explained.fact else ()
    if options[:1] == ("--fuse",) or options[:1] == ("--rewrite",):
        fix = PrepareFix(fuse=options[0] == "--fuse", rewrite=list(options[1:]))
        return Finding("htp", Severity.FIXABLE, explained.problem, explained.remedy, prepare=fix)
    return Finding("htp", Severity.BLOCKER, explained.problem, explained.remedy)


def _fixed_by_prepare(model: onnx.ModelProto, m: HtpMeasurement) -> dict[str, list[CpuNode]]:
    """The CPU nodes a prepare option turns into a form the HTP runs, by option ("fuse", or a --rewrite kind): the
    patterns fuse.fusable_nodes and rewrite.fixable find among the nodes the HTP refused."""
    if not m.measured or not m.cpu_nodes:
        return {}
    by = dict.fromkeys(fuse.fusable_nodes(model), "fuse")
    by.update({name: kind for name, kind in rewrite.fixable(model).items() if name not in by})
    # a node whose HTP rule names a rewrite that cannot match yet (a Gather's indices still computed before folding)
    by.update({name: kind for name, kind in rules.rewrites_for(m.cpu_nodes, model).items() if name not in by})
    fixed: dict[str, list[CpuNode]] = {}
    for n in m.cpu_nodes:
        if n.name in by:
            fixed.setdefault(by[n.name], []).append(n)
    return fixed


def _prepare_findings(fixed: dict[str, list[CpuNode]], m: HtpMeasurement, precision: Precision,
                      model: onnx.ModelProto) -> list[Finding]:
    """A fixable finding per prepare option that moves CPU nodes to the HTP; the other CPU nodes are judged on the
    prepared model (partitions and edges move once the patterns are rewritten), each op with its HTP rule."""
    findings = []
    patterns = fuse.fusable_nodes(model)
    for key, nodes in fixed.items():
        ops = Counter(n.op_type for n in nodes)
        listed = ", ".join(f"{k} ×{v}" for k, v in ops.most_common())
        if key == "fuse" and all(patterns.get(n.name) == "GELU" for n in nodes):
            erfs = sum(1 for n in nodes if n.op_type == "Erf")
            findings.append(Finding(
                "htp", Severity.FIXABLE,
                f"the unfused GELU (Erf) has no {precision} form on the HTP: {erfs or len(nodes)} "
                f"{'Erf ' if erfs else ''}node(s) would run on the CPU",
                "prepare --fuse (one Gelu node per GELU, opset 20; re-exporting at opset 20 does the same)",
                prepare=PrepareFix(fuse=True)))
        elif key == "fuse":
            findings.append(Finding(
                "htp", Severity.FIXABLE, f"{len(nodes)} CPU node(s) ({listed}) are part of an unfused GELU or "
                "LayerNorm", "prepare --fuse (one Gelu or LayerNormalization node each, as opset 17-20 exports "
                "write them)", prepare=PrepareFix(fuse=True)))
        else:
            findings.append(Finding(
                "htp", Severity.FIXABLE, f"{len(nodes)} CPU node(s) ({listed}) have an equal form the HTP runs: "
                f"{rewrite.KINDS[key]}", f"prepare --rewrite {key} (proven equal on the CPU before anything is "
                "written)", prepare=PrepareFix(rewrite=[key])))
    done = {n.name for nodes in fixed.values() for n in nodes}
    rest = [n for n in m.cpu_nodes if n.name not in done]
    if rest:
        ops = Counter(n.op_type for n in rest)
        how = "fused" if set(fixed) == {"fuse"} else "rewritten" if "fuse" not in fixed else "prepared"
        options = " ".join(PrepareFix(fuse="fuse" in fixed, rewrite=[k for k in fixed if k != "fuse"]).args())
        findings.append(Finding(
            "htp", Severity.INFO,
            f"the other {len(rest)} CPU node(s) ({', '.join(f'{k} ×{v}' for k, v in ops.most_common())}) "
            f"are judged on the {how} model", f"prepare {options} first, then check the {how} model"))
        findings += rules.htp_rules(rest, model)
    return findings

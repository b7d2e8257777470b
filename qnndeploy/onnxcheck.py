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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy import htp, quantize, samples, socs
from qnndeploy.errors import first_line
from qnndeploy.fuse import find_gelus
from qnndeploy.htp import HtpMeasurement, htp_takes_nothing, measure_htp, soc_takes_nothing
from qnndeploy.onnxio import (
    CONTROL_FLOW_OPS,
    TensorInfo,
    all_nodes,
    all_tensors,
    dtype_name,
    int_input_ranges,
    load_model,
    real_inputs,
    tensor_info,
)
from qnndeploy.shapes import batch_dim, suggest_shapes

if TYPE_CHECKING:
    import onnx

    from qnndeploy.socs import Soc

# Exit codes of `qnndeploy check` (README "Exit codes").
EXIT_READY, EXIT_FIXABLE, EXIT_NOT_READY = 0, 10, 11
VERDICT_EXIT = {"ready": EXIT_READY, "fixable": EXIT_FIXABLE, "not ready": EXIT_NOT_READY}

DEFAULT_SOC = "SM8750"
# Above about 1 B parameters an fp16 model may not fit one HTP context (procedure.md, step 0).
CONTEXT_PARAMS_FP16 = 1_000_000_000
# A scalar-ish input (at most this many elements) that drives an If is a setting that can be frozen.
FREEZABLE_NUMEL = 16

QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
             "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QGemm", "QAttention", "MatMulNBits",
             "DynamicQuantizeLSTM", "QuantizeBFP", "DequantizeBFP"}
# Ops whose output size depends on the data, which a fixed-size graph cannot express.
DATA_SHAPED_OPS = {"NonZero", "Unique", "NonMaxSuppression", "Compress", "SequenceConstruct", "SequenceAt",
                   "SequenceInsert", "SequenceErase", "SequenceEmpty", "SequenceLength", "SplitToSequence",
                   "ConcatFromSequence", "SequenceMap", "Optional", "OptionalGetElement", "OptionalHasElement"}
PARAM_DTYPES = {"float32", "float16", "bfloat16", "float64", "int8", "uint8", "int4", "uint4"}


@dataclass
class Finding:
    code: str  # dynamic-dims, output-shape, batch, int64, float64, quantized, control-flow, data-shaped, size, soc, htp
    severity: str  # blocker (not ready), fixable (prepare fixes it), warning, info
    message: str
    fix: str
    node: str = ""  # the node a control-flow finding is about


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
    verdict: str  # ready | fixable | not ready

    @property
    def exit_code(self) -> int:
        return VERDICT_EXIT[self.verdict]


# --- the check ------------------------------------------------------------------------------------

def check_model(path: Path, soc: str | Soc | None = None, measure: bool = True,
                precision: str = "fp16") -> CheckReport:
    """Read the graph, measure op support on the HTP when shapes allow, and give a verdict with fixes.
    With precision w8a16 the measured graph is the QDQ-quantized one compile would build."""

    path = Path(path)
    model = load_model(path)
    graph = model.graph
    target = soc if isinstance(soc, socs.Soc) else socs.find(soc or DEFAULT_SOC)
    inputs = [tensor_info(v) for v in real_inputs(graph)]
    outputs = [tensor_info(v) for v in graph.output]
    params = sum(math.prod(t.dims) for t in all_tensors(graph) if dtype_name(t.data_type) in PARAM_DTYPES)

    opts = _PrepareOptions()
    op_findings = _op_findings(graph, opts)  # first: inputs it freezes need no int32 wrapper
    findings = (_shape_findings(inputs, outputs, opts) + _declared_output_findings(model, opts)
                + _dtype_findings(graph, inputs, outputs, opts) + op_findings)
    if params >= CONTEXT_PARAMS_FP16:
        findings.append(Finding(
            "size", "warning",
            f"{params / 1e9:.2f} B parameters ({params * 2 / 1e9:.1f} GB at fp16): more than about 1 B parameters "
            "at fp16 may not fit one HTP context",
            "compile with 8-bit weights (w8a16), and/or split the model into several graphs"))
    qairt = htp.qairt_version() if htp.available() else ""
    refused = socs.refusal(target, qairt, precision)
    if refused:
        other = "w8a16" if precision == "fp16" else "fp16"
        findings.append(Finding(
            "soc", "blocker", f"{refused}: no {precision} build of any model runs there, whatever the export",
            "target another SoC (qnndeploy socs lists them)"
            + (f", or check --precision {other}" if not socs.refusal(target, qairt, other) else "")
            + f", or leave {target.model}'s phones on the CPU fallback"))
    mismatch = socs.arch_mismatch(target, qairt)
    if mismatch:
        findings.append(Finding("soc", "warning", mismatch,
                                f"confirm on a {target.model} phone (qnndeploy device verify) before shipping it"))

    if not measure:
        htp_result = HtpMeasurement(target.model, False, "not requested (--no-measure)")
    elif refused:
        htp_result = HtpMeasurement(target.model, False, refused, qairt=qairt)
    elif any(i.dynamic for i in inputs):
        htp_result = HtpMeasurement(target.model, False, "the inputs have dynamic dims; prepare the model first")
        findings.append(Finding("htp", "info", "op support on the HTP not measured: the inputs have dynamic dims",
                                "run prepare, then check the prepared model"))
    else:
        htp_result = measure_htp(path, target, graph) if precision == "fp16" else _measure_quantized(path, target, graph)
        if htp_result.measured and htp_result.cpu_nodes and not htp_result.qnn_partitions \
                and htp_takes_nothing(target):
            findings.append(Finding("htp", "blocker", soc_takes_nothing(target, htp_result.qairt),
                                    f"target another SoC (qnndeploy socs lists them), or leave {target.model}'s "
                                    "phones on the CPU fallback; a newer QAIRT may support it"))
        elif precision != "fp16" and _fusing_fixes(graph, htp_result):
            opts.fuse = True
            findings.append(Finding(
                "htp", "fixable",
                f"the unfused GELU (Erf) has no {precision} form on the HTP: {len(htp_result.cpu_nodes)} Erf "
                "node(s) would run on the CPU",
                "prepare --fuse (one Gelu node per GELU, opset 20; re-exporting at opset 20 does the same)"))
        else:
            findings += _htp_findings(htp_result)
        if htp_result.measured and htp_result.total_nodes and not htp_result.cpu_nodes:
            findings = [_taken_by_the_htp(f) if f.code == "control-flow" and f.severity == "blocker" else f
                        for f in findings]

    nodes = sum(1 for n in graph.node if n.op_type != "Constant")
    severities = {f.severity for f in findings}
    verdict = "not ready" if "blocker" in severities else "fixable" if "fixable" in severities else "ready"
    return CheckReport(
        path=str(path), graph=graph.name, opset=_default_opset(model), nodes=nodes, inputs=inputs,
        outputs=outputs, parameters=params, weight_mb_fp16=round(params * 2 / 1e6, 1),
        weight_mb_8bit=round(params / 1e6, 1), htp=htp_result, findings=findings,
        prepare_command=opts.command(path) if opts.needed else None, placeholders=opts.placeholders(),
        verdict=verdict)


def _default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


@dataclass
class _PrepareOptions:
    """The prepare options the findings call for, so the report can give one exact command line."""
    shapes: dict[str, list[str]] = field(default_factory=dict)
    int32: bool = False
    freeze: list[str] = field(default_factory=list)
    fuse: bool = False
    plain: bool = False  # a prepare without options fixes something (re-inferred outputs, a foldable If)

    @property
    def needed(self) -> bool:
        return bool(self.shapes or self.int32 or self.freeze or self.fuse or self.plain)

    def placeholders(self) -> list[str]:
        holes = sorted({d for dims in self.shapes.values() for d in dims if not d.isdigit()})
        return holes + (["VALUE"] if self.freeze else [])

    def args(self) -> list[str]:
        out = [a for name, dims in self.shapes.items() for a in ("--shape", f"{name}={','.join(dims)}")]
        out += [a for name in self.freeze for a in ("--freeze", f"{name}=VALUE")]
        return out + (["--int32-inputs"] if self.int32 else []) + (["--fuse"] if self.fuse else [])

    def command(self, path: Path) -> str:
        out = path.with_name(path.name.removesuffix(".onnx") + ".npu.onnx")
        return shlex.join(["qnndeploy", "prepare", str(path), "-o", str(out), *self.args()])


def _declared_output_findings(model: onnx.ModelProto, opts: _PrepareOptions) -> list[Finding]:
    """Outputs whose declared shape the graph does not compute (shape inference with the declarations dropped):
    kept, they make the HTP compiler refuse a Reshape that is right. prepare writes the computed shapes."""
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for value in probe.graph.output:
        value.type.tensor_type.ClearField("shape")
    probe.graph.ClearField("value_info")
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, data_prop=True).graph.output
    except Exception:  # custom ops, a model over 2 GB: nothing to compare with
        return []
    wrong = []
    for declared, computed in zip(model.graph.output, inferred):
        d, c = tensor_info(declared), tensor_info(computed)
        if d.shape is None or c.shape is None or not c.shape:
            continue
        if len(d.shape) != len(c.shape) or any(isinstance(a, int) and isinstance(b, int) and a != b
                                                for a, b in zip(d.shape, c.shape)):
            wrong.append(f"{d.name} declares {d.shape_text()}, computes {c.shape_text()}")
    if not wrong:
        return []
    opts.plain = True
    return [Finding("output-shape", "fixable", "declared output shapes the graph does not compute: " + "; ".join(wrong),
                    "prepare (it writes the shapes the graph computes, confirmed by a CPU run)")]


def _shape_findings(inputs: list[TensorInfo], outputs: list[TensorInfo], opts: _PrepareOptions) -> list[Finding]:
    findings = []
    suggested = suggest_shapes(inputs)
    for info in inputs:
        if info.dynamic:
            dims = opts.shapes[info.name] = suggested[info.name]
            holes = [d for d in dims if not d.isdigit()]
            findings.append(Finding(
                "dynamic-dims", "fixable",
                f"input {info.name} has dynamic dims {info.shape_text()}: the NPU runs fixed-size graphs",
                f"prepare --shape {info.name}={','.join(dims)}"
                + (f" ({', '.join(holes)}: the fixed size your app feeds)" if holes else "")))
        elif batch_dim(info) == 0 and info.shape[0] > 1:
            findings.append(Finding(
                "batch", "warning", f"input {info.name} has batch {info.shape[0]}: the NPU graph is run at batch 1",
                f"prepare --shape {info.name}={','.join(['1'] + [str(d) for d in info.shape[1:]])} if the graph "
                "allows it, else re-export with batch 1"))
    dynamic_out = [o for o in outputs if o.dynamic]
    if dynamic_out:
        opts.plain = True
        findings.append(Finding(
            "dynamic-dims", "fixable",
            "outputs with dynamic dims: " + ", ".join(f"{o.name} {o.shape_text()}" for o in dynamic_out),
            "prepare infers them from fixed input shapes"))
    return findings


def _dtype_findings(graph: onnx.GraphProto, inputs: list[TensorInfo], outputs: list[TensorInfo],
                    opts: _PrepareOptions) -> list[Finding]:
    findings = []
    int64 = [t.name for t in inputs + outputs if t.dtype == "int64" and t.name not in opts.freeze]
    if int64:
        opts.int32 = True
        findings.append(Finding(
            "int64", "fixable", f"int64 inputs/outputs ({', '.join(int64)}): the HTP has no int64 tensors",
            "prepare --int32-inputs (wraps them as int32 with a Cast inside the graph, names unchanged)"))
    f64 = [t.name for t in inputs + outputs if t.dtype == "float64"]
    f64 += [t.name for t in all_tensors(graph) if dtype_name(t.data_type) == "float64"]
    f64 += [n.name or n.op_type for n in all_nodes(graph) if n.op_type == "Cast"
            and any(a.name == "to" and dtype_name(a.i) == "float64" for a in n.attribute)]
    if f64:
        findings.append(Finding(
            "float64", "blocker",
            f"float64 tensors ({_clip(f64)}): the HTP has no float64, these parts would run on the CPU",
            "re-export in float32 (e.g. model.float() before torch.onnx.export)"))
    return findings


def _op_findings(graph: onnx.GraphProto, opts: _PrepareOptions) -> list[Finding]:
    findings = []
    quant = Counter(n.op_type for n in all_nodes(graph) if n.op_type in QUANT_OPS or n.op_type.startswith("QLinear"))
    if quant:
        findings.append(Finding(
            "quantized", "blocker",
            f"int8 quantization is already in the ONNX ({', '.join(f'{k} ×{v}' for k, v in quant.most_common())})",
            "export the float model and quantize in QNN at compile time (fp16, or w8a16 for large models)"))
    shaped = Counter(n.op_type for n in all_nodes(graph) if n.op_type in DATA_SHAPED_OPS)
    if shaped:
        findings.append(Finding(
            "data-shaped", "blocker",
            f"ops whose output size depends on the data ({', '.join(f'{k} ×{v}' for k, v in shaped.items())}): "
            "a fixed-size graph cannot hold them",
            "move them out of the graph (into app code, before or after the model) or re-export without them"))
    producers = {o: n for n in graph.node for o in n.output}
    fed = {v.name for v in real_inputs(graph)}
    small_inputs = {v.name for v in real_inputs(graph) if _numel(tensor_info(v)) <= FREEZABLE_NUMEL}
    for node in graph.node:
        if node.op_type not in CONTROL_FLOW_OPS:
            continue
        label = f"{node.op_type} node {node.name or '(unnamed)'}"
        # What drives the node: the condition of an If, the trip count and condition of a Loop.
        driving = [t for t in (node.input[:1] if node.op_type == "If" else node.input[:2]) if t]
        values = set().union(*(value_drivers(t, producers, fed) for t in driving)) if driving else set()
        if node.op_type != "If":
            findings.append(Finding(
                "control-flow", "blocker", f"{label}: a loop breaks a static compile",
                "re-export with the loop unrolled to a fixed count, or run the loop in app code and export "
                "its body as the graph", label))
        elif not values:
            opts.plain = True
            findings.append(Finding(
                "control-flow", "fixable",
                f"{label} depends only on constants and input shapes: once the shapes are fixed it is static",
                "prepare (folding removes it)", label))
        elif values <= small_inputs:
            opts.freeze += [d for d in sorted(values) if d not in opts.freeze]
            findings.append(Finding(
                "control-flow", "fixable",
                f"{label} is driven by the value of the setting input(s) {', '.join(sorted(values))} "
                "(and at most input shapes): control flow breaks a static compile",
                " ".join(f"prepare --freeze {d}=VALUE" for d in sorted(values))
                + f" (the value your app always uses; the {node.op_type} folds away)", label))
        else:
            findings.append(Finding(
                "control-flow", "blocker",
                f"{label} depends on the values of {', '.join(sorted(values - small_inputs))}: control flow "
                "breaks a static compile",
                "re-export without it: compute both branches and select the result (torch.where)", label))
    return findings


# Ops whose output says only something about the shape of their input, never about its values.
SHAPE_ONLY_OPS = {"Shape", "Size"}


def value_drivers(tensor: str, producers: dict, graph_inputs: set[str]) -> set[str]:
    """The graph inputs whose values a tensor is computed from. A path through Shape or Size reads only the
    input's shape, which `--shape` fixes, so it does not count; initializers and constants do not either."""
    found, seen, todo = set(), set(), [tensor]
    while todo:
        name = todo.pop()
        if name in seen or not name:
            continue
        seen.add(name)
        if name in graph_inputs:
            found.add(name)
        elif name in producers and producers[name].op_type not in SHAPE_ONLY_OPS:
            todo.extend(producers[name].input)
    return found


def _taken_by_the_htp(finding: Finding) -> Finding:
    """The measurement outranks the reading: with every node on the HTP, a control-flow node that looked
    value-dependent was folded by ONNX Runtime for these shapes or taken whole by the QNN EP; nothing to re-export."""
    return Finding("control-flow", "info",
                   f"{finding.node}: runs on the HTP as measured (every node on the HTP: ONNX Runtime folds it for "
                   "these shapes or the QNN EP takes it)",
                   "none needed; validate compares its outputs with the CPU on the HTP emulator", finding.node)


def _numel(info: TensorInfo) -> float:
    if info.dynamic:
        return math.inf
    return math.prod(info.shape)


def _clip(names: list[str], keep: int = 6) -> str:
    names = list(dict.fromkeys(names))
    return ", ".join(names[:keep]) + (f" and {len(names) - keep} more" if len(names) > keep else "")


# --- measured op support --------------------------------------------------------------------------

def _measure_quantized(path: Path, soc: Soc, graph: onnx.GraphProto) -> HtpMeasurement:
    """Op support of the QDQ graph compile's w8a16 builds, quantized here on a few random samples (ranges do not
    matter for which ops the HTP takes)."""

    if not htp.available():
        return HtpMeasurement(soc.model, False, "onnxruntime-qnn is not installed")
    ranges = {k: (lo, hi) for k, (lo, hi, _) in int_input_ranges(graph).items()}
    calibration = samples.random_samples([tensor_info(v) for v in real_inputs(graph)], 2, 0, ranges)
    with tempfile.TemporaryDirectory(prefix="qnndeploy-check-qdq-") as tmp:
        qdq = Path(tmp) / "model_qdq.onnx"
        logging.disable(logging.WARNING)  # the quantizer's advice to its own users, on the root logger
        try:
            with htp.quiet_native_stdout():
                quantize.qdq(path, calibration, qdq)
        except Exception as e:  # the quantizer raises whatever onnxruntime and onnx raise
            return HtpMeasurement(soc.model, False, f"quantizing to w8a16 failed: {first_line(e)}")
        finally:
            logging.disable(logging.NOTSET)
        measured = measure_htp(qdq, soc, fp16=False)
    # The QDQ graph has a Quantize/Dequantize pair around every op: count the model's own nodes only.
    measured.total_nodes = sum(1 for n in graph.node if n.op_type != "Constant")
    measured.cpu_nodes = [n for n in measured.cpu_nodes if n.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    return measured


def _fusing_fixes(graph: onnx.GraphProto, m: HtpMeasurement) -> bool:
    """Whether every node the HTP refused is the Erf of a GELU that `prepare --fuse` rewrites."""

    if not m.measured or not m.cpu_nodes or any(n.op_type != "Erf" for n in m.cpu_nodes):
        return False
    erfs = {n.name for _, _, nodes in find_gelus(graph) for n in nodes if n.op_type == "Erf"}
    return all(n.name in erfs for n in m.cpu_nodes)


def _htp_findings(m: HtpMeasurement) -> list[Finding]:
    if not m.measured and "not installed" in m.reason:
        return [Finding("htp", "warning", "op support on the HTP not measured: onnxruntime-qnn is not installed",
                        "pip install onnxruntime-qnn (Linux x86-64) and check again")]
    if not m.measured:
        return [Finding("htp", "blocker", f"{m.reason} ({m.soc})",
                        "re-export avoiding the ops the message names, then check again")]
    if not m.cpu_nodes:
        return []
    ops = Counter(n.op_type for n in m.cpu_nodes)
    return [Finding(
        "htp", "blocker",
        f"{len(m.cpu_nodes)} of {m.total_nodes} nodes would run on the CPU in {m.cpu_partitions} partition(s) "
        f"on {m.soc} ({', '.join(f'{k} ×{v}' for k, v in ops.most_common())}): each CPU partition costs a "
        "round trip and most of the NPU's gain",
        "re-export replacing these ops with ones the HTP runs, or move them into app code")]



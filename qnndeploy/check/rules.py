"""The readiness rules `check` applies to a graph, each returning its findings with the prepare options that fix
them (a PrepareFix), so that one rule never edits what another decided; check/__init__.py runs them and merges the fixes
into one command line."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from typing import TYPE_CHECKING, Any

from qnndeploy.base.errors import BadInput
from qnndeploy.base.kinds import Precision, Side, choices
from qnndeploy.model import loadplan
from qnndeploy.model.loadplan import Budget
from qnndeploy.model.onnxio import (
    CONTROL_FLOW_OPS,
    TensorInfo,
    all_nodes,
    all_tensors,
    constant_tensors,
    dtype_name,
    inferred_values,
    outer_reads,
    real_inputs,
    tensor_info,
    tensor_nbytes,
)
from qnndeploy.model.shapes import batch_dim, suggest_shapes
from qnndeploy.qnn.htp import CpuNode, HtpMeasurement

if TYPE_CHECKING:
    import onnx

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


class Severity(StrEnum):
    BLOCKER = "blocker"  # not ready: needs a re-export
    FIXABLE = "fixable"  # prepare fixes it
    WARNING = "warning"
    INFO = "info"


@dataclass
class Finding:
    # dynamic-dims, output-shape, batch, int64, float64, quantized, control-flow, data-shaped, setting-input, size,
    # soc, htp
    code: str
    severity: Severity
    message: str
    fix: str
    node: str = ""  # the node a control-flow finding is about
    prepare: PrepareFix | None = None  # the prepare options that fix it (empty: a plain prepare); None: not prepare's


@dataclass
class PrepareFix:
    """What prepare needs to fix one finding. The report merges them into one command line."""

    shapes: dict[str, list[str]] = field(default_factory=dict)
    freeze: list[str] = field(default_factory=list)
    int32: bool = False
    fuse: bool = False
    rewrite: list[str] = field(default_factory=list)  # --rewrite kinds
    split_at: list[str] = field(default_factory=list)  # --split-at: a cut, which takes no other option
    cpu: Side = Side.HEAD  # --cpu, with split_at
    split_size: str = ""  # --split-size GB, as printed: N NPU graphs, which takes no other option either
    generate_parts: int = 0  # --generate --parts P: a decoder as prompt and decode graphs, which does all the rest
    generate_precision: str = ""  # with generate_parts: the precision the parts are planned at

    def args(self) -> list[str]:
        if self.generate_parts:
            return ["--generate", "--parts", str(self.generate_parts), "--precision", self.generate_precision]
        if self.split_at:
            return ["--split-at", ",".join(self.split_at), "--cpu-part", self.cpu]
        if self.split_size:
            return ["--split-size", self.split_size]
        out = [a for name, dims in self.shapes.items() for a in ("--shape", f"{name}={','.join(dims)}")]
        out += [a for name in self.freeze for a in ("--freeze", f"{name}=VALUE")]
        return out + (["--int32-inputs"] if self.int32 else []) + (["--fuse"] if self.fuse else []) \
            + (["--rewrite", ",".join(self.rewrite)] if self.rewrite else [])

    def placeholders(self) -> list[str]:
        holes = sorted({d for dims in self.shapes.values() for d in dims if not d.isdigit()})
        return holes + (["VALUE"] if self.freeze else [])


def merged(fixes: list[PrepareFix]) -> PrepareFix:
    """One fix doing them all; a split only when nothing else is left to fix (it takes the prepared model); a
    decoder's --generate alone, as it makes the static graphs itself."""
    out = PrepareFix()
    generate = [f for f in fixes if f.generate_parts]
    if generate:
        return generate[0]
    plain = [f for f in fixes if not f.split_at and not f.split_size]
    if not plain:
        return fixes[0]
    for f in plain:
        out.shapes.update(f.shapes)
        out.freeze += [n for n in f.freeze if n not in out.freeze]
        out.int32 |= f.int32
        out.fuse |= f.fuse
        out.rewrite += [k for k in f.rewrite if k not in out.rewrite]
    return out


@dataclass(frozen=True)
class StoredAt:
    """What the compiler stores for the model at one precision, and the parts that takes on the SoC checked."""

    precision: str
    bytes: int
    extra_bytes: int  # of it, second copies of constants read by two kinds of op (a tied embedding)
    parts: int  # parts it needs under the budget; 0: no split into whole layers fits (a layer alone is over it)
    layers: list[tuple[int, int]] = field(default_factory=list)  # a decoder's layers per part (first, last)


@dataclass(frozen=True)
class LoadAdvice:
    """How many parts a model needs on one SoC, and why: its stored bytes at each precision against the bytes one
    part's context binary is planned to hold there (data/load_budget.json, or check --context-gb)."""

    soc: str
    budget: Budget
    decoder_layers: int  # layers of a decoder whose KV cache is an input (0: not one)
    stored: list[StoredAt]

    def at(self, precision: str) -> StoredAt:
        return next(s for s in self.stored if s.precision == precision)

    def summary(self) -> str:
        """`fp16 1,234.5 MB: 2 parts, w8a16 …` for the messages."""
        return ", ".join(f"{s.precision} {_mb(s.bytes)}: " + (f"{s.parts} part{'s' if s.parts > 1 else ''}"
                                                             if s.parts else "no split fits") for s in self.stored)

    def why(self) -> str:
        b = self.budget
        return f"one part holds {_mb(b.bytes)} on {self.soc} ({b.arch}, {b.status}: {b.label})"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def load_advice(graph: onnx.GraphProto, soc: str, budget: Budget, decoder_layers: int) -> LoadAdvice:
    """The model's stored bytes at every precision compile takes, and the parts each needs under `budget`: a
    decoder's layers planned into parts (embedding first, lm_head last), any other model cut by its bytes."""
    rows = []
    for precision in choices(Precision):
        store = loadplan.stored(graph, precision)
        layers: list[tuple[int, int]] = []
        if decoder_layers:
            try:
                plan = loadplan.decoder_bytes(graph, store).plan(budget.bytes)
                parts, layers = plan.count, [(p.first, p.last) for p in plan.parts]
            except BadInput:
                parts = 0
        else:
            parts = max(1, math.ceil(store.bytes / budget.bytes))
        rows.append(StoredAt(precision, store.bytes, store.extra_bytes, parts, layers))
    return LoadAdvice(soc, budget, decoder_layers, rows)


def _fits_instead(load: LoadAdvice, precision: Precision) -> str:
    """The other precisions that need fewer parts, as advice: `, or 1 part at w8a16 (check --precision w8a16)`."""
    mine = load.at(precision).parts or math.inf
    better = [s for s in load.stored if s.precision != precision and s.parts and s.parts < mine]
    return "".join(f", or {s.parts} part{'s' if s.parts > 1 else ''} at {s.precision} (check --precision "
                   f"{s.precision})" for s in better)


def context_size(graph: onnx.GraphProto, load: LoadAdvice, precision: Precision) -> Finding | None:
    """A model (not a decoder) that stores more at `precision` than one part holds on the SoC: split into NPU
    graphs of at most the budget each, given in the bytes the model stores its weights in (what `prepare
    --split-size` counts: the ratio of the ONNX's bytes to what the compiler stores carries the budget over)."""
    mine = load.at(precision)
    if mine.bytes <= load.budget.bytes:
        return None
    stored = sum(tensor_nbytes(t) or 0 for t in all_tensors(graph) if dtype_name(t.data_type) in PARAM_DTYPES) \
        or mine.bytes
    most = load.budget.bytes * stored / mine.bytes / 1e9  # the budget in the bytes the model stores its weights in
    digit = 10.0 ** (math.floor(math.log10(most)) - 2)
    size = round(math.floor(most / digit) * digit, 12)  # cut down to three digits
    twice = f" (constants read by two kinds of op stored twice: +{_mb(mine.extra_bytes)})" if mine.extra_bytes else ""
    return Finding(
        "size", Severity.FIXABLE,
        f"{_mb(mine.bytes)} stored at {precision}{twice}: over the {_mb(load.budget.bytes)} one HTP context is "
        f"planned to hold on {load.soc} ({load.budget.arch}, {load.budget.status}: {load.budget.label}; "
        "docs/command-details.md, Large models)",
        f"split it into {mine.parts} or more NPU graphs of at most {size:g} GB of weights each"
        + (f" as the model stores them ({_mb(load.budget.bytes)} at {precision})" if abs(stored - mine.bytes) > 1
           else "") + f" (prepare --split-size {size:g}), compiled and bundled as a pipeline"
        + _fits_instead(load, precision),
        prepare=PrepareFix(split_size=f"{size:g}"))


def decoder_parts(load: LoadAdvice, precision: Precision) -> Finding:
    """A decoder whose KV cache is an input: the app runs it as prompt and decode graphs per part (prepare
    --generate), and the parts it needs on the SoC at `precision`, with the layers of each."""
    mine = load.at(precision)
    twice = f" (its tied embedding stored twice: +{_mb(mine.extra_bytes)})" if mine.extra_bytes else ""
    what = (f"a decoder with a KV cache ({load.decoder_layers} layers): {_mb(mine.bytes)} stored at "
            f"{precision}{twice}; {load.why()}")
    if not mine.parts:
        return Finding("parts", Severity.BLOCKER, f"{what}: a single layer is over it, so no split into whole "
                       "layers loads", "quantize the weights further" + _fits_instead(load, precision))
    spans = ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in mine.layers)
    return Finding(
        "parts", Severity.FIXABLE,
        f"{what}: {mine.parts} part{'s' if mine.parts > 1 else ''} (layers {spans}; the embedding in the first, "
        "the lm_head in the last)",
        f"prepare --generate --parts {mine.parts}: a prompt and a decode graph per part, each pair compiled into "
        "one weight-shared context" + _fits_instead(load, precision),
        prepare=PrepareFix(generate_parts=mine.parts, generate_precision=precision))


def declared_outputs(model: onnx.ModelProto) -> list[Finding]:
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
    except Exception:  # noqa: BLE001 custom ops, a model over 2 GB: nothing to compare with
        return []
    wrong = []
    for declared, computed in zip(model.graph.output, inferred, strict=True):
        d, c = tensor_info(declared), tensor_info(computed)
        if d.shape is None or c.shape is None or not c.shape:
            continue
        if len(d.shape) != len(c.shape) or any(isinstance(a, int) and isinstance(b, int) and a != b
                                                for a, b in zip(d.shape, c.shape, strict=True)):
            wrong.append(f"{d.name} declares {d.shape_text()}, computes {c.shape_text()}")
    if not wrong:
        return []
    return [Finding("output-shape", Severity.FIXABLE,
                    "declared output shapes the graph does not compute: " + "; ".join(wrong),
                    "prepare (it writes the shapes the graph computes, confirmed by a CPU run)", prepare=PrepareFix())]


def shapes(inputs: list[TensorInfo], outputs: list[TensorInfo]) -> list[Finding]:
    findings = []
    suggested = suggest_shapes(inputs)
    for info in inputs:
        if info.dynamic:
            dims = suggested[info.name]
            holes = [d for d in dims if not d.isdigit()]
            findings.append(Finding(
                "dynamic-dims", Severity.FIXABLE,
                f"input {info.name} has dynamic dims {info.shape_text()}: the NPU runs fixed-size graphs",
                f"prepare --shape {info.name}={','.join(dims)}"
                + (f" ({', '.join(holes)}: the fixed size your app feeds)" if holes else ""),
                prepare=PrepareFix(shapes={info.name: dims})))
        elif batch_dim(info) == 0 and (shape := info.static_shape)[0] > 1:
            findings.append(Finding(
                "batch", Severity.WARNING, f"input {info.name} has a static batch of {shape[0]}: every run computes "
                f"{shape[0]} at once, on the NPU too",
                f"if the app feeds one at a time, re-export with batch 1 (or a dynamic batch, then prepare --shape "
                f"{info.name}={','.join(['1'] + [str(d) for d in shape[1:]])}): prepare cannot change a dim the "
                "model fixes"))
    dynamic_out = [o for o in outputs if o.dynamic]
    if dynamic_out:
        findings.append(Finding(
            "dynamic-dims", Severity.FIXABLE,
            "outputs with dynamic dims: " + ", ".join(f"{o.name} {o.shape_text()}" for o in dynamic_out),
            "prepare infers them from fixed input shapes", prepare=PrepareFix()))
    return findings


def dtypes(graph: onnx.GraphProto, inputs: list[TensorInfo], outputs: list[TensorInfo],
           frozen: set[str]) -> list[Finding]:
    """int64 and float64; `frozen` inputs (constants after prepare) need no int32 wrapper."""
    findings = []
    int64 = [t.name for t in inputs + outputs if t.dtype == "int64" and t.name not in frozen]
    if int64:
        findings.append(Finding(
            "int64", Severity.FIXABLE, f"int64 inputs/outputs ({', '.join(int64)}): the HTP has no int64 tensors",
            "prepare --int32-inputs (wraps them as int32 with a Cast inside the graph, names unchanged)",
            prepare=PrepareFix(int32=True)))
    f64 = [t.name for t in inputs + outputs if t.dtype == "float64"]
    f64 += [t.name for t in all_tensors(graph) if dtype_name(t.data_type) == "float64"]
    f64 += [n.name or n.op_type for n in all_nodes(graph) if n.op_type == "Cast"
            and any(a.name == "to" and dtype_name(a.i) == "float64" for a in n.attribute)]
    if f64:
        findings.append(Finding(
            "float64", Severity.BLOCKER,
            f"float64 tensors ({_clip(f64)}): the HTP has no float64, these parts would run on the CPU",
            "re-export in float32 (e.g. model.float() before torch.onnx.export)"))
    return findings


def ops(graph: onnx.GraphProto) -> list[Finding]:
    findings = []
    quant = Counter(n.op_type for n in all_nodes(graph) if n.op_type in QUANT_OPS or n.op_type.startswith("QLinear"))
    if quant:
        findings.append(Finding(
            "quantized", Severity.BLOCKER,
            f"int8 quantization is already in the ONNX ({', '.join(f'{k} ×{v}' for k, v in quant.most_common())})",
            "export the float model and quantize in QNN at compile time (fp16, or w8a16 for large models)"))
    shaped = Counter(n.op_type for n in all_nodes(graph) if n.op_type in DATA_SHAPED_OPS)
    if shaped:
        findings.append(Finding(
            "data-shaped", Severity.BLOCKER,
            f"ops whose output size depends on the data ({', '.join(f'{k} ×{v}' for k, v in shaped.items())}): "
            "a fixed-size graph cannot hold them",
            "move them out of the graph (into app code, before or after the model) or re-export without them"))
    producers = {o: n for n in graph.node for o in n.output}
    fed = {v.name for v in real_inputs(graph)}
    small_inputs = {v.name for v in real_inputs(graph) if _numel(tensor_info(v)) <= FREEZABLE_NUMEL}
    memo: dict[str, frozenset[str]] = {}
    for node in graph.node:
        if node.op_type not in CONTROL_FLOW_OPS:
            continue
        label = f"{node.op_type} node {node.name or '(unnamed)'}"
        # What drives the node: the condition of an If, the trip count and condition of a Loop.
        driving = [t for t in (node.input[:1] if node.op_type == "If" else node.input[:2]) if t]
        values = set().union(*(value_drivers(t, producers, fed, memo) for t in driving)) if driving else set()
        if node.op_type != "If":
            findings.append(Finding(
                "control-flow", Severity.BLOCKER, f"{label}: a loop breaks a static compile",
                "re-export with the loop unrolled to a fixed count, or run the loop in app code and export "
                "its body as the graph", node=label))
        elif not values:
            findings.append(Finding(
                "control-flow", Severity.FIXABLE,
                f"{label} depends only on constants and input shapes: once the shapes are fixed it is static",
                "prepare (folding removes it)", node=label, prepare=PrepareFix()))
        elif values <= small_inputs:
            findings.append(Finding(
                "control-flow", Severity.FIXABLE,
                f"{label} is driven by the value of the setting input(s) {', '.join(sorted(values))} "
                "(and at most input shapes): control flow breaks a static compile",
                " ".join(f"prepare --freeze {d}=VALUE" for d in sorted(values))
                + f" (the value your app always uses; the {node.op_type} folds away)", node=label,
                prepare=PrepareFix(freeze=sorted(values))))
        else:
            findings.append(Finding(
                "control-flow", Severity.BLOCKER,
                f"{label} depends on the values of {', '.join(sorted(values - small_inputs))}: control flow "
                "breaks a static compile",
                "re-export without it: compute both branches and select the result (torch.where)", node=label))
    setting: dict[str, list[str]] = {}  # small input -> the shape-setting nodes its value drives
    for node in graph.node:
        for slot in SHAPE_SETTING_INPUTS.get(node.op_type, ()):
            if len(node.input) > slot and node.input[slot]:
                for name in value_drivers(node.input[slot], producers, fed, memo) & small_inputs:
                    setting.setdefault(name, []).append(f"{node.op_type} {node.name or '(unnamed)'}")
    if setting:
        names = sorted(setting)
        findings.append(Finding(
            "setting-input", Severity.FIXABLE,
            "the value of the setting input(s) " + "; ".join(f"{n} sets the output size of {_clip(setting[n], 2)}"
                                                           for n in names)
            + ": a static graph needs it fixed (random values make sizes the model never has)",
            " ".join(f"prepare --freeze {n}=VALUE" for n in names) + " (the value your app always uses)",
            prepare=PrepareFix(freeze=names)))
    return findings


# The inputs that set an op's output size (by value): a Resize's scales and sizes, a Reshape's or Expand's shape, a
# Tile's repeats, a Slice's starts, ends and steps, a Pad's pads, a Range's start, limit and delta, a TopK's k.
SHAPE_SETTING_INPUTS = {"Resize": (2, 3), "Upsample": (1,), "Reshape": (1,), "Expand": (1,), "Tile": (1,),
                        "Slice": (1, 2, 4), "Pad": (1,), "Range": (0, 1, 2), "TopK": (1,), "ConstantOfShape": (0,)}

# Ops whose output says only something about the shape of their input, never about its values.
SHAPE_ONLY_OPS = {"Shape", "Size"}


def value_drivers(tensor: str, producers: Mapping[str, onnx.NodeProto], graph_inputs: set[str],
                  memo: dict[str, frozenset[str]] | None = None) -> set[str]:
    """The graph inputs whose values a tensor is computed from. A path through Shape or Size reads only the
    input's shape, which `--shape` fixes, so it does not count; initializers and constants do not either.
    `memo` carries the answers over calls, so asking for every node of a graph stays linear (no recursion)."""
    memo = {} if memo is None else memo
    started: set[str] = set()
    todo = [tensor]
    while todo:
        name = todo[-1]
        node = producers.get(name)
        if name in memo:
            todo.pop()
        elif not name or name in graph_inputs or node is None or node.op_type in SHAPE_ONLY_OPS:
            memo[name] = frozenset({name}) if name and name in graph_inputs else frozenset()
            todo.pop()
        elif name not in started:  # first visit: its inputs first (a name met again on a cycle counts as none)
            started.add(name)
            todo.extend(t for t in node.input if t not in memo and t not in started)
        else:
            memo[name] = frozenset().union(*(memo.get(t, frozenset()) for t in node.input))
            todo.pop()
    return set(memo[tensor])


def taken_by_the_htp(finding: Finding) -> Finding:
    """The measurement outranks the reading: with every node on the HTP, a control-flow node that looked
    value-dependent was folded by ONNX Runtime for these shapes or taken whole by the QNN EP; nothing to re-export."""
    return Finding("control-flow", Severity.INFO,
                   f"{finding.node}: runs on the HTP as measured (every node on the HTP: ONNX Runtime folds it for "
                   "these shapes or the QNN EP takes it)",
                   "none needed; validate compares its outputs with the CPU on the HTP emulator", node=finding.node)


def after_freezing(finding: Finding) -> Finding:
    """A measurement made while a setting input still sizes tensors (a Resize's scale from downsample_ratio): the
    nodes it sizes are static once it is frozen, so the CPU nodes are judged on the prepared model."""
    return Finding("htp", Severity.INFO, f"{finding.message} (measured with the setting input(s) not yet frozen)",
                   "prepare --freeze first, then check the prepared model")


def _numel(info: TensorInfo) -> float:
    if info.dynamic:
        return math.inf
    return math.prod(info.static_shape)


def _clip(names: list[str], keep: int = 6) -> str:
    names = list(dict.fromkeys(names))
    return ", ".join(names[:keep]) + (f" and {len(names) - keep} more" if len(names) > keep else "")


def measured(m: HtpMeasurement, graph: onnx.GraphProto) -> list[Finding]:
    if not m.measured and "not installed" in m.reason:
        return [Finding("htp", Severity.WARNING, "op support on the HTP not measured: onnxruntime-qnn is not installed",
                        "pip install onnxruntime-qnn (Linux x86-64) and check again")]
    flow = [f"{n.op_type} node {n.name or '(unnamed)'}" for n in graph.node if n.op_type in CONTROL_FLOW_OPS]
    if not m.measured and flow and "INVALID_GRAPH" in m.reason:
        # ONNX Runtime cuts the graph for the QNN EP around the control flow and fails on its own result (e.g. "Nodes
        # in a graph must be topologically sorted" when a branch reads the outer graph): the control flow's finding
        # is the one to act on, not a second blocker.
        return [Finding("htp", Severity.INFO,
                        f"op support on the HTP not measured: ONNX Runtime cannot partition the graph for the QNN EP "
                        f"around {_clip(flow, 2)} (it reports the result as an invalid graph); on the phone the model "
                        "would run on the CPU", "fix the control-flow finding, then check again")]
    if not m.measured:
        return [Finding("htp", Severity.BLOCKER, f"{m.reason} ({m.soc})",
                        "re-export avoiding the ops the message names, then check again")]
    if not m.cpu_nodes:
        return []
    ops = Counter(n.op_type for n in m.cpu_nodes)
    return [Finding(
        "htp", Severity.BLOCKER,
        f"{len(m.cpu_nodes)} of {m.total_nodes} nodes would run on the CPU in {m.cpu_partitions} partition(s) "
        f"on {m.soc} ({', '.join(f'{k} ×{v}' for k, v in ops.most_common())}): each CPU partition costs a "
        "round trip and most of the NPU's gain",
        "re-export replacing these ops with ones the HTP runs, or move them into app code")]


@dataclass(frozen=True)
class EdgeCut:
    """A `prepare --split-at` cut that puts some nodes, and what must go with them, on the CPU at one edge."""

    part: Side  # the side that runs on the CPU
    cut: list[str]  # the tensors to cut at
    size: int  # nodes on the CPU side
    total: int  # nodes in the graph

    @property
    def fix(self) -> str:
        return (f"prepare --split-at {','.join(self.cut)} --cpu-part {self.part}: the {self.part} ({self.size} nodes) "
                f"runs on the CPU, the other {self.total - self.size} on the NPU")


def edge_cut(graph: onnx.GraphProto, cpu: set[int], int64: set[str]) -> EdgeCut | None:
    """When every node in `cpu` (indices into graph.node) sits at one edge of the graph (a mel front end's computed
    Clip floor, a post-processing tail, a float64 decoding), the cut that runs that edge on the CPU and the rest, at
    least as many nodes, on the NPU; None when the nodes are not at an edge. `int64`: the graph's int64 tensors."""
    if not cpu:
        return None
    constant = constant_tensors(graph)
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o and o not in constant}
    reads = [[producer[u] for u in outer_reads(n) if u in producer] for n in graph.node]
    readers: list[list[int]] = [[] for _ in graph.node]
    for i, before in enumerate(reads):
        for j in before:
            readers[j].append(i)
    counted = [i for i, n in enumerate(graph.node) if n.op_type != "Constant" and not set(n.output) <= constant]
    options = []
    for part, edges in ((Side.HEAD, reads), (Side.TAIL, readers)):
        start = set(cpu)
        while True:
            side = _closure(start, edges)  # the CPU nodes and all they need (head) or all that needs them (tail)
            if part == Side.HEAD:
                cut = [u for i, n in enumerate(graph.node) if i not in side for u in outer_reads(n)
                       if producer.get(u) in side]
            else:
                cut = [u for i in sorted(side) for u in outer_reads(graph.node[i])
                       if u in producer and producer[u] not in side]
            # an int64 tensor at the cut would be an int64 input or output of the NPU part: its other end (the node
            # reading it after a head, the one making it before a tail) joins the CPU side too
            wide = [u for u in cut if u in int64]
            if not wide:
                break
            start |= ({i for i, n in enumerate(graph.node) if i not in side and set(outer_reads(n)) & set(wide)}
                      if part == Side.HEAD else {producer[u] for u in wide})
        if part == Side.HEAD and any(producer.get(o.name) in side for o in graph.output):
            continue  # the head would also make a graph output: not one cut
        if part == Side.TAIL:  # as prepare splits: the head is what the cut needs, all else (side branches too) the
            # tail
            side = set(range(len(graph.node))) - _closure({producer[u] for u in cut}, reads)
        size = sum(1 for i in counted if i in side)
        if cut and 2 * size <= len(counted):
            options.append(EdgeCut(part, list(dict.fromkeys(cut)), size, len(counted)))
    return min(options, key=lambda o: o.size) if options else None


def _typed(values: Mapping[str, onnx.ValueInfoProto], dtype: str) -> set[str]:
    return {name for name, v in values.items() if dtype_name(v.type.tensor_type.elem_type) == dtype}


def edge_split(model: onnx.ModelProto, m: HtpMeasurement) -> Finding | None:
    """The measured CPU nodes' edge_cut as a fixable finding, else None."""
    graph = model.graph
    index = {n.name: i for i, n in enumerate(graph.node) if n.name}
    if any(n.name not in index for n in m.cpu_nodes):
        return None  # a node the measurement names that the graph does not: no cut can be trusted
    found = edge_cut(graph, {index[n.name] for n in m.cpu_nodes}, _typed(inferred_values(model), "int64"))
    if found is None:
        return None
    ops = Counter(n.op_type for n in m.cpu_nodes)
    return Finding(
        "htp", Severity.FIXABLE,
        f"{len(m.cpu_nodes)} of {m.total_nodes} nodes would run on the CPU on {m.soc} "
        f"({', '.join(f'{k} ×{v}' for k, v in ops.most_common())}), all in the graph's {found.part}",
        f"{found.fix} (or re-export replacing these ops with ones the HTP runs)",
        prepare=PrepareFix(split_at=found.cut, cpu=found.part))


def float64_split(model: onnx.ModelProto) -> Finding | None:
    """float64 kept to one edge (a pitch or box decoding after the network): the split that runs it on the CPU,
    as a fixable finding, else None. The float64 nodes are those with a float64 output, by shape inference."""
    graph = model.graph
    values = inferred_values(model)
    f64 = _typed(values, "float64")
    nodes = {i for i, n in enumerate(graph.node) if set(n.output) & f64}
    found = edge_cut(graph, nodes, _typed(values, "int64"))
    if found is None:
        return None
    names = [graph.node[i].name or graph.node[i].op_type for i in sorted(nodes)]
    return Finding("float64", Severity.FIXABLE,
                   f"float64 in the graph's {found.part} only ({_clip(names)}): the HTP has no float64",
                   f"{found.fix} (or re-export in float32)", prepare=PrepareFix(split_at=found.cut, cpu=found.part))


def _closure(start: set[int], edges: list[list[int]]) -> set[int]:
    seen, todo = set(start), list(start)
    while todo:
        for j in edges[todo.pop()]:
            if j not in seen:
                seen.add(j)
                todo.append(j)
    return seen


# --- one line per CPU op: the HTP rule it breaks -----------------------------------------------------

NO_RULE = "the HTP compiler refused it; no documented rule"


def _rules() -> dict[str, Any]:
    """data/htp_rules.json: each rule with its source (a public file and when it was read, or a measurement here)."""
    text = resources.files("qnndeploy").joinpath("data/htp_rules.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def _matches(when: str, node: onnx.NodeProto, ranks: Mapping[str, int], builders: set[str]) -> bool:
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if when == "allowzero":
        return bool(attrs.get("allowzero", 0))
    if when == "several-axes":
        rank = ranks.get(node.input[0], 0)
        return rank > 0 and int(attrs.get("axis", -1)) % rank < rank - 1
    if when == "above-5d":
        return any(ranks.get(t, 0) > 5 for t in (*node.input, *node.output))
    if when == "no-builder":
        return node.op_type not in builders
    return when == ""


def _first_rules(cpu: list[CpuNode], model: onnx.ModelProto) -> dict[str, dict[str, Any] | None]:
    """CPU node name -> the first rule of data/htp_rules.json it breaks (None: none written, or not a model node)."""
    data = _rules()
    builders = set(data["builders"]["ops"]) | set(data["builders"]["measured"]["ops"])
    ranks = {name: len(v.type.tensor_type.shape.dim) for name, v in inferred_values(model).items()
             if v.type.tensor_type.HasField("shape")}
    by_name = {n.name: n for n in model.graph.node if n.name}
    return {c.name: next((r for r in data["rules"] if c.name in by_name and r["op"] in (c.op_type, "*")
                          and _matches(r["when"], by_name[c.name], ranks, builders)), None) for c in cpu}


def rewrites_for(cpu: list[CpuNode], model: onnx.ModelProto) -> dict[str, str]:
    """CPU node name -> the --rewrite kind its rule names (prepare matches it again, after folding, and proves it)."""
    return {name: rule["rewrite"] for name, rule in _first_rules(cpu, model).items() if rule and rule.get("rewrite")}


def htp_rules(cpu: list[CpuNode], model: onnx.ModelProto) -> list[Finding]:
    """One line per op type among the CPU nodes: the first rule of data/htp_rules.json a node of it breaks, with
    the rewrite that removes it or the rule's source; NO_RULE where none is written (nothing is guessed)."""
    if not cpu:
        return []
    first = _first_rules(cpu, model)
    names = {n.name for n in model.graph.node}
    found: dict[str, tuple[int, dict[str, Any] | None, bool]] = {}
    for c in cpu:
        count, seen, made = found.get(c.op_type, (0, None, True))
        found[c.op_type] = (count + 1, seen or first[c.name], made and c.name not in names)
    out = []
    for op, (count, rule, made) in found.items():
        if rule is None and made:
            out.append(Finding("htp-rule", Severity.INFO,
                               f"{op} ×{count}: not a node of the model (onnxruntime's own graph optimizations made "
                               "it from the nodes around it)", "it goes where the nodes it was made from go"))
        elif rule is None:
            out.append(Finding("htp-rule", Severity.INFO, f"{op} ×{count}: {NO_RULE}",
                               "re-export replacing it with ops the HTP runs, or move it into app code"))
        else:
            source = rule["source"] + (f" (read {rule['read']})" if rule.get("read") else "")
            out.append(Finding("htp-rule", Severity.INFO, f"{op} ×{count}: {rule['rule']}",
                               (f"prepare --rewrite {rule['rewrite']}; " if rule.get("rewrite") else "")
                               + f"source: {source}"))
    return out

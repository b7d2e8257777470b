"""How many bytes the HTP compiler stores for a model, and how its layers go into parts that each load on the phone.

The ONNX's own size misleads: the compiler keeps a constant once for each kind of op that reads it, so a tied token
embedding, read by the Gather that looks tokens up and by the lm_head's MatMul, is stored twice (a Whisper tiny
decoder: 56.7 MB of fp16 weights in the ONNX, a 98.3 MB binary). A constant read by several ops of one kind (weights
shared between layers) is stored once. How wide each copy is follows the precision and what reads it, as measured
with onnxruntime-qnn (tests/model/test_loadplan.py compiles models and compares):

- fp16: every floating-point constant 2 bytes an element.
- w8a16 (onnxruntime's QNN quantizer, model/quantize.py): MatMul/Gemm/Conv weights and normalization scales 1 byte;
  biases int32 (4 bytes); a table a Gather reads 16-bit (2 bytes), and so is the same table where a MatMul also
  reads it (one quantization per constant: a tied lm_head is 16-bit too); other constants 16-bit.
- w4a16: as w8a16, but 2-D MatMul/Gemm weights 4-bit in blocks of 32 along the reduction axis, each block with a
  4-bit scale multiplier (LPBQ), plus a float scale per output channel; 8-bit where the axis does not divide by 32.

The load budget per HTP arch is data (data/load_budget.json, each figure with its source); `plan_parts` puts
consecutive layers into the fewest parts that fit it, the embedding in the first part and the lm_head in the last.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnndeploy.base.errors import BadInput
from qnndeploy.base.htparch import HtpArch
from qnndeploy.model.onnxio import dtype_name, load_model

if TYPE_CHECKING:
    import onnx

# Ops the compiler folds into the constant they read (a transposed or reshaped weight is stored once, folded).
_FOLDED = {"Transpose", "Reshape", "Cast", "Identity", "Unsqueeze", "Squeeze", "Flatten", "DequantizeLinear"}
_FLOATS = {"float32", "float16", "bfloat16", "float64"}
# A constant already quantized in the model keeps its own width (a QDQ model's int8 or int4 weights).
_QUANTIZED_BYTES = {"int8": 1.0, "uint8": 1.0, "int16": 2.0, "uint16": 2.0, "int32": 4.0, "uint32": 4.0,
                    "int4": 0.5, "uint4": 0.5}
BLOCK = 32  # w4a16: elements per block along the reduction axis (model/quantize.py's block quantization)


class Use(StrEnum):
    """What reads a constant, as far as the compiler's storage goes: each kind keeps a copy of its own."""

    TABLE = "table"  # Gather's data: an embedding looked up by token
    WEIGHT = "weight"  # MatMul/Gemm/Conv weight
    BIAS = "bias"  # Gemm/Conv bias, a normalization's bias
    SCALE = "scale"  # a normalization's scale
    OTHER = "other"  # an Add's or Mul's constant and the rest


_WEIGHT_INPUTS = {"MatMul": (0, 1), "Gemm": (0, 1), "Conv": (1,), "ConvTranspose": (1,), "MatMulNBits": (1,)}
_BIAS_INPUTS = {"Gemm": 2, "Conv": 2, "ConvTranspose": 2, "LayerNormalization": 2, "InstanceNormalization": 2,
                "BatchNormalization": 2}
_SCALE_INPUTS = {"LayerNormalization": 1, "SimplifiedLayerNormalization": 1, "RMSNormalization": 1,
                 "InstanceNormalization": 1, "BatchNormalization": 1}
_TABLE_OPS = {"Gather", "GatherElements", "GatherND"}


@dataclass(frozen=True)
class StoredConstant:
    """One constant of the model as the compiler stores it: a copy per use, each `bytes_each` long."""

    name: str
    elements: int
    uses: tuple[Use, ...]
    bytes_each: int

    @property
    def bytes(self) -> int:
        return self.bytes_each * len(self.uses)


@dataclass(frozen=True)
class Stored:
    """What the compiler stores for a model at one precision: the constants, and the bytes that are second copies."""

    precision: str
    constants: tuple[StoredConstant, ...]

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.constants)

    @property
    def copies(self) -> tuple[StoredConstant, ...]:
        """The constants stored more than once (a tied embedding)."""
        return tuple(c for c in self.constants if len(c.uses) > 1)

    @property
    def extra_bytes(self) -> int:
        """Bytes spent on second copies: what the ONNX does not show."""
        return sum(c.bytes - c.bytes_each for c in self.copies)


def stored_bytes(model_path: Path, precision: str) -> int:
    """Bytes of constants the HTP compiler stores for the model at `model_path` built at `precision` (fp16, w8a16,
    w4a16): each constant once per kind of op that reads it. Read without the weights' data."""
    return stored(load_model(Path(model_path), weights=False).graph, precision).bytes


def stored(graph: onnx.GraphProto, precision: str) -> Stored:
    """The graph's constants as the compiler stores them at `precision` (see the module's docstring)."""
    if precision not in ("fp16", "w8a16", "w4a16"):
        raise BadInput(f"precision {precision!r}: give fp16, w8a16 or w4a16")
    tensors = _constants(graph)
    uses = _uses(graph, set(tensors))
    out = []
    for name, t in tensors.items():
        if name not in uses:
            continue
        found, dequantized = uses[name]
        elements = math.prod(t.dims)
        each = _bytes_each(dtype_name(t.data_type), list(t.dims), found, dequantized, precision)
        if each:
            out.append(StoredConstant(name, elements, tuple(sorted(found)), each))
    return Stored(precision, tuple(out))


def _constants(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    found = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.HasField("t"):
                    found[node.output[0]] = attr.t
    return found


def _uses(graph: onnx.GraphProto, constants: set[str]) -> dict[str, tuple[set[Use], bool]]:
    """For each constant, the kinds of op that finally read it, followed through the ops the compiler folds into
    it (a Transpose of a weight, a DequantizeLinear of an int8 one) while their other inputs are constants too; and
    whether it is read through a DequantizeLinear (a quantized weight, stored at its own width)."""
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name:
                readers.setdefault(name, []).append((node, i))
    out: dict[str, tuple[set[Use], bool]] = {}
    for name in constants:
        kinds: set[Use] = set()
        dequantized = False
        todo, seen = [name], {name}
        while todo:
            tensor = todo.pop()
            for node, index in readers.get(tensor, ()):
                if node.op_type in _FOLDED and index == 0 and all(i in constants or i in seen or not i
                                                                 for i in node.input[1:]):
                    dequantized |= node.op_type == "DequantizeLinear"
                    for o in node.output:
                        if o and o not in seen:
                            seen.add(o)
                            todo.append(o)
                elif node.op_type not in ("DequantizeLinear", "QuantizeLinear"):  # not a scale or zero point
                    kinds.add(_use(node.op_type, index))
        if kinds:
            out[name] = (kinds, dequantized)
    return out


def _use(op: str, index: int) -> Use:
    if op in _TABLE_OPS and index == 0:
        return Use.TABLE
    if index in _WEIGHT_INPUTS.get(op, ()):
        return Use.WEIGHT
    if _BIAS_INPUTS.get(op) == index:
        return Use.BIAS
    if _SCALE_INPUTS.get(op) == index:
        return Use.SCALE
    return Use.OTHER


def _bytes_each(dtype: str, dims: list[int], uses: set[Use], dequantized: bool, precision: str) -> int:
    """Bytes of one stored copy of a constant."""
    elements = math.prod(dims)
    if dequantized and dtype in _QUANTIZED_BYTES:
        return math.ceil(elements * _QUANTIZED_BYTES[dtype])  # quantized in the model: stored at its own width
    if dtype not in _FLOATS:
        return 0  # shapes, indices, masks: the ops' parameters
    if precision == "fp16":
        return 2 * elements
    # w8a16 and w4a16: one width per constant, the widest its uses need
    if Use.TABLE in uses or Use.OTHER in uses:
        return 2 * elements
    if Use.BIAS in uses:
        return 4 * elements
    if Use.WEIGHT in uses and precision == "w4a16":
        return _w4_bytes(dims)
    return elements


def _w4_bytes(dims: list[int]) -> int:
    """A 4-bit block-quantized 2-D weight: half a byte an element, a 4-bit multiplier per block of 32 along the
    reduction axis (the first of a MatMul's [K, N] weight) and a float scale per output channel; 8-bit where the
    axis does not divide into blocks and for weights of other ranks (model/quantize.py's int4_weights)."""
    elements = math.prod(dims)
    if len(dims) != 2 or dims[0] % BLOCK:
        return elements  # a Conv's weight, or a reduction axis not in whole blocks: 8-bit
    return math.ceil(elements / 2 + elements / BLOCK / 2) + 4 * dims[1]


# --- decoders ------------------------------------------------------------------------------------

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")


def kv_layers(graph: onnx.GraphProto) -> int:
    """How many layers feed a KV cache in (past_key_values.N.key/value inputs, as transformers and optimum export a
    decoder): 0 for a model that is no such decoder."""
    inits = {t.name for t in graph.initializer}
    return len({m[1] for v in graph.input if v.name not in inits and (m := _PAST.match(v.name))})


@dataclass(frozen=True)
class DecoderBytes:
    """A decoder's stored bytes by place: the token embedding (first part), each layer (taken as equal: the blocks
    of a decoder are alike) and the lm_head (last part)."""

    embedding: int
    layer: int
    lm_head: int
    layers: int

    def plan(self, budget: int) -> PartPlan:
        return plan_parts([self.layer] * self.layers, budget, first_extra=self.embedding, last_extra=self.lm_head)

    def split(self, count: int) -> tuple[PlannedPart, ...]:
        return balanced([self.layer] * self.layers, count, first_extra=self.embedding, last_extra=self.lm_head)


def decoder_bytes(graph: onnx.GraphProto, store: Stored, logits: str = "logits") -> DecoderBytes:
    """Split what `store` counts into the embedding (a Gather's table copy), the lm_head (the weight copy of the
    MatMul or Gemm that makes `logits`, or the graph's first output) and the layers' share of the rest."""
    layers = kv_layers(graph)
    if not layers:
        raise BadInput("not a decoder with a KV cache: no past_key_values.N.key/value inputs")
    by_name = {c.name: c for c in store.constants}
    embedding = sum(c.bytes_each for c in store.constants if Use.TABLE in c.uses)
    head = _lm_head(graph, set(by_name), logits)
    lm_head = by_name[head].bytes_each if head in by_name else 0
    rest = store.bytes - embedding - lm_head
    return DecoderBytes(embedding, math.ceil(rest / layers), lm_head, layers)


def _lm_head(graph: onnx.GraphProto, constants: set[str], logits: str) -> str | None:
    """The constant behind the MatMul/Gemm weight nearest before the logits output (through reshapes, casts, a
    bias Add), itself followed back through the ops folded into it; None when there is none."""
    made = {o: n for n in graph.node for o in n.output if o}
    names = [o.name for o in graph.output]
    todo = [logits if logits in names else names[0]] if names else []
    seen = set(todo)
    while todo:
        node = made.get(todo.pop(0))
        if node is None:
            continue
        if node.op_type in ("MatMul", "Gemm"):
            for weight in (node.input[1], node.input[0]):
                source = _folded_source(weight, made, constants)
                if source is not None:
                    return source
        fresh = [i for i in node.input if i and i not in constants and i not in seen]
        seen.update(fresh)
        todo += fresh
    return None


def _folded_source(name: str, made: dict[str, onnx.NodeProto], constants: set[str]) -> str | None:
    while name not in constants:
        node = made.get(name)
        if node is None or node.op_type not in _FOLDED or not node.input:
            return None
        name = node.input[0]
    return name


# --- the budget ------------------------------------------------------------------------------------

class BudgetStatus(StrEnum):
    """Where a budget figure comes from (data/load_budget.json)."""

    MEASURED = "measured"  # by qnndeploy on a phone
    PUBLISHED = "published"  # a source states it
    DERIVED = "derived"  # qnndeploy computed it from published figures
    DEFAULT = "default"  # no figure for the arch: the default rule gave it
    GIVEN = "given"  # by the user (check --context-gb)


@dataclass(frozen=True)
class Budget:
    """The bytes one part's context binary is planned to hold on an arch, and why."""

    arch: str
    bytes: int
    status: BudgetStatus
    label: str  # where the figure comes from, in a few words
    says: str  # the same at length
    source: str  # a URL or the file it was read from (empty for the default rule)


@cache
def _data() -> dict[str, Any]:
    text = resources.files("qnndeploy").joinpath("data/load_budget.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def budget_for(arch: str | int) -> Budget:
    """The load budget of one part on `arch` (v79, 79): its own figure where a source supports one, else the
    default rule's (ours: the smallest figure any arch has)."""
    name = str(HtpArch.parse(arch))
    data = _data()
    row = data["arches"].get(name)
    if row is not None and row["bytes"] is not None:
        source = data["sources"].get(row.get("source", ""), {})
        return Budget(name, int(row["bytes"]), BudgetStatus(row["status"]), row["label"], row["says"],
                      source.get("url") or source.get("where", ""))
    known = [(int(r["bytes"]), a) for a, r in data["arches"].items() if r["bytes"] is not None]
    most, of = min(known)
    why = row["says"] if row is not None else f"{name} is not in data/load_budget.json"
    label = f"no figure for {name}: {of}'s, the smallest known (qnndeploy's default rule)"
    return Budget(name, most, BudgetStatus.DEFAULT, label,
                  f"{why}; the default rule (qnndeploy's): the smallest figure of any arch, {of}'s", "")


# --- parts -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PlannedPart:
    """Units first..last (inclusive, 0-based) in one part, and the bytes it stores with its extras."""

    index: int  # 1-based
    first: int
    last: int
    bytes: int


@dataclass(frozen=True)
class PartPlan:
    """Consecutive units in the fewest parts that fit the budget, evened out."""

    parts: tuple[PlannedPart, ...]
    budget: int
    total: int  # every unit and both extras
    reason: str

    @property
    def count(self) -> int:
        return len(self.parts)


def plan_parts(units: Sequence[int], budget: int, *, first_extra: int = 0, last_extra: int = 0) -> PartPlan:
    """Put consecutive units (a layer's stored bytes each) into the fewest parts whose bytes fit `budget`, the first
    part also holding `first_extra` (the embedding), the last `last_extra` (the final norm and lm_head); among the
    plans with that many parts, the one whose largest part is smallest. BadInput when a unit alone, with the extra
    its place forces on it, exceeds the budget."""
    if not units:
        raise BadInput("no layers to put into parts")
    if budget <= 0 or any(u < 0 for u in units) or first_extra < 0 or last_extra < 0:
        raise BadInput("the budget must be positive and the sizes not negative")
    n = len(units)
    for i, u in enumerate(units):
        alone = u + (first_extra if i == 0 else 0) + (last_extra if i == n - 1 else 0)
        if alone > budget:
            with_ = [w for w, on in (("the embedding", i == 0 and first_extra), ("the lm_head", i == n - 1 and
                                                                                 last_extra)) if on]
            raise BadInput(f"layer {i} stores {_mb(u)}" + (f" and, with {' and '.join(with_)}, {_mb(alone)}" if with_
                           else "") + f": over the {_mb(budget)} one part may hold, so no split into whole layers "
                           "loads (fewer bits per weight, or a model with smaller layers)")
    total = sum(units) + first_extra + last_extra
    fewest = _fill(units, budget, first_extra, last_extra)
    assert fewest is not None  # every unit fits alone (checked above)
    count = len(fewest)
    parts = balanced(units, count, first_extra=first_extra, last_extra=last_extra)
    reason = (f"{_mb(total)} stored fits one part of {_mb(budget)}" if count == 1 else
              f"{_mb(total)} stored is over the {_mb(budget)} one part may hold: {count} parts of at most "
              f"{_mb(max(p.bytes for p in parts))}")
    return PartPlan(parts, budget, total, reason)


def balanced(units: Sequence[int], count: int, *, first_extra: int = 0, last_extra: int = 0
             ) -> tuple[PlannedPart, ...]:
    """Consecutive units in `count` parts (at most one per unit), the largest part as small as it goes: what
    check plans and prepare --generate --parts cuts, so that the parts prepare writes are the ones check advised."""
    n = len(units)
    count = max(1, min(count, n))
    lo, hi = max(units), sum(units) + first_extra + last_extra  # the smallest cap giving no more parts: bisected
    while lo < hi:
        mid = (lo + hi) // 2
        found = _fill(units, mid, first_extra, last_extra)
        if found is not None and len(found) <= count:
            hi = mid
        else:
            lo = mid + 1
    groups = _fill(units, lo, first_extra, last_extra)
    assert groups is not None
    while len(groups) < count:  # fewer parts already fit: the part of most units halved, as asked
        k = max(range(len(groups)), key=lambda i: groups[i][1] - groups[i][0])
        a, b = groups[k]
        groups[k:k + 1] = [(a, (a + b) // 2), ((a + b) // 2 + 1, b)]
    return tuple(PlannedPart(k + 1, a, b, sum(units[a:b + 1]) + (first_extra if a == 0 else 0)
                             + (last_extra if b == n - 1 else 0)) for k, (a, b) in enumerate(groups))


def _fill(units: Sequence[int], cap: int, first_extra: int, last_extra: int) -> list[tuple[int, int]] | None:
    """Greedy: each part takes units while they fit `cap`; None when a unit cannot fit even alone. Filling each part
    in turn gives the fewest parts; a part that ends the model must also hold the lm_head, so the last unit's part is
    closed early when the lm_head would not fit."""
    n = len(units)
    groups: list[tuple[int, int]] = []
    start, held = 0, first_extra
    for i, u in enumerate(units):
        tail = last_extra if i == n - 1 else 0
        if held + u + tail > cap and i > start:
            groups.append((start, i - 1))
            start, held = i, 0
        if held + u + tail > cap:
            return None
        held += u
    groups.append((start, n - 1))
    return groups


def _mb(n: int | float) -> str:
    return f"{n / 1e6:,.1f} MB"


"""A decoder LLM as the app runs it on the HTP: static prompt and decode graphs over a fixed-size KV cache, in parts.

The source is a decoder exported the way transformers and optimum export one: `input_ids`, `attention_mask`,
`position_ids` and `past_key_values.{i}.key/value` in, `logits` and `present.{i}.key/value` out, every length
dynamic. The HTP needs static shapes, so the app runs two graphs of it: a prompt graph that takes N tokens at once
and a decode graph that takes one, both at a fixed context length CL. Each layer's cache is one buffer of CL-1
entries kept by the host, right-aligned (the newest entry last, empty slots first, masked out by attention_mask 0);
a graph gets the last CL-s entries as its past and gives only its s new entries, which the host shifts in.

`DecoderLayout` reads the names off the source; `Stepper` is that host loop over any graph callables (onnxruntime's CPU,
the HTP emulator), the same loop the app's glue runs; `layer_inputs` finds where each layer starts in a static
graph, so the layers can be cut into parts that load.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base.errors import BadInput, first_line
from qnndeploy.model.decode import GraphCall
from qnndeploy.model.onnxio import outer_reads, real_inputs, tensor_info
from qnndeploy.model.samples import Sample

if TYPE_CHECKING:
    import numpy as np
    import onnx

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
_PRESENT = re.compile(r"^present\.(\d+)\.(key|value)$")


@dataclass(frozen=True)
class KvLayer:
    """One layer's cache: the inputs that take its past and the outputs that give its new entries."""

    layer: int
    key: tuple[str, str]  # (input, output)
    value: tuple[str, str]


@dataclass(frozen=True)
class DecoderLayout:
    """Where a decoder's tokens, mask, positions, logits and each layer's cache are, and the cache's shape."""

    input_ids: str
    attention_mask: str
    position_ids: str
    logits: str
    kv: tuple[KvLayer, ...]
    kv_heads: int
    head_dim: int
    dtype: str  # the cache's element type

    @property
    def layers(self) -> int:
        return len(self.kv)

    def kv_inputs(self, layers: Sequence[int] | None = None) -> list[str]:
        return [n for kv in self.kv if layers is None or kv.layer in layers for n in (kv.key[0], kv.value[0])]

    def kv_outputs(self, layers: Sequence[int] | None = None) -> list[str]:
        return [n for kv in self.kv if layers is None or kv.layer in layers for n in (kv.key[1], kv.value[1])]


def layout(graph: onnx.GraphProto, what: str = "the model") -> DecoderLayout:
    """The decoder layout of `graph`; BadInput naming what is missing when it is not one."""
    inputs = {v.name: tensor_info(v) for v in real_inputs(graph)}
    outputs = {v.name for v in graph.output}
    past: dict[int, dict[str, str]] = {}
    for name in inputs:
        m = _PAST.match(name)
        if m:
            past.setdefault(int(m[1]), {})[m[2]] = name
    if not past:
        raise BadInput(f"{what} has no past_key_values.N.key/value inputs: --generate takes a decoder exported with "
                       "its KV cache (transformers/optimum layout: input_ids, attention_mask, position_ids, "
                       "past_key_values.N.key/value -> logits, present.N.key/value)")
    missing = [n for n in ("input_ids", "attention_mask", "position_ids", "logits")
               if n not in inputs and n not in outputs]
    if missing:
        raise BadInput(f"{what} has no {', '.join(missing)}: --generate takes the transformers/optimum layout "
                       "(input_ids, attention_mask, position_ids in; logits out)")
    kv: list[KvLayer] = []
    for i in range(len(past)):
        names = past.get(i, {})
        outs = {k: f"present.{i}.{k}" for k in ("key", "value")}
        if set(names) != {"key", "value"} or not set(outs.values()) <= outputs:
            raise BadInput(f"{what}: layer {i} lacks past_key_values.{i}.key/value inputs or present.{i}.key/value "
                           "outputs (layers must be numbered 0, 1, ... without gaps)")
        kv.append(KvLayer(i, (names["key"], outs["key"]), (names["value"], outs["value"])))
    first = inputs[kv[0].key[0]]
    dims = first.shape or []
    heads, head_dim = (dims[1], dims[3]) if len(dims) == 4 else (None, None)
    if not isinstance(heads, int) or not isinstance(head_dim, int):
        raise BadInput(f"{what}: {kv[0].key[0]} is {first.shape_text()}; a cache input is [batch, kv_heads, past, "
                       "head_dim] with kv_heads and head_dim fixed")
    return DecoderLayout("input_ids", "attention_mask", "position_ids", "logits", tuple(kv), heads, head_dim,
                         first.dtype)


def static_shapes(lay: DecoderLayout, seq: int, context: int) -> dict[str, list[int]]:
    """The input shapes of the graph taking `seq` tokens at context length `context` (prepare --shape)."""
    shapes = {lay.input_ids: [1, seq], lay.position_ids: [1, seq], lay.attention_mask: [1, context]}
    shapes.update({n: [1, lay.kv_heads, context - seq, lay.head_dim] for n in lay.kv_inputs()})
    return shapes


def new_entries_only(graph: onnx.GraphProto, lay: DecoderLayout, seq: int) -> None:
    """Make each present.{i} output give only the `seq` new entries, not the whole concatenated cache: the host keeps
    the cache, and copying CL entries out per step is what the HTP should not do. The concatenated cache keeps being
    computed for the attention, under a new name; a present made by a Concat along the length axis whose last input
    holds `seq` entries becomes that input, any other a Slice of its last `seq` entries."""
    import numpy as np
    import onnx

    producer = {o: n for n in graph.node for o in n.output}
    shapes = {v.name: tensor_info(v) for v in [*graph.value_info, *graph.input, *graph.output]}
    for name in lay.kv_outputs():
        node = producer.get(name)
        last = node.input[-1] if node is not None and node.op_type == "Concat" else ""
        axis = next((a.i for a in node.attribute if a.name == "axis"), None) if node is not None else None
        info = shapes.get(last)
        dims = (info.shape or []) if info is not None else []
        full = f"{name}.concatenated"
        for n in graph.node:
            n.output[:] = [full if o == name else o for o in n.output]
            n.input[:] = [full if u == name else u for u in n.input]
        if axis in (2, -2) and len(dims) == 4 and dims[2] == seq:
            graph.node.append(onnx.helper.make_node("Identity", [last], [name], name=f"{name}/new_entries"))
            continue
        consts = [onnx.numpy_helper.from_array(np.array([v], np.int64), f"{name}/slice_{k}")
                  for k, v in (("start", -seq), ("end", 2**62), ("axis", 2))]
        graph.initializer.extend(consts)
        graph.node.append(onnx.helper.make_node("Slice", [full, *(c.name for c in consts)], [name],
                                                name=f"{name}/new_entries"))
    for value in graph.output:
        if value.name in lay.kv_outputs():
            value.type.tensor_type.shape.dim[2].dim_value = seq


# --- where each layer starts --------------------------------------------------------------------------------------

def layer_inputs(graph: onnx.GraphProto, lay: DecoderLayout) -> list[str]:
    """For layers 1..L-1, the tensor each starts from: the residual stream between layer k-1 and layer k.

    It is found from the graph alone: of the tensors every path from input_ids to the logits passes through (the
    logits' dominators), the latest that layer k's new key still depends on. What a later layer reads besides it
    (the mask and rotary tables computed once) joins the cut when the parts are planned."""
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    reached = _reached(graph, lay.input_ids)
    idom: dict[str, str | None] = {lay.input_ids: None}
    depth = {lay.input_ids: 0}
    for node in graph.node:  # ONNX keeps nodes in topological order
        preds = [u for u in dict.fromkeys(outer_reads(node)) if u in reached]
        if not preds:
            continue
        d: str | None = preds[0]
        for p in preds[1:]:
            d = _meet(d, p, idom, depth)
        for out in node.output:
            if out:
                idom[out] = d
                depth[out] = depth[d] + 1 if d is not None else 1
    chain: list[str] = []
    t: str | None = lay.logits
    while t is not None:
        chain.append(t)
        t = idom.get(t)
    chain.reverse()  # input_ids first
    rank = {n: k for k, n in enumerate(chain)}
    found: list[str] = []
    for kv in lay.kv[1:]:
        needed = _ancestors(graph, producer, kv.key[1])
        best = max((n for n in chain if n in needed and n != lay.input_ids), key=rank.__getitem__, default=None)
        if best is None or (found and rank[best] <= rank[found[-1]]):
            raise BadInput(f"cannot find where layer {kv.layer} starts: no tensor every path from the tokens to the "
                           "logits passes through before it (a model whose layers share a stream cannot be cut "
                           "into parts)")
        found.append(best)
    return found


def _meet(a: str | None, b: str, idom: dict[str, str | None], depth: dict[str, int]) -> str | None:
    x: str | None = a
    y: str | None = b
    while x is not None and y is not None and x != y:
        if depth.get(x, 0) >= depth.get(y, 0):
            x = idom.get(x)
        else:
            y = idom.get(y)
    return x if x == y else None


def _reached(graph: onnx.GraphProto, start: str) -> set[str]:
    reached = {start}
    for node in graph.node:
        if any(u in reached for u in outer_reads(node)):
            reached.update(o for o in node.output if o)
    return reached


def _ancestors(graph: onnx.GraphProto, producer: dict[str, int], tensor: str) -> set[str]:
    seen: set[str] = set()
    stack = [tensor]
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in producer:
            stack += list(outer_reads(graph.node[producer[t]]))
    return seen


def part_groups(graph: onnx.GraphProto, ends: Sequence[Sequence[str]]) -> list[set[int]]:
    """The node indices of each part: part k is every node the tensors `ends[k]` need that no earlier part has (the
    start of part k+1 and its own layers' new cache entries); the last part is the rest."""
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    groups: list[set[int]] = []
    taken: set[int] = set()
    for tensors in ends:
        needed = {producer[t] for e in tensors for t in _ancestors(graph, producer, e) if t in producer}
        groups.append(needed - taken)
        taken |= needed
    groups.append(set(range(len(graph.node))) - taken)
    return groups


# --- the host loop ---

def cpu_call(path: Path, what: str) -> GraphCall:
    """A graph on onnxruntime's CPU, called with more inputs than it takes (the loop's values): the CPU side."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 onnxruntime's exception types are not exported
        raise BadInput(f"{what} ({path.name}) does not load in onnxruntime: {first_line(e)}") from None
    names = [x.name for x in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}

    def run(feeds: Sample) -> Sample:
        return dict(zip(names, session.run(None, {k: v for k, v in feeds.items() if k in wanted}), strict=True))

    return run


def seeded_prompt(vocab: int, prompt_tokens: int, seed: int) -> list[int]:
    """A seeded random prompt of one and a half chunks: a full prompt chunk, then a padded one."""
    import numpy as np

    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, prompt_tokens + prompt_tokens // 2)]


@dataclass
class Stepper:
    """The app's loop over the parts: a prompt in chunks of `prompt_tokens`, then one token per decode step, each
    layer's cache a right-aligned buffer of context-1 entries. `prompt` and `decode` are the parts' callables in
    order; each part is fed the loop's inputs, the cache, and what the parts before it gave."""

    lay: DecoderLayout
    prompt_tokens: int
    context: int
    prompt: Sequence[GraphCall]
    decode: Sequence[GraphCall]
    cache: dict[str, np.ndarray] = field(default_factory=dict)  # each cache input's buffer
    valid: int = 0  # filled slots at the buffers' end
    position: int = 0
    watch: Callable[[int, int, Sample], None] | None = None  # called before each part: (seq, part index, inputs)

    def __post_init__(self) -> None:
        import numpy as np

        dtype = np.float16 if self.lay.dtype == "float16" else np.float32
        shape = (1, self.lay.kv_heads, self.context - 1, self.lay.head_dim)
        self.cache = {n: np.zeros(shape, dtype) for n in self.lay.kv_inputs()}

    def room(self) -> int:
        """Tokens the cache can still take."""
        return self.context - 1 - self.valid

    def feed(self, tokens: Sequence[int]) -> np.ndarray:
        """Run `tokens` (a prompt, or one token) and return the logits row after the last of them."""
        if not tokens:
            raise BadInput("nothing to run: give at least one token")
        if len(tokens) > self.room():
            raise BadInput(f"{len(tokens)} more tokens do not fit the context of {self.context} "
                           f"({self.valid} already in the cache)")
        row = None
        rest = list(tokens)
        while rest:
            if len(rest) == 1:
                row = self._step(rest, 1, self.decode)
                rest = []
            else:
                chunk, rest = rest[:self.prompt_tokens], rest[self.prompt_tokens:]
                row = self._step(chunk, self.prompt_tokens, self.prompt)
        assert row is not None
        return row

    def _step(self, tokens: list[int], seq: int, parts: Sequence[GraphCall]) -> np.ndarray:
        import numpy as np

        real = len(tokens)
        past = self.context - seq
        if self.valid > past:
            raise BadInput(f"a prompt chunk of {seq} needs at most {past} entries in the cache, it holds {self.valid}: "
                           "feed the prompt before decoding, or use a longer context")
        ids = np.zeros((1, seq), np.int32)
        ids[0, :real] = tokens
        mask = np.zeros((1, self.context), np.int32)
        mask[0, past - self.valid:] = 1
        values: Sample = {self.lay.input_ids: ids, self.lay.attention_mask: mask,
                          self.lay.position_ids: np.arange(self.position, self.position + seq,
                                                           dtype=np.int32)[None, :]}
        values.update({n: b[:, :, b.shape[2] - past:, :] for n, b in self.cache.items()})
        for k, call in enumerate(parts):
            if self.watch is not None:
                self.watch(seq, k, values)
            values.update(call(values))
        for kv in self.lay.kv:
            for past_name, new_name in (kv.key, kv.value):
                buf = self.cache[past_name]
                new = values[new_name][:, :, :real, :].astype(buf.dtype)
                buf[:, :, :-real, :] = buf[:, :, real:, :].copy()
                buf[:, :, -real:, :] = new
        self.valid += real
        self.position += real
        row: np.ndarray = np.asarray(values[self.lay.logits])[0, real - 1]
        return row


def greedy(stepper: Stepper, prompt: Sequence[int], steps: int) -> tuple[list[int], list[np.ndarray]]:
    """The prompt, then `steps` greedy tokens (fewer when the context fills): the tokens, and the logits row each
    was chosen from."""
    row = stepper.feed(prompt)
    tokens: list[int] = []
    rows: list[np.ndarray] = []
    while True:
        rows.append(row)
        tokens.append(int(row.argmax()))
        if len(tokens) >= steps or stepper.room() < 1:
            return tokens, rows
        row = stepper.feed([tokens[-1]])


def source_greedy(call: GraphCall, lay: DecoderLayout, prompt: Sequence[int], steps: int, dtype: str = "float32"
                  ) -> tuple[list[int], list[np.ndarray]]:
    """The same greedy loop on the source model as exported (dynamic lengths, the cache growing): the truth the
    static graphs are proven against. `call` runs the source with int64 ids."""
    import numpy as np

    np_dtype = np.float16 if dtype == "float16" else np.float32
    cache = {n: np.zeros((1, lay.kv_heads, 0, lay.head_dim), np_dtype) for n in lay.kv_inputs()}
    tokens: list[int] = []
    rows: list[np.ndarray] = []
    todo = list(prompt)
    position = 0
    while True:
        total = position + len(todo)
        out = call({lay.input_ids: np.array([todo], np.int64), lay.attention_mask: np.ones((1, total), np.int64),
                    lay.position_ids: np.arange(position, total, dtype=np.int64)[None, :], **cache})
        cache = {kv_in: np.asarray(out[kv_out]) for kv in lay.kv for kv_in, kv_out in (kv.key, kv.value)}
        position = total
        rows.append(np.asarray(out[lay.logits])[0, -1])
        tokens.append(int(rows[-1].argmax()))
        if len(tokens) >= steps:
            return tokens, rows
        todo = [tokens[-1]]

"""Cutting a model at tensors into parts that run one after another, and the split record that says which part runs
where: what `prepare --split-at/--split-size` writes, and what diagnose cuts to measure a split before it advises one.

A cut in two at named tensors makes the head every node the cut tensors need, the tail every other node. Whatever a
part reads from an earlier one (a skip connection past a cut) joins the cut, and a tensor made from constants alone
is copied into each part that reads it, so the parts chained by tensor name compute exactly the original. The parts
are cut here, not by onnx.utils.Extractor, which serializes the whole model for shape inference and so stops at
protobuf's 2 GB: shapes are inferred on the graph without its weights, and each part reads only its own weights.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from qnndeploy import __version__
from qnndeploy.base.errors import BadInput
from qnndeploy.base.kinds import Side
from qnndeploy.base.names import graph_name
from qnndeploy.model import samples
from qnndeploy.model.onnxio import (
    TensorInfo,
    all_tensors,
    constant_tensors,
    inferred_values,
    load_model,
    outer_reads,
    real_inputs,
    save_model,
    tensor_info,
    tensor_nbytes,
)
from qnndeploy.model.samples import Ranges, Sample

if TYPE_CHECKING:
    import onnx


class Chained(Protocol):
    """A part as the chain runs it: its model, the tensors it reads and those it makes."""

    @property
    def path(self) -> Path: ...
    @property
    def inputs(self) -> tuple[str, ...]: ...
    @property
    def outputs(self) -> tuple[str, ...]: ...


P = TypeVar("P", bound=Chained)


def chain_inputs(parts: Sequence[Chained], given: Ranges) -> tuple[list[TensorInfo], dict[str, tuple[int, int, str]]]:
    """The chain's own inputs (every part's input no earlier part makes), with each integer input's range as the
    part reading it implies (samples.int_ranges)."""
    made: set[str] = set()
    specs: list[TensorInfo] = []
    ranges: dict[str, tuple[int, int, str]] = {}
    for part in parts:
        graph = load_model(part.path, weights=False).graph
        for value in real_inputs(graph):
            if value.name not in made and value.name not in {s.name for s in specs}:
                specs.append(tensor_info(value))
        ranges.update({n: r for n, r in samples.int_ranges(graph, given).items() if n not in made})
        made.update(part.outputs)
    return specs, {n: r for n, r in ranges.items() if n in {s.name for s in specs}}


def run_chain(parts: Sequence[P], feeds: list[Sample], runner: Callable[[P, list[Sample]], list[Sample]]
              ) -> list[Sample]:
    """Every part in order, each fed what the chain's samples and the parts before it made: all the values."""
    values = [dict(f) for f in feeds]
    for part in parts:
        made = runner(part, [{n: v[n] for n in part.inputs} for v in values])
        for v, m in zip(values, made, strict=True):
            v.update(m)
    return values

PARTS = (Side.HEAD, Side.TAIL)
# Relative precision of a cut tensor's type: it is rounded to it between the parts, while onnxruntime's CPU computes
# the unsplit model's float16 chain in float32 (measured: it casts the weights and drops the Casts), so the chained
# parts are compared at the cut's precision at least.
CUT_PRECISION = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
BIG = 1_900_000_000  # bytes of weights a part holds inside its .onnx (protobuf stops at 2 GB); above: PART.onnx.data


@dataclass
class Part:
    name: str  # "head" or "tail"; by size "1", "2"…
    path: str
    runs_on: str  # "cpu" or "npu"
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    nodes: int
    weight_bytes: int  # as the part stores them


@dataclass
class Plan:
    """One part to cut: its nodes (graph indices, in graph order), the tensors it reads from the caller or an
    earlier part, and those it gives the caller or a later part."""

    name: str
    runs_on: str
    nodes: list[int]
    inputs: list[str]
    outputs: list[str]


def stem(out: Path) -> Path:
    return out.with_suffix("") if out.suffix == ".onnx" else out


def advised_output(model: Path) -> Path:
    """The -o check and diagnose print for a split of `model`: det.onnx or det.npu.onnx -> det-parts/det.onnx, so the
    parts are det-parts/det-head.onnx and det-tail.onnx, graphs the app knows as det-head and det-tail, beside the
    record det-parts/det.split.json."""
    name = graph_name(Path(model).name)
    return Path(model).with_name(f"{name}-parts") / f"{name}.onnx"


def split_paths(out: Path) -> tuple[Path, Path, Path]:
    """OUT.onnx -> (OUT-head.onnx, OUT-tail.onnx, OUT.split.json)."""
    s = stem(out)
    return (s.with_name(f"{s.name}-head.onnx"), s.with_name(f"{s.name}-tail.onnx"),
            s.with_name(f"{s.name}.split.json"))


def in_two(graph: onnx.GraphProto, at: list[str], cpu: Side) -> list[Plan]:
    """The head (every node the tensors `at` need) and the tail (every other node), the `cpu` one on the CPU."""
    first = head_nodes(graph, at)
    return plan_parts(graph, [first, set(range(len(graph.node))) - first], [p.value for p in PARTS],
                 ["cpu" if p == cpu else "npu" for p in PARTS])


def head_nodes(graph: onnx.GraphProto, at: list[str]) -> set[int]:
    """The head's node indices: every node the tensors `at` need."""
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    inputs = {i.name for i in graph.input}
    for t in at:
        if t in inputs:
            raise BadInput(f"--split-at {t}: it is a graph input, with nothing before it to run on its own")
        if t not in producer:
            raise BadInput(f"--split-at {t}: no node of the main graph makes a tensor of that name "
                           "(qnndeploy diagnose names the tensors; a subgraph's cannot be a cut)")
    head: set[int] = set()
    stack = [producer[t] for t in at]
    while stack:
        i = stack.pop()
        if i not in head:
            head.add(i)
            stack += [producer[u] for u in outer_reads(graph.node[i]) if u in producer]
    if len(head) == len(graph.node):
        raise BadInput(f"--split-at {','.join(at)}: every node is needed to compute it, so the tail would be "
                       "empty: cut at an earlier tensor")
    return head


def plan_parts(graph: onnx.GraphProto, groups: list[set[int]], names: list[str], runs_on: list[str]) -> list[Plan]:
    """Each group's inputs and outputs. A tensor made from constants alone never crosses: its nodes are copied
    into each part reading it (and the last part makes a graph output computed from constants alone)."""
    constant = constant_tensors(graph)
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    group_of = {i: k for k, g in enumerate(groups) for i in g}
    graph_inputs = [v.name for v in real_inputs(graph)]
    outputs = [o.name for o in graph.output]
    reads = [list(dict.fromkeys(u for i in sorted(g) for u in outer_reads(graph.node[i]))) for g in groups]
    crossing = [[u for u in r if u in producer and u not in constant and group_of.get(producer[u], k) < k]
                for k, r in enumerate(reads)]
    found = []
    for k, group in enumerate(groups):
        made = {o for i in group for o in graph.node[i].output if o}
        last = k == len(groups) - 1
        own = [o for o in outputs if o in made or (last and o in constant)]
        copied = _constant_nodes(graph, [u for u in [*reads[k], *own] if u in constant and u not in made], producer)
        given = [t for later in crossing[k + 1:] for t in later if t in made]
        found.append(Plan(names[k], runs_on[k], sorted(group | copied),
                          crossing[k] + [i for i in graph_inputs if i in reads[k]], list(dict.fromkeys(given + own))))
    return found


def _constant_nodes(graph: onnx.GraphProto, tensors: Iterable[str], producer: dict[str, int]) -> set[int]:
    """The nodes computing `tensors` (each made from constants alone), and those they read in turn."""
    nodes: set[int] = set()
    stack = [producer[t] for t in tensors if t in producer]
    while stack:
        i = stack.pop()
        if i not in nodes:
            nodes.add(i)
            stack += [producer[u] for u in outer_reads(graph.node[i]) if u in producer]
    return nodes


def extract(model: onnx.ModelProto, folder: Path, plan: Plan, values: dict[str, onnx.ValueInfoProto]
            ) -> onnx.ModelProto:
    """The part as a model of its own, with its weights read in (also those kept in the source's external data)."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    src = model.graph
    nodes = [src.node[i] for i in plan.nodes]
    reads = {u for n in nodes for u in outer_reads(n)}
    made = {o for n in nodes for o in n.output if o}
    graph = onnx.helper.make_graph(
        nodes, src.name, [values[t] for t in plan.inputs], [values[t] for t in plan.outputs],
        initializer=[t for t in src.initializer if t.name in reads and t.name not in made],
        value_info=[values[t] for t in sorted(made - set(plan.outputs)) if t in values])
    for tensor in all_tensors(graph):
        if uses_external_data(tensor):
            load_external_data_for_tensor(tensor, str(folder))
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]
    part = onnx.helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version,
                                  producer_name="qnndeploy", producer_version=__version__)
    part.functions.extend(model.functions)
    part.metadata_props.extend(model.metadata_props)  # what a runtime reads off the model (a Whisper's token ids)
    return part


def save(model: onnx.ModelProto, path: Path) -> int:
    """Write the part (its weights in PATH.data above BIG); returns the bytes of weights it holds."""
    held = sum(tensor_nbytes(t) or 0 for t in all_tensors(model.graph))
    save_model(model, path, held > BIG)
    return held


def share_weights(paths: Sequence[Path], data: Path) -> int:
    """Rewrite the models at `paths` (in `data`'s folder) so that every tensor of 1 KB or more lies in `data`, each
    distinct one once: a generation part's prompt and decode graphs hold the same weights, and the app then ships and
    downloads them once. The models' own data files are removed. Returns the bytes `data` holds."""
    import onnx
    from onnx import numpy_helper
    from onnx.external_data_helper import uses_external_data

    folder = data.parent
    placed: dict[str, tuple[int, int]] = {}  # sha256 of the bytes -> (offset, length) in `data`
    models: list[onnx.ModelProto] = []
    olds: set[Path] = set()
    with data.open("wb") as out:
        for path in paths:
            model = load_model(path)
            for t in all_tensors(model.graph):
                external = uses_external_data(t)
                olds.update(folder / e.value for e in t.external_data if external and e.key == "location")
                if t.data_type == onnx.TensorProto.STRING or (not external and (tensor_nbytes(t) or 0) < 1024):
                    continue
                raw = numpy_helper.to_array(t, str(folder)).tobytes()
                key = hashlib.sha256(raw).hexdigest()
                if key not in placed:
                    placed[key] = (out.tell(), len(raw))
                    out.write(raw)
                offset, length = placed[key]
                dims, kind, name = list(t.dims), t.data_type, t.name
                t.Clear()
                t.name, t.data_type, t.data_location = name, kind, onnx.TensorProto.EXTERNAL
                t.dims.extend(dims)
                for k, v in (("location", data.name), ("offset", str(offset)), ("length", str(length))):
                    t.external_data.add(key=k, value=v)
            models.append(model)
    for model, path in zip(models, paths, strict=True):
        onnx.save(model, str(path))
    for old in olds - {data}:
        old.unlink(missing_ok=True)
    return data.stat().st_size


def cut_values(slim: onnx.ModelProto, plans: list[Plan]) -> tuple[dict[str, onnx.ValueInfoProto], list[str]]:
    """Every tensor's inferred type and shape, and the cut (the tensors that cross from a part to a later one), each
    with a static shape."""
    values = inferred_values(slim, data_prop=True)
    fed = {v.name for v in slim.graph.input}
    cut = list(dict.fromkeys(t for p in plans for t in p.inputs if t not in fed))
    for t in cut:
        info = tensor_info(values[t]) if t in values else None
        if info is None or info.dynamic:  # a scalar's shape [] is static
            raise BadInput(f"the cut tensor {t} has no static shape after shape inference: fix the model's "
                           "shapes first (qnndeploy prepare), then split it")
    return values, cut


def write_parts(src: Path, plans: list[Plan], paths: list[Path], values: dict[str, onnx.ValueInfoProto]
                ) -> list[Part]:
    """Each part at its path, the source's weights read in (its external data too): what each part holds."""
    model = load_model(src)
    held = [save(extract(model, src.parent, p, values), path) for p, path in zip(plans, paths, strict=True)]
    del model
    return [Part(p.name, str(path), p.runs_on, [tensor_info(values[t]) for t in p.inputs],
                 [tensor_info(values[t]) for t in p.outputs], len(p.nodes), h)
            for p, path, h in zip(plans, paths, held, strict=True)]

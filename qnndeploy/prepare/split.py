"""`prepare --split-at` and `prepare --split-size`: cut a model into parts that run one after another.

--split-at cuts in two at named tensors, so that the part the HTP computes badly (a log of tiny values at the front,
a tail that overflows fp16) runs on the CPU and the rest on the NPU: the head is every node the cut tensors need, the
tail every other node. --split-size cuts a model with more weights than one HTP context holds into N NPU graphs in
graph order, each holding at most that many bytes of weights, where the fewest tensors cross.

Whatever a part reads from an earlier one (a skip connection past a cut) joins the cut, and a tensor made from
constants alone is copied into each part that reads it, so the parts chained by tensor name compute exactly the
original; that is proven on onnxruntime's CPU before anything is written. OUT.split.json says which part runs where
and in which order; `bundle --split` reads it. The parts are cut here, not by onnx.utils.Extractor, which
serializes the whole model for shape inference and so stops at protobuf's 2 GB: shapes are inferred on the graph
without its weights, and each part reads only its own weights.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnndeploy import __version__
from qnndeploy.base.errors import BadInput, CheckFailed
from qnndeploy.base.fileio import (
    first_missing,
    partial_prefix,
    remove_made,
    remove_stale,
    sha256_file,
    write_json,
    writing,
)
from qnndeploy.base.kinds import Side, choices
from qnndeploy.base.names import SPLIT_RECORD
from qnndeploy.model.onnxio import (
    TensorInfo,
    all_tensors,
    constant_tensors,
    inferred_values,
    int_input_ranges,
    load_model,
    outer_reads,
    real_inputs,
    tensor_info,
    tensor_nbytes,
)
from qnndeploy.prepare.equivalence import OutputDiff, compare, cpu_session, feeds, reference

if TYPE_CHECKING:
    import onnx

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
class SplitResult:
    source: str
    record: str
    cut: list[str]  # the tensors that cross from a part to a later one
    parts: list[Part]
    equivalence: list[OutputDiff]
    equivalence_inputs: str
    tolerance: float  # the one compared at: --tolerance, or the cut tensors' precision when that is coarser


@dataclass
class _Plan:
    """One part to cut: its nodes (graph indices, in graph order), the tensors it reads from the caller or an
    earlier part, and those it gives the caller or a later part."""

    name: str
    runs_on: str
    nodes: list[int]
    inputs: list[str]
    outputs: list[str]


def _stem(out: Path) -> Path:
    return out.with_suffix("") if out.suffix == ".onnx" else out


def split_paths(out: Path) -> tuple[Path, Path, Path]:
    """OUT.onnx -> (OUT-head.onnx, OUT-tail.onnx, OUT.split.json)."""
    stem = _stem(out)
    return (stem.with_name(f"{stem.name}-head.onnx"), stem.with_name(f"{stem.name}-tail.onnx"),
            stem.with_name(f"{stem.name}.split.json"))


def _cut(graph: onnx.GraphProto, at: list[str]) -> set[int]:
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


def _weights(graph: onnx.GraphProto, constant: set[str]) -> dict[str, int]:
    """Bytes behind each initializer and each tensor made from constants alone (a Transpose of a weight), as the
    model stores them: what a node reading it brings into its part."""
    weight = {t.name: tensor_nbytes(t) or 0 for t in graph.initializer}
    for node in graph.node:
        if any(o in constant for o in node.output):
            own = sum(tensor_nbytes(a.t) or 0 for a in node.attribute if a.HasField("t"))
            total = own + sum(weight.get(u, 0) for u in dict.fromkeys(outer_reads(node)))
            weight.update((o, total) for o in node.output if o)
    return weight


def _by_size(graph: onnx.GraphProto, size: int) -> list[set[int]]:
    """The nodes, in graph order, in groups holding at most `size` bytes of weights each: as few groups as filling
    each to `size` makes, evened out where that takes no more groups (two parts of 1.1 GB rather than 2 and 0.2)."""
    constant = constant_tensors(graph)
    weight = _weights(graph, constant)
    order = [i for i, n in enumerate(graph.node) if not any(o in constant for o in n.output)]
    reads = [{u for u in outer_reads(graph.node[i]) if u in weight} for i in order]
    for k, r in enumerate(reads):
        if sum(weight[u] for u in r) > size:
            node = graph.node[order[k]]
            raise BadInput(f"node {node.name or node.op_type} alone reads "
                           f"{sum(weight[u] for u in r) / 1e9:.3g} GB of weights, more than --split-size "
                           f"{size / 1e9:g}: no split makes it fit; give a larger size, or compile it with "
                           "8-bit weights (w8a16)")
    made = {o: k for k, i in enumerate(order) for o in graph.node[i].output if o}
    last: dict[str, int] = {}  # tensor -> the last position reading it
    for k, i in enumerate(order):
        last.update((u, k) for u in outer_reads(graph.node[i]) if u in made)
    starts = [0] * (len(order) + 2)  # a tensor crosses every boundary from after its node to its last reader
    for t, end in last.items():
        starts[made[t] + 1] += 1
        starts[end + 1] -= 1
    crossing = list(itertools.accumulate(starts))  # at boundary b (before position b): made before, read after
    full = _groups(reads, weight, crossing, size)
    total = sum(weight[u] for u in set().union(*reads))
    even = _groups(reads, weight, crossing, min(size, total // len(full) + max(
        (sum(weight[u] for u in r) for r in reads), default=0)))
    return [{order[k] for k in g} for g in (even if len(even) <= len(full) else full)]


def _groups(reads: list[set[str]], weight: dict[str, int], crossing: list[int], cap: int) -> list[range]:
    """Positions in groups of at most `cap` bytes of weights; a group ends where the fewest tensors cross, among
    the points where it holds at least half of what it could."""
    groups: list[range] = []
    start = 0
    while start < len(reads):
        seen: set[str] = set()
        held: list[int] = []  # the group's bytes after each position
        end = start
        while end < len(reads):
            add = sum(weight[u] for u in reads[end] - seen)
            if held and held[-1] + add > cap:
                break
            seen |= reads[end]
            held.append((held[-1] if held else 0) + add)
            end += 1
        if end < len(reads):
            first = start + 1 + next(k for k, h in enumerate(held) if h >= held[-1] / 2)
            end = min(range(first, end + 1), key=lambda b: (crossing[b], -b))
        groups.append(range(start, end))
        start = end
    return groups


def _plans(graph: onnx.GraphProto, groups: list[set[int]], names: list[str], runs_on: list[str]) -> list[_Plan]:
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
    plans = []
    for k, group in enumerate(groups):
        made = {o for i in group for o in graph.node[i].output if o}
        last = k == len(groups) - 1
        own = [o for o in outputs if o in made or (last and o in constant)]
        copied = _constant_nodes(graph, [u for u in [*reads[k], *own] if u in constant and u not in made], producer)
        given = [t for later in crossing[k + 1:] for t in later if t in made]
        plans.append(_Plan(names[k], runs_on[k], sorted(group | copied),
                           crossing[k] + [i for i in graph_inputs if i in reads[k]], list(dict.fromkeys(given + own))))
    return plans


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


def _extract(model: onnx.ModelProto, folder: Path, plan: _Plan, values: dict[str, onnx.ValueInfoProto]
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
    return part


def _save(model: onnx.ModelProto, path: Path) -> int:
    """Write the part (its weights in PATH.data above BIG); returns the bytes of weights it holds."""
    import onnx

    held = sum(tensor_nbytes(t) or 0 for t in all_tensors(model.graph))
    if held > BIG:
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=path.name + ".data", size_threshold=1024)
    else:
        onnx.save(model, str(path))
    return held


def split_model(src: Path, out: Path, at: list[str], *, cpu: Side = Side.HEAD, inputs_dir: Path | None = None,
                tolerance: float = 1e-4, force: bool = False) -> SplitResult:
    """Write OUT-head.onnx and OUT-tail.onnx (the `cpu` part runs on the CPU, the other on the NPU) and
    OUT.split.json, when the two chained compute what `src` computes on onnxruntime's CPU."""
    if cpu not in choices(Side):
        raise BadInput(f"--cpu {cpu}: use head or tail")
    if not at:
        raise BadInput("--split-at needs a tensor name (qnndeploy diagnose names the one to cut at)")
    head, tail, record = split_paths(Path(out))
    slim = load_model(Path(src), weights=False)
    first = _cut(slim.graph, at)
    plans = _plans(slim.graph, [first, set(range(len(slim.graph.node))) - first], [p.value for p in PARTS],
                   ["cpu" if p == cpu else "npu" for p in PARTS])
    return _split(Path(src), slim, plans, [head, tail], record, inputs_dir, tolerance, force)


def size_names(n: int) -> list[str]:
    """1 … n, zero-padded to one width (01 … 12), so that sorting the parts by name keeps their order."""
    return [f"{k:0{len(str(n))}d}" for k in range(1, n + 1)]


def size_paths(out: Path, names: list[str]) -> tuple[list[Path], Path]:
    """OUT.onnx -> ([OUT-1.onnx … OUT-n.onnx], OUT.split.json)."""
    stem = _stem(out)
    return [stem.with_name(f"{stem.name}-{k}.onnx") for k in names], stem.with_name(f"{stem.name}.split.json")


def split_by_size(src: Path, out: Path, size_gb: float, *, inputs_dir: Path | None = None, tolerance: float = 1e-4,
                  force: bool = False) -> SplitResult:
    """Write OUT-1.onnx … OUT-N.onnx, each holding at most `size_gb` GB of weights (as the model stores them), all for
    the NPU in that order, and OUT.split.json, when the parts chained compute what `src` computes."""
    if not size_gb > 0:
        raise BadInput(f"--split-size {size_gb:g}: give the most GB of weights a part may hold, e.g. 1.5")
    slim = load_model(Path(src), weights=False)
    groups = _by_size(slim.graph, round(size_gb * 1e9))
    if len(groups) < 2:
        raise BadInput(f"{src} holds no more than {size_gb:g} GB of weights: it needs no split (qnndeploy "
                       "check says when one is needed)")
    names = size_names(len(groups))
    paths, record = size_paths(Path(out), names)
    return _split(Path(src), slim, _plans(slim.graph, groups, names, ["npu"] * len(groups)), paths, record,
                  inputs_dir, tolerance, force)


def _split(src: Path, slim: onnx.ModelProto, plans: list[_Plan], paths: list[Path], record: Path,
           inputs_dir: Path | None, tolerance: float, force: bool) -> SplitResult:
    """Cut `src` (`slim`: its graph without the weights) into `plans`, prove the parts chained equal to it, then
    publish them and the record. Everything is written in a staging folder beside the output first: a failed or
    interrupted split leaves nothing under the final names (nor the folders -o named that did not exist)."""
    for p in [*paths, record]:
        if p.exists() and not force:
            raise BadInput(f"{p} already exists; pass --force to replace it")
    graph = slim.graph
    values = inferred_values(slim, data_prop=True)
    fed = {v.name for v in graph.input}
    cut = list(dict.fromkeys(t for p in plans for t in p.inputs if t not in fed))
    for t in cut:
        info = tensor_info(values[t]) if t in values else None
        if info is None or info.dynamic:  # a scalar's shape [] is static
            raise BadInput(f"the cut tensor {t} has no static shape after shape inference: fix the model's "
                           "shapes first (qnndeploy prepare), then split it")
    tolerance = max([tolerance, *(CUT_PRECISION.get(tensor_info(values[t]).dtype, 0.0) for t in cut)])
    outputs = [o.name for o in graph.output]
    ranges = int_input_ranges(graph)
    sample = feeds([tensor_info(v) for v in real_inputs(graph)], inputs_dir, 0, ranges)
    want = reference(src, sample, {}, ranges, inputs_dir is None)
    folder = record.parent
    made = first_missing(folder)
    try:
        with writing(record):
            folder.mkdir(parents=True, exist_ok=True)
            remove_stale(record, prefix=".split.")
            work = Path(tempfile.mkdtemp(prefix=partial_prefix(record, "split"), dir=folder))
            try:
                return _write(src, paths, record, work, plans, values, sample, want, outputs, tolerance, inputs_dir,
                              cut)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        remove_made(folder, made)
        raise


def _write(src: Path, paths: list[Path], record: Path, work: Path, plans: list[_Plan],
           values: dict[str, onnx.ValueInfoProto], sample: dict[str, Any], want: dict[str, Any], outputs: list[str],
           tolerance: float, inputs_dir: Path | None, cut: list[str]) -> SplitResult:
    """Each part into `work` (the source's weights read one part at a time), the chain run against the original,
    then every file moved into place and the record written."""
    model = load_model(src)
    staged = [work / p.name for p in paths]
    held = [_save(_extract(model, src.parent, p, values), s) for p, s in zip(plans, staged, strict=True)]
    del model
    got: dict[str, Any] = {}
    for p, s in zip(plans, staged, strict=True):
        session = cpu_session(s, f"part {p.name}")
        values_out = session.run(None, {n: sample[n] if n in sample else got[n] for n in p.inputs})
        got.update(zip([o.name for o in session.get_outputs()], values_out, strict=True))
        del session
    diffs = [compare(name, want[name], got[name], tolerance) for name in outputs]
    if not all(d.ok for d in diffs):
        bad = next(d for d in diffs if not d.ok)
        raise CheckFailed(f"the parts chained differ from the original at {bad.name} (max abs diff "
                          f"{bad.max_abs_diff:.3g}); nothing written")
    for s, final in zip(staged, paths, strict=True):
        data = s.with_name(s.name + ".data")
        if data.exists():
            data.replace(final.with_name(data.name))
        else:
            final.with_name(data.name).unlink(missing_ok=True)  # an earlier split's, replaced with --force
        s.replace(final)
    parts = [Part(p.name, str(path), p.runs_on, [tensor_info(values[t]) for t in p.inputs],
                  [tensor_info(values[t]) for t in p.outputs], len(p.nodes), h)
             for p, path, h in zip(plans, paths, held, strict=True)]
    write_json(record, {
        "record": SPLIT_RECORD, "version": 1,
        "source": {"path": str(src.resolve()), "sha256": sha256_file(src)},
        "cut": cut, "order": [p.name for p in parts],
        "parts": [{"name": p.name, "path": Path(p.path).name, "runs_on": p.runs_on, "sha256": sha256_file(Path(p.path)),
                   "inputs": [i.name for i in p.inputs], "outputs": [o.name for o in p.outputs]} for p in parts],
        "tools": {"qnndeploy": __version__}, "created": datetime.now(UTC).isoformat(timespec="seconds"),
    })
    return SplitResult(str(src), str(record), cut, parts, diffs,
                       str(inputs_dir) if inputs_dir is not None else "one seeded random sample", tolerance)

"""`prepare --split-at` and `prepare --split-size`: cut a model into parts that run one after another.

--split-at cuts in two at named tensors, so that the part the HTP computes badly (a log of tiny values at the front,
a tail that overflows fp16) runs on the CPU and the rest on the NPU: the head is every node the cut tensors need, the
tail every other node. --split-size cuts a model with more weights than one HTP context holds into N NPU graphs in
graph order, each holding at most that many bytes of weights, where the fewest tensors cross.

Whatever a part reads from an earlier one (a skip connection past a cut) joins the cut, and a tensor made from
constants alone is copied into each part that reads it, so the parts chained by tensor name compute exactly the
original; that is proven on onnxruntime's CPU before anything is written. OUT.split.json says which part runs where
and in which order; `bundle --split` reads it. The cutting itself is model/split.py's, which diagnose shares to
measure a split before it advises one; this module chooses the cut, proves the parts and publishes them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnndeploy.base.errors import BadInput, CheckFailed
from qnndeploy.base.fileio import work_beside
from qnndeploy.base.kinds import Side, choices
from qnndeploy.formats.records import write_split
from qnndeploy.model.onnxio import (
    constant_tensors,
    int_input_ranges,
    load_model,
    outer_reads,
    real_inputs,
    tensor_info,
    tensor_nbytes,
)
from qnndeploy.model.split import (
    CUT_PRECISION,
    Part,
    Plan,
    cut_values,
    in_two,
    plan_parts,
    split_paths,
    stem,
    write_parts,
)
from qnndeploy.prepare.equivalence import OutputDiff, compare, cpu_session, feeds, reference

if TYPE_CHECKING:
    import onnx

__all__ = ["Part", "SplitResult", "split_by_size", "split_model", "split_paths"]


@dataclass
class SplitResult:
    source: str
    record: str
    cut: list[str]  # the tensors that cross from a part to a later one
    parts: list[Part]
    equivalence: list[OutputDiff]
    equivalence_inputs: str
    tolerance: float  # the one compared at: --tolerance, or the cut tensors' precision when that is coarser


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


def split_model(src: Path, out: Path, at: list[str], *, cpu: Side = Side.HEAD, inputs_dir: Path | None = None,
                tolerance: float = 1e-4, force: bool = False) -> SplitResult:
    """Write OUT-head.onnx and OUT-tail.onnx (the `cpu` part runs on the CPU, the other on the NPU) and
    OUT.split.json, when the two chained compute what `src` computes on onnxruntime's CPU."""
    if cpu not in choices(Side):
        raise BadInput(f"--cpu-part {cpu}: use head or tail")
    if not at:
        raise BadInput("--split-at needs a tensor name (qnndeploy diagnose names the one to cut at)")
    head, tail, record = split_paths(Path(out))
    slim = load_model(Path(src), weights=False)
    return _split(Path(src), slim, in_two(slim.graph, at, cpu), [head, tail], record, inputs_dir, tolerance, force)


def size_names(n: int) -> list[str]:
    """1 … n, zero-padded to one width (01 … 12), so that sorting the parts by name keeps their order."""
    return [f"{k:0{len(str(n))}d}" for k in range(1, n + 1)]


def size_paths(out: Path, names: list[str]) -> tuple[list[Path], Path]:
    """OUT.onnx -> ([OUT-1.onnx … OUT-n.onnx], OUT.split.json)."""
    s = stem(out)
    return [s.with_name(f"{s.name}-{k}.onnx") for k in names], s.with_name(f"{s.name}.split.json")


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
    return _split(Path(src), slim, plan_parts(slim.graph, groups, names, ["npu"] * len(groups)), paths, record,
                  inputs_dir, tolerance, force)


def _split(src: Path, slim: onnx.ModelProto, plans: list[Plan], paths: list[Path], record: Path,
           inputs_dir: Path | None, tolerance: float, force: bool) -> SplitResult:
    """Cut `src` (`slim`: its graph without the weights) into `plans`, prove the parts chained equal to it, then
    publish them and the record. Everything is written in a staging folder beside the output first: a failed or
    interrupted split leaves nothing under the final names (nor the folders -o named that did not exist)."""
    for p in [*paths, record]:
        if p.exists() and not force:
            raise BadInput(f"{p} already exists; pass --force to replace it")
    graph = slim.graph
    values, cut = cut_values(slim, plans)
    tolerance = max([tolerance, *(CUT_PRECISION.get(tensor_info(values[t]).dtype, 0.0) for t in cut)])
    outputs = [o.name for o in graph.output]
    ranges = int_input_ranges(graph)
    sample = feeds([tensor_info(v) for v in real_inputs(graph)], inputs_dir, 0, ranges)
    want = reference(src, sample, {}, ranges, inputs_dir is None)
    with work_beside(record, "split") as work:
        return _write(src, paths, record, work, plans, values, sample, want, outputs, tolerance, inputs_dir, cut)


def _write(src: Path, paths: list[Path], record: Path, work: Path, plans: list[Plan],
           values: dict[str, onnx.ValueInfoProto], sample: dict[str, Any], want: dict[str, Any], outputs: list[str],
           tolerance: float, inputs_dir: Path | None, cut: list[str]) -> SplitResult:
    """Each part into `work` (the source's weights read one part at a time), the chain run against the original,
    then every file moved into place and the record written."""
    staged = write_parts(src, plans, [work / p.name for p in paths], values)
    got: dict[str, Any] = {}
    for p, s in zip(plans, staged, strict=True):
        session = cpu_session(Path(s.path), f"part {p.name}")
        values_out = session.run(None, {n: sample[n] if n in sample else got[n] for n in p.inputs})
        got.update(zip([o.name for o in session.get_outputs()], values_out, strict=True))
        del session
    diffs = [compare(name, want[name], got[name], tolerance) for name in outputs]
    if not all(d.ok for d in diffs):
        bad = next(d for d in diffs if not d.ok)
        raise CheckFailed(f"the parts chained differ from the original at {bad.name} (max abs diff "
                          f"{bad.max_abs_diff:.3g}); nothing written")
    for s, final in zip(staged, paths, strict=True):
        moved = Path(s.path)
        data = moved.with_name(moved.name + ".data")
        if data.exists():
            data.replace(final.with_name(data.name))
        else:
            final.with_name(data.name).unlink(missing_ok=True)  # an earlier split's, replaced with --force
        moved.replace(final)
        s.path = str(final)
    write_split(record, src, cut, staged)
    return SplitResult(str(src), str(record), cut, staged, diffs,
                       str(inputs_dir) if inputs_dir is not None else "one seeded random sample", tolerance)

"""`prepare --split-at`: cut a model in two at named tensors, so that the part the HTP computes badly (a log of tiny
values at the front, a tail that overflows fp16) runs on the CPU and the rest on the NPU.

The head is every node the cut tensors need; the tail is every other node. Whatever else the tail reads from the
head (a skip connection past the cut) joins the cut, so the two parts chained by tensor name compute exactly the
original; that is proven on onnxruntime's CPU before anything is written. OUT.split.json says which part runs
where and in which order; `bundle --split` reads it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnndeploy import __version__
from qnndeploy.errors import EXIT_CHECK_FAILED, QnnDeployError
from qnndeploy.fileio import first_missing, remove_made, sha256_file, write_json, writing
from qnndeploy.formats import SPLIT_RECORD
from qnndeploy.onnxio import (
    TensorInfo,
    constant_tensors,
    int_input_ranges,
    load_model,
    outer_reads,
    real_inputs,
    tensor_info,
)
from qnndeploy.prepare.equivalence import OutputDiff, compare, cpu_session, feeds, reference

if TYPE_CHECKING:
    import onnx

PARTS = ("head", "tail")
BIG = 1_900_000_000  # bytes of weights a part may hold inline (protobuf's limit is 2 GB)


@dataclass
class Part:
    name: str  # "head" or "tail"
    path: str
    runs_on: str  # "cpu" or "npu"
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    nodes: int


@dataclass
class SplitResult:
    source: str
    record: str
    cut: list[str]  # the tensors the tail takes from the head
    parts: list[Part]
    equivalence: list[OutputDiff]
    equivalence_inputs: str


def split_paths(out: Path) -> tuple[Path, Path, Path]:
    """OUT.onnx -> (OUT-head.onnx, OUT-tail.onnx, OUT.split.json)."""
    stem = out.with_suffix("") if out.suffix == ".onnx" else out
    return (stem.with_name(f"{stem.name}-head.onnx"), stem.with_name(f"{stem.name}-tail.onnx"),
            stem.with_name(f"{stem.name}.split.json"))


def _cut(graph: onnx.GraphProto, at: list[str]) -> tuple[set[int], list[str]]:
    """(the head's node indices, the tensors the tail reads from the head, in graph order)."""
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    inputs = {i.name for i in graph.input}
    for t in at:
        if t in inputs:
            raise QnnDeployError(f"--split-at {t}: it is a graph input, with nothing before it to run on its own")
        if t not in producer:
            raise QnnDeployError(f"--split-at {t}: no node of the main graph makes a tensor of that name "
                                 "(qnndeploy diagnose names the tensors; a subgraph's cannot be a cut)")
    head: set[int] = set()
    stack = [producer[t] for t in at]
    while stack:
        i = stack.pop()
        if i not in head:
            head.add(i)
            stack += [producer[u] for u in outer_reads(graph.node[i]) if u in producer]
    if len(head) == len(graph.node):
        raise QnnDeployError(f"--split-at {','.join(at)}: every node is needed to compute it, so the tail would be "
                             "empty: cut at an earlier tensor")
    # A tensor made from constants alone (a Constant node, a Cast of one) is no cut: each part computes its own
    # copy (the extraction takes its nodes), so both sides may read it without its crossing over.
    made = {o for i in head for o in graph.node[i].output if o} - constant_tensors(graph)
    cut: list[str] = []
    for i, node in enumerate(graph.node):
        if i not in head:
            cut += [u for u in outer_reads(node) if u in made and u not in cut]
    cut += [t for t in at if t not in cut]
    return head, cut


def _part(model: onnx.ModelProto, inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
    import onnx

    return onnx.utils.Extractor(model).extract_model(inputs, outputs)


def _save(model: onnx.ModelProto, path: Path) -> None:
    import onnx

    if sum(t.ByteSize() for t in model.graph.initializer) > BIG:
        raise QnnDeployError(f"the {path.stem} part holds over 2 GB of weights: splitting such models is not "
                             "supported yet")
    onnx.save(model, str(path))


@contextmanager
def _written(paths: tuple[Path, Path], models: tuple[onnx.ModelProto, onnx.ModelProto]) -> Iterator[tuple[Path, Path]]:
    """Both parts under temporary names; renamed into place when the block ends without an error, else removed:
    a failed or interrupted split leaves nothing under the final names."""
    tmp = tuple(p.with_name(f".{p.name}.partial-{os.getpid()}") for p in paths)
    try:
        for m, t in zip(models, tmp, strict=True):
            _save(m, t)
        yield tmp[0], tmp[1]
    except BaseException:
        for t in tmp:
            t.unlink(missing_ok=True)
        raise
    for t, final in zip(tmp, paths, strict=True):
        t.replace(final)


def split_model(src: Path, out: Path, at: list[str], *, cpu: str = "head", inputs_dir: Path | None = None,
                tolerance: float = 1e-4, force: bool = False) -> SplitResult:
    """Write OUT-head.onnx and OUT-tail.onnx (the `cpu` part runs on the CPU, the other on the NPU) and
    OUT.split.json, when the two chained compute what `src` computes on onnxruntime's CPU."""
    import onnx

    if cpu not in PARTS:
        raise QnnDeployError(f"--cpu {cpu}: use head or tail")
    if not at:
        raise QnnDeployError("--split-at needs a tensor name (qnndeploy diagnose names the one to cut at)")
    paths = split_paths(Path(out))
    for p in paths:
        if p.exists() and not force:
            raise QnnDeployError(f"{p} already exists; pass --force to replace it")
    model = onnx.shape_inference.infer_shapes(load_model(Path(src)), data_prop=True)
    graph = model.graph
    head_nodes, cut = _cut(graph, at)
    known = {v.name: v for v in [*graph.value_info, *graph.input, *graph.output]}
    for t in cut:
        info = tensor_info(known[t]) if t in known else None
        if info is None or info.dynamic:  # a scalar's shape [] is static
            raise QnnDeployError(f"the cut tensor {t} has no static shape after shape inference: fix the model's "
                                 "shapes first (qnndeploy prepare), then split it")
    outputs = [o.name for o in graph.output]
    made_by_head = {o for i in head_nodes for o in graph.node[i].output}
    graph_inputs = [v.name for v in real_inputs(graph)]
    head_reads = {u for i in head_nodes for u in outer_reads(graph.node[i])}
    tail_reads = {u for i, n in enumerate(graph.node) if i not in head_nodes for u in outer_reads(n)}
    head = _part(model, [i for i in graph_inputs if i in head_reads],
                 cut + [o for o in outputs if o in made_by_head and o not in cut])
    tail = _part(model, cut + [i for i in graph_inputs if i in tail_reads and i not in cut],
                 [o for o in outputs if o not in made_by_head])

    # The proof: the original, and head then tail, on the same inputs.
    live = [tensor_info(v) for v in real_inputs(graph)]
    sample = feeds(live, inputs_dir, 0, int_input_ranges(graph))
    want = reference(Path(src), sample, {}, int_input_ranges(graph), inputs_dir is None)
    made = first_missing(paths[0].parent)  # folders -o names that do not exist yet: made, removed on failure
    try:
        with writing(out):
            paths[0].parent.mkdir(parents=True, exist_ok=True)
            return _write(src, paths, (head, tail), cpu, sample, want, outputs, tolerance, inputs_dir, cut)
    except BaseException:
        remove_made(paths[0].parent, made)
        raise


def _write(src: Path, paths: tuple[Path, Path, Path], models: tuple[onnx.ModelProto, onnx.ModelProto], cpu: str,
           sample: dict[str, Any], want: dict[str, Any], outputs: list[str], tolerance: float,
           inputs_dir: Path | None, cut: list[str]) -> SplitResult:
    """The two parts, proven to chain to the original on `sample`, then the split record."""
    head, tail = models
    got: dict[str, Any] = {}
    with _written(paths[:2], (head, tail)) as (head_path, tail_path):
        for part in (head_path, tail_path):
            session = cpu_session(part, f"the {part.name} part")
            names = [i.name for i in session.get_inputs()]
            values = session.run(None, {n: sample[n] if n in sample else got[n] for n in names})
            got.update(zip([o.name for o in session.get_outputs()], values, strict=True))
        diffs = [compare(name, want[name], got[name], tolerance) for name in outputs]
        if not all(d.ok for d in diffs):
            bad = next(d for d in diffs if not d.ok)
            raise QnnDeployError(f"head and tail chained differ from the original at {bad.name} (max abs diff "
                                 f"{bad.max_abs_diff:.3g}); nothing written", EXIT_CHECK_FAILED)
    parts = [Part(name, str(path), "cpu" if name == cpu else "npu",
                  [tensor_info(v) for v in m.graph.input], [tensor_info(v) for v in m.graph.output], len(m.graph.node))
             for name, path, m in zip(PARTS, paths[:2], (head, tail), strict=True)]
    write_json(paths[2], {
        "record": SPLIT_RECORD, "version": 1,
        "source": {"path": str(Path(src).resolve()), "sha256": sha256_file(Path(src))},
        "cut": cut, "order": list(PARTS),
        "parts": [{"name": p.name, "path": Path(p.path).name, "runs_on": p.runs_on, "sha256": sha256_file(Path(p.path)),
                   "inputs": [i.name for i in p.inputs], "outputs": [o.name for o in p.outputs]} for p in parts],
        "tools": {"qnndeploy": __version__}, "created": datetime.now(UTC).isoformat(timespec="seconds"),
    })
    return SplitResult(str(src), str(paths[2]), cut, parts, diffs,
                       str(inputs_dir) if inputs_dir is not None else "one seeded random sample")

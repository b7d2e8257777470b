"""Make an ONNX model NPU-ready without re-exporting it, and prove the result computes the same thing.

Fixes input dims to static sizes, wraps int64 inputs/outputs as int32 (a Cast inside the graph, names
unchanged), freezes setting inputs to constants (edits.py), folds with the chain of fold.py and re-infers shapes.
Then runs the original and the prepared model on onnxruntime CPU with the same inputs and compares every output
(equivalence.py). The work
happens in a temporary folder beside the output: OUT.onnx (and OUT.onnx.data for external-data models) and
OUT.prepare.json appear only when everything passed.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnndeploy import __version__
from qnndeploy.base import fileio, interrupt, socs
from qnndeploy.base.errors import BadInput, CheckFailed, QnnDeployError, first_line
from qnndeploy.base.fileio import sha256_file, write_json
from qnndeploy.model import fuse as fusing
from qnndeploy.model import loadplan, onnxio
from qnndeploy.model import rewrite as rewriting
from qnndeploy.model.onnxio import TensorInfo, real_inputs, tensor_info
from qnndeploy.prepare import edits, equivalence, fold
from qnndeploy.prepare.edits import parse_assignment, parse_shape
from qnndeploy.prepare.equivalence import OutputDiff
from qnndeploy.qnn import htp

__all__ = ["DEFAULT_TOLERANCE", "OutputDiff", "PrepareResult", "parse_assignment", "parse_shape", "prepare_model",
           "record_path"]

if TYPE_CHECKING:
    import numpy as np
    import onnx
DEFAULT_TOLERANCE = 1e-4
# Above this many bytes of weights the output keeps them in an external data file (protobuf stops at 2 GB; the
# margin is for the graph itself). Below it, external data is inlined: one file is what bundle and apps handle best.
EXTERNAL_ABOVE = (1 << 31) - (1 << 26)
RECORD_FORMAT = 2


@dataclass
class PrepareResult:
    source: str
    source_sha256: str
    output: str
    output_sha256: str
    external_data: str | None  # the weights file beside the output, for models kept in external data
    record: str
    changes: list[str]
    shapes: dict[str, list[int]]
    frozen: dict[str, Any]
    int32_wrapped: list[str]
    simplified: bool
    folded_by: str | None  # the folding tool whose result was kept (a name in fold.TOOLS), None: none
    folding: list[str]  # each tool tried, and what became of it
    nodes_before: int
    nodes_after: int
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    notes: list[str]  # what prepare left for `check` to flag (int64 kept, dims still dynamic, control flow)
    equivalence_inputs: str  # "random (seed N)" or the --inputs folder
    tolerance: float
    equivalence: list[OutputDiff]
    tools: dict[str, str]
    seconds: float = 0.0
    format: int = RECORD_FORMAT
    kind: str = field(default="qnndeploy-prepare")


def _infer_shapes(src: Path, dst: Path, external: bool) -> None:
    """Re-infer every shape from the now static inputs, outputs included (their declared shapes are dropped: some
    exporters declare wrong ones), then write the model."""
    import onnx

    model = onnx.load(str(src), load_external_data=False)
    edits.clear_inferred(model.graph)
    for value in model.graph.output:
        value.type.tensor_type.ClearField("shape")
    shaped = src.with_name(src.stem + ".shaped.onnx")  # beside src, so its external data references resolve
    onnx.save(model, str(shaped))
    for kwargs in ({"data_prop": True}, {}):
        try:
            onnx.shape_inference.infer_shapes_path(str(shaped), str(shaped), **kwargs)
            break
        except Exception:  # noqa: BLE001 custom-domain ops can stop onnx's inference; the CPU run gives the shapes
            continue
    model = onnx.load(str(shaped))
    onnxio.save_model(model, dst, external)


def _set_output_shapes(path: Path, actual: Mapping[str, tuple[int, ...]]) -> None:
    """Write the shapes the CPU run produced as the outputs' shapes: what the graph computes, not what was declared.
    Only the graph is rewritten: the weights stay where they are (an external data file is neither read nor
    written)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    for value in model.graph.output:
        edits.set_static(value, actual[value.name])
    onnx.save(model, str(path))


def _control_flow(graph: onnx.GraphProto) -> list[str]:
    return [f"{n.op_type} {n.name or '(unnamed)'}" for n in graph.node if n.op_type in onnxio.CONTROL_FLOW_OPS]


# --- the stage ------------------------------------------------------------------------------------

def record_path(out: Path) -> Path:
    """OUT.onnx -> OUT.prepare.json"""
    return out.with_name(out.name.removesuffix(".onnx") + ".prepare.json")


@dataclass(frozen=True)
class PrepareOptions:
    """What prepare changes and how it proves the result equivalent: the command line's options (same defaults)."""

    shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)  # input name -> its static dims
    int32_inputs: bool = False  # wrap int64 inputs and outputs as int32
    freeze: Mapping[str, Any] = field(default_factory=dict)  # input name -> the constant that replaces it
    simplify: bool = True  # run the folding chain
    inputs_dir: Path | None = None  # NAME.npy or NAME.npz per input for the equivalence run; None: random
    tolerance: float = DEFAULT_TOLERANCE  # max abs diff and rel L2 both above it: not equivalent
    force: bool = False  # replace an existing OUT.onnx
    seed: int = 0  # of the random equivalence sample
    fuse: bool = False  # fuse the unfused (Erf) GELU into Gelu, the decomposed LayerNorm into LayerNormalization
    rewrite: tuple[str, ...] = ()  # rewriting.KINDS to apply (after folding, on static shapes)


def prepare_model(src: Path, out: Path, options: PrepareOptions = PrepareOptions()) -> PrepareResult:
    """Write OUT.onnx (+ OUT.prepare.json) from SRC with static shapes, int32 I/O and frozen settings.

    Raises QnnDeployError (nothing written) on bad options or when an output differs beyond `tolerance`
    (max abs diff and rel L2 both above it).
    """
    import onnx

    o = options
    inputs_dir, tolerance, force = o.inputs_dir, o.tolerance, o.force
    start = time.monotonic()
    src, out = Path(src), Path(out)
    _check_output(src, out, force)
    if not tolerance >= 0:  # NaN fails this test too
        raise BadInput(f"--tolerance {tolerance}: give a number of 0 or more, e.g. {DEFAULT_TOLERANCE:g}")
    if inputs_dir is not None and not Path(inputs_dir).is_dir():
        raise BadInput(f"--inputs {inputs_dir}: no such folder")

    model = onnxio.load_model(src)
    source_external = bool(onnxio.external_locations(model))
    ranges = onnxio.int_input_ranges(model.graph)
    declared = {v.name: tensor_info(v) for v in model.graph.output}
    if source_external:  # before --fuse: its model check reads the weights where the model names them
        try:
            onnx.load_external_data_for_model(model, str(src.parent))
        except onnx.checker.ValidationError as e:  # onnx reads no data file through a symlink
            why = first_line(e).rstrip(".")
            raise BadInput(f"cannot read the external data of {src}: {why}; onnx does not follow links to "
                           "weights: copy the model with its data file resolved (cp -L) and prepare the copy"
                           ) from None
        except (OSError, ValueError) as e:
            raise BadInput(f"cannot read the external data of {src}: {first_line(e)}; copy the model "
                           "together with its complete data file, or re-export it") from None
    edited = edits.edit(model.graph, o.shapes, o.freeze, o.int32_inputs)
    if o.fuse:
        fused = fusing.fuse_gelu(model)
        norms = fusing.fuse_layernorm(model)
        if fused:
            edited.changes.append(f"{fused} erf GELU pattern(s) fused into Gelu nodes (opset {fusing.GELU_OPSET})")
        if norms:
            edited.changes.append(f"{norms} decomposed LayerNorm(s) fused into LayerNormalization nodes over the last "
                                  f"axis (opset {fusing.LAYERNORM_OPSET} or later)")
        if not fused and not norms:
            edited.changes.append("--fuse: no unfused GELU or LayerNorm pattern found")
    weights = sum(onnxio.tensor_nbytes(t) or 0 for t in model.graph.initializer)
    external = weights > EXTERNAL_ABOVE
    if source_external and not external:
        edited.changes.append(f"external data inlined ({weights / 1e6:.1f} MB of weights, under 2 GB): the output "
                             "is one self-contained file")

    made = fileio.first_missing(out.parent)  # folders -o creates are removed again when nothing is written
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        # A short name: OUT's own name may already be near the file system's limit.
        fileio.remove_stale(out, prefix=".prepare.")  # work folders of killed runs (their process is gone)
        work = Path(tempfile.mkdtemp(prefix=fileio.partial_prefix(out, "prepare"), dir=out.parent))
    except OSError as e:
        fileio.remove_made(out.parent, made)
        raise BadInput(f"cannot write in {out.parent}: {e.strerror or e}") from None
    written = False
    try:
        stage = work / "edited.onnx"
        onnxio.save_model(model, stage, external)
        del model
        feeds = equivalence.feeds(edited.live, inputs_dir, o.seed, ranges)
        want = equivalence.reference(src, feeds, edited.frozen, ranges, random=inputs_dir is None)
        try:
            run = _Folding(stage, work, out.name, external, feeds, want, tolerance, o.rewrite)
            final, folded_by, folding, diffs, rewrites = _fold_chain(run, o.simplify)
        except QnnDeployError:
            # Every candidate failed: when the folder cannot even take two more copies of the model, a full disk
            # (not the model) made the tools fail, whatever they said (onnxruntime: "Protobuf serialization failed")
            full = fileio.no_room(work, 2 * _size(stage))
            if full is not None:
                raise fileio.write_error(full, out) from None
            raise
        prepared = onnxio.load_model(final, weights=False).graph
        nodes_after = sum(1 for n in prepared.node if n.op_type != "Constant")
        edited.changes += rewrites
        if folded_by:
            edited.changes.append(f"folded with {folded_by}: {edited.nodes_before} -> {nodes_after} nodes")
        p_inputs = [tensor_info(v) for v in real_inputs(prepared)]
        p_outputs = [tensor_info(v) for v in prepared.output]
        edited.changes += [f"output {o.name}: declared {declared[o.name].shape_text()}, the graph computes "
                          f"{o.shape_text()} (CPU run): declaration replaced" for o in p_outputs
                          if _disagrees(declared[o.name], o)]

        data, out_data = final.with_name(final.name + ".data"), out.with_name(out.name + ".data")
        if data.is_file():  # a data file name the OUT.onnx in place does not read: see _publish
            out_data = _data_name(out)
            data = _relocate(final, data, out_data.name)
        result = PrepareResult(
            source=str(src), source_sha256=sha256_file(src), output=str(out), output_sha256=sha256_file(final),
            external_data=str(out_data) if data.is_file() else None, record=str(record_path(out)),
            changes=edited.changes, shapes=edited.shapes, frozen={k: v.tolist() for k, v in edited.frozen.items()},
            int32_wrapped=edited.wrapped, simplified=folded_by is not None, folded_by=folded_by, folding=folding,
            nodes_before=edited.nodes_before, nodes_after=nodes_after, inputs=p_inputs, outputs=p_outputs,
            notes=_notes(prepared, p_inputs, p_outputs),
            equivalence_inputs=str(inputs_dir) if inputs_dir else f"random (seed {o.seed})", tolerance=tolerance,
            equivalence=diffs, tools=_tool_versions(__version__), seconds=round(time.monotonic() - start, 2))
        write_json(work / "record.json", asdict(result))  # a short temporary name, renamed below
        interrupt.check()  # the last safe point: after it the output is published, whatever signal comes
        _publish(final, data, out_data, work / "record.json", out, force)
        written = True
    except OSError as e:
        if e.errno not in fileio.FULL:
            raise
        # the work folder beside OUT is full or read-only: say so, never that the model is bad
        raise fileio.write_error(e, out) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not written:
            fileio.remove_made(out.parent, made)
    return result


def _disagrees(declared: TensorInfo, actual: TensorInfo) -> bool:
    """A declared output shape the graph does not compute (a dynamic dim that got its size is no disagreement)."""
    if declared.shape is None or actual.shape is None:
        return False
    return len(declared.shape) != len(actual.shape) or any(
        isinstance(d, int) and d != a for d, a in zip(declared.shape, actual.shape, strict=True))


@dataclass
class _Candidate:
    path: Path
    tool: str | None  # None: not folded
    diffs: list[OutputDiff]
    control_flow: list[str]  # If/Loop/Scan nodes left in the graph
    rewrites: list[str] = field(default_factory=list)  # what --rewrite did to it


@dataclass(frozen=True)
class _Folding:
    """What every candidate is made from and judged by: the edited model (`stage`), the work folder and the name the
    candidate gets there, whether its weights go to a data file, the equivalence feeds, the original's outputs on
    them with the tolerance, and the --rewrite kinds applied after folding."""

    stage: Path
    work: Path
    name: str
    external: bool
    feeds: Mapping[str, np.ndarray]
    want: Mapping[str, np.ndarray]
    tolerance: float
    kinds: tuple[str, ...] = ()


def _fold_chain(run: _Folding, simplify: bool) -> tuple[Path, str | None, list[str], list[OutputDiff], list[str]]:
    """Fold with each tool in turn (fold.TOOLS, then no folding at all) and keep the first result that computes the
    same outputs and has no control flow left; else the first that computes the same outputs. Every result gets its
    shapes re-inferred and its output shapes from a CPU run.

    A fold can break a pattern the QNN EP fuses (onnxsim folds the `* 0.5` of an erf GELU into the next Conv, and the
    bare Erf falls back to the CPU), so when the kept result leaves nodes on the CPU as measured on the HTP, the
    unfolded model is measured too; when it has fewer, the later tools are tried for one as good, else the model is
    kept unfolded. Measuring rather than guarding known patterns covers every fusion the EP makes, and costs one
    measurement when the folded model runs wholly on the HTP. Returns (model, tool or None, what each tool did, its
    equivalence, what --rewrite did). The rewrites (`run.kinds`) are applied to each candidate after its folding, when
    its shapes are static and what an exporter computes (a Gather's indices) is constant; the equivalence run proves
    them with the rest."""
    tried: list[str] = []
    first_bad: list[OutputDiff] | None = None
    tools = [*(t for t in fold.TOOLS if not (run.external and t in fold.WHOLE_MODEL)), None] if simplify else [None]
    kept: _Candidate | None = None
    while tools and (kept is None or kept.control_flow):
        outcome = _candidate(tools.pop(0), run)
        if isinstance(outcome, str):
            tried.append(outcome)
            continue
        if not all(d.ok for d in outcome.diffs):
            first_bad = first_bad or outcome.diffs
            tried.append(f"{outcome.tool or 'no folding'}: its result differs from the original")
            continue
        tried.append(f"{outcome.tool or 'no folding'}: ok"
                     + (f", but {', '.join(outcome.control_flow)} left in the graph" if outcome.control_flow else ""))
        if kept is None or not outcome.control_flow:
            kept = outcome
    if kept is None and first_bad is not None:
        bad = [d for d in first_bad if not d.ok]
        raise CheckFailed(
            "the prepared model differs from the original: "
            + "; ".join(f"{d.name} max abs diff {d.max_abs_diff:.3g}, rel L2 {d.rel_l2:.3g}" for d in bad)
            + f" (tolerance {run.tolerance:g}); nothing written")
    if kept is None:
        raise BadInput("the prepared model fails where the original ran: " + "; ".join(tried))
    if kept.tool is not None and not kept.control_flow:
        kept = _htp_best(kept, [t for t in tools if t], run, tried)
    return kept.path, kept.tool, tried, kept.diffs, kept.rewrites


def _candidate(tool: str | None, run: _Folding) -> _Candidate | str:
    """The model folded by `tool` (None: as it is), shapes re-inferred and run on the CPU against the original;
    a string saying why when it fails or does not run."""
    interrupt.check()  # a safe point between candidates (a SIGTERM only sets the flag)
    label = tool or "no folding"
    rewrites: list[str] = []
    folder = run.work / (tool or "unfolded")
    folder.mkdir()
    candidate = folder / run.name
    try:
        source = run.stage
        if tool:
            source = folder / "folded.onnx"
            fold.fold(tool, run.stage, source, run.external)
        if run.kinds:
            rewritten = folder / "rewritten.onnx"
            rewrites = _rewrite(source, rewritten, run.kinds, run.external)
            source = rewritten
        _infer_shapes(source, candidate, run.external)
        got = equivalence.run_prepared(candidate, run.feeds)
    except fold.FoldError as e:
        return f"{label}: failed ({e})"
    except QnnDeployError as e:
        return f"{label}: its result does not load ({e})"
    except OSError as e:
        if e.errno in fileio.FULL:
            raise  # the work folder is full or read-only: no other candidate could be written either
        return f"{label}: its result does not run ({first_line(e)})"
    except Exception as e:  # noqa: BLE001 onnxruntime's and onnx's exception types are not exported
        return f"{label}: its result does not run ({first_line(e)})"
    diffs = [equivalence.compare(n, w, got[n], run.tolerance) for n, w in run.want.items()]
    if all(d.ok for d in diffs):
        _set_output_shapes(candidate, {n: a.shape for n, a in got.items()})
    return _Candidate(candidate, tool, diffs, _control_flow(onnxio.load_model(candidate, weights=False).graph),
                      rewrites)


def _rewrite(src: Path, dst: Path, kinds: tuple[str, ...], external: bool) -> list[str]:
    """--rewrite on one candidate: its shapes inferred from the now static inputs first (what the kinds match on)."""
    import onnx

    _infer_shapes(src, dst, external)
    model = onnx.load(str(dst))
    changes = rewriting.rewrite(model, list(kinds))
    onnxio.save_model(model, dst, external)
    return changes


def _htp_best(kept: _Candidate, later: list[str], run: _Folding, tried: list[str]) -> _Candidate:
    """`kept`, unless the unfolded model leaves fewer nodes on the CPU of the HTP: then the first of the `later`
    tools whose result is as good, else the unfolded model. Notes what was measured in `tried`."""
    folded = _cpu_nodes(kept.path)
    if not folded:
        return kept
    unfolded = _candidate(None, run)
    if isinstance(unfolded, str) or not all(d.ok for d in unfolded.diffs) or unfolded.control_flow:
        return kept
    best = _cpu_nodes(unfolded.path)
    if best is None or len(best) >= len(folded):
        return kept
    tried[tried.index(f"{kept.tool}: ok")] = (
        f"{kept.tool}: ok, but not kept: {_on_cpu(folded)} as measured on the HTP ({socs.DEFAULT_SOC}), the "
        f"unfolded model {_on_cpu(best)} (the fold broke a pattern the HTP runs)")
    for tool in later:
        outcome = _candidate(tool, run)
        if isinstance(outcome, str) or not all(d.ok for d in outcome.diffs) or outcome.control_flow:
            tried.append(outcome if isinstance(outcome, str) else f"{tool}: its result differs or keeps control flow")
            continue
        cpu = _cpu_nodes(outcome.path)
        if cpu is not None and len(cpu) <= len(best):
            tried.append(f"{tool}: ok, {_on_cpu(cpu)} as measured on the HTP: kept")
            return outcome
        tried.append(f"{tool}: ok, but {_on_cpu(cpu or [])} as measured on the HTP: not kept")
    tried.append("no folding: kept")
    return unfolded


def _cpu_nodes(model: Path) -> list[str] | None:
    """The op types of the nodes the HTP of the default SoC leaves to the CPU; None when not measured (no
    onnxruntime-qnn, dynamic inputs, a graph too big to measure or to be one context, as check skips it)."""
    graph = onnxio.load_model(model, weights=False).graph
    soc = socs.find(socs.DEFAULT_SOC)
    if any(tensor_info(v).dynamic for v in real_inputs(graph)) or \
            loadplan.stored(graph, "fp16").bytes > loadplan.budget_for(soc.arch_number).bytes:
        return None
    measured = htp.measure_htp(model, soc, graph)
    return [n.op_type for n in measured.cpu_nodes] if measured.measured else None


def _on_cpu(op_types: list[str]) -> str:
    return f"{len(op_types)} node(s) on the CPU ({', '.join(sorted(set(op_types)))})" if op_types else "none on the CPU"


def _size(model: Path) -> int:
    """The bytes of a model and its external data file, if any."""
    return sum(p.stat().st_size for p in (model, model.with_name(model.name + ".data")) if p.is_file())


def _check_output(src: Path, out: Path, force: bool) -> None:
    """Refuse an OUT that cannot receive the model, its data file and its record, before any work."""
    if out.suffix != ".onnx":
        raise BadInput(f"-o {out}: the output name must end in .onnx")
    longest, limit = max(len(_data_names(out)[1]), len(record_path(out).name)), fileio.name_max(out.parent)
    if longest > limit:
        raise BadInput(f"-o {out.name}: with its .data and .prepare.json files the name is too long for the "
                       f"file system ({longest} > {limit} characters); give a shorter name")
    if out.exists() and out.resolve() == src.resolve():
        raise BadInput(f"-o {out} is the source model; write the prepared model to a new file")
    for path in (out, *(out.with_name(n) for n in _data_names(out)), record_path(out)):
        if path.exists() and not path.is_file():
            raise BadInput(f"{path} exists and is not a file (a folder?): give -o another name, e.g. "
                           f"{out.parent / 'model.npu.onnx'}")
    if out.exists() and not force:
        raise BadInput(f"{out} already exists; remove it or pass --force")


def _data_names(out: Path) -> tuple[str, str]:
    """The two names OUT.onnx's external data file takes in turn: OUT.onnx.data, and OUT.onnx.2.data when a --force
    replaces an output that reads OUT.onnx.data (so the new data never overwrites the data the old model reads)."""
    return out.name + ".data", out.name + ".2.data"


def _data_name(out: Path) -> Path:
    """Where the new output's data file goes: the first of _data_names that the OUT.onnx in place does not read."""
    read: set[str] = set()
    if out.is_file():
        with contextlib.suppress(QnnDeployError, OSError):
            read = onnxio.external_locations(onnxio.load_model(out, weights=False))
    return out.with_name(next(n for n in _data_names(out) if n not in read))


def _relocate(model: Path, data: Path, name: str) -> Path:
    """Make `model` (saved with its weights in `data`, beside it) read them from a file called `name`, and rename
    `data` to it; the new data path."""
    import onnx

    if data.name == name:
        return data
    proto = onnx.load(str(model), load_external_data=False)
    for t in onnxio.all_tensors(proto.graph):
        for entry in t.external_data:
            if entry.key == "location" and entry.value == data.name:
                entry.value = name
    onnx.save(proto, str(model))
    moved = data.with_name(name)
    data.replace(moved)
    return moved


def _publish(final: Path, data: Path, out_data: Path, record: Path, out: Path, force: bool) -> None:
    """Put OUT.onnx, its data file and OUT.prepare.json in place so that OUT.onnx always reads the data file of its
    own run, and a record never sits beside a model it does not describe: the record is the commit marker, removed
    first and written last.

    Three names cannot change in one atomic step (renameat2 exchanges two), so the choice is which states a kill
    may leave, and the order below makes every one of them the old output or the new one:
      1. the old record is removed: from here until step 5 the output has no record, i.e. it is not a finished
         prepare output (a re-run with --force replaces it);
      2. the new data file, if any, is renamed in under a name the old OUT.onnx does not read (_data_name): the old
         model still reads its own data;
      3. the new model is renamed over the old one (one rename(2)): the commit of the model with its data;
      4. data files the new model does not read (the old one's, or a killed run's) are removed;
      5. the record is renamed in: its output_sha256 is the sha256 of the OUT.onnx beside it.
    A SIGTERM only sets the stop flag, so it never lands inside these steps; only SIGKILL or a power cut can stop
    them half-way, and then the next run's step 4 removes the data file left unread.
    """
    recorded = record_path(out)
    has_data = data.is_file()
    try:
        recorded.unlink(missing_ok=True)
        if has_data:
            data.chmod(final.stat().st_mode & 0o777)  # onnx creates external data files owner-only
            data.replace(out_data)
        final.replace(out)
        if force:
            for name in _data_names(out):  # left over from an earlier external-data output of the same name
                if not has_data or name != out_data.name:
                    out.with_name(name).unlink(missing_ok=True)
        record.replace(recorded)
    except OSError as e:
        raise BadInput(f"cannot write {out}: {e.strerror or e}; the output is incomplete (it has no "
                       f"{recorded.name}): run prepare again") from None


def _notes(graph: onnx.GraphProto, inputs: list[TensorInfo], outputs: list[TensorInfo]) -> list[str]:
    """What prepare left for `check` to flag."""
    notes = [f"{t.name} is still int64: pass --int32-inputs" for t in inputs + outputs if t.dtype == "int64"]
    notes += [f"output {t.name} still has dynamic dims {t.shape_text()}" for t in outputs if t.dynamic]
    return notes + [f"{n.op_type} node {n.name} is still in the graph: run check" for n in graph.node
                    if n.op_type in onnxio.CONTROL_FLOW_OPS]


def _tool_versions(own: str) -> dict[str, str]:
    tools = {"qnndeploy": own}
    for name in ("onnx", "onnxruntime", "onnxsim", "onnxslim"):
        with contextlib.suppress(PackageNotFoundError):
            tools[name] = version(name)
    return tools

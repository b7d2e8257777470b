"""How an output is compared with its CPU reference: the metrics, the per-precision thresholds and the verdict.
prepare, validate and device verify judge outputs the same way, so it lives below all three.

Several metrics, because one can mislead: rel L2, cosine and SNR are relative to the reference and mean nothing
when the reference is near zero (a detector's map on random input); max abs diff is absolute and stays meaningful.
A reference whose RMS is below the absolute tolerance is judged on max abs diff alone, and the verdict says so.
TopK outputs are judged as sets: fp16 reorders near-tied scores, and the same top-k items in another order is the
same answer (topk_outputs, judge). Outputs gathered with a TopK's indices (a detector's boxes and classes) follow
that order: their rows are aligned to the CPU's before they are compared (judge_outputs).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from qnndeploy.base.fields import number
from qnndeploy.model import onnxio
from qnndeploy.model.onnxio import load_model, tensor_info

if TYPE_CHECKING:
    import numpy as np
    import onnx

Thresholds = dict[str, float]  # min_cosine, min_snr_db, atol

# Defaults per precision. fp16 on the HTP is usually within 1e-2 rel L2 (PP-OCR rec: 4e-3 = 48 dB);
# 8-bit weights lose more. atol is also the level below which a reference counts as near zero.
# w4a16: int4 in blocks of 32 leaves about 0.1 rel L2 on each weight (measured with compile's per-layer figures:
# Gaussian weights 0.10, all-MiniLM-L6-v2's 0.10-0.11; w8a16's uint8, one scale per tensor, 0.004-0.012 on random
# inits, up to 0.21 on MiniLM's), so a model's outputs lose tens of percent, not a few. Measured on the host
# emulator against the float CPU model (onnxruntime-qnn 2.6.0, SM8650 and SM8750 alike): a 3-layer Gaussian MLP
# 15.0 dB / cosine 0.985; a Qwen2.5-0.5B-shaped SwiGLU MLP (N(0, 0.02), 128 tokens) 14.8 dB / 0.984;
# corpus_torch's TinyDecoder prompt graph (torch's uniform init) 22.5 dB / 0.997, 32.1 dB with its LM head at
# 8 bits; all-MiniLM-L6-v2 (real weights, 32 tokens) 9.6 dB / 0.943, whose w8a16 build fails w8a16's thresholds
# too (12.9 dB / 0.974). 10 dB (rel L2 0.32) and 0.95 pass the builds that kept the model's behaviour and stay far
# above a broken one (uint4 weights, measured rel L2 ~3: -9.5 dB); a model below them is one to build with
# --keep-int8 on its worst layers.
THRESHOLDS: dict[str, Thresholds] = {
    "fp16": {"min_cosine": 0.999, "min_snr_db": 30.0, "atol": 1e-3},
    "w8a16": {"min_cosine": 0.99, "min_snr_db": 20.0, "atol": 1e-2},
    "w4a16": {"min_cosine": 0.95, "min_snr_db": 10.0, "atol": 5e-2},
}
# Thresholds that only an override sets (a record without one used the default). min_topk_jaccard: the lowest
# |A and B| / |A or B| allowed between a row's CPU and HTP top-k index sets; 1 = the same set in every row.
OPTIONAL_THRESHOLDS = {"min_topk_jaccard": 1.0, "min_top1": 1.0, "max_error_rate": 0.0}
LOOSER_WHEN_HIGHER = ("atol", "max_error_rate")  # the thresholds a higher value loosens
_IN_WORDS = {"min_snr_db": "SNR >= {:g} dB", "min_cosine": "cosine >= {:g}", "atol": "max abs diff <= {:g}",
             "min_topk_jaccard": "top-k Jaccard >= {:g}", "min_top1": "top-1 agreement >= {:g}",
             "max_error_rate": "error rate <= {:g}"}


def thresholds_text(limits: Mapping[str, object]) -> str:
    """Thresholds as a user reads them ("SNR >= 25 dB, cosine >= 0.99"), not as the record's JSON."""
    return ", ".join(_IN_WORDS.get(k, f"{k} {{:g}}").format(v) if isinstance(v, (int, float)) else f"{k} {v}"
                     for k, v in limits.items())
TOPK_MARK = "qnndeploy.topk"  # model metadata: comma-separated output names to judge as top-k (NAME or NAME:AXIS)
_SHAPE_KEEPING = ("Cast", "Identity")  # between a TopK and a graph output: still its values or indices
# Between a TopK's indices and the Gather that uses them: still the same indices, in the same order.
_INDEX_KEEPING = (*_SHAPE_KEEPING, "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand", "Tile")
_GATHERS = ("Gather", "GatherElements")


class TopKRole(StrEnum):
    """What a top-k output holds: a TopK's values, its indices, or rows picked by its indices (in their order)."""

    VALUES = "values"
    INDICES = "indices"
    GATHERED = "gathered"


@dataclass(frozen=True)
class TopK:
    """An output judged as a top-k set: its k axis, and whether it holds the values or the indices."""

    axis: int
    role: TopKRole
    why: str  # "TopK node NAME" or "marked in the model (qnndeploy.topk)"
    group: str = ""  # the TopK node whose order it follows, by its values output (a group is aligned together)

@dataclass
class OutputMetrics:
    name: str
    shape: list[int]
    max_abs_diff: float
    mean_abs_diff: float
    rel_l2: float | None  # None when the reference is all zeros
    cosine: float | None
    snr_db: float | None
    ref_rms: float
    ref_max_abs: float
    argmax_agreement: float | None  # share of positions whose argmax over the last axis agrees
    passed: bool
    judged_on: str  # "cosine+snr", "max_abs_diff", "finite", "topk_set", "sorted:cosine+snr", "sorted:max_abs_diff"
    note: str | None = None
    topk_jaccard: float | None = None  # top-k indices: the lowest per-row Jaccard of the CPU and HTP index sets



class Metrics(TypedDict):
    max_abs_diff: float
    mean_abs_diff: float
    rel_l2: float | None  # None (and cosine, snr_db) when the reference is all zeros or the output not finite
    cosine: float | None
    snr_db: float | None
    ref_rms: float
    ref_max_abs: float
    finite: bool
    ref_finite: bool


def metrics(reference: np.ndarray, actual: np.ndarray) -> Metrics:
    """Max/mean abs diff, rel L2, cosine, SNR (dB) and reference scale, in float64."""
    import numpy as np

    ref = np.asarray(reference, dtype=np.float64).ravel()
    out = np.asarray(actual, dtype=np.float64).ravel()
    diff = out - ref
    ref_energy, noise_energy, out_energy = float(ref @ ref), float(diff @ diff), float(out @ out)
    finite, ref_finite = bool(np.isfinite(out).all()), bool(np.isfinite(ref).all())
    return {
        "max_abs_diff": float(np.abs(diff).max()) if diff.size else 0.0,
        "mean_abs_diff": float(np.abs(diff).mean()) if diff.size else 0.0,
        "rel_l2": math.sqrt(noise_energy / ref_energy) if ref_energy > 0 and finite else None,
        "cosine": (float(ref @ out) / math.sqrt(ref_energy * out_energy)
                   if ref_energy > 0 and out_energy > 0 and finite else None),
        "snr_db": (min(10 * math.log10(ref_energy / noise_energy), 300.0) if noise_energy > 0 else 300.0)
        if ref_energy > 0 and finite else None,
        "ref_rms": math.sqrt(ref_energy / ref.size) if ref.size else 0.0,
        "ref_max_abs": float(np.abs(ref).max()) if ref.size else 0.0,
        "finite": finite,
        "ref_finite": ref_finite,
    }


def thresholds_for(precision: str | None, overrides: Mapping[str, float] | None = None) -> Thresholds:
    """What outputs are judged by: the precision's defaults (w8a16's for any other), then the overrides."""
    return {**THRESHOLDS.get(precision or "w8a16", THRESHOLDS["w8a16"]), **(overrides or {})}


def topk_outputs(path: Path) -> dict[str, TopK]:
    """The outputs to judge as top-k sets: a TopK node's values (output 0) or indices (output 1), reached through
    Cast/Identity only; the outputs the model's metadata_props names under TOPK_MARK (NAME or NAME:AXIS, axis -1 by
    default; integer outputs are indices, others values); and the outputs a Gather or GatherElements makes with a
    TopK's indices (through Cast, Identity, Unsqueeze, Squeeze, Reshape, Flatten, Expand, Tile), whose rows follow
    the TopK's order along the gather's k axis."""
    model = load_model(Path(path), weights=False)
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    inferred = functools.cache(lambda: onnxio.inferred_values(model))  # shape inference once, and only if needed
    found: dict[str, TopK] = {}
    for value in graph.output:
        name, node = _through(value.name, producers, _SHAPE_KEEPING)
        if _is_topk(node):
            assert node is not None
            label = node.name or "(unnamed)"
            role = TopKRole.VALUES if list(node.output).index(name) == 0 else TopKRole.INDICES
            found[value.name] = TopK(_axis(node, -1), role, f"TopK node {label}", node.output[0])
        elif node is not None and node.op_type in _GATHERS and node.domain in ("", "ai.onnx") and len(node.input) > 1:
            index, source = _through(node.input[1], producers, _INDEX_KEEPING)
            if _is_topk(source) and source is not None and list(source.output).index(index) == 1:
                axis = _gathered_axis(model, node, source, inferred)
                if axis is not None:
                    label = source.name or "(unnamed)"
                    found[value.name] = TopK(axis, TopKRole.GATHERED, f"{node.op_type} {node.name or '(unnamed)'} "
                                             f"with the indices of TopK node {label}", source.output[0])
    marked = next((p.value for p in model.metadata_props if p.key == TOPK_MARK), "")
    dtypes = {v.name: tensor_info(v).dtype for v in graph.output}
    for entry in filter(None, (e.strip() for e in marked.split(","))):
        name, _, axis_text = entry.partition(":")
        if name in dtypes and name not in found:
            role = TopKRole.INDICES if dtypes[name].startswith(("int", "uint")) else TopKRole.VALUES
            found[name] = TopK(int(axis_text) if axis_text.lstrip("-").isdigit() else -1, role,
                               f"marked in the model ({TOPK_MARK})")
    return found


def _through(name: str, producers: Mapping[str, onnx.NodeProto], ops: tuple[str, ...]
             ) -> tuple[str, onnx.NodeProto | None]:
    """Follow `name` back through nodes of `ops` (their first input): the tensor reached and the node making it."""
    node = producers.get(name)
    while node is not None and node.op_type in ops and node.input:
        name = node.input[0]
        node = producers.get(name)
    return name, node


def _is_topk(node: onnx.NodeProto | None) -> bool:
    return node is not None and node.op_type == "TopK" and node.domain in ("", "ai.onnx")


def _axis(node: onnx.NodeProto, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), default)


def _gathered_axis(model: onnx.ModelProto, gather: onnx.NodeProto, topk: onnx.NodeProto,
                   values: Callable[[], Mapping[str, onnx.ValueInfoProto]]) -> int | None:
    """The axis of a gather's output along which its rows follow the TopK's k items: GatherElements' axis; for
    Gather, its axis plus the k dim's place among the indices' dims (the last dim of size k, by shape inference).
    None when the shapes do not say."""
    axis = _axis(gather, 0)
    if gather.op_type == "GatherElements":
        return axis
    dims: dict[str, list[int | None]] = {i.name: list(i.dims) for i in model.graph.initializer}
    dims.update({name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
                 for name, v in values().items() if v.type.tensor_type.HasField("shape")})
    data, index, picked = dims.get(gather.input[0]), dims.get(gather.input[1]), dims.get(topk.output[1])
    if data is None or index is None or picked is None or not picked:
        return None
    k = picked[_axis(topk, -1)]
    places = [i for i, d in enumerate(index) if d == k]
    if k is None or not places:
        return None
    return (axis + len(data) if axis < 0 else axis) + places[-1]


def judge_model(model: Path, expected: Sequence[Mapping[str, np.ndarray]],
                actual: Sequence[Mapping[str, np.ndarray]], limits: Thresholds) -> list[OutputMetrics]:
    """judge_outputs with what the model says about its outputs: their class axes and top-k roles. The one way
    validate, diagnose, bundle verify and device verify judge a graph."""
    return judge_outputs(expected, actual, limits, onnxio.class_axes(model), topk_outputs(model))


def judge_outputs(expected: Sequence[Mapping[str, np.ndarray]], actual: Sequence[Mapping[str, np.ndarray]],
                  limits: Thresholds, class_axes: Mapping[str, int] | None = None,
                  topk: Mapping[str, TopK] | None = None) -> list[OutputMetrics]:
    """Every output over all samples (one {name: array} per sample), against the CPU reference. Outputs in
    `class_axes` (onnxio.class_axes) also get their argmax agreement over that axis; outputs in `topk`
    (topk_outputs) are judged as top-k sets, and the rows gathered with a TopK's indices are first put in the
    CPU's order."""
    topk = topk or {}
    aligned, notes = _align(expected, actual, topk)
    found = []
    for name in expected[0]:
        role = topk.get(name)
        if name in notes:
            m = judge(name, [e[name] for e in expected], [a[name] for a in aligned], limits,
                      (class_axes or {}).get(name))
            m.judged_on = m.judged_on if m.judged_on == "finite" else f"aligned:{m.judged_on}"
            m.note = notes[name] + (f"; {m.note}" if m.note else "")
        else:
            m = judge(name, [e[name] for e in expected], [a[name] for a in actual], limits,
                      (class_axes or {}).get(name), role if role is None or role.role != TopKRole.GATHERED else None)
        found.append(m)
    return found


def _align(expected: Sequence[Mapping[str, np.ndarray]], actual: Sequence[Mapping[str, np.ndarray]],
           topk: Mapping[str, TopK]) -> tuple[list[dict[str, np.ndarray]], dict[str, str]]:
    """The HTP's outputs with the rows of each gathered output moved to the CPU's order of its TopK's items, and a
    note per aligned output. The order comes from the TopK's indices when they are an output (an item in only one
    top-k stays where it is, and counts as error); else rows are paired nearest first over every output of the
    group (each scaled by its CPU RMS): compared as row sets."""
    import numpy as np

    aligned = [dict(a) for a in actual]
    notes: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for name, t in topk.items():
        if t.group and name in expected[0]:
            groups.setdefault(t.group, []).append(name)
    for names in groups.values():
        gathered = [n for n in names if topk[n].role == TopKRole.GATHERED]
        index = next((n for n in names if topk[n].role == TopKRole.INDICES), None)
        rows = [{n: (_rows(e[n], topk[n].axis), _rows(a[n], topk[n].axis)) for n in names}
                for e, a in zip(expected, actual, strict=True)]
        if not gathered or len({r.shape[:2] for sample in rows for pair in sample.values() for r in pair}) != 1:
            continue  # no gathered output, or outputs that do not share the TopK's rows: nothing to align by
        features = [n for n in names if topk[n].role != TopKRole.INDICES]
        moved = total = 0
        for s, sample in enumerate(rows):
            for i in range(len(sample[gathered[0]][0])):
                if index is not None:
                    perm = _by_index(sample[index][0][i, :, 0], sample[index][1][i, :, 0])
                else:
                    scale = [max(float(np.sqrt(np.mean(np.square(sample[n][0][i])))), 1e-12) for n in features]
                    cpu, htp = (np.concatenate([sample[n][side][i] / c for n, c in zip(features, scale, strict=True)],
                                               axis=1) for side in (0, 1))
                    perm = _nearest(cpu, htp)
                moved += int((perm != np.arange(len(perm))).sum())
                total += len(perm)
                for n in gathered:
                    sample[n][1][i] = sample[n][1][i][perm]
            for n in gathered:
                aligned[s][n] = sample[n][1].reshape(actual[s][n].shape).astype(actual[s][n].dtype)
        how = f"by the indices output {index}" if index is not None else "as row sets (nearest rows paired)"
        for n in gathered:
            notes[n] = (f"rows in a TopK's order ({topk[n].why}): aligned to the CPU's order along axis "
                        f"{topk[n].axis} {how}, " + (f"{moved} of {total} row(s) moved" if moved else "no row moved"))
    return aligned, notes


def _rows(array: np.ndarray, axis: int) -> np.ndarray:
    """One sample's output as (leading, k, rest) float64 rows along its k axis (a copy)."""
    import numpy as np

    a = np.asarray(array)
    axis = axis + a.ndim if axis < 0 else axis
    lead = math.prod(a.shape[:axis])
    return a.astype(np.float64).reshape(lead, a.shape[axis], -1).copy()


def _by_index(cpu: np.ndarray, htp: np.ndarray) -> np.ndarray:
    """perm[j] = the HTP position holding the CPU's j-th item; items in one top-k only take the positions left."""
    import numpy as np

    where = {float(v): i for i, v in reversed(list(enumerate(htp)))}
    perm = np.full(len(cpu), -1)
    used = set()
    for j, v in enumerate(cpu):
        i = where.get(float(v))
        if i is not None and i not in used:
            perm[j] = i
            used.add(i)
    left = iter(i for i in range(len(htp)) if i not in used)
    return np.array([p if p >= 0 else next(left) for p in perm])


def _nearest(cpu: np.ndarray, htp: np.ndarray) -> np.ndarray:
    """perm[j] = the HTP row paired with the CPU's row j: the closest pairs first (greedy assignment)."""
    import numpy as np

    distance = ((cpu[:, None, :] - htp[None, :, :]) ** 2).sum(axis=2)
    perm = np.full(len(cpu), -1)
    taken = np.zeros(len(htp), bool)
    for flat in np.argsort(distance, axis=None, kind="stable"):
        j, i = divmod(int(flat), len(htp))
        if perm[j] < 0 and not taken[i]:
            perm[j], taken[i] = i, True
    return perm


def judge(name: str, expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], limits: Thresholds,
          class_axis: int | None = None, topk: TopK | None = None) -> OutputMetrics:
    """One output's verdict. A top-k output is compared sorted along its k axis, so order does not count: its
    indices pass when every row holds the same set (Jaccard >= min_topk_jaccard), its values by the rules below
    on the sorted values. Others: not finite fails; a near-zero reference is judged on max abs diff; else cosine
    and SNR."""
    import numpy as np

    ref, out = np.stack(expected), np.stack(actual)  # a leading sample axis
    axis = None
    if topk is not None and ref.shape == out.shape and -ref.ndim < topk.axis < ref.ndim - 1:
        axis = topk.axis + 1 if topk.axis >= 0 else topk.axis
    if axis is not None and topk is not None:
        return _judge_topk(name, ref, out, limits, axis, topk)
    m = metrics(ref, out)
    agree = None
    if class_axis is not None and -ref.ndim < class_axis < ref.ndim - 1 and np.issubdtype(ref.dtype, np.floating):
        class_axis = class_axis + 1 if class_axis >= 0 else class_axis
        agree = float((ref.argmax(class_axis) == out.argmax(class_axis)).mean())
    passed, judged, note = verdict(m, limits)
    return OutputMetrics(name, list(out.shape[1:]), m["max_abs_diff"], m["mean_abs_diff"], m["rel_l2"], m["cosine"],
                         m["snr_db"], m["ref_rms"], m["ref_max_abs"], agree, passed, judged, note)


def verdict(m: Metrics, limits: Thresholds) -> tuple[bool, str, str | None]:
    """(passed, judged_on, note) by the value rules: finite, then near-zero max abs diff, else cosine and SNR."""
    if not m["ref_finite"]:
        return False, "finite", ("the CPU's own output has NaN or Inf values on these samples: inputs the model "
                                 "never gets (an integer input outside its values? give them with --range "
                                 "NAME=LO:HI, or real inputs with --inputs DIR)")
    if not m["finite"]:
        return False, "finite", "the HTP output has NaN or Inf values"
    if m["ref_rms"] < limits["atol"]:
        note = (f"reference is near zero (RMS {m['ref_rms']:.2g} < atol {limits['atol']:g}): rel L2, cosine and "
                f"SNR are not meaningful here, judged on max abs diff; validate with real inputs (--inputs DIR)")
        return m["max_abs_diff"] <= limits["atol"], "max_abs_diff", note
    passed = (m["cosine"] is not None and m["cosine"] >= limits["min_cosine"]
              and m["snr_db"] is not None and m["snr_db"] >= limits["min_snr_db"])
    return passed, "cosine+snr", None



def rejudge(recorded: Mapping[str, object], limits: Thresholds) -> str | None:
    """One output's verdict again, from the figures a record holds (OutputMetrics as JSON) and never from its
    `passed`: None when they pass `limits` by the rules of judge, else why not. What bundle verify holds an
    on-device record to, so a record cannot say passed over failing figures."""
    judged = str(recorded.get("judged_on", ""))
    if judged.endswith("finite"):
        return "its values are not finite"
    if judged == "topk_set":
        jaccard = number(recorded, "topk_jaccard")
        least = limits.get("min_topk_jaccard", OPTIONAL_THRESHOLDS["min_topk_jaccard"])
        return None if jaccard is not None and jaccard >= least else f"top-k Jaccard {jaccard} (needs >= {least:g})"
    figures = {k: number(recorded, k) for k in ("max_abs_diff", "cosine", "snr_db", "ref_rms")}
    ref_rms, max_abs = figures["ref_rms"], figures["max_abs_diff"]
    if ref_rms is None or max_abs is None:
        return "its figures are missing or not finite numbers"
    m: Metrics = {"max_abs_diff": max_abs, "mean_abs_diff": 0.0, "rel_l2": None, "cosine": figures["cosine"],
                  "snr_db": figures["snr_db"], "ref_rms": ref_rms, "ref_max_abs": 0.0, "finite": True,
                  "ref_finite": True}
    passed, on, _ = verdict(m, limits)
    if passed:
        return None
    if on == "max_abs_diff":
        return f"max abs diff {max_abs:g} over atol {limits['atol']:g}"
    return f"cosine {figures['cosine']}, SNR {figures['snr_db']} dB (needs {thresholds_text(limits)})"

def _judge_topk(name: str, ref: np.ndarray, out: np.ndarray, limits: Thresholds, axis: int, topk: TopK
                ) -> OutputMetrics:
    import numpy as np

    ref_rows = np.moveaxis(ref, axis, -1).reshape(-1, ref.shape[axis])
    out_rows = np.moveaxis(out, axis, -1).reshape(-1, out.shape[axis])
    m = metrics(np.sort(ref_rows, axis=1), np.sort(out_rows, axis=1))
    rows = len(ref_rows)
    jaccard = None
    if topk.role == TopKRole.INDICES:
        reordered = int(((ref_rows != out_rows).any(axis=1)
                         & (np.sort(ref_rows, axis=1) == np.sort(out_rows, axis=1)).all(axis=1)).sum())
        order = f"order differs in {reordered} of {rows} row(s), which does not count" if reordered else "same order"
        shared = (ref_rows[:, :, None] == out_rows[:, None, :]).any(axis=2).sum(axis=1)
        union = ref_rows.shape[1] + out_rows.shape[1] - shared
        per_row = np.where(union > 0, shared / np.maximum(union, 1), 1.0)
        jaccard = float(per_row.min()) if rows else 1.0
        least = limits.get("min_topk_jaccard", OPTIONAL_THRESHOLDS["min_topk_jaccard"])
        differ = int((per_row < 1).sum())
        passed, judged = jaccard >= least, "topk_set"
        note = (f"top-k indices ({topk.why}) judged as sets along axis {topk.axis}: "
                + (f"sets differ in {differ} of {rows} row(s), lowest Jaccard {jaccard:.2f} (needs >= {least:g})"
                   if differ else "the same set in every row") + f"; {order}")
    else:
        passed, base, why = verdict(m, limits)
        judged = base if base == "finite" else f"sorted:{base}"
        note = (f"top-k values ({topk.why}) compared sorted along axis {topk.axis}, so their order does not count"
                + (f"; {why}" if why else ""))
    return OutputMetrics(name, list(out.shape[1:]), m["max_abs_diff"], m["mean_abs_diff"], m["rel_l2"], m["cosine"],
                         m["snr_db"], m["ref_rms"], m["ref_max_abs"], None, bool(passed), judged, note, jaccard)


# --- what a failing output's error is made of ----------------------------------------------------------------------

SMALL = 0.01  # a value below this share of an output's peak magnitude is one of its small values


class FitKind(StrEnum):
    """What a failing output's error is made of, by what the output is."""

    GAIN = "gain"
    SMALL_VALUES = "small-values"
    SPREAD = "spread"
    TOPK_SET = "topk-set"
    NEAR_ZERO = "near-zero"
    FINITE = "finite"


@dataclass(frozen=True)
class MetricFit:
    """What the metric an output failed measures on it, and the metric that judges it by what it is: for diagnose
    to say, when no tensor is to blame, which validate thresholds fit (a looser one needs a reason)."""

    output: str
    kind: FitKind
    measures: str  # what the failing metric measures on this output
    fits: str  # which metric fits it, and where
    options: dict[str, float]  # validate's thresholds this output passes with (min_snr_db, min_cosine, atol, ...)


def fits(model: Path, expected: Sequence[Mapping[str, np.ndarray]], actual: Sequence[Mapping[str, np.ndarray]],
         limits: Thresholds) -> list[MetricFit]:
    """A Fit for each output of `model` that fails validate's rules (judge_model) on these samples."""
    import numpy as np

    topk = topk_outputs(model)
    aligned, _ = _align(expected, actual, topk)
    found = []
    for m in judge_model(model, expected, actual, limits):
        if m.passed:
            continue
        ref = np.stack([e[m.name] for e in expected]).astype(np.float64)
        out = np.stack([a[m.name] for a in aligned]).astype(np.float64)
        role = topk.get(m.name)
        if m.judged_on.startswith("sorted:") and role is not None:
            axis = role.axis + 1 if role.axis >= 0 else role.axis
            ref, out = np.sort(ref, axis=axis), np.sort(out, axis=axis)
        found.append(fit(m, ref, out, limits))
    return found


def fit(m: OutputMetrics, ref: np.ndarray, out: np.ndarray, limits: Thresholds) -> MetricFit:
    """Why output `m` failed, from its CPU and HTP values as judged: a scale error (gain), an error made in its
    small values (below 1% of its peak), or one spread over its values; or its top-k set, near-zero or NaN rule."""
    import numpy as np

    name = m.name
    if m.judged_on == "finite":
        return MetricFit(name, FitKind.FINITE, m.note or "the HTP output has NaN or Inf values", "no threshold passes "
                         "it: find where they are made (the probes) or keep the graph on the CPU", {})
    if m.judged_on == "topk_set":
        jaccard = m.topk_jaccard or 0.0
        return MetricFit(name, FitKind.TOPK_SET, f"the top-k sets differ (lowest Jaccard {jaccard:.2f} in a row)",
                         "the Jaccard index of the sets fits a top-k whose last places are near-tied", {
                       "min_topk_jaccard": math.floor(jaccard * 100) / 100})
    if m.judged_on.endswith("max_abs_diff"):
        return MetricFit(name, FitKind.NEAR_ZERO, (
            f"its CPU values are near zero on these samples (RMS {m.ref_rms:.2g} < atol {limits['atol']:g}), so it "
            f"is judged on max abs diff ({m.max_abs_diff:.3g})"), "real inputs (--inputs DIR) make it judged on cosine "
            "and SNR", {"atol": float(f"{m.max_abs_diff * 1.01:.2g}")})
    r, o = ref.ravel(), out.ravel()
    noise = o - r
    ref_energy, noise_energy = float(r @ r), float(noise @ noise)
    gain = float(r @ o) / ref_energy
    shape = o - gain * r
    shape_snr = _db(gain * gain * ref_energy, float(shape @ shape))
    snr, cosine = m.snr_db or 0.0, m.cosine or 0.0
    small = np.abs(r) < SMALL * m.ref_max_abs
    small_err = float(noise[small] @ noise[small]) / noise_energy if noise_energy else 0.0
    large_snr = _db(float(r[~small] @ r[~small]), float(noise[~small] @ noise[~small]))
    options: dict[str, float] = {}
    if snr < limits["min_snr_db"]:
        options["min_snr_db"] = float(math.floor(snr))
    if cosine < limits["min_cosine"]:
        options["min_cosine"] = math.floor(cosine * 1000) / 1000
    elif cosine < 1:
        # The cosine passes: hold it to what it reaches (1 - cosine to one digit, rounded up), so that loosening the
        # SNR leaves a check with teeth.
        decade = 10.0 ** max(math.floor(math.log10(1 - cosine)), -9)
        options["min_cosine"] = max(limits["min_cosine"], 1 - math.ceil((1 - cosine) / decade) * decade)
    if snr < limits["min_snr_db"] and shape_snr >= limits["min_snr_db"]:
        return MetricFit(name, FitKind.GAIN, (
            f"{name} comes out {gain:.4g} times the CPU's ({gain - 1:+.2%}): the SNR counts that scale as error "
            f"({snr:.1f} dB), while its shape matches at {shape_snr:.1f} dB once the scale is taken out"), (
            f"the cosine ({cosine:.7f}) ignores the scale and measures the shape: it fits where what reads {name} "
            "does not depend on its scale (a normalized embedding, an argmax, audio at another loudness)"), options)
    if small_err >= 0.5 and large_snr >= limits["min_snr_db"]:
        zeroed = small & (o == 0) & (r != 0)
        flushed = (f"; the HTP returns {zeroed.sum() / max(small.sum(), 1):.0%} of them as 0 (CPU values up to "
                   f"{float(np.abs(r[zeroed]).max()):.2g})" if zeroed.any() else "")
        fitting = (f"the cosine ({cosine:.6f}) weighs each value by its size, as the output's energy does: it fits "
                   f"where {name}'s small values do not matter (scores far below the peak, near-silence)"
                   if cosine >= limits["min_cosine"] else
                   "the cosine weighs the small values' error as the SNR does: no metric of validate's judges it "
                   "better; accept what it reaches only with a reason")
        return MetricFit(name, FitKind.SMALL_VALUES, (
            f"the SNR is made by {name}'s small values: {small_err:.0%} of the error's energy is in the "
            f"{small.mean():.0%} of values below 1% of its peak ({SMALL * m.ref_max_abs:.3g}), which carry "
            f"{float(r[small] @ r[small]) / ref_energy:.1%} of its energy{flushed}; over the values above 1% of "
            f"its peak the SNR is {large_snr:.1f} dB"), fitting, options)
    return MetricFit(name, FitKind.SPREAD, (
        f"the error is spread over {name}'s values: {snr:.1f} dB overall, {large_snr:.1f} dB over the values "
        f"above 1% of its peak, {shape_snr:.1f} dB once its scale is taken out"), (
        "no metric of validate's judges it better: fp16 loses this much here; accept it only with a reason, or run "
        "the graph (or the part the probes name) on the CPU"), options)


def _db(signal: float, noise: float) -> float:
    return min(10 * math.log10(signal / noise), 300.0) if noise > 0 and signal > 0 else (300.0 if signal else 0.0)


def fitting_thresholds(found: Sequence[MetricFit], judged: Sequence[OutputMetrics], limits: Thresholds
                       ) -> dict[str, float]:
    """One set of validate thresholds under which every output of the graph passes: the loosest each failing
    output needs; a cosine held above the default only when every output judged on it reaches that."""
    merged: dict[str, float] = {}
    for f in found:
        for key, value in f.options.items():
            merged[key] = max(merged.get(key, value), value) if key == "atol" else min(merged.get(key, value), value)
    cosines = [m.cosine for m in judged if m.judged_on.endswith("cosine+snr") and m.cosine is not None]
    if merged.get("min_cosine", 0.0) > limits["min_cosine"] and min(cosines, default=1.0) < merged["min_cosine"]:
        merged["min_cosine"] = limits["min_cosine"]
    return merged

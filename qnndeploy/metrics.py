"""How an output is compared with its CPU reference: the metrics, the per-precision thresholds and the verdict.
prepare, validate and device verify judge outputs the same way, so it lives below all three.

Several metrics, because one can mislead: rel L2, cosine and SNR are relative to the reference and mean nothing
when the reference is near zero (a detector's map on random input); max abs diff is absolute and stays meaningful.
A reference whose RMS is below the absolute tolerance is judged on max abs diff alone, and the verdict says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    import numpy as np

Thresholds = dict[str, float]  # min_cosine, min_snr_db, atol

# Defaults per precision. fp16 on the HTP is usually within 1e-2 rel L2 (PP-OCR rec: 4e-3 = 48 dB);
# 8-bit weights lose more. atol is also the level below which a reference counts as near zero.
THRESHOLDS: dict[str, Thresholds] = {
    "fp16": {"min_cosine": 0.999, "min_snr_db": 30.0, "atol": 1e-3},
    "w8a16": {"min_cosine": 0.99, "min_snr_db": 20.0, "atol": 1e-2},
}

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
    judged_on: str  # "cosine+snr" or "max_abs_diff"
    note: str | None = None



class Metrics(TypedDict):
    max_abs_diff: float
    mean_abs_diff: float
    rel_l2: float | None  # None (and cosine, snr_db) when the reference is all zeros or the output not finite
    cosine: float | None
    snr_db: float | None
    ref_rms: float
    ref_max_abs: float
    finite: bool


def metrics(reference: np.ndarray, actual: np.ndarray) -> Metrics:
    """Max/mean abs diff, rel L2, cosine, SNR (dB) and reference scale, in float64."""
    import numpy as np

    ref = np.asarray(reference, dtype=np.float64).ravel()
    out = np.asarray(actual, dtype=np.float64).ravel()
    diff = out - ref
    ref_energy, noise_energy, out_energy = float(ref @ ref), float(diff @ diff), float(out @ out)
    finite = bool(np.isfinite(out).all())
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
    }


def thresholds_for(precision: str | None, overrides: Mapping[str, float] | None = None) -> Thresholds:
    """What outputs are judged by: the precision's defaults (w8a16's for any other), then the overrides."""
    return {**THRESHOLDS.get(precision or "w8a16", THRESHOLDS["w8a16"]), **(overrides or {})}


def judge_outputs(expected: Sequence[Mapping[str, np.ndarray]], actual: Sequence[Mapping[str, np.ndarray]],
                  limits: Thresholds, class_axes: Mapping[str, int] | None = None) -> list[OutputMetrics]:
    """Every output over all samples (one {name: array} per sample), against the CPU reference. Outputs in
    `class_axes` (onnxio.class_axes) also get their argmax agreement over that axis."""
    return [judge(name, [e[name] for e in expected], [a[name] for a in actual], limits, (class_axes or {}).get(name))
            for name in expected[0]]


def judge(name: str, expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], limits: Thresholds,
          class_axis: int | None = None) -> OutputMetrics:
    import numpy as np

    ref, out = np.stack(expected), np.stack(actual)  # a leading sample axis
    m = metrics(ref, out)
    agree = None
    if class_axis is not None and -ref.ndim < class_axis < ref.ndim - 1 and np.issubdtype(ref.dtype, np.floating):
        axis = class_axis + 1 if class_axis >= 0 else class_axis
        agree = float((ref.argmax(axis) == out.argmax(axis)).mean())
    note = None
    if not m["finite"]:
        passed, judged, note = False, "finite", "the HTP output has NaN or Inf values"
    elif m["ref_rms"] < limits["atol"]:
        passed, judged = m["max_abs_diff"] <= limits["atol"], "max_abs_diff"
        note = (f"reference is near zero (RMS {m['ref_rms']:.2g} < atol {limits['atol']:g}): rel L2, cosine and "
                f"SNR are not meaningful here, judged on max abs diff; validate with real inputs (--inputs DIR)")
    else:
        passed = (m["cosine"] is not None and m["cosine"] >= limits["min_cosine"]
                  and m["snr_db"] is not None and m["snr_db"] >= limits["min_snr_db"])
        judged = "cosine+snr"
    return OutputMetrics(name, list(out.shape[1:]), m["max_abs_diff"], m["mean_abs_diff"], m["rel_l2"], m["cosine"],
                         m["snr_db"], m["ref_rms"], m["ref_max_abs"], agree, bool(passed), judged, note)

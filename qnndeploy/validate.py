"""Validate a build: run each compiled context on the host HTP emulator and the source ONNX on CPU with the same
inputs, compare every output, and write validation.json next to compile.json.

Several metrics, because one can mislead: rel L2, cosine and SNR are relative to the reference and mean nothing
when the reference is near zero (a detector's map on random input); max abs diff is absolute and stays meaningful.
A reference whose RMS is below the absolute tolerance is judged on max abs diff alone, and the record says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy import __version__, onnxio, samples
from qnndeploy.errors import QnnDeployError, first_line
from qnndeploy.fileio import sha256_file, write_json

if TYPE_CHECKING:
    import numpy as np

RECORD = "qnndeploy-validation"
RECORD_VERSION = 1
RECORD_FILE = "validation.json"
# Defaults per precision. fp16 on the HTP is usually within 1e-2 rel L2 (PP-OCR rec: 4e-3 = 48 dB);
# 8-bit weights lose more. atol is also the level below which a reference counts as near zero.
THRESHOLDS = {
    "fp16": {"min_cosine": 0.999, "min_snr_db": 30.0, "atol": 1e-3},
    "w8a16": {"min_cosine": 0.99, "min_snr_db": 20.0, "atol": 1e-2},
}
EMULATOR_NOTE = ("Outputs come from the host HTP emulator (x86-64): the HTP's arithmetic, not its speed. "
                 "Emulator timings say nothing about phone timings; measure on a phone (qnndeploy device profile).")


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


@dataclass
class TargetValidation:
    graph: str
    soc: str
    precision: str | None
    status: str  # "passed" | "failed" | "skipped" | "error"
    reason: str | None = None
    outputs: list[OutputMetrics] = field(default_factory=list)
    samples: int = 0
    thresholds: dict | None = None
    emulator_s_per_run: float | None = None
    record: Path | None = None


@dataclass
class ValidationSummary:
    build: Path
    inputs: dict
    targets: list[TargetValidation]
    ok: bool
    emulator_note: str = EMULATOR_NOTE


Progress = Callable[[int, int, "TargetValidation | None"], None]


def validate_build(build: Path, inputs: Path | None = None, random: int | None = None, *, seed: int = 0,
                   thresholds: dict | None = None, progress: Progress | None = None) -> ValidationSummary:
    """Validate every compiled (graph, SoC) in `build`. `inputs` is a folder of samples (DIR/<graph>/ when it
    exists, else DIR: *.npz with one array per input name, or <input>.npy); otherwise `random` seeded samples
    (default 1). `thresholds` overrides min_cosine / min_snr_db / atol for every precision."""
    from qnndeploy import htp
    from qnndeploy.compile import read_build

    if inputs is not None and random is not None:
        raise QnnDeployError("pass --inputs DIR or --random N, not both")
    if random is not None and random < 1:
        raise QnnDeployError("--random must be 1 or more")
    if inputs is not None and not Path(inputs).is_dir():
        raise QnnDeployError(f"--inputs {inputs}: no such folder")
    check_thresholds(thresholds or {})
    jobs = read_build(build)
    htp._require()
    # Samples that do not fit are bad input: refuse them before anything runs or is written.
    given: dict[str, tuple[list, dict]] = {}
    for _, record in jobs if inputs is not None else []:
        source = Path(record["input"]["path"])
        if _validatable(record) and record["graph"] not in given and source.is_file():
            given[record["graph"]] = samples.for_graph(source, record["graph"], inputs)
    random = random if random is not None or inputs is not None else 1
    described = ({"kind": "files", "folder": str(Path(inputs).resolve())} if inputs is not None
                 else {"kind": "random", "samples": random, "seed": seed, "distribution": samples.RANDOM_NOTE})
    per_graph: dict[str, tuple[list, list, dict] | QnnDeployError] = {}
    results: list[TargetValidation] = []
    if progress:
        progress(0, len(jobs), None)
    for folder, record in jobs:
        results.append(_validate_one(folder, record, random, seed, thresholds or {}, per_graph, given))
        if progress:
            progress(len(results), len(jobs), results[-1])
    validated = [t for t in results if t.status in ("passed", "failed")]
    ok = bool(validated) and all(t.status in ("passed", "skipped") for t in results)
    return ValidationSummary(Path(build), described, results, ok)


def check_thresholds(thresholds: dict) -> None:
    """Refuse names and values no output could be judged by: a cosine outside [-1, 1], a NaN or infinite SNR,
    a negative atol."""
    unknown = set(thresholds) - set(THRESHOLDS["fp16"])
    if unknown:
        raise QnnDeployError(f"unknown threshold(s) {', '.join(sorted(unknown))}")
    cosine, snr, atol = (thresholds.get(k) for k in ("min_cosine", "min_snr_db", "atol"))
    if cosine is not None and not -1 <= cosine <= 1:
        raise QnnDeployError(f"--min-cosine {cosine:g}: a cosine similarity lies between -1 and 1 (1 = identical)")
    if snr is not None and not math.isfinite(snr):
        raise QnnDeployError(f"--min-snr-db {snr:g}: give a finite number of dB, e.g. 30")
    if atol is not None and not (math.isfinite(atol) and atol >= 0):
        raise QnnDeployError(f"--atol {atol:g}: give a finite absolute tolerance of 0 or more, e.g. 1e-3")


def _validatable(record: dict) -> bool:
    return record.get("status") == "ok" and any(o["format"] == "ort-epcontext" for o in record.get("outputs", []))


def _validate_one(folder: Path, record: dict, random: int | None, seed: int, overrides: dict, per_graph: dict,
                  given: dict) -> TargetValidation:
    graph, soc_name, precision = record["graph"], record["soc"], record.get("precision")
    result = TargetValidation(graph, soc_name, precision, "skipped")
    if record.get("status") != "ok":
        result.reason = "the compile failed: nothing to validate"
        return result
    ctx = next((o for o in record["outputs"] if o["format"] == "ort-epcontext"), None)
    binary = next((o for o in record["outputs"] if o["format"] == "qnn-context-binary"), None)
    if ctx is None:
        result.reason = (f"no ORT EPContext wrapper ({record['backend']} backend): the host emulator cannot load "
                         f"this context; check it on a phone (qnndeploy device verify)")
        return result
    result.thresholds = limits = thresholds_for(precision, overrides)
    try:
        for o in (ctx, binary):
            if sha256_file(folder / o["path"]) != o["sha256"]:
                raise QnnDeployError(f"{folder / o['path']} changed since it was compiled: compile again")
        if graph not in per_graph:
            try:
                per_graph[graph] = _reference(record, given.get(graph), random, seed)
            except QnnDeployError as e:
                per_graph[graph] = e
        if isinstance(per_graph[graph], QnnDeployError):
            raise per_graph[graph]
        feeds, expected, used = per_graph[graph]
        outputs, seconds = _run_htp(folder / ctx["path"], soc_name, precision, feeds)
    except QnnDeployError as e:
        result.status, result.reason = "error", str(e)
        return result
    result.samples = len(feeds)
    result.emulator_s_per_run = round(seconds / len(feeds), 3)
    result.outputs = judge_outputs(expected, outputs, limits, onnxio.class_axes(Path(record["input"]["path"])))
    result.status = "passed" if all(m.passed for m in result.outputs) else "failed"
    result.record = folder / RECORD_FILE
    write_json(result.record, {
        "record": RECORD, "version": RECORD_VERSION,
        "graph": graph, "soc": soc_name, "soc_id": record["soc_id"], "dsp_arch": record["dsp_arch"],
        "precision": precision, "backend": record["backend"], "qairt_version": record["qairt_version"],
        "passed": result.status == "passed",
        "thresholds": limits,
        "inputs": used,
        "outputs": [vars(m) for m in result.outputs],
        "context": {"path": ctx["path"], "sha256": ctx["sha256"]},
        "binary": {"path": binary["path"], "sha256": binary["sha256"]} if binary else None,
        "compile_cache_key": record.get("cache_key"),
        "emulator": {"seconds_per_run": result.emulator_s_per_run, "note": EMULATOR_NOTE},
        "tools": {"qnndeploy": __version__},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    })
    return result


def _reference(record: dict, given: tuple[list, dict] | None, random: int | None, seed: int
               ) -> tuple[list, list, dict]:
    """The graph's input samples (`given` from --inputs, else random) and the CPU outputs for them (computed once
    per graph, shared by its SoCs)."""
    source = Path(record["input"]["path"])
    if not source.is_file():
        raise QnnDeployError(f"the source model {source} is gone: the CPU reference needs it")
    if sha256_file(source) != record["input"]["sha256"]:
        raise QnnDeployError(f"{source} changed since the compile: compile again, then validate")
    feeds, used = given or samples.for_graph(source, record["graph"], count=random, seed=seed)
    return feeds, samples.cpu_outputs(source, feeds), used


def _run_htp(ctx: Path, soc_name: str, precision: str | None, feeds: list) -> tuple[list, float]:
    import onnxruntime as ort

    from qnndeploy import htp, socs

    try:
        with htp.quiet_native_stdout():
            session = ort.InferenceSession(str(ctx), htp.session_options(socs.find(soc_name),
                                                                         fp16=precision == "fp16"))
        names = [o.name for o in session.get_outputs()]
        start = time.monotonic()
        outputs = [dict(zip(names, session.run(None, s))) for s in feeds]
    except Exception as e:  # onnxruntime's own error types
        raise QnnDeployError(f"the HTP emulator could not run {ctx.name}: {first_line(e)}") from None
    return outputs, time.monotonic() - start


# --- metrics ---------------------------------------------------------------------------------------

def metrics(reference: np.ndarray, actual: np.ndarray) -> dict:
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


def thresholds_for(precision: str | None, overrides: dict | None = None) -> dict:
    """What outputs are judged by: the precision's defaults (w8a16's for any other), then the overrides."""
    return {**THRESHOLDS.get(precision, THRESHOLDS["w8a16"]), **(overrides or {})}


def judge_outputs(expected: list[dict], actual: list[dict], limits: dict,
                  class_axes: dict[str, int] | None = None) -> list[OutputMetrics]:
    """Every output over all samples (one {name: array} per sample), against the CPU reference. Outputs in
    `class_axes` (onnxio.class_axes) also get their argmax agreement over that axis."""
    return [judge(name, [e[name] for e in expected], [a[name] for a in actual], limits, (class_axes or {}).get(name))
            for name in expected[0]]


def judge(name: str, expected: list, actual: list, limits: dict, class_axis: int | None = None) -> OutputMetrics:
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
                  and m["snr_db"] >= limits["min_snr_db"])
        judged = "cosine+snr"
    return OutputMetrics(name, list(out.shape[1:]), m["max_abs_diff"], m["mean_abs_diff"], m["rel_l2"], m["cosine"],
                         m["snr_db"], m["ref_rms"], m["ref_max_abs"], agree, bool(passed), judged, note)

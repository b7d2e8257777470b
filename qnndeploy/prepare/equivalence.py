"""prepare's proof: the original and the prepared model run on onnxruntime's CPU with the same inputs, and every
output compared (max abs diff and rel L2, by metrics.py's rules)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base.errors import BadInput, CheckFailed, first_line
from qnndeploy.model import metrics, samples
from qnndeploy.model.onnxio import TensorInfo

if TYPE_CHECKING:
    import numpy as np
    import onnxruntime as ort


@dataclass
class OutputDiff:
    name: str
    shape: list[int]
    max_abs_diff: float
    rel_l2: float
    ok: bool


def cpu_session(path: Path, what: str, hint: str = "") -> ort.InferenceSession:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 onnxruntime's exception types are not exported
        raise BadInput(f"{what} does not load in onnxruntime: {first_line(e)}{hint}") from None


def compare(name: str, want: np.ndarray, got: np.ndarray, tolerance: float) -> OutputDiff:
    """Max abs diff and rel L2 by validate's metrics; NaNs in the same places of both outputs count as equal."""
    import numpy as np

    if want.shape != got.shape:
        raise CheckFailed(f"the prepared model's output {name} has shape {list(got.shape)}, the original's "
                          f"{list(want.shape)}; nothing written")
    a, b = want.astype(np.float64), got.astype(np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return OutputDiff(name, list(got.shape), math.inf, math.inf, False)
    m = metrics.metrics(np.nan_to_num(a, nan=0.0), np.nan_to_num(b, nan=0.0))
    max_abs, rel = m["max_abs_diff"], m["rel_l2"]
    if rel is None:  # an all-zero reference
        rel = 0.0 if max_abs == 0 else math.inf
    return OutputDiff(name, list(got.shape), max_abs, rel, max_abs <= tolerance or rel <= tolerance)


IntInputRanges = Mapping[str, tuple[int, int, str]]  # onnxio.int_input_ranges: [lo, hi) and why


def feeds(live: list[TensorInfo], inputs_dir: Path | None, seed: int, ranges: IntInputRanges) -> dict[str, np.ndarray]:
    """One sample for the equivalence run: --inputs DIR, else seeded random values that fit the graph."""

    if inputs_dir is not None:
        return {spec.name: samples.read_one(Path(inputs_dir), spec) for spec in live}
    return samples.random_samples(live, 1, seed, {k: (lo, hi - 1) for k, (lo, hi, _) in ranges.items()})[0]


def reference(original: Path, feeds: Mapping[str, np.ndarray], frozen: Mapping[str, np.ndarray], ranges: IntInputRanges,
               random: bool) -> dict[str, np.ndarray]:
    """The original model's outputs; when it fails on random inputs, say which integer inputs were drawn where."""
    session = cpu_session(original, f"the original model {original.name}")
    try:
        got = session.run(None, {**feeds, **frozen})
    except Exception as e:  # noqa: BLE001 onnxruntime raises its own, unexported types
        hint = ""
        if random:
            drawn = [f"{name} in [{ranges[name][0]}, {ranges[name][1]}) ({ranges[name][2]})" if name in ranges
                     else f"{name} in [0, 10)" for name, v in feeds.items() if v.dtype.kind in "iu"]
            hint = ("; integer inputs were drawn " + ", ".join(drawn) + ": if one needs other values, freeze it "
                    "(--freeze NAME=VALUE) or give real inputs with --inputs DIR") if drawn \
                else "; give real inputs with --inputs DIR"
        raise BadInput(f"the original model fails on these inputs: {first_line(e)}{hint}") from None
    return dict(zip([o.name for o in session.get_outputs()], got, strict=True))


def run_prepared(prepared: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    import numpy as np

    session = cpu_session(prepared, "the prepared model")
    types = {i.name: i.type for i in session.get_inputs()}
    cast = {"tensor(int32)": np.int32}
    got = session.run(None, {k: v.astype(cast.get(types[k], v.dtype)) for k, v in feeds.items()})
    return dict(zip([o.name for o in session.get_outputs()], got, strict=True))

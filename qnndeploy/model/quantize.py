"""QDQ quantization the way onnxruntime's QNN helper sets it up (16-bit activations, 8-bit weights): what compile's
w8a16 builds and `check --precision w8a16` measures, so that both see the same quantized graph."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

ACTIVATIONS, WEIGHTS = "QUInt16", "QUInt8"
SETTINGS = {"format": "QDQ", "activation_type": ACTIVATIONS, "weight_type": WEIGHTS, "calibrate_method": "MinMax"}


def qdq(model: Path, samples: list[dict[str, np.ndarray]], out: Path, exclude: Sequence[str] = ()) -> Path:
    """Write `model` quantized to QDQ at `out`, calibrated (MinMax) on `samples` ({input name: array} each); the
    nodes named in `exclude` stay in float (the HTP runs them in fp16 when the compile enables fp16)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantType
    from onnxruntime.quantization import quantize as ort_quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    # The quantizer writes helper files (<stem>-inferred.onnx) beside its input: give it a private copy.
    private = out.with_name(f"{out.stem}_src.onnx")
    shutil.copyfile(model, private)

    class Reader(CalibrationDataReader):  # type: ignore[misc]  # onnxruntime ships no types: its base class is Any
        def __init__(self) -> None:
            self.it = iter(samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    config = get_qnn_qdq_config(str(private), Reader(), activation_type=getattr(QuantType, ACTIVATIONS),
                                weight_type=getattr(QuantType, WEIGHTS), nodes_to_exclude=list(exclude) or None)
    ort_quantize(str(private), str(out), config)
    return out

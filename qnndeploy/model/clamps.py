"""Where a quantized graph's activations leave the range its calibration saw.

MinMax calibration (what the ort backend's quantizer uses) gives every activation a 16-bit scale from the smallest
and largest value the calibration samples made; on the HTP a value beyond that range is clamped to its end. A graph
calibrated on inputs unlike the app's can then pass on its own samples and fail on the app's: measured on the
0.5B benchmark, a last-layer MLP product calibrated up to 21.2 reached 808 on a real step, and the NPU lost the token.
Run on the CPU, so it needs no compile: every float tensor (inputs and node outputs) exposed, its range over the
calibration samples against its range on the step in question.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base.errors import BadInput, first_line
from qnndeploy.base.fileio import JSON
from qnndeploy.model.onnxio import inferred_values, load_model, real_inputs, tensor_info
from qnndeploy.model.samples import Sample, load_samples

if TYPE_CHECKING:
    import numpy as np
    import onnx

# A tensor reaching past its calibrated range by this factor or more is reported: at 2x the clamp at least halves
# the value. Smaller overshoots are usual where calibration has a few dozen samples (our default, no published one).
CLAMP_FACTOR = 2.0


@dataclass(frozen=True)
class Clamp:
    """One tensor beyond its calibrated range: how far, and on which side."""

    tensor: str
    value: float  # its value furthest beyond the range on this input
    calibrated: tuple[float, float]  # the range the calibration samples gave it (0 included, as the quantizer does)
    factor: float  # value over the calibrated end on its side

    def json(self) -> JSON:
        return {"tensor": self.tensor, "value": self.value, "calibrated": list(self.calibrated),
                "factor": self.factor}


def beyond_calibration(model: Path, feeds: Sample, calibration: Path, limit: float = CLAMP_FACTOR) -> list[Clamp]:
    """The float tensors of `model`, in graph order, that `feeds` drives `limit` times or more past the range the
    samples in `calibration` (a folder as compile --calib reads it) gave them."""
    import numpy as np

    proto = load_model(model)  # external weights are left where they are: onnxruntime reads them
    names = _float_tensors(proto)
    specs = [tensor_info(v) for v in real_inputs(proto.graph)]
    run = _session(proto, model.parent, names)
    del proto
    samples = load_samples(calibration, specs)
    low = dict.fromkeys(names, 0.0)
    high = dict.fromkeys(names, 0.0)
    for sample in samples:
        for name, value in zip(names, run(sample), strict=True):
            if value.size:
                low[name], high[name] = min(low[name], float(value.min())), max(high[name], float(value.max()))
    found = []
    for name, value in zip(names, run(feeds), strict=True):
        v = np.asarray(value, np.float64)
        if not v.size or not np.isfinite(v).all():
            continue
        over = float(v.max()) / high[name] if high[name] > 0 else (np.inf if v.max() > 0 else 0.0)
        under = float(v.min()) / low[name] if low[name] < 0 else (np.inf if v.min() < 0 else 0.0)
        factor, value_at = max((over, float(v.max())), (under, float(v.min())))
        if factor >= limit:
            found.append(Clamp(name, value_at, (low[name], high[name]), float(factor)))
    return found


def _float_tensors(proto: onnx.ModelProto) -> list[str]:
    """The float inputs, then every float node output, in the graph's order."""
    typed = inferred_values(proto)
    floats = {"float32", "float16", "bfloat16"}

    def is_float(name: str) -> bool:
        value = typed.get(name)
        return value is not None and tensor_info(value).dtype in floats

    inputs = [v.name for v in real_inputs(proto.graph) if is_float(v.name)]
    return list(dict.fromkeys([*inputs, *(o for n in proto.graph.node for o in n.output if o and is_float(o))]))


def _session(proto: onnx.ModelProto, folder: Path, names: Iterable[str]) -> Callable[[Sample], list[np.ndarray]]:
    """The model on onnxruntime's CPU, its outputs `names`, its external weights read from `folder` (nothing is
    written; a model of 2 GB or more cannot be one protobuf, but its graph without them can)."""
    import onnx
    import onnxruntime as ort

    wanted = list(names)
    declared = {o.name for o in proto.graph.output}
    proto.graph.output.extend(onnx.ValueInfoProto(name=n) for n in wanted if n not in declared)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # every tensor is an output
    options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    try:
        session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 onnxruntime's exception types are not exported
        raise BadInput(f"{proto.graph.name or 'a graph'} with its tensors exposed does not load in onnxruntime: "
                       f"{first_line(e)}") from None
    takes = {i.name for i in session.get_inputs()}

    def run(feeds: Sample) -> list[np.ndarray]:
        return list(session.run(wanted, {k: v for k, v in feeds.items() if k in takes}))

    return run

"""The arch-compatibility measurement behind data/arch_compat.json: a context binary compiled by onnxruntime-qnn for
one SoC of arch N, loaded and run on the host HTP emulator configured (htp_arch, soc_model) for a SoC of arch M.

`python -m tests.support.arch_compat` prints the matrix as the data file holds it; tests/qnn/test_arch_compat.py
measures it again and requires the same answers. Everything runs in this one process: a refused load is an
exception from onnxruntime, not a crash.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from qnndeploy.base import socs
from qnndeploy.qnn import htp

# one phone SoC per arch (the catalog's first with fp16 where it has any)
SOCS = {"v68": "SM8350", "v69": "SM8450", "v73": "SM8550", "v75": "SM8650", "v79": "SM8750", "v81": "SM8850",
        "v85": "SM8950"}


def _model(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])
    w = helper.make_tensor("w", TensorProto.FLOAT, [32, 32], np.random.default_rng(0).random(32 * 32) - 0.5)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def measure() -> dict[str, dict[str, bool]]:
    """compiled-for arch -> configured arch -> whether the binary loaded and matched its CPU model (atol 0.05)."""
    import onnxruntime as ort

    out: dict[str, dict[str, bool]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = _model(Path(tmp) / "g.onnx")
        x = np.random.default_rng(1).standard_normal((1, 32)).astype(np.float32)
        ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        for n, name in SOCS.items():
            soc = socs.find(name)
            ctx = Path(tmp) / f"{n}_ctx.onnx"
            with htp.quiet_native_stdout():
                ort.InferenceSession(str(model), htp.session_options(soc, fp16=soc.fp16 is not False,
                                                                     context_path=ctx))
            out[n] = {}
            for m, other in SOCS.items():
                config = socs.find(other)
                try:
                    with htp.quiet_native_stdout():
                        session = ort.InferenceSession(str(ctx), htp.session_options(config,
                                                                                     fp16=config.fp16 is not False))
                        got = session.run(None, {"x": x})[0]
                    out[n][m] = bool(np.allclose(got, ref, atol=0.05))
                except Exception:  # noqa: BLE001 onnxruntime's own error types: the context did not load
                    out[n][m] = False
    return out


if __name__ == "__main__":
    json.dump({"qairt": htp.qairt_version(), "socs": SOCS, "loads": measure()}, sys.stdout, indent=1)

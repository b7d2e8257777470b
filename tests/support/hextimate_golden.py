"""The Hextimate golden graphs, and their estimate under any QAIRT toolchain of data/runtime.json.

    python -P -m tests.support.hextimate_golden OUT    (run under a toolchain: qnndeploy.qnn.toolchain.environ)

estimates the two golden graphs for QCS9100 with the onnxruntime-qnn it imports (QNN profiling on) and prints one
JSON line: the QAIRT release and per graph the figures (cycles, lower, upper, fill bytes, spill bytes, ops without a
cost) or the reason there are none. A release whose cost model or profiling event changed shows here.
tests/qnn/test_hextimate.py runs it for every toolchain and compares with its GOLDEN table.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as h

from qnndeploy.base import child
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.qnn import hextimate, toolchain

from . import REPO, synth_models

SOC = "QCS9100"
TIMEOUT_S = 600


@dataclass(frozen=True)
class Answer:
    """What the child measured under one toolchain."""

    qairt: str  # the release the child's onnxruntime-qnn carries
    seconds: float  # the child's estimates
    graphs: dict[str, tuple[int, ...] | str]  # graph -> its golden row, or why there is none


def layers(count: int, width: int, rows: int) -> onnx.ModelProto:
    """`count` MatMul+Relu layers of width x width on [rows, width], seeded weights."""
    nodes, inits, x = [], [], "x"
    for i in range(count):
        w = np.random.default_rng(i).standard_normal((width, width)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"W{i}"))
        nodes += [h.make_node("MatMul", [x, f"W{i}"], [f"m{i}"]), h.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        x = f"r{i}"
    graph = h.make_graph(nodes, "layers", [h.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])],
                         [h.make_tensor_value_info(x, TensorProto.FLOAT, [rows, width])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def graphs() -> dict[str, onnx.ModelProto]:
    """The golden graphs, by the name GOLDEN keys them with: MatMul 16x8 + Add + Relu; four 512-wide layers."""
    return {"mlp": synth_models.static_mlp(), "layers": layers(4, 512, 64)}


def numbers(f: hextimate.Figures) -> list[int]:
    """The golden row of one estimate: cycles, lower, upper, fill bytes, spill bytes, ops without a cost."""
    return [f.cycles, f.lower, f.upper, f.fill_bytes, f.spill_bytes, f.ops_without_cost]


def measure(out: Path) -> dict[str, object]:
    """The child: each golden graph's estimate with this process's onnxruntime-qnn (a list of numbers), or in words
    why there is none (the backend's reason, or the error the estimate raised)."""
    from qnndeploy.base import socs
    from qnndeploy.qnn import htp

    start = time.monotonic()
    found: dict[str, object] = {}
    for name, model in graphs().items():
        path = out / f"{name}.onnx"
        onnx.save(model, path)
        try:
            est = hextimate.estimate(path, socs.find(SOC))
        except QnnDeployError as e:
            found[name] = f"{type(e).__name__}: {e}"
            continue
        found[name] = numbers(est.figures) if est.figures is not None else f"no estimate: {est.reason}"
    return {"qairt": htp.qairt_version(), "seconds": round(time.monotonic() - start, 2), "graphs": found}


def environ(tc: toolchain.Toolchain) -> dict[str, str]:
    """The child's environment under `tc` (toolchain.environ; the installed onnxruntime-qnn for the current one),
    with this repository on the import path for tests.support."""
    first = [] if toolchain.is_current(tc) else [str(toolchain.folder(tc))]
    return {**child.environ([*first, str(REPO)]), toolchain.ENV_ACTIVE: tc.onnxruntime_qnn}


def run(tc: toolchain.Toolchain, out: Path) -> Answer:
    """measure() in a child process under `tc` (installed: the toolchains fixture)."""
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(child.python("-m", "tests.support.hextimate_golden", str(out)), env=environ(tc),
                          capture_output=True, text=True, check=False, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{tc.name}: the golden estimate failed (exit {done.returncode}): {done.stderr[-2000:]}")
    a = json.loads(done.stdout.strip().splitlines()[-1])
    return Answer(a["qairt"], a["seconds"],
                  {name: tuple(row) if isinstance(row, list) else str(row) for name, row in a["graphs"].items()})


if __name__ == "__main__":
    print(json.dumps(measure(Path(sys.argv[1]))))

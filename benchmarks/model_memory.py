"""Peak memory of the commands that read a model's graph, against the model's size: `check --no-measure` and
`inspect`-free graph reading should follow the graph, not the weight bytes (issue 23: peak RSS <= 300 MB on a 4 GB
model). Reference in the same run: `onnx.load` of the same file, the way check read it before.

A generated model: `--mb` of fp32 weights in 4096-wide MatMuls, inside the .onnx file (up to 1.9 GB, protobuf's
limit) or, with --external, in a data file beside it. Prints the medians of --repeat runs.
Usage: python benchmarks/model_memory.py [--mb 400] [--external] [--repeat 3] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOAD = "import sys, onnx; onnx.load(sys.argv[1], load_external_data=False)"


def make_model(path: Path, mb: float, external: bool) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    width = 4096 if mb >= 64 else 1024
    count = max(1, round(mb * 1e6 / (width * width * 4)))
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(count):
        inits.append(numpy_helper.from_array(rng.standard_normal((width, width), np.float32), f"W{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [f"y{i}"], name=f"mm{i}"))
        x = f"y{i}"
    graph = helper.make_graph(nodes, "weights", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path), save_as_external_data=external, location=path.name + ".data")


def peak(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB, VmHWM polled from /proc, so the benchmark's own memory is not counted)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak_kb = 0
    while proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            peak_kb = max(peak_kb, int(status.split("VmHWM:")[1].split()[0]))
        except (OSError, IndexError):
            pass
        time.sleep(0.01)
    if proc.returncode not in (0, 10):
        sys.exit(f"FAIL: {' '.join(cmd[:3])} exited {proc.returncode}: {proc.stderr.read().decode()[-500:]}")
    return time.perf_counter() - start, peak_kb / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=400, help="weight bytes of the generated model, MB")
    ap.add_argument("--external", action="store_true", help="weights in a data file beside the model")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="a 16 MB model, one run: checks that the benchmark runs")
    args = ap.parse_args()
    mb, repeat = (16, 1) if args.smoke else (args.mb, args.repeat)
    with tempfile.TemporaryDirectory(prefix="qnndeploy-model-memory-") as tmp:
        path = Path(tmp) / "weights.onnx"
        make_model(path, mb, args.external)
        size = sum(p.stat().st_size for p in Path(tmp).iterdir()) / 1e6
        contenders = {
            "onnx.load (reference)": [sys.executable, "-c", LOAD, str(path)],
            "check --no-measure": [sys.executable, "-m", "qnndeploy", "check", str(path), "--no-measure"],
        }
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
        for _ in range(repeat):
            for name, cmd in contenders.items():
                runs[name].append(peak(cmd))
    ref = statistics.median(m for _, m in runs["onnx.load (reference)"])
    print(f"model: {size:.0f} MB ({'external data' if args.external else 'weights inside the .onnx'}), "
          f"median of {repeat} run(s)")
    print(f"{'':<24} {'seconds':>8} {'peak RSS MB':>12} {'x model size':>13} {'vs onnx.load':>13}")
    for name, rs in runs.items():
        t, m = statistics.median(x for x, _ in rs), statistics.median(x for _, x in rs)
        print(f"{name:<24} {t:>8.2f} {m:>12.0f} {m / size:>13.2f} {m / ref:>13.0%}")
    print("target (issue 23): check --no-measure peak RSS <= 300 MB on a 4 GB model")


if __name__ == "__main__":
    main()

"""Peak memory of reading a model's graph, against the model's size: `check --no-measure` parses the graph without
the data of its big initializers, so its memory should follow the graph, not the weight bytes (issue 23: peak RSS
<= 300 MB on a 4 GB model). Reference in the same run: `onnx.load` of the same file, as check read it before.
Then check's time against the graph's size: a deep, thin model (tests/synth_models.residual_stack) at N and 4N
layers, where the time per node must not grow (issue 23: time linear in the node count).

The model is generated: `--mb` of fp32 weights in MatMuls (benchlib.weights_model), inside the .onnx file (protobuf
limits that to 2 GB) or, with --external, in a data file beside it. Prints the medians of --repeat runs.

    python benchmarks/model_memory.py [--mb 400] [--external] [--repeat 3] [--smoke]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from benchlib import Target, median, parse, parser, run, table, weights_model

LOAD = "import sys, onnx; onnx.load(sys.argv[1], load_external_data=False)"


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--mb", type=float, default=400, help="fp32 weight bytes of the generated model, MB [400]")
    ap.add_argument("--external", action="store_true", help="the weights in a data file beside the model")
    args = parse(ap)
    mb = 16 if args.smoke else args.mb
    with tempfile.TemporaryDirectory(prefix="qnndeploy-model-memory-") as tmp:
        path = weights_model(Path(tmp) / "weights.onnx", int(mb * 1e6), 0)
        if args.external:
            import onnx

            onnx.save(onnx.load(str(path)), str(path), save_as_external_data=True, location="weights.onnx.data")
        size = sum(p.stat().st_size for p in Path(tmp).iterdir()) / 1e6
        contenders = {"onnx.load": [sys.executable, "-c", LOAD, str(path)],
                      "check --no-measure": [sys.executable, "-m", "qnndeploy", "check", str(path), "--no-measure"]}
        runs = {name: [run(cmd) for _ in range(args.repeat)] for name, cmd in contenders.items()}
    ref = median([m.peak_mb for m in runs["onnx.load"]])
    print(f"model: {size:.0f} MB ({'external data' if args.external else 'weights inside the .onnx'}), "
          f"median of {args.repeat} run(s)")
    rows, targets = [], []
    for name, ms in runs.items():
        peak = median([m.peak_mb for m in ms])
        rows.append([name, f"{median([m.seconds for m in ms]):.2f}", f"{peak:.0f}", f"{peak / size:.2f}",
                     "reference" if name == "onnx.load" else f"{peak / ref:.0%}"])
        targets.append([] if name == "onnx.load" else [Target("peak RSS", peak, "<=", 300, " MB")])
    table(["", "seconds", "peak RSS MB", "x model size", "vs onnx.load"], rows, targets)
    print()
    _linear(args.smoke, args.repeat)


def _linear(smoke: bool, repeat: int) -> None:
    import numpy as np
    import onnx

    from tests.support import synth_models

    layers = (50, 200) if smoke else (2000, 8000)
    per_node, rows = [], []
    with tempfile.TemporaryDirectory(prefix="qnndeploy-model-nodes-") as tmp:
        for n in layers:
            model = synth_models.residual_stack(n, 8, np.float32)
            nodes = len(model.graph.node)
            path = Path(tmp) / f"deep{n}.onnx"
            onnx.save(model, path)
            ms = [run([sys.executable, "-m", "qnndeploy", "check", str(path), "--no-measure"]) for _ in range(repeat)]
            seconds = median([m.seconds for m in ms])
            per_node.append(seconds / nodes)
            rows.append([f"check --no-measure, {nodes:,} nodes", f"{seconds:.2f}", f"{seconds / nodes * 1e6:.0f}",
                         f"{median([m.peak_mb for m in ms]):.0f}"])
    targets = [[], [Target("time per node vs the smaller graph", per_node[1] / per_node[0], "<=", 1.2)]]
    table(["", "seconds", "us per node", "peak RSS MB"], rows, targets)


if __name__ == "__main__":
    main()

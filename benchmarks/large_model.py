"""A model too big for one HTP context, from check to a verified bundle by the printed advice (issue 23): a generated
fp16 residual stack of `--gb` GB of weights in external data (float32 I/O), then `check` (which must print a
`prepare --split-size` fix), that prepare, `compile` of the parts, `validate`, `bundle build --split` and
`bundle verify` (--shallow: hashes and formats; deep: also each binary run on the host HTP emulator, whose child
process holds the binary and the CPU model); each stage's seconds and peak RSS (child processes included), with
the issue's memory target on check and the shallow verify.
The smoke run scales the context down (`check --context-gb`) so that a small model takes the same path.

    python benchmarks/large_model.py [--gb 2.4] [--width 4096] [--soc SM8750] [--context-gb GB] [--work DIR] [--smoke]
"""

from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
from pathlib import Path

from benchlib import QNNDEPLOY, Measure, Target, fail, parse, parser, run, table


def stack_model(path: Path, gb: float, width: int) -> int:
    """tests/synth_models.residual_stack at `gb` GB of fp16 weights, each written into PATH.data as it is made
    (never all in memory); returns the layer count."""
    import onnx

    from tests.support import synth_models

    layers = max(2, round(gb * 1e9 / (width * width * 2)))
    data = path.with_name(path.name + ".data")
    with data.open("wb") as f:

        def store(array: object, name: str) -> onnx.TensorProto:
            import numpy as np

            w = np.ascontiguousarray(array)
            tensor = onnx.TensorProto(name=name, data_type=onnx.TensorProto.FLOAT16, dims=list(w.shape),
                                      data_location=onnx.TensorProto.EXTERNAL)
            for key, value in (("location", data.name), ("offset", str(f.tell())), ("length", str(w.nbytes))):
                tensor.external_data.add(key=key, value=value)
            f.write(w.tobytes())
            return tensor

        model = synth_models.residual_stack(layers, width, store=store)
    onnx.save(model, str(path))
    return layers


def main() -> None:
    ap = parser(__doc__, repeat=None)
    ap.add_argument("--gb", type=float, default=2.4, help="GB of fp16 weights in the generated model [2.4]")
    ap.add_argument("--width", type=int, default=4096, help="the layers' width (a weight is width² fp16) [4096]")
    ap.add_argument("--soc", default="SM8750")
    ap.add_argument("--context-gb", type=float, help="passed to check: a smaller context splits a smaller model")
    ap.add_argument("--work", type=Path, help="keep the files here (it must be empty) [a temporary folder]")
    args = parse(ap)
    gb, width = (0.0005, 64) if args.smoke else (args.gb, args.width)
    context_gb = gb / 2.5 if args.smoke else args.context_gb  # smoke: a context that takes 3 parts
    context = ["--context-gb", f"{context_gb:.3g}"] if context_gb else []
    with tempfile.TemporaryDirectory(prefix="qnndeploy-large-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if any(work.iterdir()):
            fail(f"--work {work} is not empty")
        model = work / "stack.onnx"
        layers = stack_model(model, gb, width)
        size = sum(p.stat().st_size for p in work.iterdir())
        print(f"model: {layers} layers of {width}x{width} fp16, {size / 1e9:.2f} GB in stack.onnx + stack.onnx.data; "
              f"SoC {args.soc}")
        stages: dict[str, Measure] = {}
        stages["check"] = run([*QNNDEPLOY, "check", str(model), "--soc", args.soc, *context], cwd=work,
                              ok=(10,))
        advice = json.loads(subprocess.run([*QNNDEPLOY, "check", str(model), "--soc", args.soc, *context, "--json"],
                                           check=False, capture_output=True, text=True, cwd=work).stdout)["models"][0]
        command = shlex.split(advice["prepare_command"] or "")
        if "--split-size" not in command:
            fail(f"check printed no split: {advice['prepare_command']}")
        print(f"check's fix: {shlex.join(command)}")
        stages["prepare --split-size"] = run([*QNNDEPLOY, *command[1:]], cwd=work)
        split = work / "stack-parts" / "stack.split.json"
        record = json.loads(split.read_text())
        parts = [str(split.parent / p["path"]) for p in record["parts"]]  # the record names them beside it
        stages[f"compile {len(parts)} parts"] = run([*QNNDEPLOY, "compile", *parts, "--soc", args.soc, "-o", "build",
                                                     "--no-cache", "-j", "1"], cwd=work)
        stages["validate"] = run([*QNNDEPLOY, "validate", "build"], cwd=work)
        stages["bundle build --split"] = run([*QNNDEPLOY, "bundle", "build", "--from-build", "build", "--split",
                                              str(split), "--name", "stack",
                                              "--version", "1", "-o", "."], cwd=work)
        stages["bundle verify --shallow"] = run([*QNNDEPLOY, "bundle", "verify", "stack-1", "--shallow"], cwd=work)
        stages["bundle verify"] = run([*QNNDEPLOY, "bundle", "verify", "stack-1"], cwd=work)
        bundle = sum(p.stat().st_size for p in (work / "stack-1").rglob("*") if p.is_file())
        print(f"parts: {len(parts)}, {', '.join(f'{Path(p).stat().st_size / 1e6:.0f} MB' for p in parts)} (.onnx) "
              f"+ data; bundle {bundle / 1e9:.2f} GB")
    rows, targets = [], []
    for name, m in stages.items():
        rows.append([name, f"{m.seconds:.1f}", f"{m.peak_mb:.0f}"])
        targets.append([Target("peak RSS", m.peak_mb, "<=", 300, " MB")] if name in ("check", "bundle verify --shallow")
                       else [])
    table(["stage", "seconds", "peak RSS MB"], rows, targets)


if __name__ == "__main__":
    main()

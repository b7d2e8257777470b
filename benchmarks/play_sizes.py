"""What one phone downloads with `package play` against one APK holding every SoC's files, for the PP-OCR
det/rec/cls models (rapidocr-onnxruntime) compiled for 3 SoCs, as a user runs it: prepare, compile, bundle,
package play. Sizes are deterministic (no timing): one run is enough.

Run: python benchmarks/play_sizes.py [--socs SM8550,SM8650,SM8750] [--work DIR] [--smoke]   (needs onnxruntime-qnn
and rapidocr-onnxruntime; about a minute on 2 cores, less with a warm compile cache). Fails when a step fails or a
phone's download is not smaller than the one APK. --smoke packages one tiny MatMul model for SM8650 and SM8750.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from benchlib import QNNDEPLOY, fail, parse, parser, table

from tests.support.ppocr import STATIC_SHAPES, model_path


def qnndeploy(*args: str) -> str:
    done = subprocess.run([*QNNDEPLOY, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        fail(f"qnndeploy {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def main() -> None:
    ap = parser(__doc__, repeat=None)
    ap.add_argument("--socs", default="SM8550,SM8650,SM8750")
    ap.add_argument("--work", type=Path, help="keep the outputs here (default: a temporary folder)")
    args = parse(ap)
    work = args.work or Path(tempfile.mkdtemp(prefix="qnndeploy-play-"))
    sources, shapes = {name: model_path(name) for name in STATIC_SHAPES}, STATIC_SHAPES
    if args.smoke:
        from tests.support.bundles import tiny_model

        args.socs = "SM8650,SM8750"
        sources, shapes = {"tiny": tiny_model(work / "tiny-source.onnx", 16)}, {"tiny": [1, 16]}
    models = []
    for name, shape in shapes.items():
        out = work / f"{name}.onnx"
        qnndeploy("prepare", str(sources[name]), "-o", str(out), "--shape", f"x={','.join(map(str, shape))}",
                  "--force")
        models.append(str(out))
    socs = [f"--soc={s}" for s in args.socs.split(",")]
    qnndeploy("compile", *models, *socs, "-o", str(work / "build"))
    qnndeploy("validate", str(work / "build"))
    qnndeploy("bundle", "build", "--name", "ppocr", "--version", "1.0.0", "--from-build", str(work / "build"),
              "-o", str(work / "bundle"), "--force")
    report = json.loads(qnndeploy("package", "play", str(work / "bundle" / "ppocr-1.0.0"), "-o", str(work / "play"),
                                  "--force", "--json"))
    one = report["one_apk_deflated"]
    print(f"{'+'.join(shapes)} for {args.socs}: one APK with every SoC's files "
          f"{report['one_apk_bytes'] / 1e6:.1f} MB ({one / 1e6:.1f} MB deflated)")
    table(["group", "SoCs", "MB", "MB deflated", "of one APK"],
          [[r["group"], ",".join(r["socs"]) or "-", f"{r['bytes'] / 1e6:.1f}", f"{r['deflated'] / 1e6:.1f}",
            f"{r['deflated'] / one:.0%}"] for r in report["rows"]])
    larger = [r["group"] for r in report["rows"] if r["deflated"] >= one]
    if larger:
        fail(f"the download of group {', '.join(larger)} is not smaller than the one APK")


if __name__ == "__main__":
    main()

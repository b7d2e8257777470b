"""What one phone downloads with `package play` against one APK holding every SoC's files, for the PP-OCR
det/rec/cls models (rapidocr-onnxruntime) compiled for 3 SoCs, as a user runs it: prepare, compile, bundle,
package play. Sizes are deterministic (no timing): one run is enough.

Run: python benchmarks/play_sizes.py [--socs SM8550,SM8650,SM8750] [--work DIR]   (needs onnxruntime-qnn and
rapidocr-onnxruntime; about a minute on 2 cores, less with a warm compile cache)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from ppocr import STATIC_SHAPES, model_path


def qnndeploy(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "qnndeploy", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"qnndeploy {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socs", default="SM8550,SM8650,SM8750")
    parser.add_argument("--work", type=Path, help="keep the outputs here (default: a temporary folder)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="qnndeploy-play-"))
    models = []
    for name, shape in STATIC_SHAPES.items():
        out = work / f"{name}.onnx"
        qnndeploy("prepare", str(model_path(name)), "-o", str(out), "--shape", f"x={','.join(map(str, shape))}",
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
    print(f"PP-OCR det+rec+cls for {args.socs}: one APK with every SoC's files {report['one_apk_bytes'] / 1e6:.1f} MB "
          f"({one / 1e6:.1f} MB deflated)")
    print(f"{'group':<8} {'SoCs':<10} {'bytes':>10} {'deflated':>10} {'of one APK':>11}")
    for r in report["rows"]:
        socs_text = ",".join(r["socs"]) or "-"
        print(f"{r['group']:<8} {socs_text:<10} {r['bytes'] / 1e6:>8.1f}MB {r['deflated'] / 1e6:>8.1f}MB "
              f"{r['deflated'] / one:>11.0%}")


if __name__ == "__main__":
    main()

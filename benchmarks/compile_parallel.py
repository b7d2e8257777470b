"""Wall time of compiling the PP-OCR det, rec and cls graphs for 3 SoCs with -j 1 and -j 2, and of a cache hit.

Run: python benchmarks/compile_parallel.py   (needs onnxruntime-qnn and rapidocr-onnxruntime; about 30 s)
Prints seconds and ratios; emulator-free (compile only). Not a test: numbers depend on the machine."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from ppocr import STATIC_SHAPES, model_path

from qnndeploy.compile import compile_models
from qnndeploy.prepare import prepare_model

SOCS = ["SM8550", "SM8650", "SM8750"]


def timed(**kwargs) -> float:
    start = time.monotonic()
    summary = compile_models(**kwargs)
    assert summary.ok, [j.error for j in summary.failures]
    return time.monotonic() - start


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        models = {}
        for name in ("det", "rec", "cls"):
            models[name] = tmp / f"{name}.onnx"
            prepare_model(model_path(name), models[name], shapes={"x": STATIC_SHAPES[name]})
        common = {"models": models, "socs": SOCS}
        j1 = timed(**common, out=tmp / "j1", jobs=1, use_cache=False)
        j2 = timed(**common, out=tmp / "j2", jobs=2, use_cache=False)
        timed(**common, out=tmp / "fill", jobs=2, cache_dir=tmp / "cache")
        hit = timed(**common, out=tmp / "hit", jobs=2, cache_dir=tmp / "cache")
        print(f"3 graphs x 3 SoCs: -j 1 {j1:.1f} s, -j 2 {j2:.1f} s, cache hit {hit:.2f} s")
        print(f"-j 2 speed-up over -j 1: {j1 / j2:.2f}x; cache hit is {j1 / hit:.0f}x faster than -j 1 "
              f"({hit / j1:.1%} of its time)")


if __name__ == "__main__":
    main()

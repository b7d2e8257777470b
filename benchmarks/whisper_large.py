"""A Whisper large-v3-shaped model (1.55B parameters, random weights: tests/support/whisper.py's LARGE_V3) from torch
to a verified bundle for SM8650 and SM8750, by the printed advice: the export in sherpa-onnx's two-graph layout
(weights in external data, 2.5 and 3.6 GB of fp32), `check` of each graph against a context of `--context-gb` GB
(it prints the `prepare --split-size` that fits), that split, `compile` of every graph and part for both SoCs,
`validate --loop whisper` (the greedy decode loop over the parts on the CPU and the host HTP emulator, on a clip of
espeak-ng speech), `bundle build` and `bundle verify` (the loop run again). Per stage the seconds and the peak RSS
(the command and its child processes), also as a multiple of the fp32 model's size; per SoC each context binary's
size against its graph's fp16 weights (what the compiler stores beyond them); the loop's figures.

Random weights make random tokens: the loop's check is that the NPU gives the CPU's tokens. Emulator seconds are the
x86-64 emulation of the HTP, not phone timings. --smoke: the large-shaped test preset (same structure, small widths),
2 s of audio, an 8-step cache, a context small enough that both graphs split.

    python benchmarks/whisper_large.py [--context-gb 1] [--frames 3000] [--cache 448] [--max-tokens 16]
                                       [--precision fp16] [--work DIR] [--smoke]
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import QNNDEPLOY, REPO, Measure, fail, parse, parser, run, table

SOCS = ("SM8650", "SM8750")
NAME = "large-v3"  # the graphs' I/O prefix, sherpa-onnx's way


def export(work: Path, dims: str, frames: int, cache: int) -> Measure:
    """The random model built and exported in a child process, so that its memory is measured like every stage's."""
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); from pathlib import Path; "
            "from tests.support import whisper; "
            f"m = whisper.random_model(whisper.{dims}, seed=0); "
            f"whisper.export_onnx(m, Path({str(work / 'onnx')!r}), frames={frames}, cache={cache}, name={NAME!r}, "
            f"source='random weights, seed 0, whisper.{dims}')")
    return run([sys.executable, "-c", code])


def advice(model: Path, context_gb: float, precision: str, work: Path) -> list[str]:
    """check's fix for `model` (its `prepare` command), or [] when it fits one context."""
    done = subprocess.run([*QNNDEPLOY, "check", str(model), "--soc", ",".join(SOCS), "--context-gb", f"{context_gb:g}",
                           "--precision", precision, "--json"], check=False, capture_output=True, text=True, cwd=work)
    found = json.loads(done.stdout)["models"][0]
    return shlex.split(found["prepare_command"] or "")


def main() -> None:
    ap = parser(__doc__, repeat=None)
    ap.add_argument("--context-gb", type=float, default=1.0,
                    help="the GB of weights one context may hold, given to check (the benchmark's choice, not a "
                         "measured limit: qnndeploy's default is 2) [1]")
    ap.add_argument("--frames", type=int, default=3000, help="mel frames: 3000 = 30 s, what large-v3 takes [3000]")
    ap.add_argument("--cache", type=int, default=448, help="self-attention cache steps [448: n_text_ctx]")
    ap.add_argument("--max-tokens", type=int, default=16, help="decode steps the loop runs at most [16]")
    ap.add_argument("--precision", default="fp16", choices=["fp16"], help="compile precision [fp16]")
    ap.add_argument("--work", type=Path, help="keep the files here (it must be empty) [a temporary folder]")
    args = parse(ap)
    dims, frames, cache, steps = ("LARGE_SHAPED", 200, 8, 8) if args.smoke else (
        "LARGE_V3", args.frames, args.cache, args.max_tokens)
    context_gb = 0.0008 if args.smoke else args.context_gb  # smoke: the preset's decoder in 3 parts, encoder in 2
    with tempfile.TemporaryDirectory(prefix="qnndeploy-whisper-large-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if any(work.iterdir()):
            fail(f"--work {work} is not empty")
        stages: dict[str, Measure] = {}

        def stage(name: str, measured: Measure) -> None:
            stages[name] = measured
            print(f"done: {name}: {measured.seconds:.1f} s, peak RSS {measured.peak_mb:.0f} MB", flush=True)

        stage("export (torch, TorchScript)", export(work, dims, frames, cache))
        onnx_bytes = sum(p.stat().st_size for p in (work / "onnx").iterdir())
        print(f"model: whisper.{dims}, {frames} mel frames, {cache}-step cache; {onnx_bytes / 1e9:.2f} GB of ONNX "
              f"(fp32) in {work / 'onnx'}", flush=True)
        mels(work, frames, 128)

        graphs: list[Path] = []
        for role in ("encoder", "decoder"):
            model = work / "onnx" / f"{role}.onnx"
            stage(f"check {role}", run([*QNNDEPLOY, "check", str(model), "--soc", ",".join(SOCS), "--context-gb",
                                        f"{context_gb:g}", "--precision", args.precision], cwd=work, ok=(0, 10)))
            command = advice(model, context_gb, args.precision, work)
            if command and "--split-size" not in command:
                fail(f"check advised {shlex.join(command)} for {model.name}, not a split")
            if not command:
                graphs.append(model)
                continue
            print(f"check's fix for {role}: {shlex.join(command)}", flush=True)
            stage(f"prepare --split-size, {role}", run([*QNNDEPLOY, *command[1:]], cwd=work))
            out = Path(command[command.index("-o") + 1])
            split = json.loads((work / out.with_suffix(".split.json")).read_text())
            graphs += [work / out.parent / p["path"] for p in split["parts"]]
        stage(f"compile {len(graphs)} graphs x {len(SOCS)} SoCs", run(
            [*QNNDEPLOY, "compile", *map(str, graphs), "--soc", ",".join(SOCS), "-o", "build", "--no-cache", "-j", "1",
             "--precision", args.precision], cwd=work))
        stage("validate --loop whisper", run([*QNNDEPLOY, "validate", "build", "--inputs", "mels", "--loop",
                                              f"whisper:max_tokens={steps}", "-j", "1"], cwd=work, ok=(0, 1)))
        stage("bundle build", run([*QNNDEPLOY, "bundle", "build", "--from-build", "build", "--name", "whisper-large",
                                   "--version", "1", "-o", "."], cwd=work))
        stage("bundle verify", run([*QNNDEPLOY, "bundle", "verify", "whisper-large-1"], cwd=work))
        sizes = binary_sizes(work, graphs)
        loop = loop_figures(work, graphs)
        bundle = sum(p.stat().st_size for p in (work / "whisper-large-1").rglob("*") if p.is_file())

    table(["stage", "seconds", "peak RSS MB", "x model size"],
          [[name, f"{m.seconds:.1f}", f"{m.peak_mb:.0f}", f"{m.peak_mb * 1e6 / onnx_bytes:.2f}"]
           for name, m in stages.items()])
    print()
    table(["graph", "SoC", "binary MB", "fp16 weights MB", "x fp16 weights"], sizes)
    print()
    table(["figure", "value"], [*loop, ["bundle GB", f"{bundle / 1e9:.2f}"]])


def mels(work: Path, frames: int, n_mels: int) -> None:
    """One clip of espeak-ng speech as the encoder's input sample (mels/00000.npz)."""
    sys.path.insert(0, str(REPO))
    from qnndeploy.model.samples import write_samples
    from tests.support import speech, whisper

    (clip,) = speech.espeak_clips(work / "clips", speech.SENTENCES[1:2])
    (work / "mels").mkdir()
    write_samples(work / "mels", [{f"{NAME}-mel": whisper.log_mel(speech.read_wav(clip.path)[0], frames=frames,
                                                                  n_mels=n_mels)}])


def binary_sizes(work: Path, graphs: list[Path]) -> list[list[str]]:
    """Per graph and SoC its context binary's size, its fp16 weights (half the fp32 ONNX's) and the ratio."""
    import onnx

    from qnndeploy.model.onnxio import all_tensors, tensor_nbytes

    rows = []
    for graph in graphs:
        model = onnx.load(str(graph), load_external_data=False)
        fp16 = sum(tensor_nbytes(t) or 0 for t in all_tensors(model.graph)) / 2
        for soc in SOCS:
            (binary,) = (work / "build" / graph.stem / soc).glob("*.bin")
            size = binary.stat().st_size
            rows.append([graph.stem, soc, f"{size / 1e6:.1f}", f"{fp16 / 1e6:.1f}", f"{size / fp16:.2f}"])
    return rows


def loop_figures(work: Path, graphs: list[Path]) -> list[list[str]]:
    """What validate's loop says per SoC: tokens the same, decode steps, emulator seconds per decoder step."""
    rows = []
    for soc in SOCS:
        records = {g.stem: json.loads((work / "build" / g.stem / soc / "validation.json").read_text()) for g in graphs}
        check = next(iter(records.values())).get("loop") or fail(f"no decode loop in the {soc} records")
        if "error" in check:
            fail(f"the decode loop on {soc}: {check['error']}")
        step = sum(r["emulator"]["seconds_per_run"] for g, r in records.items()
                   if r["inputs"].get("graph") == "decoder")
        rows += [[f"{soc}: samples token for token the same", f"{check['same_tokens']} of {len(check['samples'])}"],
                 [f"{soc}: emulator decoder steps", str(check["emulator_steps"])],
                 [f"{soc}: emulator s per decoder step", f"{step:.2f}"]]
    return rows


if __name__ == "__main__":
    main()

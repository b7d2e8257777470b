"""A Whisper large-v3-shaped model (1.55B parameters, random weights: tests/support/whisper.py's LARGE_V3) from torch
to a verified bundle for SM8650 and SM8750, by the printed advice: the export in sherpa-onnx's two-graph layout
(weights in external data, 3.0 and 3.2 GB of fp32), `check --precision P` of each graph against a context of
`--context-gb` GB and each `prepare` it prints (at w8a16: --fuse, as the HTP has no 8-bit erf GELU, then the
`--split-size` that fits), `compile` of every graph and part for both SoCs (w8a16: calibrated by `--loop` on what
the decode loop feeds each graph from the clip), `validate --loop whisper` (the greedy decode loop over the parts on
the CPU and the host HTP emulator, on a clip of espeak-ng speech), `bundle build` and `bundle verify` (the loop run
again); --from STAGE starts at a stage, on --work's files. Per stage the seconds and the peak RSS (the command and
its child processes), also as a multiple of the fp32 model's size; per SoC each context binary's size against its
graph's fp16 weights; the loop's figures.

Random weights make random tokens: the loop's check is that the NPU gives the CPU's tokens. Emulator seconds are the
x86-64 emulation of the HTP, not phone timings. --smoke: the large-shaped test preset (same structure, small widths),
2 s of audio, an 8-step cache, a context small enough that both graphs split.

    python benchmarks/whisper_large.py [--context-gb 0.5] [--frames 3000] [--cache 448] [--max-tokens 16]
                                       [--precision w8a16] [--work DIR]
                                       [--from export|prepare|compile|validate|bundle] [--smoke]
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchlib import QNNDEPLOY, REPO, Measure, fail, parse, parser, run, table

from qnndeploy.base.names import graph_name

SOCS = ("SM8650", "SM8750")
NAME = "large-v3"  # the graphs' I/O prefix, sherpa-onnx's way
STAGES = ("export", "prepare", "compile", "validate", "bundle")


def export(work: Path, dims: str, frames: int, cache: int) -> Measure:
    """The random model built and exported in a child process, so that its memory is measured like every stage's."""
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); from pathlib import Path; "
            "from tests.support import whisper; "
            f"m = whisper.random_model(whisper.{dims}, seed=0); "
            f"whisper.export_onnx(m, Path({str(work / 'onnx')!r}), frames={frames}, cache={cache}, name={NAME!r}, "
            f"source='random weights, seed 0, whisper.{dims}')")
    return run([sys.executable, "-c", code])


def follow_advice(model: Path, role: str, context_gb: float, precision: str, stage: Callable[[str, Measure], None]
                  ) -> list[Path]:
    """check, and each `prepare` it prints, until the model is ready or split: the graphs to compile."""
    work = model.parent.parent
    for _ in range(3):  # at most a fusion or rewrite, then a split
        stage(f"check {model.name}", run([*QNNDEPLOY, "check", str(model), "--soc", ",".join(SOCS), "--context-gb",
                                          f"{context_gb:g}", "--precision", precision], cwd=work, ok=(0, 10)))
        command = advice(model, context_gb, precision, work)
        if not command:
            return [model]
        print(f"check's fix for {role}: {shlex.join(command)}", flush=True)
        stage(f"prepare {' '.join(a for a in command if a.startswith('--'))}, {role}",
              run([*QNNDEPLOY, *command[1:]], cwd=work))
        out = work / command[command.index("-o") + 1]
        if "--split-size" in command:
            split = json.loads(out.with_suffix(".split.json").read_text())
            return [out.parent / p["path"] for p in split["parts"]]
        model = out
    return fail(f"check still advises {shlex.join(command)} for {model.name}")


def advice(model: Path, context_gb: float, precision: str, work: Path) -> list[str]:
    """check's fix for `model` (its `prepare` command), or [] when it fits one context."""
    done = subprocess.run([*QNNDEPLOY, "check", str(model), "--soc", ",".join(SOCS), "--context-gb", f"{context_gb:g}",
                           "--precision", precision, "--json"], check=False, capture_output=True, text=True, cwd=work)
    found = json.loads(done.stdout)["models"][0]
    return shlex.split(found["prepare_command"] or "")


def main() -> None:
    ap = parser(__doc__, repeat=None)
    ap.add_argument("--context-gb", type=float, default=0.5,
                    help="the GB of weights one context may hold, given to check (the benchmark's choice, not a "
                         "measured limit: qnndeploy's default is 2): 0.5 cuts both graphs into parts the w8a16 "
                         "quantizer holds in 24 GB (the whole encoder does not fit) [0.5]")
    ap.add_argument("--frames", type=int, default=3000, help="mel frames: 3000 = 30 s, what large-v3 takes [3000]")
    ap.add_argument("--cache", type=int, default=448, help="self-attention cache steps [448: n_text_ctx]")
    ap.add_argument("--max-tokens", type=int, default=16, help="decode steps the loop runs at most [16]")
    ap.add_argument("--precision", default="w8a16", choices=["fp16", "w8a16"],
                    help="compile precision; w8a16 is calibrated by `compile --loop` on what the decode loop feeds "
                         "each graph from the clip [w8a16]")
    ap.add_argument("--work", type=Path, help="keep the files here (empty, unless --from) [a temporary folder]")
    ap.add_argument("--from", dest="start", choices=STAGES, default="export",
                    help="start at this stage, on the files of an earlier run in --work [export]")
    args = parse(ap)
    dims, frames, cache, steps = ("LARGE_SHAPED", 200, 8, 8) if args.smoke else (
        "LARGE_V3", args.frames, args.cache, args.max_tokens)
    context_gb = 0.0005 if args.smoke else args.context_gb  # smoke, w8a16: both split, as at full size
    if args.start != "export" and args.work is None:
        fail("--from needs --work, the folder of an earlier run")
    with tempfile.TemporaryDirectory(prefix="qnndeploy-whisper-large-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.start == "export" and any(work.iterdir()):
            fail(f"--work {work} is not empty")
        stages: dict[str, Measure] = {}

        def stage(name: str, measured: Measure) -> None:
            stages[name] = measured
            print(f"done: {name}: {measured.seconds:.1f} s, peak RSS {measured.peak_mb:.0f} MB", flush=True)

        def due(name: str) -> bool:
            return STAGES.index(name) >= STAGES.index(args.start)

        if due("export"):
            stage("export (torch, TorchScript)", export(work, dims, frames, cache))
            mels(work, frames, 128)
        onnx_bytes = sum((work / "onnx" / f"{role}{suffix}").stat().st_size for role in ("encoder", "decoder")
                         for suffix in (".onnx", ".onnx.data") if (work / "onnx" / f"{role}{suffix}").is_file())
        print(f"model: whisper.{dims}, {frames} mel frames, {cache}-step cache; {onnx_bytes / 1e9:.2f} GB of ONNX "
              f"(fp32) in {work / 'onnx'}", flush=True)

        if due("prepare"):
            made = [g for role in ("encoder", "decoder")
                    for g in follow_advice(work / "onnx" / f"{role}.onnx", role, context_gb, args.precision, stage)]
            (work / "graphs.txt").write_text("".join(f"{g}\n" for g in made))
        graphs = [Path(line) for line in (work / "graphs.txt").read_text().splitlines()]
        calibration = ("--calib", "mels", "--loop", f"whisper:max_tokens={steps}") if args.precision != "fp16" else ()
        if due("compile"):
            stage(f"compile {len(graphs)} graphs x {len(SOCS)} SoCs", run(
                [*QNNDEPLOY, "compile", *map(str, graphs), "--soc", ",".join(SOCS), "-o", "build", "--no-cache",
                 "-j", "1", "--precision", args.precision, *calibration], cwd=work))
        if due("validate"):
            stage("validate --loop whisper", run([*QNNDEPLOY, "validate", "build", "--inputs", "mels", "--loop",
                                                  f"whisper:max_tokens={steps}", "-j", "1"], cwd=work, ok=(0, 1)))
        if due("bundle"):
            stage("bundle build", run([*QNNDEPLOY, "bundle", "build", "--from-build", "build", "--name",
                                       "whisper-large", "--version", "1", "-o", "."], cwd=work))
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
            (binary,) = (work / "build" / graph_name(graph.name) / soc).glob("*.bin")
            size = binary.stat().st_size
            rows.append([graph_name(graph.name), soc, f"{size / 1e6:.1f}", f"{fp16 / 1e6:.1f}", f"{size / fp16:.2f}"])
    return rows


def loop_figures(work: Path, graphs: list[Path]) -> list[list[str]]:
    """What validate's loop says per SoC: tokens the same, decode steps, emulator seconds per decoder step."""
    rows = []
    for soc in SOCS:
        records = {g: json.loads((work / "build" / g / soc / "validation.json").read_text())
                   for g in map(graph_name, (g.name for g in graphs))}
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

"""`qnndeploy validate`: each context binary on the host HTP emulator against the CPU."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from qnndeploy.api import (
    VALIDATE_TWIN_NOTE,
    TargetStatus,
    TargetValidation,
    ValidateOptions,
    ValidationSummary,
    emulated_qairts,
    validate_build,
)
from qnndeploy.base.kinds import Precision
from qnndeploy.cli._common import (
    command_line,
    gathered,
    handles_errors,
    job_progress,
    json_option,
    next_step,
    num,
    render_output,
    report,
    sample_options,
    shown,
    soc_option,
)
from qnndeploy.cli._toolchain import under_toolchain
from qnndeploy.formats import chain
from qnndeploy.formats.records import read_build
from qnndeploy.qnn import toolchain

LABELS = {TargetStatus.PASSED: "PASS", TargetStatus.FAILED: "FAIL", TargetStatus.SKIPPED: "skip",
          TargetStatus.ERROR: "ERROR"}


def _render_validation(summary: ValidationSummary) -> None:
    i = summary.inputs
    source = i["folder"] if i["kind"] == "files" else f"{i['samples']} random sample(s), seed {i['seed']}"
    click.echo(f"inputs: {source}" + (f" (preprocess {i['preprocess']})" if i.get("preprocess") else ""))
    for t in summary.targets:
        label = LABELS[t.status]
        if t.status in (TargetStatus.SKIPPED, TargetStatus.ERROR):
            click.echo(f"  {label:<5} {t.graph:<14} {t.soc:<9} {t.reason}")
            continue
        twin = f" (its twin: {t.shared} shares weights)" if t.shared else ""
        click.echo(f"  {label:<5} {t.graph:<14} {t.soc:<9} {t.samples} sample(s), "
                   f"emulator {t.emulator_s_per_run:.2f} s/run{twin}")
        made = t.inputs or {}
        if made.get("kind") == chain.CHAIN:
            after = ", ".join(made.get("after") or [])
            click.echo("        inputs: " + (f"what the split's {after} made of the model's samples" if after else
                                             "the model's own samples (the split's first part)")
                       + f" ({shown(Path(made['split']))})")
        for m in t.outputs:
            render_output(m)
        task = t.task or {}
        if "passed" in task:  # a task verdict: it decides for its output
            click.echo(f"        {'ok ' if task['passed'] else 'BAD'} {task['kind']} ({task['output']}): "
                       f"{task['summary']}")
            click.echo(f"            decides the verdict for {task['output']} ({task['why']}); its tensor metrics "
                       "above are evidence")
        if t.loop is not None and _last_of_loop(summary, t):
            _render_loop(t.loop)
        if t.chain is not None:
            same = [m.name for m in t.chain.outputs] == [m.name for m in t.outputs] and not t.chain.emulator_runs
            click.echo(f"        the split as the app runs it on {t.soc} (CPU parts on the CPU, NPU parts on the "
                       f"emulator) {'passes' if t.chain.passed else 'FAILS'} against the source model"
                       + (f": {t.chain.error}" if t.chain.error else " (the outputs above)" if same else ""))
            for m in [] if same else t.chain.outputs:
                render_output(m)
    estimates = [(t, t.estimate) for t in summary.targets if t.estimate is not None]
    for t, e in estimates:
        said = (f"{num(e.ms, '.3f')} ms ({num(e.ms_lower, '.3f')}-{num(e.ms_upper, '.3f')}), "
                + (f"factor {num(e.factor, '.3f')} ({e.fit})" if e.factor is not None else e.fit or "")
                if e.ms is not None else f"no number: {e.reason}")
        click.echo(f"  estimate {t.graph:<14} {t.soc:<9} {said}")
    if estimates:
        click.echo(f"        cost model: QAIRT {estimates[0][1].cost_model.qairt}; records: {shown(summary.build)}"
                   "/<graph>/<SoC>/estimate.json")
        click.echo(f"note: {summary.not_claimed}")
    counts = {s: sum(t.status == s for t in summary.targets) for s in TargetStatus}
    click.echo(", ".join(f"{n} {s}" for s, n in counts.items() if n) + f"; records: {shown(summary.build)}"
               "/<graph>/<SoC>/validation.json")
    click.echo(f"note: {summary.emulator_note}")
    if any(t.shared for t in summary.targets):
        click.echo(f"note: {VALIDATE_TWIN_NOTE}")
    for name in summary.guessed:
        click.echo(f"note: integer input {name}: random values 0 to 9 were a guess, the graph bounds it nowhere: give "
                   f"the values it takes with --range {name}=LO:HI")
    if not summary.ok and summary.guessed:
        next_step(command_line("qnndeploy", "validate", summary.build,
                               *(w for n in summary.guessed for w in ("--range", f"{n}=LO:HI"))))
    elif not summary.ok and any(t.status == TargetStatus.FAILED for t in summary.targets):
        bad = next(t for t in summary.targets if t.status == TargetStatus.FAILED)
        mend = (bad.loop or {}).get("next")  # a generation loop's: prepare calibrated on the app's tokens
        if mend:
            next_step(command_line(*mend))
        elif bad.precision == Precision.FP16:  # what diagnose takes; a shared context's member by --graph
            next_step(command_line("qnndeploy", "diagnose", summary.build / (bad.shared or bad.graph) / bad.soc,
                                   *(("--graph", bad.graph) if bad.shared else ())))
    if summary.ok:
        next_step(command_line("qnndeploy", "bundle", "build", "--from-build", summary.build,
                               *(("--split", summary.splits[0]) if len(summary.splits) == 1 else ()), "--name",
                               _bundle_name(summary), "--version", "VERSION"))


def _bundle_name(summary: ValidationSummary) -> str:
    """The bundle's name where the build says it (its one graph, or the model a split cut), else NAME to fill in."""
    graphs = {r.graph for r in read_build(summary.build)}
    named = (summary.splits[0].name.removesuffix(".split.json") if len(summary.splits) == 1 else
             graphs.pop() if len(graphs) == 1 else "")
    return named if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", named) else "NAME"


def _last_of_loop(summary: ValidationSummary, t: TargetValidation) -> bool:
    """The loop is shown once per SoC, under the last of its graphs."""
    return t is [x for x in summary.targets if x.soc == t.soc and x.loop is not None][-1]


def _render_loop(check: dict[str, object]) -> None:
    if "error" in check:
        click.echo(f"        BAD decode loop on {check['soc']}: {check['error']}")
        return
    if check.get("kind") == "generation":
        _render_generation(check)
        return
    rate, same, runs = check["error_rate"], check["same_tokens"], check["samples"]
    assert isinstance(runs, list) and isinstance(rate, float)
    described = check.get("described")
    graphs = sum(len(described.get(f"{role}_parts") or [role]) for role in ("encoder", "decoder")) \
        if isinstance(described, dict) else 2
    decides = "both graphs" if graphs == 2 else f"its {graphs} graphs"
    click.echo(f"        {'ok ' if check['passed'] else 'BAD'} decode loop on {check['soc']} (decides {decides}): "
               f"word error rate {rate:.2%} against the CPU's texts, {same} of {len(runs)} sample(s) token for token "
               f"the same, {check['emulator_steps']} emulator decoder step(s)")
    for r in runs:
        parts = ("" if r["parts_at"] is None else f" (parts at token {r['parts_at']}, CPU margin "
                 f"{num(r['cpu_margin_there'], '.3f')})")
        click.echo(f"          {r['sample']}: CPU {r['cpu']!r}")
        click.echo(f"          {' ' * len(str(r['sample']))}  NPU {r['npu']!r}{parts}")
    truth = check.get("against_texts")
    if isinstance(truth, dict):
        click.echo(f"          against the given texts: CPU {truth['cpu']:.2%}, NPU {truth['npu']:.2%} word error rate")


def _render_generation(check: dict[str, Any]) -> None:
    parted = check["parts_at"]
    click.echo(f"        {'ok ' if check['passed'] else 'BAD'} generation loop on {check['soc']} (decides every part): "
               f"{check['agreement']:.1%} of {check['steps']} greedy steps choose the CPU's token from the CPU's "
               f"history (at least {check['min_agreement']:.0%}), after a {check['prompt']}-token prompt")
    margin = num(check["cpu_margin_there"], ".3f")
    click.echo("          " + ("the tokens never part" if parted is None else
                               f"the tokens part at step {parted} (CPU margin {margin})"))
    first = check["first_layer"]
    worst = min(check["layers"], key=lambda d: min(d["key_cosine"], d["value_cosine"]), default=None)
    where = f"layer {first} is the first beyond cosine {check['min_cosine']:g}" if first is not None \
        else f"every layer within cosine {check['min_cosine']:g}"
    if worst is not None:
        click.echo(f"          at step {check['compared_at']}, each part fed the CPU's cache: {where}; the lowest, "
                   f"layer {worst['layer']}: key {worst['key_cosine']:.5f}, value {worst['value_cosine']:.5f}")
    logits = check.get("logits")
    if logits:
        apart = first is None and parted is not None and logits["cpu_top"] != logits["npu_top"]
        after = (" (the caches agree: they part after the last layer's cache, in its MLP, the final norm or the "
                 "lm_head)") if apart else ""
        click.echo(f"          the logits from the same inputs: cosine {logits['cosine']:.5f}, top token CPU "
                   f"{logits['cpu_top']}, NPU {logits['npu_top']}{after}")
    clamped = check.get("clamped")
    if clamped is not None:
        for line in _clamp_lines(clamped):
            click.echo(f"          {line}")
    text = check.get("text")
    if text:
        click.echo(f"          the CPU wrote {_clip(text['cpu'])!r}")
        click.echo(f"          the NPU chose {_clip(text['npu'])!r} (each token from the CPU's history)")
    likely = check.get("likelihood")
    if likely:
        click.echo(f"          on the {likely['tokens']} given tokens: perplexity CPU "
                   f"{likely['cpu']['perplexity']:.3f}, NPU {likely['npu']['perplexity']:.3f}")


def _clamp_lines(clamped: list[dict[str, Any]]) -> list[str]:
    """What the clamp check found where the tokens part (validate/generation.py)."""
    if not clamped:
        return ["no tensor there beyond its calibrated range: calibration does not explain it"]

    def one(c: dict[str, Any]) -> str:
        low, high = c["calibrated"]
        return (f"{c['tensor']} (part {c['part']}) reaches {c['value']:.3g}, {c['factor']:.3g}x its calibrated "
                f"range {low:.3g}..{high:.3g}")

    worst = max(clamped, key=lambda c: c["factor"])
    return [(f"{len(clamped)} tensor(s) there beyond the range their calibration samples gave them, which the HTP "
             "clamps (calibrate on the app's own tokens: prepare --generate --calib-tokens FILE)"),
            f"  the first: {one(clamped[0])}", *([] if worst is clamped[0] else [f"  the furthest: {one(worst)}"])]


def _clip(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _task_specs(specs: tuple[str, ...]) -> dict[str | None, str]:
    """--task [GRAPH=]KIND[:...]: a GRAPH= before the kind names one graph (KIND's own options come after ':')."""
    found: dict[str | None, str] = {}
    for spec in specs:
        head = spec.split(":", 1)[0]
        graph, eq, _ = head.partition("=")
        key, text = (graph, spec[len(graph) + 1:]) if eq else (None, spec)
        if key in found:
            raise click.UsageError(f"--task gives {'every graph' if key is None else key} twice")
        found[key] = text
    return found


@dataclass(frozen=True, kw_only=True)
class ValidateArgs:
    """What `qnndeploy validate` is asked: its options as click parsed them, a field each."""

    build: Path
    inputs: Path | None
    preprocess: str | None
    random_: int | None
    seed: int
    ranges: dict[str, tuple[int, int]]
    min_cosine: float | None
    min_snr_db: float | None
    atol: float | None
    min_topk_jaccard: float | None
    task_specs: tuple[str, ...]
    loop_spec: str | None
    min_top1: float | None
    max_error_rate: float | None
    reason: str | None
    graphs: tuple[str, ...]
    socs: tuple[str, ...]
    jobs: int | None
    estimate: bool


@click.command()
@click.argument("build", type=click.Path(path_type=Path))
@sample_options()
@click.option("--min-cosine", type=float, help="Override the cosine similarity threshold (fp16 0.999, w8a16 0.99, "
              "w4a16 0.95).")
@click.option("--min-snr-db", type=float, help="Override the SNR threshold in dB (fp16 30, w8a16 20, w4a16 10).")
@click.option("--atol", type=float, help="Override the near-zero level (fp16 1e-3, w8a16 1e-2, w4a16 5e-2): an "
              "output whose CPU reference has an RMS below it is judged on max abs diff <= atol instead of cosine "
              "and SNR.")
@click.option("--min-topk-jaccard", type=float, help="Top-k indices outputs: the lowest Jaccard index of the CPU "
              "and HTP sets allowed per row [default: 1, the same set; order never counts].")
@click.option("--task", "task_specs", multiple=True, metavar="[GRAPH=]KIND[:KEY=VALUE,...]",
              help="What the app reads of a graph, judged instead of its tensors: classify (the label: top-1), embed "
                   "(each sample's cosine), ocr / asr (CTC text: character / word error rate; tokens=FILE unless the "
                   "model names its vocabulary), tensor (every output by its metrics); output=NAME picks the output. "
                   "GRAPH= for one graph of the build; repeatable [default: what the graph makes plain (a one-row "
                   "Softmax: classify; PaddleOCR's vocabulary: ocr), else tensor].")
@click.option("--loop", "loop_spec", metavar="whisper[:KEY=VALUE,...]|FILE.json",
              help="An encoder-decoder validated as the app runs it: its greedy decode loop on the CPU and on the "
                   "emulator, sample by sample (the encoder's samples: --inputs), texts and word error rate deciding "
                   "both graphs (or every part, where prepare --split-size cut one). whisper: sherpa-onnx's Whisper "
                   "export (tokenizer=FILE: its tokenizer.json or tokens.txt; texts=FILE: the true texts; "
                   "max_tokens=N); or a loop description FILE.json.")
@click.option("--min-top1", type=float, help="classify: the lowest share of rows whose label is the same, fp16 ties "
              "excepted [default: 1].")
@click.option("--max-error-rate", type=float, help="ocr, asr: the highest character or word error rate of the NPU's "
              "text against the CPU's [default: 0, the same text].")
@click.option("--reason", metavar="TEXT", help="Why a threshold looser than the default is right here: required "
              "with one, recorded in the validation records and the bundle.")
@click.option("--graph", "graphs", multiple=True, metavar="GRAPH",
              help="Validate only this graph's jobs; repeat for several [default: every graph of the build].")
@soc_option("Validate only the jobs for these SoCs [default: every SoC of the build].")
@click.option("--estimate", "estimate", is_flag=True,
              help="Also estimate each validated graph x SoC's time with the HTP's host-side cost model, as "
                   "qnndeploy estimate does, and write it as BUILD/<graph>/<SoC>/estimate.json (estimated, not "
                   "measured).")
@click.option("-j", "--jobs", type=int, metavar="N",
              help="Jobs at once, results in the build's order [default: half the CPU cores, at least 1].")
@json_option
@handles_errors
@gathered(ValidateArgs)
def validate(args: ValidateArgs, as_json: bool) -> None:
    """Compare each context binary on the HTP emulator with the CPU.

    Runs each compiled context on the host HTP emulator and the source ONNX on onnxruntime CPU with the same
    inputs. Reports max abs diff, rel L2, cosine, SNR and (for class outputs) argmax agreement per output; TopK
    outputs are judged as sets (order does not count). Judges them against per-precision thresholds and writes
    BUILD/<graph>/<SoC>/validation.json. Exit 1 when a target fails or cannot run, or when nothing could be
    validated. Emulator timings are not phone timings.
    """
    tc = toolchain.needed(emulated_qairts(args.build))
    if tc is not None:  # compiled with compile --qairt: the emulator of that QAIRT runs them
        under_toolchain(tc)
    overrides = {k: v for k, v in (("min_cosine", args.min_cosine), ("min_snr_db", args.min_snr_db),
                                   ("atol", args.atol), ("min_topk_jaccard", args.min_topk_jaccard),
                                   ("min_top1", args.min_top1), ("max_error_rate", args.max_error_rate))
                 if v is not None}
    with job_progress("validating on the HTP emulator") as progress:
        options = ValidateOptions(inputs=args.inputs, random=args.random_, seed=args.seed, preprocess=args.preprocess,
                                  thresholds=overrides, reason=args.reason, graphs=list(args.graphs),
                                  soc_names=list(args.socs), jobs=args.jobs, ranges=args.ranges,
                                  tasks=_task_specs(args.task_specs), loop=args.loop_spec, estimate=args.estimate)
        summary = validate_build(args.build, options, progress)
    report(summary, as_json, _render_validation)

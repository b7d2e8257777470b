"""`qnndeploy prepare`: make a model NPU-ready and prove it equivalent on CPU."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from qnndeploy.api import (
    GenerateOptions,
    PrepareOptions,
    PrepareResult,
    SplitResult,
    parse_assignment,
    parse_shape,
    prepare_generation,
    prepare_model,
    split_by_size,
    split_model,
)
from qnndeploy.base.errors import BadInput
from qnndeploy.base.kinds import Precision, Side, choices
from qnndeploy.cli._common import (
    Renamed,
    assignments,
    command_line,
    emit_json,
    gathered,
    handles_errors,
    json_option,
    next_step,
    size_text,
)
from qnndeploy.model import rewrite as rewriting
from qnndeploy.qnn import refusals


def _render_prepare(result: PrepareResult, for_w8a16: bool = False) -> None:
    """`for_w8a16`: the rewrites asked for are those of refusals measured at w8a16 only (--fuse, --rewrite
    where-mask: data/htp_refusals.json), so the check to run next is the w8a16 one: a plain check would lead to an
    fp16 build."""
    extra = f" + {Path(result.external_data).name}" if result.external_data else ""
    click.echo(f"wrote {result.output}{extra} and {result.record}")
    for change in result.changes:
        click.echo(f"  {change}")
    if len(result.folding) > 1:
        click.echo("  folding: " + "; ".join(result.folding))
    for title, tensors in (("inputs", result.inputs), ("outputs", result.outputs)):
        click.echo(f"  {title}: " + ", ".join(f"{t.name} {t.dtype} {t.shape_text()}" for t in tensors))
    click.echo(f"  equivalence on onnxruntime CPU (inputs: {result.equivalence_inputs}; "
               f"tolerance {result.tolerance:g}):")
    for d in result.equivalence:
        click.echo(f"    {d.name:<28} max abs diff {d.max_abs_diff:.2g}  rel L2 {d.rel_l2:.2g}  "
                   f"{'ok' if d.ok else 'FAIL'}")
    for note in result.notes:
        click.echo(f"  note: {note}")
    next_step(command_line("qnndeploy", "check", Path(result.output), *(("--precision", "w8a16") if for_w8a16 else ())))


def _for_w8a16(fuse: bool, kinds: list[str]) -> bool:
    """Whether every rewrite asked for is that of a refusal measured at w8a16 (and there is one)."""
    asked: set[tuple[str, ...]] = {("--fuse",)} if fuse else set()
    asked |= {("--rewrite", kind) for kind in kinds}
    return bool(asked) and asked <= {f.rewrite for f in refusals.facts() if f.precision == Precision.W8A16}


def _render_split(result: SplitResult) -> None:
    click.echo(f"split {result.source} into {len(result.parts)} parts at {', '.join(result.cut)} -> {result.record}")
    for p in result.parts:
        click.echo(f"  {p.name} ({p.runs_on.upper()}, {p.nodes} nodes, {size_text(p.weight_bytes)} of weights): "
                   f"{p.path}")
        click.echo(f"    in: {', '.join(f'{t.name} {t.dtype} {t.shape_text()}' for t in p.inputs)}")
        click.echo(f"    out: {', '.join(f'{t.name} {t.dtype} {t.shape_text()}' for t in p.outputs)}")
    click.echo(f"  the parts chained on onnxruntime CPU against the original (inputs: {result.equivalence_inputs}; "
               f"tolerance {result.tolerance:.2g}):")
    for d in result.equivalence:
        click.echo(f"    {d.name:<28} max abs diff {d.max_abs_diff:.2g}  rel L2 {d.rel_l2:.2g}  "
                   f"{'ok' if d.ok else 'FAIL'}")
    npu = [Path(p.path) for p in result.parts if p.runs_on == "npu"]
    next_step(command_line("qnndeploy", "compile", *npu, "--soc", "SOC", "-o", "build"),
              command_line("qnndeploy", "bundle", "build", "--from-build", "build", "--split", Path(result.record))
              + " ...")


def _generate(args: PrepareArgs, as_json: bool) -> None:
    others = [o for o, given in (("--shape", args.shapes), ("--freeze", args.freeze), ("--split-at", args.split_at),
                                 ("--split-size", args.split_size), ("--int32-inputs", args.int32_inputs),
                                 ("--rewrite", args.rewrites), ("--fuse", args.fuse),
                                 ("--no-simplify", args.no_simplify), ("--inputs", args.inputs_dir)) if given]
    if others:
        raise BadInput(f"--generate sets the shapes and int32 inputs itself: leave out {', '.join(others)}")
    plan = prepare_generation(args.model, args.out, GenerateOptions(
        prompt_tokens=args.prompt_tokens, context=args.context, parts=args.parts, steps=args.steps,
        calib_tokens=args.calib_tokens, tokenizer=args.tokenizer, force=args.force,
        precision=Precision(args.precision or GenerateOptions().precision)))
    if as_json:
        emit_json(plan.to_json())
        return
    click.echo(f"wrote {len(plan.parts)} part(s) of {plan.layers} layers, prompt graphs of {plan.prompt_tokens} "
               f"tokens and decode graphs of 1 at a context of {plan.context} -> {plan.path}")
    for part in plan.parts:
        click.echo(f"  part {part.index}: layers {part.layers[0]}-{part.layers[1]}")
        for g in part.graphs:
            click.echo(f"    {g.role.value:<7}{plan.path.parent / g.file} ({size_text(g.weight_bytes)} of weights)")
    proof = plan.proof
    click.echo(f"  the parts in the app's loop on onnxruntime CPU against {Path(plan.source).name}: the same "
               f"{proof.steps} greedy tokens after a {proof.prompt}-token prompt (seed {proof.seed}), logits "
               f"within {proof.max_logit_diff:.2g}")
    click.echo(f"  calibration samples: {plan.calib_folder} ({plan.calibration})")
    graphs = list(plan.graph_files().values())
    shares = [a for name, (p, d) in plan.shares().items() for a in ("--share", f"{name}={p},{d}")]
    next_step(command_line("qnndeploy", "compile", *graphs, *shares, "--precision", plan.precision, "--calib",
                           plan.calib_folder, "--soc", "SOC", "-o", "build"))


@dataclass(frozen=True, kw_only=True)
class PrepareArgs:
    """What `qnndeploy prepare` is asked: its options as click parsed them, a field each."""

    model: Path
    out: Path
    shapes: tuple[str, ...]
    int32_inputs: bool
    freeze: tuple[str, ...]
    no_simplify: bool
    fuse: bool
    rewrites: str | None
    split_at: str | None
    split_size: float | None
    cpu_part: str
    inputs_dir: Path | None
    tolerance: float
    force: bool
    generate: bool
    prompt_tokens: int
    context: int
    parts: int
    steps: int
    calib_tokens: Path | None
    tokenizer: Path | None
    precision: str | None


@click.command()
@click.argument("model", type=click.Path(path_type=Path), metavar="MODEL.onnx")
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), metavar="OUT.onnx",
              help="The prepared model; OUT.prepare.json (and OUT.onnx.data for weights over 2 GB) beside it.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=1,3,640,640",
              help="Fix an input's dims (repeatable; 1x3x640x640 also accepted). An input whose every dynamic dim "
                   "is a symbol already fixed on another input needs none.")
@click.option("--int32-inputs", is_flag=True,
              help="Wrap int64 inputs and outputs as int32 (a Cast inside the graph, names unchanged).")
@click.option("--freeze", multiple=True, metavar="NAME=VALUE[,VALUE…]",
              help="Replace an input by a constant (e.g. sample_rate=16000) so what it drives folds away.")
@click.option("--no-simplify", is_flag=True,
              help="Skip the folding chain (onnxsim, onnxslim, onnxruntime, onnx); shapes are still fixed and "
                   "re-inferred.")
@click.option("--fuse", is_flag=True,
              help="Fuse the unfused (Erf) GELU into one Gelu node, opset 20 (what w8a16 on the HTP needs), and the "
                   "decomposed LayerNorm into one LayerNormalization over the last axis.")
@click.option("--rewrite", "rewrites", metavar="KIND[,KIND]",
              help="Rewrite ops the HTP leaves to the CPU into equal forms it runs, proven on the CPU like the rest: "
                   + "; ".join(f"{kind}: {what}" for kind, what in rewriting.KINDS.items()) + ".")
@click.option("--split-at", metavar="TENSOR[,TENSOR]",
              help="Instead: cut the model in two at these tensors into OUT-head.onnx and OUT-tail.onnx (+ "
                   "OUT.split.json), one part for the CPU, the other for the NPU.")
@click.option("--split-size", type=click.FloatRange(min=0, min_open=True), metavar="GB",
              help="Instead: cut the model into NPU graphs OUT-1.onnx, OUT-2.onnx… (+ OUT.split.json) of at most GB "
                   "of weights each (as the model stores them), for a model one HTP context cannot hold.")
@click.option("--cpu-part", "cpu_part", cls=Renamed, type=click.Choice(choices(Side)), default=Side.HEAD.value,
              show_default=True,
              help="With --split-at: the part that runs on the CPU.")
@click.option("--generate", is_flag=True,
              help="Instead: a decoder LLM with its KV cache (transformers/optimum layout) becomes a prompt graph "
                   "and a decode graph per part, OUT-p1-prompt.onnx, OUT-p1-decode.onnx… (+ OUT.generation.json and "
                   "calibration samples in OUT.calib/), proven by the app's own loop on the CPU to choose the "
                   "model's tokens.")
@click.option("--prompt-tokens", type=click.IntRange(min=2), default=GenerateOptions().prompt_tokens, show_default=True,
              metavar="N", help="With --generate: the tokens a prompt graph takes at once.")
@click.option("--context-tokens", "context", type=click.IntRange(min=3), default=GenerateOptions().context,
              show_default=True, metavar="N",
              help="With --generate: the context length, prompt and generated tokens together.")
@click.option("--parts", type=click.IntRange(min=1), default=1, show_default=True, metavar="P",
              help="With --generate: cut the layers into P parts (the embedding in the first, the lm_head in the "
                   "last), each one context binary (`qnndeploy check` says how many a SoC needs).")
@click.option("--steps", type=click.IntRange(min=1), default=GenerateOptions().steps, show_default=True, metavar="N",
              help="With --generate: greedy steps the parts must choose the source's tokens for.")
@click.option("--calib-tokens", type=click.Path(path_type=Path), metavar="FILE",
              help="With --generate: token ids, a sequence per line, that the calibration samples in OUT.calib/ are "
                   "made from [default: the model's own greedy continuation of the proof's seeded prompt].")
@click.option("--precision", type=click.Choice(choices(Precision)),
              help="With --generate: the precision the parts will be compiled at; the layers are shared out by what "
                   "the compiler stores at it, as check plans them [default: w8a16].")
@click.option("--tokenizer", type=click.Path(path_type=Path), metavar="FILE",
              help="With --generate: the model's tokenizer.json (byte-level BPE), the text of its tokens: validate "
                   "shows what each side wrote, the bundle carries it for the app.")
@click.option("--inputs", "inputs_dir", type=click.Path(path_type=Path), metavar="DIR",
              help="NAME.npy or NAME.npz per input for the equivalence run [default: one random sample, seed 0].")
@click.option("--tolerance", type=float, default=1e-4, show_default=True,
              help="Fail when an output's max abs diff and its rel L2 error both exceed this.")
@click.option("--force", is_flag=True, help="Replace an existing OUT.onnx (and its .prepare.json and .onnx.data).")
@json_option
@handles_errors
@gathered(PrepareArgs)
def prepare(args: PrepareArgs, as_json: bool) -> None:
    """Make a model NPU-ready, proven equivalent on CPU.

    Static shapes, int32 I/O, frozen settings, folded and re-inferred; then the original and the prepared
    model run on onnxruntime CPU with the same inputs, and OUT.onnx is written only when they agree.
    With --split-at, the model is cut in two instead (a part the NPU computes badly stays on the CPU);
    with --split-size, into NPU graphs small enough for one HTP context each; the parts are written
    only when, chained, they agree with it.

    \b
    Exit codes: 0 written; 1 the prepared model differs from the original beyond
    --tolerance (nothing written); 2 bad input (nothing written); 3 missing tool.
    """
    if args.generate:
        _generate(args, as_json)
        return
    if args.calib_tokens is not None or args.tokenizer is not None or args.precision is not None:
        raise BadInput("--calib-tokens, --tokenizer and --precision describe a generation: they go with --generate")
    if args.split_at is not None or args.split_size is not None:
        option = "--split-at" if args.split_at is not None else "--split-size"
        if args.split_at is not None and args.split_size is not None:
            raise BadInput("--split-at and --split-size are two ways to split: give one")
        if args.shapes or args.freeze or args.int32_inputs or args.no_simplify or args.fuse or args.rewrites:
            raise BadInput(f"{option} cuts a model that is already prepared: run prepare with the other "
                           f"options first, then prepare {option} on its output")
        if args.split_at is not None:
            parts = split_model(args.model, args.out, [t.strip() for t in args.split_at.split(",") if t.strip()],
                                cpu=Side(args.cpu_part), inputs_dir=args.inputs_dir, tolerance=args.tolerance,
                                force=args.force)
        else:
            parts = split_by_size(args.model, args.out, args.split_size or 0.0, inputs_dir=args.inputs_dir,
                                  tolerance=args.tolerance, force=args.force)
        if as_json:
            emit_json(parts)
        else:
            _render_split(parts)
        return
    result = prepare_model(args.model, args.out, PrepareOptions(
        shapes=assignments(args.shapes, "--shape", parse_shape), int32_inputs=args.int32_inputs,
        freeze=assignments(args.freeze, "--freeze", lambda v: parse_assignment(v, "--freeze")),
        simplify=not args.no_simplify,
        inputs_dir=args.inputs_dir, tolerance=args.tolerance, force=args.force, fuse=args.fuse,
        rewrite=tuple(rewriting.parse_kinds(args.rewrites)) if args.rewrites is not None else ()))
    if as_json:
        emit_json(result)
    else:
        asked = rewriting.parse_kinds(args.rewrites) if args.rewrites else []
        _render_prepare(result, for_w8a16=_for_w8a16(args.fuse, asked))

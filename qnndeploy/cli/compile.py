"""`qnndeploy compile`: context binaries per graph × SoC."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from qnndeploy.api import (
    CompileJobStatus,
    CompileOptions,
    CompileSummary,
    HtpSettings,
    compile_models,
    models_from_args,
    shares_from_args,
)
from qnndeploy.base.errors import BadInput
from qnndeploy.base.kinds import BackendName, Precision, choices
from qnndeploy.base.names import CONTEXT_BINARY
from qnndeploy.cli._common import (
    cache_dir_option,
    command_line,
    gathered,
    handles_errors,
    job_progress,
    json_option,
    next_step,
    report,
    sample_options,
    shown,
    soc_option,
)
from qnndeploy.cli._toolchain import qairt_option, under_toolchain
from qnndeploy.qnn import toolchain


def _render_compile(summary: CompileSummary) -> None:
    click.echo(f"backend {summary.backend}, QAIRT {summary.qairt_version}, {summary.precision}")
    gw = max([14, *(len(j.graph) for j in summary.jobs)])  # the graph column fits the longest name
    shown_layers: dict[tuple[str, str], str] = {}  # a graph's worst layers -> the first SoC printed with them
    for j in summary.jobs:
        if j.status == CompileJobStatus.FAILED:
            click.echo(f"  FAILED  {j.graph:<{gw}} {j.soc:<9} {j.error}")
            click.echo(f"  {'':<7} {'':<{gw}} {'':<9} log: {shown(j.log)}")
            continue
        binary = next((o for o in j.outputs if o.format == CONTEXT_BINARY and not o.twin), None)
        made = f"{shown(j.folder / binary.path)} ({binary.size / 1e6:.1f} MB)" if binary else ""
        when = j.note if j.status == CompileJobStatus.CACHED else f"{j.duration_s:.1f} s"
        click.echo(f"  {j.status:<7} {j.graph:<{gw}} {j.soc:<9} {made}  [{when}]")
        if j.shared:
            apart, one = j.shared["separate_bytes"], j.shared["shared_bytes"]
            click.echo(f"  {'':<7} {'':<{gw}} {'':<9} shared by {', '.join(j.members)}: {one / 1e6:.1f} MB against "
                       f"{apart / 1e6:.1f} MB compiled apart (saves {(apart - one) / 1e6:.1f} MB, "
                       f"{(apart - one) / apart:.0%})")
        for graph, layers in j.worst_layers.items():
            name = f"{graph}: " if j.members else ""
            if (earlier := shown_layers.setdefault((graph, str(layers)), j.soc)) != j.soc:  # the same quantization
                click.echo(f"  {'':<7} {'':<{gw}} {'':<9} {name}quantization error per layer: as for {earlier}")
                continue
            click.echo(f"  {'':<7} {'':<{gw}} {'':<9} {name}most quantization error (rel L2 of the weight, of the "
                       f"node's output on the calibration samples):")
            for q in layers:
                out = f"{q.output_rel_l2:.2g}" if q.output_rel_l2 is not None else "-"
                kind = f"int{q.bits}" + (f"/{q.block}" if q.block else "")
                click.echo(f"  {'':<7} {'':<{gw}} {'':<9}   {q.node} ({kind}): weight {q.weight_rel_l2:.2g}, "
                           f"output {out}")
    noted = [j for j in summary.jobs if j.warnings and j.status != CompileJobStatus.FAILED]
    if noted:
        click.echo("warnings (each job's full log is in the folder shown):")
        for j in noted:
            for w in j.warnings:
                click.echo(f"  {j.graph} {j.soc}: {w}")
            click.echo(f"    log: {shown(j.log)}")
    done = [j.status for j in summary.jobs]
    ok, cached, failed = (done.count(s)
                          for s in (CompileJobStatus.OK, CompileJobStatus.CACHED, CompileJobStatus.FAILED))
    click.echo(f"{ok} compiled, {cached} cached, {failed} failed in {summary.duration_s:.1f} s -> {shown(summary.out)}")
    if failed:
        click.echo("failed: " + ", ".join(f"{j.graph} {j.soc}" for j in summary.failures))
    if ok + cached:
        next_step(command_line("qnndeploy", "validate", summary.out))


@dataclass(frozen=True, kw_only=True)
class CompileArgs:
    """What `qnndeploy compile` is asked: its options as click parsed them, a field each."""

    models: tuple[str, ...]
    socs: tuple[str, ...]
    backend: str | None
    precision: str
    calib: Path | None
    preprocess: str | None
    loop_spec: str | None
    jobs: int | None
    out: Path
    qnn_sdk_root: Path | None
    shares: tuple[str, ...]
    vtcm_mb: int | None
    optimization_mode: int | None
    keep_fp16: str | None
    keep_int8: str | None
    kv_bits: str
    spill_fill: bool
    no_cache: bool
    qairt: str | None
    cache_dir: Path | None


@click.command("compile")
@click.argument("models", nargs=-1, required=True, metavar="MODEL.onnx|NAME=MODEL.onnx...")
@soc_option("Target SoC.", required=True)
@click.option("--backend", type=click.Choice(choices(BackendName)),
              help="ort: onnxruntime-qnn; qairt: the QAIRT SDK's tools; aihub: Qualcomm AI Hub's compile jobs "
                   "(qai-hub client, configured with `qai-hub configure`) [default: ort where onnxruntime-qnn is "
                   "installed or no SDK is given, else qairt].")
@click.option("--precision", type=click.Choice(choices(Precision)), default=Precision.FP16.value, show_default=True,
              help="fp16 activations; or 16-bit activations with 8-bit weights (w8a16), or with block-quantized "
                   "4-bit MatMul/Gemm weights (w4a16, ort backend); both need --calib DIR.")
@sample_options("--calib", "With --precision w8a16 or w4a16, the calibration samples:", random=False)
@click.option("--loop", "loop_spec", metavar="whisper[:KEY=VALUE,...]|FILE.json",
              help="With --calib: an encoder-decoder's graphs (or the parts prepare --split-size cut them into) "
                   "calibrated on what its greedy decode loop feeds each of them on the CPU, from the encoder's "
                   "samples in --calib; the loop as validate --loop takes it (max_tokens=N bounds the steps).")
@click.option("-j", "--jobs", type=int, metavar="N",
              help="Jobs at once [default: the number of CPU cores; aihub: all of them].")
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), metavar="DIR",
              help="Build folder.")
@click.option("--qnn-sdk-root", type=click.Path(path_type=Path), metavar="DIR",
              help="QAIRT SDK for --backend qairt [default: $QNN_SDK_ROOT].")
@click.option("--share", "shares", multiple=True, metavar="NAME=G1,G2",
              help="Compile these graphs into one context binary NAME.bin that stores shared weights once "
                   "(e.g. an LLM's prefill and decode); repeatable.")
@click.option("--vtcm-mb", type=int, metavar="MB",
              help="VTCM the graphs may use, up to the SoC's (catalog) [default: the compiler's choice: 4 MiB for "
                   "SM8550, SM8650 and SM8750 with QAIRT 2.49, measured; inspect shows it].")
@click.option("--optimization-mode", type=click.IntRange(1, 3), metavar="1-3",
              help="HTP graph finalization optimization: 3 compiles slowest and runs fastest [default: the "
                   "compiler's].")
@click.option("--keep-fp16", metavar="NODE[,NODE]",
              help="With --precision w8a16 or w4a16: leave these nodes unquantized, run in fp16 (what qnndeploy "
                   "diagnose suggests for a layer 16-bit activations cannot hold).")
@click.option("--keep-int8", metavar="NODE[,NODE]",
              help="With --precision w4a16: give these MatMul/Gemm nodes 8-bit weights (per channel) instead of "
                   "4-bit, e.g. an LLM's lm_head (compile lists the layers that lose most).")
@click.option("--kv-bits", type=click.Choice(["8", "16"]), default="16", show_default=True,
              help="With --precision w8a16 or w4a16 and the graphs of prepare --generate: 8 keeps their KV cache "
                   "in uint8 in the graphs' own inputs and outputs, a quarter of float32 for the app to hold and the "
                   "HTP to move; 16 takes float32 and quantizes it inside.")
@click.option("--spill-fill", is_flag=True,
              help="One spill-fill buffer for the graphs of a context (ort backend).")
@click.option("--no-cache", is_flag=True, help="Compile every job; neither read nor fill the cache.")
@qairt_option
@cache_dir_option
@json_option
@handles_errors
@gathered(CompileArgs)
def compile_cmd(args: CompileArgs, as_json: bool) -> None:
    """Compile each model for each SoC into a QNN context binary.

    One job per (graph, SoC), in parallel, each with its compile record and full log; with --share,
    one job per (shared context, SoC) for its graphs.

    \b
    Writes DIR/<graph>/<SoC>/<graph>.bin (+ <graph>_ctx.onnx with the ort and aihub backends) and compile.json,
    and DIR/logs/<graph>-<SoC>.log. Unchanged jobs come from the cache (`qnndeploy cache` shows it).
    A failing job does not stop the others; the exit code is 1 when any job failed. CPU fallback is
    off: a node the HTP cannot run fails the job and is named.
    """
    if args.qairt is not None:
        if args.backend == "qairt":
            raise BadInput("--qairt picks an onnxruntime-qnn wheel (ort backend, and the QAIRT AI Hub is asked "
                           "for); with --backend qairt the SDK of --qnn-sdk-root decides")
        under_toolchain(toolchain.resolve(args.qairt))
    with job_progress("compiling") as progress:
        options = CompileOptions(
            backend=BackendName(args.backend) if args.backend else None, precision=Precision(args.precision),
            calib=args.calib, preprocess=args.preprocess, loop=args.loop_spec, jobs=args.jobs,
            use_cache=not args.no_cache, cache_dir=args.cache_dir, qnn_sdk_root=args.qnn_sdk_root,
            shares=shares_from_args(list(args.shares)),
            htp=HtpSettings(vtcm_mb=args.vtcm_mb, optimization_mode=args.optimization_mode,
                            spill_fill=args.spill_fill,
                            keep_fp16=_names(args.keep_fp16), keep_int8=_names(args.keep_int8)),
            kv_bits=int(args.kv_bits))
        summary = compile_models(models_from_args(list(args.models)), list(args.socs), args.out, options, progress)
    report(summary, as_json, _render_compile)


def _names(given: str | None) -> tuple[str, ...]:
    """NODE[,NODE] as a tuple of names."""
    return tuple(n.strip() for n in (given or "").split(",") if n.strip())

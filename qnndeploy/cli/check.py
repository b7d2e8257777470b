"""`qnndeploy check`: is a model ready for the NPU, and what fixes it."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from qnndeploy.api import CheckReport, CheckVerdict, Soc, check_model, find_soc
from qnndeploy.base.errors import BadInput
from qnndeploy.base.kinds import Precision, choices
from qnndeploy.cli._common import (
    command_line,
    emit_json,
    gathered,
    handles_errors,
    json_option,
    next_step,
    size_text,
    soc_option,
)
from qnndeploy.cli._toolchain import qairt_option, under_toolchain
from qnndeploy.qnn import htp, toolchain


def _render_check(report: CheckReport) -> None:
    htp = report.htp
    click.echo(f"{report.path}: {report.verdict.upper()}")
    n = report.parameters
    count = f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n:,}"
    click.echo(f"  graph {report.graph or '(unnamed)'}, opset {report.opset}, {report.nodes} nodes, "
               f"{count} parameters ({size_text(2 * n)} at fp16, {size_text(n)} at 8-bit)")
    for title, tensors in (("inputs", report.inputs), ("outputs", report.outputs)):
        click.echo(f"  {title}:")
        for t in tensors:
            flags = [w for w, on in (("dynamic", t.dynamic), ("int64", t.dtype == "int64"),
                                     ("float64", t.dtype == "float64")) if on]
            click.echo(f"    {t.name:<28} {t.dtype:<8} {t.shape_text():<24} {' '.join(flags)}".rstrip())
    where = f"HTP {htp.soc}" + (f" (QAIRT {htp.qairt})" if htp.qairt else "")
    if not htp.measured:
        click.echo(f"  {where}: not measured: {htp.reason}")
    elif not htp.cpu_nodes:
        click.echo(f"  {where}: all {htp.total_nodes} nodes on the HTP, {htp.qnn_partitions} HTP partition(s), "
                   f"0 CPU partitions ({htp.seconds:.1f} s)")
    else:
        click.echo(f"  {where}: {len(htp.cpu_nodes)} of {htp.total_nodes} nodes on the CPU in "
                   f"{htp.cpu_partitions} CPU partition(s), {htp.qnn_partitions} HTP partition(s)")
        for node in htp.cpu_nodes[:20]:
            click.echo(f"    cpu: {node.name or '(unnamed)'} ({node.op_type})")
        if len(htp.cpu_nodes) > 20:
            click.echo(f"    … and {len(htp.cpu_nodes) - 20} more (--json lists all)")
    load = report.load
    if load and (load.decoder_layers or any(s.parts != 1 for s in load.stored)):
        b = load.budget
        click.echo(f"  load on {load.soc}: one part holds {size_text(b.bytes)} ({b.arch}, {b.status}: {b.label}); "
                   "stored " + ", ".join(f"{s.precision} {size_text(s.bytes)}: " + (f"{s.parts} part(s)" if s.parts
                                                                                   else "no split fits")
                                         for s in load.stored))
    if report.findings:
        click.echo("  findings:")
    for f in report.findings:
        click.echo(f"    [{f.severity}] {f.message}")
        click.echo(f"      fix: {f.fix}")
    if report.prepare_command:
        click.echo(f"  fix all: {report.prepare_command}")
        if report.placeholders:
            click.echo(f"           (replace {', '.join(report.placeholders)} with the sizes and values your app uses)")
    click.echo(f"  verdict: {report.verdict} (exit {report.exit_code})")


@dataclass(frozen=True, kw_only=True)
class CheckArgs:
    """What `qnndeploy check` is asked: its options as click parsed them, a field each."""

    models: tuple[Path, ...]
    socs: tuple[str, ...]
    precision: str
    calib: Path | None
    no_measure: bool
    timeout: float
    context_gb: float | None
    qairt: str | None


@click.command()
@click.argument("models", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="MODEL.onnx...")
@soc_option("SoC to check for, each in turn [default: SM8750]: its HTP measures op support, and a build the "
            "catalog says it cannot run (e.g. fp16 on SM8350) is a blocker.")
@click.option("--precision", type=click.Choice(choices(Precision)), default=Precision.FP16.value, show_default=True,
              help="Measure op support for this build: w8a16 and w4a16 measure the QDQ-quantized graph compile "
                   "would make.")
@click.option("--calib", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="DIR",
              help="With --precision w8a16 or w4a16: the calibration samples compile will take (as compile "
                   "--calib), carried into the printed next commands [default: DIR, a placeholder there].")
@click.option("--no-measure", is_flag=True, help="Skip the HTP partitioning (reads the graph only).")
@click.option("--timeout", type=click.FloatRange(min=0), default=htp.DEFAULT_TIMEOUT_S, show_default=True,
              metavar="SECONDS", help="Seconds the HTP partitioning may take per model (0: no limit). Recurrent layers "
              "are unrolled over their time steps, which can take minutes; past the limit, op support is reported "
              "as not measured.")
@click.option("--context-gb", type=click.FloatRange(min=0, min_open=True), metavar="GB",
              help="The most bytes (GB) one part's HTP context binary may hold, counted as the compiler stores the "
                   "weights at --precision; a model above it is told to split [default: the SoC's load budget, "
                   "qnndeploy/data/load_budget.json; docs/command-details.md, Large models].")
@qairt_option
@json_option
@handles_errors
@gathered(CheckArgs)
def check(args: CheckArgs, as_json: bool) -> None:
    """Is each model ready for the NPU, and what fixes it.

    Per model and SoC: findings, op support measured on that SoC's HTP compiler, a verdict, and one
    `qnndeploy prepare` command line that applies every fixable finding.

    \b
    Exit codes: 0 ready; 10 fixable (`qnndeploy prepare` fixes it: the report gives
    the command line); 11 not ready (needs a re-export); 2 bad input; 3 missing tool.
    With several models the worst verdict decides.
    """
    if args.calib is not None and args.precision == Precision.FP16:
        raise BadInput("--calib is for --precision w8a16 or w4a16: an fp16 build takes no calibration samples")
    if args.qairt is not None:
        under_toolchain(toolchain.resolve(args.qairt))
    # each SoC once (an alias is its SoC); none given: check's default
    targets: list[Soc | None] = list(dict.fromkeys(find_soc(soc) for soc in args.socs)) or [None]
    reports = [check_model(m, soc=soc, measure=not args.no_measure, precision=Precision(args.precision),
                           timeout=args.timeout or None, say=lambda line: click.echo(f"qnndeploy: {line}", err=True),
                           context_bytes=None if args.context_gb is None else round(args.context_gb * 1e9))
               for m in args.models for soc in targets]
    worst = max(reports, key=lambda r: r.exit_code)
    if as_json:
        emit_json({"verdict": worst.verdict, "exit_code": worst.exit_code, "models": reports})
    else:
        for i, one in enumerate(reports):
            if i:
                click.echo()
            _render_check(one)
        if len(reports) > 1:
            click.echo(f"\noverall: {worst.verdict} (exit {worst.exit_code})")
        # every printed command keeps the precision and the calibration samples (DIR: a placeholder when not given),
        # and a quantized build goes to a folder of its own, so that following them never builds fp16 by omission
        quantized = (("--precision", args.precision, "--calib", args.calib or "DIR")
                     if args.precision != Precision.FP16 else ())
        if worst.verdict == CheckVerdict.READY:
            paths = [Path(p) for p in dict.fromkeys(r.path for r in reports)]
            soc_args = ",".join(dict.fromkeys(r.htp.soc for r in reports))
            build = "build" if args.precision == Precision.FP16 else f"build-{args.precision}"
            if quantized and args.calib is None:
                click.echo("(DIR below: a folder of real input samples to calibrate on; check --calib DIR names it)")
            next_step(command_line("qnndeploy", "compile", *paths, "--soc", soc_args, "-o", build, *quantized))
        elif worst.verdict == CheckVerdict.FIXABLE and len(reports) == 1 and worst.prepare_command:
            # the check after the fix keeps this one's SoC and precision: prepare knows neither
            words = shlex.split(worst.prepare_command)
            out = words[words.index("-o") + 1] if "-o" in words else None
            if "--generate" in words:  # the decoder's parts are prepared: compile is next, after prepare's own line
                next_step(worst.prepare_command)
            elif out is not None:
                next_step(worst.prepare_command, command_line("qnndeploy", "check", out, "--soc", worst.htp.soc,
                                                              *(quantized if args.calib else quantized[:2])))
    sys.exit(worst.exit_code)

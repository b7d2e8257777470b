"""`qnndeploy diagnose`: the tensor where the HTP emulator's numbers part from the CPU's, why, and what to do."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from qnndeploy.api import DiagnoseOptions, DiagnoseResult, check_plot, diagnose_job_record, write_diagnose_plot
from qnndeploy.api import diagnose as find_the_tensor
from qnndeploy.cli._common import (
    gathered,
    handles_errors,
    json_option,
    num,
    render_output,
    report,
    sample_options,
    shown,
    step_progress,
)
from qnndeploy.cli._toolchain import under_toolchain
from qnndeploy.qnn import toolchain


def _render(result: DiagnoseResult) -> None:
    i = result.inputs
    source = i["folder"] if i["kind"] == "files" else f"{i['samples']} random sample(s), seed {i['seed']}"
    given = i.get("preprocess")
    given = given.get("given") if isinstance(given, dict) else given
    prep = f" (preprocess {given})" if given else ""
    click.echo(f"{result.graph} on {result.soc} ({result.precision}), inputs: {source}{prep}, from "
               f"{result.samples_from}")
    click.echo(f"the build's binary (what validate runs), by validate's rules: {'PASS' if result.ok else 'FAIL'}")
    for m in result.reference:
        render_output(m)
    click.echo(f"{len(result.probes)} of {result.candidates} tensors probed in {result.compiles} compile(s), "
               f"{result.seconds:.1f} s; threshold SNR {result.min_snr_db:g} dB")
    click.echo(f"  {'pos':>5}  {'SNR dB':>7}  {'cosine':>9}  {'max|d|':>8}  {'CPU max|x|':>10}  op / tensor")
    for p in result.probes:
        mark = "BAD" if p.bad else "   "
        flag = " <- first bad" if result.first_bad is not None and p.tensor == result.first_bad.tensor else ""
        click.echo(f"  {p.position:>5}  {num(p.snr_db, '7.1f')}  {num(p.cosine, '9.6f')}  {p.max_abs_diff:8.2e}  "
                   f"{p.ranges.max_abs:10.3g}  {mark} {p.op_type} {p.tensor}{flag}")
    bad = result.first_bad
    if bad is None and result.ok:
        click.echo("every probed tensor passes, and so does the build's binary: nothing to diagnose")
        return
    if bad is None:
        click.echo(result.answer)
        for f in result.fits:
            click.echo(f"  - {f.output}: {f.measures}; {f.fits}")
    else:
        click.echo(f"first bad tensor: {bad.tensor}, made by {bad.op_type} {bad.node} (position {bad.position} of "
                   f"{result.nodes}), SNR {num(bad.snr_db, '.1f')} dB"
                   + (f"; last good: {result.last_good.tensor}" if result.last_good else ""))
        if result.note:
            click.echo(f"note: {result.note}")
        click.echo("why:")
        for e in result.explanations:
            click.echo(f"  - {e.text}")
    if result.splits:
        click.echo(f"splits measured (each cut as prepare cuts it, its NPU part compiled for {result.soc}, the parts "
                   "chained on these samples and judged against the whole model on the CPU):")
        for t in result.splits:
            done = t.measured
            verdict = "   " if done is None else "ok " if done.passed else "BAD"
            figure = (f"not measured: {t.error}" if done is None else
                      f"worst output SNR {num(done.snr_db, '.1f')} dB, cosine {num(done.cosine, '.6f')}; NPU "
                      f"{t.npu_nodes} node(s), CPU {t.cpu_nodes} ({t.cpu_weight_bytes / 1e6:.2f} of "
                      f"{t.weight_bytes / 1e6:.2f} MB of weights)")
            click.echo(f"  {verdict} --split-at {','.join(t.split_at)} --cpu-part {t.cpu_part}: {figure} "
                       f"({t.seconds:.2f} s)")
    click.echo("remedies:")
    for r in result.remedies:
        click.echo(f"  - {r.kind}: {r.text}")
        if r.command:
            click.echo(f"      {r.command}")


@dataclass(frozen=True, kw_only=True)
class DiagnoseArgs:
    """What `qnndeploy diagnose` is asked: its options as click parsed them, a field each."""

    target: Path
    inputs: Path | None
    preprocess: str | None
    random_: int | None
    seed: int
    ranges: dict[str, tuple[int, int]]
    min_snr_db: float | None
    graph: str | None
    plot_path: Path | None


@click.command()
@click.argument("target", metavar="BUILD/GRAPH/SOC", type=click.Path(path_type=Path))
@sample_options(random_default="validate's samples, from its record; else 1")
@click.option("--min-snr-db", type=float,
              help="The SNR in dB below which a tensor is bad [default: validate's record's, else fp16 30].")
@click.option("--graph", metavar="GRAPH", help="In a shared context's job folder (compile --share): the graph.")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), metavar="FILE.png",
              help="Write the error curve (SNR against position in the graph) as a PNG.")
@json_option
@handles_errors
@gathered(DiagnoseArgs)
def diagnose(args: DiagnoseArgs, as_json: bool) -> None:
    """Find the tensor where the NPU's numbers go wrong, and why.

    Compares CPU fp32 and the host HTP emulator tensor by tensor along one compiled job's graph: copies of the
    source model expose intermediate tensors as outputs, compiled for the job's SoC and precision; each compile
    probes a few tensors, the next narrows between the last good and the first bad one. Prints the error curve,
    the first tensor below the threshold and its node, the value ranges that explain it (fp16 overflow above 65504,
    subnormals below 6.1e-5, dynamic range) and remedies as commands. First it runs the build's own binary on
    validate's samples (those of its record, unless given) by validate's rules: exit 1 when that fails, and when no
    probed tensor is to blame it says what the failing metric measures and which validate thresholds fit.
    """
    if args.plot_path is not None:
        check_plot(args.plot_path)  # before the run: a plot that cannot be written would fail after it
    tc = toolchain.needed([diagnose_job_record(args.target, args.graph).qairt_version])
    if tc is not None:  # compiled with compile --qairt: probe with that QAIRT's compiler and emulator
        under_toolchain(tc)
    options = DiagnoseOptions(inputs=args.inputs, random=args.random_, seed=args.seed, preprocess=args.preprocess,
                              min_snr_db=args.min_snr_db, graph=args.graph, ranges=args.ranges)
    with step_progress("diagnose") as live:
        result = find_the_tensor(args.target, options, live.step)
    if args.plot_path is not None:
        write_diagnose_plot(result, args.plot_path)
        if not as_json:
            click.echo(f"plot: {shown(args.plot_path)}")
    report(result, as_json, _render)

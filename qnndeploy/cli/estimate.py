"""`qnndeploy estimate`: how fast each model would run on each SoC's NPU, estimated on this machine."""

from __future__ import annotations

from pathlib import Path

import click

from qnndeploy.api import Estimates
from qnndeploy.api import estimate as estimate_models
from qnndeploy.cli._common import (
    command_line,
    emit_json,
    handles_errors,
    json_option,
    next_step,
    num,
    shown,
    size_text,
    soc_option,
    table,
)


def render(result: Estimates, models: tuple[Path, ...]) -> None:
    for m in result.models:
        ref = m.reference
        f = ref.figures
        if f is None:
            click.echo(f"{shown(m.model)}: no estimate ({ref.reason})")
            table(["SoC", "why no number"], ([r.soc, r.reason] for r in m.socs))
            continue
        band = f"{num(f.ms_lower, '.3f')}-{num(f.ms_upper, '.3f')}"
        click.echo(f"{shown(m.model)}: {ref.soc} {num(f.ms, '.3f')} ms ({band}), {f.cycles:,} cycles at "
                   f"{num(f.clock_mhz, 'g')} MHz, QAIRT {m.qairt}; fill {size_text(f.fill_bytes)}, spill "
                   f"{size_text(f.spill_bytes)}, {f.ops_without_cost} ops without a cost")
        table(["SoC", "ms", "band", "factor", "fit or why no number"],
              ([r.soc, num(r.ms, ".3f"), None if r.ms is None else f"{num(r.ms_lower, '.3f')}-{num(r.ms_upper, '.3f')}",
                num(r.factor, ".3f"), r.fit or r.reason] for r in m.socs))
        for warning in m.warnings:
            click.echo(f"warning: {warning}")
    if result.models:
        click.echo(f"factors: {result.models[0].source}")
    if result.records:
        click.echo(f"records: {len(result.records)} written, <graph>/<SoC>/estimate.json beside each job's "
                   f"compile.json ({shown(result.records[0])}{', ...' if len(result.records) > 1 else ''})")
    click.echo(result.not_claimed)
    if any(p.is_dir() for p in models):
        next_step(command_line("qnndeploy", "validate", *[p for p in models if p.is_dir()]))
    else:
        chosen = [r.soc for r in result.models[0].socs] if result.models else []
        next_step(command_line("qnndeploy", "compile", *models, "--soc", ",".join(chosen), "-o", "build"))


@click.command()
@click.argument("models", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="MODEL.onnx|BUILD...")
@soc_option("The SoCs to estimate for [default: a build's SoCs, else every SoC with a chip factor].")
@click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True, metavar="SECONDS",
              help="Give up one model's estimating compile after this long.")
@json_option
@handles_errors
def estimate(models: tuple[Path, ...], socs: tuple[str, ...], timeout: float, as_json: bool) -> None:
    """How fast each model would run on each SoC's NPU, estimated here.

    Each MODEL.onnx, or each graph of a BUILD folder (compile -o: the source ONNX its records name, for the SoCs
    it was compiled for; each graph x SoC's estimate is written as BUILD/<graph>/<SoC>/estimate.json, which the
    report shows).
    The HTP backend's own performance model (Hextimate, in onnxruntime-qnn's libQnnHtp.so) estimates each model
    for QCS9100 at its precision (fp16; a w8a16 build or a QDQ model at its own) while compiling it on this machine
    with QNN profiling on (nothing runs), and each SoC's time is that estimate scaled by the SoC's chip factor,
    fitted on Qualcomm AI Hub's published measurements (qnndeploy/data/chip_factors.json). Per SoC: the time in ms,
    its band (the backend's lower and upper estimates, scaled alike), the factor and its fit. A SoC without a
    factor, or whose factor's fit misses 90% within 1.5x (the quantized ones so far), gets no number, and says why.
    Nothing is measured: no CPU-fallback ops (a model the HTP does not take whole is refused), no load time, the top
    clock only.

    \b
    Exit codes: 0 the estimates; 1 a model the HTP does not take whole, or a failed compile;
    2 bad input (no such model, an unknown SoC, a build's source gone or changed since its compile);
    3 no onnxruntime-qnn.
    """
    result = estimate_models(models, socs, timeout=timeout)
    if as_json:
        emit_json(result)
    else:
        render(result, models)

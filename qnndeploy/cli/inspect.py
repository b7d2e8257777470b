"""`qnndeploy inspect`: what a QNN context binary (or every one in a bundle) says about itself."""

from __future__ import annotations

from pathlib import Path

import click

from qnndeploy.api import INSPECT_MARKERS as MARKERS
from qnndeploy.api import BinaryReport, InspectResult, inspect
from qnndeploy.cli._common import escaped, handles_errors, json_option, report
from qnndeploy.qnn.qnnsystem import GraphInfo, QnnTensorInfo


@click.command("inspect")
@click.argument("path", type=click.Path(path_type=Path), metavar="FILE.bin|BUNDLE")
@click.option("--shallow", is_flag=True, help="Do not load a bundle's binaries on the host HTP emulator.")
@json_option
@handles_errors
def inspect_cmd(path: Path, shallow: bool, as_json: bool) -> None:
    """What a QNN context binary holds, as QNN reads it.

    Its QAIRT build, blob and API versions, SoC and HTP arch, and per graph its inputs and outputs (name, dims,
    dtype, quantization), spill-fill and VTCM sizes.

    PATH is a context binary, or a bundle folder or .tar.gz/.zip: then every context binary of every target.
    The binaries are read by libQnnSystem from onnxruntime-qnn (or $QNNDEPLOY_QNN_SYSTEM_LIB), each in a child
    process; without it, what the bytes' markers say is shown, marked "markers". A bundle's binaries are also
    loaded and run on the host HTP emulator against their CPU models (--shallow: not).

    \b
    Exit codes: 0 read; 1 libQnnSystem refused or crashed on a binary (damaged, or not a
    context binary; its markers are shown), or one does not load or computes other numbers on the
    host emulator; 2 bad input (no such path, not a bundle).
    """
    report(inspect(path, deep=not shallow), as_json, render)


def _dims(t: QnnTensorInfo) -> str:
    return "x".join(str(d) for d in t.dims) or "scalar"


def _quant(t: QnnTensorInfo) -> str:
    q = t.quantization
    if q is None:
        return ""
    if q.scale is not None:
        return f"scale {q.scale:.6g} offset {q.offset}" + (f" ({q.bitwidth} bit)" if q.bitwidth else "")
    if q.scales:
        return f"per-axis {q.axis}: {len(q.scales)} scales"
    return q.encoding


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} B"


def _graph(g: GraphInfo) -> None:
    click.echo(f"  graph {escaped(g.name)}")
    click.echo(f"    spill-fill {_size(g.spill_fill_bytes)}  VTCM {_size(g.vtcm_bytes)}  "
               f"optimization level {'-' if g.optimization_level is None else g.optimization_level}  "
               f"I/O {_size(g.io_tensor_bytes)}  op data {_size(g.op_data_bytes)}  const {_size(g.const_bytes)}")
    rows = [("in", t) for t in g.inputs] + [("out", t) for t in g.outputs]
    width = max((len(escaped(t.name)) for _, t in rows), default=4)
    dims = max((len(_dims(t)) for _, t in rows), default=4)
    for kind, t in rows:
        click.echo(f"    {kind:<4}{escaped(t.name):<{width}}  {_dims(t):<{dims}}  {t.dtype:<8}  {_quant(t)}".rstrip())


def _binary(b: BinaryReport) -> None:
    where = f"  [{b.soc}, target {b.target_arch}]" if b.soc else ""
    click.echo(f"{escaped(b.path)}  ({b.size:,} bytes){where}")
    if b.source == MARKERS:
        why = "libQnnSystem could not read it" if b.reason == b.problem else b.reason
        click.echo(f"  source: markers ({why})")
        m = b.markers
        if m is not None:
            click.echo(f"  QAIRT build     {escaped(', '.join(m.builds)) or '-'}")
            click.echo("  SoC, arch       " + (escaped(", ".join(f"{s} v{a}" for s, a in m.targets)) or "-"))
    c = b.context
    if c is not None:
        soc = f"{b.binary_soc or '?'} (soc_model {c.soc_model})" if c.soc_model is not None else "-"
        click.echo(f"  QAIRT build     {escaped(c.build_id)}")
        click.echo(f"  context blob    {c.context_blob_version}  ({c.context_blob_size:,} bytes); binary info "
                   f"v{c.binary_info_version}" + (f"; hw info blob {c.hw_info_blob_version}"
                                                  if c.hw_info_blob_version else ""))
        click.echo(f"  API versions    core {c.core_api_version}, backend {c.backend_api_version}")
        click.echo(f"  SoC, arch       {soc}, HTP {escaped(c.dsp_arch or '-')}"
                   + (f"  (soc version {escaped(c.soc_version)})" if c.soc_version else ""))
        for g in c.graphs:
            _graph(g)
    if b.emulated is not None:
        click.echo(f"  host emulator   {escaped(b.emulated)}")
    for w in b.warnings:
        click.echo(f"  WARNING {escaped(w)}")
    if b.problem:
        click.echo(f"  PROBLEM {escaped(b.problem)}")


def render(result: InspectResult) -> None:
    if result.bundle:
        click.echo(f"bundle {result.bundle}  (QAIRT {result.qairt})  {result.path}")
    for i, b in enumerate(result.binaries):
        if i or result.bundle:
            click.echo("")
        _binary(b)
    for note in result.notes:
        click.echo(note)
    if result.deep:
        click.echo(f"\nhost emulator: {escaped(result.deep)}")

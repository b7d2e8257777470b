"""`qnndeploy demo`: the whole procedure on the embedded model."""

from __future__ import annotations

from pathlib import Path

import click

from qnndeploy.api import DEMO_MARKER, DEMO_SOCS, DEMO_STEPS, DemoResult, run_demo
from qnndeploy.cli._common import emit_json, handles_errors, json_option, soc_option


def _render_demo(r: DemoResult) -> None:
    click.echo("")
    click.echo(f"check before: {r.verdict_before}; prepare: {'; '.join(r.prepare_changes)}; "
               f"CPU max abs diff {r.max_abs_diff_cpu:.1e}")
    click.echo(f"check after: {r.verdict_after}, {r.cpu_partitions} CPU partition(s) on the HTP")
    cached = f" ({r.cached} from the compile cache)" if r.cached else ""
    click.echo(f"compiled {len(r.compiled)} context binaries{cached} in {r.compile_s:.1f} s: {', '.join(r.compiled)}")
    for line in r.validated:
        click.echo(f"validated {line}")
    how = "verifies clean" if not r.warnings else f"verifies with {len(r.warnings)} warning(s)"
    click.echo(f"bundle {r.bundle} ({r.bundle_files} files, QAIRT {r.qairt}) {how}; {r.verified}")
    for w in r.warnings:
        click.echo(f"  warning: {w}")
    click.echo(f"runtime: {r.runtime}")
    click.echo(f"app: {r.app_set}")
    click.echo("emulator results show the HTP's arithmetic, not phone speed: measure that on a phone.")
    click.echo("next:")
    for c in r.next_commands:
        click.echo(f"  {c}")


@click.command()
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("qnndeploy-demo"), show_default=True,
              metavar="DIR", help="Folder for the model, build, records and bundle; new or empty unless --force.")
@soc_option(f"SoC to compile for [default: {','.join(DEMO_SOCS)}].", dest="soc_names")
@click.option("--qnn-sdk-root", type=click.Path(path_type=Path), metavar="DIR",
              help="Bundle the runtime libraries of a QAIRT SDK [default: the external Maven runtime].")
@click.option("--runtime-libs", type=click.Path(path_type=Path), metavar="DIR",
              help="Bundle the runtime libraries of a flat folder.")
@click.option("--force", is_flag=True,
              help=f"Replace DIR if it is an earlier demo output (it holds {DEMO_MARKER}), never another folder.")
@json_option
@handles_errors
def demo(output: Path, soc_names: tuple[str, ...], qnn_sdk_root: Path | None, runtime_libs: Path | None, force: bool,
         as_json: bool) -> None:
    """The whole procedure on the embedded demo model.

    check, prepare, check, compile, validate, bundle build and bundle verify, into DIR. A failed or
    interrupted run leaves DIR as it was before.
    """
    steps: list[str] = []

    def step(text: str) -> None:
        steps.append(text)
        if not as_json:
            click.echo(f"[{len(steps)}/{DEMO_STEPS}] {text}")

    result = run_demo(output, tuple(soc_names) or DEMO_SOCS, force, step, qnn_sdk_root, runtime_libs)
    if as_json:
        emit_json(result)
    else:
        _render_demo(result)

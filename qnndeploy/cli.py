"""The command line: parse options, call one library function, render its result. Only this module prints."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import click

from qnndeploy import __version__
from qnndeploy.errors import EXIT_BAD_INPUT, QnnDeployError


def _jsonable(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def emit_json(value: object) -> None:
    click.echo(json.dumps(_jsonable(value), indent=2))


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def handles_errors(fn: Callable) -> Callable:
    """Turn the library's one error type into a one-line message and its exit code, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except QnnDeployError as e:
            fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            fail("interrupted; nothing was left half-written", 130)

    return wrapper


json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of text.")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="qnndeploy")
def cli() -> None:
    """Ship ONNX models on the Qualcomm NPU (QNN HTP), with a CPU fallback on every phone.

    \b
    Exit codes: 0 ok; 1 the thing checked has problems; 2 bad input (nothing written);
    3 a required tool is missing; 130 interrupted. `check` adds 10 (fixable) and 11 (not ready).
    """


# --- socs -------------------------------------------------------------------------------------------

@cli.command()
@click.argument("name", required=False)
@json_option
@handles_errors
def socs(name: str | None, as_json: bool) -> None:
    """List the SoC catalog, or show one SoC by model, soc_id or ro.board.platform codename."""
    from qnndeploy import socs as catalog

    rows = [catalog.find(name)] if name else list(catalog.catalog())
    if as_json:
        emit_json([s.to_json() for s in rows])
        return
    click.echo(f"{'model':<10} {'soc_id':>6}  {'arch':<5} {'vtcm':>4}  {'fp16':<4}  {'name':<26} codenames")
    for s in rows:
        click.echo(f"{s.model:<10} {s.soc_id:>6}  {s.dsp_arch:<5} {s.vtcm_mb:>3}M  {'yes' if s.fp16 else 'NO':<4}  "
                   f"{s.marketing_name or '-':<26} {','.join(s.codenames) or '-'}")


def main() -> None:
    cli()

"""The command line: `cli`, the click group, and `main`, the console script. Only this package prints or exits.

One module per command, named as the command is (`qnndeploy compile` is cli/compile.py), holding its click command
and its renderers: each command parses its options, calls one library function and renders the result. What
they share (error handling, JSON output, options, progress bars) is in cli/_common.py.
"""

from __future__ import annotations

import sys

import click

from qnndeploy import __version__
from qnndeploy.cli import (
    bundle,
    cache,
    check,
    demo,
    device,
    diagnose,
    doctor,
    package,
    prepare,
    scaffold,
    socs,
    validate,
)
from qnndeploy.cli import compile as compile_  # the module; `compile` alone would hide the builtin here
from qnndeploy.cli import inspect as inspect_  # the module; `inspect` alone would hide the standard library's
from qnndeploy.cli._common import (
    CONTEXT_SETTINGS,
    EXIT_INTERRUPTED,
    Group,
    fail,
    install_signal_handlers,
    interrupted_message,
)


@click.group(cls=Group, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="qnndeploy")
def cli() -> None:
    """Ship ONNX models on the Qualcomm NPU (QNN HTP), with a CPU fallback on every phone.

    \b
    model.onnx -> check, prepare -> compile -> validate (diagnose) -> bundle build, bundle verify
               -> scaffold (the app's Kotlin glue), package play (Play AI packs)
               -> device verify (on phones)

    \b
    Exit codes: 0 ok; 1 the thing checked has problems; 2 bad input or usage (nothing written;
    a path that is not a bundle is bad input everywhere); 3 a required tool is missing;
    130 interrupted. `check` adds 10 (fixable) and 11 (not ready).
    """


for command in (
    demo.demo,
    socs.socs,
    check.check,
    prepare.prepare,
    compile_.compile_cmd,
    validate.validate,
    diagnose.diagnose,
    bundle.bundle,
    inspect_.inspect_cmd,
    scaffold.scaffold,
    package.package,
    device.device,
    doctor.doctor,
    cache.cache,
):  # in the pipeline's order, as `qnndeploy --help` lists them
    cli.add_command(command)


def main() -> None:
    """Run the CLI with one-line errors for usage mistakes too, and SIGTERM handled like Ctrl-C."""
    install_signal_handlers()  # SIGTERM sets a flag; the work stops at a safe point and cleans up like Ctrl-C
    try:
        code = cli(prog_name="qnndeploy", standalone_mode=False)
    except click.UsageError as e:
        where = f" (see {e.ctx.command_path} --help)" if e.ctx else ""
        fail(f"{e.format_message()}{where}", e.exit_code)
    except click.ClickException as e:
        fail(e.format_message(), e.exit_code)
    except (click.Abort, KeyboardInterrupt):
        fail(interrupted_message(), EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)

"""The command line: `cli`, the click group, and `main`, the console script. Only this package prints or exits.

One module per command, named as the command is (`qnndeploy compile` is cli/compile.py), holding its click command
and its renderers: each command parses its options, calls one library function and renders the result. What
they share (error handling, JSON output, options, progress bars) is in cli/_common.py.
"""

from __future__ import annotations

import importlib
import sys

import click

from qnndeploy import __version__
from qnndeploy.cli._common import (
    CONTEXT_SETTINGS,
    EXIT_INTERRUPTED,
    Group,
    fail,
    install_signal_handlers,
    interrupted_message,
)

# name: (module in qnndeploy.cli, its click command, the first line of the command's help), in the pipeline's
# order, as `qnndeploy --help` lists them. A command's module is imported only when that command runs (or its help
# is asked for), so `--help` and every command start without importing the others; tests/cli/test_cli.py checks that
# each line here is the command's own.
COMMANDS = {
    "demo": ("demo", "demo", "The whole procedure on the embedded demo model."),
    "socs": ("socs", "socs", "The SoC catalog, or one SoC with its sources and what QNN's compiler wrote for it."),
    "check": ("check", "check", "Is each model ready for the NPU, and what fixes it."),
    "prepare": ("prepare", "prepare", "Make a model NPU-ready, proven equivalent on CPU."),
    "estimate": ("estimate", "estimate", "How fast each model would run on each SoC's NPU, estimated here."),
    "compile": ("compile", "compile_cmd", "Compile each model for each SoC into a QNN context binary."),
    "validate": ("validate", "validate", "Compare each context binary on the HTP emulator with the CPU."),
    "diagnose": ("diagnose", "diagnose", "Find the tensor where the NPU's numbers go wrong, and why."),
    "bundle": ("bundle", "bundle", "Build a bundle, or verify one."),
    "inspect": ("inspect", "inspect_cmd", "What a QNN context binary holds, as QNN reads it."),
    "scaffold": ("scaffold", "scaffold", "Generate the app side of a bundle: Kotlin glue."),
    "package": ("package", "package", "Package a bundle for an app store's delivery."),
    "reach": ("reach", "reach", "Which phones take the NPU with a bundle, and why not the others."),
    "device": ("device", "device", "Phones over adb: list, info, profile, verify, bench."),
    "report": ("report", "report", "One self-contained HTML page of the records of builds, bundles and phones."),
    "doctor": ("doctor", "doctor", "What this machine can do, and what to install."),
    "cache": ("cache", "cache", "The compile cache: list, size, clear."),
}


class _Lazy(Group):
    """The top-level group: commands are loaded by name from COMMANDS, and the listing uses COMMANDS' help lines."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, name, _ = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(f"qnndeploy.cli.{module}"), name)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        rows = [(name, click.Command(name, help=help_).get_short_help_str(limit))  # click's public shortening
                for name, (_, _, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_Lazy, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="qnndeploy")
def cli() -> None:
    """Ship ONNX models on the Qualcomm NPU (QNN HTP), with a CPU fallback on every phone.

    \b
    model.onnx -> check, prepare -> compile -> validate (diagnose) -> bundle build, bundle verify
               -> scaffold (the app's Kotlin glue), package play (Play AI packs)
               -> reach (which phones take the NPU, and why not)
               -> device verify (on phones)
               -> report (one HTML page of every record)

    \b
    Exit codes: 0 ok; 1 the thing checked has problems; 2 bad input or usage (nothing written;
    a path that is not a bundle is bad input everywhere); 3 a required tool is missing;
    130 interrupted. `check` adds 10 (fixable) and 11 (not ready).
    """


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

"""Running a command under another QAIRT toolchain (`--qairt X.Y`), for the commands that compile or run context
binaries. Apart from cli/_common.py, so that `qnndeploy --help` and the other commands do not import the toolchain
machinery (the package metadata, the runtime table)."""

from __future__ import annotations

import os
import subprocess
import sys

import click

from qnndeploy.base.errors import BadInput
from qnndeploy.cli._common import Group, Renamed
from qnndeploy.qnn import toolchain


def under_toolchain(tc: toolchain.Toolchain) -> None:
    """Return at once when this process imports `tc`; otherwise install it if it is not yet (saying so on stderr),
    run this same command again in a child process under it, and exit with the child's exit code."""
    if toolchain.is_current(tc):
        return
    if os.environ.get(toolchain.ENV_ACTIVE) == tc.onnxruntime_qnn:
        raise BadInput(f"running under {tc.name}, this process still imports another onnxruntime-qnn "
                       f"({toolchain.current()}): remove {toolchain.folder(tc)} and run again")
    toolchain.install(tc, say=lambda line: click.echo(f"qnndeploy: {line}", err=True))
    click.echo(f"qnndeploy: running under {tc.name}", err=True)
    sys.stdout.flush()
    sys.exit(subprocess.run(toolchain.command(Group.args), env=toolchain.environ(tc), check=False).returncode)


qairt_option = click.option(
    "--qairt", cls=Renamed, metavar="X.Y",
    help="Use this QAIRT release's compiler: the onnxruntime-qnn wheel that carries it, installed on demand into "
         "$QNNDEPLOY_TOOLCHAINS_DIR (default ~/.cache/qnndeploy/toolchains) [default: the installed "
         "onnxruntime-qnn's]. Pick the QAIRT of the runtime the app ships (docs/decision-and-runtime.md, Runtime "
         "compatibility).")

"""STAND-IN for QAIRT's qnn-profile-viewer (bin/aarch64-android/qnn-profile-viewer; tests only: no QAIRT SDK here).

It takes the viewer's command line as QAIRT's own scripts give it (`--input_log LOG [--output FILE] [--reader LIB]
[--config FILE] [--schematic FILE]`) and refuses other options. The real viewer decodes the binary log, whose
layout is not public; this one cannot, so it reads the sidecars the qnn-net-run stand-in wrote beside the log:
with --output, LOG.standin.csv (the very events the QNN HTP backend emitted for that run, in the event CSV layout
the QNN EP writes), copied to --output; without it, LOG.standin.txt, the summary the real viewer prints to stdout
("Init Stats:" ... "NetRun: N us" ... "Execute Stats (Average):" ...; device/opprofile.py names where that layout
was read), printed. A log without its sidecar is refused as the real viewer refuses a bad log.
A --reader (the chrometrace/optrace readers) is refused: that output is not emulated.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import NoReturn

FLAGS = ("--input_log", "--output", "--reader", "--config", "--schematic")


def write_launcher(path: Path) -> Path:
    """An executable for the emulated phone that starts this stand-in with the host Python."""
    path.write_text("#!/bin/sh\n"
                    "# STAND-IN for qnn-profile-viewer (tests/support/device_emulator/qnn_profile_viewer.py)\n"
                    f'unset LD_LIBRARY_PATH\nexec {sys.executable} {Path(__file__).resolve()} "$@"\n')
    path.chmod(0o755)
    return path


def _fail(line: str, code: int = 1) -> NoReturn:
    print(line, flush=True)
    sys.exit(code)


def main(argv: list[str]) -> None:
    args: dict[str, str] = {}
    i = 0
    while i < len(argv):
        flag, _, value = argv[i].partition("=")
        if flag not in FLAGS:
            _fail(f"ERROR: Invalid argument passed: {argv[i]}")
        if not value:
            if i + 1 >= len(argv):
                _fail(f"ERROR: {flag} requires a value")
            value, i = argv[i + 1], i + 1
        args[flag] = value
        i += 1
    if "--input_log" not in args:
        _fail("ERROR: Missing required argument --input_log")
    if "--reader" in args:
        _fail(f"STAND-IN qnn-profile-viewer: the reader {args['--reader']} is not emulated", code=2)
    log = Path(args["--input_log"])
    sidecar = log.with_name(log.name + (".standin.csv" if "--output" in args else ".standin.txt"))
    if not log.is_file():
        _fail(f"ERROR: Could not open the input log {log}")
    if not sidecar.is_file():
        _fail(f"ERROR: {log} is not a profiling log this stand-in can read (no {sidecar.name} beside it)")
    if "--output" in args:
        shutil.copyfile(sidecar, args["--output"])
    else:
        print(sidecar.read_text(), end="")
    print(f"STAND-IN qnn-profile-viewer: {log} -> {args.get('--output', 'stdout')}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Two entry points, by their first argument.

`python -m tests.support.device_emulator [--preset P] [--bundle B] [--dir D]`: try the phone side without a phone
(emulate.py): the emulated phone (a STAND-IN) behind a private adb server, with host stand-ins of qnn-net-run and
onnxruntime_perf_test; prints the lines to paste, serves until Ctrl-C. README, "Try the phone side without a phone".

`python -m tests.support.device_emulator BASE [PRESET [BYTES_PER_S]]`, for the benchmarks: an emulated phone in a
process of its own; prints its port on one line and serves until its stdin closes; BYTES_PER_S: a link that slow
(throttle_send). In the process that measures qnndeploy, the phone's Python threads would share its interpreter
(and GIL) with the push under test, which a real phone never does."""

from __future__ import annotations

import sys
from pathlib import Path

from .device import EmulatedDevice


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        from .emulate import main as emulate

        emulate(sys.argv[1:])
        return
    phone = EmulatedDevice(sys.argv[2] if len(sys.argv) > 2 else "sm8750", base=Path(sys.argv[1])).start()
    if len(sys.argv) > 3:
        phone.throttle_send(float(sys.argv[3]))
    print(phone.port, flush=True)
    sys.stdin.read()
    phone.stop()


if __name__ == "__main__":
    main()

"""An emulated phone in a process of its own, for the benchmarks: `python -m device_emulator BASE [PRESET
[BYTES_PER_S]]` prints its port on one line and serves until its stdin closes; BYTES_PER_S: a link that slow
(throttle_send). In the process that measures qnndeploy, the phone's Python threads would share its interpreter
(and GIL) with the push under test, which a real phone never does."""

from __future__ import annotations

import sys
from pathlib import Path

from .device import EmulatedDevice


def main() -> None:
    phone = EmulatedDevice(sys.argv[2] if len(sys.argv) > 2 else "sm8750", base=Path(sys.argv[1])).start()
    if len(sys.argv) > 3:
        phone.throttle_send(float(sys.argv[3]))
    print(phone.port, flush=True)
    sys.stdin.read()
    phone.stop()


if __name__ == "__main__":
    main()

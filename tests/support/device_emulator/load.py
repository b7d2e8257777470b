"""A test process for `device profile`: the main thread spins (about 100% of one core), a second thread named
"sleeper" sleeps (about 0%). argv[1] becomes argv[0] and the main thread's name, as zygote does with an app's
package name, so `pidof NAME` finds it. Runs until killed.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path


def _name_thread(name: str) -> None:
    Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name[:15])


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "test-load"
    if sys.argv[-1] != "--named":
        os.execv(sys.executable, [name, __file__, name, "--named"])  # argv[0] = NAME: what pidof matches
    _name_thread(name)
    started = threading.Event()

    def sleeper() -> None:
        _name_thread("sleeper")
        started.set()
        while True:
            time.sleep(3600)

    threading.Thread(target=sleeper, daemon=True).start()
    started.wait()
    while True:
        pass


if __name__ == "__main__":
    main()

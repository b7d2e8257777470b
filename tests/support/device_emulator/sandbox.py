"""The emulated device's file system and commands: a host folder stands for the device's /, the host's /bin/sh
runs the commands, and small shims on PATH stand for the Android-only tools (getprop, dumpsys, getconf).
sha256sum is the host's, behind a shim too, so that it can be made to misbehave.

Device paths under the folders of DEVICE_DIRS (/data, /vendor, /odm, /sys, /system, …) are rewritten into the
sandbox, in shell command lines on the way in and back in the output. /proc and /dev are the host's real ones, so
a process started on the device has a real /proc/<pid>. Shims and stand-in tools find the sandbox through
$EMU_ROOT and the emulator's state (props, battery) through $EMU_STATE.

Misbehaviour (set_misbehaviour, for the hostile-phone tests): each shim of MISBEHAVING_TOOLS first reads
$EMU_STATE/misbehave-<tool>; "sleep" never answers, "flood" writes 100 MB of output, "trickle" writes one byte a
second for ever. A misbehaving tool ignores its arguments; it ends when adbd hangs it up (the host closed the
stream) or the device stops.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import subprocess
import sys
from pathlib import Path

from . import power

DEVICE_DIRS = ("data", "sdcard", "storage", "system", "vendor", "odm", "product", "apex", "sys", "mnt", "cache")
REAL_DIRS = ("proc", "dev")

# A device path starts after a separator that can precede a word in sh (or ':'/';' inside PATH-like values).
_DEVICE_PATH = re.compile(r"(?:(?<=[\s=:;'\"(|&<>`])|^)(/(?:{}))(?=[/\s;:'\"|&)<>`]|$)".format("|".join(DEVICE_DIRS)))

DEFAULT_BATTERY = {"level": 80, "temperature": 312, "voltage_mv": 4012, "current_ua": -350000, "charging": False}

MISBEHAVIOURS = ("sleep", "flood", "trickle")
MISBEHAVING_TOOLS = ("getprop", "sha256sum", "getconf", "dumpsys")
FLOOD_BYTES = 100 * 1024 * 1024


def _misbehaving(tool: str) -> str:
    """The first lines of a shim: the misbehaviour set for `tool`, if any, instead of its work."""
    state = f'"$EMU_STATE/misbehave-{tool}"'
    return f"""how=; if [ -r {state} ]; then read -r how < {state}; fi
case "$how" in
  sleep) exec sleep 86400 ;;
  flood) yes '[{tool}]: [flood flood flood flood flood flood flood flood flood]' | head -c {FLOOD_BYTES}; exit 0 ;;
  trickle) while :; do printf '['; sleep 1; done ;;
esac
"""


_SHIMS = {
    "getprop": r"""#!/bin/sh
# Stand-in for Android's getprop: reads the emulated device's properties ($EMU_STATE/props, key=value lines).
""" + _misbehaving("getprop") + r"""if [ $# -eq 0 ]; then
  exec awk '{ i = index($0, "="); printf "[%s]: [%s]\n", substr($0, 1, i - 1), substr($0, i + 1) }' "$EMU_STATE/props"
fi
exec awk -v k="$1" -v d="$2" '
  { i = index($0, "="); if (substr($0, 1, i - 1) == k) { print substr($0, i + 1); found = 1; exit } }
  END { if (!found) print d }' "$EMU_STATE/props"
""",
    "dumpsys": r"""#!/bin/sh
# Stand-in for Android's dumpsys: the battery service (the emulated device's battery values), thermalservice (its
# thermal status, see power.py) and power (its screen state: the mWakefulness line of PowerManagerService's dump).
""" + _misbehaving("dumpsys") + r"""if [ "$1" = battery ]; then exec cat "$EMU_STATE/dumpsys-battery"; fi
if [ "$1" = thermalservice ]; then exec cat "$EMU_STATE/dumpsys-thermalservice"; fi
if [ "$1" = power ]; then exec cat "$EMU_STATE/dumpsys-power"; fi
echo "Can't find service: $1" >&2
exit 1
""",
    "getconf": r"""#!/bin/sh
# Stand-in for Android's getconf: PAGE_SIZE is the emulated device's; anything else (CLK_TCK…) the host's,
# which is right for /proc, since /proc is the host's.
""" + _misbehaving("getconf") + r"""case "$1" in
  PAGE_SIZE|PAGESIZE) exec cat "$EMU_STATE/page_size" ;;
  *) exec /usr/bin/getconf "$@" ;;
esac
""",
    "sha256sum": r"""#!/bin/sh
# The host's sha256sum (toybox's on a phone prints the same lines), unless it is set to misbehave.
""" + _misbehaving("sha256sum") + r"""exec /usr/bin/sha256sum "$@"
""",
    "test-load": f"""#!/bin/sh
# Test process for `device profile`: one thread spins, one sleeps (see device_emulator/load.py).
exec {sys.executable} {Path(__file__).with_name('load.py')} "$@"
""",
}


class Sandbox:
    """Folders base/root (the device's /), base/bin (shims), base/state (props, battery)."""

    def __init__(self, base: Path) -> None:
        self.root, self.bin, self.state = base / "root", base / "bin", base / "state"
        for folder in (self.bin, self.state, *(self.root / d for d in DEVICE_DIRS), self.root / "data/local/tmp"):
            folder.mkdir(parents=True, exist_ok=True)
        for name, text in _SHIMS.items():
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        self._root_bytes = str(self.root).encode()
        self.set_props({})
        self.set_page_size(4096)
        self.set_battery()
        self.set_screen(False)
        power.reset(self.root, self.state)

    # --- configuration -----------------------------------------------------------------------------------
    def set_props(self, props: dict[str, str]) -> None:
        self.props = dict(props)
        (self.state / "props").write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))

    def set_misbehaviour(self, tool: str, how: str | None) -> None:
        """Make a shim of MISBEHAVING_TOOLS sleep, flood or trickle (see the module docstring); None: behave."""
        if tool not in MISBEHAVING_TOOLS or (how is not None and how not in MISBEHAVIOURS):
            raise ValueError(f"cannot make {tool} {how}: tools {MISBEHAVING_TOOLS}, behaviours {MISBEHAVIOURS}")
        state = self.state / f"misbehave-{tool}"
        if how is None:
            state.unlink(missing_ok=True)
        else:
            state.write_text(how + "\n")

    def set_page_size(self, size: int) -> None:
        (self.state / "page_size").write_text(f"{size}\n")

    def set_battery(self, **values: object) -> None:
        """Battery as dumpsys battery and /sys/class/power_supply/battery report it (temperature in 0.1 °C)."""
        b = {**DEFAULT_BATTERY, **getattr(self, "battery", {}), **values}
        self.battery = b
        charging = bool(b["charging"])
        (self.state / "dumpsys-battery").write_text(
            "Current Battery Service state:\n"
            f"  AC powered: false\n  USB powered: {str(charging).lower()}\n  Wireless powered: false\n"
            f"  status: {2 if charging else 3}\n  health: 2\n  present: true\n"
            f"  level: {b['level']}\n  scale: 100\n  voltage: {b['voltage_mv']}\n"
            f"  temperature: {b['temperature']}\n  technology: Li-ion\n")
        current = abs(int(b["current_ua"])) if charging else b["current_ua"]  # charging: into the battery
        sysfs = {"capacity": b["level"], "temp": b["temperature"], "voltage_now": int(b["voltage_mv"]) * 1000,
                 "current_now": current, "status": "Charging" if charging else "Discharging"}
        for name, value in sysfs.items():
            self.write(f"/sys/class/power_supply/battery/{name}", f"{value}\n")

    def set_screen(self, on: bool) -> None:
        """The screen state `dumpsys power` reports (AOSP PowerManagerService's dump: mWakefulness=Awake|Asleep)."""
        (self.state / "dumpsys-power").write_text(
            "POWER MANAGER (dumpsys power)\n\nPower Manager State:\n"
            f"  mWakefulness={'Awake' if on else 'Asleep'}\n")

    def write(self, device_path: str, data: bytes | str, mode: int = 0o644) -> Path:
        path = self.host_path(device_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        path.chmod(mode)
        return path

    # --- paths ---------------------------------------------------------------------------------------------
    def host_path(self, device_path: str) -> Path:
        """Where a device path lives on the host: real /proc and /dev, everything else in the sandbox."""
        norm = posixpath.normpath("/" + device_path.lstrip("/"))
        if norm.split("/")[1] in REAL_DIRS:
            return Path(norm)
        return Path(str(self.root) + ("" if norm == "/" else norm))

    def map_command(self, command: str) -> str:
        return _DEVICE_PATH.sub(lambda m: str(self.root) + m.group(1), command)

    def unmap_output(self, data: bytes, final: bool) -> tuple[bytes, bytes]:
        """Host paths in output back to device paths; returns (ready, held back) so a path split across two
        reads is still rewritten."""
        data = data.replace(self._root_bytes, b"")
        if final:
            return data, b""
        for keep in range(min(len(data), len(self._root_bytes) - 1), 0, -1):
            if self._root_bytes.startswith(data[-keep:]):
                return data[:-keep], data[-keep:]
        return data, b""

    # --- processes -----------------------------------------------------------------------------------------
    def popen(self, command: str) -> subprocess.Popen:
        """Run a device command line with the host's sh, in its own session (so it can be killed as a group), with
        SIGHUP at its default action as adbd's children have it: a host that ignores SIGHUP (a run under nohup)
        would pass that on, and a hung-up command would live on."""
        env = {"PATH": f"{self.bin}:/usr/local/bin:/usr/bin:/bin", "EMU_ROOT": str(self.root),
               "EMU_STATE": str(self.state), "TMPDIR": str(self.root / "data/local/tmp"), "LANG": "C"}
        argv = ["/usr/bin/env", "--default-signal=HUP", "/bin/sh",
                *(["-c", self.map_command(command)] if command.strip() else [])]
        return subprocess.Popen(argv, cwd=self.root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)


def kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)

"""STAND-IN for a phone's battery fuel gauge and thermal sensors under load (tests only: there is no phone here).

The emulated phone's battery and thermal files are plain files in its sandbox; nothing on the host heats up or
drains. While a stand-in runner (qnn_net_run.py, ort_perf_test.py) runs, it holds `busy(kind)`, whose thread
rewrites those files every TICK_S the way a phone's would change under that load:

- /sys/class/power_supply/battery/current_now (µA) and voltage_now (µV): the power_supply class ABI
  (Linux Documentation/ABI/testing/sysfs-class-power: current_now in µA, voltage_now in µV). The sign follows
  Pixel phones, negative while discharging; more current while a runner runs (EXTRA_UA per kind), and the voltage
  sags under it (internal resistance). A phone on USB power (set_battery(charging=True)) shows a positive,
  charging current.
- /sys/class/thermal/thermal_zone*/temp (m°C) and type: the thermal sysfs ABI (Documentation/driver-api/thermal/
  sysfs-api.rst); the types are made-up Qualcomm-style names ("cpu-0-0-usr", "skin-msm-therm").
- `dumpsys thermalservice`: the "Thermal Status: N" line of AOSP's ThermalManagerService dump (N is a
  PowerManager.THERMAL_STATUS_* value, 0 none .. 6 shutdown), from the skin temperature by made-up thresholds.

The temperature rises RISE_C_PER_S[kind] per busy second and falls COOL_C_PER_S per idle second down to AMBIENT_C:
scaled so that a test's sustained run of a few seconds (--duration 3) shows a rise of a few degrees and a status
change. All figures are made up; only the formats are a phone's.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

TICK_S = 0.05
IDLE_UA = 350_000  # what the emulated phone draws idle, screen off
EXTRA_UA = {"npu": 450_000, "cpu": 900_000}  # more while a stand-in runner runs, by the path it stands for
RISE_C_PER_S = {"npu": 1.5, "cpu": 2.5}
COOL_C_PER_S = 0.05
AMBIENT_C = 31.0
SAG_UV_PER_UA = 0.15  # voltage drop per µA drawn (about 0.15 Ω)
ZONES = (("cpu-0-0-usr", 4.0), ("skin-msm-therm", 0.0), ("battery", -0.5))  # type, offset from the skin
STATUS_AT_C = ((42.0, 3), (38.0, 2), (34.0, 1))  # skin °C from which dumpsys says severe, moderate, light


def _paths(root: Path, state: Path) -> tuple[Path, Path, Path]:
    return state / "heat.json", root / "sys/class/power_supply/battery", root / "sys/class/thermal"


def _read(state: Path) -> dict[str, float]:
    try:
        return dict(json.loads((state / "heat.json").read_text()))
    except (OSError, ValueError):
        return {"skin_c": AMBIENT_C, "t": time.time()}


def _charging(state: Path) -> bool:
    try:
        return "USB powered: true" in (state / "dumpsys-battery").read_text()
    except OSError:
        return False


def write(root: Path, state: Path, skin_c: float, load_ua: int, voltage_mv: int = 4012) -> None:
    """The files of one moment: battery current and voltage, thermal zones, dumpsys thermalservice."""
    heat, battery, thermal = _paths(root, state)
    battery.mkdir(parents=True, exist_ok=True)
    charging = _charging(state)
    current = 1_200_000 if charging else -load_ua
    voltage = voltage_mv * 1000 - (0 if charging else int(load_ua * SAG_UV_PER_UA))
    (battery / "current_now").write_text(f"{current}\n")
    (battery / "voltage_now").write_text(f"{voltage}\n")
    for i, (kind, offset) in enumerate(ZONES):
        zone = thermal / f"thermal_zone{i}"
        zone.mkdir(parents=True, exist_ok=True)
        (zone / "type").write_text(kind + "\n")
        (zone / "temp").write_text(f"{round((skin_c + offset) * 1000)}\n")
    status = next((s for at, s in STATUS_AT_C if skin_c >= at), 0)
    (state / "dumpsys-thermalservice").write_text(
        "IsStatusOverride: false\nThermalEventListeners:\n\tcallbacks: 0\n\tkilled: false\n\tbroadcasts count: -1\n"
        f"ThermalStatusListeners:\n\tcallbacks: 0\n\tkilled: false\n\tbroadcasts count: -1\nThermal Status: {status}\n"
        "Cached temperatures:\n"
        f"\tTemperature{{mValue={skin_c:.1f}, mType=3, mName=skin, mStatus={status}}}\nHAL Ready: true\n")
    heat.write_text(json.dumps({"skin_c": skin_c, "t": time.time()}))


def reset(root: Path, state: Path, voltage_mv: int = 4012) -> None:
    """An idle phone at ambient temperature."""
    write(root, state, AMBIENT_C, IDLE_UA, voltage_mv)


@contextlib.contextmanager
def busy(kind: str) -> Iterator[None]:
    """While the body runs, the emulated phone (found through $EMU_ROOT and $EMU_STATE) draws more current and
    heats up; idle again afterwards. Outside an emulated phone (no $EMU_STATE) it does nothing."""
    root, state = os.environ.get("EMU_ROOT"), os.environ.get("EMU_STATE")
    if not root or not state:
        yield
        return
    r, s = Path(root), Path(state)
    now = _read(s)
    skin = max(AMBIENT_C, now["skin_c"] - COOL_C_PER_S * max(0.0, time.time() - now["t"]))  # cooled while idle
    stop = threading.Event()

    def heat() -> None:
        nonlocal skin
        last = time.monotonic()
        while not stop.wait(TICK_S):
            t = time.monotonic()
            skin += RISE_C_PER_S[kind] * (t - last)
            last = t
            write(r, s, skin, IDLE_UA + EXTRA_UA[kind])

    write(r, s, skin, IDLE_UA + EXTRA_UA[kind])
    worker = threading.Thread(target=heat, daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join()
        write(r, s, skin, IDLE_UA)

"""`device profile`: the procedure's "measure first" — a process's CPU use, per thread, and the battery.

CPU: utime+stime ticks from /proc/<pid>/stat and /proc/<pid>/task/*/stat, per interval, over the device's own
clock (/proc/uptime) and CLK_TCK (getconf), read in one shell round trip per sample so adb latency does not
skew the figures. 100% = one core fully busy. Battery: dumpsys battery (level, temperature, voltage) and
/sys/class/power_supply/battery/current_now (µA; the sign convention is the vendor's).
"""

from __future__ import annotations

import csv
import re
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from qnndeploy.base.errors import BadInput, CheckFailed
from qnndeploy.base.fileio import staging_file
from qnndeploy.device.adb import Device, Limit, MiB, parse_int

_SEP = "@@qnndeploy@@"
CURRENT_NOW = "/sys/class/power_supply/battery/current_now"
SAMPLE = Limit(30, 4 * MiB)  # one sample's reads: /proc/PID/task/*/stat of a few thousand threads fits
_SECONDS = re.compile(r"[0-9]{1,12}(\.[0-9]{1,9})?")  # /proc/uptime


@dataclass
class Battery:
    level: int | None = None  # percent
    temperature_c: float | None = None
    voltage_mv: int | None = None
    current_ma: float | None = None  # current_now / 1000, read as µA; the sign convention is the vendor's
    powered: bool | None = None  # on AC, USB, wireless or dock power: the current is then charging, not drain


@dataclass
class ThreadUse:
    tid: int
    name: str
    cpu_percent: float


@dataclass
class UsageSample:
    time_s: float  # since the first reading, on the device's clock
    cpu_percent: float  # the whole process; 100 = one core
    threads: list[ThreadUse]
    battery: Battery


@dataclass
class Profile:
    serial: str
    pid: int
    name: str
    clk_tck: int
    interval_s: float
    samples: list[UsageSample] = field(default_factory=list)
    ended: bool = False  # the process exited while it was being profiled

    @property
    def powered(self) -> bool:
        """Was the phone on external power during any sample? Then battery current and drain say nothing of the app."""
        return any(s.battery.powered for s in self.samples)

    def mean_cpu(self) -> float | None:
        return sum(s.cpu_percent for s in self.samples) / len(self.samples) if self.samples else None

    def thread_means(self) -> list[ThreadUse]:
        """Mean CPU of every thread over the samples it was alive in, busiest first."""
        seen: dict[int, tuple[str, list[float]]] = {}
        for s in self.samples:
            for t in s.threads:
                seen.setdefault(t.tid, (t.name, []))[1].append(t.cpu_percent)
        means = [ThreadUse(tid, name, sum(v) / len(v)) for tid, (name, v) in seen.items()]
        return sorted(means, key=lambda t: -t.cpu_percent)


@dataclass
class _Reading:
    uptime: float
    ticks: int
    threads: dict[int, tuple[str, int]]
    battery: Battery


def find_process(dev: Device, pid: int | None = None, package: str | None = None) -> tuple[int, str]:
    """(pid, process name) for --pid or --package (an app's process is named after its package)."""
    if package:
        r = dev.run(f"pidof {shlex.quote(package)}", doing=f"looking for {package} (pidof)")
        pids = [p for p in map(parse_int, r.output.split()) if p is not None and p > 0]
        if not pids:
            raise BadInput(f"{package} is not running on {dev.serial}: start the app, then run again "
                           "(or give --pid)")
        pid = min(pids)
    if pid is None:
        raise BadInput("give the process: --pid PID or --package NAME")
    stat = dev.read_text(f"/proc/{pid}/stat")
    if not stat:
        raise BadInput(f"no process {pid} on {dev.serial} (`adb shell ps -A` lists them)")
    return pid, _stat_of(dev, pid, stat)[1]


def parse_stat(line: str) -> tuple[int, str, int] | None:
    """(id, name, utime+stime) from a /proc stat line, None when it is not one; the name may hold spaces and ')'."""
    head, _, rest = line.strip().rpartition(")")
    ident, _, name = head.partition(" (")
    fields = rest.split()
    numbers = [parse_int(ident), *map(parse_int, fields[11:13])]  # fields 14 and 15 of the line: utime, stime
    if len(numbers) != 3 or None in numbers:
        return None
    tid, utime, stime = (n or 0 for n in numbers)
    return tid, name, utime + stime


def _stat_of(dev: Device, pid: int, line: str) -> tuple[int, str, int]:
    parsed = parse_stat(line)
    if parsed is None:
        raise CheckFailed(f"{dev.serial}: /proc/{pid}/stat does not read as a /proc stat line "
                          f"({line.strip()[:60]!r})")
    return parsed


def parse_battery(dumpsys: str, current_now: str) -> Battery:
    values, flags = {}, {}
    for line in dumpsys.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and (number := parse_int(value)) is not None:
            values[key.strip()] = number
        elif sep and value.strip() in ("true", "false"):
            flags[key.strip()] = value.strip() == "true"
    current = parse_int(current_now)
    sources = [flags[k] for k in ("AC powered", "USB powered", "Wireless powered", "Dock powered") if k in flags]
    return Battery(level=values.get("level"),
                   temperature_c=values["temperature"] / 10 if "temperature" in values else None,
                   voltage_mv=values.get("voltage"),
                   current_ma=current / 1000 if current is not None else None,
                   powered=any(sources) if sources else None)


def _read(dev: Device, pid: int) -> _Reading | None:
    """One sample's raw figures in one round trip; None once the process is gone."""
    r = dev.run(f"cat /proc/uptime; echo {_SEP}; cat /proc/{pid}/stat; echo {_SEP}; cat /proc/{pid}/task/*/stat; "
                f"echo {_SEP}; dumpsys battery; echo {_SEP}; cat {CURRENT_NOW} 2>/dev/null",
                doing=f"reading /proc/{pid} and the battery", limit=SAMPLE)
    parts = r.output.split(_SEP + "\n")
    state = parts[1].rpartition(")")[2].split()[:1] if len(parts) == 5 else []
    if len(parts) != 5 or not parts[1].startswith(f"{pid} (") or state in (["Z"], ["X"]):
        return None  # gone, or a zombie waiting for its parent
    threads = {}
    for line in parts[2].splitlines():
        # a thread that ended between the glob and cat leaves an error line instead
        if (parsed := parse_stat(line)) is not None:
            threads[parsed[0]] = parsed[1:]
    uptime = parts[0].split()[:1]
    if not uptime or not _SECONDS.fullmatch(uptime[0]):
        raise CheckFailed(f"{dev.serial}: /proc/uptime does not read as one ({parts[0].strip()[:60]!r})")
    return _Reading(float(uptime[0]), _stat_of(dev, pid, parts[1])[2], threads, parse_battery(parts[3], parts[4]))


def start(dev: Device, pid: int, name: str, interval: float) -> Profile:
    out = dev.run("getconf CLK_TCK", doing="reading the clock rate (getconf CLK_TCK)").output
    clk = parse_int(out)
    if clk is None or clk <= 0:
        raise CheckFailed(f"getconf CLK_TCK failed on {dev.serial}: {out.strip()[:100]}")
    return Profile(dev.serial, pid, name, clk, interval)


def samples(dev: Device, profile: Profile) -> Iterator[UsageSample]:
    """One Sample per interval until the caller stops or the process exits (profile.ended); each is also
    appended to profile.samples."""
    first = _read(dev, profile.pid)
    if first is None:
        raise CheckFailed(f"process {profile.pid} ended on {dev.serial}")
    prev = first
    next_at = time.monotonic()
    while True:
        next_at += profile.interval_s
        time.sleep(max(0.0, next_at - time.monotonic()))
        cur = _read(dev, profile.pid)
        if cur is None:
            profile.ended = True
            return
        span = max(cur.uptime - prev.uptime, 1e-6) * profile.clk_tck / 100  # ticks that make 100%
        threads = [ThreadUse(tid, name, (ticks - prev.threads[tid][1]) / span)
                   for tid, (name, ticks) in cur.threads.items() if tid in prev.threads]
        sample = UsageSample(round(cur.uptime - first.uptime, 2), (cur.ticks - prev.ticks) / span,
                        sorted(threads, key=lambda t: -t.cpu_percent), cur.battery)
        profile.samples.append(sample)
        yield sample
        prev = cur


def write_csv(profile: Profile, path: Path) -> None:
    """One row per sample: process CPU, battery, then one column per thread ever seen ("tid name")."""
    threads = {t.tid: t.name for s in profile.samples for t in s.threads}
    columns = ["time_s", "cpu_percent", "battery_level", "battery_temp_c", "battery_voltage_mv",
               "battery_current_ma", *(f"{tid} {name}" for tid, name in sorted(threads.items()))]
    with staging_file(path, force=True) as tmp, tmp.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(columns)
        for s in profile.samples:
            per = {t.tid: f"{t.cpu_percent:.1f}" for t in s.threads}
            b = s.battery
            out.writerow([s.time_s, f"{s.cpu_percent:.1f}", b.level, b.temperature_c, b.voltage_mv, b.current_ma,
                          *(per.get(tid, "") for tid in sorted(threads))])

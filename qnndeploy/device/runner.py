"""qnn-net-run on a phone: find the runner, install it, run one context binary on inputs, fetch the outputs, and
turn the known QNN failures in its output into advice (data/qnn_errors.json).

The command line is the one QAIRT documents for a saved context:
  qnn-net-run --backend libQnnHtp.so --retrieve_context GRAPH.bin --input_list input_list.txt --output_dir out
with LD_LIBRARY_PATH (the bundle's arm64-v8a folder only: /vendor must not shadow it) and ADSP_LIBRARY_PATH (the
Skel folder first, ';'-separated, then the vendor DSP folders, as the app sets it) in its environment. Each line
of input_list.txt is one inference (`name:=file.raw ...`), its outputs land in out/Result_<line>/<name>.raw as
float32 (qnn-net-run's default without --use_native_output_files).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base.errors import BadInput, CheckFailed, QnnDeployError
from qnndeploy.device.adb import FILES, HASHING, RUN, Device, parse_int
from qnndeploy.formats import elf

if TYPE_CHECKING:
    import numpy as np

SDK_RUNNER = "bin/aarch64-android/qnn-net-run"
REMOTE_RUNNER = "/data/local/tmp/qnndeploy/bin/qnn-net-run"
BACKEND = "libQnnHtp.so"
INPUT_LIST = "input_list.txt"  # every inference of the timed run
FIRST_INPUT = "first_input.txt"  # its first line alone: the first-run latency
_TIME = "QNNDEPLOY-TIME"
_OUTPUTS = "QNNDEPLOY-OUTPUTS"


@dataclass(frozen=True)
class Advice:
    id: str
    message: str
    line: str  # the output line that matched


class Clock(StrEnum):
    """What timed a run on a phone: the phone's own clock, the host's (which includes the adb round trip), or AI
    Hub's profile of a hosted phone."""

    DEVICE = "device"
    HOST = "host"
    AIHUB = "aihub"


@dataclass
class Invocation:
    code: int
    output: str
    seconds: float
    clock: Clock
    command: str
    first_output_s: float | None = None  # from the process start to its Result_0 folder (phone's clock), if read


def find_runner(runner: Path | None, sdk_root: Path | None) -> Path | None:
    """--runner, else the SDK's aarch64-android qnn-net-run, else none."""
    if runner is not None:
        if not Path(runner).is_file():
            raise BadInput(f"--runner {runner}: no such file (give a qnn-net-run built for aarch64-android)")
        return phone_executable(Path(runner))
    if sdk_root is not None:
        path = Path(sdk_root) / SDK_RUNNER
        if not path.is_file():
            raise BadInput(f"--qnn-sdk-root {sdk_root} has no {SDK_RUNNER}: is it a QAIRT SDK folder?")
        return phone_executable(path)
    return None


def phone_executable(path: Path, want: str = "qnn-net-run from the SDK's bin/aarch64-android") -> Path:
    """An Android arm64 program (ELF64 AArch64) or a script; a host binary would only fail on the phone, obscurely.
    `want`: what to give instead, in the error."""

    with path.open("rb") as f:
        if f.read(2) == b"#!":
            return path
    try:
        info = elf.read_elf(path)
    except elf.NotElf as e:
        raise BadInput(f"runner {path} is {e}: give {want}") from None
    if (info.bits, info.machine) != (64, elf.EM_AARCH64):
        raise BadInput(f"runner {path} is an ELF{info.bits} program for e_machine {info.machine}, not Android "
                       f"arm64 (AArch64): give {want}")
    return path


def install(dev: Device, local: Path, digest: str, remote: str = REMOTE_RUNNER) -> int:
    """Put a runner (sha256 `digest`) at `remote` with mode 0755, unless it is already there; bytes sent.
    It goes to a staging name, is checked there and renamed: `remote` is never a half-sent file."""
    q_runner, q_staged = shlex.quote(remote), shlex.quote(remote + ".staging")
    r = dev.run(f"sha256sum {q_runner} 2>/dev/null && test -x {q_runner}", doing="hashing the runner on the phone",
                limit=HASHING)
    if r.code == 0 and r.output.split()[:1] == [digest]:
        return 0
    sent = dev.push(local, remote + ".staging", mode=0o755, sha256=digest, name=f"the runner {local.name}")
    check = dev.run(f"sha256sum {q_staged}", doing="hashing the runner on the phone", limit=HASHING).output.split()
    if check[:1] != [digest]:
        raise CheckFailed(f"the runner on {dev.serial} differs from {local} after the push: run again")
    dev.run(f"mv -f {q_staged} {q_runner}", check=True, doing="putting the runner in place", limit=FILES)
    return sent


# --- inputs and outputs ----------------------------------------------------------------------------------------

def write_inputs(folder: Path, samples: list[dict[str, np.ndarray]], lines: int) -> bool:
    """Raw input files, INPUT_LIST (`lines` inferences, cycling through the samples) and FIRST_INPUT in `folder`.

    float32 files unless an input is not float32; then every file is in the model's own dtype and the run needs
    --use_native_input_files. Returns whether it does.
    """
    import numpy as np

    native = any(a.dtype != np.float32 for s in samples for a in s.values())
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, sample in enumerate(samples):
        entries = []
        for name, arr in sample.items():
            rel = f"in/{i}_{_safe(name)}.raw"
            (folder / rel).parent.mkdir(exist_ok=True)
            data = arr if native else arr.astype(np.float32)
            (folder / rel).write_bytes(np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<")).tobytes())
            entries.append(f"{name}:={rel}")
        names.append(" ".join(entries))
    (folder / INPUT_LIST).write_text("".join(names[i % len(names)] + "\n" for i in range(lines)))
    (folder / FIRST_INPUT).write_text(names[0] + "\n")
    return native


def output_file(line: int, name: str) -> str:
    """Where qnn-net-run writes an output, relative to its --output_dir."""
    return f"Result_{line}/{_safe(name)}.raw"


def read_output(path: Path, name: str, shape: tuple[int, ...]) -> np.ndarray:
    import numpy as np

    data = np.fromfile(path, dtype="<f4")
    if data.size != int(np.prod(shape)):
        raise QnnDeployError(f"output '{name}' has {data.size} float32 values, the model's has {int(np.prod(shape))} "
                             f"{list(shape)}: is the context binary the bundle's CPU model compiled?")
    return data.reshape(shape)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


# --- running ---------------------------------------------------------------------------------------------------

# qnn-net-run writes each inference's outputs to <output_dir>/Result_<line>/ when that inference is done (the QNN
# docs' qnn-net-run output layout): the folders' modification times, in stat's %y form ("2026-12-02
# 14:50:01.123456789 +0000", GNU coreutils' and toybox's stat), mark when each inference ended. RESULTS prints one
# "R <line> <time>" line per folder of the output folder $o.
RESULTS = 'for d in "$o"/Result_*; do [ -d "$d" ] && echo "R ${d##*Result_} $(stat -c %y "$d")"; done; '
_STAT_Y = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(\d{1,9}))?\s*([+-]\d{4})?")


def mtime(text: str) -> float | None:
    """A time in stat's %y form as seconds since the epoch; None when it is not one."""
    m = _STAT_Y.fullmatch(text.strip())
    if m is None:
        return None
    try:
        stamp = datetime.strptime(m.group(1) + (m.group(3) or "+0000"), "%Y-%m-%d %H:%M:%S%z").timestamp()
    except ValueError:
        return None
    return stamp + float("0." + (m.group(2) or "0"))


def result_times(lines: Sequence[str]) -> dict[int, float]:
    """Each RESULTS line's inference and when its folder was written; lines that do not read are left out."""
    done: dict[int, float] = {}
    for line in lines:
        kind, _, rest = line.partition(" ")
        n, _, stamp = rest.partition(" ")
        if kind == "R" and (line_no := parse_int(n)) is not None and (t := mtime(stamp)) is not None:
            done[line_no] = t
    return done


@dataclass(frozen=True)
class NetRun:
    """Where qnn-net-run runs a context binary on the phone: the folder it runs in (its inputs are there), the
    context, the folders of the QNN libraries and of the Skel, and whether the inputs are in the graph's own types
    (--use_native_input_files)."""

    workdir: str
    context: str
    lib_dir: str
    adsp_library_path: str
    native_inputs: bool = False


def run(dev: Device, where: NetRun, input_list: str = INPUT_LIST, output_dir: str = "out",
        extra: Sequence[str] = ()) -> Invocation:
    """Run qnn-net-run once in where.workdir, timed on the phone (date +%s%N) when its date can, else from the host.
    Within RUN's deadline (30 min, or --timeout) and output cap. `extra`: more options (e.g. --profiling_level)."""
    workdir, context, lib_dir = where.workdir, where.context, where.lib_dir
    env = f"LD_LIBRARY_PATH={shlex.quote(lib_dir)} ADSP_LIBRARY_PATH={shlex.quote(where.adsp_library_path)}"
    args = [REMOTE_RUNNER, "--backend", BACKEND, "--retrieve_context", context, "--input_list", input_list,
            "--output_dir", output_dir] + (["--use_native_input_files"] if where.native_inputs else []) + list(extra)
    command = f"{env} {shlex.join(args)}"
    line = (f"cd {shlex.quote(workdir)} && rm -rf {shlex.quote(output_dir)} && s=$(date +%s%N) && "
            f"{command} 2>&1; rc=$?; e=$(date +%s%N); o={shlex.quote(output_dir)}; echo {_OUTPUTS}; {RESULTS}"
            f"echo {_TIME} $s $e; exit $rc")
    start = time.perf_counter()
    r = dev.run(line, doing=f"running qnn-net-run on {posixpath.basename(context)} ({input_list})", limit=RUN)
    host = time.perf_counter() - start
    head, timed, tail = r.output.rpartition(_TIME)
    stamps = [parse_int(s) for s in tail.split()]
    s0, s1 = stamps if len(stamps) == 2 else (None, None)
    output, sep, results = (head if timed else r.output).rpartition(_OUTPUTS + "\n")
    output = output if sep else head if timed else r.output
    if s0 is not None and s1 is not None and s1 >= s0:
        first = result_times(results.splitlines()).get(0) if sep else None
        return Invocation(r.code, output, (s1 - s0) / 1e9, Clock.DEVICE, command,
                          first - s0 / 1e9 if first is not None and first * 1e9 >= s0 else None)
    return Invocation(r.code, output, host, Clock.HOST, command)


# --- known failures --------------------------------------------------------------------------------------------

@cache
def known_errors() -> tuple[tuple[str, tuple[re.Pattern[str], ...], str], ...]:
    raw = json.loads(resources.files("qnndeploy").joinpath("data/qnn_errors.json").read_text())
    return tuple((e["id"], tuple(re.compile(p, re.IGNORECASE) for p in e["patterns"]), e["advice"])
                 for e in raw["errors"])


def diagnose(output: str, **facts: str) -> list[Advice]:
    """Advice for every known QNN failure found in a run's output, in data-file order; [] when none matched."""
    values = defaultdict(lambda: "?", {k: v for k, v in facts.items() if v})
    found = []
    lines = output.splitlines()
    for error_id, patterns, advice in known_errors():
        hit = next((ln for ln in lines if any(p.search(ln) for p in patterns)), None)
        if hit is not None:
            found.append(Advice(error_id, advice.format_map(values), hit.strip()[:300]))
    return found

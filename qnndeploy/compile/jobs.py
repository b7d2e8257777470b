"""What a compile job is and what a backend does with it: the interface between the compile stage and its two
backends (ort.py, qairt.py), kept apart so that the backends never import the stage that runs them."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from qnndeploy.base import child, interrupt
from qnndeploy.base.fileio import JSON
from qnndeploy.base.kinds import BackendName, Precision
from qnndeploy.base.socs import Soc
from qnndeploy.formats.records import HtpSettings, JobRecord
from qnndeploy.model.quantize import QuantizedLayer


class CompileError(Exception):
    """One job failed; the message, one line naming the cause, is for the summary. Other jobs go on."""


def _group_running(pgid: int) -> bool:
    """Whether a process of the group `pgid` is still running: one that has exited but is not yet reaped (a zombie,
    state Z in /proc/PID/stat) is not."""
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and os.getpgid(int(entry.name)) == pgid
                    and (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"):
                return True
        except (OSError, IndexError):  # gone since the listing
            continue
    return False


class Tools:
    """Runs the jobs' tool processes, each in its own process group, and stops them all on an interrupt.

    A tool never gets the terminal's Ctrl-C itself: the runner stops it, waits for it, and only then do the job
    threads remove their partial folders, so no tool writes into the build after compile returns. A tool dies with
    the CLI (PR_SET_PDEATHSIG): a killed CLI leaves no tool finishing into the build.
    """

    GRACE_S = 5.0  # after SIGTERM, the time a tool gets before SIGKILL

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._stopping = threading.Event()  # set by stop(), from another thread

    def run(self, cmd: list[str], log: IO[str], env: dict[str, str] | None = None) -> int:
        """Run one tool to its end, its output appended to `log`; its exit code. Raises KeyboardInterrupt when
        the compile is being stopped (before the start, or because the tool was stopped)."""
        log.flush()
        with self._lock:
            if self._stopping.is_set() or interrupt.requested():
                raise KeyboardInterrupt
            proc = subprocess.Popen(child.dies_with_parent(cmd), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
            self._running.add(proc)
        try:
            code = proc.wait()
        finally:
            with self._lock:
                self._running.discard(proc)
        if self._stopping.is_set() or code in (-signal.SIGINT, 130):
            raise KeyboardInterrupt
        return code

    def stopping(self) -> bool:
        """Whether the compile is being stopped: work that runs no tool (a remote job) checks this while it waits."""
        return self._stopping.is_set() or interrupt.requested()

    def stop(self) -> None:
        """Stop every running tool and its children (SIGTERM, then SIGKILL after GRACE_S) and wait for them."""
        with self._lock:
            self._stopping.set()
            procs = list(self._running)
        self._signal(procs, signal.SIGTERM)
        deadline = time.monotonic() + self.GRACE_S
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        self._signal(procs, signal.SIGKILL)  # also a tool's child that outlived SIGTERM (or ignores it)
        for proc in procs:
            proc.wait()
        gone = time.monotonic() + self.GRACE_S  # SIGKILL is delivered when the process next runs: wait for that
        while any(_group_running(proc.pid) for proc in procs) and time.monotonic() < gone:
            time.sleep(0.01)

    @staticmethod
    def _signal(procs: list[subprocess.Popen[bytes]], sig: int) -> None:
        """Signal each tool's process group: it outlives its leader while a member is left (its number cannot be
        given to another group then); with none left, killpg fails with ESRCH."""
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)



@dataclass
class Compiled:
    """What a backend made in the job folder: (file name, format) pairs, and warnings of its own. For a shared
    context, `graphs` names the member graph of each per-graph file, and `twins` the files made only for the host
    emulator (each member compiled alone: the emulator cannot load a context whose graphs share weights)."""
    files: list[tuple[str, str]]
    warnings: list[str] = field(default_factory=list)
    graphs: dict[str, str] = field(default_factory=dict)  # file name -> member graph
    twins: list[str] = field(default_factory=list)  # file names
    shared_saving: JSON | None = None  # {"shared_bytes", "separate_bytes"}
    aihub: JSON | None = None  # backend aihub: the remote job (compile record "aihub")
    layers: dict[str, tuple[QuantizedLayer, ...]] = field(default_factory=dict)  # graph -> its quantized weights


@dataclass(frozen=True)
class Member:
    """One graph of a shared context."""
    graph: str
    model: Path
    model_sha256: str
    calibration: Path | None
    calibration_record: JSON | None = None  # {path, files, samples, sha256} for w8a16


@dataclass(frozen=True)
class CompileJob:
    graph: str  # for a shared context: its name
    model: Path  # for a shared context: the first member's model
    model_sha256: str  # for a shared context: over its members' names and hashes
    soc: Soc
    precision: Precision
    calibration: Path | None  # folder of input samples for w8a16
    options: JSON  # what the backend will do, recorded and part of the cache key
    cache_key: str
    folder: Path  # <out>/<graph>/<SoC>
    log: Path  # <out>/logs/<graph>-<SoC>.log
    members: tuple[Member, ...] = ()  # the graphs of a shared context (one binary, shared weights); () otherwise
    quantized: Path | None = None  # where this run's jobs leave their quantized graphs for the other SoCs' jobs
    # (a QDQ graph depends on the model, the samples and the settings, not on the SoC)


def with_input_paths(job: CompileJob, record: JobRecord) -> JobRecord:
    """The record (from the cache or an earlier compile) pointed at this job's model paths."""
    if job.members:
        return dataclasses.replace(record, members=tuple(
            dataclasses.replace(entry, input=dataclasses.replace(entry.input, path=str(m.model)))
            for entry, m in zip(record.members, job.members, strict=True)))
    if record.input is None:
        return record
    return dataclasses.replace(record, input=dataclasses.replace(record.input, path=str(job.model)))


class Backend(Protocol):
    """A way to turn one ONNX graph into a QNN context binary for one SoC."""

    name: BackendName
    qairt_version: str  # "2.51.0": the runtime libraries on the phone must match it

    def identity(self) -> dict[str, str]:
        """Tool versions that change the output: recorded, and part of the cache key."""

    def options(self, soc: Soc, precision: Precision, htp: HtpSettings) -> JSON:
        """The backend settings a job uses, recorded in the compile record."""

    def compile(self, job: CompileJob, work: Path, log: IO[str], tools: Tools) -> Compiled:
        """Write the job's outputs into `work` (empty), running every tool through `tools` (its output goes to
        `log`); temporary files go in `work` too, removed before returning. Raise CompileError."""

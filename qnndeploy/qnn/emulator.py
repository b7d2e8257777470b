"""Context binaries loaded and run on the host HTP emulator in a child process, against their graph's CPU model:
what `bundle verify` does beyond reading the metadata. A binary whose header is fine and whose body is not fails
contextCreateFromBinary or computes other numbers; loading it in a child costs one line when it crashes QNN, and
binaries of another QAIRT release run under that release's toolchain.

`python -P -m qnndeploy.qnn.emulator SPEC.json` is the child: for each job it writes an EPContext wrapper beside a link
to the binary (in a folder of its own: nothing is written into the bundle), runs the CPU model and the emulator on
the same seeded inputs and judges the outputs with validate's metrics. Which jobs prove a bundle, and what their
outcomes mean against its records, is verification/emulated.py's: this runs jobs and keeps each outcome by content.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from qnndeploy.base import child, compat, socs
from qnndeploy.base.errors import QnnDeployError, first_line
from qnndeploy.base.fileio import JSON, sha256_file, write_json, writing
from qnndeploy.model import decode, metrics, samples, tasks
from qnndeploy.model import split as cutting
from qnndeploy.qnn import epcontext, htp, loop, toolchain

TIMEOUT_S = 600.0  # for the whole child: a few sessions of the graphs of a bundle
CACHE_ENV = "QNNDEPLOY_EMULATED_DIR"  # where outcomes are kept by content: the same bytes are not loaded twice


@dataclass(frozen=True)
class EmulatorJob:
    binary: Path
    graph: str  # the graph's name in the bundle (its CPU model's)
    qnn_graph: str  # the graph's name inside the context binary (libQnnSystem's reading)
    soc: str
    precision: str
    cpu_model: Path
    samples: int = 1
    seed: int = 0
    thresholds: metrics.Thresholds | None = None  # validate's for the precision when None
    ranges: dict[str, tuple[int, int]] | None = None  # the integer inputs' values validate drew (its record's)
    task: str | None = None  # validate's --task for it (its record's); None: the task the graph makes plain
    folder: str | None = None  # the record's real samples, when they are still here: run on them
    preprocess: str | None = None  # how the record's audio or image files became inputs


@dataclass(frozen=True)
class LoopJob:
    """An encoder's and a decoder's binaries run as the app runs them, the decode loop the bundle names, against the
    same loop over their CPU models (validate --loop's verdict)."""

    binaries: dict[str, Path]  # graph -> its context binary
    qnn_graphs: dict[str, str]  # graph -> its name inside the binary
    cpu_models: dict[str, Path]
    soc: str
    precision: str
    loop: JSON  # decode.Loop.description's form
    tokenizer: Path | None = None
    samples: int = 1
    seed: int = 0
    thresholds: metrics.Thresholds | None = None
    folder: str | None = None  # the record's real samples (the encoder's inputs), when they are still here
    preprocess: str | None = None


@dataclass(frozen=True)
class ChainPart:
    """A split model's part as the app chains it: its CPU model, and on the NPU its context binary."""

    graph: str
    path: Path  # the CPU model
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    binary: Path | None = None  # None: the part runs on the CPU
    qnn_graph: str | None = None


@dataclass(frozen=True)
class ChainJob:
    """A split model run as the app runs it (NPU parts' binaries on the emulator, CPU parts on the CPU) against the
    same chain on the CPU, on the chain's own inputs (validate's verdict for a split's part)."""

    parts: tuple[ChainPart, ...]
    soc: str
    precision: str
    samples: int = 1
    seed: int = 0
    thresholds: metrics.Thresholds | None = None
    ranges: dict[str, tuple[int, int]] | None = None
    task: str | None = None
    folder: str | None = None
    preprocess: str | None = None


AnyJob = EmulatorJob | LoopJob | ChainJob


@dataclass
class EmulatorOutcome:
    loaded: bool
    passed: bool
    error: str | None = None
    outputs: list[JSON] = field(default_factory=list)  # validate's OutputMetrics, as JSON
    task: JSON | None = None  # the task's verdict (tasks.TaskVerdict), which decides for its output
    loop: JSON | None = None  # a LoopJob's: loop.LoopCheck.json

    @property
    def of_dead_child(self) -> bool:
        """The child hung past the time limit or died (a signal from outside too): said of that run on this host,
        nothing lasting of the bytes, so never cached (nor read back where older qnndeploy kept it)."""
        return not self.loaded and (self.error or "").startswith((HUNG, CRASHED))


STARTED = "qnndeploy-emulator-job "  # the child's stderr line as it starts job N, for the parent's `started`


def run_jobs(jobs: Sequence[AnyJob], tc: toolchain.Toolchain | None = None, timeout: float = TIMEOUT_S,
             started: Callable[[int], None] | None = None) -> list[EmulatorOutcome]:
    """Every job in one child process (under `tc` when given, else this process's onnxruntime-qnn); when a binary
    crashes that child, each job alone, so the crash is told of the binary that caused it. `started` is told the
    index of each job as the child starts it (from another thread)."""
    if not jobs:
        return []
    try:
        return _run(jobs, tc, timeout, started)
    except _Crashed as e:
        if len(jobs) == 1:
            return [EmulatorOutcome(False, False, str(e))]
    return [run_jobs([j], tc, timeout, None if started is None else functools.partial(_as_job, started, k))[0]
            for k, j in enumerate(jobs)]


def _as_job(started: Callable[[int], None], k: int, _alone: int) -> None:
    """A job run alone (index 0 in its own child) told as the index it has among the jobs given."""
    started(k)


def child_spec(jobs: Sequence[AnyJob], work: Path, result: Path) -> str:
    """The child's SPEC.json: its jobs, the folder it works in and the file it writes their outcomes to."""
    return json.dumps({"work": str(work), "result": str(result),
                       "jobs": [{**asdict(j), "kind": type(j).__name__} for j in jobs]}, default=str)


# How the parent tells of a dead child: a hang past the time limit, a crash.
HUNG, CRASHED = "the host HTP emulator did not finish loading", "the host HTP emulator crashed loading"


class _Crashed(QnnDeployError):
    """The child died or hung on these jobs (a binary's fault); any other error is the machine's (a full TMPDIR)."""


def _run(jobs: Sequence[AnyJob], tc: toolchain.Toolchain | None, timeout: float,
         started: Callable[[int], None] | None = None) -> list[EmulatorOutcome]:
    with tempfile.TemporaryDirectory(prefix="qnndeploy-emulator-") as tmp:
        spec, result = Path(tmp) / "jobs.json", Path(tmp) / "result.json"
        with writing(tmp):
            spec.write_text(child_spec(jobs, Path(tmp), result))
        env = toolchain.environ(tc) if tc is not None else child.environ()
        errors: list[str] = []
        proc = subprocess.Popen(child.module("qnn.emulator", str(spec)), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)

        def read_stderr() -> None:  # the child's job starts, told as they happen; the rest kept for a crash
            assert proc.stderr is not None
            for line in proc.stderr:
                if line.startswith(STARTED) and line[len(STARTED):].strip().isdigit():
                    if started is not None:
                        started(int(line[len(STARTED):]))
                else:
                    errors.append(line)

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise _Crashed(f"{HUNG} the context binaries in {timeout:g} s") from None
        except BaseException:  # Ctrl-C, SIGTERM: the child goes too, as under subprocess.run
            proc.kill()
            proc.wait()
            raise
        finally:
            reader.join(timeout=5)
        if not result.is_file():
            why = f"signal {-returncode}" if returncode < 0 else f"exit {returncode}"
            last = "".join(errors).strip().splitlines()[-1:] or ["no output"]
            raise _Crashed(f"{CRASHED} the context binaries ({why}): {first_line(Exception(last[0]))}")
        return [EmulatorOutcome(**o) for o in json.loads(result.read_text())]


# --- run once, kept by content ---------------------------------------------------------------------------------

def emulator_for(qairt: str) -> tuple[toolchain.Toolchain | None, str | None]:
    """(the toolchain to run QAIRT `qairt` binaries under (None: this process's), why none can), without
    installing anything: verify never downloads."""
    here = toolchain.current()
    if here is None:
        return None, "onnxruntime-qnn is not installed"
    tc = toolchain.for_qairt(qairt)
    if tc is not None and (toolchain.is_current(tc) or toolchain.installed(tc)):
        return (None if toolchain.is_current(tc) else tc), None
    if compat.loads(qairt, here.qairt):
        return None, None
    family = ".".join(qairt.split(".")[:2])
    return None, (f"the emulator here is QAIRT {here.qairt}, which does not load QAIRT {qairt} binaries "
                  f"(`qnndeploy compile --qairt {family}` installs that release's)")


def _key(job: AnyJob, tc: toolchain.Toolchain | None, shas: list[str]) -> str:
    """A job's outcome's name in the cache: the bytes it runs (binaries, CPU models, tokenizer, sample files) and
    everything else that decides it."""
    here = tc or toolchain.current()
    files = ([(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(Path(job.folder).iterdir())]
             if job.folder else [])
    models = [job.cpu_model] if isinstance(job, EmulatorJob) else list(job.cpu_models.values()) \
        if isinstance(job, LoopJob) else [p.path for p in job.parts]
    fields = {k: v for k, v in asdict(job).items() if k not in ("binary", "binaries", "cpu_model", "cpu_models",
                                                                 "tokenizer", "parts")}
    if isinstance(job, ChainJob):
        fields["parts"] = [(p.graph, p.inputs, p.outputs, p.qnn_graph) for p in job.parts]
    data = [type(job).__name__, shas, [sha256_file(m) for m in models], here.qairt if here else "", fields, files]
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def cache_dir() -> Path:
    """$QNNDEPLOY_EMULATED_DIR, else $XDG_CACHE_HOME/qnndeploy/emulated, else ~/.cache/qnndeploy/emulated."""
    if env := os.environ.get(CACHE_ENV):
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qnndeploy" / "emulated"


def run_cached(jobs: Sequence[tuple[str, AnyJob, list[str]]], tc: toolchain.Toolchain | None,
               steps: Callable[[str], None] | None = None, timeout: float = TIMEOUT_S) -> list[EmulatorOutcome]:
    """Each job's outcome, from the cache by content where it was run before, else run now (and kept, unless the
    child died or hung on it). A job is (the bundle path it is told by, the job, the sha256 of the bundle files it
    runs); `steps` is told of each job as the child starts it; `timeout`: the seconds the child may take."""
    keys = [_key(job, tc, shas) for _, job, shas in jobs]
    cached: dict[str, EmulatorOutcome] = {}
    for key in keys:
        with contextlib.suppress(OSError, ValueError, TypeError):  # a cache miss
            kept = EmulatorOutcome(**json.loads((cache_dir() / f"{key}.json").read_text()))
            if not kept.of_dead_child:
                cached[key] = kept
    todo = [(path, job, key) for (path, job, _), key in zip(jobs, keys, strict=True) if key not in cached]
    if steps is not None and len(todo) < len(jobs):
        steps(f"{len(jobs) - len(todo)} of {len(jobs)} emulator run(s) from the cache (run before on the same bytes)")

    def started(k: int) -> None:
        if steps is not None:
            path, job, _ = todo[k]
            how = " as the decode loop" if isinstance(job, LoopJob) else " as the split's chain" if isinstance(
                job, ChainJob) else ""
            steps(f"running {path}{how} on the host HTP emulator ({k + 1} of {len(todo)})")

    for (_, _, key), outcome in zip(todo, run_jobs([j for _, j, _ in todo], tc, timeout, started), strict=True):
        cached[key] = outcome
        if outcome.of_dead_child:
            continue
        with contextlib.suppress(OSError, ValueError, TypeError):  # a cache miss
            write_json(cache_dir() / f"{key}.json", asdict(outcome))
    return [cached[key] for key in keys]


# --- the child ------------------------------------------------------------------------------------------------------

References = dict[tuple[str, str, int, int, str], tuple[list[samples.Sample], list[samples.Sample]]]


def _one(job: JSON, work: Path, references: References) -> EmulatorOutcome:
    """Load and run one binary; `references` keeps each graph's CPU inputs and outputs by (model, graph, samples,
    seed), so that the binaries of one graph for several SoCs run its CPU model once."""
    model = Path(job["cpu_model"])
    wrapper = _wrapped(Path(job["binary"]), job["qnn_graph"], model, work)
    key = (str(model), job["graph"], job["samples"], job["seed"],
           json.dumps([job.get("ranges"), job.get("folder"), job.get("preprocess")], sort_keys=True))
    if key not in references:
        if job.get("folder"):
            feeds, _ = samples.for_graph(model, job["graph"], Path(job["folder"]), preprocess=job.get("preprocess"))
        else:
            ranges = {name: (lo, hi) for name, (lo, hi) in (job.get("ranges") or {}).items()}
            feeds, _ = samples.for_graph(model, job["graph"], count=job["samples"], seed=job["seed"], ranges=ranges)
        references[key] = feeds, samples.cpu_outputs(model, feeds)
    feeds, expected = references[key]
    try:
        call = htp.session(wrapper, socs.find(job["soc"]), fp16=job["precision"] == "fp16")
        actual = [call(s) for s in feeds]
    except QnnDeployError as e:  # the binary does not load or run
        return EmulatorOutcome(False, False, str(e))
    limits = job["thresholds"] or metrics.thresholds_for(job["precision"])
    judged, verdict, passed = tasks.judge(tasks.recorded(job.get("task"), model), model, expected, actual, limits)
    return EmulatorOutcome(True, passed, None, [asdict(m) for m in judged], verdict.json() if verdict else None)


def _wrapped(binary: Path, qnn_graph: str, model: Path, work: Path) -> Path:
    """An EPContext wrapper of a binary's graph, beside a link to the binary, in a folder of its own under work."""
    folder = Path(tempfile.mkdtemp(dir=work))
    (folder / "ctx.bin").symlink_to(binary.resolve())
    epcontext.wrap("ctx.bin", qnn_graph, model, folder / "ctx.onnx")
    return folder / "ctx.onnx"


def _one_chain(job: JSON, work: Path, references: References) -> EmulatorOutcome:
    """The split chained with its NPU parts on the emulator against the chain on the CPU, on the chain's inputs."""
    parts = [ChainPart(p["graph"], Path(p["path"]), tuple(p["inputs"]), tuple(p["outputs"]),
                       Path(p["binary"]) if p["binary"] else None, p["qnn_graph"]) for p in job["parts"]]
    ranges = {name: (lo, hi) for name, (lo, hi) in (job.get("ranges") or {}).items()}
    specs, int_ranges = cutting.chain_inputs(parts, ranges)
    graph = next(p.graph for p in parts if p.binary is not None)
    folder = Path(job["folder"]) if job.get("folder") else None
    feeds, _ = samples.for_inputs(specs, int_ranges, graph, folder, job["samples"], job["seed"],
                                  job.get("preprocess"))
    expected = cutting.run_chain(parts, feeds, lambda p, f: samples.cpu_outputs(p.path, f))
    soc, fp16 = socs.find(job["soc"]), job["precision"] == "fp16"

    def runner(part: ChainPart, f: list[samples.Sample]) -> list[samples.Sample]:
        if part.binary is None or part.qnn_graph is None:
            return samples.cpu_outputs(part.path, f)
        call = htp.session(_wrapped(part.binary, part.qnn_graph, part.path, work), soc, fp16=fp16)
        return [call(x) for x in f]

    try:
        actual = cutting.run_chain(parts, feeds, runner)
    except QnnDeployError as e:  # a binary does not load or run
        return EmulatorOutcome(False, False, str(e))
    last = parts[-1]
    limits = job["thresholds"] or metrics.thresholds_for(job["precision"])
    judged, verdict, passed = tasks.judge(tasks.recorded(job.get("task"), last.path), last.path,
                                          [{n: v[n] for n in last.outputs} for v in expected],
                                          [{n: v[n] for n in last.outputs} for v in actual], limits)
    return EmulatorOutcome(True, passed, None, [asdict(m) for m in judged], verdict.json() if verdict else None)


def _one_loop(job: JSON, work: Path, references: References) -> EmulatorOutcome:
    """The decode loop on the emulator (the encoder's and decoder's binaries, or their parts') against the same
    loop on their CPU models, on the encoder's samples."""
    looped = decode.described(job["loop"], Path(job["tokenizer"]) if job.get("tokenizer") else None)
    models = {g: Path(m) for g, m in job["cpu_models"].items()}
    wrappers = {g: _wrapped(Path(b), job["qnn_graphs"][g], models[g], work) for g, b in job["binaries"].items()}
    first = looped.encoders[0]  # it reads the encoder's samples (a split encoder's later parts: what it makes)
    if job.get("folder"):
        features, used = samples.for_graph(models[first], first, Path(job["folder"]),
                                           preprocess=job.get("preprocess"))
    else:
        features, used = samples.for_graph(models[first], first, count=job["samples"], seed=job["seed"])
    cpu = loop.run_cpu(looped, models, features, used)
    soc, fp16 = job["soc"], job["precision"] == "fp16"
    try:
        encoder = loop.npu_call(looped.encoders, models, wrappers, soc, fp16)
        encoded = [encoder(f) for f in features]
        decoder = loop.npu_call(looped.decoders, models, wrappers, soc, fp16)
        npu = loop.run_npu(looped, encoded, decoder, loop.cache_shapes(looped, models))
    except QnnDeployError as e:
        return EmulatorOutcome(False, False, str(e))
    limits = job["thresholds"] or metrics.thresholds_for(job["precision"])
    check = loop.judge(looped, job["soc"], cpu, npu, limits)
    return EmulatorOutcome(True, check.passed, loop=check.json())


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    outcomes, references = [], References()
    for k, job in enumerate(spec["jobs"]):
        print(f"{STARTED}{k}", file=sys.stderr, flush=True)  # the parent's progress: job k starts
        try:
            run = {LoopJob.__name__: _one_loop, ChainJob.__name__: _one_chain}.get(job["kind"], _one)
            outcomes.append(run(job, Path(spec["work"]), references))
        except QnnDeployError as e:
            outcomes.append(EmulatorOutcome(False, False, str(e)))
    write_json(Path(spec["result"]), [asdict(o) for o in outcomes])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

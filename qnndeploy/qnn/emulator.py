"""Context binaries loaded and run on the host HTP emulator in a child process, against their graph's CPU model:
what `bundle verify` does beyond reading the metadata. A binary whose header is fine and whose body is not fails
contextCreateFromBinary or computes other numbers; loading it in a child costs one line when it crashes QNN, and
binaries of another QAIRT release run under that release's toolchain.

`python -P -m qnndeploy.qnn.emulator SPEC.json` is the child: for each job it writes an EPContext wrapper beside a link
to the binary (in a folder of its own: nothing is written into the bundle), runs the CPU model and the emulator on
the same seeded inputs and judges the outputs with validate's metrics.
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
from qnndeploy.base.names import CONTEXT_BINARY, ONNX, artifact_graphs
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
            raise _Crashed(f"the host HTP emulator did not finish loading the context binaries in {timeout:g} "
                           "s") from None
        except BaseException:  # Ctrl-C, SIGTERM: the child goes too, as under subprocess.run
            proc.kill()
            proc.wait()
            raise
        finally:
            reader.join(timeout=5)
        if not result.is_file():
            why = f"signal {-returncode}" if returncode < 0 else f"exit {returncode}"
            last = "".join(errors).strip().splitlines()[-1:] or ["no output"]
            raise _Crashed(f"the host HTP emulator crashed loading the context binaries ({why}): "
                           f"{first_line(Exception(last[0]))}")
        return [EmulatorOutcome(**o) for o in json.loads(result.read_text())]


# --- a bundle's binaries --------------------------------------------------------------------------------------------

@dataclass
class EmulatorCheck:
    """What loading a bundle's context binaries on the host emulator found: problems (a binary that does not load,
    or that computes other numbers than its CPU model on validate's own inputs), warnings (other numbers on inputs
    that are not validate's), and what was done, for the report."""

    problems: list[tuple[str, str]] = field(default_factory=list)  # (bundle path, message)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    done: str = ""

    def differs(self, path: str, what: str, strict: bool, verdict: str = "passed") -> None:
        """Other results than the record's: a problem on the record's own inputs (`strict`), else a warning."""
        if strict:
            self.problems.append((path, f"{what}, the inputs its validation record {verdict} on"))
        else:
            self.warnings.append((path, f"{what} (the bundle was validated on other inputs)"))


def _on(job: AnyJob) -> str:
    """The inputs a job ran on, in words."""
    return f"its record's samples in {job.folder}" if job.folder else f"{job.samples} seeded input(s)"


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


ACCEPTED_SLACK_DB = 3.0  # the deep check may run fewer samples than validate did (at most 8): its SNR may differ


TASK_FIGURES = {"top1_agreement": (1, "top-1 agreement"), "error_rate": (-1, "text error rate"),
                "min_cosine": (1, "embedding cosine")}  # figure -> (+1: higher is better, -1: lower), its name


def _worse_task(now: JSON | None, recorded: JSON | None) -> str | None:
    """A task verdict clearly worse than the accepted record's, on its own figure, said in words, or None."""
    if not now or not recorded or recorded.get("passed") is not False or now.get("passed"):
        return None
    was, got = recorded.get("figures") or {}, now.get("figures") or {}
    for key, (sign, label) in TASK_FIGURES.items():
        if isinstance(was.get(key), (int, float)) and isinstance(got.get(key), (int, float)):
            slack = 1e-3 if key == "min_cosine" else 0.0
            if sign * (got[key] - was[key]) < -slack:
                return f"{now.get('output')} {label} {got[key]:.4g}, the record's {was[key]:.4g}"
    return None


def _worse(outputs: list[JSON], recorded: list[JSON]) -> str | None:
    """The first output whose figures are clearly worse than the validation record's, said in words, or None: each
    compared on the figure its record was judged on (SNR, cosine, max abs diff for a near-zero reference, the
    Jaccard index of a top-k set), so anything bundle build accepted can be checked again."""
    by_name = {r.get("name"): r for r in recorded}
    for o in outputs:
        r = by_name.get(o["name"], {})
        if r.get("passed") is True and o.get("passed"):
            continue
        judged = str(r.get("judged_on") or "")
        holds: Callable[[float, float], bool]
        if judged == "topk_set":
            key, label, form, holds = "topk_jaccard", "Jaccard index", "{:.2f}", lambda now, was: now >= was
        elif judged.endswith("max_abs_diff"):
            key, label, form, holds = "max_abs_diff", "max abs diff", "{:.3g}", lambda now, was: now <= was * 1.5
        elif isinstance(r.get("snr_db"), (int, float)):
            key, label, form = "snr_db", "SNR", "{:.1f} dB"
            holds = lambda now, was: now >= was - ACCEPTED_SLACK_DB  # noqa: E731 one line of four
        else:
            key, label, form, holds = "cosine", "cosine", "{:.4f}", lambda now, was: now >= was - 1e-3
        now, was = o.get(key), r.get(key)
        if not isinstance(was, (int, float)) and r.get("passed") is False:
            continue  # accepted with no figure (a NaN): nothing measured can be worse
        if not isinstance(now, (int, float)) or not isinstance(was, (int, float)):
            if not o.get("passed"):
                return f"output {o['name']} fails and the record has no {label} to compare it with"
        elif not holds(now, was):
            return f"output {o['name']} {label} {form.format(now)}, the record's {form.format(was)}"
    return None


def _validation(root: Path, manifest: JSON, graph: str, soc: str) -> JSON | None:
    """The bundle's validation record of (graph, SoC), when it holds one (bundle build --from-build copies them)."""
    name = f"records/{graph}-{soc}-validation.json"
    if not any(r["path"] == name for r in manifest.get("records") or []):
        return None
    try:
        record: JSON = json.loads((root / name).read_text())
    except (OSError, ValueError):
        return None
    return record


def _samples_here(inputs: JSON) -> Path | None:
    """The folder of a record's real samples, when it still holds the very files the record lists."""
    folder = inputs.get("folder") if inputs.get("kind") == "files" else None
    listed = inputs.get("files")
    if not isinstance(folder, str) or not isinstance(listed, list) or not Path(folder).is_dir():
        return None
    here = [p.name for p in (*samples.sample_files(Path(folder)), *samples.media_files(Path(folder)))]
    return Path(folder) if sorted(here) == sorted(str(f) for f in listed) else None


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


def check_bundle(root: Path, manifest: JSON, graph_names: dict[str, list[str]],
                 steps: Callable[[str], None] | None = None) -> EmulatorCheck:
    """Load every context binary of a bundle on the host emulator and compare it with its graph's CPU model.

    graph_names: bundle path of each context binary -> the graph names libQnnSystem read from it. A binary shared by
    several graphs is not loaded (the host emulator cannot load a context whose graphs share weights). The inputs
    are validate's when the bundle holds its validation record and can make them again (seeded random inputs, or the
    record's sample files, still in the folder it names; then a difference is a problem), else one seeded random
    sample judged by validate's thresholds for the precision (a warning: the bundle was validated on inputs it does
    not hold). The encoder and decoder of the bundle's decode loop are run as the loop, as validate ran them.
    `steps` is told of each binary (or loop, or chain) as the emulator starts it."""
    found = EmulatorCheck()
    tc, why = emulator_for(manifest["qairt"]["version"])
    if why is not None:
        found.warnings.append(("manifest.json", f"context binaries not loaded on the host emulator: {why}"))
        found.done = f"not loaded ({why})"
        return found
    cpu = {a["graph"]: root / a["path"] for a in manifest["cpu"] if a["format"] == ONNX}
    looped: JSON | None = manifest.get("loop")
    in_loop = {looped["encoder"], looped["decoder"]} if looped else set()
    chained = list(manifest.get("pipeline") or [])  # a split's parts, in the order the app runs them
    jobs: list[tuple[str, AnyJob, bool, str]] = []  # (bundle path, job, strict, cache key)
    accepted: dict[str, tuple[list[JSON], JSON | None]] = {}  # bundle path -> its failed (accepted) record's verdicts
    for t in manifest["targets"]:
        loop_parts: dict[str, tuple[JSON, str]] = {}  # graph -> its binary's artifact, its name in the binary
        for a in t["artifacts"]:
            names = graph_names.get(a["path"], [])
            if a["format"] != CONTEXT_BINARY or len(artifact_graphs(a)) != 1 or len(names) != 1:
                continue
            graph = artifact_graphs(a)[0]
            if graph not in cpu:
                continue
            if graph in in_loop or graph in chained:
                loop_parts[graph] = (a, names[0])
                continue
            record = _validation(root, manifest, graph, t["soc"])
            inputs = (record or {}).get("inputs") or {}
            folder, strict, count, seed = _replay(inputs)
            job = EmulatorJob(root / a["path"], graph, names[0], t["soc"], t["precision"], cpu[graph], samples=count,
                              seed=seed, thresholds=(record or {}).get("thresholds") if strict else None,
                              ranges=samples.recorded_ranges(inputs) or None,
                              task=((record or {}).get("task") or {}).get("given"),
                              folder=str(folder) if folder is not None else None,
                              preprocess=samples.recorded_preprocess(inputs) if folder is not None else None)
            jobs.append((a["path"], job, strict, _key(job, tc, [a["sha256"]])))
            if strict and record is not None and record.get("passed") is False:
                accepted[a["path"]] = (list(record.get("outputs") or []), record.get("task"))
        if looped and len(loop_parts) == 2:
            jobs.append(_loop_job(root, manifest, looped, t, loop_parts, cpu, tc))
        elif chained and loop_parts:
            jobs.append(_chain_job(root, manifest, chained, t, loop_parts, cpu, tc))
    outcomes = _outcomes(jobs, tc, steps)
    for (path, ran, strict, _), outcome in zip(jobs, outcomes, strict=True):
        if isinstance(ran, LoopJob):
            _judge_loop(found, root, manifest, path, ran, strict, outcome)
            continue
        if isinstance(ran, ChainJob):
            _judge_chain(found, root, manifest, path, ran, strict, outcome)
            continue
        on = _on(ran)
        if not outcome.loaded:
            found.problems.append((path, f"does not load on the host HTP emulator: {outcome.error}"))
        elif path in accepted:  # failed validation, shipped by --accept: it must not be worse than what was accepted
            outputs, task = accepted[path]
            worse = _worse_task(outcome.task, task) or _worse(
                [o for o in outcome.outputs if o["name"] not in tasks.decided(task)], outputs)
            if worse is not None:
                why = f"computes worse numbers than its accepted validation record on {on}"
                found.problems.append((path, f"{why}: {worse}"))
        elif not outcome.passed:
            bad = next((o for o in outcome.outputs if not o["passed"] and o["name"] not in tasks.decided(outcome.task)),
                       None)
            what = (f"computes other numbers than its CPU model on {on}: " + (
                f"output {bad['name']} cosine {bad['cosine']}, SNR {bad['snr_db']} dB" if bad is not None else
                f"{(outcome.task or {}).get('kind')}: {(outcome.task or {}).get('summary')}"))
            found.differs(path, what, strict)
    here = tc or toolchain.current()
    binaries = sum(1 if isinstance(job, EmulatorJob) else 2 if isinstance(job, LoopJob) else
                   sum(p.binary is not None for p in job.parts) for _, job, _, _ in jobs)
    on_files = sum(1 for _, job, _, _ in jobs if job.folder)
    loops = sum(1 for _, job, _, _ in jobs if isinstance(job, LoopJob))
    chains = sum(1 for _, job, _, _ in jobs if isinstance(job, ChainJob))
    found.done = (f"{binaries} context binar{'y' if binaries == 1 else 'ies'} loaded and run on the host HTP "
                  f"emulator (QAIRT {here.qairt if here else '?'}) against the CPU models"
                  + (f", {loops} as the decode loop" if loops else "")
                  + (f", {chains} chained with the split's CPU part{'s' if chains > 1 else ''}" if chains else "")
                  + (f", {on_files} on the sample files of {'its' if on_files == 1 else 'their'} validation "
                     "record" if on_files else ""))
    return found


def _replay(inputs: JSON) -> tuple[Path | None, bool, int, int]:
    """How a record's samples are made again: (the folder of its sample files, still here; whether they are its
    very samples; how many seeded random ones; their seed). Neither: one seeded random sample, not the record's."""
    folder = _samples_here(inputs)
    strict = folder is not None or (inputs.get("kind") == "random" and isinstance(inputs.get("samples"), int))
    seeded = strict and folder is None
    return folder, strict, min(int(inputs["samples"]), 8) if seeded else 1, int(inputs.get("seed", 0)) if seeded else 0


def _loop_job(root: Path, manifest: JSON, looped: JSON, target: JSON, parts: dict[str, tuple[JSON, str]],
              cpu: dict[str, Path], tc: toolchain.Toolchain | None) -> tuple[str, LoopJob, bool, str]:
    """The decode loop on one target, on the encoder's samples its validation record names (the loop's own)."""
    soc = target["soc"]
    record = _validation(root, manifest, looped["encoder"], soc) or {}
    made = ((record.get("inputs") or {}).get("samples") or {}) if (record.get("inputs") or {}).get("kind") == "loop" \
        else {}
    folder, strict, count, seed = _replay(made)
    tokenizer = looped.get("tokenizer")
    job = LoopJob({g: root / a["path"] for g, (a, _) in parts.items()}, {g: n for g, (_, n) in parts.items()},
                  {g: cpu[g] for g in parts}, soc, target["precision"],
                  {k: v for k, v in looped.items() if k != "tokenizer"},
                  root / tokenizer["path"] if tokenizer else None, count, seed,
                  record.get("thresholds") if strict else None, str(folder) if folder is not None else None,
                  samples.recorded_preprocess(made) if folder is not None else None)
    shas = [a["sha256"] for a, _ in parts.values()] + ([tokenizer["sha256"]] if tokenizer else [])
    return parts[looped["decoder"]][0]["path"], job, strict, _key(job, tc, shas)


def _chain_job(root: Path, manifest: JSON, pipeline: list[str], target: JSON, parts: dict[str, tuple[JSON, str]],
               cpu: dict[str, Path], tc: toolchain.Toolchain | None) -> tuple[str, ChainJob, bool, str]:
    """A split on one target, chained as the app runs it, on the chain samples the first NPU part's validation
    record names."""
    soc, first = target["soc"], next(g for g in pipeline if g in parts)
    record = _validation(root, manifest, first, soc) or {}
    inputs = record.get("inputs") or {}
    made = (inputs.get("samples") or {}) if inputs.get("kind") == "chain" else {}
    folder, strict, count, seed = _replay(made)
    signature = {g["name"]: g for g in manifest["graphs"]}
    job = ChainJob(tuple(ChainPart(g, cpu[g], tuple(t["name"] for t in signature[g]["inputs"]),
                                   tuple(t["name"] for t in signature[g]["outputs"]),
                                   root / parts[g][0]["path"] if g in parts else None,
                                   parts[g][1] if g in parts else None) for g in pipeline),
                   soc, target["precision"], count, seed, record.get("thresholds") if strict else None,
                   samples.recorded_ranges(made) or None, (record.get("task") or {}).get("given"),
                   str(folder) if folder is not None else None,
                   samples.recorded_preprocess(made) if folder is not None else None)
    return parts[first][0]["path"], job, strict, _key(job, tc, [a["sha256"] for a, _ in parts.values()])


def _judge_chain(found: EmulatorCheck, root: Path, manifest: JSON, path: str, job: ChainJob, strict: bool,
                 outcome: EmulatorOutcome) -> None:
    """The chain's outputs against the CPU chain's, as validate judged them (an accepted failure no worse than its
    record's chain)."""
    on = _on(job)
    if not outcome.loaded:
        found.problems.append((path, f"the split does not run on the host HTP emulator: {outcome.error}"))
        return
    first = next(p.graph for p in job.parts if p.binary is not None)
    record = _validation(root, manifest, first, job.soc) or {}
    was = record.get("chain") or {}
    if strict and was.get("passed") is False:
        worse = _worse(outcome.outputs, list(was.get("outputs") or []))
        if worse is not None:
            why = f"the split computes worse numbers than its accepted validation record on {on}"
            found.problems.append((path, f"{why}: {worse}"))
        return
    if outcome.passed:
        return
    bad = next((o for o in outcome.outputs if not o["passed"]), None)
    what = (f"the split, chained as the app runs it, computes other numbers than on the CPU on {on}"
            + (f": output {bad['name']} cosine {bad['cosine']}, SNR {bad['snr_db']} dB" if bad else ""))
    found.differs(path, what, strict)


def _judge_loop(found: EmulatorCheck, root: Path, manifest: JSON, path: str, job: LoopJob, strict: bool,
                outcome: EmulatorOutcome) -> None:
    """The loop's texts against the CPU's, as validate judged them: a problem when the record's own samples give
    another verdict (or, for an accepted failure, a higher error rate) than the record says."""
    on = _on(job)
    if not outcome.loaded:
        found.problems.append((path, f"the decode loop does not run on the host HTP emulator: {outcome.error}"))
        return
    check = outcome.loop or {}
    rate = check.get("error_rate")
    was = (_validation(root, manifest, job.loop["decoder"], job.soc) or {}).get("loop") or {}
    accepted = strict and was.get("passed") is False
    if outcome.passed or (accepted and isinstance(rate, (int, float)) and rate <= (was.get("error_rate") or 0)):
        return  # as validate judged it, or an accepted failure no worse than its record
    parted = next((s for s in check.get("samples") or [] if s.get("cpu") != s.get("npu")), None)
    what = (f"the decode loop gives other text on the NPU than on the CPU on {on}: word error rate {rate}"
            + (f" (sample {parted['sample']}: CPU {parted['cpu']!r}, NPU {parted['npu']!r})" if parted else ""))
    found.differs(path, what, strict, "accepted" if accepted else "passed")


def _outcomes(jobs: list[tuple[str, AnyJob, bool, str]], tc: toolchain.Toolchain | None,
              steps: Callable[[str], None] | None = None) -> list[EmulatorOutcome]:
    """Each job's outcome, from the cache by content where it was run before, else run now (and kept)."""
    cached: dict[str, EmulatorOutcome] = {}
    for _, _, _, key in jobs:
        with contextlib.suppress(OSError, ValueError, TypeError):  # a cache miss
            cached[key] = EmulatorOutcome(**json.loads((cache_dir() / f"{key}.json").read_text()))
    todo = [(path, job, key) for path, job, _, key in jobs if key not in cached]
    if steps is not None and len(todo) < len(jobs):
        steps(f"{len(jobs) - len(todo)} of {len(jobs)} emulator run(s) from the cache (run before on the same bytes)")

    def started(k: int) -> None:
        if steps is not None:
            path, job, _ = todo[k]
            how = " as the decode loop" if isinstance(job, LoopJob) else " as the split's chain" if isinstance(
                job, ChainJob) else ""
            steps(f"running {path}{how} on the host HTP emulator ({k + 1} of {len(todo)})")

    for (_, _, key), outcome in zip(todo, run_jobs([j for _, j, _ in todo], tc, started=started), strict=True):
        cached[key] = outcome
        with contextlib.suppress(OSError, ValueError, TypeError):  # a cache miss
            write_json(cache_dir() / f"{key}.json", asdict(outcome))
    return [cached[key] for _, _, _, key in jobs]


# --- the child ------------------------------------------------------------------------------------------------------

References = dict[tuple[str, str, int, int, str], tuple[list[samples.Sample], list[samples.Sample]]]


def _one(job: JSON, work: Path, references: References) -> EmulatorOutcome:
    """Load and run one binary; `references` keeps each graph's CPU inputs and outputs by (model, graph, samples,
    seed), so that the binaries of one graph for several SoCs run its CPU model once."""
    import onnxruntime as ort

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
        with htp.quiet_native_stdout():
            session = ort.InferenceSession(str(wrapper), htp.session_options(socs.find(job["soc"]),
                                                                             fp16=job["precision"] == "fp16"))
            names = [o.name for o in session.get_outputs()]
            actual = [dict(zip(names, session.run(None, s), strict=True)) for s in feeds]
    except Exception as e:  # noqa: BLE001 onnxruntime's own error types: the binary does not load or run
        return EmulatorOutcome(False, False, first_line(e))
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
    import onnxruntime as ort

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
        session = ort.InferenceSession(str(_wrapped(part.binary, part.qnn_graph, part.path, work)),
                                       htp.session_options(soc, fp16=fp16))
        names = [o.name for o in session.get_outputs()]
        return [dict(zip(names, session.run(None, x), strict=True)) for x in f]

    try:
        with htp.quiet_native_stdout():
            actual = cutting.run_chain(parts, feeds, runner)
    except Exception as e:  # noqa: BLE001 onnxruntime's own error types: a binary does not load or run
        return EmulatorOutcome(False, False, first_line(e))
    last = parts[-1]
    limits = job["thresholds"] or metrics.thresholds_for(job["precision"])
    judged, verdict, passed = tasks.judge(tasks.recorded(job.get("task"), last.path), last.path,
                                          [{n: v[n] for n in last.outputs} for v in expected],
                                          [{n: v[n] for n in last.outputs} for v in actual], limits)
    return EmulatorOutcome(True, passed, None, [asdict(m) for m in judged], verdict.json() if verdict else None)


def _one_loop(job: JSON, work: Path, references: References) -> EmulatorOutcome:
    """The decode loop on the emulator (the encoder's and decoder's binaries) against the same loop on their CPU
    models, on the encoder's samples."""
    looped = decode.described(job["loop"], Path(job["tokenizer"]) if job.get("tokenizer") else None)
    models = {g: Path(m) for g, m in job["cpu_models"].items()}
    wrappers = {g: _wrapped(Path(b), job["qnn_graphs"][g], models[g], work) for g, b in job["binaries"].items()}
    encoder = models[looped.encoder]
    if job.get("folder"):
        features, used = samples.for_graph(encoder, looped.encoder, Path(job["folder"]),
                                           preprocess=job.get("preprocess"))
    else:
        features, used = samples.for_graph(encoder, looped.encoder, count=job["samples"], seed=job["seed"])
    cpu = loop.run_cpu(looped, models, features, used)
    soc, fp16 = socs.find(job["soc"]), job["precision"] == "fp16"
    try:
        encoded = [htp.session(wrappers[looped.encoder], soc, fp16=fp16)(f) for f in features]
        npu = loop.run_npu(looped, encoded, wrappers[looped.decoder], job["soc"], fp16, models[looped.decoder])
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

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
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from qnndeploy.base import child, compat, socs
from qnndeploy.base.errors import QnnDeployError, first_line
from qnndeploy.base.fileio import JSON, sha256_file, write_json, writing
from qnndeploy.base.names import CONTEXT_BINARY, ONNX, artifact_graphs
from qnndeploy.model import metrics, samples, tasks
from qnndeploy.qnn import epcontext, htp, toolchain

TIMEOUT_S = 600.0  # for the whole child: a few sessions of the graphs of a bundle
CACHE_ENV = "QNNDEPLOY_EMULATED_DIR"  # where outcomes are kept by content: the same bytes are not loaded twice


@dataclass(frozen=True)
class Job:
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


@dataclass
class Outcome:
    loaded: bool
    passed: bool
    error: str | None = None
    outputs: list[JSON] = field(default_factory=list)  # validate's OutputMetrics, as JSON
    task: JSON | None = None  # the task's verdict (tasks.TaskVerdict), which decides for its output


def run_jobs(jobs: list[Job], tc: toolchain.Toolchain | None = None, timeout: float = TIMEOUT_S) -> list[Outcome]:
    """Every job in one child process (under `tc` when given, else this process's onnxruntime-qnn); when a binary
    crashes that child, each job alone, so the crash is told of the binary that caused it."""
    if not jobs:
        return []
    try:
        return _run(jobs, tc, timeout)
    except _Crashed as e:
        if len(jobs) == 1:
            return [Outcome(False, False, str(e))]
    return [run_jobs([j], tc, timeout)[0] for j in jobs]


class _Crashed(QnnDeployError):
    """The child died or hung on these jobs (a binary's fault); any other error is the machine's (a full TMPDIR)."""


def _run(jobs: list[Job], tc: toolchain.Toolchain | None, timeout: float) -> list[Outcome]:
    with tempfile.TemporaryDirectory(prefix="qnndeploy-emulator-") as tmp:
        spec, result = Path(tmp) / "jobs.json", Path(tmp) / "result.json"
        with writing(tmp):
            spec.write_text(json.dumps({"work": tmp, "result": str(result),
                                        "jobs": [{**asdict(j), "binary": str(j.binary), "cpu_model": str(j.cpu_model)}
                                                 for j in jobs]}))
        env = toolchain.environ(tc) if tc is not None else child.environ()
        try:
            done = subprocess.run(child.module("qnn.emulator", str(spec)), capture_output=True, text=True, env=env,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise _Crashed(f"the host HTP emulator did not finish loading the context binaries in {timeout:g} "
                           "s") from None
        if not result.is_file():
            why = f"signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
            last = done.stderr.strip().splitlines()[-1:] or ["no output"]
            raise _Crashed(f"the host HTP emulator crashed loading the context binaries ({why}): "
                           f"{first_line(Exception(last[0]))}")
        return [Outcome(**o) for o in json.loads(result.read_text())]


# --- a bundle's binaries --------------------------------------------------------------------------------------------

@dataclass
class Check:
    """What loading a bundle's context binaries on the host emulator found: problems (a binary that does not load,
    or that computes other numbers than its CPU model on validate's own inputs), warnings (other numbers on inputs
    that are not validate's), and what was done, for the report."""

    problems: list[tuple[str, str]] = field(default_factory=list)  # (bundle path, message)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    done: str = ""


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


def _key(job: Job, tc: toolchain.Toolchain | None, binary_sha: str) -> str:
    here = tc or toolchain.current()
    files = ([(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(Path(job.folder).iterdir())]
             if job.folder else [])
    data = [binary_sha, sha256_file(job.cpu_model), here.qairt if here else "", job.soc, job.precision, job.samples,
            job.seed, job.thresholds, job.qnn_graph, *([job.ranges] if job.ranges else []),
            *([job.task] if job.task else []), *([job.folder, job.preprocess, files] if job.folder else [])]
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def cache_dir() -> Path:
    """$QNNDEPLOY_EMULATED_DIR, else $XDG_CACHE_HOME/qnndeploy/emulated, else ~/.cache/qnndeploy/emulated."""
    if env := os.environ.get(CACHE_ENV):
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qnndeploy" / "emulated"


def check_bundle(root: Path, manifest: JSON, graph_names: dict[str, list[str]]) -> Check:
    """Load every context binary of a bundle on the host emulator and compare it with its graph's CPU model.

    graph_names: bundle path of each context binary -> the graph names libQnnSystem read from it. A binary shared by
    several graphs is not loaded (the host emulator cannot load a context whose graphs share weights). The inputs
    are validate's when the bundle holds its validation record and can make them again (seeded random inputs, or the
    record's sample files, still in the folder it names; then a difference is a problem), else one seeded random
    sample judged by validate's thresholds for the precision (a warning: the bundle was validated on inputs it does
    not hold)."""
    found = Check()
    tc, why = emulator_for(manifest["qairt"]["version"])
    if why is not None:
        found.warnings.append(("manifest.json", f"context binaries not loaded on the host emulator: {why}"))
        found.done = f"not loaded ({why})"
        return found
    cpu = {a["graph"]: root / a["path"] for a in manifest["cpu"] if a["format"] == ONNX}
    jobs: list[tuple[str, Job, bool, str]] = []  # (bundle path, job, strict, cache key)
    accepted: dict[str, tuple[list[JSON], JSON | None]] = {}  # bundle path -> its failed (accepted) record's verdicts
    for t in manifest["targets"]:
        for a in t["artifacts"]:
            names = graph_names.get(a["path"], [])
            if a["format"] != CONTEXT_BINARY or len(artifact_graphs(a)) != 1 or len(names) != 1:
                continue
            graph = artifact_graphs(a)[0]
            if graph not in cpu:
                continue
            record = _validation(root, manifest, graph, t["soc"])
            inputs = (record or {}).get("inputs") or {}
            folder = _samples_here(inputs)
            strict = folder is not None or (inputs.get("kind") == "random" and isinstance(inputs.get("samples"), int))
            job = Job(root / a["path"], graph, names[0], t["soc"], t["precision"], cpu[graph],
                      samples=min(int(inputs["samples"]), 8) if strict and folder is None else 1,
                      seed=int(inputs.get("seed", 0)) if strict and folder is None else 0,
                      thresholds=(record or {}).get("thresholds") if strict else None,
                      ranges=samples.recorded_ranges(inputs) or None,
                      task=((record or {}).get("task") or {}).get("given"),
                      folder=str(folder) if folder is not None else None,
                      preprocess=samples.recorded_preprocess(inputs) if folder is not None else None)
            jobs.append((a["path"], job, strict, _key(job, tc, a["sha256"])))
            if strict and record is not None and record.get("passed") is False:
                accepted[a["path"]] = (list(record.get("outputs") or []), record.get("task"))
    cached: dict[str, Outcome] = {}
    for _, _, _, key in jobs:
        with contextlib.suppress(OSError, ValueError, TypeError):  # a cache miss
            cached[key] = Outcome(**json.loads((cache_dir() / f"{key}.json").read_text()))
    todo = [(path, job, strict, key) for path, job, strict, key in jobs if key not in cached]
    for (_, _, _, key), outcome in zip(todo, run_jobs([j for _, j, _, _ in todo], tc), strict=True):
        cached[key] = outcome
        with contextlib.suppress(OSError, ValueError, TypeError):  # a cache miss
            write_json(cache_dir() / f"{key}.json", asdict(outcome))
    for path, job, strict, key in jobs:
        outcome = cached[key]
        on = f"its record's samples in {job.folder}" if job.folder else f"{job.samples} seeded input(s)"
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
            if strict:
                found.problems.append((path, f"{what}, the inputs its validation record passed on"))
            else:
                found.warnings.append((path, f"{what} (the bundle was validated on other inputs)"))
    here = tc or toolchain.current()
    on_files = sum(1 for _, job, _, _ in jobs if job.folder)
    found.done = (f"{len(jobs)} context binar{'y' if len(jobs) == 1 else 'ies'} loaded and run on the host HTP "
                  f"emulator (QAIRT {here.qairt if here else '?'}) against the CPU models"
                  + (f", {on_files} on the sample files of {'its' if len(jobs) == 1 else 'their'} validation "
                     "record" if on_files else ""))
    return found


# --- the child ------------------------------------------------------------------------------------------------------

References = dict[tuple[str, str, int, int, str], tuple[list[samples.Sample], list[samples.Sample]]]


def _one(job: JSON, work: Path, references: References) -> Outcome:
    """Load and run one binary; `references` keeps each graph's CPU inputs and outputs by (model, graph, samples,
    seed), so that the binaries of one graph for several SoCs run its CPU model once."""
    import onnxruntime as ort

    binary, model = Path(job["binary"]), Path(job["cpu_model"])
    folder = Path(tempfile.mkdtemp(dir=work))
    (folder / "ctx.bin").symlink_to(binary.resolve())
    wrapper = folder / "ctx.onnx"
    epcontext.wrap("ctx.bin", job["qnn_graph"], model, wrapper)
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
        return Outcome(False, False, first_line(e))
    limits = job["thresholds"] or metrics.thresholds_for(job["precision"])
    judged, verdict, passed = tasks.judge(tasks.recorded(job.get("task"), model), model, expected, actual, limits)
    return Outcome(True, passed, None, [asdict(m) for m in judged], verdict.json() if verdict else None)


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    outcomes, references = [], References()
    for job in spec["jobs"]:
        try:
            outcomes.append(_one(job, Path(spec["work"]), references))
        except QnnDeployError as e:
            outcomes.append(Outcome(False, False, str(e)))
    write_json(Path(spec["result"]), [asdict(o) for o in outcomes])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A bundle's context binaries loaded and run on the host HTP emulator (`bundle verify --deep`, `inspect`): which
jobs prove a bundle's targets (each single-graph binary against its CPU model, the decode loop, a split's chain), on
the inputs its validation records name, and what their outcomes mean against those records. qnn/emulator.py runs
the jobs in its child process; this reads the manifest and judges."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from qnndeploy.base.errors import QnnDeployError
from qnndeploy.base.fileio import JSON
from qnndeploy.formats.manifest import BundleFile, BundleLoop, FileFormat, Manifest, Target
from qnndeploy.formats.records import ValidationRecord
from qnndeploy.model import decode, samples, tasks
from qnndeploy.qnn import toolchain
from qnndeploy.qnn.emulator import (
    TIMEOUT_S,
    AnyJob,
    ChainJob,
    ChainPart,
    EmulatorJob,
    EmulatorOutcome,
    LoopJob,
    emulator_for,
    run_cached,
)

# The emulator child's time: its own TIMEOUT_S for loading, plus this many times the emulator seconds validate spent
# on the same runs (its records): a Whisper large-v3-shaped loop takes 25 min a SoC, which a fixed 600 s cut short.
MEASURED_SLACK = 3.0


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


def _validation(root: Path, manifest: Manifest, graph: str, soc: str) -> ValidationRecord | None:
    """The bundle's validation record of (graph, SoC), when it holds one that reads (bundle build --from-build copies
    them)."""
    name = f"records/{graph}-{soc}-validation.json"
    if not any(r.path == name for r in manifest.records):
        return None
    try:
        return ValidationRecord.read(root / name)
    except (OSError, ValueError, QnnDeployError):
        return None


def _measured(root: Path, manifest: Manifest, looped: decode.Loop | None) -> float:
    """The emulator seconds validate spent on what verify runs again, by the bundle's validation records: each
    graph's seconds a run, a loop's decoder graphs at every step of the loop, the others once a sample."""
    total = 0.0
    for target in manifest.targets:
        for graph in {g for a in target.artifacts for g in a.served}:
            record = _validation(root, manifest, graph, target.soc)
            if record is None:
                continue
            if looped is not None and graph in looped.decoders:
                runs = int((record.loop or {}).get("emulator_steps") or 1)
            else:
                counted = (record.inputs or {}).get("samples")
                runs = counted if isinstance(counted, int) else 1
            total += float(record.emulator.get("seconds_per_run") or 0) * runs
    return total


def _samples_here(inputs: JSON) -> Path | None:
    """The folder of a record's real samples, when it still holds the very files the record lists."""
    folder = inputs.get("folder") if inputs.get("kind") == "files" else None
    listed = inputs.get("files")
    if not isinstance(folder, str) or not isinstance(listed, list) or not Path(folder).is_dir():
        return None
    here = [p.name for p in (*samples.sample_files(Path(folder)), *samples.media_files(Path(folder)))]
    return Path(folder) if sorted(here) == sorted(str(f) for f in listed) else None


Planned = tuple[str, AnyJob, bool, list[str]]  # (bundle path, job, strict, sha256 of the bundle files it runs)


def check_bundle(root: Path, manifest: Manifest, graph_names: dict[str, list[str]],
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
    tc, why = emulator_for(manifest.qairt.version)
    if why is not None:
        found.warnings.append(("manifest.json", f"context binaries not loaded on the host emulator: {why}"))
        found.done = f"not loaded ({why})"
        return found
    cpu = {a.graph: root / a.path for a in manifest.cpu if a.format == FileFormat.ONNX}
    looped = manifest.loop.loop if manifest.loop is not None else None
    in_loop = set(looped.graphs) if looped else set()  # an encoder's and a decoder's graphs, or their parts
    chained = list(manifest.pipeline_order)  # a split's parts, in the order the app runs them
    jobs: list[Planned] = []
    accepted: dict[str, tuple[list[JSON], JSON | None]] = {}  # bundle path -> its failed (accepted) record's verdicts
    for t in manifest.targets:
        loop_parts: dict[str, tuple[BundleFile, str]] = {}  # graph -> its binary's artifact, its name in the binary
        for a in t.artifacts:
            names = graph_names.get(a.path, [])
            if a.format != FileFormat.QNN_CONTEXT_BINARY or len(a.served) != 1 or len(names) != 1:
                continue
            graph = a.served[0]
            if graph not in cpu:
                continue
            if graph in in_loop or graph in chained:
                loop_parts[graph] = (a, names[0])
                continue
            record = _validation(root, manifest, graph, t.soc)
            inputs = (record.inputs if record else None) or {}
            folder, strict, count, seed = _replay(inputs)
            job = EmulatorJob(root / a.path, graph, names[0], t.soc, t.precision, cpu[graph], samples=count,
                              seed=seed, thresholds=record.thresholds if strict and record else None,
                              ranges=samples.recorded_ranges(inputs) or None,
                              task=record.task_given if record else None,
                              folder=str(folder) if folder is not None else None,
                              preprocess=samples.recorded_preprocess(inputs) if folder is not None else None)
            jobs.append((a.path, job, strict, [a.sha256]))
            if strict and record is not None and record.passed is False:
                accepted[a.path] = (list(record.outputs), record.task)
        if manifest.loop is not None and in_loop and in_loop <= set(loop_parts):
            jobs.append(_loop_job(root, manifest, manifest.loop, t, loop_parts, cpu))
        elif chained and loop_parts:
            jobs.append(_chain_job(root, manifest, chained, t, loop_parts, cpu))
    timeout = TIMEOUT_S + MEASURED_SLACK * _measured(root, manifest, looped)
    outcomes = run_cached([(path, job, shas) for path, job, _, shas in jobs], tc, steps, timeout)
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
    binaries = sum(1 if isinstance(job, EmulatorJob) else len(job.binaries) if isinstance(job, LoopJob) else
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


def _loop_job(root: Path, manifest: Manifest, bundled: BundleLoop, target: Target,
              parts: dict[str, tuple[BundleFile, str]], cpu: dict[str, Path]) -> Planned:
    """The decode loop on one target, on the encoder's samples its validation record names (the loop's own)."""
    looped, tokenizer = bundled.loop, bundled.tokenizer
    soc = target.soc
    record = _validation(root, manifest, looped.encoders[0], soc)
    inputs = (record.inputs if record else None) or {}
    made = (inputs.get("samples") or {}) if inputs.get("kind") == "loop" else {}
    folder, strict, count, seed = _replay(made)
    job = LoopJob({g: root / a.path for g, (a, _) in parts.items()}, {g: n for g, (_, n) in parts.items()},
                  {g: cpu[g] for g in parts}, soc, target.precision, looped.description(),
                  root / tokenizer.path if tokenizer else None, count, seed,
                  record.thresholds if strict and record else None, str(folder) if folder is not None else None,
                  samples.recorded_preprocess(made) if folder is not None else None)
    shas = [a.sha256 for a, _ in parts.values()] + ([tokenizer.sha256] if tokenizer else [])
    return parts[looped.decoders[0]][0].path, job, strict, shas


def _chain_job(root: Path, manifest: Manifest, pipeline: list[str], target: Target,
               parts: dict[str, tuple[BundleFile, str]], cpu: dict[str, Path]) -> Planned:
    """A split on one target, chained as the app runs it, on the chain samples the first NPU part's validation
    record names."""
    soc, first = target.soc, next(g for g in pipeline if g in parts)
    record = _validation(root, manifest, first, soc)
    inputs = (record.inputs if record else None) or {}
    made = (inputs.get("samples") or {}) if inputs.get("kind") == "chain" else {}
    folder, strict, count, seed = _replay(made)
    signature = {g.name: g for g in manifest.graphs}
    job = ChainJob(tuple(ChainPart(g, cpu[g], tuple(t.name for t in signature[g].inputs),
                                   tuple(t.name for t in signature[g].outputs),
                                   root / parts[g][0].path if g in parts else None,
                                   parts[g][1] if g in parts else None) for g in pipeline),
                   soc, target.precision, count, seed, record.thresholds if strict and record else None,
                   samples.recorded_ranges(made) or None, record.task_given if record else None,
                   str(folder) if folder is not None else None,
                   samples.recorded_preprocess(made) if folder is not None else None)
    return parts[first][0].path, job, strict, [a.sha256 for a, _ in parts.values()]


def _judge_chain(found: EmulatorCheck, root: Path, manifest: Manifest, path: str, job: ChainJob, strict: bool,
                 outcome: EmulatorOutcome) -> None:
    """The chain's outputs against the CPU chain's, as validate judged them (an accepted failure no worse than its
    record's chain)."""
    on = _on(job)
    if not outcome.loaded:
        found.problems.append((path, f"the split does not run on the host HTP emulator: {outcome.error}"))
        return
    first = next(p.graph for p in job.parts if p.binary is not None)
    record = _validation(root, manifest, first, job.soc)
    was = (record.chain if record else None) or {}
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


def _judge_loop(found: EmulatorCheck, root: Path, manifest: Manifest, path: str, job: LoopJob, strict: bool,
                outcome: EmulatorOutcome) -> None:
    """The loop's texts against the CPU's, as validate judged them: a problem when the record's own samples give
    another verdict (or, for an accepted failure, a higher error rate) than the record says."""
    on = _on(job)
    if not outcome.loaded:
        found.problems.append((path, f"the decode loop does not run on the host HTP emulator: {outcome.error}"))
        return
    check = outcome.loop or {}
    rate = check.get("error_rate")
    decoder = _validation(root, manifest, decode.described(job.loop).decoders[0], job.soc)
    was = (decoder.loop if decoder else None) or {}
    accepted = strict and was.get("passed") is False
    if outcome.passed or (accepted and isinstance(rate, (int, float)) and rate <= (was.get("error_rate") or 0)):
        return  # as validate judged it, or an accepted failure no worse than its record
    parted = next((s for s in check.get("samples") or [] if s.get("cpu") != s.get("npu")), None)
    what = (f"the decode loop gives other text on the NPU than on the CPU on {on}: word error rate {rate}"
            + (f" (sample {parted['sample']}: CPU {parted['cpu']!r}, NPU {parted['npu']!r})" if parted else ""))
    found.differs(path, what, strict, "accepted" if accepted else "passed")

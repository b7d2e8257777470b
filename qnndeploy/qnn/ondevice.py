"""The on-device compile, done first on the host: what `bundle build --on-device-compile` proves before a bundle
lets phones without a target compile its ONNX with ONNX Runtime's QNN EP.

For one catalog SoC of each HTP arch the bundle's QAIRT compiles for (from v69), the ONNX is compiled exactly as the
phone's EP will compile it (the same QNN EP options, htp_arch and soc_model, CPU fallback off) and the context
binary it writes is run on the host HTP emulator against the CPU model with validate's metrics (emulator.run_jobs).
Only the arches that pass are listed in the manifest. The compiles run in a child process
(`python -P -m qnndeploy.qnn.ondevice SPEC.json`): a native compile can crash or hang, and under another QAIRT's
toolchain it must run in that toolchain's environment.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from qnndeploy.base import child, socs
from qnndeploy.base.errors import MissingTool, QnnDeployError, first_line
from qnndeploy.base.fileio import JSON, write_json
from qnndeploy.base.htparch import HtpArch
from qnndeploy.base.kinds import Precision
from qnndeploy.qnn import emulator, epcontext, htp, toolchain

# The oldest arch the on-device path is validated for: the phone HTPs of v68 (SM8350, SM7325) have no fp16, and
# the issue that asked for this path starts at v69.
MIN_ARCH = HtpArch(69)
SAMPLES, SEED = 4, 0  # validate's seeded random inputs for each arch's comparison
COMPILE_TIMEOUT_S = 1800.0  # for the whole child: every graph for every arch
PROGRESS = "compiling "  # how the child's progress lines start


@dataclass(frozen=True)
class ArchCheck:
    """One graph compiled for one arch's SoC on the host and compared with its CPU model on the emulator."""

    graph: str
    arch: str
    soc: str
    compile_s: float | None  # None: it did not compile
    passed: bool
    error: str | None = None
    outputs: list[JSON] = field(default_factory=list)  # validate's OutputMetrics, as JSON
    task: JSON | None = None  # the task's verdict (tasks.TaskVerdict.json), which decides for its output


def ep_options(precision: str, vtcm_mb: int | None = None, optimization_mode: int | None = None) -> dict[str, str]:
    """The QNN EP options besides htp_arch and soc_model that the phone and the host validation both use."""
    options = {"enable_htp_fp16_precision": "1" if precision == Precision.FP16 else "0"}
    if precision == Precision.W4A16:  # as compile's ort backend: the int4 block scales stored as LPBQ
        options["enable_block_quant_weight_optimization"] = "1"
    if optimization_mode is not None:
        options["htp_graph_finalization_optimization_mode"] = str(optimization_mode)
    if vtcm_mb is not None:
        options["vtcm_mb"] = str(vtcm_mb)
    return options


def precision_of(options: Mapping[str, str]) -> Precision:
    """The precision ep_options() were made for (fp16 when the options say nothing: the QNN EP's default)."""
    if options.get("enable_htp_fp16_precision", "1") == "1":
        return Precision.FP16
    return Precision.W4A16 if options.get("enable_block_quant_weight_optimization") == "1" else Precision.W8A16


def candidate_archs() -> set[str]:
    """Every catalog HTP arch the on-device path may validate ("v69" and up): the runtime libraries a bundled runtime
    ships for it, before validation says which pass."""
    return {s.dsp_arch for s in socs.catalog() if s.htp_arch >= MIN_ARCH}


def arch_socs(qairt: str, precision: str) -> list[socs.Soc]:
    """One catalog SoC per HTP arch from v69 up, the first in catalog order that QAIRT `qairt` was measured to compile
    for with that arch (and that has fp16 when the precision is fp16): the SoCs the validation compiles for."""
    chosen: dict[int, socs.Soc] = {}
    for soc in socs.catalog():
        row = socs.measured(soc, qairt)
        if soc.htp_arch < MIN_ARCH or soc.arch_number in chosen or row is None or row.arch != soc.arch_number:
            continue
        if precision == Precision.FP16 and (soc.fp16 is False or "fp16" in row.refuses):
            continue
        chosen[soc.arch_number] = soc
    return [chosen[a] for a in sorted(chosen)]


def validate(models: Mapping[str, Path], options: Mapping[str, str], precision: str, qairt: str,
             progress: Callable[[str], None] | None = None) -> list[ArchCheck]:
    """Each graph's model (graph -> ONNX) compiled for each arch of arch_socs and compared with itself on the host
    emulator; raises MissingTool when no emulator here runs QAIRT `qairt`."""
    tc, why = emulator.emulator_for(qairt)
    if why is not None:
        raise MissingTool(f"--on-device-compile validates on the host HTP emulator, and {why}")
    targets = arch_socs(qairt, precision)
    with tempfile.TemporaryDirectory(prefix="qnndeploy-on-device-") as tmp:
        jobs = [{"graph": g, "model": str(m), "soc": s.model, "folder": str(Path(tmp) / f"{g}-{s.dsp_arch}")}
                for g, m in models.items() for s in targets]
        compiled = _compile(jobs, dict(options), tc, Path(tmp), progress)
        ready = [(j, c) for j, c in zip(jobs, compiled, strict=True) if c.get("binary")]
        if progress is not None and ready:
            progress(f"running {len(ready)} compiled graph(s) on the host HTP emulator against the CPU models")
        outcomes = emulator.run_jobs([emulator.EmulatorJob(Path(c["binary"]), j["graph"], c["qnn_graph"], j["soc"],
                                                           precision, Path(j["model"]), SAMPLES, SEED)
                                      for j, c in ready], tc)
    by_job = {id(j): o for (j, _), o in zip(ready, outcomes, strict=True)}
    checks = []
    for j, c in zip(jobs, compiled, strict=True):
        arch = socs.find(j["soc"]).dsp_arch
        outcome = by_job.get(id(j))
        if outcome is None:
            checks.append(ArchCheck(j["graph"], arch, j["soc"], None, False, c.get("error") or "did not compile"))
        else:
            checks.append(ArchCheck(j["graph"], arch, j["soc"], c["seconds"], outcome.passed,
                                    outcome.error, outcome.outputs, outcome.task))
    return checks


def _compile(jobs: list[JSON], options: dict[str, str], tc: toolchain.Toolchain | None, tmp: Path,
             progress: Callable[[str], None] | None) -> list[JSON]:
    """Every job compiled in one child, waited for as htp's partitioning child is (a stop request and the budget
    checked every 0.1 s); the child's lines, one per job as it starts, are the progress."""
    spec, result, log = tmp / "compile.json", tmp / "compiled.json", tmp / "compile.log"
    spec.write_text(json.dumps({"jobs": jobs, "options": options, "result": str(result)}))
    env = toolchain.environ(tc) if tc is not None else child.environ()
    with log.open("wb") as out, log.open("r") as said:
        proc = subprocess.Popen(child.module("qnn.ondevice", str(spec)), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)

        def tick() -> None:
            for line in said.readlines():
                if progress is not None and line.startswith(PROGRESS):
                    progress(line.strip())

        code = child.wait(proc, COMPILE_TIMEOUT_S, tick)
    if code is None:
        raise QnnDeployError(f"the on-device compiles did not finish on the host within {COMPILE_TIMEOUT_S:g} s")
    try:
        done: list[JSON] = json.loads(result.read_text())
    except (OSError, ValueError):
        why = f"signal {-code}" if code < 0 else f"exit {code}"
        raise QnnDeployError(f"the on-device compile's host run died ({why}) before finishing") from None
    return done


# --- the child ------------------------------------------------------------------------------------------------------

def _one(job: JSON, options: dict[str, str]) -> JSON:
    import onnxruntime as ort

    soc, folder = socs.find(job["soc"]), Path(job["folder"])
    folder.mkdir(parents=True)
    ctx = folder / f"{job['graph']}_ctx.onnx"
    provider = {k: v for k, v in options.items() if k != "enable_htp_fp16_precision"}
    started = time.monotonic()
    try:
        with htp.quiet_native_stdout():
            ort.InferenceSession(job["model"], htp.session_options(
                soc, fp16=options.get("enable_htp_fp16_precision") == "1", context_path=ctx, provider=provider))
    except Exception as e:  # noqa: BLE001 onnxruntime raises its own Fail/InvalidGraph types
        return {"error": f"the QNN EP did not compile it for {soc.model} ({soc.dsp_arch}): {first_line(e)}"}
    seconds = round(time.monotonic() - started, 3)
    binaries, graphs = epcontext.context_refs(ctx), epcontext.graph_names(ctx)
    if len(binaries) != 1 or len(graphs) != 1:
        return {"error": f"the QNN EP compiled it into {len(graphs)} partitions, not one"}
    return {"binary": str(folder / binaries[0]), "qnn_graph": graphs[0], "seconds": seconds}


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    done = []
    for job in spec["jobs"]:
        soc = socs.find(job["soc"])
        print(f"{PROGRESS}{job['graph']} for {soc.model} ({soc.dsp_arch}) as the phone's QNN EP would", flush=True)
        done.append(_one(job, spec["options"]))
    write_json(Path(spec["result"]), done)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The `aihub` backend: Qualcomm AI Hub compiles each (graph, SoC) on its servers, through the qai-hub client.

Per job, as AI Hub's own model pipeline (qai-hub-models 0.65) builds context binaries: find a hosted device with the
SoC (by the catalog's aihub_chipsets, the current spelling first, e.g. chipset:qualcomm-snapdragon-8-elite-for-galaxy,
then older releases' spellings), upload the ONNX model, one compile job with `--target_runtime qnn_dlc --compute_unit
npu` (w8a16: `--quantize_full_type w8a16` with the calibration samples as the job's dataset) that makes a QNN DLC,
then one link job on that DLC, for the same device, whose target model is the QNN context binary; wait for each,
download the binary. The binary is then read with libQnnSystem like every compile's, and wrapped in an ONNX Runtime
EPContext model (epcontext.wrap), so validate, bundle and the ort engine use it as they use the ort backend's. The
record keeps both jobs' ids and URLs, and the QAIRT version the binary was built with.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import IO

from qnndeploy.base.errors import BadInput
from qnndeploy.base.fileio import JSON
from qnndeploy.base.kinds import BackendName, Precision
from qnndeploy.base.names import CONTEXT_BINARY, EPCONTEXT
from qnndeploy.base.socs import Soc
from qnndeploy.compile.jobs import Compiled, CompileError, CompileJob, Tools
from qnndeploy.formats.records import HtpSettings
from qnndeploy.model.onnxio import model_inputs
from qnndeploy.model.samples import load_samples
from qnndeploy.qnn import aihub, epcontext, htp, markers, qnnsystem

TIMEOUT_S = 3 * 3600.0  # one compile job on AI Hub: large graphs take hours
LINK_TIMEOUT_S = 3 * 3600.0  # one link job: it runs the context-binary generation, the long part for large graphs
BASE_OPTIONS = "--target_runtime qnn_dlc --compute_unit npu"
# Both jobs ask for the QAIRT release of the toolchain in use (the pinned one, or compile --qairt): AI Hub's own
# default moves, and binaries of a newer release than the emulator here cannot be validated, nor loaded by the
# runtime the bundle pins (docs/decision-and-runtime.md, Runtime compatibility).


class AihubBackend:
    name = BackendName.AIHUB

    def __init__(self) -> None:
        aihub.client()  # installed and configured, or a one-line error before any job
        # What the host emulator (validate) runs: AI Hub's binaries are recorded with the QAIRT they name.
        self.qairt_version = htp.qairt_version() if htp.available() else "0.0.0"

    def identity(self) -> dict[str, str]:
        try:
            client = version("qai-hub")
        except PackageNotFoundError:
            client = "unknown"
        return {"qai_hub": client}

    def options(self, soc: Soc, precision: Precision, settings: HtpSettings) -> JSON:
        if settings != HtpSettings():
            raise BadInput("--vtcm-mb, --optimization-mode, --spill-fill and --keep-fp16 are options of the ort "
                           "and qairt backends; the aihub backend uses AI Hub's defaults")
        aihub.refuse_unhosted(soc)  # no chipset, or one AI Hub runs no jobs on: refused before any upload
        quantize = " --quantize_full_type w8a16" if precision == Precision.W8A16 else ""
        family = ".".join(self.qairt_version.split(".")[:2])
        qairt = f"--qairt_version {family}" if htp.available() else ""
        return {"chipsets": list(soc.aihub_chipsets), "compile_options": f"{BASE_OPTIONS} {qairt}".strip() + quantize,
                "link_options": qairt}

    def compile(self, job: CompileJob, work: Path, log: IO[str], tools: Tools) -> Compiled:
        if job.members:
            raise CompileError("compile --share is not available with the aihub backend (ONNX Runtime's shared "
                               "EP contexts are made by the ort backend)")
        hub, g, soc = aihub.client(), job.graph, job.soc.model
        target = aihub.device_for(job.soc)
        log.write(f"AI Hub device: chipset {target.chipset} (for example {target.hosted.name})\n")
        what = f"compiling {g} for {soc} on AI Hub"
        calibration = _calibration(job) if job.precision == Precision.W8A16 else None
        with aihub.errors(what):
            compiled = hub.submit_compile_job(model=str(job.model), device=target.device, name=f"{g}-{soc}",
                                              options=job.options["compile_options"], calibration_data=calibration,
                                              retry=False)
        compile_ref = _follow(compiled, "compile", job.options["compile_options"], what, TIMEOUT_S, log, tools)
        with aihub.errors(what):
            dlc = compiled.get_target_model()
        if dlc is None:
            raise CompileError(f"AI Hub compile job {compile_ref['job_id']} gave no DLC to link ({compile_ref['url']})")

        what = f"linking {g} for {soc} on AI Hub"
        with aihub.errors(what):
            linked = hub.submit_link_job([dlc], device=target.device, name=f"{g}-{soc}",
                                         options=job.options["link_options"])
        link_ref = _follow(linked, "link", job.options["link_options"], what, LINK_TIMEOUT_S, log, tools,
                           f"  model: {dlc.model_id}, the compile job's DLC\n")
        binary = work / f"{g}.bin"
        with aihub.errors(f"downloading {g} for {soc} from AI Hub"):
            written = linked.download_target_model(str(binary))
        if written is None or Path(written) != binary or not binary.is_file():
            raise CompileError(f"AI Hub link job {link_ref['job_id']} gave no QNN context binary ({written}): see "
                               f"{link_ref['url']}")
        context = qnnsystem.read_context_here(binary)
        if len(context.graphs) != 1:
            raise CompileError(f"AI Hub's {binary.name} holds {len(context.graphs)} graphs, not 1")
        build = context.build_id or None
        epcontext.wrap(binary.name, context.graphs[0].name, job.model, work / f"{g}_ctx.onnx", build)
        device = linked.device
        log.write(f"  downloaded {binary.name} ({binary.stat().st_size:,} bytes), QAIRT {build or 'unknown'}, built "
                  f"for {device.name}\n")
        return Compiled([(binary.name, CONTEXT_BINARY), (f"{g}_ctx.onnx", EPCONTEXT)],
                        aihub={**compile_ref, "device": str(device.name), "chipset": target.chipset,
                               "qairt": markers.build_version(build) if build else None, "link": link_ref})


def _follow(remote: object, kind: str, options: str, what: str, timeout_s: float, log: IO[str], tools: Tools,
            extra: str = "") -> dict[str, str]:
    """Log a submitted job (id, URL, options, then each state it passes) and wait for its end: a failure, a timeout
    or a stop is raised by aihub.wait."""
    ref = aihub.job_ref(remote)
    log.write(f"AI Hub {kind} job {ref['job_id']}: {ref['url']}\n{extra}  options: {options or '(none)'}\n")
    log.flush()

    def state(code: str) -> None:
        log.write(f"  {code}\n")
        log.flush()

    aihub.wait(remote, what, timeout_s, should_stop=tools.stopping, on_state=state)
    return ref


def _calibration(job: CompileJob) -> dict[str, list[object]]:
    """The calibration samples as AI Hub's dataset: input name -> one array per sample."""
    if job.calibration is None:
        raise CompileError(f"{job.graph}: w8a16 needs calibration samples (--calib DIR)")
    specs = model_inputs(job.model)
    samples = load_samples(job.calibration, specs)
    return {spec.name: [s[spec.name] for s in samples] for spec in specs}

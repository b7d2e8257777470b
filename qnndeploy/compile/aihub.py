"""The `aihub` backend: Qualcomm AI Hub compiles each (graph, SoC) on its servers, through the qai-hub client.

Per job: upload the ONNX model, one compile job for a hosted phone with the SoC (chosen by the catalog's
aihub_chipset, e.g. chipset:qualcomm-snapdragon-8-elite), options `--target_runtime qnn_context_binary
--compute_unit npu` (w8a16: `--quantize_full_type w8a16` with the calibration samples as the job's dataset), wait,
download the context binary. The binary is then read with libQnnSystem like every compile's, and wrapped in an ONNX
Runtime EPContext model (epcontext.wrap), so validate, bundle and the ort engine use it as they use the ort
backend's. The record keeps the job's id and URL, and the QAIRT version the binary was built with.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import IO, TYPE_CHECKING

from qnndeploy import aihub, epcontext, htp, markers, qnnsystem
from qnndeploy.compile.jobs import Compiled, CompileError, HtpSettings, Job, Tools
from qnndeploy.errors import QnnDeployError
from qnndeploy.fileio import JSON
from qnndeploy.formats import CONTEXT_BINARY, EPCONTEXT
from qnndeploy.onnxio import model_inputs
from qnndeploy.samples import load_samples

if TYPE_CHECKING:
    from qnndeploy.socs import Soc

TIMEOUT_S = 3 * 3600.0  # one compile job on AI Hub: large graphs take hours
BASE_OPTIONS = "--target_runtime qnn_context_binary --compute_unit npu"


class AihubBackend:
    name = "aihub"

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

    def options(self, soc: Soc, precision: str, settings: HtpSettings) -> JSON:
        if settings != HtpSettings():
            raise QnnDeployError("--vtcm-mb, --optimization-mode, --spill-fill and --keep-fp16 are options of the ort "
                                 "and qairt backends; the aihub backend uses AI Hub's defaults")
        aihub.device_for(soc)  # a SoC without an AI Hub chipset is refused before any upload
        quantize = " --quantize_full_type w8a16" if precision == "w8a16" else ""
        return {"chipset": soc.aihub_chipset, "compile_options": BASE_OPTIONS + quantize}

    def compile(self, job: Job, work: Path, log: IO[str], tools: Tools) -> Compiled:
        if job.members:
            raise CompileError("compile --share is not available with the aihub backend (ONNX Runtime's shared "
                               "EP contexts are made by the ort backend)")
        hub, g = aihub.client(), job.graph
        what = f"compiling {g} for {job.soc.model} on AI Hub"
        calibration = _calibration(job) if job.precision == "w8a16" else None
        with aihub.errors(what):
            remote = hub.submit_compile_job(model=str(job.model), device=aihub.device_for(job.soc),
                                            name=f"{g}-{job.soc.model}", options=job.options["compile_options"],
                                            calibration_data=calibration, retry=False)
        ref = aihub.job_ref(remote)
        log.write(f"AI Hub compile job {ref['job_id']}: {ref['url']}\n  options: {job.options['compile_options']}\n")
        log.flush()

        def state(code: str) -> None:
            log.write(f"  {code}\n")
            log.flush()

        aihub.wait(remote, what, TIMEOUT_S, should_stop=tools.stopping, on_state=state)
        binary = work / f"{g}.bin"
        with aihub.errors(f"downloading {g} for {job.soc.model} from AI Hub"):
            written = remote.download_target_model(str(binary))
        if written is None or Path(written) != binary or not binary.is_file():
            raise CompileError(f"AI Hub job {ref['job_id']} gave no QNN context binary ({written}): check "
                               f"--target_runtime on {ref['url']}")
        context = qnnsystem.read_context_here(binary)
        if len(context.graphs) != 1:
            raise CompileError(f"AI Hub's {binary.name} holds {len(context.graphs)} graphs, not 1")
        build = context.build_id or None
        epcontext.wrap(binary.name, context.graphs[0].name, job.model, work / f"{g}_ctx.onnx", build)
        device = remote.device
        log.write(f"  downloaded {binary.name} ({binary.stat().st_size:,} bytes), QAIRT {build or 'unknown'}, built "
                  f"for {device.name}\n")
        return Compiled([(binary.name, CONTEXT_BINARY), (f"{g}_ctx.onnx", EPCONTEXT)],
                        aihub={"job_id": ref["job_id"], "url": ref["url"], "device": str(device.name),
                               "chipset": str(job.options["chipset"]),
                               "qairt": markers.build_version(build) if build else None})


def _calibration(job: Job) -> dict[str, list[object]]:
    """The calibration samples as AI Hub's dataset: input name -> one array per sample."""
    if job.calibration is None:
        raise CompileError(f"{job.graph}: w8a16 needs calibration samples (--calib DIR)")
    specs = model_inputs(job.model)
    samples = load_samples(job.calibration, specs)
    return {spec.name: [s[spec.name] for s in samples] for spec in specs}

"""The `qairt` backend: the QAIRT SDK's own tools, in the sequence sherpa-onnx's CI uses for its NPU models.

Per job: qnn-onnx-converter (ONNX -> QNN C++ graph + weights), the two HTP config files (soc_id, dsp_arch, vtcm),
qnn-model-lib-generator (x86_64 for the host, aarch64-android with the NDK; 16 KB pages), then
qnn-context-binary-generator (the context binary the phone loads). Every tool's output goes to the job log.
The SDK is not redistributable, so the tests run this path against a stand-in SDK (tests/support/qairt_standin/).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from qnndeploy.base.errors import BadInput, MissingTool
from qnndeploy.base.fileio import JSON
from qnndeploy.base.kinds import BackendName, Precision
from qnndeploy.base.names import CONTEXT_BINARY
from qnndeploy.base.socs import Soc
from qnndeploy.compile import logs
from qnndeploy.compile.jobs import Compiled, CompileError, CompileJob, Tools
from qnndeploy.formats.records import HtpSettings
from qnndeploy.model.onnxio import model_inputs
from qnndeploy.model.samples import load_samples

HOST = "x86_64-linux-clang"
ANDROID = "aarch64-android"
LDFLAGS = "-Wl,-z,max-page-size=16384"  # Android 15+ needs 16 KB-aligned segments
# fp16 activations and 32-bit biases; w8a16 adds calibration (8-bit weights are the converter's default).
CONVERTER_FLAGS = ["--act_bitwidth", "16", "--bias_bitwidth", "32"]
CALIBRATION = "<calibration>"  # in the recorded converter flags: the input list made from the samples
VERSION_RE = re.compile(r"^\s*version\s*:\s*['\"]?(\d+\.\d+\.\d+(?:\.\d+)?)", re.MULTILINE)


@dataclass(frozen=True)
class Sdk:
    root: Path
    version: str  # as the SDK names itself, e.g. 2.40.0.251030

    @property
    def qairt_version(self) -> str:
        return ".".join(self.version.split(".")[:3])

    @property
    def converter(self) -> Path:
        return self.root / "bin" / HOST / "qnn-onnx-converter"

    @property
    def model_lib_generator(self) -> Path:
        return self.root / "bin" / HOST / "qnn-model-lib-generator"

    @property
    def context_binary_generator(self) -> Path:
        return self.root / "bin" / HOST / "qnn-context-binary-generator"

    @property
    def htp_backend(self) -> Path:
        return self.root / "lib" / HOST / "libQnnHtp.so"

    @property
    def htp_extensions(self) -> Path:
        return self.root / "lib" / HOST / "libQnnHtpNetRunExtensions.so"

    def env(self, ldflags: str) -> dict[str, str]:
        """What `source bin/envsetup.sh` sets up for the tools, plus the LDFLAGS of the model libraries."""
        def prepend(var: str, path: Path) -> str:
            return os.pathsep.join([str(path)] + ([os.environ[var]] if os.environ.get(var) else []))

        return {**os.environ, "QNN_SDK_ROOT": str(self.root),
                "PATH": prepend("PATH", self.root / "bin" / HOST),
                "LD_LIBRARY_PATH": prepend("LD_LIBRARY_PATH", self.root / "lib" / HOST),
                "PYTHONPATH": prepend("PYTHONPATH", self.root / "lib" / "python"),
                "LDFLAGS": ldflags, "PYTHONUNBUFFERED": "1"}


def find_sdk(root: Path | None = None) -> Sdk:
    """The SDK at `root`, else $QNN_SDK_ROOT; its version from sdk.yaml, else from the folder name."""
    given = root or os.environ.get("QNN_SDK_ROOT")
    if not given:
        raise MissingTool("the qairt backend needs the QAIRT SDK: pass --qnn-sdk-root DIR or "
                          "`source <sdk>/bin/envsetup.sh` (sets QNN_SDK_ROOT)")
    root = Path(given).expanduser().resolve()
    if not root.is_dir():
        raise MissingTool(f"QAIRT SDK root {root}: no such folder")
    version = sdk_version(root)
    if version is None:
        raise MissingTool(f"{root}: cannot read the QAIRT version (no sdk.yaml 'version:' and the folder is not "
                          f"named like 2.40.0.251030): is this the SDK root?")
    sdk = Sdk(root, version)
    missing = [p for p in (sdk.converter, sdk.model_lib_generator, sdk.context_binary_generator, sdk.htp_backend,
                           sdk.htp_extensions) if not p.is_file()]
    if missing:
        raise MissingTool(f"the QAIRT SDK at {root} lacks {', '.join(str(p.relative_to(root)) for p in missing)}")
    return sdk


def sdk_version(root: Path) -> str | None:
    try:
        if m := VERSION_RE.search((root / "sdk.yaml").read_text(errors="replace")):
            return m.group(1)
    except OSError:
        pass
    m = re.fullmatch(r"v?(\d+\.\d+\.\d+\.\d+)", root.name)
    return m.group(1) if m else None


def htp_config(sdk: Sdk, options: JSON, graph: str, folder: Path) -> Path:
    """The two HTP config files for one graph, from the job's recorded `htp_config` options; returns the one
    qnn-context-binary-generator takes."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "htp_config.json"
    config.write_text(json.dumps({
        # no vtcm_mb where the catalog has no source for the SoC's VTCM: the SDK then uses the device's
        "graphs": [{**({"vtcm_mb": options["vtcm_mb"]} if options["vtcm_mb"] is not None else {}), "O": options["O"],
                    "graph_names": [graph]}],
        "devices": [{"device_id": 0, "soc_id": options["soc_id"], "dsp_arch": options["dsp_arch"],
                     "cores": [{"core_id": 0, "perf_profile": "burst", "rpc_control_latency": 200}]}],
    }, indent=2))
    extensions = folder / "htp_backend_extensions.json"
    extensions.write_text(json.dumps({"backend_extensions": {
        "shared_library_path": str(sdk.htp_extensions), "config_file_path": str(config.resolve())}}, indent=2))
    return extensions


class QairtBackend:
    name = BackendName.QAIRT

    def __init__(self, root: Path | None = None) -> None:
        self.sdk = find_sdk(root)
        self.qairt_version = self.sdk.qairt_version
        python = shutil.which("python3")
        if python is None:
            raise MissingTool("python3 is not on PATH: the SDK's model-lib generator runs with it "
                              "(use the SDK's Python 3.10 venv)")
        self.python = python

    def identity(self) -> dict[str, str]:
        return {"qairt": self.qairt_version, "qairt_sdk": self.sdk.version}

    def options(self, soc: Soc, precision: Precision, htp: HtpSettings) -> JSON:
        if htp.spill_fill:
            raise BadInput("--spill-fill is an option of the ort backend; the qairt backend's HTP config "
                           "does not set it")
        flags = CONVERTER_FLAGS + (["--input_list", CALIBRATION, "--use_native_input_files"]
                                   if precision == Precision.W8A16 else [])
        return {"converter": flags, "htp_config": {"vtcm_mb": htp.vtcm_mb or soc.vtcm_mb,
                                                   "O": htp.optimization_mode or 3, "soc_id": soc.soc_id,
                                                   "dsp_arch": soc.dsp_arch}, "ldflags": LDFLAGS}

    def compile(self, job: CompileJob, work: Path, log: IO[str], tools: Tools) -> Compiled:
        g, env, warnings = job.graph, self.sdk.env(job.options["ldflags"]), []

        def run(cmd: list[str]) -> None:
            _run(tools, cmd, log, env, job.log)

        # Temporary files live inside the staging folder: an interrupted job leaves one folder to remove.
        with tempfile.TemporaryDirectory(prefix=".tmp-", dir=work) as tmp:
            t = Path(tmp)
            flags = [str(input_list(job, t / "calibration")) if f == CALIBRATION else f
                     for f in job.options["converter"]]
            run([str(self.sdk.converter), "--input_network", str(job.model), "--output_path", str(t / f"{g}.cpp"),
                 *flags])
            config = htp_config(self.sdk, job.options["htp_config"], g, t / f"config-{g}")
            targets = []
            if shutil.which("ndk-build", path=env["PATH"]) is None:
                targets = ["-t", HOST]
                warnings.append(f"ndk-build is not on PATH: built the {HOST} model library only (the context binary "
                                f"needs no more); install the Android NDK for the {ANDROID} library")
            run([self.python, str(self.sdk.model_lib_generator), "-c", str(t / f"{g}.cpp"), "-b", str(t / f"{g}.bin"),
                 "-o", str(t / "model_libs"), *targets])
            run([str(self.sdk.context_binary_generator), "--backend", str(self.sdk.htp_backend),
                 "--model", str(t / "model_libs" / HOST / f"lib{g}.so"), "--output_dir", str(t / "binary"),
                 "--binary_file", g, "--config_file", str(config)])
            files = [(f"{g}.bin", CONTEXT_BINARY)]
            _take(t / "binary" / f"{g}.bin", work / f"{g}.bin")
            android = t / "model_libs" / ANDROID / f"lib{g}.so"
            if android.is_file():
                _take(android, work / f"lib{g}.so")
                files.append((f"lib{g}.so", "qnn-model-lib"))
        return Compiled(files, warnings)


def input_list(job: CompileJob, folder: Path) -> Path:
    """Calibration samples as raw files in the model's dtypes, and the list file naming them per input."""

    if job.calibration is None:
        raise CompileError(f"{job.graph}: w8a16 needs calibration samples (--calib DIR)")
    specs = model_inputs(job.model)
    samples = load_samples(job.calibration, specs)
    folder.mkdir(parents=True)
    lines = []
    for i, sample in enumerate(samples):
        entries = []
        for j, spec in enumerate(specs):
            raw = folder / f"{i:05d}_{j}.raw"
            sample[spec.name].tofile(raw)
            entries.append(f"{spec.name}:={raw}")
        lines.append(" ".join(entries))
    listing = folder / "input_list.txt"
    listing.write_text("\n".join(lines) + "\n")
    return listing


def _run(tools: Tools, cmd: list[str], log: IO[str], env: dict[str, str], log_path: Path) -> None:
    tool = Path(cmd[1] if cmd[0].endswith(("python3", "python")) else cmd[0]).name
    log.write(f"\n$ {shlex.join(cmd)}\n")
    try:
        code = tools.run(cmd, log, env)
    except OSError as e:
        raise CompileError(f"cannot run {tool}: {e.strerror}") from None
    if code != 0:  # a converter that met ops without a QNN translation names them in the log
        raise CompileError(logs.unsupported_error(logs.parse_file(log_path, limit=None))
                           or f"{tool} failed (exit {code}); see the log")


def _take(src: Path, dst: Path) -> None:
    if not src.is_file():
        raise CompileError(f"{src.name} was not written by the SDK tools; see the log")
    shutil.move(src, dst)

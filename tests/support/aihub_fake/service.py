"""FakeAiHub: a local stand-in for the Qualcomm AI Hub REST service that the real, unmodified `qai-hub` client
(0.56.0) talks to, on 127.0.0.1.

Messages are the client's own protobuf definitions (qai_hub.public_api_pb2: the wire protocol's definition). The
endpoints, their order and their quirks are those recorded in /work/shared/facts/qai-hub-protocol.md. Uploads and
downloads go to the fake's own URLs (never S3). Jobs do real work in a child process (htp_worker.py): a compile job
to qnn_context_binary builds a QNN context binary with the host HTP compiler; a compile job to qnn_dlc writes the
fake's DLC STAND-IN (not a real DLC: see htp_worker.dlc_job), which only the fake's link jobs accept, and a link job
builds the context binary from it with the host HTP compiler; inference and profile jobs run a context binary on the
host HTP emulator and measure it.

    fake = FakeAiHub().start()
    ... client.ini with api_token=fake.token, api_url=fake.api_url, web_url=fake.web_url ...
    fake.stop()

Failure injection (each lasts until changed; `times` limits an injected error to that many requests):
    fake.reject_tokens()                          every API call answers 401
    fake.refuse_job_creation(429 | 403, detail, times=None)   POST jobs/ answers status + {"detail": detail}
    fake.inject_error(method, pattern, status, detail, times=None)   any API path (re.search on "jobs/j…/")
    fake.fail_get(pattern, status=500, times=1)   a GET whose API path matches answers 500
    fake.fail_jobs("compile" | "link" | "inference", reason, failure_type=…)   later jobs of that kind end FAILED
    fake.slow_jobs(seconds, kind=None)            jobs (of that kind) wait this long in their running state
    fake.remove_device(name) / fake.restore_device(name)   the device disappears from devices/ and its jobs fail
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeAlias
from urllib.parse import parse_qs, urlparse

from qai_hub import public_api_pb2 as pb

from qnndeploy.qnn import toolchain

# the service's enums, as the client's protobuf stubs type them
JobState: TypeAlias = "pb.JobState.ValueType"
ModelType: TypeAlias = "pb.ModelType.ValueType"
FailureType: TypeAlias = "pb.JobFailureType.ValueType"

DEVICES_FILE = Path(__file__).with_name("devices.json")
WORKER = Path(__file__).with_name("htp_worker.py")  # run as a script: it needs neither qai_hub nor this package
REPO_ROOT = Path(__file__).resolve().parents[3]
QAIRT_VERSION = _installed.qairt if (_installed := toolchain.current()) else "unknown"  # what the jobs run on
ACCEPTED_QAIRT = {".".join(QAIRT_VERSION.split(".")[:2]), QAIRT_VERSION, "latest", "default"}
JSON = "application/json"
PROTOBUF = "application/x-protobuf"

_DTYPES = {"float32": pb.TENSOR_DTYPE_FLOAT32, "int32": pb.TENSOR_DTYPE_INT32, "int64": pb.TENSOR_DTYPE_INT64,
           "int8": pb.TENSOR_DTYPE_INT8, "uint8": pb.TENSOR_DTYPE_UINT8, "int16": pb.TENSOR_DTYPE_INT16,
           "uint16": pb.TENSOR_DTYPE_UINT16, "float16": pb.TENSOR_DTYPE_FLOAT16, "bool": pb.TENSOR_DTYPE_BOOL}

_COMPILE_OPTIONS = {"target_runtime", "compute_unit", "qairt_version", "truncate_64bit_io", "truncate_64bit_tensors"}
_QUANTIZE_OPTIONS = {"quantize_full_type", "quantize_io", "quantize_io_type", "quantize_weight_type"}
_INFERENCE_OPTIONS = {"compute_unit", "qairt_version", "max_profiler_iterations", "max_profiler_time"}
_LINK_OPTIONS = {"qairt_version"}  # what qai-hub-models 0.65 passes to its link jobs
_LINK_REFUSED = {"qnn_options"}  # a real link option (qai-hub's submit_link_job docstring) the fake cannot honour
KINDS = ("compile", "link", "inference")
_RUNNING = {"compile": pb.JOB_STATE_OPTIMIZING_MODEL, "link": pb.JOB_STATE_LINKING_MODELS,
            "inference": pb.JOB_STATE_PROVISIONING_DEVICE}  # the first state after CREATED, from the client's lists


class JobRefused(Exception):
    """The job ends FAILED with this reason and failure type."""

    def __init__(self, reason: str, failure_type: FailureType = pb.JOB_FAILURE_TYPE_INVALID_ARGUMENT) -> None:
        super().__init__(reason)
        self.reason = reason
        self.failure_type = failure_type


@dataclass
class InjectedError:
    method: str
    pattern: str
    status: int
    detail: str
    times: int | None  # None: every matching request


@dataclass
class _Compiled:
    """What the fake knows of a context binary it compiled: its EPContext wrapper, for later inference jobs."""

    wrapper: Path
    binary_name: str
    graph: str
    htp_arch: str
    soc_model: int


@dataclass
class _JobRecord:
    job: Any  # pb.Job
    kind: str  # "compile" | "link" | "inference"
    result: Any = None  # pb.JobResult once DONE
    log: list[str] = field(default_factory=list)


def parse_options(options: str) -> dict[str, str | bool]:
    """`--key value` / `--key=value` / `--flag` → {key: value or True}."""
    parsed: dict[str, str | bool] = {}
    tokens = shlex.split(options)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--"):
            raise JobRefused(f"Invalid options: unexpected {token!r} (options are --name value pairs)")
        key, eq, value = token[2:].partition("=")
        if eq:
            parsed[key] = value
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            parsed[key] = tokens[i + 1]
            i += 1
        else:
            parsed[key] = True
        i += 1
    return parsed


def _attribute(device: Any, key: str) -> str | None:
    for attribute in device.attributes:
        name, _, value = attribute.partition(":")
        if name == key:
            return value
    return None


def _os_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


def _os_matches(wanted: str, version: str) -> bool:
    """"" (any), an exact or leading version ("14" matches "14.1"), or an interval "[a,b)" with either end empty."""
    if not wanted:
        return True
    match = re.fullmatch(r"\[([\d.]*),([\d.]*)\)", wanted)
    if match:
        low, high = match.groups()
        return (not low or _os_key(version) >= _os_key(low)) and (not high or _os_key(version) < _os_key(high))
    return version == wanted or version.startswith(wanted + ".")


class FakeAiHub:
    """The fake service. Attributes tests read: api_url, web_url, token, requests (every (method, path, query)
    the fake received), devices (the fleet as pb.Device), jobs (id → record)."""

    def __init__(self, token: str | None = None, devices_file: Path = DEVICES_FILE, max_parallel: int = 2,
                 step_seconds: float = 0.05, profiler_iterations: int = 5, worker_python: str = sys.executable,
                 worker_path: tuple[str, ...] = ()) -> None:
        self.token = token or f"fake-{secrets.token_hex(12)}"
        fleet = json.loads(devices_file.read_text())["devices"]
        self.devices = [pb.Device(name=d["name"], os=d["os"], attributes=d["attributes"],
                                  soc_description=d["soc_description"]) for d in fleet]
        # listed by devices/, but a job for them is refused (qai-hub-models' available_in_workbench: false)
        self.unavailable = {d["name"] for d in fleet if d.get("available_in_workbench") is False}
        self.step_seconds = step_seconds  # pause between two visible job states
        self.profiler_iterations = profiler_iterations  # executions timed per profile (the real default is 100)
        self.worker_python = worker_python  # the interpreter of the jobs' worker: it needs onnxruntime-qnn and h5py
        self.worker_path = worker_path  # more PYTHONPATH entries for the worker
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.jobs: dict[str, _JobRecord] = {}
        self.client_ini: Path | None = None  # set by the aihub fixture
        self._tmp = tempfile.TemporaryDirectory(prefix="aihub-fake-")
        self.root = Path(self._tmp.name)
        self._lock = threading.RLock()
        self._workers = threading.Semaphore(max_parallel)
        self._models: dict[str, Any] = {}
        self._model_files: dict[str, Path] = {}
        self._parts: dict[str, dict[int, bytes]] = {}
        self._datasets: dict[str, Any] = {}
        self._dataset_files: dict[str, Path] = {}
        self._files: dict[str, Path] = {}  # download key → file
        self._compiled: dict[str, _Compiled] = {}  # sha256 of a context binary → its wrapper
        self._removed: set[str] = set()
        self._tokens_rejected = False
        self._errors: list[InjectedError] = []
        self._failures: dict[str, tuple[str, FailureType]] = {}
        self._delays: dict[str | None, float] = {}  # kind (None: every kind) -> seconds
        self._procs: set[subprocess.Popen] = set()
        self._stopping = False
        self._server: ThreadingHTTPServer | None = None

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> FakeAiHub:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="aihub-fake",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping = True
        with self._lock:
            for proc in self._procs:
                proc.kill()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self._tmp.cleanup()

    def __enter__(self) -> FakeAiHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() the fake first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def api_url(self) -> str:
        return self.base_url  # bare host:port: the client urljoins "api/v1/…" onto it

    @property
    def web_url(self) -> str:
        return self.base_url  # only used by the client to print job and model URLs (<web_url>/jobs/<id>/)

    def write_client_ini(self, path: Path, *, token: str | None = None, verbose: bool = False) -> Path:
        """A qai-hub client.ini for this fake, as `qai-hub configure` writes it (section [api]); point the client
        at it with the environment variable QAIHUB_CLIENT_INI. verbose=False: no progress bars on stdout."""
        path.write_text("[api]\n"
                        f"api_token = {self.token if token is None else token}\n"
                        f"api_url = {self.api_url}\n"
                        f"web_url = {self.web_url}\n"
                        f"verbose = {verbose}\n")
        return path

    # --- failure injection ------------------------------------------------------------------------

    def reject_tokens(self, rejected: bool = True) -> None:
        """Every API call answers 401, as for a bad or expired token."""
        self._tokens_rejected = rejected

    def inject_error(self, method: str, pattern: str, status: int, detail: str = "Injected error.",
                     times: int | None = None) -> None:
        """Requests of `method` whose API path (after /api/v1/, e.g. "jobs/jab12cd34/") matches the regex
        `pattern` answer `status` with the JSON body {"detail": detail}; for `times` requests, or all."""
        with self._lock:
            self._errors.append(InjectedError(method.upper(), pattern, status, detail, times))

    def refuse_job_creation(self, status: int = 429, detail: str = "Request was throttled.",
                            times: int | None = None) -> None:
        """POST jobs/ answers `status` (429 rate limit, 403 permission or quota) with {"detail": detail}."""
        self.inject_error("POST", r"^jobs/$", status, detail, times)

    def fail_get(self, pattern: str, status: int = 500, times: int | None = 1) -> None:
        self.inject_error("GET", pattern, status, "Internal server error (injected).", times)

    def clear_errors(self) -> None:
        with self._lock:
            self._errors.clear()

    def fail_jobs(self, kind: str, reason: str | None,
                  failure_type: FailureType = pb.JOB_FAILURE_TYPE_MODEL_INVALID) -> None:
        """Jobs of `kind` ("compile", "link" or "inference", which includes profiling) created from now on end
        FAILED with `reason` after their running state, without doing the work; reason=None stops it."""
        assert kind in KINDS, kind
        if reason is None:
            self._failures.pop(kind, None)
        else:
            self._failures[kind] = (reason, failure_type)

    def slow_jobs(self, seconds: float, kind: str | None = None) -> None:
        """Jobs created from now on (of `kind`, or all) stay this long in their running state (OPTIMIZING_MODEL,
        LINKING_MODELS, PROVISIONING_DEVICE) before working."""
        assert kind is None or kind in KINDS, kind
        self._delays[kind] = seconds

    def remove_device(self, name: str) -> None:
        """The device leaves the fleet: devices/ no longer lists it and its queued or running jobs fail."""
        assert any(d.name == name for d in self.devices), name
        self._removed.add(name)

    def restore_device(self, name: str) -> None:
        self._removed.discard(name)

    # --- helpers used by the handler ----------------------------------------------------------------

    def _new_id(self, prefix: str) -> str:
        return prefix + secrets.token_hex(4)

    def _injected(self, method: str, path: str) -> InjectedError | None:
        with self._lock:
            for error in self._errors:
                if error.method == method and re.search(error.pattern, path):
                    if error.times is not None:
                        error.times -= 1
                        if error.times <= 0:
                            self._errors.remove(error)
                    return error
        return None

    def _fleet(self) -> list[Any]:
        return [d for d in self.devices if d.name not in self._removed]

    def select_devices(self, name: str, os: str, attributes: list[str], select: bool) -> list[Any]:
        found = [d for d in self._fleet() if (not name or d.name == name) and _os_matches(os, d.os)
                 and all(a in d.attributes for a in attributes)]
        if select and found:  # the single best match: the newest OS
            found = [max(found, key=lambda d: _os_key(d.os))]
        return found

    def _store(self, key: str, path: Path) -> str:
        with self._lock:
            self._files[key] = path
        return f"{self.base_url}/files/{key}"

    # --- jobs --------------------------------------------------------------------------------------

    def create_job(self, job: Any, seed_target: bool) -> str:
        kind = job.WhichOneof("job")
        jid = self._new_id("j")
        job.hub_version = f"aihub-fake (QAIRT {QAIRT_VERSION})"
        with self._lock:
            if kind == "compile_job":
                sub = job.compile_job
                sub.compile_job_id = jid
                self._fill_model(sub.model)
                if sub.devices.devices:
                    sub.device.CopyFrom(sub.devices.devices[0])
                self._check_available(sub.device)
                if seed_target:
                    dlc = _target_runtime(sub.options) == "qnn_dlc"
                    sub.target_model.CopyFrom(self._new_target(
                        jid, Path(sub.model.name).stem + (".dlc" if dlc else ".bin"),
                        pb.MODEL_TYPE_QNN_DLC if dlc else pb.MODEL_TYPE_QNN_CONTEXT_BINARY))
                record = _JobRecord(job, "compile")
            elif kind == "link_job":
                sub = job.link_job
                sub.link_job_id = jid
                self._check_available(sub.device)
                if not sub.models.models:
                    raise JobRefused("A link job takes at least one input model.")
                for model in sub.models.models:
                    self._fill_model(model)
                if seed_target:
                    sub.target_model.CopyFrom(self._new_target(jid, Path(sub.models.models[0].name).stem + ".bin",
                                                               pb.MODEL_TYPE_QNN_CONTEXT_BINARY))
                record = _JobRecord(job, "link")
            elif kind == "inference_job":
                sub = job.inference_job
                sub.inference_job_id = jid
                self._check_available(sub.device)
                self._fill_model(sub.model)
                if sub.dataset.dataset_id in self._datasets:
                    sub.dataset.CopyFrom(self._datasets[sub.dataset.dataset_id])
                record = _JobRecord(job, "inference")
            else:
                raise JobRefused(f"the fake does not run {kind} jobs")
            sub.job_state = pb.JOB_STATE_CREATED
            sub.creation_time.GetCurrentTime()
            sub.last_updated_time.GetCurrentTime()
            self.jobs[jid] = record
            self._log(record, f"job {jid} created ({kind}) on {sub.device.name!r}, options {sub.options!r}")
        failure = self._failures.get(record.kind)
        delay = self._delays.get(record.kind, self._delays.get(None, 0.0))
        threading.Thread(target=self._run, args=(jid, failure, delay), name=f"aihub-fake-{jid}",
                         daemon=True).start()
        return jid

    def _check_available(self, device: Any) -> None:
        if device.name in self.unavailable:
            raise JobRefused(f"Device '{device.name}' is not available for jobs.")

    def _new_target(self, jid: str, name: str, model_type: ModelType) -> Any:
        """A job's target model, without a file until the job has made it."""
        target = pb.Model(model_id=self._new_id("m"), name=name, model_type=model_type, producer_id=jid)
        target.creation_time.GetCurrentTime()
        self._models[target.model_id] = target
        return target

    def _fill_model(self, model: Any) -> None:
        known = self._models.get(model.model_id)
        if known is None:
            raise JobRefused(f"Model ID '{model.model_id}' could not be found.")
        model.CopyFrom(known)

    def _log(self, record: _JobRecord, line: str) -> None:
        record.log.append(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}")

    def _set_state(self, jid: str, state: JobState) -> None:
        with self._lock:
            record = self.jobs[jid]
            sub = getattr(record.job, record.job.WhichOneof("job"))
            sub.job_state = state
            sub.last_updated_time.GetCurrentTime()
            if state in _RUNNING.values():
                sub.start_time.GetCurrentTime()
            self._log(record, f"state {pb.JobState.Name(state)}")
        time.sleep(self.step_seconds)

    def _run(self, jid: str, failure: tuple[str, FailureType] | None, delay: float) -> None:
        record = self.jobs[jid]
        sub = getattr(record.job, record.job.WhichOneof("job"))
        time.sleep(self.step_seconds)
        try:
            self._set_state(jid, _RUNNING[record.kind])
            time.sleep(delay)
            if sub.device.name in self._removed:
                raise JobRefused(f"Device '{sub.device.name}' is no longer available.",
                                 pb.JOB_FAILURE_TYPE_RUNTIME_UNKNOWN)
            if failure is not None:
                raise JobRefused(*failure)
            if record.kind == "compile":
                self._compile(jid, record, sub)
            elif record.kind == "link":
                self._link(jid, record, sub)
            else:
                self._set_state(jid, pb.JOB_STATE_MEASURING_PERFORMANCE if sub.is_profiling_on
                                else pb.JOB_STATE_RUNNING_INFERENCE)
                self._infer(jid, record, sub)
            final, reason, failure_type = pb.JOB_STATE_DONE, "", pb.JOB_FAILURE_TYPE_SUCCESS
        except JobRefused as e:
            final, reason, failure_type = pb.JOB_STATE_FAILED, e.reason, e.failure_type
        except Exception as e:  # noqa: BLE001 a bug of the fake shows as a failed job with its message, not a hang
            final, reason, failure_type = (pb.JOB_STATE_FAILED, f"aihub_fake internal error: {e!r}",
                                           pb.JOB_FAILURE_TYPE_INTERNAL_LOGIC)
        with self._lock:
            sub.job_state = final
            sub.failure_reason = reason
            record.job.failure_type = failure_type
            sub.completion_time.GetCurrentTime()
            sub.last_updated_time.GetCurrentTime()
            self._log(record, f"state {pb.JobState.Name(final)}" + (f": {reason}" if reason else ""))
            record.job.available_artifacts.append(pb.JOB_ARTIFACT_TYPE_HUB_LOG)

    def _device_target(self, device: Any) -> tuple[str, int]:
        """(htp_arch "73", soc_model 43) from the device's hexagon: and soc-model: attributes."""
        known = next((d for d in self.devices if d.name == device.name), None)
        if known is None:
            raise JobRefused(f"Device '{device.name}' is not available.", pb.JOB_FAILURE_TYPE_INVALID_ARGUMENT)
        hexagon, soc_model = _attribute(known, "hexagon"), _attribute(known, "soc-model")
        if "framework:qnn" not in known.attributes or not hexagon or not soc_model:
            raise JobRefused(f"Device '{device.name}' does not support QNN (no framework:qnn, hexagon and "
                             "soc-model attributes): the fake cannot target its NPU", pb.JOB_FAILURE_TYPE_UNSUPPORTED)
        return hexagon.removeprefix("v"), int(soc_model)

    def _work(self, jid: str, record: _JobRecord, spec: dict[str, Any]) -> dict[str, Any]:
        """Run htp_worker.py on `spec` in a child process (at most max_parallel at a time)."""
        folder = self.root / "jobs" / jid
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "spec.json").write_text(json.dumps(spec))
        result_path = folder / "result.json"
        env = {"PYTHONPATH": ":".join([str(REPO_ROOT), *self.worker_path]), "PATH": "/usr/bin:/bin"}
        with self._workers:
            if self._stopping:
                raise JobRefused("the service is shutting down", pb.JOB_FAILURE_TYPE_INTERNAL_UNKNOWN)
            proc = subprocess.Popen([self.worker_python, str(WORKER), str(folder / "spec.json"),
                                     str(result_path)], cwd=folder, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            with self._lock:
                self._procs.add(proc)
            try:
                output, _ = proc.communicate(timeout=600)
            except subprocess.TimeoutExpired:
                proc.kill()
                output, _ = proc.communicate()
            finally:
                with self._lock:
                    self._procs.discard(proc)
        for line in output.decode(errors="replace").splitlines()[-50:]:
            self._log(record, f"worker: {line}")
        if not result_path.is_file():
            raise JobRefused(f"the job's worker ended with code {proc.returncode} and no result",
                             pb.JOB_FAILURE_TYPE_RUNTIME_CRASH)
        result = json.loads(result_path.read_text())
        if not result["ok"]:
            self._log(record, f"worker error: {result.get('traceback') or result['error']}")
        return result

    def _compile(self, jid: str, record: _JobRecord, sub: Any) -> None:
        options = parse_options(sub.options)
        unknown = sorted(set(options) - _COMPILE_OPTIONS - _QUANTIZE_OPTIONS)
        if unknown:
            raise JobRefused(f"Invalid options: unknown option --{unknown[0]}")
        runtime = options.get("target_runtime")
        if runtime is None:
            raise JobRefused("Invalid options: --target_runtime is required by the fake (it compiles only to "
                             "--target_runtime qnn_context_binary or qnn_dlc)")
        if runtime not in ("qnn_context_binary", "qnn_dlc"):
            raise JobRefused(f"Invalid options: --target_runtime {runtime} is not supported by the fake "
                             "(only qnn_context_binary and qnn_dlc)", pb.JOB_FAILURE_TYPE_UNSUPPORTED)
        quantize = sorted(set(options) & _QUANTIZE_OPTIONS)
        if quantize:
            raise JobRefused(f"Invalid options: --{quantize[0]} is not supported by the fake: it compiles float "
                             "models to fp16 context binaries only", pb.JOB_FAILURE_TYPE_UNSUPPORTED)
        unit = options.get("compute_unit", "npu")
        if not isinstance(unit, str) or "npu" not in unit.split(","):
            raise JobRefused(f"Invalid options: --compute_unit {unit} has no npu; a context binary runs on the NPU")
        self._check_qairt(options)
        if len(sub.devices.devices) > 1:
            raise JobRefused("the fake compiles for one device per job (single_compile with several devices)",
                             pb.JOB_FAILURE_TYPE_UNSUPPORTED)
        if sub.model.model_type != pb.MODEL_TYPE_ONNX or sub.model.is_directory:
            raise JobRefused(f"the fake compiles single-file ONNX models, not {pb.ModelType.Name(sub.model.model_type)}"
                             + (" directories" if sub.model.is_directory else ""), pb.JOB_FAILURE_TYPE_UNSUPPORTED)
        htp_arch, soc_model = self._device_target(sub.device)
        source = self._model_files.get(sub.model.model_id)
        if source is None:
            raise JobRefused("the model's upload is not complete", pb.JOB_FAILURE_TYPE_MODEL_CORRUPT)
        shapes = {t.name: list(t.tensor_type.shape) for t in sub.tensor_type_list.types if t.tensor_type.shape}
        out = self.root / "jobs" / jid / "out"
        if runtime == "qnn_dlc":
            self._compile_dlc(jid, record, sub, {"task": "dlc", "model": str(source), "out_dir": str(out),
                                                 "name": Path(sub.model.name).stem + ".dlc", "input_shapes": shapes})
            return
        result = self._work(jid, record, {"task": "compile", "model": str(source), "out_dir": str(out),
                                          "soc_model": soc_model, "htp_arch": htp_arch, "input_shapes": shapes})
        if not result["ok"]:
            raise JobRefused(f"Failed to compile the model for {sub.device.name}: {result['error']}",
                             pb.JOB_FAILURE_TYPE_QNN_TOOL_ERROR)
        inputs = self._publish_binary(jid, record, sub, result, htp_arch, soc_model, Path(sub.model.name).stem)
        with self._lock:
            sub.target_tensor_type_list.CopyFrom(inputs)
            record.result = pb.JobResult(compile_job_result=pb.CompileJobResult(
                compile_job_id=jid, compile_detail=pb.CompileDetail(tool_versions=_tools())))

    def _compile_dlc(self, jid: str, record: _JobRecord, sub: Any, spec: dict[str, Any]) -> None:
        """--target_runtime qnn_dlc: the target model is the fake's DLC stand-in (htp_worker.dlc_job)."""
        result = self._work(jid, record, spec)
        if not result["ok"]:
            raise JobRefused(f"Failed to compile the model for {sub.device.name}: {result['error']}",
                             pb.JOB_FAILURE_TYPE_QNN_TOOL_ERROR)
        dlc = Path(result["dlc"])
        inputs = pb.NamedTensorTypeList(types=[_named(t) for t in result["inputs"]])
        with self._lock:
            target = self._target(jid, sub, spec["name"], pb.MODEL_TYPE_QNN_DLC)
            target.input_spec.CopyFrom(inputs)
            target.output_spec.CopyFrom(pb.NamedTensorTypeList(types=[_named(t) for t in result["outputs"]]))
            target.metadata.entries[pb.MODEL_METADATA_KEY_QAIRT_SDK_VERSION] = QAIRT_VERSION
            self._model_files[target.model_id] = dlc
            sub.target_model.CopyFrom(target)
            sub.target_tensor_type_list.CopyFrom(inputs)
            record.result = pb.JobResult(compile_job_result=pb.CompileJobResult(
                compile_job_id=jid, compile_detail=pb.CompileDetail(tool_versions=_tools())))
        self._log(record, f"wrote {dlc.name}, the fake's DLC stand-in ({dlc.stat().st_size} bytes; not a QNN DLC: "
                  "only this fake's link jobs read it)")

    def _link(self, jid: str, record: _JobRecord, sub: Any) -> None:
        """A link job: the fake's own DLC stand-in -> a real QNN context binary for the job's device."""
        options = parse_options(sub.options)
        unknown = sorted(set(options) - _LINK_OPTIONS - _LINK_REFUSED)
        if unknown:
            raise JobRefused(f"Invalid options: unknown option --{unknown[0]}")
        refused = sorted(set(options) & _LINK_REFUSED)
        if refused:
            raise JobRefused(f"Invalid options: --{refused[0]} is not supported by the fake: it links with the host "
                             "HTP compiler's defaults", pb.JOB_FAILURE_TYPE_UNSUPPORTED)
        self._check_qairt(options)
        models = list(sub.models.models)
        if len(models) != 1:
            raise JobRefused(f"the fake links one DLC per job, not {len(models)}: a context of several graphs with "
                             "shared weights is not emulated", pb.JOB_FAILURE_TYPE_UNSUPPORTED)
        if models[0].model_type != pb.MODEL_TYPE_QNN_DLC:
            raise JobRefused(f"Input model must be a QNN DLC model, not {pb.ModelType.Name(models[0].model_type)}.")
        htp_arch, soc_model = self._device_target(sub.device)
        source = self._model_files.get(models[0].model_id)
        if source is None:
            raise JobRefused(f"Model '{models[0].model_id}' has no file (not uploaded, or its job has not made it)",
                             pb.JOB_FAILURE_TYPE_MODEL_CORRUPT)
        out = self.root / "jobs" / jid / "out"
        result = self._work(jid, record, {"task": "link", "dlc": str(source), "out_dir": str(out),
                                          "soc_model": soc_model, "htp_arch": htp_arch})
        if not result["ok"]:
            if result.get("refused"):
                raise JobRefused(f"Failed to link {models[0].name}: {result['error']}",
                                 pb.JOB_FAILURE_TYPE_UNSUPPORTED)
            raise JobRefused(f"Failed to link the model for {sub.device.name}: {result['error']}",
                             pb.JOB_FAILURE_TYPE_QNN_TOOL_ERROR)
        self._publish_binary(jid, record, sub, result, htp_arch, soc_model, Path(models[0].name).stem)
        with self._lock:
            record.result = pb.JobResult(link_job_result=pb.LinkJobResult(
                link_job_id=jid, link_detail=pb.LinkDetail(tool_versions=_tools())))

    def _target(self, jid: str, sub: Any, name: str, model_type: ModelType) -> Any:
        """The job's seeded target model, or a new one; marked complete (the caller stores its file)."""
        target = self._models[sub.target_model.model_id] if sub.HasField("target_model") else \
            self._new_target(jid, name, model_type)
        target.file_upload_complete = True
        return target

    def _publish_binary(self, jid: str, record: _JobRecord, sub: Any, result: dict[str, Any], htp_arch: str,
                        soc_model: int, stem: str) -> Any:
        """A compile or link job's context binary as its target model (with AI Hub's QNN metadata keys), kept with
        its EPContext wrapper for later inference jobs; the binary's inputs."""
        binary = Path(result["binary"])
        digest = hashlib.sha256(binary.read_bytes()).hexdigest()
        inputs = pb.NamedTensorTypeList(types=[_named(t) for t in result["inputs"]])
        outputs = pb.NamedTensorTypeList(types=[_named(t) for t in result["outputs"]])
        with self._lock:
            self._compiled[digest] = _Compiled(Path(result["wrapper"]), binary.name, result["graph"], htp_arch,
                                               soc_model)
            target = self._target(jid, sub, stem + ".bin", pb.MODEL_TYPE_QNN_CONTEXT_BINARY)
            target.input_spec.CopyFrom(inputs)
            target.output_spec.CopyFrom(outputs)
            metadata = target.metadata.entries
            metadata[pb.MODEL_METADATA_KEY_QAIRT_SDK_VERSION] = QAIRT_VERSION
            metadata[pb.MODEL_METADATA_KEY_QNN_SDK_VERSION] = result["sdk_version"]
            metadata[pb.MODEL_METADATA_KEY_QNN_MODEL_GRAPH_NAMES] = result["graph"]
            metadata[pb.MODEL_METADATA_KEY_QNN_CONTEXT_BIN_HEXAGON_VERSION] = f"v{htp_arch}"
            metadata[pb.MODEL_METADATA_KEY_QNN_CONTEXT_BIN_SOC_MODEL] = str(soc_model)
            metadata[pb.MODEL_METADATA_KEY_QNN_CONTEXT_BIN_BACKEND] = "HTP"
            self._model_files[target.model_id] = binary
            sub.target_model.CopyFrom(target)
        self._log(record, f"compiled {binary.name} ({binary.stat().st_size} bytes, sha256 {digest}) "
                  f"for soc_model {soc_model}, v{htp_arch} in {result['compile_time_us']} µs")
        return inputs

    def _check_qairt(self, options: dict[str, str | bool]) -> None:
        wanted = options.get("qairt_version")
        if wanted is not None and wanted not in ACCEPTED_QAIRT:
            raise JobRefused(f"Invalid options: --qairt_version {wanted} is not available on the fake "
                             f"(it has QAIRT {QAIRT_VERSION})", pb.JOB_FAILURE_TYPE_QNN_VERSION_MISMATCH)

    def _infer(self, jid: str, record: _JobRecord, sub: Any) -> None:
        options = parse_options(sub.options)
        unknown = sorted(set(options) - _INFERENCE_OPTIONS)
        if unknown:
            raise JobRefused(f"Invalid options: unknown option --{unknown[0]}")
        self._check_qairt(options)
        if sub.model.model_type != pb.MODEL_TYPE_QNN_CONTEXT_BINARY:
            raise JobRefused("the fake runs only QNN context binaries (.bin), not "
                             f"{pb.ModelType.Name(sub.model.model_type)}", pb.JOB_FAILURE_TYPE_UNSUPPORTED)
        htp_arch, soc_model = self._device_target(sub.device)
        binary = self._model_files.get(sub.model.model_id)
        if binary is None:
            raise JobRefused("the model's upload is not complete", pb.JOB_FAILURE_TYPE_MODEL_CORRUPT)
        folder = self.root / "jobs" / jid
        folder.mkdir(parents=True, exist_ok=True)
        compiled = self._compiled.get(hashlib.sha256(binary.read_bytes()).hexdigest())
        if compiled is not None:
            if compiled.htp_arch != htp_arch:
                raise JobRefused(f"The context binary was compiled for Hexagon v{compiled.htp_arch}; "
                                 f"{sub.device.name} has v{htp_arch}", pb.JOB_FAILURE_TYPE_DSP_VERSION_MISMATCH)
            wrapper = folder / "model_ctx.onnx"
            shutil.copy(compiled.wrapper, wrapper)
            shutil.copy(binary, folder / compiled.binary_name)
            spec_binary = folder / compiled.binary_name
        else:  # a binary the fake did not compile: the worker reads its graph and writes the wrapper
            wrapper = folder / "foreign_ctx.onnx"
            spec_binary = folder / "foreign.bin"
            shutil.copy(binary, spec_binary)
        iterations = int(options.get("max_profiler_iterations", self.profiler_iterations))
        dataset = self._dataset_files.get(sub.dataset.dataset_id) if sub.dataset.dataset_id else None
        if sub.dataset.dataset_id and dataset is None:
            raise JobRefused("the input dataset's upload is not complete", pb.JOB_FAILURE_TYPE_INVALID_INPUTS)
        outputs_h5 = folder / "outputs.h5"
        result = self._work(jid, record, {
            "task": "run", "wrapper": str(wrapper), "binary": str(spec_binary), "soc_model": soc_model,
            "htp_arch": htp_arch, "inputs_h5": str(dataset) if dataset else None, "outputs_h5": str(outputs_h5),
            "profile": sub.is_profiling_on, "iterations": max(iterations, 1)})
        info = result.get("binary_info")
        if info and info.get("dsp_arch") and info["dsp_arch"] != f"v{htp_arch}":
            raise JobRefused(f"The context binary was compiled for Hexagon {info['dsp_arch']}; "
                             f"{sub.device.name} has v{htp_arch}", pb.JOB_FAILURE_TYPE_DSP_VERSION_MISMATCH)
        if not result["ok"]:
            raise JobRefused(f"Failed to run the model on {sub.device.name}: {result['error']}",
                             pb.JOB_FAILURE_TYPE_RUNTIME_UNKNOWN)
        job_result = pb.InferenceJobResult(inference_job_id=jid)
        with self._lock:
            if dataset is not None:
                out = pb.Dataset(dataset_id=self._new_id("d"), name=f"{sub.name or 'inference'}-outputs",
                                 file_upload_complete=True, read_only=True)
                out.creation_time.GetCurrentTime()
                out.expiration_time.FromSeconds(out.creation_time.seconds + 30 * 86400)
                self._datasets[out.dataset_id] = out
                self._dataset_files[out.dataset_id] = outputs_h5
                job_result.output_dataset_id = out.dataset_id
            if sub.is_profiling_on:
                graph = info["graph"] if info else compiled.graph if compiled else "graph"
                job_result.detail.CopyFrom(_profile_detail(result, graph))
                sub.execution_time = job_result.detail.execution_time
                sub.execution_peak_memory.lower = sub.execution_peak_memory.upper = \
                    job_result.detail.after_execution_peak_memory
            record.result = pb.JobResult(inference_job_result=job_result)
        self._log(record, f"ran on the HTP emulator for soc_model {soc_model}, v{htp_arch}: cold load "
                  f"{result['cold_load_time_us']} µs, warm load {result['warm_load_time_us']} µs, execution "
                  f"{result['execution_times_us']} µs")


def _tools() -> list[Any]:
    return [pb.ToolVersion(name="QAIRT", version=QAIRT_VERSION)]


def _target_runtime(options: str) -> str | bool | None:
    """The --target_runtime of an options string, None when absent or unreadable (the job then fails on it)."""
    try:
        return parse_options(options).get("target_runtime")
    except (JobRefused, ValueError):
        return None


def _named(t: dict[str, Any]) -> Any:
    shape = [d if isinstance(d, int) else -1 for d in t["shape"]]
    return pb.NamedTensorType(name=t["name"], tensor_type=pb.TensorType(
        shape=shape, dtype=_DTYPES.get(t["dtype"], pb.TENSOR_DTYPE_UNSPECIFIED)))


def _profile_detail(result: dict[str, Any], graph: str) -> Any:
    """ProfileDetail 1.2 from the worker's measurements: times in µs, memory in bytes of the worker process."""
    memory = result["memory"]
    detail = pb.ProfileDetail(
        major_version=1, minor_version=2, execution_time=result["execution_time_us"],
        cold_load_time=result["cold_load_time_us"], warm_load_time=result["warm_load_time_us"], compile_time=0,
        load_time=result["cold_load_time_us"], peak_memory_usage=memory["after_execution"][1],
        all_execution_times=result["execution_times_us"], all_cold_load_times=[result["cold_load_time_us"]],
        all_warm_load_times=[result["warm_load_time_us"]],
        tool_versions=[pb.ToolVersion(name="QAIRT", version=QAIRT_VERSION)])
    for stage, field_name in (("cold_load", "cold_load"), ("warm_load", "warm_load"), ("execution", "execution")):
        (before_rss, before_peak), (after_rss, after_peak) = memory[f"before_{stage}"], memory[f"after_{stage}"]
        setattr(detail, f"before_{field_name}_current_memory", before_rss)
        setattr(detail, f"before_{field_name}_peak_memory", before_peak)
        setattr(detail, f"after_{field_name}_current_memory", after_rss)
        setattr(detail, f"after_{field_name}_peak_memory", after_peak)
        usage = getattr(detail, f"{field_name}_memory")
        usage.increase.lower = usage.increase.upper = max(after_rss - before_rss, 0)
        usage.peak.lower = usage.peak.upper = after_peak
    detail.layer_details.add(name=graph, id="0", compute_unit=pb.COMPUTE_UNIT_NPU, layer_type_name="QnnGraph",
                             delegate_name="QNN", execution_time=result["execution_time_us"])
    return detail


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeAiHub  # set on the subclass made by FakeAiHub.start

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # --- plumbing ----------------------------------------------------------------------------------

    def _body(self) -> bytes:
        if self.headers.get("Content-Length"):
            return self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":  # the client chunks bodies over 1 MiB
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def _send(self, status: int, body: Any = b"", content_type: str | None = PROTOBUF,
              headers: dict[str, str] | None = None) -> None:
        if hasattr(body, "SerializeToString"):
            body = body.SerializeToString()
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)  # exactly this: the client compares it verbatim
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _detail(self, status: int, detail: str) -> None:
        self._send(status, json.dumps({"detail": detail}).encode(), JSON)

    def _dispatch(self, method: str) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        body = self._body()
        fake = self.fake
        with fake._lock:
            fake.requests.append((method, url.path, query))
        try:
            if url.path.startswith("/api/v1/"):
                self._api(method, url.path[len("/api/v1/"):], query, body)
            elif method == "PUT" and (m := re.fullmatch(r"/upload/(\w+)/(\d+)", url.path)):
                self._upload_part(m.group(1), int(m.group(2)), body)
            elif method == "POST" and (m := re.fullmatch(r"/form-upload/(\w+)", url.path)):
                self._upload_form(m.group(1), body)
            elif method == "GET" and (m := re.fullmatch(r"/files/([\w.-]+)", url.path)):
                path = fake._files.get(m.group(1))
                if path is None or not path.is_file():
                    self._send(404, b"<Error><Code>NoSuchKey</Code><Message>The specified key does not exist."
                               b"</Message></Error>", "application/xml")
                else:
                    self._send(200, path.read_bytes(), "application/octet-stream")
            else:
                self._detail(404, "Not found.")
        except JobRefused as e:
            self._detail(400, e.reason)
        except Exception as e:  # noqa: BLE001 a bug of the fake answers 500 with its message instead of a hang
            self._send(500, f"aihub_fake error: {e!r}".encode(), "text/plain")

    def _upload_part(self, mid: str, part: int, body: bytes) -> None:
        with self.fake._lock:
            self.fake._parts.setdefault(mid, {})[part] = body
        self._send(200, b"", None, {"ETag": f'"{hashlib.md5(body).hexdigest()}"'})

    def _upload_form(self, did: str, body: bytes) -> None:
        head = f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode()
        message = BytesParser(policy=HTTP).parsebytes(head + body)
        parts = {p.get_param("name", header="content-disposition"): p for p in message.iter_parts()}
        file_part = parts.get("file")
        if file_part is None:
            self._send(400, b"<Error><Code>InvalidArgument</Code><Message>no file field</Message></Error>",
                       "application/xml")
            return
        path = self.fake.root / "datasets" / f"{did}.h5"
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = file_part.get_payload(decode=True)
        assert isinstance(payload, bytes)  # a decoded single part
        path.write_bytes(payload)
        with self.fake._lock:
            self.fake._dataset_files[did] = path
        self._send(204, b"", None)

    # --- the API -----------------------------------------------------------------------------------

    def _api(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> None:
        fake = self.fake
        if fake._tokens_rejected or self.headers.get("Authorization") != f"token {fake.token}":
            self._detail(401, "Invalid token.")
            return
        path = re.sub(r"^projects/[^/]+/", "", path)  # a default_project only prefixes the collection paths
        injected = fake._injected(method, path)
        if injected is not None:
            self._detail(injected.status, injected.detail)
            return
        parts = path.strip("/").split("/")
        route = (method, parts[0], len(parts))
        one = query.get
        if route == ("GET", "users", 3) and parts[1:] == ["auth", "user"]:
            self._send(200, pb.User(id=1, email="tester@example.com", first_name="Test", last_name="User", org_id=1))
        elif route == ("GET", "devices", 1):
            devices = fake.select_devices(one("name", [""])[0], one("os", [""])[0], one("attributes", []),
                                          one("select", ["False"])[0].lower() == "true")
            self._send(200, pb.DeviceList(devices=devices, total_query_count=len(devices)))
        elif route == ("GET", "frameworks", 1):
            self._send(200, pb.FrameworkList(frameworks=[pb.Framework(
                name="QAIRT", api_version="2.51", api_tags=["default", "latest"], full_version=QAIRT_VERSION)],
                total_query_count=1))
        elif parts[0] == "models":
            self._models(method, parts, body)
        elif parts[0] == "datasets":
            self._datasets(method, parts, body)
        elif parts[0] == "jobs":
            self._jobs(method, parts, query, body)
        else:
            self._detail(404, "Not found.")

    def _created(self, status: int, oid: str, message: Any = None) -> None:
        response = pb.CreateUpdateResponse(id=oid)
        if message is not None:
            response.creation_time.CopyFrom(message.creation_time)
            if hasattr(message, "expiration_time") and message.HasField("expiration_time"):
                response.expiration_time.CopyFrom(message.expiration_time)
        self._send(status, response)

    def _models(self, method: str, parts: list[str], body: bytes) -> None:
        fake = self.fake
        if method == "POST" and len(parts) == 1:
            new = pb.Model.FromString(body)
            new.model_id = fake._new_id("m")
            new.creation_time.GetCurrentTime()
            with fake._lock:
                fake._models[new.model_id] = new
            self._created(201, new.model_id, new)
            return
        if method == "GET" and len(parts) == 1:
            models = list(fake._models.values())
            self._send(200, pb.ModelList(models=models, total_query_count=len(models)))
            return
        model = fake._models.get(parts[1])
        if model is None:
            self._detail(404, "Not found.")
        elif len(parts) == 2 and method == "GET":
            self._send(200, model)
        elif parts[2:] == ["multipart_upload"] and method == "GET":
            response = pb.FileUploadResponse()
            response.multipart_url.urls.append(f"{fake.base_url}/upload/{model.model_id}/0")
            response.multipart_url.upload_id = f"upload-{model.model_id}"
            response.multipart_url.max_part_size = 1 << 40  # one part: the client sends the whole file
            self._send(200, response)
        elif parts[2:] == ["multipart_upload"] and method == "POST":
            complete = pb.FileMultipartUploadComplete.FromString(body)
            chunks = fake._parts.pop(model.model_id, {})
            etags = [f'"{hashlib.md5(chunks[i]).hexdigest()}"' for i in sorted(chunks)]
            if complete.upload_id != f"upload-{model.model_id}" or list(complete.etags) != etags:
                self._detail(400, "The upload's parts do not match (upload_id or ETags).")
                return
            path = fake.root / "models" / model.model_id / Path(model.name).name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"".join(chunks[i] for i in sorted(chunks)))
            with fake._lock:
                fake._model_files[model.model_id] = path
                model.file_upload_complete = True
            self._created(200, model.model_id)
        elif parts[2:] == ["download"] and method == "GET":
            stored = fake._model_files.get(model.model_id)
            if stored is None:
                self._detail(404, f"Model '{model.model_id}' has no file yet: its producer job "
                                  f"{model.producer_id or '-'} has not produced it.")
                return
            download = pb.FileDownloadResponse()
            download.url.url = fake._store(f"model-{model.model_id}", stored)
            download.url.filename = model.name
            self._send(200, download)
        else:
            self._detail(404, "Not found.")

    def _datasets(self, method: str, parts: list[str], body: bytes) -> None:
        fake = self.fake
        if method == "POST" and len(parts) == 1:
            new = pb.Dataset.FromString(body)
            new.dataset_id = fake._new_id("d")
            new.creation_time.GetCurrentTime()
            new.expiration_time.FromSeconds(new.creation_time.seconds + 30 * 86400)
            with fake._lock:
                fake._datasets[new.dataset_id] = new
            self._created(201, new.dataset_id, new)
            return
        if method == "GET" and len(parts) == 1:
            datasets = list(fake._datasets.values())
            self._send(200, pb.DatasetList(datasets=datasets, total_query_count=len(datasets)))
            return
        dataset = fake._datasets.get(parts[1])
        if dataset is None:
            self._detail(404, "Not found.")
        elif len(parts) == 2 and method == "GET":
            self._send(200, dataset)
        elif len(parts) == 2 and method == "PATCH":
            update = pb.Dataset.FromString(body)
            if update.file_upload_complete and dataset.dataset_id not in fake._dataset_files:
                self._detail(400, "The dataset's file was not uploaded.")
                return
            with fake._lock:
                dataset.file_upload_complete = dataset.file_upload_complete or update.file_upload_complete
                if update.name:
                    dataset.name = update.name
            self._created(200, dataset.dataset_id)
        elif parts[2:] == ["upload_url"] and method == "GET":
            response = pb.FileUploadResponse()
            response.url.url = f"{fake.base_url}/form-upload/{dataset.dataset_id}"
            response.url.file_field_name = "file"
            response.url.fields["key"] = f"datasets/{dataset.dataset_id}/data.h5"
            self._send(200, response)
        elif parts[2:] == ["download_data"] and method == "GET":
            stored = fake._dataset_files.get(dataset.dataset_id)
            if stored is None:
                self._detail(404, "The dataset has no data.")
                return
            download = pb.FileDownloadResponse()
            download.url.url = fake._store(f"dataset-{dataset.dataset_id}.h5", stored)
            download.url.filename = f"{dataset.dataset_id}.h5"
            self._send(200, download)
        else:
            self._detail(404, "Not found.")

    def _jobs(self, method: str, parts: list[str], query: dict[str, list[str]], body: bytes) -> None:
        fake = self.fake
        if method == "POST" and len(parts) == 1:
            seed = query.get("seed_target_model", ["false"])[0].lower() == "true"
            jid = fake.create_job(pb.Job.FromString(body), seed)
            self._created(201, jid, _sub(fake.jobs[jid].job))
            return
        if method == "GET" and len(parts) == 1:
            with fake._lock:
                jobs = [pb.Job().FromString(r.job.SerializeToString()) for r in fake.jobs.values()]
            self._send(200, pb.JobList(jobs=jobs, total_query_count=len(jobs)))
            return
        record = fake.jobs.get(parts[1])
        if record is None:
            self._detail(404, "Not found.")
            return
        if len(parts) == 2 and method == "GET":
            with fake._lock:
                data = record.job.SerializeToString()
            self._send(200, data)
        elif len(parts) == 2 and method == "PATCH":
            update = pb.JobPublicUpdate.FromString(body)
            with fake._lock:
                _sub(record.job).name = update.name
            self._created(200, parts[1])
        elif parts[2:] == ["result"] and method == "GET":
            if record.result is None:
                self._detail(404, f"Job {parts[1]} has no result: it is not DONE.")
            else:
                self._send(200, record.result)
        elif len(parts) == 6 and parts[2] == "device_runs" and parts[4] == "artifact_list" and method == "GET":
            listing = pb.NamedArtifactDownloadURLList()
            if parts[5] == str(pb.JOB_ARTIFACT_TYPE_HUB_LOG) and pb.JOB_ARTIFACT_TYPE_HUB_LOG in \
                    record.job.available_artifacts:
                path = fake.root / "jobs" / parts[1] / "hub.log"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("\n".join(record.log) + "\n")
                listing.artifacts.add(url=fake._store(f"log-{parts[1]}", path), filename=f"{parts[1]}_hub.log")
            self._send(200, listing)
        else:
            self._detail(404, "Not found.")


def _sub(job: Any) -> Any:
    return getattr(job, job.WhichOneof("job"))

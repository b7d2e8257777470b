"""The AI Hub stand-in (tests/support/aihub_fake) driven by the real, unmodified qai-hub client: devices, compile, link,
inference and profile jobs with real work on the host HTP, and each injected failure as the client reports it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.support import synth_models
from tests.support.host import require

try:
    import qai_hub
except ImportError:
    from tests.support.host import IN_CI

    if IN_CI:  # CI installs the test extra, which pins qai-hub
        raise
    pytest.skip("qai-hub is not installed (pip install qai-hub==0.56.0)", allow_module_level=True)

from qnndeploy.qnn import htp
from qnndeploy.qnn.qnnsystem import read_context
from tests.support.aihub_fake import DEVICES_FILE, FakeAiHub
from tests.support.aihub_fake.service import QAIRT_VERSION, REPO_ROOT, WORKER

pytest_plugins = ["tests.support.aihub_fake.fixtures"]
# The stand-in's own tests: slow tier (tests/qnn/test_aihub.py exercises it through the product in the fast tier).
pytestmark = [pytest.mark.slow]

SM8650 = "chipset:qualcomm-snapdragon-8gen3"
FAMILY = ".".join(QAIRT_VERSION.split(".")[:2])  # the release the stand-in's jobs compile with
QUALCOMM_BOARDS = {"Snapdragon 8 Elite QRD", "Snapdragon 8 Elite Gen 5 QRD", "Dragonwing IQ-9075 EVK", "SA8255P ADP"}


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(synth_models.static_mlp(batch="N"), str(path))  # a dynamic batch: the job's input specs fix it
    return path


@pytest.fixture(scope="module")
def foreign_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A context binary for SM8650 (v75) that no FakeAiHub compiled: made by the fake's worker directly."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP backend)")
    folder = tmp_path_factory.mktemp("foreign")
    model = folder / "mlp.onnx"
    onnx.save(synth_models.static_mlp(batch=1), str(model))
    spec = {"task": "compile", "model": str(model), "out_dir": str(folder / "out"), "soc_model": 57, "htp_arch": "75"}
    (folder / "spec.json").write_text(json.dumps(spec))
    subprocess.run([sys.executable, str(WORKER), str(folder / "spec.json"), str(folder / "result.json")],
                   check=True, capture_output=True, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    result = json.loads((folder / "result.json").read_text())
    assert result["ok"], result
    binary = folder / "mlp.bin"
    Path(result["binary"]).rename(binary)
    return binary


def _cpu(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


# --- devices and configuration -----------------------------------------------------------------------


def downloaded(job: qai_hub.client.CompileJob | qai_hub.client.LinkJob, folder: Path) -> Path:
    """The job's target model, downloaded into folder (the client types it Optional)."""
    path = job.download_target_model(str(folder))
    assert isinstance(path, str), path
    return Path(path)


def target_model(job: qai_hub.client.CompileJob | qai_hub.client.LinkJob) -> qai_hub.client.Model:
    model = job.get_target_model()
    assert model is not None
    return model


def test_fleet_file_attributes_are_key_value_with_a_source():
    fleet = json.loads(DEVICES_FILE.read_text())["devices"]
    assert len(fleet) >= 6
    for device in fleet:
        assert device["source"]
        assert all(a.count(":") == 1 for a in device["attributes"]), device["name"]  # qai-hub list-devices splits
    chipsets = {a for d in fleet for a in d["attributes"] if a.startswith("chipset:qualcomm-")}
    # SM8750 and SM8850 under both spellings: qai-hub-models 0.65.0's -for-galaxy names and 0.46.1's plain ones
    assert {"chipset:qualcomm-snapdragon-8-elite-for-galaxy", "chipset:qualcomm-snapdragon-8-elite",
            "chipset:qualcomm-snapdragon-8-elite-gen5-for-galaxy", "chipset:qualcomm-snapdragon-8-elite-gen5",
            "chipset:qualcomm-qcs9075", "chipset:qualcomm-sa8255p"} <= chipsets
    assert [d["name"] for d in fleet if d.get("available_in_workbench") is False] == ["SA8255P ADP"]


def test_get_devices_filters_by_attribute_name_and_os(aihub: FakeAiHub):
    names = {d.name for d in qai_hub.get_devices(attributes="chipset:qualcomm-snapdragon-8gen2")}
    assert names == {"Samsung Galaxy S23", "Samsung Galaxy S23 Ultra"}
    boards = qai_hub.get_devices(attributes=["framework:qnn", "vendor:qualcomm"])
    assert {d.name for d in boards} == QUALCOMM_BOARDS
    elite = qai_hub.get_devices(attributes="chipset:qualcomm-snapdragon-8-elite")
    assert [d.name for d in elite] == ["Snapdragon 8 Elite QRD"]
    assert {"hexagon:v79", "soc-model:69", "chipset:sm8750"} <= set(elite[0].attributes)
    galaxy = qai_hub.get_devices(attributes="chipset:qualcomm-snapdragon-8-elite-for-galaxy")
    assert [d.name for d in galaxy] == ["Samsung Galaxy S25"] and "chipset:sm8750-ac" in galaxy[0].attributes
    assert [d.os for d in qai_hub.get_devices(name="Samsung Galaxy S23 Ultra")] == ["13"]
    assert {d.name for d in qai_hub.get_devices(os="[14,15)", attributes="os:android")} == {
        "Samsung Galaxy S23", "Samsung Galaxy S24", "Google Pixel 8", "SA8255P ADP"}
    every = qai_hub.get_devices()
    assert {"Google Pixel 8", "Samsung Galaxy A73 5G"} <= {d.name for d in every}
    assert "framework:qnn" not in next(d for d in every if d.name == "Google Pixel 8").attributes
    assert "soc-model:43" in qai_hub.get_device_attributes()
    assert all(r[:2] == ("GET", "/api/v1/devices/") for r in aihub.requests)


def test_a_wrong_token_is_a_user_error(aihub: FakeAiHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    client = qai_hub.Client(config=qai_hub.ClientConfig(api_token="not-the-token", api_url=aihub.api_url,
                                                        web_url=aihub.web_url, verbose=False))
    with pytest.raises(qai_hub.client.UserError, match="Failed to authenticate"):
        client.get_devices()
    aihub.reject_tokens()
    with pytest.raises(qai_hub.client.UserError, match="Failed to authenticate"):
        qai_hub.get_devices()


def test_no_configuration_is_a_user_error(aihub_unconfigured: Path):
    with pytest.raises(qai_hub.client.UserError, match="Failed to load client configuration"):
        qai_hub.get_devices()


def test_an_unknown_or_vanished_device_is_not_available(aihub: FakeAiHub, mlp: Path):
    with pytest.raises(qai_hub.client.UserError, match="is not available"):
        qai_hub.submit_compile_job(str(mlp), device=qai_hub.Device("Nokia 3310"),
                                   options="--target_runtime qnn_context_binary")
    aihub.remove_device("Samsung Galaxy S24")
    assert "Samsung Galaxy S24" not in {d.name for d in qai_hub.get_devices()}
    with pytest.raises(qai_hub.client.UserError, match="is not available"):
        qai_hub.submit_compile_job(str(mlp), device=qai_hub.Device(attributes=SM8650),
                                   options="--target_runtime qnn_context_binary")
    assert aihub.jobs == {}  # the client resolves the device first: no job was created


def test_a_device_not_available_for_jobs_is_listed_but_refuses_jobs(aihub: FakeAiHub, mlp: Path):
    (board,) = qai_hub.get_devices(attributes="chipset:qualcomm-sa8255p")
    assert board.name == "SA8255P ADP"
    with pytest.raises(qai_hub.client.UserError, match="not available for jobs"):
        qai_hub.submit_compile_job(str(mlp), device=qai_hub.Device("SA8255P ADP"),
                                   options="--target_runtime qnn_dlc")
    assert aihub.jobs == {}


# --- real work ---------------------------------------------------------------------------------------

@pytest.mark.needs_qnn
def test_compile_by_chipset_then_inference_matches_the_cpu(aihub: FakeAiHub, mlp: Path, tmp_path: Path):
    job = qai_hub.submit_compile_job(str(mlp), device=qai_hub.Device(attributes=SM8650),
                                     options="--target_runtime qnn_context_binary",
                                     input_specs={"x": ((1, 16), "float32")})
    assert job.device.name == "Samsung Galaxy S24"
    assert job.wait().success, aihub.jobs[job.job_id].log
    binary = downloaded(job, tmp_path)
    assert binary.name == "mlp.bin"
    info = read_context(binary)  # QAIRT's own reader: a real context binary for the S24's SoC
    assert (info.soc_model, info.dsp_arch, info.build_id.startswith(f"v{QAIRT_VERSION}.")) == (57, "v75", True)
    assert [tuple(g.inputs[0].dims) for g in info.graphs] == [(1, 16)]
    metadata = target_model(job).metadata
    assert metadata[qai_hub.ModelMetadataKey.QAIRT_SDK_VERSION] == QAIRT_VERSION

    x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)
    x2 = np.random.default_rng(2).standard_normal((1, 16)).astype(np.float32)
    inference = qai_hub.submit_inference_job(str(binary), device=qai_hub.Device("Samsung Galaxy S24"),
                                             inputs={"x": [x, x2]}, profile=False)
    assert inference.wait().success, aihub.jobs[inference.job_id].log
    outputs = inference.download_output_data()
    assert outputs is not None
    expected = [_cpu(synth_models.static_mlp(batch=1), {"x": v})[0] for v in (x, x2)]
    assert len(outputs["y"]) == 2
    for got, want in zip(outputs["y"], expected, strict=True):
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2  # fp16 on the HTP emulator
    states = [line.split("state ")[1] for line in aihub.jobs[inference.job_id].log if " state " in line]
    assert states == ["JOB_STATE_PROVISIONING_DEVICE", "JOB_STATE_RUNNING_INFERENCE", "JOB_STATE_DONE"]


@pytest.mark.needs_qnn
def test_compile_to_qnn_dlc_then_link_makes_the_context_binary(aihub: FakeAiHub, mlp: Path, tmp_path: Path):
    """The flow of qai-hub-models 0.65 for context binaries: compile to qnn_dlc, link the DLC, as the client sends
    it (submit_link_job: a LinkJob with the DLC's model id and the resolved device, seed_target_model=true)."""
    compiled = qai_hub.submit_compile_job(str(mlp), device=qai_hub.Device(attributes=SM8650),
                                          options="--target_runtime qnn_dlc --compute_unit npu",
                                          input_specs={"x": ((1, 16), "float32")})
    assert compiled.wait().success, aihub.jobs[compiled.job_id].log
    dlc = compiled.get_target_model()
    assert dlc is not None and dlc.model_type == qai_hub.SourceModelType.QNN_DLC
    stand_in = downloaded(compiled, tmp_path)
    assert stand_in.name == "mlp.dlc"
    with zipfile.ZipFile(stand_in) as archive:  # the fake's DLC stand-in, not a QNN DLC
        assert "not a QNN DLC" in json.loads(archive.read("aihub_fake_dlc.json"))["format"]

    linked = qai_hub.submit_link_job([dlc], device=qai_hub.Device(attributes=SM8650), name="mlp-link",
                                     options=f"--qairt_version {FAMILY}")
    assert isinstance(linked, qai_hub.client.LinkJob) and linked.device.name == "Samsung Galaxy S24"
    assert linked.wait().success, aihub.jobs[linked.job_id].log
    sent = aihub.jobs[linked.job_id].job.link_job
    assert [m.model_id for m in sent.models.models] == [dlc.model_id] and sent.options == f"--qairt_version {FAMILY}"
    assert [r[2] for r in aihub.requests if r[:2] == ("POST", "/api/v1/jobs/")][-1] == {"seed_target_model": ["true"]}
    again = qai_hub.get_job(linked.job_id)
    assert isinstance(again, qai_hub.client.LinkJob) and [m.model_id for m in again.models] == [dlc.model_id]
    binary = downloaded(linked, tmp_path)
    assert binary.name == "mlp.bin"
    info = read_context(binary)  # QAIRT's own reader: a real context binary, made by the link
    assert (info.soc_model, info.dsp_arch, [tuple(g.inputs[0].dims) for g in info.graphs]) == (57, "v75", [(1, 16)])
    assert target_model(linked).metadata[qai_hub.ModelMetadataKey.QNN_CONTEXT_BIN_SOC_MODEL] == "57"
    states = [line.split("state ")[1] for line in aihub.jobs[linked.job_id].log if " state " in line]
    assert states == ["JOB_STATE_LINKING_MODELS", "JOB_STATE_DONE"]

    x = np.random.default_rng(3).standard_normal((1, 16)).astype(np.float32)
    run = qai_hub.submit_inference_job(str(binary), device=qai_hub.Device("Samsung Galaxy S24"), inputs={"x": [x]})
    assert run.wait().success, aihub.jobs[run.job_id].log
    want = _cpu(synth_models.static_mlp(batch=1), {"x": x})[0]
    outputs = run.download_output_data()
    assert outputs is not None
    got = outputs["y"][0]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2


def test_a_link_takes_only_the_fakes_own_dlc_stand_ins(aihub: FakeAiHub, tmp_path: Path):
    junk = tmp_path / "real.dlc"
    junk.write_bytes(b"a file with a .dlc name: the fake cannot read real QNN DLCs")
    linked = qai_hub.submit_link_job(str(junk), device=qai_hub.Device("Samsung Galaxy S24"))
    status = linked.wait()
    assert status.failure and "not a DLC this fake's compile jobs made" in (status.message or "")
    with pytest.raises(qai_hub.client.UserError, match="has no file"):
        linked.download_target_model(str(tmp_path))

    other = tmp_path / "other.dlc"
    other.write_bytes(b"another")
    two = qai_hub.submit_link_job([str(junk), str(other)], device=qai_hub.Device("Samsung Galaxy S24"))
    assert "links one DLC per job" in (two.wait().message or "")
    refused = qai_hub.submit_link_job(str(junk), device=qai_hub.Device("Samsung Galaxy S24"),
                                      options="--qnn_options default_graph_htp_optimizations=O=3")
    assert "--qnn_options is not supported by the fake" in (refused.wait().message or "")
    with pytest.raises(qai_hub.client.UserError, match="does not support QNN model input"):  # the client's check
        qai_hub.submit_link_job(str(junk), device=qai_hub.Device("Samsung Galaxy A73 5G"))


@pytest.mark.needs_qnn
def test_profile_of_an_uploaded_binary_measures_on_the_emulator(aihub: FakeAiHub, foreign_binary: Path,
                                                                 tmp_path: Path):
    job = qai_hub.submit_inference_job(str(foreign_binary), device=qai_hub.Device(attributes=SM8650),
                                       inputs=None, profile=True)
    assert job.wait().success, aihub.jobs[job.job_id].log
    profile = job.download_profile()
    summary = profile["execution_summary"]
    assert summary["estimated_inference_time"] > 0 and summary["first_load_time"] > 0
    assert summary["warm_load_time"] > 0 and summary["estimated_inference_peak_memory"] > 10 << 20
    assert len(summary["all_inference_times"]) == 5
    assert sorted(summary["all_inference_times"])[2] == summary["estimated_inference_time"]  # the median
    assert [d["compute_unit"] for d in profile["execution_detail"]] == ["NPU"]
    job.download_job_logs(str(tmp_path))
    assert "ran on the HTP emulator" in next(tmp_path.glob("*_hub.log")).read_text()


@pytest.mark.needs_qnn
def test_a_binary_for_another_hexagon_fails_on_the_device(aihub: FakeAiHub, foreign_binary: Path):
    job = qai_hub.submit_inference_job(str(foreign_binary), device=qai_hub.Device("Samsung Galaxy S23"),
                                       inputs=None, profile=True)
    status = job.wait()
    assert status.failure and "compiled for Hexagon v75" in (status.message or "")


@pytest.mark.needs_qnn
def test_a_graph_the_htp_cannot_take_fails_the_compile(aihub: FakeAiHub, tmp_path: Path):
    path = tmp_path / "det.onnx"
    onnx.save(synth_models.unsupported_op(), str(path))
    job = qai_hub.submit_compile_job(str(path), device=qai_hub.Device("Samsung Galaxy S23"),
                                     options="--target_runtime qnn_context_binary")
    job.wait()
    status = job.get_status()
    assert status.failure and (status.message or "").startswith("Failed to compile the model for Samsung Galaxy S23")
    with pytest.raises(qai_hub.client.UserError, match="has no file"):
        job.download_target_model(str(tmp_path))
    # compile -> link: the DLC step only loads the model; the link is where the HTP compiler rejects the graph
    dlc = qai_hub.submit_compile_job(str(path), device=qai_hub.Device("Samsung Galaxy S23"),
                                     options="--target_runtime qnn_dlc")
    assert dlc.wait().success, aihub.jobs[dlc.job_id].log
    link = qai_hub.submit_link_job(dlc.get_target_model(), device=qai_hub.Device("Samsung Galaxy S23"))
    status = link.wait()
    assert status.failure and (status.message or "").startswith("Failed to link the model for Samsung Galaxy S23")


# --- refused options and injected failures (no HTP work) -------------------------------------------------

@pytest.mark.parametrize(("options", "reason"), [
    ("", "--target_runtime is required"),
    ("--target_runtime tflite", "--target_runtime tflite is not supported"),
    ("--target_runtime qnn_context_binary --quantize_full_type w8a16", "--quantize_full_type is not supported"),
    ("--target_runtime qnn_context_binary --qairt_version 2.37", "--qairt_version 2.37 is not available"),
    ("--target_runtime qnn_context_binary --frobnicate", "unknown option --frobnicate"),
])
def test_options_the_fake_cannot_honour_fail_the_compile(aihub: FakeAiHub, mlp: Path, tmp_path: Path,
                                                          options: str, reason: str):
    job = qai_hub.submit_compile_job(str(mlp), device=qai_hub.Device("Samsung Galaxy S23"), options=options)
    status = job.wait()
    assert status.failure and reason in (status.message or "")
    job.download_job_logs(str(tmp_path))
    assert reason in next(tmp_path.glob("*_hub.log")).read_text()


def test_injected_job_failures_carry_their_reason(aihub: FakeAiHub, mlp: Path, tmp_path: Path):
    aihub.fail_jobs("compile", "Out of memory while compiling (injected)")
    job = qai_hub.submit_compile_job(str(mlp), device=qai_hub.Device("Samsung Galaxy S23"),
                                     options="--target_runtime qnn_context_binary")
    assert job.wait().message == "Out of memory while compiling (injected)"
    aihub.fail_jobs("link", "Linker ran out of memory (injected)")
    dlc = tmp_path / "any.dlc"
    dlc.write_bytes(b"never read: the injected failure comes first")
    link = qai_hub.submit_link_job(str(dlc), device=qai_hub.Device("Samsung Galaxy S23"))
    assert link.wait().message == "Linker ran out of memory (injected)"
    aihub.fail_jobs("inference", "Device lost during the run (injected)")
    binary = tmp_path / "any.bin"
    binary.write_bytes(b"not a context binary: the injected failure comes first")
    run = qai_hub.submit_inference_job(str(binary), device=qai_hub.Device("Samsung Galaxy S23"), profile=True)
    status = run.wait()
    assert status.failure and status.message == "Device lost during the run (injected)"


def test_rate_limit_and_quota_on_job_creation(aihub: FakeAiHub, mlp: Path, aihub_fast_retries: None):
    aihub.refuse_job_creation(429, "Request was throttled.")
    start = time.monotonic()
    with pytest.raises(qai_hub.client.RateLimitedError, match="throttled"):
        qai_hub.submit_compile_job(str(mlp), device=qai_hub.Device("Samsung Galaxy S23"),
                                   options="--target_runtime qnn_context_binary", retry=False)
    assert time.monotonic() - start < 5
    posts = [r for r in aihub.requests if r[:2] == ("POST", "/api/v1/jobs/")]
    assert len(posts) == 7  # the client's own backoff tries, then RateLimitedError
    aihub.clear_errors()
    aihub.refuse_job_creation(403, "You have reached your monthly job quota.")
    with pytest.raises(qai_hub.client.UserError, match="monthly job quota"):
        qai_hub.submit_compile_job(str(mlp), device=qai_hub.Device("Samsung Galaxy S23"),
                                   options="--target_runtime qnn_context_binary")
    assert aihub.jobs == {}


def test_a_500_on_a_get_is_retried_by_the_client(aihub: FakeAiHub, aihub_fast_retries: None):
    aihub.fail_get(r"^devices/$", times=1)
    assert qai_hub.get_devices(name="Samsung Galaxy S23")
    assert [r[1] for r in aihub.requests].count("/api/v1/devices/") == 2
    aihub.fail_get(r"^devices/$", times=None)
    with pytest.raises(qai_hub.client.InternalError):
        qai_hub.get_devices()


def test_a_slow_job_times_out_on_the_client_and_a_vanished_device_fails_it(aihub: FakeAiHub, mlp: Path,
                                                                          tmp_path: Path):
    aihub.slow_jobs(5, "link")  # a kind's own delay
    dlc = tmp_path / "any.dlc"
    dlc.write_bytes(b"never read")
    link = qai_hub.submit_link_job(str(dlc), device=qai_hub.Device("Samsung Galaxy S23"))
    with pytest.raises(TimeoutError, match="timed out"):
        link.wait(timeout=0.5)  # type: ignore[arg-type]  # typed int; seconds as a float work
    assert link.get_status().code == "LINKING_MODELS"
    aihub.slow_jobs(1.5)
    job = qai_hub.submit_compile_job(str(mlp), device=qai_hub.Device("Samsung Galaxy S23"),
                                     options="--target_runtime qnn_context_binary")
    with pytest.raises(TimeoutError, match="timed out"):
        job.wait(timeout=0.5)  # type: ignore[arg-type]  # typed int; seconds as a float work
    assert job.get_status().code == "OPTIMIZING_MODEL"
    aihub.remove_device("Samsung Galaxy S23")  # while the job waits for it
    status = job.wait()
    assert status.failure and status.message == "Device 'Samsung Galaxy S23' is no longer available."
    assert qai_hub.get_devices(name="Samsung Galaxy S23") == []


def test_the_fake_serves_its_own_client_ini(aihub: FakeAiHub, aihub_ini: Path, tmp_path: Path):
    text = aihub_ini.read_text()
    assert f"api_url = {aihub.api_url}" in text and "verbose = False" in text
    copy = aihub.write_client_ini(tmp_path / "other.ini", token="wrong")
    assert "api_token = wrong" in copy.read_text()

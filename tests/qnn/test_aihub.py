"""Qualcomm AI Hub as remote compiler and device farm: `compile --backend aihub`, `device verify --aihub`,
`device list --aihub` and `doctor`, with the real qai-hub 0.56.0 client talking to support/aihub_fake, a STAND-IN of
the AI Hub service on 127.0.0.1 that speaks the client's wire protocol and does the jobs on the host HTP emulator
(no machine here reaches the real service)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qnndeploy.base import socs
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.base.fileio import sha256_file
from qnndeploy.compile import aihub as backend
from qnndeploy.compile.jobs import CompileJob, Tools
from qnndeploy.device import hosted
from qnndeploy.formats.records import HtpSettings, read_record
from qnndeploy.qnn import aihub, htp
from tests.support import bundles
from tests.support.cli import run
from tests.support.host import require

pytest_plugins = ["tests.support.aihub_fake.fixtures"]
pytestmark = [pytest.mark.needs_qnn]

SOCS = ("SM8550", "SM8650", "SM8750")
# SM8750's devices: the Galaxy S25 under AI Hub's current chipset name, the QRD under the older one
CURRENT, OLDER = "Samsung Galaxy S25", "Snapdragon 8 Elite QRD"


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    """Poll AI Hub's jobs every 50 ms, not 5 s."""
    require(htp.available(), "onnxruntime-qnn")
    monkeypatch.setattr(aihub, "POLL_S", 0.05)


def posts(fake, path: str) -> list[str]:
    """The POST requests the stand-in received at /api/v1/PATH."""
    return [r[1] for r in fake.requests if r[0] == "POST" and r[1] == f"/api/v1/{path}"]


def model(tmp_path: Path, name: str = "mlp", width: int = 16) -> Path:
    return bundles.tiny_model(tmp_path / f"{name}.onnx", width)


def device_queries(fake) -> list[list[str]]:
    """The attribute filters of the devices/ requests the stand-in received, in order."""
    return [r[2].get("attributes", []) for r in fake.requests if r[:2] == ("GET", "/api/v1/devices/")]


def check_compile_then_link(fake, record: dict) -> None:
    """The record's two AI Hub jobs, as the stand-in saw them: a compile to a QNN DLC, then a link of exactly that
    DLC, on a device with the record's chipset, whose target model is the binary in the build."""
    hub = record["aihub"]
    compiled, linked = fake.jobs[hub["job_id"]], fake.jobs[hub["link"]["job_id"]]
    assert (compiled.kind, linked.kind) == ("compile", "link")
    assert hub["url"].endswith(f"jobs/{hub['job_id']}/")
    assert hub["link"]["url"].endswith(f"jobs/{hub['link']['job_id']}/")
    # both jobs ask for the pinned compiler's QAIRT: binaries the bundle's runtime loads and validate can run
    family = ".".join(htp.qairt_version().split(".")[:2])
    assert compiled.job.compile_job.options == f"--target_runtime qnn_dlc --compute_unit npu --qairt_version {family}"
    assert linked.job.link_job.options == f"--qairt_version {family}"
    dlc = compiled.job.compile_job.target_model
    assert dlc.model_type == fake_pb().MODEL_TYPE_QNN_DLC
    assert [m.model_id for m in linked.job.link_job.models.models] == [dlc.model_id]
    assert linked.job.link_job.device.name == hub["device"]
    assert f"chipset:{hub['chipset']}" in linked.job.link_job.device.attributes
    binary = next(o for o in record["outputs"] if o["format"] == "qnn-context-binary")
    assert sha256_file(fake._model_files[linked.job.link_job.target_model.model_id]) == binary["sha256"]


def fake_pb():
    from qai_hub import public_api_pb2

    return public_api_pb2


@pytest.mark.slow
def test_a_build_from_ai_hub_is_accepted_by_validate_bundle_verify_and_scaffold(aihub, tmp_path):
    """The done-when: three SoCs compiled on AI Hub give a build/ every later stage accepts unchanged; then the
    bundle's own binaries run on two hosted phones, compared with the CPU, timed and recorded."""
    build = tmp_path / "build"
    done = run("compile", str(model(tmp_path)), *(f"--soc={s}" for s in SOCS), "--backend", "aihub", "-o",
               str(build), "--no-cache", "--json")
    assert done.exit_code == 0, done.output
    for soc in SOCS:
        record = json.loads((build / "mlp" / soc / "compile.json").read_text())
        assert record["backend"] == "aihub" and record["status"] == "ok"
        assert record["qairt_version"] == htp.qairt_version()  # what the binary says it was built with
        check_compile_then_link(aihub, record)
        assert {o["format"] for o in record["outputs"]} == {"qnn-context-binary", "ort-epcontext"}
        assert record["context"]["graphs"]  # read back by libQnnSystem like every compile's
        assert read_record(build / "mlp" / soc / "compile.json") is not None
    assert len(posts(aihub, "jobs/")) == 2 * len(SOCS)  # a compile and a link job per SoC
    sm8750 = json.loads((build / "mlp" / "SM8750" / "compile.json").read_text())["aihub"]
    assert (sm8750["chipset"], sm8750["device"]) == ("qualcomm-snapdragon-8-elite-for-galaxy", CURRENT)
    validated = run("validate", str(build), "--json")
    assert validated.exit_code == 0, validated.output
    assert {t["status"] for t in json.loads(validated.stdout)["targets"]} == {"passed"}
    assert run("bundle", "build", "--name", "mlp", "--version", "1.0.0", "--from-build", str(build), "-o",
               str(tmp_path / "bundle")).exit_code == 0
    bundle = tmp_path / "bundle" / "mlp-1.0.0"
    assert run("bundle", "verify", str(bundle)).exit_code == 0
    assert run("scaffold", str(bundle), "--package", "com.example.hub", "-o", str(tmp_path / "glue")).exit_code == 0

    records = tmp_path / "records"
    verified = run("device", "verify", str(bundle), "--aihub", "--device", "Samsung Galaxy S23", "--soc", "SM8750",
                   "-o", str(records), "--json")
    assert verified.exit_code == 0, verified.output
    devices = json.loads(verified.stdout)["devices"]
    assert [d["serial"] for d in devices] == ["Samsung Galaxy S23", CURRENT]
    for d in devices:
        assert d["ok"] and d["provider"] == "npu" and d["runner"] == "aihub"
        (g,) = d["graphs"]
        assert g["status"] == "passed" and g["outputs"][0]["snr_db"] > 30
        h = g["hosted"]
        assert h["job_id"] and h["url"] and h["inference_ms"] > 0 and h["first_load_ms"] > 0
        assert h["warm_load_ms"] > 0 and h["compute_units"] == {"NPU": 1}
    saved = sorted(json.loads(p.read_text())["device"]["serial"] for p in records.glob("*.json"))
    assert saved == sorted(["Samsung Galaxy S23", CURRENT])
    table = run("device", "verify", str(bundle), "--aihub", "--device", OLDER, "--soc", "SM8550", "-o",
                str(records))  # SM8750's binary on the device listed under the older chipset name
    assert table.exit_code == 0, table.output
    rows = [line for line in table.output.splitlines() if "/jobs/" in line]
    assert len(rows) == 2 and all(" passed " in r and "/jobs/" in r for r in rows), table.output
    assert "infer ms" in table.output and "load ms" in table.output and "warm ms" in table.output

    listed = run("device", "list", "--aihub", "--bundle", str(bundle), "--json")
    assert listed.exit_code == 0, listed.output
    rows = {r["device"]["name"]: r for r in json.loads(listed.stdout)}
    for name in (CURRENT, OLDER):
        assert rows[name]["device"]["soc"] == "SM8750" and rows[name]["choice"]["provider"] == "npu"
    assert rows["Samsung Galaxy S22 5G"]["choice"]["provider"] == "cpu"  # SM8450: not in this bundle
    assert rows["Google Pixel 8"]["device"]["soc"] is None


def test_device_list_maps_chipsets_to_the_catalog(aihub):
    listed = run("device", "list", "--aihub")
    assert listed.exit_code == 0, listed.output
    lines = {line.split("  ")[0].strip(): line for line in listed.output.splitlines()}
    assert "SM8650 (v75)" in lines["Samsung Galaxy S24"]
    assert "not in the catalog" in lines["Google Pixel 8"]
    rows = {r["device"]["name"]: r["device"] for r in json.loads(run("device", "list", "--aihub", "--json").stdout)}
    # each chipset spelling, the current AI Hub's and the older releases', maps to its catalog SoC
    for name, chipset, soc in [(CURRENT, "qualcomm-snapdragon-8-elite-for-galaxy", "SM8750"),
                               (OLDER, "qualcomm-snapdragon-8-elite", "SM8750"),
                               ("Samsung Galaxy S26", "qualcomm-snapdragon-8-elite-gen5-for-galaxy", "SM8850"),
                               ("Snapdragon 8 Elite Gen 5 QRD", "qualcomm-snapdragon-8-elite-gen5", "SM8850"),
                               ("Dragonwing IQ-9075 EVK", "qualcomm-qcs9075", "QCS9100")]:
        assert (rows[name]["chipset"], rows[name]["soc"]) == (chipset, soc), name
        assert f"{soc} ({socs.find(soc).dsp_arch})" in lines[name]


def test_a_soc_is_asked_for_by_its_current_chipset_name_then_by_older_ones(aihub):
    sm8750 = socs.find("SM8750")
    target = device_for(sm8750)
    assert (target.chipset, target.hosted.name) == ("qualcomm-snapdragon-8-elite-for-galaxy", CURRENT)
    assert device_queries(aihub) == [["chipset:qualcomm-snapdragon-8-elite-for-galaxy", "framework:qnn"]]
    aihub.remove_device(CURRENT)  # a service that lists SM8750 only under the older name
    target = device_for(sm8750)
    assert (target.chipset, target.hosted.name, target.hosted.soc) == ("qualcomm-snapdragon-8-elite", OLDER, "SM8750")
    assert device_queries(aihub)[1:] == [["chipset:qualcomm-snapdragon-8-elite-for-galaxy", "framework:qnn"],
                                         ["chipset:qualcomm-snapdragon-8-elite", "framework:qnn"]]
    assert list(target.device.attributes) == ["chipset:qualcomm-snapdragon-8-elite", "framework:qnn"]
    assert device_for(socs.find("QCS9100")).hosted.name == "Dragonwing IQ-9075 EVK"  # AI Hub's qcs9075


def device_for(soc):
    """qnndeploy.qnn.aihub.device_for (inside a test, `aihub` is the stand-in fixture)."""
    return aihub.device_for(soc)


def test_compile_makes_a_dlc_then_links_it_and_records_both_jobs(aihub, tmp_path):
    """QCS9100 on AI Hub's qcs9075 board: a compile job to qnn_dlc, a link job of its DLC, the link's context binary
    in the build, and both jobs in the record and in the job's log."""
    build = tmp_path / "b"
    done = run("compile", str(model(tmp_path)), "--soc", "QCS9100", "--backend", "aihub", "-o", str(build),
               "--no-cache", "--json")
    assert done.exit_code == 0, done.output
    record = json.loads((build / "mlp" / "QCS9100" / "compile.json").read_text())
    assert record["status"] == "ok" and read_record(build / "mlp" / "QCS9100" / "compile.json") is not None
    hub = record["aihub"]
    assert (hub["chipset"], hub["device"]) == ("qualcomm-qcs9075", "Dragonwing IQ-9075 EVK")
    check_compile_then_link(aihub, record)
    assert (record["context"]["soc_model"], record["context"]["dsp_arch"]) == (77, "v73")
    family = ".".join(htp.qairt_version().split(".")[:2])
    assert record["options"]["compile_options"] == (f"--target_runtime qnn_dlc --compute_unit npu --qairt_version "
                                                    f"{family}")
    log = (build / "logs" / "mlp-QCS9100.log").read_text()
    assert f"AI Hub compile job {hub['job_id']}: {hub['url']}" in log
    assert f"AI Hub link job {hub['link']['job_id']}: {hub['link']['url']}" in log
    assert log.index("OPTIMIZING_MODEL") < log.index("AI Hub link job") < log.index("LINKING_MODELS")


def test_a_device_listed_under_the_older_chipset_name_compiles_too(aihub, tmp_path):
    aihub.remove_device(CURRENT)
    build = tmp_path / "b"
    done = run("compile", str(model(tmp_path)), "--soc", "SM8750", "--backend", "aihub", "-o", str(build),
               "--no-cache")
    assert done.exit_code == 0, done.output
    record = json.loads((build / "mlp" / "SM8750" / "compile.json").read_text())
    assert (record["aihub"]["chipset"], record["aihub"]["device"]) == ("qualcomm-snapdragon-8-elite", OLDER)
    check_compile_then_link(aihub, record)


def test_a_chipset_ai_hub_runs_no_jobs_on_is_refused_before_any_upload(aihub, tmp_path):
    """SA8255: AI Hub lists SA8255P ADP as not available for jobs (the stand-in lists it too, and refuses its jobs)."""
    done = run("compile", str(model(tmp_path)), "--soc", "SA8255", "--backend", "aihub", "-o", str(tmp_path / "b"))
    assert done.exit_code == 3 and done.output.count("\n") == 1, done.output
    assert "qualcomm-sa8255p" in done.output and "not available for jobs" in done.output
    for names, soc_names in (([], ["SA8255"]), (["SA8255P ADP"], [])):  # device verify --aihub --soc / --device
        with pytest.raises(QnnDeployError) as refused:
            hosted.resolve(names, soc_names)
        assert refused.value.exit_code == 3 and str(refused.value) == done.output.removeprefix("error: ").strip()
    assert not any(r[0] == "POST" for r in aihub.requests)


def test_a_soc_ai_hub_hosts_no_device_for_fails_its_job_in_one_line(aihub, tmp_path):
    aihub.remove_device("Samsung Galaxy S24")  # the stand-in's only SM8650 phone
    build = tmp_path / "b"
    done = run("compile", str(model(tmp_path)), "--soc", "SM8650", "--backend", "aihub", "-o", str(build),
               "--no-cache")
    assert done.exit_code == 1
    error = json.loads((build / "mlp" / "SM8650" / "compile.json").read_text())["error"]
    assert error.startswith("AI Hub hosts no device with chipset qualcomm-snapdragon-8gen3 and framework:qnn")
    assert "\n" not in error and not any(r[0] == "POST" for r in aihub.requests)
    # SM7325: the stand-in's only 778G phone has no framework:qnn, which a link and a context binary need
    with pytest.raises(QnnDeployError, match="no device with chipset qualcomm-snapdragon-778g and framework:qnn") as e:
        hosted.resolve([], ["SM7325"])  # device verify --aihub --soc SM7325
    assert e.value.exit_code == 3


def test_no_configuration_is_a_missing_tool_in_one_line(aihub_unconfigured, tmp_path):
    done = run("compile", str(model(tmp_path)), "--soc", "SM8750", "--backend", "aihub", "-o", str(tmp_path / "b"))
    assert done.exit_code == 3 and done.output.count("\n") == 1
    assert "qai-hub is not configured" in done.output and "qai-hub configure --api_token" in done.output
    assert run("device", "list", "--aihub").exit_code == 3


def test_a_rejected_token_is_bad_input_and_never_printed(aihub, tmp_path):
    aihub.reject_tokens(True)
    done = run("device", "list", "--aihub")
    assert done.exit_code == 2 and "Failed to authenticate" in done.output and aihub.token not in done.output


def test_quota_on_job_creation_fails_the_job_with_a_clear_reason(aihub, aihub_fast_retries, tmp_path):
    aihub.refuse_job_creation(status=429, detail="Monthly job quota exceeded.")
    build = tmp_path / "b"
    done = run("compile", str(model(tmp_path)), "--soc", "SM8750", "--backend", "aihub", "-o", str(build),
               "--no-cache")
    assert done.exit_code == 1
    record = json.loads((build / "mlp" / "SM8750" / "compile.json").read_text())
    assert record["status"] == "failed"
    assert "rate limit or quota" in record["error"] and "Monthly job quota exceeded." in record["error"]


def test_a_job_that_fails_on_ai_hub_names_its_reason_and_url(aihub, tmp_path):
    aihub.fail_jobs("compile", "Tool qnn-onnx-converter failed: op Foo is not supported.")
    build = tmp_path / "b"
    done = run("compile", str(model(tmp_path)), "--soc", "SM8650", "--backend", "aihub", "-o", str(build),
               "--no-cache")
    assert done.exit_code == 1
    error = json.loads((build / "mlp" / "SM8650" / "compile.json").read_text())["error"]
    assert "op Foo is not supported." in error and "/jobs/" in error and error.startswith("compiling mlp")
    assert "AI Hub compile job" in (build / "logs" / "mlp-SM8650.log").read_text()
    assert len(posts(aihub, "jobs/")) == 1  # no link of a failed compile


def test_a_link_job_that_fails_names_its_reason_and_url(aihub, tmp_path):
    aihub.fail_jobs("link", "Tool qnn-context-binary-generator failed: graph too large for VTCM.")
    build = tmp_path / "b"
    done = run("compile", str(model(tmp_path)), "--soc", "SM8650", "--backend", "aihub", "-o", str(build),
               "--no-cache")
    assert done.exit_code == 1
    record = json.loads((build / "mlp" / "SM8650" / "compile.json").read_text())
    (link,) = [jid for jid, r in aihub.jobs.items() if r.kind == "link"]
    assert record["status"] == "failed" and record["outputs"] == []
    assert record["error"].startswith("linking mlp for SM8650 on AI Hub: AI Hub job " + link)
    assert "graph too large for VTCM." in record["error"] and f"/jobs/{link}/" in record["error"]
    log = (build / "logs" / "mlp-SM8650.log").read_text()
    assert "AI Hub compile job" in log and f"AI Hub link job {link}" in log and "FAILED" in log


def test_w8a16_sends_its_calibration_and_the_stand_ins_refusal_is_reported(aihub, tmp_path):
    """The stand-in does not quantize: the product's request (option and dataset) reaches it, and its refusal comes
    back as the job's failure."""
    import numpy as np

    calib = tmp_path / "calib"
    calib.mkdir()
    np.save(calib / "x.npy", np.random.default_rng(0).random((2, 1, 16), dtype=np.float32))
    build = tmp_path / "b"
    done = run("compile", str(model(tmp_path)), "--soc", "SM8750", "--backend", "aihub", "--precision", "w8a16",
               "--calib", str(calib), "-o", str(build), "--no-cache")
    assert done.exit_code == 1
    assert "--quantize_full_type" in json.loads((build / "mlp" / "SM8750" / "compile.json").read_text())["error"]
    assert posts(aihub, "datasets/")


def test_a_soc_ai_hub_has_no_chipset_for_is_refused_before_any_upload(aihub, tmp_path):
    done = run("compile", str(model(tmp_path)), "--soc", "SM8475", "--backend", "aihub", "-o", str(tmp_path / "b"))
    assert done.exit_code == 2 and "AI Hub has no chipset name for SM8475" in done.output
    assert not any(r[0] == "POST" for r in aihub.requests)


def test_unknown_device_and_wrong_combinations_are_one_line_errors(aihub, tmp_path):
    bundle = bundles.build(tmp_path / "bundle", bundles.compile_inputs(tmp_path / "in", targets=("SM8750",),
                                                                       graphs=("det",)))
    unknown = run("device", "verify", str(bundle), "--aihub", "--device", "Nokia 3310")
    assert unknown.exit_code == 2 and "AI Hub has no device named 'Nokia 3310'" in unknown.output
    assert run("device", "verify", str(bundle), "--device", "x").exit_code == 2
    assert run("device", "verify", str(bundle), "--aihub", "--all").exit_code == 2
    assert run("device", "verify", str(bundle), "--aihub").exit_code == 2


def test_a_slow_link_times_out_and_a_stop_during_the_link_ends_the_compile(aihub, tmp_path, monkeypatch):
    aihub.slow_jobs(30, "link")
    monkeypatch.setattr(backend, "LINK_TIMEOUT_S", 0.3)
    build = tmp_path / "b"
    done = run("compile", str(model(tmp_path)), "--soc", "SM8650", "--backend", "aihub", "-o", str(build),
               "--no-cache")
    assert done.exit_code == 1
    error = json.loads((build / "mlp" / "SM8650" / "compile.json").read_text())["error"]
    assert error.startswith("linking mlp") and "still LINKING_MODELS" in error and "goes on on AI Hub" in error

    # a Ctrl-C while the link job runs: the wait ends at once, with nothing written
    monkeypatch.setattr(backend, "LINK_TIMEOUT_S", 60.0)
    soc, be, path = socs.find("SM8650"), backend.AihubBackend(), model(tmp_path, "stop")
    options = {**be.options(soc, "fp16", HtpSettings()), "calibration": None}
    job = CompileJob("stop", path, sha256_file(path), soc, "fp16", None, options, "0" * 64, tmp_path / "j",
                     tmp_path / "l")
    tools = Tools()  # the stop comes once this compile's link job exists (the first half left one)
    monkeypatch.setattr(tools, "stopping", lambda: sum(r.kind == "link" for r in aihub.jobs.values()) > 1)
    (tmp_path / "work").mkdir()
    with (tmp_path / "log").open("w") as log, pytest.raises(KeyboardInterrupt):
        be.compile(job, tmp_path / "work", log, tools)
    assert list((tmp_path / "work").iterdir()) == []
    assert "AI Hub link job" in (tmp_path / "log").read_text()


def test_a_slow_job_times_out_with_its_url_and_a_stop_ends_the_wait(aihub, tmp_path, monkeypatch):
    aihub.slow_jobs(30)
    monkeypatch.setattr(backend, "TIMEOUT_S", 0.3)
    build = tmp_path / "b"
    done = run("compile", str(model(tmp_path)), "--soc", "SM8750", "--backend", "aihub", "-o", str(build),
               "--no-cache")
    assert done.exit_code == 1
    error = json.loads((build / "mlp" / "SM8750" / "compile.json").read_text())["error"]
    assert "still OPTIMIZING_MODEL" in error and "goes on on AI Hub" in error and "/jobs/" in error

    class CompileJob:
        job_id, url = "j1", "http://x/jobs/j1/"

        def get_status(self):
            raise AssertionError("a stop is checked before AI Hub is asked")

    with pytest.raises(KeyboardInterrupt):
        aihub_module_wait(CompileJob())


def aihub_module_wait(job) -> None:
    aihub.wait(job, "test", 60, should_stop=lambda: True)


def test_doctor_reports_the_client_and_its_configuration_not_the_token(aihub):
    done = run("doctor", "--json")
    line = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "qai-hub")
    assert line["status"] == "ok" and aihub.api_url in line["detail"] and aihub.token not in done.output


def test_a_hosted_phone_on_the_on_device_path_is_decided_and_not_submitted(aihub, tmp_path):
    """An SM8850 phone (v81) has no target in this bundle, whose on-device compile validated v81: the decision is
    the NPU, compiled on the phone; AI Hub gets no job (it would compile on its own host, not as the app's QNN EP),
    and the record says to run it over adb with --ort-runner."""
    from qnndeploy.bundle.build import OnDeviceRequest

    compiled = bundles.compile_inputs(tmp_path / "in", targets=("SM8550", "SM8750"))
    bundle = bundles.build(tmp_path / "b", compiled, on_device=OnDeviceRequest())
    r = run("device", "verify", str(bundle), "--aihub", "--soc", "SM8850", "-o", str(tmp_path / "rec"), "--json")
    assert r.exit_code == 4, r.output  # nothing ran: never exit 0
    (d,) = json.loads(r.stdout)["devices"]
    assert (d["provider"], d["npu_source"], d["soc"], d["dsp_arch"], d["ok"]) == ("npu", "on-device", "SM8850",
                                                                                 "v81", False)
    assert "device verify --ort-runner" in d["expectation"] and {g["status"] for g in d["graphs"]} == {"not run"}
    assert posts(aihub, "jobs/") == []
    listed = run("device", "list", "--aihub", "--bundle", str(bundle))
    assert listed.exit_code == 0, listed.output
    assert any("SM8850" in line and "-> NPU SM8850 (on-device compile)" in line for line in listed.output.splitlines())

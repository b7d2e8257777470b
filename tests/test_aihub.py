"""Qualcomm AI Hub as remote compiler and device farm: `compile --backend aihub`, `device verify --aihub`,
`device list --aihub` and `doctor`, with the real qai-hub 0.56.0 client talking to tests/aihub_fake, a STAND-IN of
the AI Hub service on 127.0.0.1 that speaks the client's wire protocol and does the jobs on the host HTP emulator
(no machine here reaches the real service)."""

from __future__ import annotations

import json
from pathlib import Path

import bundles
import pytest
from click.testing import CliRunner
from conftest import require

from qnndeploy import aihub, htp
from qnndeploy.cli import cli
from qnndeploy.compile import aihub as backend
from qnndeploy.records import read_record

pytest_plugins = ["aihub_fake.fixtures"]
pytestmark = [pytest.mark.needs_qnn]

SOCS = ("SM8550", "SM8650", "SM8750")
HOSTED = ("Samsung Galaxy S23", "Snapdragon 8 Elite QRD")


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    """Poll AI Hub's jobs every 50 ms, not 5 s."""
    require(htp.available(), "onnxruntime-qnn")
    monkeypatch.setattr(aihub, "POLL_S", 0.05)


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def posts(fake, path: str) -> list[str]:
    """The POST requests the stand-in received at /api/v1/PATH."""
    return [r[1] for r in fake.requests if r[0] == "POST" and r[1] == f"/api/v1/{path}"]


def model(tmp_path: Path, name: str = "mlp", width: int = 16) -> Path:
    return bundles.tiny_model(tmp_path / f"{name}.onnx", width)


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
        hub = record["aihub"]
        assert hub["job_id"] and hub["url"].endswith(f"jobs/{hub['job_id']}/") and hub["chipset"]
        assert {o["format"] for o in record["outputs"]} == {"qnn-context-binary", "ort-epcontext"}
        assert record["context"]["graphs"]  # read back by libQnnSystem like every compile's
        assert read_record(build / "mlp" / soc / "compile.json") is not None
    assert len(posts(aihub, "jobs/")) == len(SOCS)
    validated = run("validate", str(build), "--json")
    assert validated.exit_code == 0, validated.output
    assert {t["status"] for t in json.loads(validated.output)["targets"]} == {"passed"}
    assert run("bundle", "build", "--name", "mlp", "--version", "1.0.0", "--from-build", str(build), "-o",
               str(tmp_path / "bundle")).exit_code == 0
    bundle = tmp_path / "bundle" / "mlp-1.0.0"
    assert run("bundle", "verify", str(bundle)).exit_code == 0
    assert run("scaffold", str(bundle), "--package", "com.example.hub", "-o", str(tmp_path / "glue")).exit_code == 0

    records = tmp_path / "records"
    verified = run("device", "verify", str(bundle), "--aihub", "--device", HOSTED[0], "--soc", "SM8750", "-o",
                   str(records), "--json")
    assert verified.exit_code == 0, verified.output
    devices = json.loads(verified.output)["devices"]
    assert [d["serial"] for d in devices] == list(HOSTED)
    for d in devices:
        assert d["ok"] and d["provider"] == "npu" and d["runner"] == "aihub"
        (g,) = d["graphs"]
        assert g["status"] == "passed" and g["outputs"][0]["snr_db"] > 30
        h = g["hosted"]
        assert h["job_id"] and h["url"] and h["inference_ms"] > 0 and h["first_load_ms"] > 0
        assert h["warm_load_ms"] > 0 and h["compute_units"] == {"NPU": 1}
    saved = sorted(json.loads(p.read_text())["device"]["serial"] for p in records.glob("*.json"))
    assert saved == sorted(HOSTED)
    table = run("device", "verify", str(bundle), "--aihub", "--device", HOSTED[1], "--soc", "SM8550", "-o",
                str(records))
    assert table.exit_code == 0, table.output
    rows = [line for line in table.output.splitlines() if "/jobs/" in line]
    assert len(rows) == 2 and all(" passed " in r and "/jobs/" in r for r in rows), table.output
    assert "infer ms" in table.output and "load ms" in table.output and "warm ms" in table.output

    listed = run("device", "list", "--aihub", "--bundle", str(bundle), "--json")
    assert listed.exit_code == 0, listed.output
    rows = {r["device"]["name"]: r for r in json.loads(listed.output)}
    assert rows["Snapdragon 8 Elite QRD"]["device"]["soc"] == "SM8750"
    assert rows["Snapdragon 8 Elite QRD"]["choice"]["provider"] == "npu"
    assert rows["Samsung Galaxy S22 5G"]["choice"]["provider"] == "cpu"  # SM8450: not in this bundle
    assert rows["Google Pixel 8"]["device"]["soc"] is None


def test_device_list_maps_chipsets_to_the_catalog(aihub):
    listed = run("device", "list", "--aihub")
    assert listed.exit_code == 0, listed.output
    lines = {line.split("  ")[0].strip(): line for line in listed.output.splitlines()}
    assert "SM8650 (v75)" in lines["Samsung Galaxy S24"]
    assert "not in the catalog" in lines["Google Pixel 8"]


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
    aihub.fail_jobs("compile", "Tool qnn-context-binary-generator failed: op Foo is not supported.")
    build = tmp_path / "b"
    done = run("compile", str(model(tmp_path)), "--soc", "SM8650", "--backend", "aihub", "-o", str(build),
               "--no-cache")
    assert done.exit_code == 1
    error = json.loads((build / "mlp" / "SM8650" / "compile.json").read_text())["error"]
    assert "op Foo is not supported." in error and "/jobs/" in error
    assert "AI Hub compile job" in (build / "logs" / "mlp-SM8650.log").read_text()


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


def test_a_slow_job_times_out_with_its_url_and_a_stop_ends_the_wait(aihub, tmp_path, monkeypatch):
    aihub.slow_jobs(30)
    monkeypatch.setattr(backend, "TIMEOUT_S", 0.3)
    build = tmp_path / "b"
    done = run("compile", str(model(tmp_path)), "--soc", "SM8750", "--backend", "aihub", "-o", str(build),
               "--no-cache")
    assert done.exit_code == 1
    error = json.loads((build / "mlp" / "SM8750" / "compile.json").read_text())["error"]
    assert "still OPTIMIZING_MODEL" in error and "goes on on AI Hub" in error and "/jobs/" in error

    class Job:
        job_id, url = "j1", "http://x/jobs/j1/"

        def get_status(self):
            raise AssertionError("a stop is checked before AI Hub is asked")

    with pytest.raises(KeyboardInterrupt):
        aihub_module_wait(Job())


def aihub_module_wait(job) -> None:
    aihub.wait(job, "test", 60, should_stop=lambda: True)


def test_doctor_reports_the_client_and_its_configuration_not_the_token(aihub):
    done = run("doctor", "--json")
    line = next(c for c in json.loads(done.output)["checks"] if c["name"] == "qai-hub")
    assert line["status"] == "ok" and aihub.api_url in line["detail"] and aihub.token not in done.output

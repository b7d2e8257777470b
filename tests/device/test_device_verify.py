"""`qnndeploy device verify` on emulated phones, through the real adb server, with real bundles (context binaries
compiled by onnxruntime-qnn) and the qnn-net-run STAND-IN (tests/support/device_emulator/qnn_net_run.py), which runs the
pushed context on the host HTP emulator so that the compared outputs are real."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qnndeploy.base import socs
from qnndeploy.base.errors import EXIT_NOT_RUN
from qnndeploy.device import runner
from qnndeploy.formats import archive
from qnndeploy.qnn import htp
from tests.support import bundles
from tests.support.cli import run
from tests.support.device_emulator.qnn_net_run import write_launcher
from tests.support.host import require

pytestmark = [pytest.mark.needs_adb, pytest.mark.needs_qnn, pytest.mark.usefixtures("no_sdk")]

pytest_plugins = ["tests.support.device_emulator.fixtures"]

REMOTE = "/data/local/tmp/qnndeploy/demo-1.0.0"
SM8750_FILES = sorted([
    "manifest.json", "cpu/det.onnx", "cpu/rec.onnx",
    "npu/SM8750/det.bin", "npu/SM8750/det_ctx.onnx", "npu/SM8750/rec.bin", "npu/SM8750/rec_ctx.onnx",
    "lib/arm64-v8a/libQnnHtp.so", "lib/arm64-v8a/libQnnSystem.so", "lib/arm64-v8a/libQnnHtpPrepare.so",
    "lib/arm64-v8a/libQnnHtpV79Stub.so", "lib/hexagon-v79/libQnnHtpV79Skel.so"])



@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    """det and rec compiled for SM8550 and SM8750 by the real QNN HTP compiler, with their EPContext wrappers."""
    require(htp.available(), "onnxruntime-qnn")
    return bundles.compile_inputs(tmp_path_factory.mktemp("compiled"), targets=("SM8550", "SM8750"))


@pytest.fixture(scope="module")
def bundle(compiled, tmp_path_factory) -> Path:
    return bundles.build(tmp_path_factory.mktemp("bundle"), compiled, runtime="bundled")


@pytest.fixture
def launcher(tmp_path) -> Path:
    return write_launcher(tmp_path / "qnn-net-run")


def verify(*args: str, records: Path) -> tuple[int, dict | str]:
    r = run("device", "verify", *args, "-o", str(records))
    if "--json" not in args:
        return r.exit_code, r.output
    try:
        return r.exit_code, json.loads(r.stdout)
    except json.JSONDecodeError:
        raise AssertionError(r.output) from None


def on_phone(device, rel: str = "") -> Path:
    return device.host_path(f"{REMOTE}/{rel}")


def phone_files(device) -> dict[str, str]:
    root = on_phone(device)
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file()}


def bundle_hash(bundle: Path, rel: str) -> str:
    return hashlib.sha256((bundle / rel).read_bytes()).hexdigest()


# --- pushing -----------------------------------------------------------------------------------------------------

def test_verify_pushes_the_chosen_target_then_nothing(device, bundle, tmp_path):
    code, out = verify(str(bundle), "--json", records=tmp_path / "rec")
    assert code == EXIT_NOT_RUN, out  # pushed and checked, nothing run: no runner
    d = out["devices"][0]
    assert (d["provider"], d["soc"], d["identified_by"], d["expectation"]) == \
        ("npu", "SM8750", "Build.SOC_MODEL", "NPU expected, if the QNN libraries load (not run: no runner)")
    assert sorted(d["push"]["sent"]) == SM8750_FILES  # the SM8750 target, the CPU fallback, the v79 runtime
    assert d["push"]["bytes_sent"] == sum((bundle / f).stat().st_size for f in SM8750_FILES)
    assert phone_files(device) == {f: bundle_hash(bundle, f) for f in SM8750_FILES}
    assert not device.host_path(REMOTE + ".staging").exists()
    assert "no runner" in d["runner_note"] and [g["status"] for g in d["graphs"]] == ["not run", "not run"]

    code, again = verify(str(bundle), "--json", records=tmp_path / "rec")
    assert code == EXIT_NOT_RUN
    assert again["devices"][0]["push"]["sent"] == [] and again["devices"][0]["push"]["bytes_sent"] == 0
    assert again["devices"][0]["push"]["unchanged"] == len(SM8750_FILES)

    record = json.loads(Path(again["devices"][0]["record"]).read_text())
    assert record["record"] == "qnndeploy-device" and (record["ok"], record["outcome"]) == (False, "not run")
    assert record["device"] == {"serial": device.serial, "model": "Emulated SM8750 Phone", "android_release": "15",
                                "sdk": 35}
    assert record["soc"] == {"model": "SM8750", "identified_by": "Build.SOC_MODEL", "dsp_arch": "v79"}
    qairt = json.loads((bundle / "manifest.json").read_text())["qairt"]["version"]  # the installed compiler's
    assert record["bundle"]["name"] == "demo" and record["bundle"]["qairt_version"] == qairt
    assert record["decision"]["provider"] == "npu" and record["push"]["remote_dir"] == REMOTE


def test_what_never_ran_is_never_exit_0_nor_green(device, bundle, tmp_path):
    """Issue 39, item 2: without a runner the files are pushed and checked but nothing runs: exit 4 (documented,
    not failure's 1), every graph of the decision "not run" with why, a record that is not ok, and in the report a
    grey "not run", never a green ok."""
    code, text = verify(str(bundle), records=tmp_path / "rec")
    assert code == EXIT_NOT_RUN, text
    assert "NOT RUN det            no runner: pass --runner PATH or --qnn-sdk-root DIR" in text
    assert f"NOT RUN on {device.serial}: det, rec ran nowhere on the phone" in text
    (path,) = (tmp_path / "rec").glob("demo-1.0.0_*.json")
    record = json.loads(path.read_text())
    assert (record["ok"], record["outcome"]) == (False, "not run")
    assert [(g["graph"], g["status"], g["ran_on"]) for g in record["graphs"]] == [("det", "not run", None),
                                                                                ("rec", "not run", None)]
    assert all(g["reason"].startswith("no runner: ") for g in record["graphs"])
    page = tmp_path / "report.html"
    assert run("report", tmp_path / "rec", "-o", page).exit_code == 0
    html = page.read_text()
    (phone,) = re.findall(r'<div class="record" data-kind="phone"[^>]*>.*?</div>', html, re.DOTALL)
    assert 'data-status="not run"' in phone and device.serial in phone
    assert phone.count('<span class="muted">not run</span>') == 3  # the phone and its two graphs
    assert 'class="pass"' not in html and ">ok<" not in html
    assert len(re.findall(r'data-kind="device"[^>]*data-status="not run"', html)) == 2


def test_an_archive_is_verified_and_pushed_as_its_folder_would_be(device, bundle, tmp_path):
    """device verify takes the .zip or .tar.gz the other commands take: extracted, verified, pushed, recorded under
    the archive's name."""
    zipped = tmp_path / "demo-1.0.0.zip"
    archive.write_archive(bundle, zipped, "zip", "demo-1.0.0")
    code, out = verify(str(zipped), "--json", records=tmp_path / "rec")
    assert code == EXIT_NOT_RUN, out
    assert sorted(out["devices"][0]["push"]["sent"]) == SM8750_FILES
    assert phone_files(device) == {f: bundle_hash(bundle, f) for f in SM8750_FILES}
    assert json.loads(Path(out["devices"][0]["record"]).read_text())["bundle"]["path"] == str(zipped.resolve())


def test_phones_reporting_an_alias_get_their_catalog_socs_target(device, bundle, tmp_path):
    """A Galaxy S25 reports ro.soc.model SM8750-AC, an S23 SM8550-AC: verify picks the SM8750 (SM8550) target, as
    for every other name of those SoCs in the catalog, and pushes its files."""
    seen = set()
    for model in ("SM8750", "SM8550"):
        soc = socs.find(model)
        for reported in soc.aliases:
            device.set_prop("ro.soc.model", reported)
            code, out = verify(str(bundle), "--json", records=tmp_path / "rec")
            assert code == EXIT_NOT_RUN, out
            d = out["devices"][0]
            assert (d["provider"], d["soc"], d["identified_by"], d["dsp_arch"]) == (
                "npu", model, "Build.SOC_MODEL", soc.dsp_arch), (reported, d["reason"])
            assert {f.removeprefix("npu/").split("/")[0] for f in phone_files(device) if f.startswith("npu/")} == \
                {model}
            record = json.loads(Path(d["record"]).read_text())
            assert record["soc"] == {"model": model, "identified_by": "Build.SOC_MODEL", "dsp_arch": soc.dsp_arch}
            seen.add(reported)
    assert {"SM8750-AC", "SM8750P", "SM8550-AC"} <= seen


def test_a_file_altered_on_the_phone_is_found_and_resent(device, bundle, tmp_path):
    assert verify(str(bundle), records=tmp_path)[0] == EXIT_NOT_RUN
    device.write_file(f"{REMOTE}/npu/SM8750/det.bin", b"bit rot")
    device.write_file(f"{REMOTE}/npu/SM8550/det.bin", b"left over from another target")
    code, text = verify(str(bundle), records=tmp_path)
    assert code == EXIT_NOT_RUN, text
    assert f"pushed to {REMOTE}: 1 of 12 files sent" in text
    assert "removed from the phone: npu/SM8550/det.bin" in text
    assert phone_files(device) == {f: bundle_hash(bundle, f) for f in SM8750_FILES}


def test_a_phone_outside_the_bundle_expects_the_cpu_fallback(emulated_devices, bundle, launcher, tmp_path):
    phone = emulated_devices("exynos")[0]
    code, out = verify(str(bundle), "--runner", str(launcher), "--json", records=tmp_path)
    assert code == EXIT_NOT_RUN, out  # the app's CPU path: nothing of it ran on the phone
    d = out["devices"][0]
    assert d["provider"] == "cpu" and d["expectation"] == "CPU fallback expected"
    assert d["reason"] == "SoC S5E9945 is not in the bundle (targets: SM8550, SM8750)"
    assert phone_files(phone) == {f: bundle_hash(bundle, f) for f in ("manifest.json", "cpu/det.onnx", "cpu/rec.onnx")}
    assert [(g["graph"], g["status"], g["ran_on"]) for g in d["graphs"]] == [("det", "not run", None),
                                                                           ("rec", "not run", None)]
    assert d["graphs"][0]["reason"].startswith("the app runs it on the CPU here (SoC S5E9945 is not in the bundle")
    assert "no context binary to run" in d["runner_note"]
    text = verify(str(bundle), records=tmp_path)[1]
    assert "CPU fallback expected: SoC S5E9945 is not in the bundle" in text and "0 of 3 files sent" in text


def test_disconnect_mid_push_then_resume(adb_server, device, bundle, tmp_path):
    device.drop_during_send(after_bytes=20_000)  # cut inside the first context binary (49 kB)
    code, text = verify(str(bundle), records=tmp_path)
    assert code == 1
    assert f"lost the connection to {device.serial} while pushing npu/SM8750/det.bin" in text
    assert "run the command again" in text and f"{REMOTE} was not changed" in text
    assert not on_phone(device).exists()  # nothing half-done in place: the files wait in the staging folder
    staged = device.host_path(REMOTE + ".staging")
    assert (staged / "cpu/det.onnx").is_file() and not (staged / "npu/SM8750/det.bin").exists()
    adb_server.wait_for(device.serial, "device")
    code, out = verify(str(bundle), "--json", records=tmp_path)
    assert code == EXIT_NOT_RUN, out
    sent = out["devices"][0]["push"]["sent"]
    assert "npu/SM8750/det.bin" in sent and "cpu/det.onnx" not in sent  # resumed: only what was missing
    assert phone_files(device) == {f: bundle_hash(bundle, f) for f in SM8750_FILES}


def test_all_devices_in_parallel_with_one_summary_table(emulated_devices, bundle, tmp_path):
    phone, other = emulated_devices("sm8750", "exynos")
    code, text = verify(str(bundle), "--all", records=tmp_path)
    assert code == EXIT_NOT_RUN, text  # no runner: nothing ran on either phone
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("127.0.0.1:")}
    assert rows[phone.serial].endswith("NOT RUN") and " NPU " in rows[phone.serial]
    assert " CPU " in rows[other.serial] and "12/12" in rows[phone.serial] and "3/3" in rows[other.serial]
    assert len(list(tmp_path.glob("demo-1.0.0_127.0.0.1_*.json"))) == 2
    assert phone_files(phone) == {f: bundle_hash(bundle, f) for f in SM8750_FILES}

    locked = emulated_devices("sm8750", state="unauthorized")[0]
    code, text = verify(str(bundle), "--all", records=tmp_path)
    assert code == 1  # one phone failed: the others are still verified and listed
    assert f"ERROR: {locked.serial} is unauthorized" in text and "0/12" in text
    r = run("device", "verify", str(bundle), "--all", "-s", phone.serial)
    assert r.exit_code == 2 and "not both" in r.output


def test_a_bundle_that_fails_verify_is_refused(device, bundle, tmp_path):
    broken = tmp_path / "demo-1.0.0"
    shutil.copytree(bundle, broken)
    (broken / "npu/SM8750/rec.bin").write_bytes(b"truncated")
    code, text = verify(str(broken), records=tmp_path / "records")
    assert code == 1
    assert "npu/SM8750/rec.bin: has 9 bytes" in text and "fails bundle verify" in text
    assert not on_phone(device).exists() and not (tmp_path / "records").exists()


# --- running -----------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_runner_runs_each_graph_on_the_phone_and_compares_with_the_cpu(device, bundle, launcher, tmp_path):
    code, out = verify(str(bundle), "--runner", str(launcher), "--random", "2", "--runs", "4", "--json",
                       records=tmp_path)
    assert code == 0, out
    d = out["devices"][0]
    assert d["environment"] == {
        "LD_LIBRARY_PATH": f"{REMOTE}/lib/arm64-v8a",
        "ADSP_LIBRARY_PATH": f"{REMOTE}/lib/hexagon-v79;/vendor/lib/rfsa/adsp;/vendor/dsp/cdsp;"
                             "/system/lib/rfsa/adsp;/system/vendor/lib/rfsa/adsp;/dsp"}
    assert device.host_path(runner.REMOTE_RUNNER).stat().st_mode & 0o777 == 0o755
    assert [g["graph"] for g in d["graphs"]] == ["det", "rec"]
    for g in d["graphs"]:
        assert g["status"] == "passed" and g["samples"] == 2 and g["inferences"] == 4 and g["clock"] == "device"
        assert g["first_run_s"] > 0 and g["inputs"]["kind"] == "random"
        (y,) = g["outputs"]
        # fp16 on the HTP emulator against float32 on the CPU: close, but not bit-identical
        assert y["name"] == "y" and y["cosine"] > 0.999 and 0 < y["max_abs_diff"] < 0.05 and y["passed"]
    record = json.loads(Path(d["record"]).read_text())
    assert record["graphs"][0]["outputs"][0]["snr_db"] == d["graphs"][0]["outputs"][0]["snr_db"]
    assert record["runner"]["environment"]["ADSP_LIBRARY_PATH"].startswith(f"{REMOTE}/lib/hexagon-v79;")
    for g in d["graphs"]:  # None when N - 1 inferences hide in the noise of starting the runner
        assert g["per_inference_s"] is None or g["per_inference_s"] > 0
    text = verify(str(bundle), "--runner", str(launcher), "--runs", "50", "--samples", "3", records=tmp_path)[1]
    assert "warning: --samples is renamed --random" in text and "3 sample(s)" in text  # the old name
    assert "NPU: the QNN libraries loaded and every context binary ran on the phone" in text
    assert re.search(r"PASS  det +first run \d+ ms, (\d+\.\d\d ms/inference|per inference lost in the start-up "
                     r"noise) \(50 runs.*, device clock\)", text), text
    assert "ok  y: max|d|" in text and "cos 1.000000" in text


@pytest.mark.slow
def test_a_cpu_model_with_external_data_goes_with_its_data_file(device, compiled, launcher, tmp_path):
    rec = bundles.with_external_data(compiled["cpu"]["rec"], tmp_path / "ext" / "rec.onnx")
    b = bundles.build(tmp_path / "b", {**compiled, "cpu": {**compiled["cpu"], "rec": rec}}, runtime="bundled")
    code, out = verify(str(b), "--runner", str(launcher), "--json", records=tmp_path)
    assert code == 0, out
    d = out["devices"][0]
    assert sorted(d["push"]["sent"]) == sorted([*SM8750_FILES, "cpu/rec.onnx.data"])
    assert phone_files(device)["cpu/rec.onnx.data"] == bundle_hash(b, "cpu/rec.onnx.data")
    # rec's CPU reference ran here from the bundle's cpu/rec.onnx, which found its weights beside it
    assert [(g["graph"], g["status"]) for g in d["graphs"]] == [("det", "passed"), ("rec", "passed")]


@pytest.mark.slow
def test_a_context_binary_that_is_not_the_cpu_model_fails_the_comparison(device, compiled, tmp_path, launcher):
    import numpy as np
    import onnx
    from onnx import numpy_helper

    other = onnx.load(str(compiled["cpu"]["det"]))  # same signature, other weights than the compiled det
    w = other.graph.initializer[0]
    w.CopyFrom(numpy_helper.from_array(1 - numpy_helper.to_array(w), w.name))
    onnx.save(other, str(tmp_path / "det.onnx"))
    wrong = bundles.build(tmp_path / "b", {**compiled, "cpu": {**compiled["cpu"], "det": tmp_path / "det.onnx"}},
                          runtime="bundled")
    inputs = tmp_path / "inputs"
    for graph, width in (("det", 8), ("rec", 16)):
        (inputs / graph).mkdir(parents=True)
        np.save(inputs / graph / "x.npy", np.linspace(0.1, 1, width, dtype=np.float32)[None])
    code, out = verify(str(wrong), "--runner", str(launcher), "--inputs", str(inputs), "--runs", "2", "--json",
                       records=tmp_path)
    assert code == 1
    assert out["devices"][0]["expectation"].endswith("outputs differ from the CPU model's")
    det, rec = out["devices"][0]["graphs"]
    assert det["status"] == "failed" and det["outputs"][0]["passed"] is False and det["outputs"][0]["snr_db"] < 20
    assert rec["status"] == "passed" and rec["inputs"]["kind"] == "files"


@pytest.mark.slow
def test_skel_missing_from_adsp_library_path_becomes_advice(device, bundle, tmp_path):
    # A wrapper that drops the Skel folder from ADSP_LIBRARY_PATH, as a device setting can.
    wrapper = write_launcher(tmp_path / "qnn-net-run", adsp_library_path="/vendor/lib/rfsa/adsp")
    code, out = verify(str(bundle), "--runner", str(wrapper), "--json", records=tmp_path)
    assert code == 1
    det = out["devices"][0]["graphs"][0]
    assert out["devices"][0]["expectation"].endswith("the app would fall back to the CPU")
    assert det["status"] == "error" and det["reason"] == "qnn-net-run exited with 1: Device Creation failure"
    assert [a["id"] for a in det["advice"]] == ["skel-not-found"]
    assert f"({REMOTE}/lib/hexagon-v79;/vendor/lib/rfsa/adsp;" in det["advice"][0]["message"]
    assert "Failed to load skel, error: 4000" in det["advice"][0]["line"]
    text = verify(str(bundle), "--runner", str(wrapper), records=tmp_path)[1]
    assert "ERROR det" in " ".join(text.split()) and "advice (skel-not-found): the DSP could not load" in text


def test_each_graph_records_its_first_launch_cold_and_warm(device, bundle, tmp_path):
    """With the SDK's qnn-profile-viewer (the stand-in SDK of the emulated phone), each graph's record carries the
    session start (the viewer's Init time of a --profiling_level basic run) and the first result (its first output
    folder's time from the process start), cold and warm, labelled as the host's times."""
    from tests.support.device_emulator.emulate import runners

    sdk, _ = runners(tmp_path / "tools")
    code, out = verify(str(bundle), "--qnn-sdk-root", str(sdk), "--runs", "3", "--json", records=tmp_path)
    assert code == 0, out
    d = out["devices"][0]
    for g in d["graphs"]:
        launch = g["launch"]
        for start in ("cold", "warm"):  # the session is ready before the process's first output is written
            assert 0 < launch[f"session_{start}_ms"] < launch[f"first_result_{start}_ms"], launch
    record = json.loads(Path(d["record"]).read_text())
    assert record["graphs"][0]["launch"] == d["graphs"][0]["launch"]
    assert record["launch"]["note"].startswith("launch: per path, from a tool process's start to a ready session")
    assert "not a phone's HTP time" in record["launch"]["stand_in"]
    # without a viewer: no session start, the first results still measured
    launcher = write_launcher(tmp_path / "qnn-net-run")
    code, out = verify(str(bundle), "--runner", str(launcher), "--runs", "3", "--json", records=tmp_path)
    assert code == 0, out
    for g in out["devices"][0]["graphs"]:
        assert g["launch"]["session_cold_ms"] is None and g["launch"]["first_result_warm_ms"] > 0
    text = run("device", "verify", str(bundle), "--qnn-sdk-root", str(sdk), "--runs", "3", "-o", str(tmp_path)).output
    assert re.search(r"first launch: session start cold [0-9.]+ / warm [0-9.]+ ms, first result cold [0-9.]+ / "
                     r"warm [0-9.]+ ms", text), text


@pytest.mark.parametrize("line, expected", [
    ("<E> Failed to load skel, error: 4000", "skel-not-found"),
    ("QnnDsp <E> DspTransport.openSession qnn_open failed, error 14001", "skel-not-found"),
    ("<E> Failed to create device: 1008", "skel-not-found"),
    ("<E> Unsupported context binary version", "qairt-mismatch"),
    ("contextCreateFromBinary failed with error 5000", "qairt-mismatch"),
    ("<E> Stub lib id mismatch: expected (v2.51.0), detected (v2.36.0)", "stub-mismatch"),
    ("<E> Request feature arch with value 79 unsupported", "wrong-arch"),
    ("graph prepare failed: 0x138d", "wrong-arch"),
])
def test_known_qnn_errors_become_advice(line, expected):
    advice = runner.diagnose(f"qnn-net-run pid:1\n{line}\nsomething else\n", soc="SM8750", arch="v79",
                             qairt="2.51.0", adsp="/a;/b")
    assert [a.id for a in advice] == [expected] and advice[0].line == line
    assert "{" not in advice[0].message
    assert runner.diagnose("Finished executing 10 inferences in 4000 ms\nrun 1008 done") == []


def test_the_stand_in_runner_speaks_the_qnn_net_run_command_line(bundle, launcher, tmp_path):
    def launch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(launcher), *args], capture_output=True, text=True, cwd=tmp_path,
                              env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(bundle / "lib/arm64-v8a"),
                                   "ADSP_LIBRARY_PATH": str(bundle / "lib/hexagon-v79")}, check=False)

    r = launch("--backend", "libQnnHtp.so", "--retrieve_context", "x.bin", "--input_list", "l.txt", "--fast")
    assert r.returncode == 1 and "Invalid argument passed: --fast" in r.stdout
    lonely = tmp_path / "alone.bin"
    lonely.write_bytes((bundle / "npu/SM8750/det.bin").read_bytes())  # no alone_ctx.onnx beside it
    r = launch("--backend", "libQnnHtp.so", "--retrieve_context", str(lonely), "--input_list", "l.txt")
    assert r.returncode == 2 and "alone_ctx.onnx must sit beside alone.bin" in r.stdout
    r = launch("--backend", "libQnnHtpNope.so", "--retrieve_context", str(lonely), "--input_list", "l.txt")
    assert r.returncode == 1 and "Unable to load backend" in r.stdout


@pytest.mark.slow
def test_an_external_runtime_takes_the_runner_and_libraries_from_the_sdk(device, compiled, tmp_path, monkeypatch):
    from tests.support.elfgen import fake_sdk

    external = bundles.build(tmp_path, compiled, runtime="external")
    sdk = fake_sdk(tmp_path / "qairt", ["v73", "v79"])  # stand-in libraries in the SDK's layout
    (sdk / "bin/aarch64-android").mkdir(parents=True)
    write_launcher(sdk / "bin/aarch64-android/qnn-net-run")
    r = run("device", "verify", str(external), "--runner", sdk / "bin/aarch64-android/qnn-net-run")
    maven = json.loads((external / "manifest.json").read_text())["runtime"]["maven"]
    assert r.exit_code == 2 and f"external runtime ({maven})" in r.output
    assert "--qnn-sdk-root" in r.output and not on_phone(device).exists()

    monkeypatch.setenv("QNN_SDK_ROOT", str(sdk))  # as after envsetup.sh: the runner and libraries come from it
    code, out = verify(str(external), "--runs", "2", "--json", records=tmp_path)
    assert code == 0, out
    d = out["devices"][0]
    assert [g["status"] for g in d["graphs"]] == ["passed", "passed"]
    assert sorted(p for p in phone_files(device) if p.startswith("lib/")) == [
        "lib/arm64-v8a/libQnnHtp.so", "lib/arm64-v8a/libQnnHtpV79Stub.so", "lib/arm64-v8a/libQnnSystem.so",
        "lib/hexagon-v79/libQnnHtpV79Skel.so"]
    assert phone_files(device)["lib/hexagon-v79/libQnnHtpV79Skel.so"] == \
        hashlib.sha256((sdk / "lib/hexagon-v79/unsigned/libQnnHtpV79Skel.so").read_bytes()).hexdigest()


def test_an_sdk_of_another_qairt_version_is_refused(device, compiled, tmp_path):
    """2.45 libraries beside 2.51 context binaries fail on a phone with error 5000: refuse before pushing."""
    from tests.support.elfgen import fake_sdk

    external = bundles.build(tmp_path, compiled, runtime="external")
    sdk = fake_sdk(tmp_path / "old", ["v73", "v79"], build="v2.45.0.250101120000")
    (sdk / "bin/aarch64-android").mkdir(parents=True)
    write_launcher(sdk / "bin/aarch64-android/qnn-net-run")
    r = run("device", "verify", str(external), "--qnn-sdk-root", str(sdk))
    assert r.exit_code == 2, r.output
    qairt = json.loads((external / "manifest.json").read_text())["qairt"]["version"]
    assert f"is QAIRT v2.45.0.250101120000 but the bundle was compiled with QAIRT {qairt}" in r.output
    assert "error 5000" in r.output and not on_phone(device).exists()


def test_a_host_program_is_refused_as_runner(bundle, tmp_path):
    r = run("device", "verify", str(bundle), "--runner", sys.executable)
    assert r.exit_code == 2 and "not Android arm64 (AArch64)" in r.output


def test_a_refused_write_is_a_clear_error(device, tmp_path):
    from qnndeploy.base.errors import QnnDeployError
    from qnndeploy.device import adb

    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(QnnDeployError, match=r"refused to write /data/local/tmp \(couldn't create file: Is a dir"):
        adb.connect().push_files([adb.Upload(tmp_path / "f", "/data/local/tmp")])


@pytest.mark.slow
def test_a_shared_context_goes_once_and_each_graph_is_named_in_its_input_lists(device, compiled, launcher, tmp_path):
    """det and rec compiled into one context binary (compile --share): the phone gets it once, and qnn-net-run gets
    one input list per graph of the context, "__" for the one not run. The stand-in checks that form and then
    says why it cannot run the graph (the host emulator crashes on shared-weight contexts)."""
    from qnndeploy.bundle.build import build_bundle, spec_from_build
    from qnndeploy.compile import CompileOptions, compile_models
    from tests.support.elfgen import fake_sdk

    assert compile_models(dict(compiled["cpu"]), ["SM8750"], tmp_path / "build",
                          CompileOptions(shares={"pair": ["det", "rec"]}, use_cache=False)).ok
    spec = dataclasses.replace(spec_from_build(tmp_path / "build", "demo", "1.0.0"),
                               sdk_root=fake_sdk(tmp_path / "sdk", ["v79"]), license="Apache-2.0")
    shared = build_bundle(spec, tmp_path / "bundle").path
    code, out = verify(str(shared), "--runner", str(launcher), "--json", records=tmp_path / "records")
    assert code == 1, out
    on = phone_files(device)
    assert "npu/SM8750/pair.bin" in on and not [p for p in on if p.endswith(("det.bin", "rec.bin"))]
    graphs = out["devices"][0]["graphs"]
    assert [(g["graph"], g["context"], g["status"]) for g in graphs] == [
        ("det", f"{REMOTE}/npu/SM8750/pair.bin", "error"), ("rec", f"{REMOTE}/npu/SM8750/pair.bin", "error")]
    assert "graph 1 of 2 of pair.bin (input lists first_input.txt,__)" in graphs[0]["reason"]
    assert "graph 2 of 2 of pair.bin (input lists __,first_input.txt)" in graphs[1]["reason"]
    assert "cannot run a context whose graphs share weights" in graphs[1]["reason"]


@pytest.mark.slow
def test_play_tells_each_phone_its_device_group_and_fails_a_mismatch(emulated_devices, bundle, tmp_path):
    """The done-when of issue 14: `device verify --play` on emulated phones reports the group Play gives each, and
    fails the phone whose ro.soc.model Play would not match although the decision finds its SoC."""
    play_dir = tmp_path / "play"
    packed = run("package", "play", str(bundle), "-o", str(play_dir))
    assert packed.exit_code == 0, packed.output
    ok, old, other = emulated_devices("sm8750", "android11", "exynos")
    alias = emulated_devices("sm8750", props={"ro.soc.model": "SM8750P", "ro.soc.manufacturer": "Qualcomm"})[0]
    galaxy = emulated_devices("sm8750", props={"ro.soc.model": "SM8750-AC"})[0]  # a Galaxy S25
    lower = emulated_devices("sm8750", props={"ro.soc.model": "sm8750"})[0]  # upper-cased by the decision, not Play
    code, out = verify(str(bundle), "--all", "--play", str(play_dir), "--json", records=tmp_path / "records")
    assert code == 1, out  # the lower-case phone fails; the others pass
    play = {d["serial"]: d["play"] for d in out["devices"]}
    assert (play[ok.serial]["delivered"], play[ok.serial]["ok"]) == ("sm8750", True)
    assert (play[alias.serial]["delivered"], play[alias.serial]["ok"]) == ("sm8750", True)
    assert (play[galaxy.serial]["delivered"], play[galaxy.serial]["ok"]) == ("sm8750", True)
    listed = ", ".join(sorted(f"{m}/{n}" for m in ("QTI", "Qualcomm") for n in socs.find("SM8750").names))
    assert "QTI/SM8750-AC" in listed and "Qualcomm/SM8750P" in listed
    assert play[lower.serial] == {
        "manufacturer": "QTI", "model": "sm8750", "delivered": "other", "expected": "sm8750", "ok": False,
        "reason": "Play would deliver group other (ro.soc.manufacturer 'QTI', ro.soc.model 'sm8750') but the decision "
                  f"expects group sm8750 for SoC SM8750: Play compares exactly, and group sm8750 lists {listed}; "
                  "the app would run on the CPU"}
    assert (play[old.serial]["delivered"], play[old.serial]["expected"], play[old.serial]["ok"]) == (
        "other", "other", True)  # Android 11, SM8350: in no group and no target, the CPU either way
    assert (play[other.serial]["delivered"], play[other.serial]["ok"]) == ("other", True)
    records = [json.loads(p.read_text()) for p in (tmp_path / "records").glob("*.json")]
    assert sorted(r["play"]["delivered"] for r in records) == ["other", "other", "other", "sm8750", "sm8750",
                                                               "sm8750"]
    text = verify(str(bundle), "-s", lower.serial, "--play", str(play_dir), records=tmp_path / "records")[1]
    assert "Play: MISMATCH: Play would deliver group other" in text
    # a plan of another bundle is refused, in one line
    other_bundle = tmp_path / "copy"
    shutil.copytree(bundle, other_bundle)
    manifest = json.loads((other_bundle / "manifest.json").read_text())
    manifest["version"] = "1.0.1"
    (other_bundle / "manifest.json").write_text(json.dumps(manifest))
    code, text = verify(str(other_bundle), "-s", ok.serial, "--play", str(play_dir), records=tmp_path / "records")
    assert code == 2 and "was packaged from another bundle" in text


# --- a hostile phone (more cases, without a bundle, in test_device_hostile.py) -------------------------------------

MARGIN_S = 15  # on top of the configured deadline: start-up, the adb server, a loaded machine


def _timed_verify(*args: str) -> tuple[object, float]:
    start = time.monotonic()
    r = run("device", "verify", *args, color=True)  # color: as on a terminal, nothing stripped
    return r, time.monotonic() - start


def _one_line_error(r) -> str:
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    # progress lines ("[  0.1 s] device verify: ...", stderr not a terminal) come before it: one error line
    lines = [line for line in r.stderr.splitlines() if not re.match(r"\[\s*[\d.]+ s\] ", line)]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output, r.stderr
    return lines[0]


@pytest.mark.slow
def test_a_push_the_phone_stops_reading_ends_at_the_stall_deadline_and_the_next_run_resumes(adb_server, device,
                                                                                             bundle, tmp_path):
    device.stall_during_send(after_bytes=20_000)  # inside the first context binary: adbd stops reading
    r, elapsed = _timed_verify(str(bundle), "--timeout", "3", "-o", str(tmp_path))
    line = _one_line_error(r)
    assert line.startswith(f"error: {device.serial}: pushing npu/SM8750/det.bin: no progress in 3 s (")
    assert line.endswith(f"{REMOTE} was not changed (the next run resumes from {REMOTE}.staging)")
    assert elapsed < 3 + MARGIN_S
    assert not on_phone(device).exists() and not list(tmp_path.glob("*.json"))  # nothing in place, no record
    partial = device.host_path(f"{REMOTE}.staging/npu/SM8750/det.bin")
    assert partial.stat().st_size == 20_000 < (bundle / "npu/SM8750/det.bin").stat().st_size  # left by the phone
    code, out = verify(str(bundle), "--json", records=tmp_path)  # the phone reads again
    assert code == EXIT_NOT_RUN, out
    assert "npu/SM8750/det.bin" in out["devices"][0]["push"]["sent"]
    assert phone_files(device) == {f: bundle_hash(bundle, f) for f in SM8750_FILES}


@pytest.mark.slow
def test_a_sha256sum_that_never_answers_ends_at_the_deadline(device, bundle, tmp_path):
    device.misbehave("sha256sum", "sleep")
    r, elapsed = _timed_verify(str(bundle), "--timeout", "3", "--json", "-o", str(tmp_path))
    line = _one_line_error(r)
    assert line.startswith(f"error: {device.serial}: hashing files on the phone (sha256sum in {REMOTE}.staging): "
                           "no answer in 3 s")
    assert json.loads(r.stdout)["exit_code"] == 1
    assert elapsed < 3 + MARGIN_S
    assert not on_phone(device).exists()


@pytest.mark.slow
def test_a_runner_that_never_ends_is_stopped_at_the_deadline(device, bundle, tmp_path):
    hung = tmp_path / "qnn-net-run"
    hung.write_text("#!/bin/sh\nexec sleep 86400\n")
    hung.chmod(0o755)
    r, elapsed = _timed_verify(str(bundle), "--runner", str(hung), "--timeout", "5", "-o", str(tmp_path / "rec"))
    line = _one_line_error(r)
    assert line.startswith(f"error: {device.serial}: running qnn-net-run on det.bin (first_input.txt): no answer "
                           "in 5 s")
    assert elapsed < 5 + MARGIN_S


def test_escape_sequences_from_the_phone_never_reach_the_terminal(emulated_devices, bundle, tmp_path):
    emulated_devices("hostile")  # escape sequences in its props, a 5,000-digit API level
    r, _ = _timed_verify(str(bundle), "-o", str(tmp_path))
    assert r.exit_code == EXIT_NOT_RUN, r.output
    assert not any(c in r.output for c in ("\x1b", "\x07", "\x9b")), repr(r.output)
    assert "Emulated \\x1b]0;title\\x07Phone\\x1b[2J" in r.output
    assert "SoC SM8750\\x1b[2J is not in the bundle" in r.output  # the decision's reason quotes the phone
    r, _ = _timed_verify(str(bundle), "--json", "-o", str(tmp_path))
    d = json.loads(r.stdout)["devices"][0]
    assert d["model"] == "Emulated \x1b]0;title\x07Phone\x1b[2J" and d["sdk"] is None
    record = Path(d["record"]).read_text()
    assert "\x1b" not in record and json.loads(record)["device"]["model"] == d["model"]


def test_a_bundle_file_changed_after_it_was_verified_is_not_left_on_the_phone(device, bundle, tmp_path):
    from qnndeploy.base.errors import QnnDeployError
    from qnndeploy.device import verify as verify_stage
    from qnndeploy.formats.manifest import load_manifest
    from qnndeploy.verification.checks import opened

    changed = tmp_path / "demo-1.0.0"
    shutil.copytree(bundle, changed)
    with opened(changed) as (root, report):
        assert report.ok and root == changed
    manifest = load_manifest(changed)
    job = verify_stage.DeviceJob(changed, manifest,
                                 verify_stage.PhoneRequest(bundle=changed, record_dir=tmp_path / "records"))
    binary = changed / "npu/SM8750/det.bin"
    binary.write_bytes(bytes(b ^ 1 for b in binary.read_bytes()))  # after bundle verify, before the push
    with pytest.raises(QnnDeployError) as e:
        verify_stage.verify_device(job)
    assert e.value.exit_code == 1
    assert str(e.value).startswith(f"npu/SM8750/det.bin changed while it was being pushed to {device.serial}: ")
    assert f"{REMOTE} was not changed" in str(e.value)
    assert not on_phone(device).exists()
    assert not device.host_path(f"{REMOTE}.staging/npu/SM8750/det.bin").exists()
    assert device.host_path(f"{REMOTE}.staging/cpu/det.onnx").is_file()  # what was right waits for the next run

"""The on-device NPU path (issue 25) on emulated phones: `device info --bundle` and `device verify` for a phone whose
SoC has no bundle target but whose HTP arch the bundle validated (SM8845, v81), and for one whose arch it did not
(SM8350, v68, no fp16), through the real adb server.

The phone's onnxruntime_perf_test is a STAND-IN (tests/support/device_emulator/ort_perf_test.py) that compiles the
pushed ONNX with the host's onnxruntime-qnn for the soc_model and htp_arch on its command line, with the ep_options
given there, and writes the EP context where ep.context_file_path says, as the phone's QNN EP would; qnn-net-run is
the stand-in test_device_verify.py uses, which runs the context binary the EP compiled on the host HTP emulator."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from qnndeploy.base import socs
from qnndeploy.base.errors import EXIT_NOT_RUN, BadInput
from qnndeploy.device import ortrunner
from qnndeploy.formats.devicerecord import DeviceRecord
from qnndeploy.qnn import htp
from tests.support import bundles
from tests.support.cli import run
from tests.support.device_emulator import ort_perf_test
from tests.support.device_emulator.qnn_net_run import write_launcher
from tests.support.host import require

pytestmark = [pytest.mark.needs_adb, pytest.mark.needs_qnn, pytest.mark.usefixtures("no_sdk")]

pytest_plugins = ["tests.support.device_emulator.fixtures"]

REMOTE = "/data/local/tmp/qnndeploy/demo-1.0.0"
RUN_DIR = "/data/local/tmp/qnndeploy/run/demo-1.0.0/on-device"
# bundle build --on-device-compile --vtcm-mb 8 --optimization-mode 3 (fp16): the options the phone compiles with
EP_OPTIONS = {"enable_htp_fp16_precision": "1", "htp_graph_finalization_optimization_mode": "3", "vtcm_mb": "8"}
# the ONNX to compile and, from the SDK (the bundle's runtime is Maven's), the v81 libraries; no context binary
V81_FILES = sorted(["manifest.json", "cpu/det.onnx", "cpu/rec.onnx", "lib/arm64-v8a/libQnnHtp.so",
                    "lib/arm64-v8a/libQnnSystem.so", "lib/arm64-v8a/libQnnHtpV81Stub.so",
                    "lib/hexagon-v81/libQnnHtpV81Skel.so"])



@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    require(htp.available(), "onnxruntime-qnn")
    return bundles.compile_inputs(tmp_path_factory.mktemp("compiled"), targets=("SM8550", "SM8750"))


@pytest.fixture(scope="module")
def plain(compiled, tmp_path_factory) -> Path:
    """The demo bundle with SM8550 and SM8750 targets, no on_device section."""
    return bundles.build(tmp_path_factory.mktemp("plain"), compiled)


@pytest.fixture(scope="module")
def bundle(compiled, tmp_path_factory) -> Path:
    """The same targets, built with --on-device-compile (vtcm 8 MB, optimization mode 3): the arches it lists were
    validated here, each graph compiled as the phone's QNN EP will and compared on the host HTP emulator. Its runtime
    is the default, external one (Maven's qnn-runtime, every arch's libraries)."""
    from qnndeploy.bundle.build import OnDeviceRequest

    request = OnDeviceRequest(budget_s=60, vtcm_mb=8, optimization_mode=3)
    return bundles.build(tmp_path_factory.mktemp("on-device"), compiled, on_device=request)


@pytest.fixture(scope="module")
def validated(bundle) -> list[str]:
    manifest = json.loads((bundle / "manifest.json").read_text())
    (archs,) = {tuple(g["validated"]) for g in manifest["on_device"]["graphs"]}
    assert archs[0] == "v69" and "v81" in archs  # v68 (SM8350) has no fp16 HTP: not tried
    return list(archs)


@pytest.fixture(scope="module")
def sdk(tmp_path_factory) -> Path:
    """A QAIRT SDK folder for the QNN libraries the phone's runs need (the bundle ships none): elfgen's stand-in
    libraries, and the qnn-net-run stand-in in bin/aarch64-android."""
    from tests.support.elfgen import fake_sdk

    root = fake_sdk(tmp_path_factory.mktemp("qairt"), ["v73", "v79", "v81"])
    (root / "bin/aarch64-android").mkdir(parents=True)
    write_launcher(root / "bin/aarch64-android/qnn-net-run")
    return root


@pytest.fixture
def ort(tmp_path) -> Path:
    return ort_perf_test.write_launcher(tmp_path / "onnxruntime_perf_test")


def info(*args: str) -> dict:
    r = run("device", "info", *args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def verify(*args: str, records: Path) -> tuple[int, dict]:
    r = run("device", "verify", *args, "--json", "-o", str(records))
    try:
        return r.exit_code, json.loads(r.stdout)
    except json.JSONDecodeError:
        raise AssertionError(r.output) from None


def phone_files(device) -> list[str]:
    root = device.host_path(REMOTE)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


# --- device info ---------------------------------------------------------------------------------------------------

def test_info_reports_the_on_device_path_for_a_soc_without_a_target(emulated_devices, bundle, plain):
    phone = emulated_devices("sm8845")[0]
    c = info("-s", phone.serial, "--bundle", str(bundle))["app_choice"]
    assert (c["provider"], c["npu_source"], c["reason_key"], c["soc"], c["dsp_arch"], c["soc_id"]) == (
        "npu", "on-device", "npu_on_device", "SM8845", "v81", socs.find("SM8845").soc_id)
    assert c["compile_budget_s"] == 60
    assert c["paths"] == {"det": "cpu/det.onnx", "rec": "cpu/rec.onnx"}
    assert c["ep_options"] == {"det": EP_OPTIONS, "rec": EP_OPTIONS}
    text = run("device", "info", "-s", phone.serial, "--bundle", str(bundle)).output
    assert "NPU, compiled on the phone (npu_source on-device): no target for SM8845, HTP v81 is validated" in text
    assert "soc_model 97, compile budget 60 s" in text
    # without the on_device section, the same phone is outside the bundle: the CPU
    c = info("-s", phone.serial, "--bundle", str(plain))["app_choice"]
    assert (c["provider"], c["reason_key"], c["npu_source"]) == ("cpu", "soc_not_in_bundle", None)


def test_info_gives_an_arch_the_bundle_did_not_validate_the_cpu_with_its_reason(emulated_devices, bundle, validated):
    phone = emulated_devices("sm8350")[0]
    c = info("-s", phone.serial, "--bundle", str(bundle))["app_choice"]
    assert (c["provider"], c["reason_key"], c["soc"], c["npu_source"]) == (
        "cpu", "not_validated_on_device", "SM8350", None)
    assert "(v68)" in c["reason"] and f"(validated: {', '.join(validated)})" in c["reason"]
    text = run("device", "info", "-s", phone.serial, "--bundle", str(bundle)).output
    assert f"with bundle demo 1.0.0: CPU fallback: {c['reason']}" in text


# --- device verify -------------------------------------------------------------------------------------------------

def test_verify_without_an_ort_runner_pushes_the_onnx_and_says_how_to_run_it(emulated_devices, bundle, sdk,
                                                                            tmp_path):
    phone = emulated_devices("sm8845")[0]
    code, out = verify(str(bundle), "--qnn-sdk-root", str(sdk), records=tmp_path)
    assert code == EXIT_NOT_RUN, out  # pushed, not compiled: nothing ran
    d = out["devices"][0]
    assert (d["provider"], d["npu_source"], d["compile_budget_s"]) == ("npu", "on-device", 60)
    assert d["expectation"].startswith("NPU expected, compiled on the phone at first run")
    assert sorted(d["push"]["sent"]) == V81_FILES  # the ONNX to compile and the v81 runtime; no context binary
    assert phone_files(phone) == V81_FILES
    assert "--ort-runner" in d["runner_note"] and [g["status"] for g in d["graphs"]] == ["not run", "not run"]
    assert d["graphs"][0]["reason"].startswith("no ORT runner: pass --ort-runner PATH")


@pytest.mark.slow
def test_verify_compiles_on_the_phone_and_compares_with_the_cpu(emulated_devices, bundle, ort, sdk, tmp_path):
    """The done-when of issue 25 on the device side: the SM8845 phone compiles the ONNX with the app's QNN EP options
    for its own soc_model and arch, the cache it writes is what later runs open, and the binary it compiled matches
    the CPU model."""
    phone = emulated_devices("sm8845")[0]
    code, out = verify(str(bundle), "--ort-runner", str(ort), "--qnn-sdk-root", str(sdk), "--random", "2", "--runs",
                       "3", records=tmp_path)
    assert code == 0, out
    d = out["devices"][0]
    assert d["ok"] and d["expectation"].startswith("NPU, compiled on the phone: the QNN EP compiled every graph")
    assert d["environment"]["ADSP_LIBRARY_PATH"].startswith(f"{REMOTE}/lib/hexagon-v81;")
    assert [g["graph"] for g in d["graphs"]] == ["det", "rec"]
    for g in d["graphs"]:
        od = g["on_device"]
        assert g["status"] == "passed" and g["samples"] == 2
        assert od["model"] == f"{REMOTE}/cpu/{g['graph']}.onnx"
        assert od["provider_options"] == {"backend_path": "libQnnHtp.so", "htp_performance_mode": "burst",
                                          "soc_model": "97", "htp_arch": "81", **EP_OPTIONS}
        assert od["session_config"] == {
            "session.disable_cpu_ep_fallback": "1", "ep.context_enable": "1", "ep.context_embed_mode": "0",
            "ep.context_file_path": f"{RUN_DIR}/{g['graph']}/cache/{g['graph']}_ctx.onnx"}
        assert od["compile_s"] > 0 and od["cache_load_s"] > 0 and od["per_inference_s"] > 0 and od["inferences"] == 3
        # cold: the compile into an empty cache; warm: the cache opened; each session before its first result
        assert g["launch"]["session_cold_ms"] == pytest.approx(od["compile_s"] * 1000, abs=0.5)
        assert g["launch"]["session_warm_ms"] == pytest.approx(od["cache_load_s"] * 1000, abs=0.5)
        for start in ("cold", "warm"):
            assert 0 < g["launch"][f"session_{start}_ms"] <= g["launch"][f"first_result_{start}_ms"]
        assert od["binary"] == f"{RUN_DIR}/{g['graph']}/cache/{g['graph']}_ctx_qnn.bin"
        # the phone compiled it for its own SoC: QNN writes the target into the binary
        binary = phone.host_path(od["binary"]).read_bytes()
        assert re.search(rb"soc_type=SM8845;arch=81", binary)
        (y,) = g["outputs"]
        assert y["passed"] and y["cosine"] > 0.999 and 0 < y["max_abs_diff"] < 0.05  # fp16 HTP against fp32 CPU
    assert d["compile_s"] == pytest.approx(sum(g["on_device"]["compile_s"] for g in d["graphs"]), abs=1e-3)
    assert "within the budget of 60 s" in d["reason"]
    record = json.loads(Path(d["record"]).read_text())
    assert json.dumps(DeviceRecord.parse(record).to_json()) == json.dumps(record)  # read strictly, as written
    assert record["decision"]["npu_source"] == "on-device" and record["decision"]["compile_budget_s"] == 60
    assert record["on_device"]["compile_s"] == d["compile_s"]
    assert record["graphs"][0]["on_device"]["compile_s"] == d["graphs"][0]["on_device"]["compile_s"]
    assert record["runner"]["ort"]["path"] == ortrunner.REMOTE_ORT_RUNNER
    assert "session creation" in record["runner"]["timing"]
    text = run("device", "verify", str(bundle), "--ort-runner", str(ort), "--qnn-sdk-root", str(sdk), "--runs", "2",
               "-o", str(tmp_path)).output
    assert re.search(r"det +compiled on the phone in \d+\.\d{3} s \(first run\), cache hit \d+\.\d{3} s", text), text
    assert "QNN EP: backend_path=libQnnHtp.so htp_performance_mode=burst soc_model=97 htp_arch=81" in text
    assert "PASS  det" in " ".join(text.split()) or "PASS  det" in text


@pytest.mark.slow
def test_without_qnn_net_run_the_graphs_are_compiled_and_run_not_compared(emulated_devices, compiled, ort, tmp_path):
    """A bundled runtime (no SDK needed, so no qnn-net-run either): compiled and run on the phone, not compared."""
    from qnndeploy.bundle.build import OnDeviceRequest

    emulated_devices("sm8845")
    own = bundles.build(tmp_path / "b", compiled, runtime="bundled", on_device=OnDeviceRequest(optimization_mode=3))
    bundles.with_arch_libs(own, ["v81"])  # bundle build ships the targets' arches' Stub and Skel only
    code, out = verify(str(own), "--ort-runner", str(ort), "--runs", "2", records=tmp_path)
    assert code == 0, out
    d = out["devices"][0]
    assert [g["status"] for g in d["graphs"]] == ["ran", "ran"] and all(not g["outputs"] for g in d["graphs"])
    assert d["expectation"] == "NPU, compiled on the phone: the QNN EP compiled every graph there and ran it"
    assert "outputs not compared" in d["runner_note"]


@pytest.mark.slow
def test_a_skel_missing_on_the_phone_fails_the_on_device_compile_with_advice(emulated_devices, bundle, sdk,
                                                                             tmp_path):
    emulated_devices("sm8845")
    wrapper = ort_perf_test.write_launcher(tmp_path / "ort", adsp_library_path="/vendor/lib/rfsa/adsp")
    code, out = verify(str(bundle), "--ort-runner", str(wrapper), "--qnn-sdk-root", str(sdk), records=tmp_path)
    assert code == 1
    d = out["devices"][0]
    det = d["graphs"][0]
    assert det["status"] == "error" and det["reason"].startswith("onnxruntime_perf_test exited with 255: ")
    assert [a["id"] for a in det["advice"]] == ["skel-not-found"]
    assert d["expectation"] == "NPU on-device compile, but it failed on the phone: the app would fall back to the CPU"


def test_verify_gives_an_sm8350_the_cpu_and_compiles_nothing(emulated_devices, bundle, ort, sdk, tmp_path):
    phone = emulated_devices("sm8350")[0]
    code, out = verify(str(bundle), "--ort-runner", str(ort), "--qnn-sdk-root", str(sdk), records=tmp_path)
    assert code == 0, out  # the app's CPU path ran on the phone's CPU
    d = out["devices"][0]
    assert (d["provider"], d["npu_source"], d["expectation"]) == ("cpu", None, "CPU fallback expected")
    assert "v68" in d["reason"]
    assert [(g["graph"], g["status"], g["ran_on"]) for g in d["graphs"]] == [("det", "ran", "cpu"),
                                                                           ("rec", "ran", "cpu")]
    for g in d["graphs"]:  # the CPU path's first launch: a first process, then a second
        for start in ("cold", "warm"):
            assert 0 < g["launch"][f"session_{start}_ms"] <= g["launch"][f"first_result_{start}_ms"]
    assert phone_files(phone) == ["cpu/det.onnx", "cpu/rec.onnx", "manifest.json"]


# --- the tool's command line -------------------------------------------------------------------------------------

def test_ep_options_the_tool_would_split_are_refused():
    provider = ortrunner.provider_options("v81", 97, {"vtcm_mb": "8 16"}, None)
    with pytest.raises(BadInput, match=r"QNN EP option vtcm_mb='8 16': onnxruntime_perf_test reads 'key\|value'"):
        ortrunner.command("m.onnx", provider, ortrunner.session_config(None), 1)
    # the bundle's options never replace the SoC's: soc_model and htp_arch come from the phone
    assert ortrunner.provider_options("v81", 97, {"htp_arch": "73", "soc_model": "43"}, "burst")["htp_arch"] == "81"



def test_the_ort_runner_is_for_phones_over_adb_and_must_be_an_android_program(tmp_path):
    import sys

    r = run("device", "verify", str(tmp_path), "--aihub", "--soc", "SM8850", "--ort-runner", sys.executable)
    assert r.exit_code == 2 and "--ort-runner" in r.output and "phones over adb" in r.output
    with pytest.raises(BadInput, match=r"not Android arm64 \(AArch64\): give onnxruntime_perf_test built for Android"):
        ortrunner.find_ort_runner(Path(sys.executable))
    with pytest.raises(BadInput, match=r"--ort-runner .*: no such file"):
        ortrunner.find_ort_runner(tmp_path / "none")


def test_the_stand_in_speaks_onnxruntime_perf_tests_command_line(tmp_path, bundle, sdk):
    launcher = ort_perf_test.write_launcher(tmp_path / "perf")
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(sdk / "lib/aarch64-android"),
           "ADSP_LIBRARY_PATH": str(sdk / "lib/hexagon-v81/unsigned")}

    def launch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(launcher), *args], capture_output=True, text=True, cwd=tmp_path, env=env,
                              check=False)

    model = tmp_path / "det.onnx"
    model.write_bytes((bundle / "cpu/det.onnx").read_bytes())
    good = ["-e", "qnn", "-i", "backend_path|libQnnHtp.so htp_arch|81 soc_model|97", "-m", "times", "-r", "1"]
    assert launch("--fast", str(model)).returncode == 255  # getopt: an unknown option prints the usage
    r = launch(*good, str(model))
    assert r.returncode == 255 and "there is no test data for model det" in r.stdout  # no -I, no test_data_set_0
    r = launch("-e", "qnn", "-i", "backend_path|libQnnHtpNope.so htp_arch|81 soc_model|97", "-I", str(model))
    assert r.returncode == 255 and "Unable to load backend" in r.stdout
    (tmp_path / "c").mkdir()  # the EP writes no folder: "Failed to open context cache file" otherwise
    r = launch(*good, "-I", "-C", f"ep.context_enable|1 ep.context_file_path|{tmp_path / 'c' / 'det_ctx.onnx'}",
               str(model))
    assert r.returncode == 0, r.stdout
    assert re.search(r"Session creation time cost: [0-9.]+ s", r.stdout)
    assert re.search(rb"soc_type=SM8845;arch=81", (tmp_path / "c" / "det_ctx_qnn.bin").read_bytes())
    digest = hashlib.sha256((tmp_path / "c" / "det_ctx.onnx").read_bytes()).hexdigest()
    r = launch(*good, "-I", str(tmp_path / "c" / "det_ctx.onnx"))  # the cache hit: the EP context loads
    assert r.returncode == 0, r.stdout
    assert hashlib.sha256((tmp_path / "c" / "det_ctx.onnx").read_bytes()).hexdigest() == digest


# --- Play ----------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_play_gives_a_phone_of_no_group_the_default_group_and_the_on_device_decision(emulated_devices, bundle,
                                                                                     tmp_path):
    """`device verify --play`: the SM8845 phone gets the default group, which is the one the decision expects, and
    the base module holds every file its on-device decision needs; a plan whose base lacks one is a mismatch."""
    play_dir = tmp_path / "play"
    packed = run("package", "play", str(bundle), "-o", str(play_dir))
    assert packed.exit_code == 0, packed.output
    new, old = emulated_devices("sm8845", "sm8750")
    code, out = verify(str(bundle), "--all", "--play", str(play_dir), records=tmp_path / "records")
    assert code == EXIT_NOT_RUN, out  # no runner: Play matches, nothing ran
    found = {d["serial"]: d for d in out["devices"]}
    p = found[new.serial]["play"]
    assert (found[new.serial]["npu_source"], p["delivered"], p["expected"], p["ok"]) == (
        "on-device", "other", "other", True)
    assert p["reason"].endswith("the group the decision expects: no NPU file; the NPU models are the base module's "
                                "ONNX, compiled on the phone (on-device)")
    assert (found[old.serial]["npu_source"], found[old.serial]["play"]["delivered"]) == ("prebuilt", "sm8750")
    # a plan whose base module lacks the ONNX the phone compiles: the phone would have nothing to compile
    plan = json.loads((play_dir / "play.json").read_text())
    plan["base"]["files"] = [f for f in plan["base"]["files"] if f["path"] != "cpu/rec.onnx"]
    (play_dir / "play.json").write_text(json.dumps(plan))
    code, out = verify(str(bundle), "-s", new.serial, "--play", str(play_dir), records=tmp_path / "records")
    assert code == 1
    p = out["devices"][0]["play"]
    assert not p["ok"] and "neither it nor the base module and CPU packs hold cpu/rec.onnx" in p["reason"]


@pytest.mark.slow
def test_a_first_compile_over_the_budget_fails_the_phone(emulated_devices, bundle, ort, sdk, tmp_path):
    """The app stops a first compile that outlasts the bundle's budget and takes the CPU: a phone whose compile
    took longer fails. The demo graphs compile in a fraction of a second here and the schema's smallest budget is
    1 s, so the manifest read from the bundle gets a budget below the real compile time measured on the phone."""
    import dataclasses

    from qnndeploy.device import verify as verify_stage
    from qnndeploy.formats.manifest import load_manifest
    from qnndeploy.verification.checks import opened

    emulated_devices("sm8845")
    with opened(bundle) as (root, report):
        manifest = load_manifest(root)
        assert report.ok and manifest.on_device is not None
        tight = dataclasses.replace(manifest, on_device=dataclasses.replace(manifest.on_device, budget_s=0.001))
        asked = verify_stage.PhoneRequest(bundle=root, record_dir=tmp_path, ort_runner=ort, runs=1, qnn_sdk_root=sdk)
        job = verify_stage.DeviceJob(root, tight, asked)
        r = verify_stage.verify_device(job)
    assert r.compile_budget_s == 0.001 and r.compile_s is not None and r.compile_s > 0.001
    assert [g.status for g in r.graphs] == ["passed", "passed"]  # each compiled and matched: only the time is wrong
    assert not r.ok and r.expectation == verify_stage.ON_DEVICE_FAILED
    assert f"the first compile took {r.compile_s:g} s on the phone, over the bundle's budget of 0.001 s" in r.reason
    assert json.loads(Path(r.record).read_text())["ok"] is False


@pytest.mark.slow
def test_the_demo_bundled_with_on_device_compile_runs_on_an_sm8845_and_not_on_an_sm8350(emulated_devices, sdk, ort,
                                                                                          tmp_path):
    """Issue 25's done-when, from the command line: the demo built for SM8750, bundled with --on-device-compile;
    `device info --bundle` gives the SM8845 phone the NPU compiled on the phone and the SM8350 the CPU, and `device
    verify` compiles the demo model on the SM8845 and compares it with the CPU model."""
    assert run("demo", "-o", str(tmp_path / "demo"), "--soc", "SM8750").exit_code == 0
    built = run("bundle", "build", "--name", "kws", "--version", "1.0.0", "--from-build", str(tmp_path / "demo/build"),
                "--on-device-compile", "-o", str(tmp_path / "out"))
    assert built.exit_code == 0, built.output
    bundle = tmp_path / "out" / "kws-1.0.0"
    new, old = emulated_devices("sm8845", "sm8350")
    assert info("-s", new.serial, "--bundle", str(bundle))["app_choice"]["npu_source"] == "on-device"
    assert info("-s", old.serial, "--bundle", str(bundle))["app_choice"]["reason_key"] == "not_validated_on_device"
    code, out = verify(str(bundle), "--all", "--ort-runner", str(ort), "--qnn-sdk-root", str(sdk), "--runs", "2",
                       records=tmp_path / "records")
    assert code == 0, out
    found = {d["serial"]: d for d in out["devices"]}
    (g,) = found[new.serial]["graphs"]
    assert g["graph"] == "kws_demo" and g["status"] == "passed" and g["on_device"]["compile_s"] > 0
    assert all(m["passed"] for m in g["outputs"])
    assert found[old.serial]["provider"] == "cpu"
    assert [(g["graph"], g["status"], g["ran_on"]) for g in found[old.serial]["graphs"]] == [("kws_demo", "ran", "cpu")]


# --- device bench ----------------------------------------------------------------------------------------------------

def test_bench_on_the_on_device_path_runs_the_npu_through_the_qnn_ep(emulated_devices, bundle, sdk, ort, tmp_path):
    """On a phone the bundle compiles on, bench's NPU path is onnxruntime_perf_test -e qnn on the EP context compiled
    there (as the app's later starts open it), and its CPU path the same tool's -e cpu."""
    phone = emulated_devices("sm8845")[0]
    r = run("device", "bench", str(bundle), "-s", phone.serial, "--graph", "det", "--runs", "5", "--blocks", "1",
            "--ort-runner", str(ort), "--qnn-sdk-root", str(sdk), "-o", str(tmp_path), "--json")
    assert r.exit_code == 0, r.output
    [record] = json.loads(r.stdout)
    jsonschema.validate(record, json.loads(resources.files("qnndeploy").joinpath(
        "schemas/bench-record.schema.json").read_text()))
    assert (record["decision"]["npu_source"], record["phone"]["soc"]) == ("on-device", "SM8845")
    assert record["settings"]["npu_tool"] == "onnxruntime_perf_test -e qnn"
    npu, cpu = record["paths"]["npu"], record["paths"]["cpu"]
    for p in (npu, cpu):  # the tool's own latency lines, on both paths
        assert p["latency_ms"]["min"] <= p["latency_ms"]["p50"] <= p["latency_ms"]["max"] and p["first_ms"] > 0
    # the NPU's cold start is the compile into an empty EP-context cache, its warm one the cache opened; --blocks 1
    # gives the CPU one process, so no warm start, and the record says why
    assert 0 < npu["launch"]["session_warm_ms"] <= npu["launch"]["first_result_warm_ms"]
    assert 0 < npu["launch"]["session_cold_ms"] <= npu["launch"]["first_result_cold_ms"]
    assert cpu["launch"]["session_cold_ms"] > 0 and cpu["launch"]["session_warm_ms"] is None
    assert any(n.startswith("cpu.launch.*_warm_ms: null, one CPU block ran") for n in record["notes"])
    assert record["ratios"]["latency_p50"] == pytest.approx(npu["latency_ms"]["p50"] / cpu["latency_ms"]["p50"],
                                                            rel=1e-3)
    assert phone.host_path(f"/data/local/tmp/qnndeploy/bench/{bundle.name}/det/cache/det_ctx.onnx").is_file()

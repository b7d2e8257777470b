"""`qnndeploy device ...` and qnndeploy.device.adb against emulated phones, through the real adb server."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import threading

import pytest

from qnndeploy.base.errors import QnnDeployError
from qnndeploy.device import adb
from tests.support import bundles
from tests.support.cli import run

pytestmark = [pytest.mark.needs_adb]

pytest_plugins = ["tests.support.device_emulator.fixtures"]


def _local_files(tmp_path, contents: dict[str, bytes]) -> dict[str, adb.LocalFile]:
    files = {}
    for rel, data in contents.items():
        path = tmp_path / "bundle" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        files[rel] = adb.LocalFile(path, hashlib.sha256(data).hexdigest())
    return files


# --- device info / list --------------------------------------------------------------------------------------

def test_info_on_an_sm8750_phone(device):
    r = run("device", "info", "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert (info["soc"], info["identified_by"], info["dsp_arch"], info["qnn_soc_id"]) == \
        ("SM8750", "Build.SOC_MODEL", "v79", 69)
    assert info["fp16"] is True and info["kernel_soc_id"] == 618
    assert (info["android_release"], info["sdk"], info["abi"], info["page_size"]) == ("15", 35, "arm64-v8a", 4096)
    assert info["cdsprpc"] is True and "/vendor/dsp/cdsp" in info["dsp_dirs"]
    assert info["vendor_qnn_libs"] == [] and info["notes"] == []
    text = run("device", "info").output
    assert "SoC SM8750 (by Build.SOC_MODEL): HTP v79, QNN soc_model 69, fp16 yes" in text


def test_info_on_android_11_identifies_the_soc_by_board_platform(emulated_devices):
    phone = emulated_devices("android11", files={"/vendor/lib64/libQnnHtp.so": b"vendor copy"},
                             page_size=16384)[0]
    r = run("device", "info", "-s", phone.serial, "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["soc_model_prop"] is None and info["board_platform"] == "lahaina"
    assert (info["soc"], info["identified_by"], info["dsp_arch"]) == ("SM8350", "ro.board.platform", "v68")
    assert info["vendor_qnn_libs"] == ["/vendor/lib64/libQnnHtp.so"]
    notes = " | ".join(info["notes"])
    assert "identified by ro.board.platform 'lahaina'" in notes
    assert "no fp16" in notes and "shadow the app's" in notes and "16 KB pages" in notes


def test_info_on_a_phone_outside_the_catalog(emulated_devices):
    emulated_devices("exynos")
    info = json.loads(run("device", "info", "--json").stdout)
    assert info["soc"] is None and info["cdsprpc"] is False
    assert any("s5e9945 is not in the catalog" in n for n in info["notes"])


def test_info_with_a_bundle_names_the_target_the_app_would_choose(emulated_devices, tmp_path):
    from qnndeploy.base.fileio import write_json

    write_json(tmp_path / "demo-1.0.0" / "manifest.json", bundles.manifest(targets=("SM8550", "SM8750")))
    phone, old, other = emulated_devices("sm8750", "android11", "exynos")
    choice = {}
    for d in (phone, old, other):
        r = run("device", "info", "-s", d.serial, "--bundle", str(tmp_path / "demo-1.0.0"), "--json")
        assert r.exit_code == 0, r.output
        choice[d] = json.loads(r.stdout)["app_choice"]
    assert choice[phone]["provider"] == "npu" and choice[phone]["soc"] == "SM8750"
    assert "npu/SM8750/det.bin" in choice[phone]["files"]
    assert choice[old]["provider"] == "cpu" and choice[old]["reason"].startswith("SoC SM8350 is not in the bundle")
    assert choice[other]["provider"] == "cpu" and "S5E9945 is not in the bundle" in choice[other]["reason"]
    text = run("device", "info", "-s", old.serial, "--bundle", str(tmp_path / "demo-1.0.0")).output
    assert "with bundle demo 1.0.0: CPU fallback: SoC SM8350 is not in the bundle" in text
    r = run("device", "info", "-s", phone.serial, "--bundle", str(tmp_path))
    assert r.exit_code == 2 and "is not a bundle" in r.output


def test_info_with_a_bundle_on_phones_reporting_every_alias_picks_the_catalog_socs_target(emulated_devices, tmp_path):
    """Galaxy S25 phones report ro.soc.model SM8750-AC, S26 SM8850-AD, S24 SM8650-AC, S23 SM8550-AC; others SM8750P,
    SM8350P, SM8845P, QCS9075: each is its catalog SoC, whose target the app would choose, with its soc_model."""
    from qnndeploy.base import socs
    from qnndeploy.base.fileio import write_json

    aliased = [s for s in socs.catalog() if s.aliases]
    write_json(tmp_path / "demo-1.0.0" / "manifest.json", bundles.manifest(targets=tuple(s.model for s in aliased)))
    (phone,) = emulated_devices("sm8750")
    seen = set()
    for soc in aliased:
        for alias in soc.aliases:
            for reported in (alias, alias.lower()):
                phone.set_prop("ro.soc.model", reported)
                r = run("device", "info", "-s", phone.serial, "--bundle", str(tmp_path / "demo-1.0.0"), "--json")
                assert r.exit_code == 0, r.output
                info = json.loads(r.stdout)
                assert info["soc_model_prop"] == reported
                assert (info["soc"], info["identified_by"], info["qnn_soc_id"]) == (soc.model, "Build.SOC_MODEL",
                                                                                    soc.soc_id), reported
                choice = info["app_choice"]
                assert (choice["provider"], choice["soc"], choice["dsp_arch"], choice["soc_id"]) == (
                    "npu", soc.model, soc.dsp_arch, soc.soc_id), (reported, choice["reason"])
                assert f"npu/{soc.model}/det.bin" in choice["files"]
                seen.add(alias)
    assert {"SM8750-AC", "SM8850-AD", "SM8650-AC", "SM8550-AC", "SM8750P", "SM8350P", "SM8845P", "QCS9075"} <= seen
    phone.set_prop("ro.soc.model", "SM8750-AC")
    text = run("device", "info", "-s", phone.serial, "--bundle", str(tmp_path / "demo-1.0.0")).output
    assert "ro.soc.model SM8750-AC" in text and "SoC SM8750 (by Build.SOC_MODEL): HTP v79, QNN soc_model 69" in text
    assert "with bundle demo 1.0.0: NPU, target SM8750 (v79) by Build.SOC_MODEL" in text


def test_info_with_a_bundled_runtime_older_than_min_runtime_says_the_app_takes_the_cpu(emulated_devices, tmp_path):
    """The version is the one the bundle's own libQnnHtp.so's build marker names, as the app's glue reads it."""
    from qnndeploy.base.fileio import write_json

    m = bundles.manifest(targets=("SM8750",), runtime="bundled")
    m["qairt"]["min_runtime"] = "2.52.0"
    lib = tmp_path / "demo-1.0.0" / "lib/arm64-v8a/libQnnHtp.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\0" * 100 + b"v2.51.0.260929181845" + b"\0" * 100)
    write_json(tmp_path / "demo-1.0.0" / "manifest.json", m)
    (phone,) = emulated_devices("sm8750")
    r = run("device", "info", "-s", phone.serial, "--bundle", str(tmp_path / "demo-1.0.0"), "--json")
    assert r.exit_code == 0, r.output
    choice = json.loads(r.stdout)["app_choice"]
    assert (choice["provider"], choice["reason_key"], choice["runtime_version"]) == ("cpu", "runtime_too_old", "2.51.0")
    m["qairt"]["min_runtime"] = "2.51.0"
    write_json(tmp_path / "demo-1.0.0" / "manifest.json", m)
    r = run("device", "info", "-s", phone.serial, "--bundle", str(tmp_path / "demo-1.0.0"), "--json")
    assert json.loads(r.stdout)["app_choice"]["provider"] == "npu"


def test_list_shows_every_device_with_its_soc(emulated_devices):
    a, b = emulated_devices("sm8750", "android11")
    rows = {r["serial"]: r for r in json.loads(run("device", "list", "--json").stdout)}
    assert rows[a.serial]["soc"] == "SM8750" and rows[b.serial]["soc"] == "SM8350"  # by its ro.board.platform
    assert rows[a.serial]["state"] == rows[b.serial]["state"] == "device"


# --- choosing a device ---------------------------------------------------------------------------------------

def test_no_device_is_a_clear_error(adb_server, monkeypatch):
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(adb_server.port))
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    r = run("device", "info")
    assert r.exit_code == 2 and "no device connected" in r.output


def test_several_devices_need_a_serial(emulated_devices):
    _a, b = emulated_devices("sm8750", "android11")
    r = run("device", "info")
    assert r.exit_code == 2 and "2 devices connected" in r.output and "-s SERIAL" in r.output
    r = run("device", "info", "-s", "127.0.0.1:1")
    assert r.exit_code == 2 and "no device 127.0.0.1:1" in r.output
    assert json.loads(run("device", "info", "-s", b.serial, "--json").stdout)["soc"] == "SM8350"


@pytest.mark.parametrize("state, advice", [("unauthorized", "accept the 'Allow USB debugging' prompt"),
                                           ("offline", "replug it")])
def test_unusable_device_states_say_what_to_do(emulated_devices, state, advice):
    phone = emulated_devices("sm8750", state=state)[0]
    r = run("device", "info")
    assert r.exit_code == 2, r.output
    assert f"{phone.serial} is {state}" in r.output and advice in r.output


# --- shell and files -------------------------------------------------------------------------------------------

def test_run_getprops_pull(device, tmp_path):
    dev = adb.connect()
    assert dev.run("echo hi; exit 4") == adb.ShellResult(4, "hi\n")
    assert dev.getprops()["ro.soc.manufacturer"] == "QTI"
    device.write_file("/data/local/tmp/out.raw", b"\x00\x01" * 1000)
    assert dev.pull("/data/local/tmp/out.raw", tmp_path / "out.raw") == 2000
    with pytest.raises(QnnDeployError, match="cannot pull /data/local/tmp/nope"):
        dev.pull("/data/local/tmp/nope", tmp_path / "nope")
    assert not (tmp_path / "nope").exists()
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(QnnDeployError, match="it is a folder"):
        dev.push(tmp_path / "f", "/data/local/tmp")


def test_push_folder_sends_only_what_differs(device, tmp_path):
    files = _local_files(tmp_path, {"manifest.json": b"{}", "npu/SM8750/det.bin": b"d" * 300_000,
                                    "cpu/det.onnx": b"c" * 200_000})
    dev = adb.connect()
    target = "/data/local/tmp/qnndeploy/demo-1.0"
    first = dev.push_folder(files, target)
    assert sorted(first.sent) == sorted(files) and first.bytes_sent == 500_002
    second = dev.push_folder(files, target)
    assert second.sent == [] and second.bytes_sent == 0
    device.write_file(target + "/cpu/det.onnx", b"tampered")  # altered on the phone: found and re-sent
    device.write_file(target + "/stale.bin", b"old")  # not in the bundle: removed
    third = dev.push_folder(files, target)
    assert third.sent == ["cpu/det.onnx"] and third.removed == ["stale.bin"] and third.bytes_sent == 200_000
    assert dev.sha256s(target) == {rel: f.sha256 for rel, f in files.items()}
    assert dev.sha256s(target + ".staging") is None  # renamed into place


def test_disconnect_mid_push_then_resume(adb_server, device, tmp_path):
    dev = adb.connect()
    target = "/data/local/tmp/qnndeploy/demo"
    dev.push_folder(_local_files(tmp_path / "v1", {"a.bin": b"1" * 10}), target)
    new = _local_files(tmp_path / "v2", {"a.bin": b"a" * 500_000, "b.bin": b"b" * 2_000_000})
    device.drop_during_send(after_bytes=1_000_000)  # a.bin lands, b.bin is cut half-way
    with pytest.raises(QnnDeployError, match=r"lost the connection to .* while pushing b.bin .*run the command "
                                             "again") as failure:
        dev.push_folder(new, target)
    assert failure.value.exit_code == 1
    assert device.host_path(target + "/a.bin").read_bytes() == b"1" * 10  # the old folder is intact
    adb_server.wait_for(device.serial, "device")  # the adb server reconnects on its own, as over Wi-Fi
    resumed = adb.connect().push_folder(new, target)
    assert resumed.sent == ["b.bin"] and resumed.unchanged == ["a.bin"] and resumed.bytes_sent == 2_000_000
    assert dev.sha256s(target) == {rel: f.sha256 for rel, f in new.items()}


# --- profile ---------------------------------------------------------------------------------------------------

def _start_load(device, name="com.example.app") -> int:
    dev = adb.connect(device.serial)
    pid = int(dev.run(f"nohup test-load {name} >/dev/null 2>&1 & echo $!").output)
    for _ in range(200):
        if len(dev.run(f"ls /proc/{pid}/task").output.split()) == 2:
            return pid
    raise AssertionError("test-load did not start its second thread")


@pytest.mark.slow
def test_profile_shows_a_busy_thread_and_a_sleeping_one(device, tmp_path):
    pid = _start_load(device)
    r = run("device", "profile", "--package", "com.example.app", "--interval", "0.5", "--duration", "1.5",
            "--csv", str(tmp_path / "p.csv"), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["pid"] == pid and out["name"] == "com.example.app" and len(out["samples"]) == 3
    threads = {t["name"]: t["cpu_percent"] for t in out["threads"]}
    # at most one core, and more than the sleeping thread: how much of a core the busy one gets depends on the host's
    # load (a loaded 2-core CI machine gave it a few percent), so no lower bound beyond "it ran"
    assert 0 < out["mean_cpu_percent"] <= 110
    assert threads["sleeper"] < threads["com.example.app"] <= 110 and threads["sleeper"] < 5
    assert out["samples"][0]["battery"] == {"level": 80, "temperature_c": 31.2, "voltage_mv": 4012,
                                            "current_ma": -350.0, "powered": False}
    assert out["powered"] is False
    rows = list(csv.reader((tmp_path / "p.csv").read_text().splitlines()))
    assert rows[0][:2] == ["time_s", "cpu_percent"] and f"{pid} com.example.app" in rows[0] and len(rows) == 4


def test_profile_live_table_by_pid(device):
    pid = _start_load(device)
    r = run("device", "profile", "--pid", str(pid), "--interval", "0.5", "--duration", "0.5")
    assert r.exit_code == 0, r.output
    assert f"process {pid} (com.example.app)" in r.output and "80% 31.2°C -350 mA" in r.output
    assert "sleeper" in r.output and "mean CPU" in r.output


def test_profile_warns_that_current_on_usb_power_is_charging(device):
    device.set_battery(charging=True, current_ua=120000)
    pid = _start_load(device)
    r = run("device", "profile", "--pid", str(pid), "--interval", "0.3", "--duration", "0.3")
    assert r.exit_code == 0, r.output
    assert "+120 mA" in r.output and "on external power (USB/AC): the battery current is charging" in r.output


@pytest.mark.slow
def test_profile_stops_when_the_process_exits_and_keeps_the_samples(device, tmp_path):
    pid = _start_load(device)
    threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()
    r = run("device", "profile", "--pid", str(pid), "--interval", "0.3", "--csv", str(tmp_path / "p.csv"))
    assert r.exit_code == 0, r.output
    assert f"process {pid} ended" in r.output and "mean CPU" in r.output
    assert len(list(csv.reader((tmp_path / "p.csv").read_text().splitlines()))) >= 2


def test_profile_errors(device):
    r = run("device", "profile", "--package", "com.not.running")
    assert r.exit_code == 2 and "com.not.running is not running" in r.output
    r = run("device", "profile", "--pid", "1", "--package", "x")
    assert r.exit_code == 2 and "exactly one of --pid" in r.output

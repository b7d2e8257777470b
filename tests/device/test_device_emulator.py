"""The emulated device, through the real adb server and adbutils: what qnndeploy's device commands rely on."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from adbutils.errors import AdbError

pytestmark = [pytest.mark.needs_adb]

pytest_plugins = ["tests.support.device_emulator.fixtures"]


def _adb(server, device):
    return server.client().device(device.serial)


def test_getprop_values_come_from_the_device_config(adb_server, emulated_devices):
    phone, old = emulated_devices("sm8750", "android11")
    d = _adb(adb_server, phone)
    assert d.getprop("ro.soc.model") == "SM8750"
    assert d.getprop("ro.board.platform") == "sun"
    assert d.getprop("ro.build.version.sdk") == "35"
    assert d.getprop("ro.product.cpu.abi") == "arm64-v8a"
    assert _adb(adb_server, old).getprop("ro.soc.model") == ""  # Android 11: no ro.soc.model
    phone.set_prop("ro.soc.model", "SM8650")
    assert d.shell(["getprop", "ro.soc.model"]) == "SM8650"
    assert "[ro.build.version.release]: [15]" in d.shell("getprop")


def test_shell_gives_output_and_exit_status(adb_server, device):
    d = _adb(adb_server, device)
    r = d.shell2("sh -c 'echo out; echo err >&2; exit 3'")
    assert r.returncode == 3
    assert r.output.split() == ["out", "err"]  # shell v1: stderr arrives on the same stream
    assert d.shell2("test -d /data/local/tmp").returncode == 0
    assert d.shell2("ls /data/local/tmp/missing").returncode != 0
    assert d.shell("cd /data/local/tmp && pwd") == "/data/local/tmp"  # device paths, never the host's
    assert d.shell("getconf PAGE_SIZE") == "4096"
    assert int(d.shell("getconf CLK_TCK")) == os.sysconf("SC_CLK_TCK")


def test_battery_from_dumpsys_and_sysfs(adb_server, device):
    device.set_battery(level=57, temperature=341, current_ua=-420000)
    d = _adb(adb_server, device)
    dump = d.shell("dumpsys battery")
    assert "  level: 57" in dump and "  temperature: 341" in dump
    assert d.shell("cat /sys/class/power_supply/battery/current_now") == "-420000"
    assert d.shell("cat /sys/class/power_supply/battery/capacity") == "57"


def test_push_and_pull_5_mb_keep_every_byte(adb_server, device, tmp_path):
    data = os.urandom(5 * 1024 * 1024)
    src = tmp_path / "model.bin"
    src.write_bytes(data)
    want = hashlib.sha256(data).hexdigest()
    d = _adb(adb_server, device)
    assert d.sync.push(src, "/data/local/tmp/qnn/model.bin") == len(data)  # parent folder created, as adbd does
    assert d.sync.stat("/data/local/tmp/qnn/model.bin").size == len(data)
    assert d.shell("sha256sum /data/local/tmp/qnn/model.bin") == f"{want}  /data/local/tmp/qnn/model.bin"
    d.sync.pull("/data/local/tmp/qnn/model.bin", tmp_path / "back.bin")
    assert hashlib.sha256((tmp_path / "back.bin").read_bytes()).hexdigest() == want
    # the plain adb client, as `adb push` / `adb pull` users run it
    assert adb_server.adb("-s", device.serial, "push", str(src), "/data/local/tmp/plain.bin").returncode == 0
    assert adb_server.adb("-s", device.serial, "pull", "/data/local/tmp/plain.bin",
                          str(tmp_path / "plain.bin")).returncode == 0
    assert (tmp_path / "plain.bin").read_bytes() == data
    assert {f.path for f in d.sync.list("/data/local/tmp")} >= {"qnn", "plain.bin"}


def test_mkdir_mv_rm_act_on_the_sandbox(adb_server, device):
    d = _adb(adb_server, device)
    cmd = ("mkdir -p /data/local/tmp/b.staging/npu && echo x > /data/local/tmp/b.staging/npu/f && "
           "mv /data/local/tmp/b.staging /data/local/tmp/b && ls /data/local/tmp/b/npu")
    assert d.shell2(cmd).output.strip() == "f"
    assert device.host_path("/data/local/tmp/b/npu/f").read_text() == "x\n"
    assert d.shell2("rm -rf /data/local/tmp/b && test ! -e /data/local/tmp/b").returncode == 0
    assert not device.host_path("/data/local/tmp/b").exists()


def test_disconnect_mid_push_fails_then_a_second_push_succeeds(adb_server, device, tmp_path):
    data = os.urandom(3 * 1024 * 1024)
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    d = _adb(adb_server, device)
    device.drop_during_send(after_bytes=1024 * 1024)
    with pytest.raises((AdbError, OSError)):  # what adbutils raises when the server closes the stream
        d.sync.push(src, "/data/local/tmp/big.bin")
    assert not device.host_path("/data/local/tmp/big.bin").exists()  # adbd removes a partial file
    adb_server.wait_for(device.serial, "device")  # the adb server reconnects a dropped `adb connect` device
    assert d.sync.push(src, "/data/local/tmp/big.bin") == len(data)
    assert device.host_path("/data/local/tmp/big.bin").read_bytes() == data


def test_two_devices_at_once(adb_server, emulated_devices):
    a, b = emulated_devices("sm8750", "android11")
    assert a.serial != b.serial
    listed = {i.serial: i.state for i in adb_server.client().list()}
    assert listed[a.serial] == listed[b.serial] == "device"
    assert _adb(adb_server, b).getprop("ro.board.platform") == "lahaina"


def test_unauthorized_and_offline_devices_show_as_adb_reports_them(adb_server, emulated_devices):
    locked = emulated_devices("sm8750", state="unauthorized")[0]
    stuck = emulated_devices("sm8750", state="offline")[0]
    states = adb_server.states()
    assert states[locked.serial] == "unauthorized" and states[stuck.serial] == "offline"


def test_a_process_started_on_the_device_has_a_real_proc_entry(adb_server, device):
    d = _adb(adb_server, device)
    pid = int(d.shell("nohup test-load com.example.app >/dev/null 2>&1 & echo $!"))
    try:
        deadline = time.monotonic() + 10
        while len(d.shell(f"ls /proc/{pid}/task").split()) < 2:  # the sleeper thread is up
            assert time.monotonic() < deadline, "test-load did not start its second thread"
            time.sleep(0.05)
        stat = d.shell(f"cat /proc/{pid}/stat")
        assert stat.startswith(f"{pid} (com.example.app) ")
        assert int(stat.rsplit(")", 1)[1].split()[11]) >= 0  # utime, field 14
        names = d.shell(f"cat /proc/{pid}/task/*/comm").split()
        assert sorted(names) == ["com.example.app", "sleeper"]
        assert d.shell("pidof com.example.app") == str(pid)
    finally:
        device.stop()
    deadline = time.monotonic() + 5
    while (proc := Path(f"/proc/{pid}")).exists() and "Z" not in (proc / "stat").read_text().split()[2]:
        assert time.monotonic() < deadline, "stopping the device did not end its processes"
        time.sleep(0.05)


def test_the_hostile_preset_reports_escape_sequences_and_a_5000_digit_api_level(adb_server, emulated_devices):
    (phone,) = emulated_devices("hostile")
    d = _adb(adb_server, phone)
    assert d.shell(["getprop", "ro.product.model"]) == "Emulated \x1b]0;title\x07Phone\x1b[2J"
    assert d.shell(["getprop", "ro.build.version.sdk"]) == "9" * 5000
    assert "[ro.soc.manufacturer]: [QTI\x1b]0;pwned\x07]" in d.shell("getprop")
    assert d.shell("ls /vendor/lib64").split() == ["libQnn\x1b[2J\x1b]0;x\x07.so", "libcdsprpc.so"]


@pytest.mark.slow
def test_misbehaving_tools_sleep_flood_and_trickle_until_told_to_behave(adb_server, device):
    import socket

    d = _adb(adb_server, device)
    device.misbehave("getprop", "sleep")
    c = d.open_shell("getprop ro.soc.model")
    c.conn.settimeout(1)
    with pytest.raises(socket.timeout):  # no answer at all
        c.conn.recv(1)
    c.close()
    device.misbehave("sha256sum", "flood")
    c = d.open_shell("sha256sum /data/local/tmp")
    got = b""
    while len(got) < 2 * 1024 * 1024:  # far more than any sha256sum line, and it goes on (100 MB)
        got += c.conn.recv(65536)
    assert got.startswith(b"[sha256sum]: [flood flood")
    c.close()
    device.misbehave("getprop", "trickle")
    c = d.open_shell("getprop")
    start, got = time.monotonic(), b""
    while len(got) < 2:
        got += c.conn.recv(1)
    assert got == b"[[" and time.monotonic() - start >= 0.9  # one byte, then one more a second later
    c.close()
    device.misbehave("getprop", None)
    device.misbehave("sha256sum", None)
    assert d.getprop("ro.soc.model") == "SM8750"
    assert d.shell("sha256sum /system/../system/nothing 2>&1; echo $?").split()[-1] == "1"  # the host's tool again

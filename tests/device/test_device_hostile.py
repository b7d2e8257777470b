"""A hostile or broken phone (tests/support/device_emulator's failure injections) against qnndeploy's device path: every
adb step ends within its deadline or at its byte cap with a one-line error naming the phone and the step (exit 1),
nothing half-written is left in place on the phone, and the phone's text never reaches the terminal raw.

Timed tests give a small --timeout and bound the elapsed time by it plus a generous margin (a loaded machine only
makes the good steps slower, and those have the same deadline); they take seconds, so they are in the slow tier.
`device verify` cases that need a real bundle are in test_device_verify.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from qnndeploy.base.errors import CheckFailed, QnnDeployError
from qnndeploy.cli._common import escaped
from qnndeploy.device import adb
from qnndeploy.device import info as device_info
from tests.support.cli import run

pytest_plugins = ["tests.support.device_emulator.fixtures"]

MARGIN_S = 15  # on top of the configured deadline: start-up, the adb server, a loaded machine
RAW = ("\x1b", "\x07", "\x9b")  # ESC, BEL, CSI: what starts or ends a terminal escape sequence


def _run(*args: str):
    """The command as a terminal user runs it: color=True, so that click strips nothing itself."""
    start = time.monotonic()
    r = run(*args, color=True)
    return r, time.monotonic() - start


def _one_line_error(r, code: int = 1) -> str:
    """The command ended with exit `code` and one `error: ...` line on stderr, no traceback."""
    assert r.exit_code == code, r.output
    assert isinstance(r.exception, SystemExit), r.exc_info  # not an uncaught exception
    assert "Traceback" not in r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def _local(tmp_path, rel: str, data: bytes) -> dict[str, adb.LocalFile]:
    path = tmp_path / "bundle" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {rel: adb.LocalFile(path, hashlib.sha256(data).hexdigest())}


def _running_in(pgids: set[int]) -> list[int]:
    """Processes of these process groups that are alive (not zombies)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        if fields[0] != "Z" and int(fields[2]) in pgids:  # state, pgrp
            found.append(int(stat.parent.name))
    return found


def _gone(pgids: set[int], within: float = 10) -> bool:
    """Every process started on the emulated phone has ended (adbd hung it up when the stream closed)."""
    deadline = time.monotonic() + within
    while _running_in(pgids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# --- text from the phone ---------------------------------------------------------------------------------------

def test_escaped_shows_control_characters_and_keeps_printable_text():
    assert escaped("SM8750\x1b[2J") == "SM8750\\x1b[2J"
    assert escaped("\x1b]0;title\x07") == "\\x1b]0;title\\x07"
    assert escaped("a\x9b31mb\x00\x7f") == "a\\x9b31mb\\x00\\x7f"  # C1 CSI, NUL, DEL
    assert escaped("evil\u202etxt.so\u200b") == "evil\\u202etxt.so\\u200b"  # bidi override, zero width
    assert escaped("two\nlines\r\tx") == "two\\x0alines\\x0d\\x09x"
    assert escaped("Snapdragon® 8 Elite, 31.2°C, 日本, C:\\dir") == "Snapdragon® 8 Elite, 31.2°C, 日本, C:\\dir"


def test_error_messages_are_escaped_too(monkeypatch):
    def hostile(*_args):
        raise CheckFailed("`getconf PAGE_SIZE` failed on 1234 (exit 1): \x1b[2J\x1b]0;pwned\x07")

    monkeypatch.setattr(device_info, "device_info", hostile)
    r, _ = _run("device", "info")
    line = _one_line_error(r)
    assert not any(c in r.output for c in RAW)
    assert line.endswith("\\x1b[2J\\x1b]0;pwned\\x07")
    r, _ = _run("device", "info", "--json")
    assert json.loads(r.stdout) == {"error": line.removeprefix("error: "), "exit_code": 1}


def test_every_device_command_takes_the_same_timeout_option():
    for command in ("list", "info", "profile", "verify"):
        r = run("device", command, "--help")
        assert r.exit_code == 0
        assert "--timeout SECONDS" in r.output
        assert "Replace the deadline of every adb step" in " ".join(r.output.split())
    r = run("device", "info", "--timeout", "0")
    assert r.exit_code == 2 and "--timeout" in r.output
    r = run("device", "list", "--aihub", "--timeout", "5")
    assert r.exit_code == 2 and "--timeout is for phones over adb" in r.output


@pytest.mark.needs_adb
def test_escape_sequences_in_properties_and_file_names_never_reach_the_terminal(emulated_devices):
    (phone,) = emulated_devices("hostile")
    r, _ = _run("device", "info")
    assert r.exit_code == 0, r.output
    assert not any(c in r.output for c in RAW), repr(r.output)
    assert "Emulated \\x1b]0;title\\x07Phone\\x1b[2J" in r.output  # shown, visibly
    assert "ro.soc.model SM8750\\x1b[2J" in r.output and "qnndeploy\\x9b31m" in r.output
    assert "/vendor/lib64/libQnn\\x1b[2J\\x1b]0;x\\x07.so" in r.output  # a file name from the phone's find
    assert "SoC SM8750\\x1b[2J is not in the catalog" in r.output  # the notes quote the phone too

    r, _ = _run("device", "info", "--json")
    assert r.exit_code == 0 and not any(c in r.stdout for c in RAW)  # json.dumps escapes them
    info = json.loads(r.stdout)  # ... and gives the phone's exact values back
    assert info["model"] == "Emulated \x1b]0;title\x07Phone\x1b[2J"
    assert info["vendor_qnn_libs"] == ["/vendor/lib64/libQnn\x1b[2J\x1b]0;x\x07.so"]

    r, _ = _run("device", "list")
    assert r.exit_code == 0 and phone.serial in r.output and not any(c in r.output for c in RAW)


@pytest.mark.needs_adb
def test_a_5000_digit_api_level_reads_as_unknown_not_as_a_crash(emulated_devices):
    (phone,) = emulated_devices("hostile")
    assert len(phone.props["ro.build.version.sdk"]) == 5000  # int() of it raises in Python
    r, _ = _run("device", "info", "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["sdk"] is None and info["android_release"] == "15\x1b[31mred"
    assert any(n.startswith("no readable API level (ro.build.version.sdk") for n in info["notes"])
    phone.set_prop("ro.build.version.sdk", "3\u00b2")  # '²': str.isdigit() says yes, int() says no
    assert json.loads(_run("device", "info", "--json")[0].stdout)["sdk"] is None


# --- output caps -------------------------------------------------------------------------------------------------

@pytest.mark.needs_adb
def test_a_getprop_that_floods_is_cut_at_1_mib(device):
    device.misbehave("getprop", "flood")  # 100 MB of output
    r, elapsed = _run("device", "info", "--timeout", "20")
    line = _one_line_error(r)
    assert line == (f"error: {device.serial}: reading properties (getprop): more than 1 MiB of output, stopped "
                    "reading: the phone does not answer as this step expects")
    assert elapsed < 20 + MARGIN_S  # the cap ended it (the message says so), within the deadline in any case
    assert _gone(device._groups)  # and the flood on the phone was hung up


# --- deadlines -----------------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.needs_adb
def test_a_getprop_that_never_answers_ends_at_the_deadline(device):
    device.misbehave("getprop", "sleep")
    r, elapsed = _run("device", "info", "--timeout", "2")
    line = _one_line_error(r)
    assert line.startswith(f"error: {device.serial}: reading properties (getprop): no answer in 2 s; ")
    assert "--timeout SECONDS" in line
    assert elapsed < 2 + MARGIN_S
    assert _gone(device._groups)  # closing the stream hung up the sleeping getprop on the phone


@pytest.mark.slow
@pytest.mark.needs_adb
def test_a_getprop_that_trickles_ends_at_the_deadline(device):
    device.misbehave("getprop", "trickle")  # a byte a second, for ever: each read is quick, the whole is not
    r, elapsed = _run("device", "info", "--timeout", "2", "--json")
    line = _one_line_error(r)
    assert f"{device.serial}: reading properties (getprop): not finished in 2 s (" in line and "bytes so far)" in line
    assert json.loads(r.stdout)["exit_code"] == 1
    assert elapsed < 2 + MARGIN_S


@pytest.mark.slow
@pytest.mark.needs_adb
def test_list_keeps_the_good_phones_and_names_the_one_that_hangs(emulated_devices):
    good, hung = emulated_devices("sm8750", "android11")
    hung.misbehave("getprop", "sleep")
    r, elapsed = _run("device", "list", "--timeout", "2")
    line = _one_line_error(r)
    assert line.startswith(f"error: {hung.serial}: reading properties (getprop): no answer in 2 s")
    rows = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines()}
    assert rows[good.serial][2] == "SM8750" and rows[hung.serial][2] == "?"
    assert elapsed < 2 + MARGIN_S  # the phones are read at once, not one deadline after the other
    r, _ = _run("device", "list", "--timeout", "2", "--json")
    listed = {d["serial"]: d for d in json.loads(r.stdout)}
    assert r.exit_code == 1 and listed[good.serial]["error"] is None
    assert "reading properties (getprop): no answer in 2 s" in listed[hung.serial]["error"]


@pytest.mark.slow
@pytest.mark.needs_adb
def test_profile_ends_when_the_battery_read_hangs(device):
    dev = adb.connect(device.serial)
    pid = int(dev.run("nohup test-load com.example.app >/dev/null 2>&1 & echo $!").output)
    device.misbehave("dumpsys", "sleep")  # each sample reads /proc and `dumpsys battery` in one round trip
    r, elapsed = _run("device", "profile", "--pid", str(pid), "--interval", "0.5", "--duration", "30",
                      "--timeout", "2")
    line = _one_line_error(r)
    # /proc was read, then dumpsys hung: the bytes before it came, the end did not
    assert line.startswith(f"error: {device.serial}: reading /proc/{pid} and the battery: not finished in 2 s (")
    assert elapsed < 2 + MARGIN_S


@pytest.mark.slow
@pytest.mark.needs_adb
def test_a_sha256sum_that_never_answers_ends_the_push_at_the_deadline(device, tmp_path):
    device.misbehave("sha256sum", "sleep")
    files = _local(tmp_path, "npu/SM8750/det.bin", b"d" * 1000)
    start = time.monotonic()
    with pytest.raises(QnnDeployError) as e:
        adb.connect(timeout=2).push_folder(files, "/data/local/tmp/qnndeploy/demo")
    assert time.monotonic() - start < 2 + MARGIN_S
    assert e.value.exit_code == 1
    assert str(e.value).startswith(f"{device.serial}: hashing files on the phone (sha256sum in "
                                   "/data/local/tmp/qnndeploy/demo.staging): no answer in 2 s")
    assert not device.host_path("/data/local/tmp/qnndeploy/demo").exists()


# --- pushes ----------------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.needs_adb
def test_a_push_the_phone_stops_reading_is_abandoned_after_the_stall_deadline(device, tmp_path):
    target = "/data/local/tmp/qnndeploy/demo"
    data = os.urandom(24 * 1024 * 1024)  # more than the socket buffers between here and the phone hold
    files = _local(tmp_path, "npu/SM8750/det.bin", data)
    device.stall_during_send(after_bytes=1024 * 1024)
    start = time.monotonic()
    with pytest.raises(QnnDeployError) as e:
        adb.connect(timeout=2).push_folder(files, target)
    assert time.monotonic() - start < 2 + MARGIN_S
    message = str(e.value)
    assert e.value.exit_code == 1 and "\n" not in message
    assert message.startswith(f"{device.serial}: pushing npu/SM8750/det.bin: no progress in 2 s (")
    assert "the phone stopped reading, the push was abandoned and the file on the phone is incomplete" in message
    assert message.endswith(f"{target} was not changed (the next run resumes from {target}.staging)")
    assert not device.host_path(target).exists()  # nothing half-written in place
    partial = device.host_path(f"{target}.staging/npu/SM8750/det.bin")
    assert partial.stat().st_size == 1024 * 1024  # the stuck phone kept its partial file, in the staging folder only
    # the phone reads again: the next run finds the partial file by its sha256 and sends it again
    report = adb.connect().push_folder(files, target)
    assert report.sent == ["npu/SM8750/det.bin"]
    assert device.host_path(f"{target}/npu/SM8750/det.bin").read_bytes() == data
    assert not device.host_path(f"{target}.staging").exists()


@pytest.mark.slow
@pytest.mark.needs_adb
def test_a_slow_push_that_keeps_making_progress_is_not_cut(device, tmp_path):
    """The stall deadline is no total deadline: a push that takes several times --timeout completes."""
    data = os.urandom(3 * 1024 * 1024)
    files = _local(tmp_path, "npu/SM8750/det.bin", data)
    device.throttle_send(1024 * 1024)  # 1 MiB/s: the phone sleeps 64 ms per 64 KiB block, at least 3 s in all
    start = time.monotonic()
    report = adb.connect(timeout=1).push_folder(files, "/data/local/tmp/qnndeploy/demo")
    assert time.monotonic() - start >= 3  # longer than the deadline (the phone's own sleeps make it so)
    assert report.sent == ["npu/SM8750/det.bin"]
    assert device.host_path("/data/local/tmp/qnndeploy/demo/npu/SM8750/det.bin").read_bytes() == data


@pytest.mark.needs_adb
def test_a_file_that_changed_since_it_was_checked_is_not_left_on_the_phone(device, tmp_path):
    target = "/data/local/tmp/qnndeploy/demo"
    files = _local(tmp_path, "npu/SM8750/det.bin", b"checked bytes" * 10_000)
    files["npu/SM8750/det.bin"].path.write_bytes(b"other bytes!!" * 10_000)  # changed after its sha256 was taken
    with pytest.raises(QnnDeployError) as e:
        adb.connect().push_folder(files, target)
    assert e.value.exit_code == 1
    assert str(e.value).startswith(f"npu/SM8750/det.bin changed while it was being pushed to {device.serial}: "
                                   "the bytes read hash to ")
    assert not device.host_path(target).exists()
    assert not device.host_path(f"{target}.staging/npu/SM8750/det.bin").exists()


@pytest.mark.needs_adb
def test_a_symlink_is_not_pushed(device, tmp_path):
    (tmp_path / "elsewhere.bin").write_bytes(b"secret")
    files = _local(tmp_path, "npu/SM8750/det.bin", b"secret")
    files["npu/SM8750/det.bin"].path.unlink()
    files["npu/SM8750/det.bin"].path.symlink_to(tmp_path / "elsewhere.bin")
    with pytest.raises(QnnDeployError, match=r"det\.bin is a symlink; a file to push must be a regular file"):
        adb.connect().push_folder(files, "/data/local/tmp/qnndeploy/demo")
    assert not device.host_path("/data/local/tmp/qnndeploy/demo").exists()
    assert not device.host_path("/data/local/tmp/qnndeploy/demo.staging/npu/SM8750/det.bin").exists()

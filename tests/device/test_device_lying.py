"""A lying phone (issue 34, round 4): its onnxruntime_perf_test STAND-IN's figure lines replaced by garbage
(tests/support/fuzz.py's PERF_LIES), its dumpsys thermalservice saying a 5,000-digit status, and hostile --baseline
files, against `device bench` and `device verify --ort-runner` on emulated phones over a real adb server. Each gives a
one-line error or a record that strict JSON parsing accepts, the lie said in a note, never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from qnndeploy.formats import benchrecord
from qnndeploy.qnn import htp
from tests.support import bundles, fuzz
from tests.support.cli import run
from tests.support.device_emulator import ort_perf_test, qnn_net_run
from tests.support.host import require

pytestmark = [pytest.mark.needs_adb, pytest.mark.needs_qnn, pytest.mark.usefixtures("no_sdk")]

pytest_plugins = ["tests.support.device_emulator.fixtures"]

REPO = Path(__file__).resolve().parents[2]  # a process of this checkout's qnndeploy: a FIFO must not hang the test
ONE = ("--graph", "det", "--runs", "3", "--blocks", "1")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    require(htp.available(), "onnxruntime-qnn")
    compiled = bundles.compile_inputs(tmp_path_factory.mktemp("compiled"), targets=("SM8750",))
    return bundles.build(tmp_path_factory.mktemp("bundle"), compiled, runtime="bundled")


def tools(folder: Path, lies: dict[str, str] | None = None) -> tuple[str, ...]:
    folder.mkdir(parents=True, exist_ok=True)
    ort = ort_perf_test.write_launcher(folder / "onnxruntime_perf_test")
    if lies:
        ort = fuzz.lying_perf_test(folder / "lying_perf_test", ort, lies)
    return ("--runner", str(qnn_net_run.write_launcher(folder / "qnn-net-run")), "--ort-runner", str(ort))


def record_of(out: Path, serial: str) -> dict:
    """The record written, parsed as strict JSON (no NaN, no Infinity)."""
    data = fuzz.strict_json((out / benchrecord.record_name(serial, "det")).read_text())
    assert isinstance(data, dict)
    return data


def clean(r) -> None:
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)


@pytest.mark.parametrize("lie", ["p50 1.2.3 s", "requests 400 digits", "requests 5000 digits", "negative latencies",
                                 "subnormal average"])
def test_bench_against_a_lying_cpu_tool_writes_strict_json_and_says_so(device, bundle, tmp_path, lie):
    lines = fuzz.PERF_LIES[lie]
    out = tmp_path / "rec"
    r = run("device", "bench", str(bundle), *ONE, *tools(tmp_path / "tools", lines), "-o", str(out), "--json")
    clean(r)
    assert r.exit_code == 0, r.output
    fuzz.strict_json(r.stdout)
    record = record_of(out, device.serial)
    cpu = record["paths"]["cpu"]
    notes = "\n".join(record["notes"])
    for start in lines if lie != "subnormal average" else ():  # each lie is left out and said, never recorded
        assert f"cpu: a figure the tool printed did not read ({start}" in notes, notes
    if lie == "negative latencies":
        assert [cpu["latency_ms"][q] for q in ("p50", "min", "mean")] == [None, None, None]
    if lie == "subnormal average":  # a number, but NPU / 5e-324 is not finite: the ratios would be Infinity
        assert record["ratios"]["latency_mean"] is None and cpu["throughput_per_s"] is None
        assert "ratio_spread.latency_mean.max: inf: null, not a finite number" in notes, notes
    if lie.startswith("requests"):
        assert cpu["runs"] == 4  # -r 3 and the warm-up, not the tool's word


def test_bench_with_a_5000_digit_thermal_status(device, bundle, tmp_path):
    (device.sandbox.state / "dumpsys-thermalservice").write_text("Thermal Status: " + "9" * 5000 + "\n")
    out = tmp_path / "rec"
    r = run("device", "bench", str(bundle), *ONE, *tools(tmp_path / "tools"), "-o", str(out))
    clean(r)
    assert r.exit_code == 0, r.output
    record = record_of(out, device.serial)
    assert record["conditions"]["thermal_status_start"] is None
    assert any("Thermal Status" in n and "5,000 digits" in n for n in record["notes"]), record["notes"]


def test_a_hostile_baseline_is_refused_in_one_line(device, bundle, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text(fuzz.deep_json())
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    big.write_text('{"record": "qnndeploy-bench", "n": ' + "9" * 5000 + "}")
    for baseline, said in ((deep, "deep"), (fifo, "a FIFO"), (big, "5,000 digits")):
        r = run("device", "bench", str(bundle), *ONE, *tools(tmp_path / "tools"), "--baseline", str(baseline), "-o",
                str(tmp_path / "rec"), process=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert r.returncode == 2, r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith("error: --baseline") and said in r.stderr, r.stderr
        assert not (tmp_path / "rec").exists()


def test_a_baseline_whose_figures_overflow_the_gate_ratio_gives_null_and_a_note(device, bundle, tmp_path):
    code = run("device", "bench", str(bundle), *ONE, *tools(tmp_path / "tools"), "-o", str(tmp_path / "a")).exit_code
    assert code == 0
    first = record_of(tmp_path / "a", device.serial)
    for p in first["paths"].values():  # a subnormal figure: now / was overflows to Infinity
        p["latency_ms"]["mean"] = 5e-324
        p["first_ms"] = 5e-324
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(first))
    r = run("device", "bench", str(bundle), *ONE, *tools(tmp_path / "tools"), "--baseline", str(hostile), "-o",
            str(tmp_path / "b"), "--json")
    clean(r)
    assert r.exit_code == 1, r.output  # regressed on every figure the baseline made tiny
    fuzz.strict_json(r.stdout)
    record = record_of(tmp_path / "b", device.serial)
    ratios = {g["figure"]: g["ratio"] for g in record["gate"]["regressions"]}
    assert ratios["npu.latency_ms.mean"] is None and ratios["cpu.first_ms"] is None, ratios
    assert any(n.startswith("gate.regressions[") and "not a finite number" in n for n in record["notes"])


@pytest.mark.parametrize("lie", ["requests 5000 digits", "p50 1.2.3 s", "negative latencies", "nan and inf"])
def test_verify_with_a_lying_ort_runner_on_the_cpu_path(emulated_devices, bundle, tmp_path, lie):
    emulated_devices("sm8350")  # not in the bundle: the app's CPU path, run with onnxruntime_perf_test -e cpu
    ort = fuzz.lying_perf_test(tmp_path / "lying_perf_test",
                               ort_perf_test.write_launcher(tmp_path / "onnxruntime_perf_test"), fuzz.PERF_LIES[lie])
    r = run("device", "verify", str(bundle), "--ort-runner", str(ort), "--runs", "2", "--json", "-o",
            str(tmp_path / "rec"))
    clean(r)
    assert r.exit_code == 0, r.output
    out = fuzz.strict_json(r.stdout)
    assert isinstance(out, dict)
    graphs = out["devices"][0]["graphs"]
    assert [(g["status"], g["ran_on"]) for g in graphs] == [("ran", "cpu")] * 2, graphs
    if lie in ("negative latencies", "nan and inf"):  # the lying figure read as none, not recorded
        assert all(g["per_inference_s"] is None or g["per_inference_s"] >= 0 for g in graphs), graphs
    for written in (tmp_path / "rec").rglob("*.json"):
        fuzz.strict_json(written.read_text())


def test_ai_hub_figures_that_are_not_finite_non_negative_numbers_are_none():
    from qnndeploy.device.hosted import profile_figures

    out = profile_figures({"execution_summary": {"estimated_inference_time": 10**400, "first_load_time": float("nan"),
                                                 "warm_load_time": -5}})
    assert (out["inference_ms"], out["first_load_ms"], out["warm_load_ms"]) == (None, None, None)  # was OverflowError
    assert profile_figures({"execution_summary": {"estimated_inference_time": 1500}})["inference_ms"] == 1.5

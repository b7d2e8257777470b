"""`qnndeploy device bench` on emulated phones, through the real adb server, with a real bundle (context binaries
compiled by onnxruntime-qnn), the qnn-net-run STAND-IN (NPU path: the host HTP emulator) and the
onnxruntime_perf_test STAND-IN (CPU path: the host's CPU EP). The phone's battery current, voltage and temperatures
are the emulator's STAND-IN (tests/support/device_emulator/power.py): they follow the load by construction, so
these tests assert structure and consistency, never which path is faster."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from qnndeploy.formats import benchrecord
from qnndeploy.qnn import htp
from qnndeploy.report.collect import collect
from tests.support import bundles
from tests.support.cli import run
from tests.support.device_emulator import ort_perf_test, qnn_net_run, qnn_profile_viewer
from tests.support.host import require

pytestmark = [pytest.mark.needs_adb, pytest.mark.needs_qnn, pytest.mark.usefixtures("no_sdk")]

pytest_plugins = ["tests.support.device_emulator.fixtures"]

SCHEMA = json.loads((Path(benchrecord.__file__).parents[1] / "schemas/bench-record.schema.json").read_text())
FAST = ("--graph", "det", "--runs", "5", "--blocks", "2")



@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    require(htp.available(), "onnxruntime-qnn")
    compiled = bundles.compile_inputs(tmp_path_factory.mktemp("compiled"), targets=("SM8750",))
    return bundles.build(tmp_path_factory.mktemp("bundle"), compiled, runtime="bundled")


@pytest.fixture
def tools(tmp_path) -> tuple[str, ...]:
    return ("--runner", str(qnn_net_run.write_launcher(tmp_path / "qnn-net-run")),
            "--ort-runner", str(ort_perf_test.write_launcher(tmp_path / "onnxruntime_perf_test")),
            "--profile-viewer", str(qnn_profile_viewer.write_launcher(tmp_path / "qnn-profile-viewer")))


def bench_json(*args: str) -> tuple[int, list[dict], str]:
    r = run("device", "bench", *args, "--json")
    try:
        data = json.loads(r.stdout)
        assert isinstance(data, list), r.output
        return r.exit_code, data, r.stderr
    except json.JSONDecodeError:
        raise AssertionError(r.output) from None


def check_path(p: dict, runs: int, notes: list[str]) -> None:
    """A path's figures agree with each other: what a user reads off one row must not contradict another."""
    lat = p["latency_ms"]
    assert lat["mean"] > 0 and p["runs"] >= runs
    assert p["throughput_per_s"] == pytest.approx(1000 / lat["mean"], rel=1e-3)
    assert lat["min"] <= lat["mean"] <= lat["max"]
    if lat["p50"] is not None:
        assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert p["first_ms"] > 0 and p["cpu_percent"] > 0
    launch = p["launch"]  # each path's cold and warm start, each measured, a session ready by its first result
    for start in ("cold", "warm"):  # (onnxruntime_perf_test prints its first inference in whole ms: 0 ms happens)
        assert 0 < launch[f"session_{start}_ms"] <= launch[f"first_result_{start}_ms"], launch
    assert benchrecord.LAUNCH_NOTE in notes and benchrecord.STAND_IN_NOTE in notes  # the host's times, said so


def test_bench_two_phones_table_and_json_with_ratios(emulated_devices, bundle, tools, tmp_path, monkeypatch):
    monkeypatch.setenv("QNNDEPLOY_PROGRESS_QUIET_S", "0")  # progress from the first step, however fast the bench
    phones = emulated_devices("sm8750", "sm8750")
    out = tmp_path / "rec"
    code, records, err = bench_json(str(bundle), "--all", *FAST, *tools, "-o", str(out))
    assert code == 0, err
    assert sorted(r["phone"]["serial"] for r in records) == sorted(p.serial for p in phones)
    assert "block 2: NPU" in err  # progress lines on stderr, not a terminal here
    for r in records:
        jsonschema.validate(r, SCHEMA)
        assert json.loads((out / benchrecord.record_name(r["phone"]["serial"], "det")).read_text()) == r
        assert benchrecord.parse(r).to_json() == r  # the strict reader gives back what the writer wrote
        assert (r["settings"]["npu_tool"], r["settings"]["cpu_tool"]) == ("qnn-net-run", "onnxruntime_perf_test -e cpu")
        assert (r["decision"]["provider"], r["decision"]["npu_source"], r["phone"]["soc"]) == \
            ("npu", "prebuilt", "SM8750")
        qairt = json.loads((bundle / "manifest.json").read_text())["qairt"]["version"]  # the installed compiler's
        assert r["bundle"]["qairt"] == qairt and r["settings"]["perf_mode"] == "burst"
        npu, cpu = r["paths"]["npu"], r["paths"]["cpu"]
        check_path(npu, 5, r["notes"])
        check_path(cpu, 10, r["notes"])
        assert cpu["latency_ms"]["p50"] is not None and npu["latency_ms"]["p50"] is not None
        assert npu["runs"] == 2 * 4  # a block of 5 gives the 4 gaps between its 5 outputs
        assert len(cpu["block_p50_ms"]) == len(npu["block_p50_ms"]) == 2
        for key, fig in (("latency_mean", lambda p: p["latency_ms"]["mean"]),
                         ("throughput", lambda p: p["throughput_per_s"]), ("cpu_percent", lambda p: p["cpu_percent"]),
                         ("energy_per_inference", lambda p: p["energy_mj_per_inference"])):
            assert r["ratios"][key] == pytest.approx(fig(npu) / fig(cpu), rel=1e-3)
        assert npu["energy_mj_per_inference"] > 0 and npu["energy_source"] == "current_now x voltage_now"
        assert r["conditions"]["charging"] is False and r["conditions"]["screen_on"] is False
        assert r["conditions"]["temperature_source"] == "skin-msm-therm"
        spread = r["ratio_spread"]["latency_mean"]
        assert spread["min"] <= spread["median"] <= spread["max"] and spread["blocks"] == 2
        assert r["sustained"] == [] and r["sweep"] == [] and r["profile"] is None and r["gate"] is None
        assert any("rtf: null" in n for n in r["notes"]) and npu["rtf"] is None

    read = collect([out])  # what `qnndeploy report` reads of them
    assert not read.skipped and sorted(b.serial for b in read.benches) == sorted(p.serial for p in phones)
    assert all(b.record.ratios["latency_mean"] is not None and b.record.paths["npu"].runs == 8 for b in read.benches)
    page = run("report", str(out), "-o", str(tmp_path / "report.html"))
    assert page.exit_code == 0, page.output
    assert all(p.serial in (tmp_path / "report.html").read_text() for p in phones)

    r = run("device", "bench", str(bundle), "-s", phones[0].serial, *FAST, *tools, "--input-seconds", "1",
            "-o", str(out))
    assert r.exit_code == 0, r.output
    assert f"{phones[0].serial} SM8750 det: NPU qnn-net-run (burst) vs CPU onnxruntime_perf_test -e cpu" in r.stdout
    assert re.search(r"conditions: charging no, screen off, battery 80% -> 80%, [0-9.]+ -> [0-9.]+ °C", r.stdout)
    number = r"[0-9][0-9.e+-]*"
    assert re.search(rf"latency mean ms +{number} +{number} +{number}\n", r.stdout)
    assert re.search(rf"energy mJ/inference +{number} +{number} +{number}\n", r.stdout)
    assert re.search(rf"real-time factor +{number} +{number} *\n", r.stdout)
    assert re.search(r"runs +8 +12 *\n", r.stdout)  # every figure printed with its run count
    for label in ("session cold ms", "session warm ms", "first result cold ms", "first result warm ms"):
        assert re.search(rf"{label} +{number} +{number} *\n", r.stdout), label
    assert "record: " in r.stdout


def test_sustained_run_shows_the_temperature_rising(device, bundle, tools, tmp_path):
    code, [r], _ = bench_json(str(bundle), *FAST, "--blocks", "1", "--duration", "3", *tools, "-o", str(tmp_path))
    assert code == 0
    jsonschema.validate(r, SCHEMA)
    curve = r["sustained"]
    assert len(curve) >= 2 and {p["path"] for p in curve} == {"npu", "cpu"}
    assert [p["t_s"] for p in curve] == sorted(p["t_s"] for p in curve)
    # the stand-in heats while a runner runs, by construction
    assert curve[-1]["temperature_c"] > curve[0]["temperature_c"]
    assert r["conditions"]["temperature_c_end"] > r["conditions"]["temperature_c_start"]
    assert all(p["thermal_status"] is not None for p in curve)
    assert r["settings"]["minutes"] == 0.05 and r["settings"]["blocks"] == len(curve) // 2


def test_perf_mode_sweep(device, bundle, tools, tmp_path):
    code, [r], _ = bench_json(str(bundle), *FAST, "--blocks", "1", "--performance-mode", "burst", "--performance-mode",
                              "power_saver", *tools, "-o", str(tmp_path))
    assert code == 0
    jsonschema.validate(r, SCHEMA)
    assert [s["perf_mode"] for s in r["sweep"]] == ["burst", "power_saver"]
    for s in r["sweep"]:
        assert s["npu"]["runs"] == 4 and s["npu"]["latency_ms"]["mean"] > 0
    assert run("device", "bench", str(bundle), *FAST, "--performance-mode", "warp", *tools).exit_code == 2


def planted(record: dict, factor: float) -> dict:
    """`record` with every gated figure made `factor` times worse (below 1: better). A baseline 1000 times better
    or worse than the run judges it the same way however loaded this machine is."""
    out = json.loads(json.dumps(record))
    for p in out["paths"].values():
        for name in benchrecord.LOWER_IS_BETTER:
            *parents, key = name.split(".")
            holder = p
            for k in parents:
                holder = holder[k]
            if holder[key] is not None:
                holder[key] /= factor
        for name in benchrecord.HIGHER_IS_BETTER:
            p[name] *= factor
    return out


def test_baseline_passes_against_itself_and_fails_on_a_planted_regression(device, bundle, tools, tmp_path):
    one = (*FAST, "--blocks", "1")
    code, [first], _ = bench_json(str(bundle), *one, *tools, "-o", str(tmp_path / "a"))
    assert code == 0
    path = tmp_path / "a" / benchrecord.record_name(device.serial, "det")
    record = benchrecord.read(first)
    assert benchrecord.gate(record, str(path), record, 0.1).passed  # a record against itself: nothing regressed

    # a baseline 1000 times slower on every figure: this run improves on all of them and passes
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(planted(first, 1 / 1000)))
    code, [again], _ = bench_json(str(bundle), *one, *tools, "--baseline", str(slow), "-o", str(tmp_path / "b"))
    assert code == 0 and again["gate"]["passed"] is True and again["gate"]["regressions"] == []
    jsonschema.validate(again, SCHEMA)

    # a baseline 1000 times faster: this run regresses on every timing figure
    fast_record = planted(first, 1000)
    fast = tmp_path / "fast.json"
    fast.write_text(json.dumps(fast_record))
    r = run("device", "bench", str(bundle), *one, *tools, "--baseline", str(fast), "-o", str(tmp_path / "c"))
    assert r.exit_code == 1, r.output
    assert "FAILED" in r.stdout and "regression npu.latency_ms.mean" in r.stdout
    written = json.loads((tmp_path / "c" / benchrecord.record_name(device.serial, "det")).read_text())
    figures = {g["figure"] for g in written["gate"]["regressions"]}
    assert {"npu.latency_ms.mean", "cpu.latency_ms.p50", "npu.throughput_per_s", "cpu.first_ms"} <= figures
    # the first launch too: the NPU's session start (qnn-profile-viewer's Init time) cold and warm, the CPU's cold
    assert "regression npu.launch.session_cold_ms" in r.stdout
    assert {"npu.launch.session_cold_ms", "npu.launch.session_warm_ms", "npu.launch.first_result_warm_ms",
            "cpu.launch.session_cold_ms", "cpu.launch.first_result_cold_ms"} <= figures
    assert all(g["ratio"] > 1.1 or g["figure"].endswith("throughput_per_s") for g in written["gate"]["regressions"])

    # another phone's record is bad input, refused before anything runs
    fast_record["phone"]["serial"] = "another-phone"
    fast.write_text(json.dumps(fast_record))
    r = run("device", "bench", str(bundle), *one, *tools, "--baseline", str(fast), "-o", str(tmp_path / "d"))
    assert not (tmp_path / "d").exists()
    assert r.exit_code == 2 and "phone 'another-phone'" in r.output


def test_charging_gives_no_energy_figure(device, bundle, tools, tmp_path):
    device.set_battery(charging=True)
    code, [r], _ = bench_json(str(bundle), *FAST, "--blocks", "1", *tools, "-o", str(tmp_path))
    assert code == 0
    jsonschema.validate(r, SCHEMA)
    assert r["conditions"]["charging"] is True
    for name in ("npu", "cpu"):
        assert r["paths"][name]["energy_mj_per_inference"] is None and r["paths"][name]["energy_source"] is None
        assert any(n.startswith(f"{name}.energy_mj_per_inference: null, the phone was on external power")
                   for n in r["notes"])
    assert r["ratios"]["energy_per_inference"] is None
    assert r["paths"]["npu"]["latency_ms"]["mean"] > 0 and r["paths"]["cpu"]["latency_ms"]["mean"] > 0


def test_profile_puts_a_per_op_table_in_the_record_and_a_trace_beside_it(emulated_devices, bundle, tools, tmp_path):
    """--profile detailed: the record's profile is the qnn-profile-viewer STAND-IN's reading of the host HTP
    backend's own per-op events for that run; the Chrome trace is written beside the record and named in it."""
    from tests.support.device_emulator.qnn_profile_viewer import write_launcher as write_viewer

    (phone,) = emulated_devices("sm8750")
    out = tmp_path / "rec"
    code, (record,), err = bench_json(str(bundle), *FAST, *tools, "-o", str(out), "--profile", "detailed",
                                      "--profile-viewer", str(write_viewer(tmp_path / "qnn-profile-viewer")))
    assert code == 0, err
    jsonschema.validate(record, SCHEMA)
    assert benchrecord.parse(record).to_json() == record
    profile = record["profile"]
    assert profile["level"] == "detailed" and profile["ops"]
    assert sum(o["share"] for o in profile["ops"]) == pytest.approx(1, abs=0.01)
    assert all(o["where"] == "htp" for o in profile["ops"])
    trace = json.loads((out / profile["trace"]).read_text())
    assert profile["trace"] == benchrecord.record_name(phone.serial, "det").replace(".json", "-trace.json")
    assert {e["ph"] for e in trace["traceEvents"]} >= {"X"}
    # without a viewer there is no profile, nor a session start on the NPU path, and the record says why
    code, (plain,), _ = bench_json(str(bundle), *FAST, *tools[:4], "-o", str(tmp_path / "plain"), "--profile",
                                   "basic")
    assert code == 0 and plain["profile"] is None and any(n.startswith("profile: ") for n in plain["notes"])
    launch = plain["paths"]["npu"]["launch"]
    assert launch["session_cold_ms"] is None and launch["session_warm_ms"] is None
    assert launch["first_result_cold_ms"] > 0 and launch["first_result_warm_ms"] > 0
    assert any(n.startswith("npu.launch.session_*_ms: null, no qnn-profile-viewer") for n in plain["notes"])

"""The fuzz tier: every case of tests/support/fuzz.py run as a user would, one process each, under the invariant that
fuzz.py states. Run alone with `pytest -m fuzz`; it is part of the slow tier."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support import bundles, fuzz

pytest_plugins = ["tests.support.device_emulator.fixtures"]

pytestmark = [pytest.mark.slow, pytest.mark.fuzz, pytest.mark.needs_qnn]


@pytest.fixture(scope="module")
def good_bundle(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("good")
    return bundles.build(root / "bundles", bundles.compile_inputs(root / "inputs", targets=("SM8550", "SM8750"),
                                                                  graphs=("det", "rec"), external=("det",)))


def test_every_hostile_input_is_refused_cleanly(good_bundle, tmp_path):
    cases = fuzz.all_cases(good_bundle)
    assert len(cases) >= 250, len(cases)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda ic: fuzz.run_case(ic[1], tmp_path / str(ic[0])), enumerate(cases)))
    broken = [f"{case.name}: {why}" for case, why in zip(cases, results, strict=True) if why]
    assert broken == [], f"{len(broken)} of {len(cases)} cases broke the invariant:\n" + "\n".join(broken[:80])


# --- report (issue 34): extreme plot figures draw a page; the page never lands inside what it reads ----------------

def test_report_s_hostile_inputs_give_a_page_or_a_one_line_error(good_bundle, tmp_path):
    from tests.report.fuzz_cases import report_cases

    cases = list(report_cases(good_bundle))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda ic: fuzz.run_case(ic[1], tmp_path / str(ic[0])), enumerate(cases)))
    broken = [f"{case.name}: {why}" for case, why in zip(cases, results, strict=True) if why]
    assert broken == [], f"{len(broken)} of {len(cases)} cases broke the invariant:\n" + "\n".join(broken)


# --- a lying phone: device bench and device verify --ort-runner (issue 34) ------------------------------------------

@pytest.fixture(scope="module")
def bench_bundle(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bench")
    return bundles.build(root / "bundle", bundles.compile_inputs(root / "inputs", targets=("SM8750",)),
                         runtime="bundled")


def _lying_run(args: tuple[str, ...], records: Path) -> str | None:
    """None when `qnndeploy ARGS` keeps the invariant against a lying phone, else what broke it: a documented exit
    code, no traceback, stdout and every record written strict JSON, no negative figure recorded."""
    from tests.support.cli import run

    r = run(*args)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        return f"raised {type(r.exception).__name__}: {r.exception}"
    if "Traceback" in r.output:
        return "traceback"
    if r.exit_code not in fuzz.DOCUMENTED_EXITS:
        return f"undocumented exit {r.exit_code}"
    if r.exit_code == 2 and len(r.stderr.strip().splitlines()) != 1:
        return f"bad input but not a one-line error: {r.stderr[:200]!r}"
    texts = [("stdout", r.stdout)] if "--json" in args and r.stdout.strip() else []
    texts += [(p.name, p.read_text()) for p in sorted(records.rglob("*.json"))]
    for name, text in texts:
        try:
            data = fuzz.strict_json(text)
        except ValueError as e:
            return f"{name} is not strict JSON: {str(e)[:100]}"
        negative = [k for k, v in _numbers(data) if v < 0 and ("ms" in k or k.endswith("_s"))]
        if negative:
            return f"{name} records negative times: {negative[:3]}"
    return None


def _numbers(data: object, at: str = "") -> list[tuple[str, float]]:
    if isinstance(data, dict):
        return [x for k, v in data.items() for x in _numbers(v, f"{at}.{k}")]
    if isinstance(data, list):
        return [x for v in data for x in _numbers(v, at)]
    return [(at, float(data))] if isinstance(data, (int, float)) and not isinstance(data, bool) else []


@pytest.mark.needs_adb
@pytest.mark.usefixtures("no_sdk")
def test_a_lying_phone_never_breaks_bench_or_verify(emulated_devices, bench_bundle, tmp_path):
    """Every PERF_LIES case against `device bench` (the CPU path's tool) and `device verify --ort-runner` (the
    CPU fallback's), every THERMAL_LIES status, and hostile --baseline files (deep, a FIFO, 5,000 digits, figures
    whose ratio overflows)."""
    from tests.support.device_emulator import ort_perf_test, qnn_net_run

    (phone,) = emulated_devices("sm8750")
    real = ort_perf_test.write_launcher(tmp_path / "onnxruntime_perf_test")
    npu = ("--runner", str(qnn_net_run.write_launcher(tmp_path / "qnn-net-run")))
    one = ("--graph", "det", "--runs", "3", "--blocks", "1")
    broken: list[str] = []
    for n, (name, lines) in enumerate(fuzz.PERF_LIES.items()):
        lying = fuzz.lying_perf_test(tmp_path / f"lying-{n}", real, lines)
        out = tmp_path / f"bench-{n}"
        why = _lying_run(("device", "bench", str(bench_bundle), *one, *npu, "--ort-runner", str(lying), "-o",
                          str(out), *(("--json",) if n % 2 else ())), out)  # the table and the JSON in turn
        broken += [f"bench, {name}: {why}"] if why else []
    for n, (name, status) in enumerate(fuzz.THERMAL_LIES.items()):
        (phone.sandbox.state / "dumpsys-thermalservice").write_text(f"Thermal Status: {status}\n")
        out = tmp_path / f"thermal-{n}"
        why = _lying_run(("device", "bench", str(bench_bundle), *one, *npu, "--ort-runner", str(real), "-o",
                          str(out)), out)
        broken += [f"bench, thermal status {name}: {why}"] if why else []
    first = tmp_path / "first"
    baselines = {"deep": fuzz.deep_json(), "5000 digits": '{"record": "qnndeploy-bench", "n": ' + "9" * 5000 + "}",
                 "not UTF-8": b"\xff\xfe{}", "empty": ""}
    why = _lying_run(("device", "bench", str(bench_bundle), *one, *npu, "--ort-runner", str(real), "-o", str(first)),
                     first)
    assert why is None, why
    record = json.loads(next(first.glob("*.json")).read_text())
    for p in record["paths"].values():
        p["latency_ms"]["mean"] = p["first_ms"] = 5e-324
    baselines["subnormal figures"] = json.dumps(record)
    record["paths"]["npu"]["latency_ms"]["p50"] = 1e308
    baselines["huge figures"] = json.dumps(record)
    for n, (name, text) in enumerate(baselines.items()):
        path = tmp_path / f"baseline-{n}.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        out = tmp_path / f"gate-{n}"
        why = _lying_run(("device", "bench", str(bench_bundle), *one, *npu, "--ort-runner", str(real), "--baseline",
                          str(path), "-o", str(out)), out)
        broken += [f"bench --baseline {name}: {why}"] if why else []
    # (a FIFO baseline is tests/device/test_device_lying.py's: in process, a hang would hang this test)
    (cpu_phone,) = emulated_devices("sm8350")  # no target in the bundle: verify runs the CPU path, ORT runner
    for n, (name, lines) in enumerate(fuzz.PERF_LIES.items()):
        lying = fuzz.lying_perf_test(tmp_path / f"vlying-{n}", real, lines)
        out = tmp_path / f"verify-{n}"
        why = _lying_run(("device", "verify", str(bench_bundle), "-s", cpu_phone.serial, "--ort-runner", str(lying),
                          "--runs", "2", "--json", "-o", str(out)), out)
        broken += [f"verify, {name}: {why}"] if why else []
    assert broken == [], "\n".join(broken)

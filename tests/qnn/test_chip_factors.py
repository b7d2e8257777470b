"""The chip factors (qnndeploy/data/chip_factors.json, written by benchmarks/estimate_vs_aihub.py --write) against
their sources: refitted from the QCS9100 estimates the file stores and AI Hub's measurements in the installed
qai-hub-models wheel (tests/reference-requirements.txt, --no-deps: only its perf.yaml and devices files are read),
they must come out as stored, so a new wheel or a changed table fails here instead of drifting -- fp16 and each
quantized precision the file calibrates (w8a16, w8a8: QDQ graphs); stored estimates re-made with the installed QAIRT
must be the stored cycles (the cost model is deterministic), a quantized one too; and phone_estimate scales a QCS9100
estimate by the factor of the graph's precision, giving nothing for a chip or precision without one."""

from __future__ import annotations

import importlib
import json
import math
import sys
from dataclasses import replace
from typing import Any

import pytest

from qnndeploy.base import socs
from qnndeploy.qnn import hextimate, htp
from tests.support import REPO, aihub_perf
from tests.support.host import require

DATA = json.loads((REPO / "qnndeploy" / hextimate.FACTORS).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def package():
    found = aihub_perf.package_dir()
    require(found is not None, "qai-hub-models (pip install --no-deps -r tests/reference-requirements.txt)")
    return found


QUANTIZED = DATA.get("quantized") or {}
PRECISIONS = ["fp16", *QUANTIZED]


def _fit_of(precision: str) -> dict:
    """The part of the file that holds one precision's fit: source, estimates, factors."""
    if precision == "fp16":
        return {"source": DATA["source"], "estimates": DATA["estimates"], "factors": DATA["factors"]}
    entry = QUANTIZED[precision]
    return {"source": entry["source"], "estimates": entry["estimates"], "factors": entry["factors"]}


def _estimate_ms(model: str, precision: str = "fp16") -> float:
    return _fit_of(precision)["estimates"]["models"][model]["cycles"] / DATA["estimates"]["clock_mhz"] / 1000


def test_the_file_says_where_its_figures_come_from():
    assert DATA["made_by"] == "benchmarks/estimate_vs_aihub.py --write"
    assert DATA["source"]["wheel"].startswith("qai-hub-models ")
    assert DATA["source"]["precision"] == "fp16"
    assert set(DATA["precisions_not_calibrated"]) | set(QUANTIZED) == {"w8a16", "w8a8"}
    assert not set(DATA["precisions_not_calibrated"]) & set(QUANTIZED)
    assert hextimate.calibrated() == ("fp16", *QUANTIZED)
    for precision, entry in QUANTIZED.items():
        assert entry["estimates"]["precision"] == precision and len(entry["fitted"]) == 10
        assert entry["source"]["perf_yaml_precision"] == precision and entry["source"]["runtime"] == "onnx"
        assert "QDQ" in entry["estimates"]["how"] and "fp16=False" in entry["estimates"]["how"]
        assert entry["factors"] and all(row["models"] >= 2 for row in entry["factors"])
    assert DATA["estimates"]["soc"] == hextimate.CALIBRATED_ON
    assert len(DATA["fitted"]) == 10  # a date
    clock, _ = hextimate.clock(DATA["estimates"]["qairt"], hextimate.CALIBRATED_ON)
    assert clock == DATA["estimates"]["clock_mhz"]
    for row in DATA["factors"]:
        socs.find(row["soc"])  # a catalog SoC
        assert row["models"] >= 2


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_factors_refit_from_the_installed_wheel_as_stored(package, precision):
    """The stored estimates against the wheel's measurements at that precision: the same models per chip, the same
    factor and leave-one-out figures. A new qai-hub-models release that changes a measurement fails here: run the
    benchmark with --write."""
    assert f"qai-hub-models {aihub_perf.version()}" == DATA["source"]["wheel"], "another qai-hub-models is installed"
    part = _fit_of(precision)
    runtime = part["source"]["runtime"]
    by_soc: dict[str, list[tuple[str, float, float]]] = {}
    for model in part["estimates"]["models"]:
        rows = aihub_perf.measured(package, model, part["source"]["perf_yaml_precision"])
        for soc, row in aihub_perf.per_soc(rows, runtime).items():
            by_soc.setdefault(soc, []).append((model, row.ms, _estimate_ms(model, precision)))
    for stored in part["factors"]:
        refit = hextimate.fit(sorted(by_soc[stored["soc"]]))
        assert len(refit.loo) == stored["models"], stored["soc"]
        assert refit.factor == pytest.approx(stored["factor"], abs=1e-4), stored["soc"]
        assert refit.within == pytest.approx(stored["within"], abs=1e-4), stored["soc"]
        assert refit.loo_median == pytest.approx(stored["loo_median"], abs=1e-4), stored["soc"]
        worst = stored["loo_worst"]  # two models' ratios are r and 1/r: either is the worst, as rounding falls
        far = max(refit.loo_worst, 1 / refit.loo_worst)
        assert far == pytest.approx(max(worst, 1 / worst), abs=1e-3), stored["soc"]
        assert refit.spearman == pytest.approx(stored["spearman"], abs=1e-4), stored["soc"]
        device = aihub_perf.per_soc(aihub_perf.measured(package, next(iter(refit.loo)),
                                                        part["source"]["perf_yaml_precision"]), runtime)[stored["soc"]]
        assert (device.device, device.matched) == (stored["device"], stored["matched"])
        factor = hextimate.chip_factors(precision)[stored["soc"]]
        assert (factor.factor, factor.within, factor.precision) == (stored["factor"], stored["within"], precision)
    fitted = {row["soc"] for row in part["factors"]}
    assert {soc for soc, rows in by_soc.items() if len(rows) >= 2} == fitted


def test_the_fit_is_the_geometric_mean_with_each_model_left_out():
    rows = [("a", 2.0, 1.0), ("b", 8.0, 2.0), ("c", 3.0, 3.0)]  # ratios 2, 4, 1
    f = hextimate.fit(rows)
    assert f.factor == pytest.approx(2.0)  # (2*4*1)^(1/3)
    assert f.loo["a"] == pytest.approx(2 / 2)  # 2 / sqrt(4*1)
    assert f.loo["b"] == pytest.approx(4 / math.sqrt(2))
    assert f.loo["c"] == pytest.approx(1 / math.sqrt(8))
    assert f.within == pytest.approx(1 / 3)  # only a within 1.5x
    assert f.loo_worst in (f.loo["b"], f.loo["c"])  # both sqrt(8) from 1, one each way
    assert f.spearman == pytest.approx(0.5)  # ranks 1,3,2 vs 1,2,3
    assert hextimate.spearman([1, 2, 2, 3], [1, 2, 2, 3]) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        hextimate.fit(rows[:1])


def _figures(cycles: int, lower: int, upper: int) -> hextimate.Figures:
    mhz = DATA["estimates"]["clock_mhz"]
    return hextimate.Figures(cycles, lower, upper, 0, 0, 0, None, mhz, "test", cycles / mhz / 1000,
                             lower / mhz / 1000, upper / mhz / 1000)


def test_a_factor_gives_numbers_only_with_a_fit_that_meets_the_target():
    fp16 = hextimate.chip_factors()
    assert fp16 and all(f.calibrated for f in fp16.values())  # every fp16 chip meets issue 36's target
    f = next(iter(fp16.values()))
    assert not replace(f, within=0.89).calibrated
    assert not replace(f, models=hextimate.MIN_MODELS - 1).calibrated
    assert replace(f, within=hextimate.TARGET, models=hextimate.MIN_MODELS).calibrated
    for precision in QUANTIZED:  # each chip's factor says whether it gives numbers, as the data's fit says
        for row in QUANTIZED[precision]["factors"]:
            good = row["within"] >= hextimate.TARGET and row["models"] >= hextimate.MIN_MODELS
            assert hextimate.chip_factors(precision)[row["soc"]].calibrated == good


def test_phone_estimate_scales_by_the_factor_and_gives_nothing_without_one():
    row = DATA["factors"][0]
    figures = _figures(1_497_600, 1_300_000, 1_700_000)  # 1 ms at the clock
    phone = hextimate.phone_estimate(figures, socs.find(row["soc"]))
    assert phone is not None
    assert phone.soc == row["soc"]
    assert phone.ms == pytest.approx(row["factor"], rel=1e-5)
    assert phone.ms_lower < phone.ms < phone.ms_upper
    assert phone.qcs9100_ms == pytest.approx(1.0)
    assert phone.factor.models == row["models"] and phone.factor.device == row["device"]
    assert DATA["source"]["wheel"] in phone.factor.source and DATA["fitted"] in phone.factor.source
    fitted = {r["soc"] for r in DATA["factors"]}
    without = next(s.model for s in socs.catalog() if s.model not in fitted)
    assert hextimate.phone_estimate(figures, without) is None
    for precision in ("w8a16", "w8a8"):  # a quantized graph is scaled by its own precision's factor, or gets none
        quantized = hextimate.phone_estimate(figures, row["soc"], precision=precision)
        own = {r["soc"]: r["factor"] for r in (QUANTIZED.get(precision) or {}).get("factors", [])}
        factor = hextimate.chip_factors(precision).get(row["soc"])
        if factor is not None and factor.calibrated:
            assert quantized is not None and quantized.ms == pytest.approx(own[row["soc"]], rel=1e-5)
            assert quantized.factor.precision == precision
        else:  # no factor, or one whose fit is too poor to give numbers
            assert quantized is None
    assert hextimate.phone_estimate(figures, row["soc"], precision="w4a16") is None
    assert hextimate.chip_factors("w4a16") == {}
    no_clock = hextimate.Figures(1, 1, 1, 0, 0, 0, None, None, "none", None, None, None)
    assert hextimate.phone_estimate(no_clock, row["soc"]) is None


def _bench() -> Any:
    """The benchmark's module: its rebuild and quantization, exactly."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        bench = importlib.import_module("estimate_vs_aihub")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    try:
        bench._torchvision_models()
    except ImportError:
        require(False, "torchvision (pip install -e '.[test]')")
    return bench


@pytest.mark.slow
@pytest.mark.needs_qnn
@pytest.mark.parametrize("model", ["squeezenet1_1", "mnasnet05"])
def test_a_stored_estimate_is_what_the_installed_qairt_gives(model, tmp_path):
    """Golden: the model rebuilt and estimated again gives the stored cycles (random weights are seeded, and the
    cost model does not read them). Only for the QAIRT the file's estimates were made with."""
    require(htp.available(), "onnxruntime-qnn")
    if htp.qairt_version() != DATA["estimates"]["qairt"]:
        pytest.skip(f"the stored estimates are QAIRT {DATA['estimates']['qairt']}'s, this is {htp.qairt_version()}")
    bench = _bench()
    path = tmp_path / f"{model}.onnx"
    bench.export(model, bench.MODELS[model], path)
    est = hextimate.estimate(path, socs.find(hextimate.CALIBRATED_ON))
    assert est.figures is not None, est.reason
    stored = DATA["estimates"]["models"][model]
    assert (est.figures.cycles, est.figures.lower, est.figures.upper) == (
        stored["cycles"], stored["lower"], stored["upper"])


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_a_stored_quantized_estimate_is_what_the_installed_qairt_gives(tmp_path):
    """Golden, quantized: the smallest model of a quantized fit rebuilt, quantized to QDQ as the benchmark does and
    estimated again (fp16 off) gives the stored cycles: the QDQ graph the HTP times does not depend on the random
    calibration values."""
    require(bool(QUANTIZED), "a quantized fit in data/chip_factors.json")
    require(htp.available(), "onnxruntime-qnn")
    if htp.qairt_version() != DATA["estimates"]["qairt"]:
        pytest.skip(f"the stored estimates are QAIRT {DATA['estimates']['qairt']}'s, this is {htp.qairt_version()}")
    bench = _bench()
    precision, entry = next(iter(QUANTIZED.items()))
    stored_models = entry["estimates"]["models"]
    model = min(stored_models, key=lambda m: stored_models[m]["cycles"])
    fp32, qdq = tmp_path / f"{model}.onnx", tmp_path / f"{model}.{precision}.onnx"
    bench.export(model, bench.MODELS[model], fp32)
    bench.quantize(fp32, precision, qdq, bench.MODELS[model].shape)
    est = hextimate.estimate(qdq, socs.find(hextimate.CALIBRATED_ON), fp16=False)
    assert est.figures is not None, est.reason
    stored = stored_models[model]
    assert (est.figures.cycles, est.figures.lower, est.figures.upper) == (
        stored["cycles"], stored["lower"], stored["upper"])

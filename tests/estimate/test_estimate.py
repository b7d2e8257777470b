"""`qnndeploy estimate` (qnndeploy/estimate.py, cli/estimate.py): the QCS9100 estimate scaled per chip by
data/chip_factors.json, a SoC without a factor with no number and its reason, SA8255 (which the backend models) with
its own unscaled estimate; then the command on a real graph with the wheel's HTP backend (MLP's golden cycles,
tests/qnn/test_hextimate.py), its JSON, and its one-line errors; a QDQ model told by its zero points, and a w8a16
build and QDQ model estimated at their precision with its own factors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from qnndeploy.base import socs
from qnndeploy.estimate import estimate_models, qdq_precision
from qnndeploy.qnn import hextimate, htp
from tests.support import synth_models
from tests.support.cli import parsed, run
from tests.support.host import require

MLP_CYCLES = 2314  # tests/qnn/test_hextimate.py's golden MLP, every QAIRT release listed there


def _figures(cycles: int) -> hextimate.Figures:
    mhz = 1497.6
    return hextimate.Figures(cycles, cycles - 100, cycles + 100, 10, 20, 1, None, mhz, "test", cycles / mhz / 1000,
                             (cycles - 100) / mhz / 1000, (cycles + 100) / mhz / 1000)


def test_each_soc_gets_the_scaled_estimate_or_no_number_with_the_reason(tmp_path, monkeypatch):
    asked: list[str] = []

    def fake(model: Path, soc: socs.Soc, **_: object) -> hextimate.Estimate:
        asked.append(soc.model)
        return hextimate.Estimate(str(model), soc.model, "2.50.40", _figures(1_497_600), "", 1, 0.1)

    monkeypatch.setattr(hextimate, "estimate", fake)
    factors = hextimate.chip_factors()
    result = estimate_models([tmp_path / "m.onnx"], ["SM8750", "SM8635", "SA8255"])
    (m,) = result.models
    rows = {r.soc: r for r in m.socs}
    assert rows["SM8750"].ms == pytest.approx(factors["SM8750"].factor, rel=1e-5)  # 1 ms on QCS9100
    assert rows["SM8750"].factor == factors["SM8750"].factor and "leave-one-out" in rows["SM8750"].fit
    assert rows["SM8635"].ms is None and "no chip factor for SM8635" in rows["SM8635"].reason
    assert rows["SA8255"].ms == pytest.approx(1.0) and rows["SA8255"].factor is None
    assert asked == ["QCS9100", "SA8255"]  # the reference, then SA8255's own
    assert m.warnings and "1 ops have no cost" in m.warnings[0]
    assert "not measured" in result.not_claimed
    every = estimate_models([tmp_path / "m.onnx"])  # default: every SoC with a factor
    assert {r.soc for r in every.models[0].socs} == set(factors)


def test_no_reference_estimate_is_no_number_anywhere(tmp_path, monkeypatch):
    monkeypatch.setattr(hextimate, "estimate", lambda model, soc, **_: hextimate.Estimate(
        str(model), soc.model, "2.50.40", None, "the HTP backend says: nothing", 0, 0.1))
    (m,) = estimate_models([tmp_path / "m.onnx"], ["SM8650"]).models
    assert [(r.soc, r.ms, r.reason) for r in m.socs] == [("SM8650", None, "the HTP backend says: nothing")]


def test_an_unknown_soc_is_bad_input_before_any_compile(tmp_path):
    onnx.save(synth_models.static_mlp(), tmp_path / "m.onnx")
    r = run("estimate", tmp_path / "m.onnx", "--soc", "SM9999")
    assert r.exit_code == 2 and "unknown SoC 'SM9999'" in r.stderr


@pytest.mark.needs_qnn
def test_the_command_prints_each_socs_estimate_with_its_factor(tmp_path):
    require(htp.available(), "onnxruntime-qnn")
    model = tmp_path / "mlp.onnx"
    onnx.save(synth_models.static_mlp(), model)
    r = run("estimate", model, "--soc", "SM8650,SM8635")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert f"{MLP_CYCLES:,} cycles" in lines[0] and lines[0].startswith(f"{model}: QCS9100 ")
    sm8650 = next(line for line in lines if line.startswith("SM8650 "))
    expected = MLP_CYCLES / 1497.6 / 1000 * hextimate.chip_factors()["SM8650"].factor
    assert f"{expected:.3f}" in sm8650
    assert "no chip factor for SM8635" in next(line for line in lines if line.startswith("SM8635 "))
    assert any(line.startswith("estimated, not measured") for line in lines)
    assert lines[-1].startswith("next: qnndeploy compile ")
    j = parsed(run("estimate", model, "--soc", "SM8650", "--json").stdout)
    assert j["models"][0]["reference"]["figures"]["cycles"] == MLP_CYCLES
    assert j["models"][0]["socs"][0]["soc"] == "SM8650" and j["models"][0]["socs"][0]["ms"] > 0


@pytest.mark.needs_qnn
def test_a_missing_model_and_a_dynamic_one_are_one_line_errors(tmp_path):
    require(htp.available(), "onnxruntime-qnn")
    r = run("estimate", tmp_path / "none.onnx")
    assert r.exit_code == 2 and "no such ONNX file" in r.stderr
    dynamic = tmp_path / "dyn.onnx"
    onnx.save(synth_models.static_mlp(batch="N"), dynamic)
    r = run("estimate", dynamic, "--json")
    assert r.exit_code in (1, 2) and len(r.stderr.strip().splitlines()) == 1
    assert parsed(r.stdout)["exit_code"] == r.exit_code


@pytest.mark.needs_qnn
def test_a_build_folder_is_estimated_per_graph_for_the_socs_it_was_compiled_for(tmp_path):
    require(htp.available(), "onnxruntime-qnn")
    model = tmp_path / "mlp.onnx"
    onnx.save(synth_models.static_mlp(), model)
    build = tmp_path / "build"
    done = run("compile", model, "--soc", "SM8650,SM8475", "-o", build)
    assert done.exit_code == 0, done.output
    j = parsed(run("estimate", build, "--json").stdout)
    (m,) = j["models"]
    assert m["model"] == "mlp" and m["reference"]["figures"]["cycles"] == MLP_CYCLES
    assert [(r["soc"], r["ms"] is None) for r in m["socs"]] == [("SM8475", True), ("SM8650", False)]
    r = run("estimate", build)
    assert r.exit_code == 0 and r.stdout.splitlines()[-1] == f"next: qnndeploy validate {build}"
    model.unlink()
    r = run("estimate", build)
    assert r.exit_code == 2 and "which is not there now" in r.stderr


def _calibration(folder: Path) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        np.savez(folder / f"{i}.npz", x=rng.uniform(-1, 1, (1, 16)).astype(np.float32))
    return folder


def test_a_qdq_model_is_told_by_its_zero_points(tmp_path):
    """A float graph is fp16 (None); a QDQ one is w<weight bits>a<activation bits>, as onnxruntime's quantizer
    writes it: compile's w8a16 (model/quantize.py) and the QNN config with 8-bit activations."""
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    from qnndeploy.model.quantize import qdq

    model = tmp_path / "mlp.onnx"
    onnx.save(synth_models.static_mlp(), model)
    assert qdq_precision(model) is None
    rng = np.random.default_rng(0)
    samples = [{"x": rng.uniform(-1, 1, (1, 16)).astype(np.float32)} for _ in range(2)]
    assert qdq_precision(qdq(model, samples, tmp_path / "w8a16.onnx")) == "w8a16"

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.it = iter(samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    config = get_qnn_qdq_config(str(model), Reader(), activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8)
    quantize(str(model), str(tmp_path / "w8a8.onnx"), config)
    assert qdq_precision(tmp_path / "w8a8.onnx") == "w8a8"


@pytest.mark.needs_qnn
def test_a_w8a16_build_and_a_qdq_model_are_estimated_at_their_precision(tmp_path, monkeypatch):
    """A build compiled w8a16 is estimated on its source quantized as compile quantizes it (fp16 off), scaled by
    the w8a16 factors: a number where the chip has one, none where it has not; a QDQ model file the same, as it is."""
    require(htp.available(), "onnxruntime-qnn")
    model = tmp_path / "mlp.onnx"
    onnx.save(synth_models.static_mlp(), model)
    build = tmp_path / "build"
    done = run("compile", model, "--soc", "SM8650,SM8475", "--precision", "w8a16", "--calib",
               _calibration(tmp_path / "calib"), "-o", build)
    assert done.exit_code == 0, done.output
    factors = hextimate.chip_factors("w8a16")
    j = parsed(run("estimate", build, "--json").stdout)
    (m,) = j["models"]
    assert m["precision"] == "w8a16" and m["reference"]["figures"]["cycles"] > 0
    assert m["source"].startswith("w8a16: fitted ")
    for row in m["socs"]:
        soc = row["soc"]
        if soc in factors and factors[soc].calibrated:
            assert row["ms"] == pytest.approx(m["reference"]["figures"]["ms"] * factors[soc].factor, abs=2e-6)
            assert row["fit"].startswith("w8a16 factor: ")
        elif soc in factors:  # fitted, but too poorly for a number: the fit is said
            assert row["ms"] is None and row["reason"].startswith("w8a16 factor: ")
            assert "too poor a fit for a number" in row["reason"]
        else:
            assert row["ms"] is None and f"no chip factor for {soc} at w8a16" in row["reason"]
    record = json.loads((build / "mlp" / "SM8650" / "estimate.json").read_text())
    assert record["precision"] == "w8a16" and record["ms"] == {r["soc"]: r for r in m["socs"]}["SM8650"]["ms"]

    # a w8a16 factor whose fit meets the target gives the number, scaled from the w8a16 estimate
    good = {soc: replace(f, within=1.0, models=max(f.models, hextimate.MIN_MODELS)) for soc, f in factors.items()}
    real = hextimate.chip_factors
    monkeypatch.setattr(hextimate, "chip_factors", lambda precision="fp16": good if precision == "w8a16"
                        else real(precision))
    (m,) = parsed(run("estimate", build, "--soc", "SM8650", "--json").stdout)["models"]
    (row,) = m["socs"]
    assert row["ms"] == pytest.approx(m["reference"]["figures"]["ms"] * factors["SM8650"].factor, abs=2e-6)
    assert row["factor"] == factors["SM8650"].factor
    assert row["fit"].startswith(f"w8a16 factor: {good['SM8650'].models} models")
    monkeypatch.undo()

    from qnndeploy.model.quantize import qdq  # the same QDQ graph, given as a model file

    rng = np.random.default_rng(0)
    qdq_model = qdq(model, [{"x": rng.uniform(-1, 1, (1, 16)).astype(np.float32)}], tmp_path / "mlp_qdq.onnx")
    r = run("estimate", qdq_model, "--soc", "SM8650")
    assert r.exit_code == 0, r.output
    assert "w8a16 factor: " in r.stdout and "factors: w8a16: fitted " in r.stdout
    (q,) = parsed(run("estimate", qdq_model, "--soc", "SM8650", "--json").stdout)["models"]
    assert q["precision"] == "w8a16" and q["reference"]["figures"]["cycles"] == m["reference"]["figures"]["cycles"]

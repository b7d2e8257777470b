"""The HTP backend's host-side performance model (qnndeploy/qnn/hextimate.py), read from QNN's profiling: the
estimate of fixed graphs pinned per QAIRT release (every release of data/runtime.json, each in a child under its
toolchain), and a phone SoC's "no estimate" with the backend's own reason."""

from __future__ import annotations

import math
from pathlib import Path

import onnx
import pytest

from qnndeploy.base import socs
from qnndeploy.base.errors import CheckFailed
from qnndeploy.qnn import hextimate, htp, toolchain
from tests.support import hextimate_golden as golden
from tests.support import synth_models

# The estimates of two fixed graphs for QCS9100 (and SA8255, the same), per QAIRT release (tests/support/
# hextimate_golden.py's graphs): synth_models.static_mlp() (MatMul 16x8 + Add + Relu) and layers(4, 512, 64) (four
# 512-wide MatMul+Relu layers on 64 rows), fp16. The graphs are deterministic and so is the backend's model, so a
# change here is a change of the cost model or of how qnndeploy reads it. Measured here on 2026-12-05 with
# onnxruntime-qnn 2.3.0-2.7.0. The installed release (whose row must exist) is checked in this process, with SA8255
# too; every release of data/runtime.json in a child under its toolchain. Fields: cycles, lower, upper, fill bytes,
# spill bytes, ops without a cost.
MLP = (2314, 2189, 2477, 6144, 2048, 0)
GOLDEN = {
    "2.47.0": {"mlp": MLP, "layers": (226788, 200999, 257146, 2230272, 131072, 0)},
    "2.48.40": {"mlp": MLP, "layers": (226788, 200999, 257146, 2230272, 131072, 0)},
    "2.49.40": {"mlp": MLP, "layers": (230187, 205269, 259472, 2230272, 131072, 0)},
    "2.50.40": {"mlp": MLP, "layers": (230187, 205269, 259472, 2230272, 131072, 0)},
    "2.51.0": {"mlp": MLP, "layers": (230187, 205269, 259472, 2230272, 131072, 0)},
}


def _numbers(f: hextimate.Figures) -> tuple[int, ...]:
    return (f.cycles, f.lower, f.upper, f.fill_bytes, f.spill_bytes, f.ops_without_cost)


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


# --- parsing the profiling CSV (no QNN needed) -----------------------------------------------------------------

CSV = """Msg Timestamp,Message,Time,Unit of Measurement,Timing Source,Event Level,Event Identifier
0,FINALIZE,9741,US,BACKEND,ROOT,QNN (finalize) time
0,UNKNOWN,290,US,BACKEND,SUB-EVENT,Graph Preparation Initializing
0,BACKEND,0,US,BACKEND,ROOT,Performance Estimates
0,BACKEND,0,US,BACKEND,SUB-EVENT,Mode
0,BACKEND,879047,CYCLES,BACKEND,SUB-EVENT,Simulated (Accelerator exec cycles)
0,BACKEND,766218,CYCLES,BACKEND,SUB-EVENT,Simulated (Accelerator exec cycles (lower estimate))
0,BACKEND,1016092,CYCLES,BACKEND,SUB-EVENT,Simulated (Accelerator exec cycles (upper estimate))
0,BACKEND,586,US,BACKEND,SUB-EVENT,Simulated (Accelerator exec time us)
0,BACKEND,17041408,BYTES,BACKEND,SUB-EVENT,Input Fill
0,BACKEND,5,BYTES,BACKEND,SUB-EVENT,Intermediate Fill
0,BACKEND,7,BYTES,BACKEND,SUB-EVENT,Intermediate Spill
0,BACKEND,0,BYTES,BACKEND,SUB-EVENT,Inter HTP Fill
0,BACKEND,0,BYTES,BACKEND,SUB-EVENT,Inter HTP Spill
0,BACKEND,262144,BYTES,BACKEND,SUB-EVENT,Output Spill
0,BACKEND,2,US,BACKEND,SUB-EVENT,Missing Ops (Number of Ops with no Costs associated)
"""


def test_the_profiling_csv_gives_one_event_per_graph_and_its_times_at_the_data_clock() -> None:
    events = hextimate.parse(CSV)
    assert len(events) == 1 and "Graph Preparation Initializing" not in events[0]
    f = hextimate.figures(events[0], "2.50.40", "QCS9100")
    assert (f.cycles, f.lower, f.upper, f.backend_us) == (879047, 766218, 1016092, 586)
    assert (f.fill_bytes, f.spill_bytes, f.ops_without_cost) == (17041408 + 5, 262144 + 7, 2)
    assert f.clock_mhz == 1497.6 and "data/hextimate.json" in f.clock_source
    assert f.ms == pytest.approx(879047 / 1497.6 / 1000, abs=1e-6)
    assert f.ms is not None and f.ms_lower is not None and f.ms_upper is not None
    assert f.ms_lower < f.ms < f.ms_upper
    # A release with no clock row gets cycles, no time, and says so.
    other = hextimate.figures(events[0], "2.0.0", "QCS9100")
    assert other.ms is None and other.clock_mhz is None and "no simulated clock" in other.clock_source
    # QAIRT 2.47-2.49 write no microseconds: the figures say None, not 0.
    older = hextimate.parse("\n".join(line for line in CSV.splitlines() if "exec time us" not in line))
    assert hextimate.figures(older[0], "2.49.40", "QCS9100").backend_us is None


# --- the library and the backend -------------------------------------------------------------------------------

@pytest.mark.needs_qnn
@pytest.mark.slow
def test_golden_cycles_of_fixed_graphs_on_qcs9100(tmp_path: Path) -> None:
    qairt = htp.qairt_version()
    if qairt not in GOLDEN:
        pytest.fail(f"no golden estimate for QAIRT {qairt}: measure the two graphs on QCS9100 and add them to GOLDEN")
    mlp = _save(synth_models.static_mlp(), tmp_path / "mlp.onnx")
    est = hextimate.estimate(mlp, socs.find("QCS9100"))
    assert est.figures is not None, est.reason
    f = est.figures
    assert _numbers(f) == GOLDEN[qairt]["mlp"]
    assert (est.soc, est.qairt, est.graphs, est.reason) == ("QCS9100", qairt, 1, "")
    assert f.lower < f.cycles < f.upper
    assert f.clock_mhz is not None and f.ms is not None and f.ms_lower is not None and f.ms_upper is not None
    assert f.ms_lower < f.ms < f.ms_upper and f.ms == pytest.approx(f.cycles / f.clock_mhz / 1000, abs=1e-6)
    layers = hextimate.estimate(_save(golden.layers(4, 512, 64), tmp_path / "layers.onnx"), socs.find("QCS9100"))
    assert layers.figures is not None and _numbers(layers.figures) == GOLDEN[qairt]["layers"]
    # SA8255, the other v73 SoC the model covers, gives the same estimate.
    same = hextimate.estimate(mlp, socs.find("SA8255")).figures
    assert same is not None and _numbers(same) == _numbers(f)


@pytest.mark.needs_qnn
@pytest.mark.slow
def test_every_qairt_release_qnndeploy_supports_gives_its_golden_estimate(
        toolchains: list[toolchain.Toolchain], tmp_path: Path) -> None:
    """Issue 36: each release's own backend (in a child under that toolchain) must give the release's golden figures
    through QNN profiling: a release whose cost model or profiling event changed fails here in its own words."""
    assert [tc.qairt for tc in toolchains] == sorted(GOLDEN, key=lambda q: tuple(map(int, q.split(".")))), (
        "a release of data/runtime.json without a GOLDEN row (or a row without its release): measure it")
    got = {tc.qairt: golden.run(tc, tmp_path / tc.qairt) for tc in toolchains}
    for tc in toolchains:
        a = got[tc.qairt]
        assert a.qairt == tc.qairt, a  # the child imported that toolchain's onnxruntime-qnn
    assert {q: a.graphs for q, a in got.items()} == GOLDEN


@pytest.mark.needs_qnn
@pytest.mark.slow
def test_a_larger_graph_has_more_cycles_and_the_backends_microseconds_agree_with_the_clock(tmp_path: Path) -> None:
    small = hextimate.estimate(_save(synth_models.static_mlp(), tmp_path / "mlp.onnx"), socs.find("QCS9100"))
    large = hextimate.estimate(_save(golden.layers(4, 512, 64), tmp_path / "layers.onnx"), socs.find("QCS9100"))
    assert small.figures is not None and large.figures is not None
    assert large.figures.cycles > 10 * small.figures.cycles
    assert large.figures.fill_bytes > 4 * 512 * 512 * 2  # the fp16 weights are read in
    # The backend prints whole microseconds truncated from cycles / clock: the data's clock must give the same.
    f = large.figures
    assert f.backend_us is not None and f.backend_us >= 50 and f.clock_mhz is not None, f"QAIRT {large.qairt}"
    assert math.floor(f.cycles / f.clock_mhz) == f.backend_us


@pytest.mark.needs_qnn
@pytest.mark.slow
def test_a_phone_soc_gets_no_estimate_and_the_backends_reason(tmp_path: Path) -> None:
    model = _save(synth_models.static_mlp(), tmp_path / "mlp.onnx")
    est = hextimate.estimate(model, socs.find("SM8750"))
    assert est.figures is None and est.graphs == 0
    assert est.reason == "the HTP backend says: Performance Estimates unsupported on soc SM8750"


@pytest.mark.needs_qnn
@pytest.mark.slow
def test_a_graph_the_htp_does_not_take_whole_is_refused_not_estimated_in_part(tmp_path: Path) -> None:
    model = _save(synth_models.unsupported_op(), tmp_path / "det.onnx")
    with pytest.raises(CheckFailed, match=r"does not take the whole graph for QCS9100.*qnndeploy check"):
        hextimate.estimate(model, socs.find("QCS9100"))

"""First-launch figures without a phone: qnn-profile-viewer's printed Init time read as the real viewer prints it,
the gate on the session start and first result (cold and warm), and records older than those figures."""

from __future__ import annotations

import copy
import json

from qnndeploy.device import opprofile
from qnndeploy.formats import benchrecord
from tests.report.bench_fixture import bench_record

# qnn-profile-viewer's summary of a --profiling_level basic log, in the layout of the published sample
# (device/opprofile.py names it): a heading, sections each with a rule or a graph line, NetRun per phase
PRINTED = """Qnn Init/Prepare/Finalize/De-Init/Execute/Lib-Load Statistics:
------------------------------------------------------------

Init Stats:
-----------
    NetRun:  331158 us

Compose Graphs Stats:
---------------------
    NetRun:  74748 us

De-Init Stats:
--------------
    NetRun:  15810 us
    Backend (RPC (deinit) time): 1224 us

Execute Stats (Average):
------------------------
Total Inference Time:
---------------------
Graph 0 (model):
    NetRun:  2952 us
    Backend (Number of HVX threads used): 4 count
"""


def test_the_session_start_is_the_init_sections_netrun_line():
    assert opprofile.init_ms(PRINTED) == (331.158, None)
    # only the Init section's line: a summary without one has no session start, and says so
    without = PRINTED.replace("Init Stats:\n-----------\n    NetRun:  331158 us\n", "")
    assert opprofile.init_ms(without).value is None
    assert opprofile.init_ms(without).problem == "qnn-profile-viewer printed no 'Init Stats' NetRun line"
    assert opprofile.init_ms(PRINTED.replace("331158", "33.1.158")).value is None
    assert "Init Stats NetRun" in str(opprofile.init_ms(PRINTED.replace("331158", "-5")).problem)
    assert opprofile.init_ms("").value is None


def _with_launch(record: dict, session_cold: float) -> dict:
    out = copy.deepcopy(record)
    for path in out["paths"].values():
        path["launch"] = {"session_cold_ms": session_cold, "session_warm_ms": 40.0, "first_result_cold_ms": 600.0,
                          "first_result_warm_ms": 500.0}
    return out


def test_the_gate_fails_on_a_planted_session_start_regression_only():
    now = benchrecord.read(_with_launch(bench_record(), 100.0))
    assert benchrecord.gate(now, "same.json", now, 0.1).passed  # equal records pass
    quicker = benchrecord.read(_with_launch(bench_record(), 10.0))  # a baseline whose session started 10x sooner
    gate = benchrecord.gate(quicker, "base.json", now, 0.1)
    assert not gate.passed
    assert [(r.figure, r.was, r.now, r.ratio) for r in gate.regressions] == [
        ("npu.launch.session_cold_ms", 10.0, 100.0, 10.0), ("cpu.launch.session_cold_ms", 10.0, 100.0, 10.0)]
    # within the threshold is no regression
    assert benchrecord.gate(benchrecord.read(_with_launch(bench_record(), 95.0)), "b.json", now, 0.1).passed


def test_a_record_older_than_the_launch_figures_still_reads_and_gates():
    old = bench_record()
    for path in old["paths"].values():
        path.pop("launch", None)
    read = benchrecord.read(json.loads(json.dumps(old)))
    assert read.paths["npu"].launch == benchrecord.Launch()  # none measured
    now = benchrecord.read(_with_launch(bench_record(), 100.0))
    assert benchrecord.gate(read, "old.json", now, 0.1).passed  # nothing to compare the new figures with
    garbage = _with_launch(bench_record(), 100.0)
    garbage["paths"]["npu"]["launch"] = {"session_cold_ms": "fast", "session_warm_ms": float("nan")}
    assert benchrecord.read(garbage).paths["npu"].launch == benchrecord.Launch()

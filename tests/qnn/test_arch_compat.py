"""data/arch_compat.json is a measurement, not a belief: measured again here with the same script and the same
onnxruntime-qnn, it must give the same matrix (a new wheel that answers otherwise fails this test, and the data file
gets a new row)."""

from __future__ import annotations

import json
from importlib import metadata, resources

from qnndeploy.qnn import htp
from tests.support import arch_compat
from tests.support.host import require


def test_the_recorded_arch_matrix_is_what_the_host_emulator_does():
    require(htp.available(), "onnxruntime-qnn")
    data = json.loads(resources.files("qnndeploy").joinpath("data/arch_compat.json").read_text())
    row = next((r for r in data["measured"] if r["qairt"] == htp.qairt_version()
                and r["onnxruntime_qnn"] == metadata.version("onnxruntime-qnn")), None)
    assert row is not None, "no row for this onnxruntime-qnn: run python -m tests.support.arch_compat and add one"
    assert row["socs"] == arch_compat.SOCS
    assert arch_compat.measure() == row["loads"]
    # what the decision's refusal to reuse binaries across arches rests on: an older configured arch accepts a newer
    # binary here, which a phone's HTP cannot run
    assert row["loads"]["v79"]["v68"] is True and row["loads"]["v81"]["v79"] is False

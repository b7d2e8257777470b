"""Closed sets are enums whose values are the strings qnndeploy has always written: a record is read into them, and
a record with a value qnndeploy never writes is refused in one line, not carried along as an unknown string."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qnndeploy.base.kinds import BackendName, Precision
from qnndeploy.formats.records import RecordStatus, read_build
from tests.support.cli import run


def _record(build: Path, **changed: object) -> Path:
    record = {"record": "qnndeploy-compile", "version": 1, "graph": "g", "soc": "SM8750", "soc_id": 69,
              "dsp_arch": "v79", "backend": "ort", "qairt_version": "2.51.0", "precision": "fp16", "status": "ok",
              "options": {}, "input": {"path": str(build / "g.onnx"), "sha256": "0" * 64}, "outputs": [],
              "cache_key": None, **changed}
    path = build / "g" / "SM8750" / "compile.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    return path


def test_a_record_is_read_into_its_closed_sets(tmp_path):
    _record(tmp_path, precision="w8a16", backend="qairt")
    (rec,) = read_build(tmp_path)
    assert (rec.precision, rec.backend, rec.status) == (Precision.W8A16, BackendName.QAIRT, RecordStatus.OK)
    assert json.dumps([rec.precision, rec.status]) == '["w8a16", "ok"]'  # written as the strings they always were


@pytest.mark.parametrize("changed", [{"status": "done"}, {"precision": "w4a4"}, {"backend": "tflite"},
                                     {"soc_id": None, "status": None, "options": None}])
def test_a_record_qnndeploy_never_writes_is_bad_input_in_one_line(tmp_path, changed):
    path = _record(tmp_path, **changed)
    if changed.get("options", {}) is None:  # a record of ours missing its fields
        data = json.loads(path.read_text())
        path.write_text(json.dumps({k: v for k, v in data.items() if v is not None}))
    r = run("validate", tmp_path)
    assert r.exit_code == 2 and r.stderr == f"error: {path}: not a qnndeploy compile record\n", r.output

"""qnndeploy.compat over data/runtime.json: the oldest runtime that loads a bundle's binaries, pins, validated sets."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from qnndeploy import compat
from qnndeploy.errors import QnnDeployError


def test_every_row_of_the_data_file_has_a_source():
    data = json.loads(resources.files("qnndeploy").joinpath("data/runtime.json").read_text())
    sourced = [row for kind in ("rules", "context_blobs", "validated_sets") for row in data[kind]]
    sourced += list(data["aars"].values())
    assert len(sourced) >= 10
    for row in sourced:
        assert row["source"]["url"].startswith("https://"), row
        assert len(row["source"]["says"]) > 20, row
    assert "unverified" not in json.dumps(data).lower()


@pytest.mark.parametrize(("qairt", "floor"), [("2.51.0", "2.51.0"), ("2.49.40", "2.49.0"), ("2.49.0", "2.49.0"),
                                              ("2.48.40", "2.48.0"), ("2.45.1", "2.45.0")])
def test_min_runtime_for_a_qairt_build(qairt, floor):
    assert compat.min_runtime_for_qairt(qairt) == floor


def test_min_runtime_for_a_context_blob_version():
    """For the reader of context binaries (libQnnSystem reports the blob version): 4.0 came with QAIRT 2.49."""
    assert compat.min_runtime_for_blob("4.0") == "2.49.0"
    assert compat.min_runtime_for_blob("3.3") == "2.48.0"
    assert compat.min_runtime_for_blob("4.1") is None  # no source says: the caller falls back on the QAIRT version
    with pytest.raises(QnnDeployError):
        compat.min_runtime_for_blob("four")


def test_an_old_pin_is_refused_with_both_versions_the_reason_and_its_source():
    why = compat.pin_problem("2.48.0", "2.51.0", "2.51.0")
    assert why is not None and why.startswith("qnn-runtime 2.48.0 is older than 2.51.0")
    assert "QAIRT 2.49 moved the HTP context blob to 4.0" in why and "docs.qualcomm.com" in why
    assert compat.pin_problem("2.51.0", "2.51.0", "2.51.0") is None
    assert compat.pin_problem("2.52.0", "2.51.0", "2.51.0") is None
    assert compat.satisfies("2.49.40", "2.49.0") and not compat.satisfies("2.49.0", "2.49.40")
    assert compat.satisfies("2.10.0", "2.9.0")  # numeric, not string order


def test_pin_warnings():
    assert any("no validated ONNX Runtime set" in w for w in compat.pin_warnings("2.51.0", "2.51.0"))
    assert compat.pin_warnings("2.49.0", "2.49.40") == []  # Qualcomm's 2.5.0 set
    crossing = compat.pin_warnings("2.49.0", "2.45.0")
    assert len(crossing) == 1 and "reads HTP context blob 4.0" in crossing[0]


def test_validated_sets_that_satisfy_a_minimum():
    assert [(s.aar, s.aar_version) for s in compat.validated_sets("2.49.0")] == [("qualcomm", "2.5.0")]
    assert compat.validated_sets("2.51.0") == []
    assert compat.validated_sets("2.49.0", "microsoft") == []
    newest_first = compat.validated_sets("2.40.0", "microsoft")
    assert [s.aar_version for s in newest_first] == ["1.26.0"]
    q = compat.validated_sets("2.45.0", "qualcomm")
    assert [s.aar_version for s in q] == ["2.5.0", "2.4.0", "2.3.0"]
    assert q[0].describe() == ("com.qualcomm.qti:onnxruntime-android-qnn:2.5.0 + "
                               "com.microsoft.onnxruntime:onnxruntime-android:1.26.0 + qnn-runtime 2.49.0")
    with pytest.raises(QnnDeployError, match="unknown ONNX Runtime AAR"):
        compat.validated_sets("2.45.0", "google")


def test_whether_a_set_is_validated():
    assert compat.is_validated("qualcomm", "2.4.0", "1.24.3", "2.48.40")
    assert not compat.is_validated("qualcomm", "2.4.0", "1.24.3", "2.48.0")  # Maven's 2.48.0 is not the listed one
    assert compat.is_validated("microsoft", "1.26.0", None, "2.42.0")
    assert not compat.is_validated("microsoft", "1.29.0", None, "2.51.0")

"""The verdict is what the app reads, on the real onnxruntime-qnn: a classifier whose scores fail the tensor metrics
but whose every label is the same passes validate, bundles without an --accept, and bundle verify (which runs the
binary again) agrees; asked for its tensors, validate fails it."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from qnndeploy.qnn import htp
from tests.support import synth_models
from tests.support.cli import run
from tests.support.host import require

pytestmark = [pytest.mark.needs_qnn]


def test_a_classifier_is_judged_by_its_labels_everywhere(tmp_path: Path) -> None:
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    onnx.save(synth_models.offset_log_softmax(), tmp_path / "cls.onnx")
    assert run("compile", tmp_path / "cls.onnx", "--soc", "SM8650", "-o", tmp_path / "build").exit_code == 0
    result = run("validate", tmp_path / "build", "--random", "4", "--json")
    assert result.exit_code == 0, result.output
    (target,) = json.loads(result.stdout)["targets"]
    assert target["task"]["kind"] == "classify" and target["task"]["figures"]["top1_agreement"] == 1.0
    assert not target["outputs"][0]["passed"] and target["outputs"][0]["snr_db"] < 20  # evidence, not the verdict
    shown = run("validate", tmp_path / "build", "--random", "4").output
    assert "decides the verdict for logprobs (logprobs is a Softmax over one row of classes)" in shown

    built = run("bundle", "build", "--from-build", tmp_path / "build", "--name", "cls", "--version", "1",
                "-o", tmp_path / "out")
    assert built.exit_code == 0, built.output
    verified = run("bundle", "verify", tmp_path / "out" / "cls-1", "--json")
    assert verified.exit_code == 0, verified.output

    tensors = run("validate", tmp_path / "build", "--random", "4", "--task", "tensor", "--json")
    assert tensors.exit_code == 1 and json.loads(tensors.stdout)["targets"][0]["status"] == "failed"
    looser = run("validate", tmp_path / "build", "--min-top1", "0.5")
    assert looser.exit_code == 2 and "--reason" in looser.output

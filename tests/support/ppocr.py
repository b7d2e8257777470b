"""The real public models the tests use: PP-OCR det/rec/cls from the PyPI package rapidocr-onnxruntime (Apache-2.0)."""

from __future__ import annotations

from pathlib import Path

from .host import require

FILES = {
    "det": "ch_PP-OCRv4_det_infer.onnx",
    "rec": "ch_PP-OCRv4_rec_infer.onnx",
    "cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx",
}
# The fixed shapes the NPU needs (the sizes RapidOCR feeds); the packaged models have dynamic dims.
STATIC_SHAPES = {"det": [1, 3, 640, 640], "rec": [1, 3, 48, 320], "cls": [1, 3, 48, 192]}


def model_path(name: str) -> Path:
    try:
        import rapidocr_onnxruntime
    except ImportError:
        require(False, "rapidocr-onnxruntime (the PP-OCR models)")
    return Path(rapidocr_onnxruntime.__file__).parent / "models" / FILES[name]


def static_ppocr(name: str, folder: Path, shape: list[int] | None = None) -> Path:
    """The PP-OCR model with its input fixed to `shape` (default: STATIC_SHAPES), made by `prepare`."""
    from qnndeploy.prepare import PrepareOptions, prepare_model

    out = folder / f"{name}.onnx"
    prepare_model(model_path(name), out, PrepareOptions(shapes={"x": shape or STATIC_SHAPES[name]}))
    return out

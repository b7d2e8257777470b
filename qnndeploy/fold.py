"""The folding tools prepare tries in turn, each from one ONNX file to another: onnxsim, onnxslim, then ONNX
Runtime's own basic-level offline optimization.

No one tool folds every real model: onnxsim stops on graphs it cannot sort ("Nodes in a graph must be
topologically sorted"), onnxslim on others, and ONNX Runtime folds what it can run. Each tool here raises
FoldError with its one-line reason; prepare decides which result to keep.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path

from qnndeploy import htp
from qnndeploy.errors import first_line


class FoldError(Exception):
    """A folding tool failed or is missing; str() is its one-line reason."""


def _onnxsim(src: Path, dst: Path, external: bool) -> None:
    try:
        import onnxsim
    except ImportError:
        raise FoldError("not installed (pip install onnxsim)") from None
    if external:
        raise FoldError("skipped: it cannot write models over 2 GB")
    try:
        _, ok = onnxsim.simplify(str(src), output_path=str(dst))
    except Exception as e:  # onnxsim raises many types, from Python and from its C++ core
        raise FoldError(first_line(e)) from None
    if not ok:
        raise FoldError("its own check of the result failed")


def _onnxslim(src: Path, dst: Path, external: bool) -> None:
    try:
        import onnxslim
    except ImportError:
        raise FoldError("not installed (pip install onnxslim)") from None
    try:
        onnxslim.slim(str(src), str(dst), save_as_external_data=external)
    except Exception as e:  # onnxslim raises whatever its passes raise
        raise FoldError(first_line(e)) from None


def _onnxruntime(src: Path, dst: Path, external: bool) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # ONNX ops only: portable
    options.optimized_model_filepath = str(dst)
    if external:
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                         dst.name + ".data")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    try:
        ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's exception types are not exported
        raise FoldError(first_line(e)) from None


TOOLS: dict[str, Callable[[Path, Path, bool], None]] = {
    "onnxsim": _onnxsim,
    "onnxslim": _onnxslim,
    "onnxruntime": _onnxruntime,
}


def fold(tool: str, src: Path, dst: Path, external: bool) -> None:
    """Write `src` folded by `tool` to `dst` (weights in dst.data when `external`). The tools print tables and
    banners on stdout: only the CLI prints, so they are silenced."""
    with htp.quiet_native_stdout(), contextlib.redirect_stdout(io.StringIO()):
        TOOLS[tool](src, dst, external)
    if not dst.is_file():
        raise FoldError("it wrote no model")

"""The host QNN HTP backend from the onnxruntime-qnn wheel: compiler and emulator, shared by check, compile, validate."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.errors import EXIT_MISSING_TOOL, QnnDeployError

if TYPE_CHECKING:
    import onnxruntime as ort

    from qnndeploy.socs import Soc

EP_NAME = "QNNExecutionProvider"


def available() -> bool:
    try:
        import onnxruntime_qnn  # noqa: F401
    except ImportError:
        return False
    return True


def _require():
    try:
        import onnxruntime_qnn
    except ImportError:
        raise QnnDeployError(
            "onnxruntime-qnn is not installed: pip install onnxruntime-qnn (Linux x86-64 only); "
            "it holds the QNN HTP compiler and emulator", EXIT_MISSING_TOOL) from None
    return onnxruntime_qnn


def qairt_version() -> str:
    """The QAIRT version the wheel's QNN libraries come from, e.g. '2.51.0'."""
    return _require().build_and_package_info.qnn_version


@cache
def _devices() -> tuple:
    import onnxruntime as ort

    qnn = _require()
    with quiet_native_stdout():
        ort.register_execution_provider_library(EP_NAME, qnn.get_library_path())
        devices = tuple(d for d in ort.get_ep_devices() if d.ep_name == EP_NAME)
    if not devices:
        raise QnnDeployError("onnxruntime-qnn is installed but offers no QNN device", EXIT_MISSING_TOOL)
    return devices


def session_options(soc: Soc, *, fp16: bool = True, context_path: Path | None = None,
                    cpu_fallback: bool = False, log_level: int = 3) -> ort.SessionOptions:
    """Options for an HTP session for one SoC.

    With `context_path`, creating the session compiles the model and writes the EPContext model there
    (embed mode 0: a `<stem>_qnn.bin` context binary beside it). Without it, a session runs on the emulator.
    CPU fallback is off by default so that a node the HTP cannot run is an error, not a silent slowdown.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = log_level
    if not cpu_fallback:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if context_path is not None:
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_embed_mode", "0")
        so.add_session_config_entry("ep.context_file_path", str(context_path))
    options = {"backend_type": "htp", "htp_arch": str(soc.arch_number), "soc_model": str(soc.soc_id)}
    if fp16:
        options["enable_htp_fp16_precision"] = "1"
    so.add_provider_for_devices(list(_devices()), options)
    return so


@contextmanager
def quiet_native_stdout() -> Iterator[None]:
    """The QNN libraries print a banner ("# LIBNATIVE: No alternate configuration…") on the process's stdout when a
    session first loads them: drop it, so that --json output parses and errors stay one line. QNN's real messages go
    through onnxruntime's logger on stderr. The banner goes through C stdio's buffer, flushed before stdout returns.
    """
    import ctypes

    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    try:
        yield
    finally:
        ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)

"""qnndeploy: ship ONNX models on the Qualcomm NPU, one checked step at a time."""

import os as _os

__version__ = "0.1.0"

# ONNX Runtime's Linux builds start 1DS telemetry when the library loads: it writes a device id and an SQLite event
# store under $XDG_CACHE_HOME (~/.cache)/Microsoft/DeveloperTools/.onnxruntime/ and leaves $TMPDIR/.ses. This
# variable, read at load, turns it off; it is set before any onnxruntime import (they all happen inside functions),
# and the compile workers inherit it. A value the user set is kept.
_os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

"""The names of the formats qnndeploy writes and reads: the bundle and its artifact kinds. Shared by the stages
that make them, the bundle reader and the on-device decision, so each lives in one place below them all."""

from collections.abc import Mapping
from typing import Any

FORMAT = "qnndeploy-bundle"
FORMAT_VERSION = 3  # what `bundle` writes; every version from 1 up to it is read (v2 added external data,
# v3 context binaries shared by several graphs: an artifact with "graphs" instead of "graph")
SHARED_SINCE = 3  # the format version that added context binaries shared by several graphs
CONTEXT_BINARY = "qnn-context-binary"  # artifact formats: what QNN itself and sherpa-onnx load,
EPCONTEXT = "ort-epcontext"  # what ONNX Runtime's QNN EP loads (an .onnx wrapping a context binary)
ONNX = "onnx"  # a CPU fallback model,
EXTERNAL_DATA = "onnx-external-data"  # and a weights file it names (models over 2 GB must keep weights outside)
MANIFEST = "manifest.json"
SPLIT_RECORD = "qnndeploy-split"  # OUT.split.json of `prepare --split-at`, which `bundle --split` reads
# the QNN EP's htp_performance_mode values (onnxruntime-qnn docs): what a bundle may ask the glue to set
PERFORMANCE_MODES = ("burst", "balanced", "default", "high_performance", "high_power_saver", "low_balanced",
                     "low_power_saver", "power_saver", "extreme_power_saver", "sustained_high_performance")
MAVEN_RUNTIME = "com.qualcomm.qti:qnn-runtime"
# a target's "accepted_on": where the app runs a target whose failed validation the bundle accepted (bundle --accept)
ACCEPT_ON = ("npu", "cpu")


def artifact_graphs(artifact: Mapping[str, Any]) -> list[str]:
    """The graphs a manifest artifact serves: its "graph", or the "graphs" of a shared context binary (format 3)."""
    return list(artifact.get("graphs") or [artifact.get("graph")])

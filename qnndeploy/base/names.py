"""The names of the formats qnndeploy writes and reads: the bundle and its artifact kinds. Shared by the stages
that make them, the bundle reader and the on-device decision, so each lives in one place below them all."""

import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

FORMAT = "qnndeploy-bundle"
FORMAT_VERSION = 8  # what `bundle` writes; every version from 1 up to it is read (v2 added external data,
# v3 context binaries shared by several graphs: an artifact with "graphs" instead of "graph", v4 "on_device",
# v5 "loop": an encoder-decoder's decode loop and its tokenizer, v6 "licences", required: each Qualcomm file's origin
# and the licence texts that came with it, v7 "generation": a decoder LLM's prompt and decode graphs in parts, its KV
# cache and loop, v8 a generation's "npu_dtype": its NPU graphs' KV cache in uint8)
SHARED_SINCE = 3  # the format version that added context binaries shared by several graphs
ON_DEVICE_SINCE = 4  # the format version that added "on_device": what the app compiles on SoCs without a target
LOOP_SINCE = 5  # the format version that added "loop": the decode loop the app runs over an encoder and a decoder
GENERATION_SINCE = 7  # the format version that added "generation": a decoder's parts, the loop the app runs over them
KV8_SINCE = 8  # the format version that added a generation cache's "npu_dtype": uint8 in the NPU graphs' I/O
LICENCES_DIR = "licences"  # the bundle folder of the licence and notice files: licences/<origin>/...
LICENCES_SINCE = 6  # the format version that made "licences" required: where each Qualcomm file came from
CONTEXT_BINARY = "qnn-context-binary"  # artifact formats: what QNN itself and sherpa-onnx load,
EPCONTEXT = "ort-epcontext"  # what ONNX Runtime's QNN EP loads (an .onnx wrapping a context binary)
ONNX = "onnx"  # a CPU fallback model,
EXTERNAL_DATA = "onnx-external-data"  # and a weights file it names (models over 2 GB must keep weights outside)
MANIFEST = "manifest.json"
APP_ASSETS = "qnndeploy"  # the bundle's folder in the app's assets (scaffold, CPU packs): QnnRuntime.ASSETS
SPLIT_RECORD = "qnndeploy-split"  # OUT.split.json of `prepare --split-at`, which `bundle --split` reads
# The records the device commands and bundle build write, which `report` reads: their "record" (or "kind") value
DEVICE_RECORD = "qnndeploy-device"  # device verify's record (device/verify.py write_record)
ON_DEVICE_RECORD = "qnndeploy-on-device-validation"  # a bundle's records/<graph>-on-device-<arch>.json ("kind")
BENCH_RECORD = "qnndeploy-bench"  # device bench's bench-<serial>-<graph>.json (schemas/bench-record.schema.json)
# the QNN EP's htp_performance_mode values (onnxruntime-qnn docs): what a bundle may ask the glue to set
PERFORMANCE_MODES = ("burst", "balanced", "default", "high_performance", "high_power_saver", "low_balanced",
                     "low_power_saver", "power_saver", "extreme_power_saver", "sustained_high_performance")
MAVEN_RUNTIME = "com.qualcomm.qti:qnn-runtime"
# a target's "accepted_on": where the app runs a target whose failed validation the bundle accepted (bundle --accept)
ACCEPT_ON = ("npu", "cpu")


# check's advice names a prepared model X.npu.onnx beside X.onnx; the graph it compiles to is still X
PREPARED_SUFFIX = ".npu"


def graph_name(model: str) -> str:
    """The graph a model file compiles to, when no NAME= gives it: the file's stem without the PREPARED_SUFFIX
    that check's advice adds (det.npu.onnx is graph det), so that the name which reaches build folders, bundle files
    and the app's Kotlin is the model's own."""
    stem = PurePath(model).stem
    while stem.endswith(PREPARED_SUFFIX) and len(stem) > len(PREPARED_SUFFIX):
        stem = stem.removesuffix(PREPARED_SUFFIX)
    return stem


# What a file given where a folder or another kind of file belongs most likely is, by its suffix: the one-line
# error of a wrong file type names it (exit 2).
_KINDS = {".onnx": "an ONNX model", ".bin": "a QNN context binary", ".json": "a JSON file",
          ".data": "an ONNX external data file", ".so": "a shared library", ".zip": "a .zip archive",
          ".gz": "a .tar.gz archive", ".tgz": "a .tar.gz archive", ".npz": "NumPy samples", ".npy": "NumPy samples",
          ".wav": "an audio file", ".png": "an image", ".jpg": "an image", ".jpeg": "an image"}


def file_kind(path: str) -> str:
    """'an ONNX model', 'a QNN context binary'..., or 'a file'."""
    return _KINDS.get(PurePath(path).suffix.lower(), "a file")


def artifact_graphs(artifact: Mapping[str, Any]) -> list[str]:
    """The graphs a manifest artifact serves: its "graph", or the "graphs" of a shared context binary (format 3)."""
    return list(artifact.get("graphs") or [artifact.get("graph")])


# A bundle's file names become asset names, jniLibs entries and text in generated Gradle and Kotlin: each path
# segment is a portable file name (POSIX's portable character set), starting with a letter, digit or '_'.
_PORTABLE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
NAME_MAX_BYTES = 255  # the file-system limit of one name


def path_problem(path: str) -> str | None:
    """Why a bundle file path is not portable, or None (the schema checks the rest: relative, no '..')."""
    for segment in path.split("/"):
        if not _PORTABLE.fullmatch(segment):
            shown = segment.encode("unicode_escape").decode("ascii")
            return (f"'{shown}' is not a portable file name: bundle files are named with letters, digits, '.', '_' "
                    "and '-' (starting with a letter, digit or '_'), as asset and library names must be")
        if len(segment.encode()) > NAME_MAX_BYTES:
            return f"a path segment is {len(segment.encode())} bytes, more than the {NAME_MAX_BYTES} of a file name"
    return None

"""The bundle manifest: format constants, reading, and schema validation (schemas/manifest.schema.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from qnndeploy.errors import QnnDeployError

FORMAT = "qnndeploy-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MAVEN_RUNTIME = "com.qualcomm.qti:qnn-runtime"

@cache
def schema() -> dict:
    return json.loads(resources.files("qnndeploy").joinpath("schemas/manifest.schema.json").read_text())


def schema_errors(data: object) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}" for e in errors]


def read_manifest(bundle: Path) -> dict:
    """Parse manifest.json and check its format and version; schema validation is separate (see load_manifest)."""
    path = bundle / MANIFEST
    if not path.is_file():
        raise QnnDeployError(f"{bundle} is not a bundle: it has no {MANIFEST}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise QnnDeployError(f"{path} is not readable JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise QnnDeployError(f"{path} is not a qnndeploy bundle manifest (format must be '{FORMAT}')")
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise QnnDeployError(f"{path} has format_version {version!r}; this qnndeploy reads version {FORMAT_VERSION}"
                             + ("; upgrade qnndeploy" if isinstance(version, int) and version > FORMAT_VERSION else ""))
    return data


def load_manifest(bundle: Path) -> dict:
    """A manifest that is safe to use: right format, right version, valid against the schema."""
    data = read_manifest(bundle)
    errors = schema_errors(data)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise QnnDeployError(f"{bundle / MANIFEST} fails the schema: {errors[0]}{more}")
    return data


def file_entries(manifest: dict) -> list[tuple[str, dict]]:
    """Every file the manifest lists, with what it is: 'cpu', 'npu:<SoC>', 'lib' or 'record'."""
    entries = [("cpu", a) for a in manifest["cpu"]]
    entries += [(f"npu:{t['soc']}", a) for t in manifest["targets"] for a in t["artifacts"]]
    if manifest["runtime"]["mode"] == "bundled":
        entries += [("lib", lib) for lib in manifest["runtime"]["libs"]]
    entries += [("record", r) for r in manifest["records"]]
    return entries


@dataclass
class Signature:
    inputs: list[dict]  # {"name", "dtype", "shape"} as in the manifest's graphs
    outputs: list[dict]
    external_data: bool


def graph_signature(path: Path) -> Signature:
    """The inputs and outputs of an ONNX model (CPU fallback or EPContext wrapper), read without its weights."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # onnx raises DecodeError, ValueError, OSError... for a file that is not ONNX
        raise QnnDeployError(f"{path} is not a readable ONNX model: {str(e).splitlines()[0]}") from None
    if not model.graph.output:
        raise QnnDeployError(f"{path} is not a readable ONNX model: it has no graph outputs (empty or damaged file)")
    init = {t.name for t in model.graph.initializer}

    def tensors(values) -> list[dict]:
        out = []
        for v in values:
            if v.name in init:
                continue
            t = v.type.tensor_type
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else "unknown"
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]
            out.append({"name": v.name, "dtype": dtype, "shape": shape})
        return out

    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    return Signature(tensors(model.graph.input), tensors(model.graph.output), external)

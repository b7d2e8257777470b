"""The bundle manifest: reading it and validating it against schemas/manifest.schema.json."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from qnndeploy.base.errors import QnnDeployError, first_line
from qnndeploy.base.fileio import JSON, read_limited
from qnndeploy.base.names import FORMAT, FORMAT_VERSION, MANIFEST
from qnndeploy.model.onnxio import external_locations, load_model, tensor_info

if TYPE_CHECKING:
    import onnx


@cache
def schema() -> JSON:
    data: JSON = json.loads(resources.files("qnndeploy").joinpath("schemas/manifest.schema.json").read_text())
    return data


def schema_errors(data: object) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}" for e in errors]


# Limits of the manifest reader: a hostile manifest is refused in one line, before it costs memory or recursion.
MAX_MANIFEST_BYTES = 16 << 20  # a 200-target bundle's manifest is about 200 KB
MAX_JSON_DEPTH = 64  # nested arrays and objects; a manifest needs 6
MAX_INT_DIGITS = 100  # sizes of 64 GiB have 11 digits; Python refuses int() of over 4,300 digits with a ValueError

_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEP = [0] * 256
_DEPTH_STEP[ord("[")] = _DEPTH_STEP[ord("{")] = 1
_DEPTH_STEP[ord("]")] = _DEPTH_STEP[ord("}")] = -1


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text, counted without recursion (strings skipped)."""
    brackets = _STRINGS.sub(b"", data).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def parse_json(data: bytes, path: Path) -> Any:
    """JSON text parsed within the limits above: each refusal is one QnnDeployError naming the file and the limit."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise QnnDeployError(f"{path} is not valid UTF-8 (byte {e.start}): a manifest is UTF-8 JSON") from None
    depth = json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise QnnDeployError(f"{path} nests arrays/objects {depth:,} deep, over the limit of {MAX_JSON_DEPTH}")

    def parse_int(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise QnnDeployError(f"{path} has an integer of {len(digits.lstrip('-')):,} digits, over the limit of "
                                 f"{MAX_INT_DIGITS}")
        return int(digits)

    try:
        value = json.loads(text, parse_int=parse_int)
        json.dumps(value, ensure_ascii=False).encode("utf-8")  # lone surrogates from \ud800-style escapes
    except UnicodeEncodeError as e:
        raise QnnDeployError(f"{path} has a string with a lone surrogate ({e.object[e.start:e.end]!a}): "
                             "strings must be valid Unicode") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise QnnDeployError(f"{path} is not readable JSON: {first_line(e)}") from None
    return value


def verified_bytes(bundle: Path, manifest: JSON) -> bytes:
    """manifest.json's bytes, read once, when they still parse to `manifest` (the one verify checked): what a
    command publishes as the manifest, and hashes for a plan, is then the verified manifest."""
    path = bundle / MANIFEST
    raw = read_limited(path, MAX_MANIFEST_BYTES, "bundle manifest")
    try:
        same = parse_json(raw, path) == manifest
    except QnnDeployError:  # not JSON any more
        same = False
    if not same:
        raise QnnDeployError(f"{path} changed since it was verified; nothing was published from it")
    return raw


def read_manifest(bundle: Path) -> JSON:
    """Parse manifest.json and check its format and version; schema validation is separate (see load_manifest).
    The file must be a regular file within the limits above."""
    path = bundle / MANIFEST
    if not os.path.lexists(path):
        raise QnnDeployError(f"{bundle} is not a bundle: it has no {MANIFEST}")
    data = parse_json(read_limited(path, MAX_MANIFEST_BYTES, "bundle manifest"), path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise QnnDeployError(f"{path} is not a qnndeploy bundle manifest (format must be '{FORMAT}')")
    version = data.get("format_version")
    if type(version) is not int or not 1 <= version <= FORMAT_VERSION:
        raise QnnDeployError(f"{path} has format_version {version!r}; this qnndeploy reads versions 1 to "
                             f"{FORMAT_VERSION}" + ("; upgrade qnndeploy" if type(version) is int
                                                    and version > FORMAT_VERSION else ""))
    return data


def load_manifest(bundle: Path) -> JSON:
    """A manifest that is safe to use: right format, right version, valid against the schema."""
    data = read_manifest(bundle)
    errors = schema_errors(data)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise QnnDeployError(f"{bundle / MANIFEST} fails the schema: {errors[0]}{more}")
    return data


def file_entries(manifest: JSON) -> list[tuple[str, JSON]]:
    """Every file the manifest lists, with what it is: 'cpu', 'npu:<SoC>', 'lib' or 'record'."""
    entries = [("cpu", a) for a in manifest["cpu"]]
    entries += [(f"npu:{t['soc']}", a) for t in manifest["targets"] for a in t["artifacts"]]
    if manifest["runtime"]["mode"] == "bundled":
        entries += [("lib", lib) for lib in manifest["runtime"]["libs"]]
    entries += [("record", r) for r in manifest["records"]]
    return entries


def external_data_path(model: str, location: str | bytes) -> str | None:
    """The bundle path of the data file `location` named by the model at bundle path `model`, or None when the
    location could leave the model's folder (absolute, '..', '.', empty segments, backslashes) or is not text (protobuf
    gives bytes for a location that is not valid UTF-8)."""
    if not isinstance(location, str):
        return None
    if "\\" in location or "\x00" in location or any(p in ("", ".", "..") for p in location.split("/")):
        return None
    return f"{model.rsplit('/', 1)[0]}/{location}"


@dataclass
class Signature:
    inputs: list[JSON]  # {"name", "dtype", "shape"} as in the manifest's graphs
    outputs: list[JSON]
    external_data: list[str]  # the data files it names, relative to its folder


def graph_signature(path: Path) -> Signature:
    """The inputs and outputs of an ONNX model (CPU fallback or EPContext wrapper), read without its weights."""
    model = load_model(path, weights=False)
    inits = {t.name for t in model.graph.initializer}

    def tensors(values: Iterable[onnx.ValueInfoProto]) -> list[JSON]:
        # dims as the file writes them, a dynamic one as its symbol or "?"
        return [{"name": t.name, "dtype": t.dtype, "shape": t.shape or []}
                for t in (tensor_info(v, written=True) for v in values) if t.name not in inits]

    return Signature(tensors(model.graph.input), tensors(model.graph.output), sorted(external_locations(model)))


# --- validation summaries: what failed, and why it was shipped anyway (bundle --accept) ----------------------------

ACCEPTED_BY = "bundle --accept"  # the "by" of an accepted failure that `bundle --accept` recorded


def graph_validations(target: JSON) -> dict[str, JSON]:
    """A target's per-graph validation summaries (graph -> summary); empty when it was not validated."""
    validation = target.get("validation")
    graphs = validation.get("graphs") if isinstance(validation, dict) else None
    return {g: s for g, s in graphs.items() if isinstance(s, dict)} if isinstance(graphs, dict) else {}


def accepted_reason(summary: JSON) -> str | None:
    """The reason a graph's failed validation was shipped with (its summary's accepted.reason), or None."""
    accepted = summary.get("accepted")
    reason = accepted.get("reason") if isinstance(accepted, dict) else None
    return reason if isinstance(reason, str) else None


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def worst_metric(summary: JSON) -> str:
    """How a failed graph missed its thresholds, from its validation summary: its lowest-SNR failed output's first
    missed test, e.g. "snr 12.4 dB < 30" (the output named when the graph has several)."""
    given = summary.get("thresholds")
    limits: JSON = given if isinstance(given, dict) else {}
    outputs = [o for o in summary.get("outputs") or [] if isinstance(o, dict)]
    failed = [o for o in outputs if o.get("passed") is False]
    if not failed:
        return "failed"
    worst = min(failed, key=lambda o: o["snr_db"] if _number(o.get("snr_db")) else float("inf"))
    snr, cosine, diff = worst.get("snr_db"), worst.get("cosine"), worst.get("max_abs_diff")
    min_snr, min_cosine, atol = limits.get("min_snr_db"), limits.get("min_cosine"), limits.get("atol")
    if worst.get("judged_on") == "finite":
        text = "NaN or Inf in the NPU output"
    elif worst.get("judged_on") == "max_abs_diff" and _number(diff) and _number(atol):
        text = f"max abs diff {diff:.3g} > atol {atol:g}"
    elif _number(snr) and _number(min_snr) and snr < min_snr:
        text = f"snr {snr:.1f} dB < {min_snr:g}"
    elif _number(cosine) and _number(min_cosine) and cosine < min_cosine:
        text = f"cosine {cosine:.4g} < {min_cosine:g}"
    else:
        text = f"failed, judged on {worst.get('judged_on') or 'its metrics'}"
    return f"{worst.get('name')}: {text}" if len(outputs) > 1 else text

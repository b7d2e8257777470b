"""The JSON Schemas shipped in qnndeploy/schemas/ (each file kind's full form, what other tools validate against) and
the one way a value is checked against one: every problem, each with its path in the file."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from qnndeploy.base.fileio import JSON


@cache
def load(kind: str) -> JSON:
    """schemas/<kind>.schema.json, e.g. "manifest", "bench-record"."""
    data: JSON = json.loads(resources.files("qnndeploy").joinpath(f"schemas/{kind}.schema.json").read_text())
    return data


def problems(kind: str, data: object) -> list[str]:
    """What in `data` the schema of `kind` refuses, "path: message" each, in the file's order; empty when valid."""
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(load(kind)).iter_errors(data), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}" for e in errors]

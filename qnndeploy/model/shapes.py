"""The dims rules check and prepare share: which dim is the batch, and the --shape values to suggest for dynamic
inputs (the exporter's own symbols, one value per symbol, placeholders for what only the app knows)."""

from __future__ import annotations

import re

from qnndeploy.model.onnxio import TensorInfo

# A symbol that names the batch, in any exporter's spelling.
_BATCH = re.compile(r"(?i)n|b|bs|.*batch.*")
# Symbols an exporter invents when the author named none: they say nothing about what the dim is.
_GENERATED = re.compile(r"(?i)\?|unk__\d+|s\d+|.*dynamic_?ax.*|.*dynamicdimension.*|[^A-Za-z_].*|.*[^A-Za-z0-9_].*")


def is_batch(dim: int | str) -> bool:
    return isinstance(dim, str) and bool(_BATCH.fullmatch(dim))


def batch_dim(info: TensorInfo) -> int | None:
    """Which dim is the batch: the one whose symbol says so; else dim 0 of a 2-D or 4+-D input (a [N, C] or
    [N, C, H, W] layout). Dim 0 of a 1-D or 3-D input (a length, an RNN state [layers, batch, hidden], a
    [time, batch, feat] sequence) is not assumed to be the batch."""
    if info.shape is None:
        return None
    named = [i for i, d in enumerate(info.shape) if is_batch(d)]
    if named:
        return named[0]
    return 0 if len(info.shape) == 2 or len(info.shape) >= 4 else None


def suggest_shapes(inputs: list[TensorInfo], known: dict[str, int] | None = None) -> dict[str, list[str]]:
    """A --shape value for each dynamic input: static dims kept, the batch 1, a symbol fixed once the same value
    everywhere (`known` holds the ones already fixed), and a placeholder for the sizes only the app knows: the
    exporter's own symbol when it chose one (SEQ, TIME), else D1, D2…"""
    values: dict[str, str] = {k: str(v) for k, v in (known or {}).items()}
    fresh = (f"D{i}" for i in range(1, 1000))
    out = {}
    for info in inputs:
        if not info.dynamic:
            continue
        if info.shape is None:
            out[info.name] = [next(fresh)]
            continue
        batch = batch_dim(info)
        dims = []
        for i, d in enumerate(info.shape):
            if isinstance(d, int):
                dims.append(str(d))
                continue
            if d not in values or d == "?":
                values[d] = ("1" if i == batch else next(fresh) if _GENERATED.fullmatch(d) else d.upper())
            dims.append(values[d])
        out[info.name] = dims
    return out

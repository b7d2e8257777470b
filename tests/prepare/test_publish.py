"""prepare --force publishes its output as one unit: at every rename it makes (where a SIGKILL may land), OUT.onnx
with the data file it reads is the old pair or the new pair, never one with the other's weights, and a record beside
them describes them; the next run removes what a killed one left.

A kill is stood for by an exception raised at the Nth rename (os.replace, which Path.replace calls), as
tests/base/test_publish.py does: the state checked just before each rename is what a SIGKILL there leaves on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from qnndeploy import prepare
from qnndeploy.prepare import PrepareOptions, prepare_model
from tests.support import synth_models as sm


class Killed(BaseException):
    """Stands for a SIGKILL at a rename: not an Exception, so only `except BaseException` cleanup sees it."""


def _watch(monkeypatch, check: Callable[[], None], kill_at: int | None = None, into: Path | None = None
           ) -> list[int]:
    """check() before every rename; raise Killed at the `kill_at`th rename into the folder `into` (the publish
    points: renames inside the work folder leave the output as it was). Returns one entry per rename into `into`."""
    calls: list[int] = []
    real = os.replace

    def replace(src, dst, **kw):
        check()
        if into is not None and Path(dst).parent == into:
            calls.append(1)
            if len(calls) == kill_at:
                raise Killed
        return real(src, dst, **kw)

    monkeypatch.setattr(os, "replace", replace)
    return calls


def _weights(out: Path) -> str | None:
    """A fingerprint of the weights OUT.onnx reads (from the data file it names), None when it cannot read them."""
    try:
        model = onnx.load(str(out))
    except Exception:  # noqa: BLE001 a model whose data file is missing or short: a mixed output
        return None
    return hashlib.sha256(b"".join(onnx.numpy_helper.to_array(t).tobytes() for t in model.graph.initializer)
                          ).hexdigest()


def _state(out: Path) -> str | None:
    """OUT's weights fingerprint; the record beside it, when there is one, must describe OUT and its data file."""
    record = prepare.record_path(out)
    if record.exists():
        data = json.loads(record.read_text())
        assert data["output_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest(), "a record of another model"
        assert data["external_data"] is not None and Path(data["external_data"]).is_file()
    return _weights(out)


def _source(path: Path, seed: int) -> Path:
    model = sm.static_mlp(1, width=64)
    rng = np.random.default_rng(seed)
    for t in model.graph.initializer:
        t.CopyFrom(onnx.numpy_helper.from_array(rng.random(onnx.numpy_helper.to_array(t).shape).astype(np.float32),
                                                t.name))
    path.parent.mkdir(parents=True, exist_ok=True)
    return sm.save_with_external_data(model, path)


@pytest.mark.slow  # about a dozen prepare runs
def test_prepare_force_with_external_data_is_old_or_new_at_every_rename(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "EXTERNAL_ABOVE", 1000)  # both outputs keep their weights in a data file
    old_src, new_src = _source(tmp_path / "a" / "m.onnx", 1), _source(tmp_path / "b" / "m.onnx", 2)
    out = tmp_path / "out" / "m.onnx"
    prepare_model(old_src, out)
    old = _state(out)
    prepare_model(new_src, tmp_path / "new" / "m.onnx")
    new = _weights(tmp_path / "new" / "m.onnx")
    assert old is not None and new is not None and old != new

    seen: list[str | None] = []
    calls = _watch(monkeypatch, lambda: seen.append(_state(out)), into=out.parent)
    prepare_model(new_src, out, PrepareOptions(force=True))
    monkeypatch.undo()
    monkeypatch.setattr(prepare, "EXTERNAL_ABOVE", 1000)
    assert set(seen) <= {old, new}, "a model beside the other output's weights"
    assert _state(out) == new

    killed = 0
    assert len(calls) == 3  # the data file, the model, the record
    for n in range(1, len(calls) + 1):
        for src in (old_src, new_src):  # from the new output in place to the old, then back
            _watch(monkeypatch, lambda: None, kill_at=n, into=out.parent)
            try:
                prepare_model(src, out, PrepareOptions(force=True))
            except Killed:
                killed += 1
            monkeypatch.undo()
            monkeypatch.setattr(prepare, "EXTERNAL_ABOVE", 1000)
            assert _state(out) in {old, new}, f"killed at rename {n}: a mixed output"
        prepare_model(new_src, out, PrepareOptions(force=True))  # the next run: the new output, nothing left over
        assert _state(out) == new
        record = json.loads(prepare.record_path(out).read_text())
        assert sorted(p.name for p in out.parent.iterdir()) == sorted(
            ["m.onnx", "m.prepare.json", Path(record["external_data"]).name])
    assert killed == 2 * len(calls)

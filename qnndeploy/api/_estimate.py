"""`estimate` in the API: the estimate room's function under the command's name and option names."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from qnndeploy.estimate import Estimates, estimate_models
from qnndeploy.qnn.hextimate import DEFAULT_TIMEOUT_S


def estimate(models: Path | Sequence[Path], socs: Sequence[str] = (), *,
             timeout: float | None = DEFAULT_TIMEOUT_S) -> Estimates:
    """`qnndeploy estimate`: each model file, or each graph of a build folder (compile's output), estimated for
    QCS9100 at fp16 by the HTP backend's own cost model on this machine, then for each SoC of `socs` (the command's
    --soc; default: a build's SoCs, else every SoC with a chip factor) scaled by its chip factor. A build's graphs
    get an estimate record beside each job's compile.json, as the command writes them; nothing is measured."""
    paths = [Path(models)] if isinstance(models, str | Path) else [Path(m) for m in models]
    return estimate_models(paths, socs, timeout=timeout)

"""The build folder compile writes and validate and bundle read: <graph>/<SoC>/compile.json beside each job's
outputs. Its record names and the one reader live here, below the three stages."""

from __future__ import annotations

import json
from pathlib import Path

from qnndeploy.errors import QnnDeployError

RECORD = "qnndeploy-compile"
RECORD_VERSION = 1
RECORD_FILE = "compile.json"


def read_record(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("record") == RECORD else None


def read_build(build: Path) -> list[tuple[Path, dict]]:
    """(job folder, compile record) for every <graph>/<SoC>/compile.json under `build`, sorted."""
    build = Path(build)
    if not build.is_dir():
        raise QnnDeployError(f"{build}: no such build folder (qnndeploy compile -o {build} makes one)")
    found = []
    for path in sorted(build.glob(f"*/*/{RECORD_FILE}")):
        record = read_record(path)
        if record is None:
            raise QnnDeployError(f"{path}: not a qnndeploy compile record")
        found.append((path.parent, record))
    if not found:
        raise QnnDeployError(f"{build}: no compile records (<graph>/<SoC>/{RECORD_FILE}); run qnndeploy compile first")
    return found

"""Qualcomm's chipset table as qnndeploy keeps it (qnndeploy/data/qualcomm_chipsets.json, what `qnndeploy reach`
lists): the `chipsets` section of qai_hub_models/devices_and_chipsets.yaml in the installed qai-hub-models wheel,
each chipset with the fields reach uses. The product may not depend on qai-hub-models, so the table is copied, and
tests/base/test_qualcomm_chipsets.py requires the copy to be what the installed wheel says.

    python -m tests.support.qualcomm_chipsets           print the table as the data file holds it
    python -m tests.support.qualcomm_chipsets --write   ... and write it into qnndeploy/data (read date: READ)
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import yaml

from . import REPO

DIST = "qai-hub-models"
YAML = "qai_hub_models/devices_and_chipsets.yaml"
DATA = REPO / "qnndeploy" / "data" / "qualcomm_chipsets.json"
READ = "2026-12-05"  # the date the table was read from the wheel: change it with the data
FIELDS = ("aliases", "soc_model", "htp_version", "marketing_name", "world")


def wheel_yaml() -> Path:
    """The installed wheel's devices_and_chipsets.yaml (FileNotFoundError when qai-hub-models is not installed)."""
    path = Path(str(distribution(DIST).locate_file(YAML)))
    if not path.is_file():
        raise FileNotFoundError(path)
    return path


def chipsets(table: dict[str, Any]) -> list[dict[str, Any]]:
    """The `chipsets` section of the yaml, in its order: name, the fields reach uses, and supports_fp16 (absent in
    the yaml means false, as qai_hub_models' own ChipsetInfo reads it)."""
    return [{"name": name, **{k: c[k] for k in FIELDS}, "supports_fp16": bool(c.get("supports_fp16", False))}
            for name, c in table["chipsets"].items()]


def data(table: dict[str, Any]) -> dict[str, Any]:
    return {
        "about": "Qualcomm's chipset table: the chipsets section of qai-hub-models' devices_and_chipsets.yaml, copied "
                 "by tests/support/qualcomm_chipsets.py (qnndeploy does not depend on qai-hub-models). name: AI "
                 "Hub's chipset name; aliases: Qualcomm's other names, the part numbers among them (sm8750-ac) the "
                 "Build.SOC_MODEL a phone of that chip reports, upper-cased; soc_model and htp_version: QNN's "
                 "soc_model number and HTP arch; world: Mobile, Compute, IoT, Automotive or XR; supports_fp16: "
                 "false where the yaml says nothing. Read by qnndeploy/decide/reach.py.",
        "source": {"wheel": f"{DIST} {distribution(DIST).version}", "path": YAML, "section": "chipsets"},
        "read": READ,
        "chipsets": chipsets(table),
    }


def text(table: dict[str, Any]) -> str:
    return json.dumps(data(table), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    out = text(yaml.safe_load(wheel_yaml().read_text(encoding="utf-8")))
    if argv[:1] == ["--write"]:
        DATA.write_text(out, encoding="utf-8")
        print(f"wrote {DATA}")
    else:
        sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

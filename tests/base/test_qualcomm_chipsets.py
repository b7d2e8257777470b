"""qnndeploy/data/qualcomm_chipsets.json (the table `qnndeploy reach` lists) against the installed qai-hub-models
wheel's devices_and_chipsets.yaml, as tests/base/test_facts.py reads it: a wheel with another table fails here until
`python -m tests.support.qualcomm_chipsets --write` copies it again."""

from __future__ import annotations

import json
import re

import yaml

from qnndeploy.decide import reach
from tests.base.test_facts import DATA, _wheel_file
from tests.support import qualcomm_chipsets


def test_the_copy_is_the_installed_wheels_chipset_table():
    table = yaml.safe_load(_wheel_file("qai-hub-models", qualcomm_chipsets.YAML).read_text())
    kept = json.loads((DATA / "qualcomm_chipsets.json").read_text())
    assert kept["chipsets"] == qualcomm_chipsets.chipsets(table)
    assert [c["name"] for c in kept["chipsets"]] == list(table["chipsets"])
    assert kept["source"]["path"] == qualcomm_chipsets.YAML and kept["source"]["wheel"].startswith("qai-hub-models ")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", kept["read"])


def test_reach_reads_the_table_as_written():
    kept = json.loads((DATA / "qualcomm_chipsets.json").read_text())["chipsets"]
    read = reach.chipsets()
    assert [(c.name, c.soc_model, c.htp_version, c.world) for c in read] == [
        (c["name"], c["soc_model"], c["htp_version"], c["world"]) for c in kept]
    assert {c.world for c in read} == {"Mobile", "Compute", "IoT", "Automotive", "XR"}
    galaxy = next(c for c in read if c.name == "qualcomm-snapdragon-8-elite-for-galaxy")
    assert galaxy.part_numbers == ("SM8750-AC",) and galaxy.supports_fp16

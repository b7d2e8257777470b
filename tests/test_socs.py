import json
import subprocess

import pytest
from click.testing import CliRunner

from qnndeploy import socs
from qnndeploy.cli import cli
from qnndeploy.errors import QnnDeployError

SHERPA_ROWS = {  # scripts/qnn/device_info.py in k2-fsa/sherpa-onnx, active and commented-out rows
    "SA8255": (52, "v73", 8), "SA8295": (39, "v68", 8), "SM8350": (35, "v68", 4), "SM8450": (36, "v69", 8),
    "SM8475": (42, "v69", 8), "SM8550": (43, "v73", 8), "SM8650": (57, "v75", 8), "SM8750": (69, "v79", 8),
    "SM8850": (87, "v81", 8), "QCS9100": (77, "v73", 8), "SSG2115P": (46, "v73", 2), "SSG2125P": (58, "v73", 2),
    "SXR1230P": (45, "v73", 2), "SXR2230P": (53, "v69", 8), "SXR2330P": (75, "v79", 8), "SAR2230P": (95, "v81", 4),
    "SW6100": (96, "v81", 4),
}


def test_catalog_has_every_sherpa_row():
    for model, (soc_id, arch, vtcm) in SHERPA_ROWS.items():
        s = socs.find(model)
        assert (s.soc_id, s.dsp_arch, s.vtcm_mb) == (soc_id, arch, vtcm), model


def test_sm8350_has_no_fp16_and_the_rest_do():
    assert not socs.find("SM8350").fp16
    assert all(s.fp16 for s in socs.catalog() if s.model != "SM8350")


def test_catalog_entries_are_unique():
    models = [s.model for s in socs.catalog()]
    ids = [s.soc_id for s in socs.catalog()]
    codenames = [c for s in socs.catalog() for c in s.codenames]
    assert len(set(models)) == len(models) and len(set(ids)) == len(ids) and len(set(codenames)) == len(codenames)


@pytest.mark.parametrize("key", ["SM8750", "sm8750", "69", 69, "SUN", "sm8750p"])
def test_lookup_by_model_id_codename_alias(key):
    assert socs.find(key).model == "SM8750"


def test_unknown_soc_lists_close_matches():
    with pytest.raises(QnnDeployError, match=r"unknown SoC 'SM8570'.*SM8750"):
        socs.find("SM8570")


def test_cli_socs_json_and_error():
    r = CliRunner().invoke(cli, ["socs", "--json"])
    assert r.exit_code == 0
    rows = json.loads(r.output)
    assert {row["model"] for row in rows} >= set(SHERPA_ROWS)
    r = CliRunner().invoke(cli, ["socs", "kalama"])
    assert r.exit_code == 0 and "SM8550" in r.output and "Snapdragon 8 Gen 2" in r.output
    r = CliRunner().invoke(cli, ["socs", "nosuch"])
    assert r.exit_code == 2 and r.output.startswith("error: unknown SoC") and "Traceback" not in r.output


def test_installed_executable_runs():
    out = subprocess.run(["qnndeploy", "socs", "SM8350", "--json"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)[0]["fp16"] is False


def test_json_callers_get_the_error_on_stdout():
    r = subprocess.run(["qnndeploy", "socs", "nosuch", "--json"], capture_output=True, text=True, check=False)
    assert r.returncode == 2
    assert json.loads(r.stdout) == {"error": r.stderr.removeprefix("error: ").rstrip("\n"), "exit_code": 2}

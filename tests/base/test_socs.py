import json
import subprocess

import pytest

from qnndeploy.base import socs
from qnndeploy.base.errors import QnnDeployError
from tests.support.cli import run


def test_no_fp16_where_qualcomm_says_so():
    assert {s.model for s in socs.catalog() if s.fp16 is False} == {"SM8350", "SM7325", "SM7750"}
    assert {s.model for s in socs.catalog() if s.fp16 is None} == {"SM8635", "SM8735", "SM8845", "SM7675", "SC8280X"}


@pytest.mark.parametrize(("name", "model"), [("SM8750-AC", "SM8750"), ("sm8850-ad", "SM8850"), ("SM8650-AC", "SM8650"),
                                             ("SM8550-ac", "SM8550"), (" SM8750P ", "SM8750"), ("QCS9075", "QCS9100"),
                                             ("SM8845P", "SM8845"), ("SM8350P", "SM8350")])
def test_names_phones_report_resolve_to_their_soc(name, model):
    assert socs.find(name).model == model


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
    r = run("socs", "--json")
    assert r.exit_code == 0
    rows = json.loads(r.stdout)
    assert len(rows) == len(socs.catalog()) and {"SM8350", "SM8950", "SM7325"} <= {row["model"] for row in rows}
    r = run("socs", "kalama")
    assert r.exit_code == 0 and "SM8550" in r.output and "Snapdragon 8 Gen 2" in r.output
    r = run("socs", "nosuch")
    assert r.exit_code == 2 and r.output.startswith("error: unknown SoC") and "Traceback" not in r.output


def test_installed_executable_runs():
    out = subprocess.run(["qnndeploy", "socs", "SM8350", "--json"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)[0]["fp16"] is False


def test_json_callers_get_the_error_on_stdout():
    r = subprocess.run(["qnndeploy", "socs", "nosuch", "--json"], capture_output=True, text=True, check=False)
    assert r.returncode == 2
    assert json.loads(r.stdout) == {"error": r.stderr.removeprefix("error: ").rstrip("\n"), "exit_code": 2}


def test_socs_shows_a_socs_sources_and_what_qnn_wrote():
    r = run("socs", "SM8350")
    assert r.exit_code == 0
    assert r.output.startswith("SM8350  soc_model 30, HTP v68, VTCM 4 MB, fp16 no  Snapdragon 888")
    assert "source aihub: qai-hub-models 0.65.0 wheel" in r.output and "source litert: https://" in r.output
    assert "QAIRT 2.51.0 writes soc_model 30, arch v68 (measured)" in r.output
    table = run("socs").output.splitlines()
    assert any(line.startswith("SM8750 ") and "SM8750P,SM8750-AC" in line and "2.47.0-2.51.0" in line
               for line in table)
    assert any(line.startswith("SM7325 ") and "none (2.47.0-2.51.0 refuse it)" in line for line in table)


def test_the_arch_text_inside_a_binary_is_shown_where_it_differs_from_its_metadata():
    """SM8475: every QAIRT here writes v69 into the metadata (what libQnnSystem and bundle verify read) and
    `arch=68` into the prepare string the binary embeds; `socs` says both, so nobody takes the 68 for the arch."""
    out = run("socs", "SM8475").output
    assert ("writes soc_model 42, arch v69 (measured); its embedded prepare string says arch=68, libQnnSystem and "
            "bundle verify read v69") in out
    assert socs.arch_mismatch(socs.find("SM8475"), "2.51.0") is None  # the metadata agrees with the catalog

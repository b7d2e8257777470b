"""qnndeploy.base.compat over data/runtime.json: the oldest runtime that loads a bundle's binaries, pins, validated
sets."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from qnndeploy.base import compat
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.qnn import htp, toolchain
from tests.support.host import require


def test_every_row_of_the_data_file_has_a_source():
    data = json.loads(resources.files("qnndeploy").joinpath("data/runtime.json").read_text())
    sourced = [row for kind in ("rules", "context_blobs", "validated_sets") for row in data[kind]]
    sourced += list(data["aars"].values()) + data["maven"]["published"] + data["maven"]["not_published"]
    sourced += data["compilers"]["wheels"]
    assert len(sourced) >= 10
    for row in sourced:
        assert row["source"]["url"].startswith("https://"), row
        assert len(row["source"]["says"]) > 20, row
    assert "unverified" not in json.dumps(data).lower()


@pytest.mark.parametrize(("qairt", "floor"), [("2.51.0", "2.51.0"), ("2.49.40", "2.49.0"), ("2.49.0", "2.49.0"),
                                              ("2.48.40", "2.48.40"), ("2.47.0", "2.47.0"), ("2.45.1", "2.45.0")])
def test_min_runtime_for_a_qairt_build(qairt, floor):
    assert compat.min_runtime_for_qairt(qairt) == floor


def test_min_runtime_for_a_context_blob_version():
    """For the reader of context binaries (libQnnSystem reports the blob version): Qualcomm dates 4.0 from QAIRT 2.49,
    but the 2.48.40 patch release already writes and reads it (measured)."""
    assert compat.min_runtime_for_blob("4.0") == "2.48.40"
    assert compat.min_runtime_for_blob("3.3") == "2.47.0"
    assert compat.min_runtime_for_blob("4.1") is None  # no source says: the caller falls back on the QAIRT version
    with pytest.raises(QnnDeployError):
        compat.min_runtime_for_blob("four")


def test_the_load_table_decides_which_published_runtime_a_bundle_pins():
    """Measured on the host emulator: a runtime loads binaries of its own and older releases, never newer ones."""
    assert compat.loads("2.49.40", "2.49.0") is True  # compared by release family: Maven's 2.49.0 is QAIRT 2.49
    assert compat.loads("2.48.40", "2.49.0") is True and compat.loads("2.47.0", "2.51.0") is True
    assert compat.loads("2.50.40", "2.49.0") is False and compat.loads("2.51.0", "2.50.40") is False
    assert compat.loads("2.49.40", "2.36.1") is None  # no row: that runtime was never measured here
    assert compat.maven_for("2.49.40") == ["2.49.0", "2.50.0"]  # its own family first: what bundle pins
    assert compat.maven_for("2.47.0") == ["2.50.0", "2.49.0", "2.48.0"]  # no 2.47 on Maven: newest first
    assert compat.maven_for("2.48.40") == ["2.50.0", "2.49.0"]  # 2.48.0 predates the blob 4.0 that 2.48.40 writes
    assert compat.maven_for("2.50.40") == ["2.50.0"] and compat.maven_for("2.51.0") == []


def test_binaries_no_published_runtime_loads_get_the_two_ways_out():
    why = compat.no_maven_runtime("2.51.0")
    assert "QAIRT 2.51.0" in why and "newest on Maven that a public source shows is 2.50.0" in why
    assert "--runtime-libs" in why and "--qairt 2.50" in why and "qnn-runtime:2.50.0 is published" in why


def test_a_pin_that_cannot_load_the_binaries_is_refused_with_its_reason():
    measured = compat.pin_problem("2.48.0", "2.49.40")
    assert measured is not None and "QAIRT 2.48 runtime refuses QAIRT 2.49.40 context binaries" in measured
    older = compat.pin_problem("2.36.1", "2.49.40")  # not measured: the sourced rule says an older runtime refuses
    assert older is not None and "older than QAIRT 2.49.40" in older and "LiteRT/issues/6889" in older
    gone = compat.pin_problem("2.49.40", "2.49.40")
    assert gone is not None and "not on Maven" in gone and "onnxruntime-qnn/pull/783" in gone
    assert compat.pin_problem("2.49.0", "2.49.40") is None
    assert compat.satisfies("2.49.40", "2.49.0") and not compat.satisfies("2.49.0", "2.49.40")
    assert compat.satisfies("2.10.0", "2.9.0")  # numeric, not string order


def test_pin_warnings():
    assert compat.pin_warnings("2.49.0", "2.49.40") == []  # published, measured, Qualcomm's 2.5.0 set
    unknown = compat.pin_warnings("2.52.0", "2.49.40")
    assert any("no public source shows qnn-runtime 2.52.0 on Maven" in w for w in unknown)
    assert any("no measurement says" in w for w in unknown)
    assert any("no validated ONNX Runtime set" in w for w in compat.pin_warnings("2.48.0", "2.47.0"))


def test_validated_sets_that_satisfy_a_minimum():
    """Only sets whose qnn-runtime a public source shows on Maven: the docs' 2.45.0 set is not offered."""
    assert [(s.aar, s.aar_version, s.ort_android, s.reported) for s in compat.validated_sets("2.49.0")] == [
        ("qualcomm", "2.5.0", "1.26.0", False),  # validated before reported, though older
        ("qualcomm", "2.6.0", "1.26.0", True), ("qualcomm", "2.6.0", "1.27.0", True)]
    assert compat.validated_sets("2.51.0") == []
    assert compat.validated_sets("2.49.0", "microsoft") == []
    newest_first = compat.validated_sets("2.40.0", "microsoft")
    assert [s.aar_version for s in newest_first] == ["1.26.0"]
    q = compat.validated_sets("2.45.0", "qualcomm")
    assert [s.aar_version for s in q] == ["2.5.0", "2.6.0", "2.6.0"]
    assert q[0].describe() == ("com.qualcomm.qti:onnxruntime-android-qnn:2.5.0 + "
                               "com.microsoft.onnxruntime:onnxruntime-android:1.26.0 + qnn-runtime 2.49.0")
    with pytest.raises(QnnDeployError, match="unknown ONNX Runtime AAR"):
        compat.validated_sets("2.45.0", "google")


def test_whether_a_set_is_validated():
    assert compat.is_validated("qualcomm", "2.5.0", "1.26.0", "2.49.0")
    assert not compat.is_validated("qualcomm", "2.4.0", "1.24.3", "2.48.40")  # a QAIRT number, never on Maven
    assert compat.is_validated("microsoft", "1.26.0", None, "2.42.0")
    assert not compat.is_validated("microsoft", "1.29.0", None, "2.51.0")


def test_the_qnn_plugin_registration_facts_are_sourced():
    """What the glue registers with Qualcomm's plugin AAR, each fact from the plugin's public sources."""
    plugin = compat.qnn_plugin()
    assert (plugin.library, plugin.ep_name, plugin.registration_name) == (
        "libonnxruntime_providers_qnn.so", "QNNExecutionProvider", "QNNExecutionProvider")
    urls = [s.url for s in plugin.sources]
    assert any(u.endswith("qnnpluginep/QnnPluginEpLibrary.kt") and "onnxruntime/onnxruntime-qnn/blob/" in u
               for u in urls)
    assert any("javavalidator/SimpleTest.kt" in u for u in urls)
    assert "https://github.com/microsoft/onnxruntime/pull/25131" in urls
    assert all(len(s.says) > 20 for s in plugin.sources)


@pytest.mark.needs_qnn
def test_the_plugin_facts_agree_with_the_installed_onnxruntime_qnn():
    """An independent copy of the same plugin: the onnxruntime-qnn wheel is its Linux build. Its library has the
    file name the data says, and registered under the data's registration name it offers devices of the data's EP
    name, as the Android glue filters them."""
    require(htp.available(), "onnxruntime-qnn")
    import onnxruntime as ort
    import onnxruntime_qnn

    plugin = compat.qnn_plugin()
    path = onnxruntime_qnn.get_library_path()
    assert Path(path).name == plugin.library
    if plugin.ep_name not in {d.ep_name for d in ort.get_ep_devices()}:  # another test may have registered it
        ort.register_execution_provider_library(plugin.registration_name, path)
    assert plugin.ep_name in {d.ep_name for d in ort.get_ep_devices()}


def test_the_default_set_is_a_validated_one_when_one_loads_the_binaries():
    """Either AAR, newest qnn-runtime first; Microsoft's unvalidated pin only when no validated set loads them."""
    chosen = compat.app_set("2.49.40", "2.49.0", "2.49.0")
    assert (chosen.aar, chosen.aar_version, chosen.ort_android, chosen.qnn_runtime) == ("qualcomm", "2.5.0", "1.26.0",
                                                                                        "2.49.0")
    assert chosen.validated is not None and not chosen.warnings
    assert chosen.line().endswith("validated for these QAIRT 2.49.40 binaries "
                                  "(https://github.com/onnxruntime/onnxruntime-qnn/pull/783)")
    older = compat.app_set("2.40.0", "2.40.0", "2.40.0", "microsoft")
    assert (older.aar, older.aar_version, older.qnn_runtime) == ("microsoft", "1.26.0", "2.42.0")
    assert "(QNN provider built in): validated" in older.line()
    newer = compat.app_set("2.51.0", "2.51.0", "2.51.0")
    assert newer.validated is None and newer.aar == "microsoft" and len(newer.warnings) == 1
    assert newer.line().endswith("NOT a validated set for these QAIRT 2.51.0 binaries")
    asked = compat.app_set("2.49.40", "2.49.0", "2.49.0", "microsoft")
    assert asked.validated is None and asked.aar == "microsoft"
    reported = compat.app_set("2.50.40", "2.50.0", "2.50.0")  # QAIRT 2.50: only a reported set has its runtime
    assert (reported.aar_version, reported.ort_android, reported.qnn_runtime) == ("2.6.0", "1.26.0", "2.50.0")
    assert "reported to work, not confirmed as validated" in reported.line() and len(reported.warnings) == 1
    assert not compat.is_validated("qualcomm", "2.6.0", "1.26.0", "2.50.0")
    own = compat.app_set("2.49.40", "2.49.0", None)  # the bundle brings its own QNN libraries
    assert own.validated is None and "the bundle's QAIRT 2.49.40 libraries" in own.line()


def test_qnndeploy_installs_the_newest_compiler_whose_runtime_an_app_can_get():
    """pyproject.toml pins the onnxruntime-qnn that toolchain.default() derives from the data: when a newer
    qnn-runtime gets a source, this fails until the pin follows it, and it never runs ahead of Maven."""
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    pins = [d.split(";")[0] for d in pyproject["project"]["dependencies"] if d.startswith("onnxruntime-qnn==")]
    default = toolchain.default()
    assert pins == [f"onnxruntime-qnn=={default.onnxruntime_qnn}"]
    assert compat.maven_for(default.qairt)[0] in compat.published()
    newer = [t for t in toolchain.known() if compat.version_key(t.qairt) > compat.version_key(default.qairt)]
    assert all(not compat.maven_for(t.qairt) for t in newer)

"""The Python twin of the on-device decision (qnndeploy/decide/decision.py); test_kotlin.py checks the Kotlin
side agrees."""

from __future__ import annotations

import pytest

from qnndeploy.base import socs
from qnndeploy.base.names import CONTEXT_BINARY, EPCONTEXT, FORMAT_VERSION
from qnndeploy.decide.decision import (
    REASONS,
    VENDOR_DSP_FOLDERS,
    DeviceIdentity,
    QnnLibraries,
    Remembered,
    SocIdentity,
    adsp_library_path,
    decide,
    identify,
    qnn_libraries,
    reason,
    soc_tables,
    template_fields,
)
from qnndeploy.formats.manifest import Manifest, schema_errors
from tests.support import bundles

LIB_DIR = "/data/app/~~x/com.example-1/lib/arm64"
SM8750 = DeviceIdentity("SM8750", "sun", 35)


def run(manifest=None, device=SM8750, load_errors=None, **kw):
    return decide(Manifest.parse(manifest or bundles.manifest()), device, load_errors=load_errors or {},
                  lib_dir=LIB_DIR, **kw)


def test_fixture_manifests_follow_the_schema():
    for runtime in ("external", "bundled"):
        assert schema_errors(bundles.manifest(runtime=runtime)) == []
    assert schema_errors(bundles.manifest(format_version=1)) == []
    assert schema_errors(bundles.manifest(external=("rec",))) == []


def test_matching_soc_and_libraries_load_gives_npu_with_the_targets_files():
    d = run()
    assert d.npu and d.soc == "SM8750" and d.identified_by == "Build.SOC_MODEL" and d.dsp_arch == "v79"
    assert d.paths == {"det": "npu/SM8750/det.bin", "rec": "npu/SM8750/rec.bin"}
    assert set(d.files) == {"npu/SM8750/det.bin", "npu/SM8750/det_ctx.onnx", "npu/SM8750/rec.bin",
                            "npu/SM8750/rec_ctx.onnx"}
    assert (d.backend_lib, d.system_lib) == ("libQnnHtp.so", "libQnnSystem.so")
    assert d.adsp_library_path.startswith(LIB_DIR + ";")
    assert d.reason == "SoC SM8750 (v79) is in the bundle and the QNN libraries loaded"


def test_ort_engine_gets_the_epcontext_wrappers():
    d = run(npu_format=EPCONTEXT)
    assert d.paths == {"det": "npu/SM8750/det_ctx.onnx", "rec": "npu/SM8750/rec_ctx.onnx"}
    d = run(bundles.manifest(formats=(CONTEXT_BINARY,)), npu_format=EPCONTEXT)
    assert not d.npu and d.reason == 'target SM8750 has no ort-epcontext file for graph "det"'
    assert d.paths == {"det": "cpu/det.onnx", "rec": "cpu/rec.onnx"}


def test_soc_not_in_the_bundle_goes_to_cpu_and_says_so():
    d = run(device=DeviceIdentity("SM8650", "pineapple", 34))
    assert not d.npu and d.soc == "SM8650"
    assert d.reason == "SoC SM8650 is not in the bundle (targets: SM8550, SM8750)"
    assert d.paths == {"det": "cpu/det.onnx", "rec": "cpu/rec.onnx"} and d.files == ["cpu/det.onnx", "cpu/rec.onnx"]
    assert d.adsp_library_path is None and d.backend_lib is None
    d = run(bundles.manifest(targets=()), device=DeviceIdentity("s5e9945", None, 34))  # an Exynos phone
    assert d.soc == "S5E9945" and d.reason == "SoC S5E9945 is not in the bundle (targets: none)"


def test_alias_reported_by_the_phone_matches_the_catalog_model():
    d = run(device=DeviceIdentity("SM8750P", "sun", 35))
    assert d.npu and d.soc == "SM8750"


def spellings(name: str) -> list[str]:
    """A name as a phone may report it: as written, lower case, mixed case, with ASCII whitespace around it."""
    mixed = "".join(c.lower() if i % 2 else c.upper() for i, c in enumerate(name))
    return [name, name.lower(), mixed, f" \t{name}\r\n", f"\x0b{name.lower()}\x0c", f"\n{mixed} "]


def test_every_name_a_phone_reports_for_a_soc_decides_its_target_with_its_soc_model():
    """Galaxy phones report suffixed names (SM8750-AC on an S25): each catalog alias, in any ASCII case and with
    whitespace around it, is its SoC, whose target the decision picks and whose QNN soc_model it names."""
    aliased = [s for s in socs.catalog() if s.aliases]
    assert {"SM8750-AC", "SM8850-AD", "SM8650-AC", "SM8550-AC", "SM8750P"} <= {a for s in aliased for a in s.aliases}
    m = bundles.manifest(targets=tuple(s.model for s in aliased))
    for soc in aliased:
        for name in soc.names:
            for spelled in spellings(name):
                for sdk in (30, 35):  # ro.soc.model before Build.SOC_MODEL exists, then Build.SOC_MODEL
                    d = run(m, device=DeviceIdentity(spelled, None, sdk))
                    assert (d.provider, d.soc, d.dsp_arch, d.soc_id) == ("npu", soc.model, soc.dsp_arch,
                                                                         soc.soc_id), (spelled, d.reason)
                    assert d.identified_by == ("Build.SOC_MODEL" if sdk >= 31 else "ro.soc.model")


def test_the_soc_model_named_is_the_targets_own_and_only_on_the_npu():
    m = bundles.manifest(targets=("SM8550", "SM8750"))
    assert (run(m).soc_id, run(m, device=DeviceIdentity("SM8550-AC", None, 34)).soc_id) == (69, 43)
    m["targets"][1]["soc_id"] = 12345  # what the manifest says, as the app passes it on (bundle verify checks it)
    assert run(m).soc_id == 12345
    assert run(m, load_errors={"libQnnHtp.so": "x"}).soc_id is None
    assert run(m, device=DeviceIdentity("SM8650", None, 34)).soc_id is None


def test_library_failures_give_cpu_with_every_loader_message():
    errors = {"libQnnHtpV79Stub.so": 'dlopen failed: library "libcdsprpc.so" not found',
              "libQnnSystem.so": "dlopen failed: cannot locate symbol"}
    d = run(load_errors=errors)
    assert not d.npu
    assert d.reason == ("QNN libraries did not load: libQnnSystem.so: dlopen failed: cannot locate symbol; "
                        'libQnnHtpV79Stub.so: dlopen failed: library "libcdsprpc.so" not found')
    assert d.adsp_library_path is not None  # it was set before the libraries were tried
    assert d.paths == {"det": "cpu/det.onnx", "rec": "cpu/rec.onnx"}
    assert run(load_errors={"libQnnHtpV73Stub.so": "not ours"}).npu  # another arch's Stub is not needed


def test_android_11_is_identified_through_the_board_platform():
    d = run(device=DeviceIdentity(None, "kalama", 30))
    assert d.npu and d.soc == "SM8550" and d.identified_by == "ro.board.platform" and d.dsp_arch == "v73"
    d = run(device=DeviceIdentity("", "lito", 30))
    assert not d.npu and d.soc is None
    assert d.reason == 'SoC unknown: ro.board.platform "lito" is not in the SoC catalog'
    d = run(device=DeviceIdentity("unknown", None, 33))
    assert d.reason == "SoC unknown: the device reports no Build.SOC_MODEL / ro.soc.model and no ro.board.platform"
    assert run(device=DeviceIdentity("SM8550", None, 30)).identified_by == "ro.soc.model"


def test_adsp_library_path_prepends_with_semicolons_and_keeps_what_was_there():
    value = adsp_library_path("/app/lib", "/vendor/lib/rfsa/adsp;/data/local/tmp/x")
    assert value.split(";") == ["/app/lib", "/vendor/lib/rfsa/adsp", "/data/local/tmp/x",
                                *[f for f in VENDOR_DSP_FOLDERS if f != "/vendor/lib/rfsa/adsp"]]
    assert adsp_library_path("/app/lib", None) == ";".join(["/app/lib", *VENDOR_DSP_FOLDERS])
    assert adsp_library_path("/app/lib", value) == value  # applying it twice changes nothing
    assert run(adsp_before="/odm/dsp").adsp_library_path.split(";")[:2] == [LIB_DIR, "/odm/dsp"]


@pytest.mark.parametrize("fmt, version", [("qnndeploy-bundle", FORMAT_VERSION + 1), ("qnndeploy-bundle", 0),
                                          ("qnndeploy-bundle", 1.0), ("qnndeploy-bundle", True), ("other", 1),
                                          ("qnndeploy-bundle", None)])
def test_unknown_manifest_format_or_version_goes_to_cpu(fmt, version):
    m = {**bundles.manifest(), "format": fmt, "format_version": version}
    d = run(m)
    assert not d.npu and d.paths == {} and d.soc == "SM8750"
    assert f"is not supported (this app reads \"qnndeploy-bundle\" versions 1 to {FORMAT_VERSION})" in d.reason
    assert run({**bundles.manifest(), "format_version": FORMAT_VERSION + 1}).reason.startswith(
        f'bundle manifest format "qnndeploy-bundle" version {FORMAT_VERSION + 1} is not supported')


def test_a_v1_manifest_is_still_read():
    assert run(bundles.manifest(format_version=1)) == run(bundles.manifest(format_version=2))
    assert run(bundles.manifest(format_version=1)).npu


def test_the_cpu_fallback_brings_the_external_data_of_its_models():
    m = bundles.manifest(external=("rec",))
    d = run(m, device=DeviceIdentity("SM8650", "pineapple", 34))
    assert not d.npu and d.paths == {"det": "cpu/det.onnx", "rec": "cpu/rec.onnx"}
    assert d.files == ["cpu/det.onnx", "cpu/rec.onnx", "cpu/rec.onnx.data"]
    assert run(m).files == run(bundles.manifest()).files  # the NPU needs none of them


def test_remembered_failure_keeps_cpu_until_the_app_or_bundle_version_changes():
    failed = Remembered("1.0 (1)", "demo 1.0.0", "QNN error 1008 from deviceCreate")
    d = run(app_version="1.0 (1)", remembered=failed)
    assert not d.npu and d.adsp_library_path is None
    assert d.reason == ("NPU init failed before with this app and bundle version (QNN error 1008 from "
                        "deviceCreate); using the CPU until either changes")
    assert run(app_version="1.1 (2)", remembered=failed).npu
    assert run(bundles.manifest(version="1.0.1"), app_version="1.0 (1)", remembered=failed).npu


def test_bundled_runtime_must_hold_the_targets_stub_and_skel():
    m = bundles.manifest(runtime="bundled")
    assert run(m).npu
    m["runtime"]["libs"] = [lib for lib in m["runtime"]["libs"] if "V79" not in lib["path"]]
    d = run(m)
    assert not d.npu and d.reason == "the bundle has no libQnnHtpV79Stub.so, libQnnHtpV79Skel.so for SM8750 (v79)"


def test_catalog_tables_cover_every_model_alias_and_codename():
    models, codenames = soc_tables()
    for soc in socs.catalog():
        assert all(models[n] == soc.model for n in (soc.model, *soc.aliases))
        assert all(codenames[c] == soc.model for c in soc.codenames)


def test_a_failure_to_set_adsp_library_path_goes_to_cpu_before_any_library_loads():
    d = run(adsp_error="setenv failed: EINVAL (Invalid argument)", load_errors={"libQnnHtp.so": "never tried"})
    assert not d.npu and d.reason_key == "adsp_not_set"
    assert d.reason == "cannot set ADSP_LIBRARY_PATH: setenv failed: EINVAL (Invalid argument)"
    assert d.adsp_library_path is None and d.paths == {"det": "cpu/det.onnx", "rec": "cpu/rec.onnx"}


def test_qnn_libraries_drop_one_leading_v_of_any_arch_string():
    assert qnn_libraries("v79") == QnnLibraries("libQnnHtp.so", "libQnnSystem.so", "libQnnHtpV79Stub.so",
                                                 "libQnnHtpV79Skel.so")
    _, _, stub, skel = qnn_libraries("v73")  # still a 4-tuple to unpack
    assert (stub, skel) == ("libQnnHtpV73Stub.so", "libQnnHtpV73Skel.so")
    # the same rule as Kotlin's removePrefix("v"), also where dsp_arch[1:] would differ
    assert qnn_libraries("79").stub == "libQnnHtpV79Stub.so"
    assert qnn_libraries("vv79").stub == "libQnnHtpVv79Stub.so"
    assert qnn_libraries("").stub == "libQnnHtpVStub.so"


def test_device_text_is_normalised_with_ascii_rules_only():
    assert identify(DeviceIdentity(" \tsm8750p\r\n", None, 34)) == SocIdentity("SM8750", "Build.SOC_MODEL")
    assert identify(DeviceIdentity(None, " KALAMA\x0b", 30)) == SocIdentity("SM8550", "ro.board.platform")
    assert identify(DeviceIdentity(" UnKnown ", "sun", 30)) == SocIdentity("SM8750", "ro.board.platform")
    # Unicode spaces and case mappings are the JVM's and Python's own, and differ: neither twin applies them
    assert identify(DeviceIdentity("\u00a0SM8750", None, 34)).soc == "\u00a0SM8750"
    assert identify(DeviceIdentity("\u017fm8750", None, 34)).soc == "\u017fM8750"  # the long s is not an s
    kelvin = DeviceIdentity(None, "\u212aalama", 30)  # nor is the Kelvin sign a K
    assert identify(kelvin) == SocIdentity(None, "ro.board.platform")
    assert adsp_library_path("/app", "\u0085; ;/odm") == ";".join(["/app", "\u0085", "/odm", *VENDOR_DSP_FOLDERS])


def test_target_names_are_matched_as_written():
    """The schema allows no whitespace in a target's soc, so the decision does not trim it (neither twin does)."""
    m = bundles.manifest(targets=("SM8750",))
    m["targets"][0]["soc"] = " SM8750"
    d = run(m)
    assert not d.npu and d.reason == "SoC SM8750 is not in the bundle (targets:  SM8750)"
    m["targets"][0]["soc"] = "SM8750P"  # an alias is the catalog model
    assert run(m).npu


def test_every_reason_comes_from_the_data_file_with_exactly_its_fields():
    keys = [k for templates in REASONS.values() for k in templates]
    assert len(keys) == len(set(keys)) and set(REASONS) == {"decide", "app"}
    assert reason("soc_not_in_bundle", soc="SM8650", targets="none") == (
        "soc_not_in_bundle", "SoC SM8650 is not in the bundle (targets: none)")
    assert template_fields(REASONS["decide"]["format_unsupported"]) == ["format", "version", "expected_format",
                                                                       "max_version"]
    with pytest.raises(ValueError, match="takes"):
        reason("soc_not_in_bundle", soc="SM8650")
    with pytest.raises(ValueError, match="takes"):
        reason("soc_unreported", soc="SM8650")
    with pytest.raises(ValueError, match="plain name"):
        template_fields("{soc!r}")
    with pytest.raises(ValueError, match="plain name"):
        template_fields("{soc:>8}")
    assert template_fields("{{literal}} {a} {b} {a}") == ["a", "b"]
    for d in (run(), run(device=DeviceIdentity("SM8650", None, 34)), run(bundles.manifest(format_version=3))):
        assert d.reason.startswith(REASONS["decide"][d.reason_key].split("{")[0])


def with_min_runtime(value: object, manifest: dict | None = None) -> dict:
    """A manifest whose qairt names the oldest runtime that loads its context binaries (built here: the schema and
    tests/support/bundles.py may not have the field yet)."""
    m = manifest or bundles.manifest()
    return {**m, "qairt": {**m["qairt"], "min_runtime": value}}


def test_a_runtime_older_than_the_bundle_needs_goes_to_cpu_with_the_versions():
    d = run(with_min_runtime("2.49.0"), runtime_version="2.48.9")
    assert not d.npu and d.reason_key == "runtime_too_old" and d.runtime_version == "2.48.9"
    assert d.reason == ("the QNN runtime that loaded is QAIRT 2.48.9, older than QAIRT 2.49.0 that this bundle's "
                        "context binaries need")
    assert d.paths == {"det": "cpu/det.onnx", "rec": "cpu/rec.onnx"}
    assert d.adsp_library_path is not None  # the libraries loaded (with it set) before the version was known
    assert not run(with_min_runtime("2.49.0"), runtime_version="2.9.0").npu  # numbers, not text: 9 < 49


@pytest.mark.parametrize("runtime", ["2.49.0", "2.49.1", "2.50.0", "3.0.0", "10.0.0", "02.049.000"])
def test_a_runtime_as_new_as_the_bundle_needs_or_newer_keeps_the_npu(runtime):
    d = run(with_min_runtime("2.49.0"), runtime_version=runtime)
    assert d.npu and d.runtime_version == runtime


def test_an_unknown_runtime_version_or_a_bundle_without_min_runtime_keeps_the_npu():
    d = run(with_min_runtime("2.49.0"), runtime_version=None)
    assert d.npu and d.runtime_version is None
    d = run(runtime_version="1.0.0")  # a bundle from before min_runtime: nothing to compare with
    assert d.npu and d.runtime_version == "1.0.0"


@pytest.mark.parametrize("runtime, required", [
    ("2.51", "2.49.0"), ("v2.48.0", "2.49.0"), ("2.48.0.260929181845", "2.49.0"), (" 2.48.0", "2.49.0"),
    ("2.48.0\n", "2.49.0"), ("\u0662.48.0", "2.49.0"), ("1234567890.0.0", "2.49.0"), ("", "2.49.0"),
    ("2.48.0", "2.49"), ("2.48.0", "v2.49.0"), ("2.48.0", ""), ("2.48.0", 2.49), ("2.48.0", None),
    ("2.48.0", "9999999999.0.0"), ("2.48.0", "2.49.0 "),
])
def test_a_malformed_version_on_either_side_refuses_nothing(runtime, required):
    """Only X.Y.Z with 1 to 9 ASCII digits a part is a version; anything else is unknown, and unknown keeps the NPU
    (the Kotlin twin has the same rule; tests/scaffold/test_kotlin.py feeds both these cases)."""
    d = run(with_min_runtime(required), runtime_version=runtime)
    assert d.npu and d.runtime_version == runtime


def test_the_runtime_version_is_recorded_only_once_the_libraries_loaded():
    m = with_min_runtime("2.49.0")
    assert run(m, load_errors={"libQnnHtp.so": "dlopen failed"}, runtime_version="2.48.0").runtime_version is None
    assert run(m, device=DeviceIdentity("SM8650", None, 34), runtime_version="2.48.0").runtime_version is None
    assert run({**m, "qairt": "not an object"}, runtime_version="2.48.0").npu


def test_a_shared_context_binary_serves_each_of_its_graphs():
    m = bundles.shared(bundles.manifest())
    assert schema_errors(m) == []
    binary = run(m, npu_format=CONTEXT_BINARY)
    assert binary.npu and binary.paths == {"det": "npu/SM8750/pair.bin", "rec": "npu/SM8750/pair.bin"}
    assert binary.files.count("npu/SM8750/pair.bin") == 1  # pushed and copied once, loaded once
    wrapped = run(m, npu_format=EPCONTEXT)
    assert wrapped.npu and wrapped.paths == {"det": "npu/SM8750/det_ctx.onnx", "rec": "npu/SM8750/rec_ctx.onnx"}
    assert "npu/SM8750/pair.bin" in wrapped.files
    lacking = run(bundles.shared(bundles.manifest(), graphs=("det", "x")), npu_format=CONTEXT_BINARY)
    assert not lacking.npu and lacking.reason_key == "graph_file_missing" and '"rec"' in lacking.reason


def test_a_split_models_cpu_part_runs_on_the_cpu_in_an_npu_decision():
    m = bundles.split(bundles.manifest())
    assert schema_errors(m) == []
    d = run(m, npu_format=EPCONTEXT)
    assert d.npu and d.cpu_graphs == ["det"]
    assert d.paths == {"det": "cpu/det.onnx", "rec": "npu/SM8750/rec_ctx.onnx"}
    assert "cpu/det.onnx" in d.files and "npu/SM8750/det.bin" not in d.files
    cpu = run(m, device=DeviceIdentity("SM8350", None, 34))  # no target: everything on the CPU, nothing singled out
    assert not cpu.npu and cpu.cpu_graphs == [] and cpu.paths == {"det": "cpu/det.onnx", "rec": "cpu/rec.onnx"}


# --- the third path: the NPU from the ONNX the phone compiles (bundle build --on-device-compile) ---------------------

SM8845 = DeviceIdentity("SM8845", None, 36)  # v81, no target in the fixture bundle (SM8550, SM8750)


def test_a_soc_without_a_target_compiles_on_the_device_when_its_arch_was_validated():
    m = bundles.on_device(bundles.manifest(runtime="bundled", targets=("SM8550", "SM8750", "SM8850")))
    assert schema_errors(m) == []
    d = run(m, SM8845)
    assert d.npu and d.npu_source == "on-device" and d.reason_key == "npu_on_device"
    assert (d.soc, d.dsp_arch, d.soc_id, d.compile_budget_s) == ("SM8845", "v81", 97, 60)
    assert d.paths == {"det": "cpu/det.onnx", "rec": "cpu/rec.onnx"} and d.files == ["cpu/det.onnx", "cpu/rec.onnx"]
    assert d.ep_options == {"det": bundles.ON_DEVICE_OPTIONS, "rec": bundles.ON_DEVICE_OPTIONS}
    assert d.reason == ("SoC SM8845 (v81) is not in the bundle; the app compiles the model for it on the device "
                        "(validated for v81) and the QNN libraries loaded")
    assert run(m).npu_source == "prebuilt"  # a SoC with a target still takes its context binaries
    # without the section, the same phone takes the CPU as before
    assert run(bundles.manifest(), SM8845).reason_key == "soc_not_in_bundle"


def test_an_arch_that_was_not_validated_takes_the_cpu_with_its_reason():
    m = bundles.on_device(bundles.manifest())
    d = run(m, DeviceIdentity("SM8350", None, 33))  # v68: not validated (no fp16 on its HTP)
    assert not d.npu and d.npu_source is None and d.reason_key == "not_validated_on_device"
    assert d.reason == ("SoC SM8350 (v68) is not in the bundle (targets: SM8550, SM8750) and the bundle's on-device "
                        "compile was not validated for v68 (validated: v69, v73, v75, v79, v81, v85)")
    # one graph not validated for the arch is enough
    partial = bundles.on_device(bundles.manifest(), validated={"det": ["v81"], "rec": ["v79"]})
    d = run(partial, SM8845)
    assert not d.npu and d.reason.endswith("not validated for v81 (validated: v79)")


def test_a_soc_the_catalog_does_not_know_needs_the_platform_info_of_the_qnn_backend():
    from qnndeploy.decide.decision import Platform

    m = bundles.on_device(bundles.manifest())
    unknown = DeviceIdentity("SM9999", None, 36)
    assert run(m, unknown).reason_key == "arch_unknown"
    d = run(m, unknown, platform=Platform(200, "v81"))
    assert d.npu and (d.soc, d.dsp_arch, d.soc_id) == ("SM9999", "v81", 200)
    assert run(m, unknown, platform=Platform(200, "v99")).reason_key == "not_validated_on_device"
    # a phone that names no SoC at all: the platform info alone
    d = run(m, DeviceIdentity(None, "newchip", 36), platform=Platform(201, "v85"))
    assert d.npu and d.soc is None and d.reason.startswith("SoC soc_model 201 (v85) is not in the bundle;")
    assert run(m, DeviceIdentity(None, "newchip", 36)).reason_key == "soc_not_in_catalog"
    # a catalog SoC goes by the catalog's arch, whatever the backend says
    assert run(m, SM8845, platform=Platform(1, "v68")).dsp_arch == "v81"


def test_the_on_device_path_loads_the_same_libraries_and_remembers_failures():
    m = bundles.on_device(bundles.manifest(runtime="bundled"))
    d = run(m, SM8845)  # the bundle ships v73 and v79 libraries only
    assert d.reason_key == "runtime_libs_missing" and "libQnnHtpV81Stub.so" in d.reason
    m = bundles.on_device(bundles.manifest())
    assert run(m, SM8845, load_errors={"libQnnHtpV81Stub.so": "dlopen failed"}).reason_key == "libs_not_loaded"
    failed = Remembered("1.0", "demo 1.0.0", "on-device compile failed: x")
    assert run(m, SM8845, app_version="1.0", remembered=failed).reason_key == "failed_before"
    assert run(m, SM8845, app_version="1.1", remembered=failed).npu


def test_a_runtime_older_than_any_measured_for_the_arch_takes_the_cpu():
    from qnndeploy.decide.decision import arch_min_qairt

    oldest = arch_min_qairt()
    assert oldest["v81"] == min((r.qairt for s in socs.catalog() for r in s.measured if r.arch == 81),
                                key=lambda v: tuple(map(int, v.split("."))))
    m = bundles.on_device(bundles.manifest())
    d = run(m, SM8845, runtime_version="2.20.0")
    assert d.reason_key == "runtime_too_old_for_arch" and d.runtime_version == "2.20.0"
    assert d.reason == (f"the QNN runtime that loaded is QAIRT 2.20.0, older than QAIRT {oldest['v81']}, the oldest "
                        "measured to compile for v81")
    assert run(m, SM8845, runtime_version=oldest["v81"]).npu
    assert run(m, SM8845, runtime_version=None).npu  # unknown: a failure is remembered instead


def test_on_device_models_of_their_own_and_cpu_only_parts():
    m = bundles.on_device(bundles.split(bundles.manifest()), own=("rec",))
    assert schema_errors(m) == []
    d = run(m, SM8845)
    assert d.npu and d.paths == {"det": "cpu/det.onnx", "rec": "on-device/rec.onnx"} and d.cpu_graphs == ["det"]
    assert sorted(d.files) == ["cpu/det.onnx", "on-device/rec.onnx", "on-device/rec.onnx.data"]
    assert list(d.ep_options) == ["rec"]


def test_the_schema_keeps_on_device_to_format_4():
    m = bundles.on_device(bundles.manifest())
    assert any("on_device" in e or "should not be valid" in e for e in schema_errors({**m, "format_version": 3}))
    bad = {**m, "on_device": {**m["on_device"], "budget_s": 0}}
    assert schema_errors(bad)


def test_an_engine_that_runs_context_binaries_only_cannot_compile_on_the_device():
    m = bundles.on_device(bundles.manifest())
    d = run(m, SM8845, compiles_onnx=False)  # the sherpa-onnx glue: it loads context binaries, never an ONNX
    assert not d.npu and d.reason_key == "on_device_needs_ort"
    assert d.reason.startswith("SoC SM8845 (v81) is not in the bundle (targets: SM8550, SM8750), and this app's engine")
    assert run(m, DeviceIdentity("SM8750", None, 35), compiles_onnx=False).npu  # its own targets are unaffected

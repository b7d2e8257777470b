"""`bundle build --on-device-compile`: the bundle lists, per graph, the HTP arches for which the ONNX the phone
compiles was compiled here exactly as the phone's QNN EP will compile it (real onnxruntime-qnn) and matched its CPU
model on the host HTP emulator; verify holds the list to its records, and the decision takes the third path only
for those arches.

The builds are real: the demo model compiled for one SoC, and a graph whose fp16 arithmetic overflows (x * 1e5:
65,504 is fp16's largest number), which compiles for every arch and fails every comparison.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from qnndeploy.base.names import FORMAT_VERSION
from qnndeploy.decide.decision import DeviceIdentity, decide
from qnndeploy.formats.manifest import Manifest
from qnndeploy.formats.ondevicerecord import OnDeviceRecord
from qnndeploy.qnn import htp, ondevice
from qnndeploy.verification.checks import verify_bundle
from tests.support.cli import run
from tests.support.host import require


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """The demo's build (SM8750 only) bundled with --on-device-compile."""
    require(htp.available(), "onnxruntime-qnn")
    root = tmp_path_factory.mktemp("on-device")
    assert run("demo", "-o", root / "demo", "--soc", "SM8750").exit_code == 0
    done = run("bundle", "build", "--name", "kws", "--version", "1.0.0", "--from-build", root / "demo" / "build",
               "--on-device-compile", "--compile-budget", "45", "--optimization-mode", "3", "-o", root / "out")
    assert done.exit_code == 0, done.output
    assert "compiling kws_demo for SM8845 (v81) as the phone's QNN EP would" in done.stderr
    return root / "out" / "kws-1.0.0"


def test_the_bundle_lists_the_arches_its_on_device_compile_passed_on(demo):
    raw = json.loads((demo / "manifest.json").read_text())
    m = Manifest.parse(raw)
    assert json.dumps(m.to_json()) == json.dumps(raw)  # an on-device bundle's manifest both ways
    assert m.format_version == FORMAT_VERSION and m.on_device is not None and m.on_device.budget_s == 45
    [g] = m.on_device.graphs
    qairt = m.qairt.version
    expected = [s.dsp_arch for s in ondevice.arch_socs(qairt, "fp16")]
    assert expected[0] == "v69" and "v81" in expected and "v68" not in expected
    assert list(g.validated) == expected
    # the CPU model is the file the phone compiles: listed once, no second copy
    assert g.path == "cpu/kws_demo.onnx" and m.on_device.artifacts == ()
    assert dict(g.ep_options) == {"enable_htp_fp16_precision": "1", "htp_graph_finalization_optimization_mode": "3"}
    for arch in expected:
        record = json.loads((demo / "records" / f"kws_demo-on-device-{arch}.json").read_text())
        assert record["passed"] is True and record["qairt"] == qairt and record["ep_options"] == dict(g.ep_options)
        assert json.dumps(OnDeviceRecord.parse(record).to_json()) == json.dumps(record)  # strict, as written
        assert record["compile_s"] > 0 and record["outputs"][0]["snr_db"] > 30
    assert verify_bundle(demo).ok


def test_the_decision_compiles_on_an_untargeted_phone_of_a_validated_arch_only(demo):
    m = Manifest.parse(json.loads((demo / "manifest.json").read_text()))
    d = decide(m, DeviceIdentity("SM8845", None, 36), load_errors={}, lib_dir="/x")
    assert d.npu and d.npu_source == "on-device" and d.paths == {"kws_demo": "cpu/kws_demo.onnx"}
    assert d.ep_options["kws_demo"]["htp_graph_finalization_optimization_mode"] == "3"
    d = decide(m, DeviceIdentity("SM8350", None, 33), load_errors={}, lib_dir="/x")
    assert not d.npu and d.reason_key == "not_validated_on_device" and "(v68)" in d.reason
    assert decide(m, DeviceIdentity("SM8750", None, 35), load_errors={}, lib_dir="/x").npu_source == "prebuilt"


def _rewrite(bundle: Path, tmp: Path, change) -> Path:
    copy = tmp / bundle.name
    shutil.copytree(bundle, copy)
    m = json.loads((copy / "manifest.json").read_text())
    change(m, copy)
    (copy / "manifest.json").write_text(json.dumps(m))
    return copy


def _rehash(m: dict, copy: Path, rel: str) -> None:
    import hashlib

    entry = next(r for r in m["records"] if r["path"] == rel)
    data = (copy / rel).read_bytes()
    entry.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))


@pytest.mark.parametrize("change, says", [
    (lambda m, c: m["on_device"]["graphs"][0]["validated"].append("v99"),
     "validated for v99, but the bundle has no records/kws_demo-on-device-v99.json"),
    (lambda m, c: m["on_device"]["graphs"][0]["ep_options"].update(vtcm_mb="2"),
     "does not show graph 'kws_demo' passing on v69 with on_device's EP options"),
    (lambda m, c: m["on_device"]["graphs"][0].update(path="cpu/other.onnx"),
     "the manifest lists no ONNX model of that graph there"),
    (lambda m, c: m["on_device"]["graphs"][0]["validated"].reverse(), "must be unique and ascending"),
])
def test_verify_holds_the_list_to_its_records(demo, tmp_path, change, says):
    report = verify_bundle(_rewrite(demo, tmp_path, change), deep=False)
    assert not report.ok and any(says in p.message for p in report.problems), report.problems


def test_a_record_that_says_failed_cannot_back_a_validated_arch(demo, tmp_path):
    def flip(m, copy):
        rel = "records/kws_demo-on-device-v81.json"
        record = json.loads((copy / rel).read_text())
        (copy / rel).write_text(json.dumps({**record, "passed": False}))
        _rehash(m, copy, rel)

    report = verify_bundle(_rewrite(demo, tmp_path, flip), deep=False)
    assert [p.path for p in report.problems] == ["records/kws_demo-on-device-v81.json"]



def _forge(arch: str, soc: str, soc_id: int):
    """A record for `arch` copied from v81's, as its records agree with the list: the arch added to the list too."""
    def change(m, copy):
        record = json.loads((copy / "records" / "kws_demo-on-device-v81.json").read_text())
        rel = f"records/kws_demo-on-device-{arch}.json"
        (copy / rel).write_text(json.dumps({**record, "arch": arch, "soc": soc, "soc_id": soc_id}))
        entry = next(r for r in m["records"] if r["path"] == "records/kws_demo-on-device-v81.json")
        m["records"].append({**entry, "path": rel})
        _rehash(m, copy, rel)
        validated = m["on_device"]["graphs"][0]["validated"]
        validated[:] = sorted({*validated, arch}, key=lambda a: int(a[1:]))
    return change


@pytest.mark.parametrize("arch, soc, soc_id, says", [
    ("v68", "SM8350", 30, "validated for v68, which QAIRT"),  # in the catalog: CPU-only, no fp16
    ("v99", "SM9999", 999, "validated for v99, which is not an HTP arch of the SoC catalog"),
])
def test_an_arch_bundle_build_could_never_validate_is_refused(demo, tmp_path, arch, soc, soc_id, says):
    report = verify_bundle(_rewrite(demo, tmp_path, _forge(arch, soc, soc_id)), deep=False)
    assert not report.ok and any(says in p.message for p in report.problems), report.problems


def test_a_record_that_says_passed_over_failing_figures_is_refused(demo, tmp_path):
    def lie(m, copy):
        rel = "records/kws_demo-on-device-v81.json"
        record = json.loads((copy / rel).read_text())
        record["outputs"][0].update(cosine=0.5, snr_db=3.0, argmax_agreement=0.5, passed=True)
        (copy / rel).write_text(json.dumps(record))
        _rehash(m, copy, rel)

    report = verify_bundle(_rewrite(demo, tmp_path, lie), deep=False)
    assert [p.path for p in report.problems] == ["records/kws_demo-on-device-v81.json"], report.problems
    assert "passed on v81, but its output" in report.problems[0].message
    assert "fails: top-1 agreement 0.5 (needs >= 1)" in report.problems[0].message  # a classifier: its labels


def test_a_record_a_task_decided_is_held_to_its_task_figures(demo, tmp_path):
    """An output a task verdict decides (a recognizer's text, an embedding's cosine) is judged again on the task's
    figures, not the tensor rules its evidence may fail: what bundle build accepted, verify accepts."""
    def record_task(figures, cosine):
        def edit(m, copy):
            rel = "records/kws_demo-on-device-v81.json"
            record = json.loads((copy / rel).read_text())
            name = record["outputs"][0]["name"]
            record["outputs"][0].update(cosine=cosine, snr_db=3.0, passed=False)  # the tensor figures fail
            record["task"] = {"kind": "ocr", "output": name, "passed": True, "summary": "the same text",
                              "figures": figures}
            (copy / rel).write_text(json.dumps(record))
            _rehash(m, copy, rel)
        return edit

    same = verify_bundle(_rewrite(demo, tmp_path / "same", record_task({"error_rate": 0.0}, 0.5)), deep=False)
    assert same.problems == [], same.problems
    worse = verify_bundle(_rewrite(demo, tmp_path / "worse", record_task({"error_rate": 0.25}, 0.5)), deep=False)
    (problem,) = worse.problems
    assert "its task verdict fails: ocr error_rate 0.25 (needs <= 0)" in problem.message, problem


def test_a_graph_that_fails_on_the_emulator_is_validated_for_no_arch(tmp_path):
    """fp16 overflows: the compile succeeds for every arch, the comparison with the CPU fails for every arch."""
    require(htp.available(), "onnxruntime-qnn")
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from qnndeploy.compile import compile_models

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])
    scale = helper.make_tensor("k", TensorProto.FLOAT, [1], np.array([1e5], dtype=np.float32))
    graph = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "big", [x], [y], [scale])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "big.onnx")
    assert compile_models({"big": tmp_path / "big.onnx"}, ["SM8750"], tmp_path / "build").ok
    done = run("bundle", "build", "--name", "big", "--version", "1", "--from-build", tmp_path / "build",
               "--on-device-compile", "-o", tmp_path / "out", "--json")
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["on_device"] == [{"graph": "big", "path": "cpu/big.onnx",
                                    "ep_options": {"enable_htp_fp16_precision": "1"}, "validated": []}]
    record = json.loads((tmp_path / "out" / "big-1" / "records" / "big-on-device-v81.json").read_text())
    assert record["passed"] is False and record["compile_s"] > 0
    m = Manifest.parse(json.loads((tmp_path / "out" / "big-1" / "manifest.json").read_text()))
    assert decide(m, DeviceIdentity("SM8845", None, 36), load_errors={}, lib_dir="/x").reason_key == \
        "not_validated_on_device"


def test_the_phone_compile_options_need_on_device_compile(tmp_path):
    done = run("bundle", "build", "--name", "x", "--version", "1", "--cpu", f"g={tmp_path / 'g.onnx'}",
               "--compile-budget", "30")
    assert done.exit_code == 2 and "need --on-device-compile" in done.output
    assert "Traceback" not in done.output


def test_a_bundled_runtime_ships_the_libraries_of_the_arches_phones_may_compile_for(demo, tmp_path):
    """A v81 phone compiling on the device loads libQnnHtpV81Stub.so like any other: the bundle ships the Stub and
    Skel of every arch the SDK has from v69 up, not only the targets' (v79 here); an arch the SDK lacks is left out."""
    from tests.support.elfgen import fake_sdk

    m = json.loads((demo / "manifest.json").read_text())
    sdk = fake_sdk(tmp_path / "sdk", ["v68", "v73", "v79", "v81"], build=m["qairt"]["build"])
    build = demo.parent.parent / "demo" / "build"
    done = run("bundle", "build", "--name", "kws", "--version", "2.0.0", "--from-build", build, "--on-device-compile",
               "--qnn-sdk-root", sdk, "-o", tmp_path / "out")
    assert done.exit_code == 0, done.output
    bundled = Manifest.parse(json.loads((tmp_path / "out" / "kws-2.0.0" / "manifest.json").read_text()))
    archs = sorted({lib.dsp_arch for lib in bundled.runtime.libs if lib.dsp_arch})
    assert archs == ["v73", "v79", "v81"]
    assert decide(bundled, DeviceIdentity("SM8845", None, 36), load_errors={}, lib_dir="/x").npu_source == "on-device"
    # v85: validated, not in the SDK
    d = decide(bundled, DeviceIdentity("SM8950", None, 36), load_errors={}, lib_dir="/x")
    assert d.reason_key == "runtime_libs_missing" and "libQnnHtpV85Stub.so" in d.reason

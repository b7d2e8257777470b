"""Each file kind both ways: a value of its type written with to_json, parsed strictly, is the same value; and the
files the suite's real runs write (the demo's build and bundle) parse strictly and are what their types write."""

from __future__ import annotations

import dataclasses
import json

import pytest

from qnndeploy.base.errors import BadInput
from qnndeploy.base.fileio import write_json
from qnndeploy.base.kinds import BackendName, Precision
from qnndeploy.base.names import MANIFEST
from qnndeploy.formats import benchrecord, estimaterecord, playplan, schemas
from qnndeploy.formats.devicerecord import DeviceRecord
from qnndeploy.formats.manifest import (
    BundleFile,
    BundleLoop,
    FileFormat,
    Graph,
    LibRole,
    Licences,
    Manifest,
    OnDevice,
    OnDeviceGraph,
    Origin,
    OriginKind,
    Qairt,
    QualcommFile,
    Runtime,
    RuntimeMode,
    Source,
    Target,
    Tensor,
)
from qnndeploy.formats.ondevicerecord import OnDeviceRecord
from qnndeploy.formats.records import (
    RECORD_FILE,
    VALIDATION_FILE,
    JobFile,
    JobInput,
    JobRecord,
    RecordMember,
    RecordStatus,
    SplitPart,
    SplitRecord,
    ValidationRecord,
    read_build,
)
from qnndeploy.model import decode
from qnndeploy.package.play import package_play
from tests.report.bench_fixture import bench_record

SHA = "ab" * 32


def _file(path: str, **kind: object) -> BundleFile:
    return BundleFile(path, SHA, 10, **kind)  # type: ignore[arg-type]


def _manifest(runtime: Runtime) -> Manifest:
    validation = {"passed": False, "graphs": {"enc": {"passed": False, "accepted": {"reason": "known", "by": "x"}}}}
    loop = decode.Loop("enc", "dec", "x", "token", "pos", None, "logits", (("k", "enc_out"),), (("c", "c_out"),),
                       (1, 2), 3, 16)
    return Manifest(
        name="m", version="1.0.0", created_by="qnndeploy 0", qairt=Qairt("2.50.0", "v2.50.0.1", "2.50.0"),
        source=Source("m", SHA, "abc", "MIT"),
        graphs=(Graph("enc", (Tensor("x", "float32", (1, "n")),), (Tensor("enc_out", "float32", (1, 4)),)),
                Graph("dec", (Tensor("token", "int32", (1, 1)),), (Tensor("logits", "float32", (1, 1, 9)),),
                      cpu_only=True)),
        targets=(Target("SM8750", 69, "v79", "fp16",
                        (_file("npu/SM8750/enc.bin", graph="enc", format=FileFormat.QNN_CONTEXT_BINARY),
                         _file("npu/SM8750/shared.bin", graphs=("enc", "dec"), format=FileFormat.QNN_CONTEXT_BINARY)),
                        validation, {"enc": "known"}, "cpu", {"vtcm_mb": 8, "optimization_mode": 3,
                                                              "spill_fill": True}),
                 Target("SM8650", 57, "v75", "fp16", (_file("npu/SM8650/enc_ctx.onnx", graph="enc",
                                                             format=FileFormat.ORT_EPCONTEXT),))),
        cpu=(_file("cpu/enc.onnx", graph="enc", format=FileFormat.ONNX),
             _file("cpu/enc.data", graph="enc", format=FileFormat.ONNX_EXTERNAL_DATA)),
        runtime=runtime, records=(_file("records/enc-SM8750-validation.json"),),
        htp_performance_mode="burst", pipeline_order=("enc", "dec"),
        on_device=OnDevice(30.0, (OnDeviceGraph("enc", "cpu/enc.onnx", {"vtcm_mb": "8"}, ("v75", "v79")),),
                           (_file("ondevice/enc.onnx", graph="enc", format=FileFormat.ONNX),)),
        loop=BundleLoop(loop, _file("loop/tokenizer.json")),
        licences=Licences((Origin("sdk", OriginKind.QAIRT_SDK, "the SDK's root", "2.50.0", "v2.50.0.1", None,
                                  (_file("licences/sdk/LICENSE"),)),
                           Origin("maven", OriginKind.MAVEN, "Maven Central", coordinate="com.qualcomm.qti:x:1")),
                          (QualcommFile("npu/SM8750/enc.bin", SHA, "sdk"), QualcommFile("lib/a.so", SHA, "sdk", SHA))))


@pytest.mark.parametrize("runtime", [
    Runtime(RuntimeMode.BUNDLED, (_file("lib/arm64-v8a/libQnnHtp.so", role=LibRole.HTP, abi="arm64-v8a"),
                                  _file("lib/hexagon-v79/libQnnHtpV79Skel.so", role=LibRole.SKEL, abi="hexagon-v79",
                                        dsp_arch="v79"))),
    Runtime(RuntimeMode.EXTERNAL, maven="com.qualcomm.qti:qnn-runtime:2.50.0"),
], ids=["bundled", "external"])
def test_a_manifest_written_and_parsed_is_the_same_and_follows_the_schema(runtime):
    written = _manifest(runtime)
    data = json.loads(json.dumps(written.to_json()))
    assert schemas.problems("manifest", data) == []
    assert Manifest.parse(data) == written


def test_the_demo_bundle_s_manifest_parses_strictly_and_is_what_its_type_writes(demo_bundle):
    text = (demo_bundle / MANIFEST).read_text()
    data = json.loads(text)
    assert schemas.problems("manifest", data) == []
    parsed = Manifest.parse(data)
    assert json.dumps(parsed.to_json()) == json.dumps(data)  # key for key, in the file's order


def test_the_demo_build_s_records_parse_strictly(demo_run):
    build = demo_run / "build"
    compiled = list(build.rglob(RECORD_FILE))
    validated = list(build.rglob(VALIDATION_FILE))
    assert compiled and validated
    for path in compiled:
        assert schemas.problems("compile-record", json.loads(path.read_text())) == [], path
    for path in validated:
        data = json.loads(path.read_text())
        assert schemas.problems("validation-record", data) == [], path
        assert json.dumps(ValidationRecord.parse(data, path).to_json()) == json.dumps(data)  # key for key
    assert {(r.graph, r.soc) for r in read_build(build)}


def test_a_bench_record_written_and_parsed_is_the_same():
    record = benchrecord.read(bench_record())
    data = json.loads(json.dumps(record.to_json()))
    assert benchrecord.parse(data) == record
    with pytest.raises(BadInput, match="not a valid bench record: record_version"):
        benchrecord.parse({**data, "record_version": 99})


def test_an_estimate_record_written_and_parsed_is_the_same():
    cost = estimaterecord.CostModel("QCS9100", "2.50.40", 1497.6, "x", 1, 1, 2, 1.0, 0.9, 1.1)
    record = estimaterecord.EstimateRecord(
        estimaterecord.RECORD, 1, "g", "SM8750", "fp16", "/m.onnx", None, 0.5, 0.4, 0.6, None, 0.39, "26 models",
        cost, 1, 2, 0, ("a warning",), "f", estimaterecord.NOT_CLAIMED, "estimate", "0", "2026-12-05T00:00:00+00:00")
    data = json.loads(json.dumps(record.to_json()))
    assert estimaterecord.parse(data) == record
    with pytest.raises(BadInput, match="not a valid estimate record"):
        estimaterecord.parse({**data, "ms": "fast"})


def test_a_split_record_written_and_parsed_is_the_same(tmp_path):
    path = tmp_path / "m.split.json"
    record = SplitRecord(path, (SplitPart("head", tmp_path / "m-head.onnx", SHA, "cpu", ("x",), ("cut",)),
                                SplitPart("tail", tmp_path / "m-tail.onnx", SHA, "npu", ("cut",), ("y",))),
                         ("cut",), "/models/m.onnx", SHA, "0", "2026-12-05T00:00:00+00:00")
    assert SplitRecord.parse(json.loads(json.dumps(record.to_json())), path) == record
    with pytest.raises(BadInput, match="not a split record"):
        SplitRecord.parse({**record.to_json(), "order": ["head", "middle"]}, path)


def test_a_device_verify_record_written_and_parsed_is_the_same():
    record = DeviceRecord(
        True, "passed", {"serial": "emulator-5554", "model": "Phone", "android_release": "15", "sdk": 35},
        {"model": "SM8750", "identified_by": "ro.soc.model", "dsp_arch": "v79"},
        {"name": "b", "version": "1", "qairt_version": "2.50.0", "qairt_build": None, "path": "/b"},
        {"provider": "npu", "npu_source": "prebuilt", "compile_budget_s": None, "reason": "r", "expectation": "e"},
        {"remote_dir": "/data/local/tmp/qnndeploy/b"}, {"path": "/r", "local": None, "note": None},
        None, None, ({"graph": "g", "status": "passed"},), None, "0", "2026-12-05T00:00:00+00:00")
    assert DeviceRecord.parse(json.loads(json.dumps(record.to_json()))) == record
    with pytest.raises(BadInput, match="'outcome'"):
        DeviceRecord.parse({**record.to_json(), "outcome": "fine"})


def test_an_on_device_validation_record_written_and_parsed_is_the_same():
    record = OnDeviceRecord("g", "v79", "SM8750", 69, "2.50.0", {"enable_htp_fp16_precision": "1"},
                            {"kind": "random", "samples": 4, "seed": 0}, 1.5, True, None,
                            ({"name": "y", "passed": True, "snr_db": 40.0},), {"kind": "classify", "passed": True})
    assert OnDeviceRecord.parse(json.loads(json.dumps(record.to_json()))) == record


def _compile_record(**changed: object) -> JobRecord:
    record = JobRecord(
        "llm", "SM8750", 69, "v79", BackendName.ORT, "2.50.0", "v2.50.0.1", Precision.W8A16,
        {"htp_arch": 79, "calibration": None, "share_ep_contexts": True}, {"qnndeploy": "0", "onnxruntime": "1.22"},
        None, (RecordMember("prefill", JobInput("/m/prefill.onnx", SHA), {"path": "/c", "files": 1, "samples": 1,
                                                                          "sha256": SHA}),
               RecordMember("decode", JobInput("/m/decode.onnx", SHA), None)),
        (JobFile("llm.bin", SHA, 10, "qnn-context-binary"), JobFile("prefill_ctx.onnx", SHA, 2, "ort-epcontext",
                                                                    "prefill"),
         JobFile("prefill_alone.bin", SHA, 9, "qnn-context-binary", "prefill", twin=True)),
        "logs/llm-SM8750.log", "2026-12-05T00:00:00+00:00", 1.25, ("a warning",), RecordStatus.OK, None, SHA,
        {"blob_version": "3.3.0", "build": "v2.50.0.1", "dsp_arch": "v79", "soc_model": 69, "graphs": []},
        {"shared_bytes": 10, "separate_bytes": 19}, None)
    return dataclasses.replace(record, **changed)  # type: ignore[arg-type]


@pytest.mark.parametrize("changed", [
    {},  # a shared context, its binary read back
    {"graph": "enc", "members": (), "input": JobInput("/m/enc.onnx", SHA), "context": None, "shared": None,
     "aihub": {"job_id": "j", "url": "u", "device": "d", "chipset": "c"}},
    {"members": (), "input": JobInput("/m/enc.onnx", SHA), "outputs": (), "status": RecordStatus.FAILED,
     "error": "it broke", "context": None, "shared": None, "qairt_build": None},
])
def test_a_compile_record_written_and_parsed_is_the_same_and_follows_the_schema(tmp_path, changed):
    record = _compile_record(**changed)
    data = json.loads(json.dumps(record.to_json()))
    assert schemas.problems("compile-record", data) == []
    assert JobRecord.parse(data, tmp_path / RECORD_FILE) == record
    with pytest.raises(BadInput, match="not a qnndeploy compile record"):
        JobRecord.parse({**data, "status": "done"}, tmp_path / RECORD_FILE)


def test_the_demo_build_s_compile_records_parse_strictly_and_are_what_their_type_writes(demo_run):
    paths = list((demo_run / "build").rglob(RECORD_FILE))
    assert paths
    for path in paths:
        text = path.read_text()
        record = JobRecord.parse(json.loads(text), path)
        assert json.dumps(record.to_json(), indent=2) + "\n" == text  # byte for byte, as write_json writes it


def test_a_play_plan_written_and_parsed_is_the_same_and_follows_the_schema():
    soc = playplan.PlaySoc("QTI", "SM8750")
    plan = playplan.PlayPlan(
        "m", "1.0.0", SHA, (playplan.PlanPack("qnndeploy_models", "qnndeploy_npu"),
                            playplan.PlanPack("qnndeploy_models_2", "qnndeploy_npu_2")), playplan.Delivery.ON_DEMAND,
        (playplan.PlanGroup("sm8750", ("SM8750",), "v79", (soc, playplan.PlaySoc("Qualcomm", "SM8750")),
                            (playplan.PlanFile("npu/SM8750/enc.bin", 10, SHA, "qnndeploy_models"),
                             playplan.PlanFile("npu/SM8750/dec.bin", 12, SHA, "qnndeploy_models_2")), 22, 17),),
        playplan.PlanBase((playplan.PlanFile(MANIFEST, 5, SHA), playplan.PlanFile("cpu/enc.onnx", 9, SHA)), 14, 12,
                          "com.qualcomm.qti:qnn-runtime:2.50.0"),
        24, 19, playplan.PlanOnDevice(("cpu/enc.onnx",), ("v79", "v81"), 60, 9, 8))
    data = json.loads(json.dumps(plan.to_json()))
    assert schemas.problems("play", data) == []
    assert playplan.PlayPlan.parse(data) == plan
    assert "on_device" not in dataclasses.replace(plan, on_device=None).to_json()  # absent, as package play writes it
    with pytest.raises(BadInput, match="not a Play plan"):
        playplan.PlayPlan.parse({**data, "delivery": "someday"})
    with pytest.raises(BadInput, match="not a Play plan"):
        playplan.PlayPlan.parse({**data, "one_apk": {"bytes": "24", "deflated": 19}})
    with pytest.raises(BadInput, match="not a Play plan"):  # a group file in a pack the plan does not name
        playplan.PlayPlan.parse({**data, "packs": data["packs"][:1]})
    with pytest.raises(BadInput, match="not a Play plan"):  # version 1: one pack, no pack per file
        playplan.PlayPlan.parse({**data, "format_version": 1})


@pytest.mark.slow
def test_the_demo_bundle_s_play_plan_parses_strictly_and_is_what_its_type_writes(demo_bundle, tmp_path):
    out = tmp_path / "play"
    package_play(demo_bundle, out)
    written = (out / playplan.PLAN).read_bytes()
    plan = playplan.PlayPlan.parse(json.loads(written))
    assert plan.groups and plan == playplan.read_plan(out)
    write_json(tmp_path / "again.json", plan.to_json())
    assert (tmp_path / "again.json").read_bytes() == written  # byte for byte

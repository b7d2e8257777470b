"""bundle and bundle verify, on real QNN context binaries (onnxruntime-qnn) and stand-in runtime libraries."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from qnndeploy.base import compat
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.base.names import FORMAT_VERSION
from qnndeploy.bundle.build import BundleSpec, build_bundle
from qnndeploy.qnn import htp
from qnndeploy.verification.checks import verify_bundle
from tests.support.bundles import rehash, with_external_data
from tests.support.cli import run
from tests.support.elfgen import BUILD, QAIRT, android_lib, elf_bytes, fake_sdk, skel_lib
from tests.support.host import require

MIN = compat.min_runtime_for_qairt(QAIRT)  # what the pinned compiler's binaries need

if TYPE_CHECKING:
    import onnx

GRAPHS = ("enc", "dec")
SOCS = ("SM8550", "SM8750")


def tiny_model(path: Path, width: int) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])
    w = helper.make_tensor("w", TensorProto.FLOAT, [width, width], np.random.default_rng(0).random(width * width))
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "g", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="session")
def inputs(tmp_path_factory) -> dict:
    """Two graphs, each compiled for two SoCs by the real QNN HTP compiler of onnxruntime-qnn."""
    require(htp.available(), "onnxruntime-qnn")
    import onnxruntime as ort

    from qnndeploy.base import socs

    root = tmp_path_factory.mktemp("inputs")
    cpu = {g: tiny_model(root / f"{g}.onnx", 16 * (i + 1)) for i, g in enumerate(GRAPHS)}
    npu: dict = {}
    for soc in SOCS:
        for g, model in cpu.items():
            ctx = root / soc / f"{g}_ctx.onnx"
            ctx.parent.mkdir(exist_ok=True)
            ort.InferenceSession(str(model), htp.session_options(socs.find(soc), context_path=ctx))
            npu.setdefault(soc, {})[g] = [root / soc / f"{g}_ctx_qnn.bin"]
    sdk = fake_sdk(root / "sdk", ["v73", "v75", "v79"])
    return {"cpu": cpu, "npu": npu, "sdk": sdk, "root": root}


def spec(inputs, **kw) -> BundleSpec:
    base = dict(name="demo", version="1.0.0", cpu=inputs["cpu"], npu=inputs["npu"], sdk_root=inputs["sdk"],
                license="Apache-2.0", commit="abc123")
    return BundleSpec(**{**base, **kw})


@pytest.fixture
def bundle(inputs, tmp_path) -> Path:
    return build_bundle(spec(inputs), tmp_path).path


def manifest(b: Path) -> dict:
    return json.loads((b / "manifest.json").read_text())


def problems(b: Path, allow_unchecked: bool = False) -> list[str]:
    report = verify_bundle(b, allow_unchecked=allow_unchecked)
    assert not report.ok
    return [f"{p.path}: {p.message}" for p in report.problems]


# --- building --------------------------------------------------------------------------------------------------

def test_bundle_layout_and_manifest(bundle):
    m = manifest(bundle)
    assert bundle.name == "demo-1.0.0"
    assert m["format"] == "qnndeploy-bundle" and m["format_version"] == FORMAT_VERSION
    assert m["qairt"] == {"version": QAIRT, "build": BUILD, "min_runtime": MIN}
    assert [t["soc"] for t in m["targets"]] == ["SM8550", "SM8750"]
    assert {(t["soc_id"], t["dsp_arch"]) for t in m["targets"]} == {(43, "v73"), (69, "v79")}
    for t in m["targets"]:
        assert sorted(a["path"] for a in t["artifacts"]) == [f"npu/{t['soc']}/dec.bin", f"npu/{t['soc']}/enc.bin"]
    assert sorted(a["path"] for a in m["cpu"]) == ["cpu/dec.onnx", "cpu/enc.onnx"]
    assert m["graphs"][0] == {"name": "enc", "inputs": [{"name": "x", "dtype": "float32", "shape": [1, 16]}],
                              "outputs": [{"name": "y", "dtype": "float32", "shape": [1, 16]}]}
    libs = {lib["path"]: lib for lib in m["runtime"]["libs"]}
    # only the Stub/Skel of the targets' archs: the SDK also has v75, which no target needs
    assert sorted(libs) == sorted([
        "lib/arm64-v8a/libQnnHtp.so", "lib/arm64-v8a/libQnnSystem.so", "lib/arm64-v8a/libQnnHtpPrepare.so",
        "lib/arm64-v8a/libQnnHtpV73Stub.so", "lib/hexagon-v73/libQnnHtpV73Skel.so",
        "lib/arm64-v8a/libQnnHtpV79Stub.so", "lib/hexagon-v79/libQnnHtpV79Skel.so"])
    assert libs["lib/hexagon-v79/libQnnHtpV79Skel.so"]["role"] == "skel"
    for entry in m["cpu"]:
        assert hashlib.sha256((bundle / entry["path"]).read_bytes()).hexdigest() == entry["sha256"]
    assert m["source"]["license"] == "Apache-2.0" and m["source"]["commit"] == "abc123"


def test_fresh_bundle_verifies_clean(bundle):
    report = verify_bundle(bundle)
    assert report.ok, report.problems
    assert report.problems == [] and report.warnings == []
    assert report.files == 4 + 2 + 7
    assert report.qairt == f"{QAIRT} (build {BUILD})"  # one spelling everywhere: the version, its build beside it
    shown = run("bundle", "verify", bundle, "--shallow").output
    assert f"QAIRT {QAIRT} (build {BUILD})" in shown.splitlines()[0]


def test_the_external_runtime_is_the_newest_published_one_that_loads_the_binaries(inputs, tmp_path):
    """The pinned compiler is QAIRT 2.50.40: Maven has no X.Y.40 (onnxruntime-qnn#783), its family's X.Y.0 loads it."""
    assert (QAIRT, MIN) == ("2.50.40", "2.50.0")
    b = build_bundle(spec(inputs, sdk_root=None), tmp_path).path
    assert manifest(b)["runtime"] == {"mode": "external", "maven": "com.qualcomm.qti:qnn-runtime:2.50.0"}
    assert not (b / "lib").exists()
    report = verify_bundle(b)  # published, measured, in the plugin 2.6.0's reported set (its runtime set line says)
    assert report.ok and report.warnings == []
    shown = run("bundle", "verify", b, "--shallow").output
    assert "runtime set: com.qualcomm.qti:onnxruntime-android-qnn:2.6.0" in shown
    assert "reported to work, not confirmed as validated" in shown


def test_a_pin_no_source_shows_on_maven_is_accepted_with_warnings(inputs, tmp_path):
    result = build_bundle(spec(inputs, sdk_root=None, maven_version="2.50.1"), tmp_path)
    assert manifest(result.path)["runtime"]["maven"] == "com.qualcomm.qti:qnn-runtime:2.50.1"
    assert any("no public source shows qnn-runtime 2.50.1 on Maven" in w.message for w in result.warnings)
    assert verify_bundle(result.path).ok
    with pytest.raises(QnnDeployError, match="cannot go with bundled libraries"):
        build_bundle(spec(inputs, maven_version="2.50.0"), tmp_path / "b")


def test_a_pin_that_cannot_load_the_binaries_is_refused(inputs, tmp_path):
    """2.49 refuses 2.50 binaries (measured); 2.36.1 is older (the sourced rule); 2.49.40 was never on Maven."""
    with pytest.raises(QnnDeployError) as e:
        build_bundle(spec(inputs, sdk_root=None, maven_version="2.49.0"), tmp_path)
    assert str(e.value) == ("--maven-runtime-version 2.49.0: the QAIRT 2.49 runtime refuses QAIRT 2.50.40 context "
                            f"binaries (measured on the host HTP emulator, {compat.loads_measured()}: "
                            "docs/decision-and-runtime.md, Runtime compatibility)")
    assert not (tmp_path / "demo-1.0.0").exists()
    with pytest.raises(QnnDeployError, match=r"2\.36\.1 is older than QAIRT 2\.50\.40.*LiteRT/issues/6889"):
        build_bundle(spec(inputs, sdk_root=None, maven_version="2.36.1"), tmp_path)
    with pytest.raises(QnnDeployError, match=r"qnn-runtime 2\.49\.40 is not on Maven.*onnxruntime-qnn/pull/783"):
        build_bundle(spec(inputs, sdk_root=None, maven_version="2.49.40"), tmp_path)


def test_external_runtime_newer_than_the_binaries_is_accepted_with_warnings(inputs, tmp_path):
    result = build_bundle(spec(inputs, sdk_root=None, maven_version="2.52.0"), tmp_path)
    assert manifest(result.path)["qairt"]["min_runtime"] == MIN
    assert any("qnn-runtime 2.52.0 is in no validated ONNX Runtime set" in w.message for w in result.warnings)
    report = verify_bundle(result.path)
    assert report.ok and any("no measurement says whether a qnn-runtime 2.52.0" in w.message for w in report.warnings)


def test_verify_catches_an_old_pin_written_into_a_manifest(inputs, tmp_path):
    b = build_bundle(spec(inputs, sdk_root=None), tmp_path).path
    m = manifest(b)
    m["runtime"]["maven"] = "com.qualcomm.qti:qnn-runtime:2.49.0"
    (b / "manifest.json").write_text(json.dumps(m))
    [p] = problems(b)
    assert p.startswith("manifest.json: external runtime com.qualcomm.qti:qnn-runtime:2.49.0: the QAIRT 2.49 "
                        "runtime refuses QAIRT 2.50.40 context binaries")
    # without min_runtime (a bundle written before it existed) the rule is what its QAIRT needs
    del m["qairt"]["min_runtime"]
    (b / "manifest.json").write_text(json.dumps(m))
    assert [p] == problems(b)
    # a min_runtime understating what the QAIRT needs is itself a problem: the app trusts it
    m["runtime"]["maven"] = "com.qualcomm.qti:qnn-runtime:2.50.0"
    m["qairt"]["min_runtime"] = "2.40.0"
    (b / "manifest.json").write_text(json.dumps(m))
    assert problems(b) == [("manifest.json: qairt/min_runtime 2.40.0 is older than 2.50.0, the oldest runtime that "
                            "loads QAIRT 2.50.40 context binaries: the app would trust a runtime that cannot load "
                            "them; rebuild the bundle")]
    m["qairt"]["min_runtime"] = "2.53.0"  # later than the pin: the pin is refused against it
    (b / "manifest.json").write_text(json.dumps(m))
    assert problems(b)[0] == ("manifest.json: external runtime com.qualcomm.qti:qnn-runtime:2.50.0: qnn-runtime "
                              "2.50.0 is older than qairt/min_runtime 2.53.0, the oldest runtime the manifest says "
                              "loads its context binaries")


def test_bundled_libraries_older_than_min_runtime_are_a_problem(bundle):
    m = manifest(bundle)
    m["qairt"]["min_runtime"] = "2.52.0"
    (bundle / "manifest.json").write_text(json.dumps(m))
    assert problems(bundle) == [(f"manifest.json: the bundled runtime libraries are QAIRT {QAIRT}, older than "
                                 "qairt/min_runtime 2.52.0: they cannot load the bundle's context binaries")]


def test_flat_runtime_folder(inputs, tmp_path):
    flat = tmp_path / "flat"
    for p in (inputs["sdk"] / "lib").rglob("*.so"):
        flat.mkdir(exist_ok=True)
        shutil.copy(p, flat / p.name)
    b = build_bundle(spec(inputs, sdk_root=None, libs_dir=flat), tmp_path / "out").path
    assert (b / "lib/hexagon-v73/libQnnHtpV73Skel.so").is_file()
    assert verify_bundle(b).ok


@pytest.mark.parametrize("fmt", ["tar.gz", "zip"])
def test_archive_verifies(inputs, tmp_path, fmt):
    result = build_bundle(spec(inputs), tmp_path, archive_fmt=fmt)
    assert result.archive == tmp_path / f"demo-1.0.0.{fmt}"
    report = verify_bundle(result.archive)
    assert report.ok, report.problems
    assert report.files == 13


def test_ort_context_wrappers_are_repointed_and_still_run(inputs, tmp_path):
    """onnxruntime-qnn names the binary <g>_ctx_qnn.bin; in the bundle it is <g>.bin and the wrapper must follow."""
    import numpy as np
    import onnxruntime as ort

    from qnndeploy.base import socs

    npu = {soc: {g: [p[0], p[0].with_name(f"{g}_ctx.onnx")] for g, p in gs.items()}
           for soc, gs in inputs["npu"].items()}
    b = build_bundle(spec(inputs, npu=npu), tmp_path).path
    assert verify_bundle(b).ok
    ctx = b / "npu/SM8750/enc_ctx.onnx"
    from qnndeploy.qnn.epcontext import context_refs

    assert context_refs(ctx) == ["enc.bin"]
    x = {"x": np.ones((1, 16), np.float32)}
    got = ort.InferenceSession(str(ctx), htp.session_options(socs.find("SM8750"))).run(None, x)[0]
    want = ort.InferenceSession(str(b / "cpu/enc.onnx")).run(None, x)[0]
    assert np.abs(got - want).max() < 1e-2 * np.abs(want).max()
    # a wrapper that names a binary which is not beside it is caught by verify
    from qnndeploy.qnn.epcontext import retarget

    retarget(ctx, ctx, "enc_ctx_qnn.bin")
    rehash(b, "npu/SM8750/enc_ctx.onnx")
    assert problems(b) == [("npu/SM8750/enc_ctx.onnx: loads its context binary from 'enc_ctx_qnn.bin', which is "
                            "not in the bundle beside it: ONNX Runtime would fail on the phone")]


# --- tampering: each caught, with the file named ------------------------------------------------------------------

def test_flipped_byte_in_context_binary(bundle):
    p = bundle / "npu/SM8750/enc.bin"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))
    assert problems(bundle) == [("npu/SM8750/enc.bin: sha256 differs from the manifest (the file changed after "
                                 "bundling)")]


def test_deleted_and_unlisted_files_reported_together(bundle):
    (bundle / "cpu/dec.onnx").unlink()
    (bundle / "npu/SM8550/notes.txt").write_text("hello")
    found = problems(bundle)
    assert "cpu/dec.onnx: is listed in the manifest but missing from the bundle" in found
    assert "npu/SM8550/notes.txt: is not listed in the manifest" in found
    assert len(found) == 2


def test_v75_skel_in_a_v79_target(bundle, inputs):
    rel = "lib/hexagon-v79/libQnnHtpV79Skel.so"
    shutil.copy(inputs["sdk"] / "lib/hexagon-v75/unsigned/libQnnHtpV75Skel.so", bundle / rel)
    rehash(bundle, rel)
    found = problems(bundle)
    assert any(f.startswith(rel) and "Hexagon v75 library, the manifest says v79" in f for f in found), found


def test_two_qairt_versions(bundle):
    rel = "lib/hexagon-v73/libQnnHtpV73Skel.so"
    skel_lib(bundle / rel, "v73", build="v2.48.0.250101000000")
    rehash(bundle, rel)
    found = problems(bundle)
    assert found == [(f"{rel}: was built with QAIRT v2.48.0.250101000000, the bundle is QAIRT {BUILD}: compile and "
                      "runtime libraries must come from one QAIRT version")]


def test_context_binary_for_the_wrong_soc(bundle):
    shutil.copy(bundle / "npu/SM8550/enc.bin", bundle / "npu/SM8750/enc.bin")
    rehash(bundle, "npu/SM8750/enc.bin")
    assert problems(bundle) == ["npu/SM8750/enc.bin: was compiled for SM8550 (v73), but target SM8750 is v79"]


def test_android_library_checks(bundle):
    android_lib(bundle / "lib/arm64-v8a/libQnnSystem.so", align=4096)
    rehash(bundle, "lib/arm64-v8a/libQnnSystem.so")
    (bundle / "lib/arm64-v8a/libQnnHtp.so").write_bytes(elf_bytes(32, 40))  # an ARM32 library
    rehash(bundle, "lib/arm64-v8a/libQnnHtp.so")
    (bundle / "lib/arm64-v8a/libQnnHtpV73Stub.so").write_bytes(b"\x7fELF\x02\x01")  # truncated
    rehash(bundle, "lib/arm64-v8a/libQnnHtpV73Stub.so")
    found = problems(bundle)
    assert any("libQnnSystem.so: PT_LOAD alignment is 4096, Android 15+ needs >= 16384" in f for f in found)
    assert any("libQnnHtp.so: an Android library must be ELF64 AArch64 (e_machine 183), this is ELF32 "
               "e_machine 40" in f for f in found)
    assert "lib/arm64-v8a/libQnnHtpV73Stub.so: is not a usable library: truncated ELF header" in found
    assert len(found) == 3


def test_missing_runtime_library_for_a_target(bundle):
    m = manifest(bundle)
    m["runtime"]["libs"] = [lib for lib in m["runtime"]["libs"] if "V79Stub" not in lib["path"]]
    m["licences"]["files"] = [f for f in m["licences"]["files"] if "V79Stub" not in f["path"]]
    (bundle / "manifest.json").write_text(json.dumps(m))
    (bundle / "lib/arm64-v8a/libQnnHtpV79Stub.so").unlink()
    assert problems(bundle) == ["manifest.json: target SM8750 (v79) needs libQnnHtpV79Stub.so in the bundle's runtime"]


def test_schema_and_format_version(bundle):
    m = manifest(bundle)
    m["targets"][0]["artifacts"][0]["path"] = "../escape.bin"
    (bundle / "manifest.json").write_text(json.dumps(m))
    assert any("manifest.json: schema: targets/0/artifacts/0/path" in f for f in problems(bundle))
    m["format_version"] = FORMAT_VERSION + 1
    (bundle / "manifest.json").write_text(json.dumps(m))
    assert problems(bundle) == ["manifest.json: " + str(bundle / "manifest.json") +
                                f" has format_version {FORMAT_VERSION + 1}; this qnndeploy reads versions 1 to "
                                f"{FORMAT_VERSION}; upgrade qnndeploy"]


def test_a_v1_manifest_still_verifies(bundle):
    m = manifest(bundle)
    m["format_version"] = 1
    assert not [t for o in m.pop("licences")["origins"] for t in o["terms"] or ()]  # no licence file to unlist
    (bundle / "manifest.json").write_text(json.dumps(m))
    report = verify_bundle(bundle)
    assert report.ok and report.licences == []
    assert [w.message for w in report.warnings] == [
        ("bundle format 1 has no licence manifest: where its Qualcomm files came from and under which terms is not "
        f"recorded; build it again with this qnndeploy (format {FORMAT_VERSION})")]
    m["cpu"].append({**m["cpu"][0], "path": "cpu/enc.onnx.data", "format": "onnx-external-data"})
    (bundle / "manifest.json").write_text(json.dumps(m))
    assert "manifest.json: schema: cpu/2/format: 'onnx' was expected" in problems(bundle)


def test_symlink_inside_a_folder(bundle):
    (bundle / "npu/SM8550/link.bin").symlink_to(bundle / "npu/SM8550/enc.bin")
    assert problems(bundle) == ["npu/SM8550/link.bin: is a symlink; bundles hold regular files only"]


def test_zip_with_dotdot_member_is_refused_before_extraction(bundle, tmp_path):
    z = tmp_path / "evil.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.write(bundle / "manifest.json", "demo-1.0.0/manifest.json")
        zf.writestr("demo-1.0.0/../../evil.txt", "x")
    assert problems(z) == ["demo-1.0.0/../../evil.txt: has a '..' path segment: archive refused before extraction"]
    assert not (tmp_path.parent / "evil.txt").exists()


def test_tar_with_symlink_and_device_is_refused(bundle, tmp_path):
    t = tmp_path / "evil.tar.gz"
    with tarfile.open(t, "w:gz") as tf:
        tf.add(bundle, "demo-1.0.0")
        link = tarfile.TarInfo("demo-1.0.0/cpu/link.onnx")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)
        dev = tarfile.TarInfo("demo-1.0.0/dev0")
        dev.type = tarfile.CHRTYPE
        tf.addfile(dev)
        abs_member = tarfile.TarInfo("/tmp/abs.txt")
        abs_member.size = 1
        tf.addfile(abs_member, io.BytesIO(b"x"))
    assert problems(t) == [
        "demo-1.0.0/cpu/link.onnx: is a symlink or hard link: archive refused before extraction",
        "demo-1.0.0/dev0: is a device file or FIFO: archive refused before extraction",
        "/tmp/abs.txt: has an absolute path: archive refused before extraction"]


# --- CPU models with external data (format version 2) ------------------------------------------------------------

@pytest.fixture
def ext(inputs, tmp_path) -> Path:
    """A bundle whose enc CPU model keeps its weights in enc.onnx.data, the layout of models over 2 GB."""
    cpu = {**inputs["cpu"], "enc": with_external_data(inputs["cpu"]["enc"], tmp_path / "src" / "enc.onnx")}
    return build_bundle(spec(inputs, cpu=cpu), tmp_path / "out").path


def test_external_data_is_bundled_beside_its_model_and_runs(ext, inputs):
    import numpy as np
    import onnxruntime as ort

    cpu = {a["path"]: a for a in manifest(ext)["cpu"]}
    assert [(p, a["graph"], a["format"]) for p, a in cpu.items()] == [
        ("cpu/enc.onnx", "enc", "onnx"), ("cpu/enc.onnx.data", "enc", "onnx-external-data"),
        ("cpu/dec.onnx", "dec", "onnx")]
    data = (ext / "cpu/enc.onnx.data").read_bytes()
    assert (cpu["cpu/enc.onnx.data"]["sha256"], cpu["cpu/enc.onnx.data"]["size"]) == (
        hashlib.sha256(data).hexdigest(), len(data))
    report = verify_bundle(ext)
    assert report.ok, report.problems
    assert report.files == 14
    x = {"x": np.ones((1, 16), np.float32)}
    got = ort.InferenceSession(str(ext / "cpu/enc.onnx")).run(None, x)[0]
    assert np.array_equal(got, ort.InferenceSession(str(inputs["cpu"]["enc"])).run(None, x)[0])


@pytest.mark.parametrize("location", ["w\nthrow.data", "w x.data", "-w.data", "w\u202e.data"])
def test_a_file_name_that_is_not_portable_is_refused_before_anything_is_written(inputs, tmp_path, location):
    """The one bundle file name a user's files choose: an external data file's, which the model names. A name with
    a newline would reach generated Gradle text, one with a space or a leading '-' a shell line."""
    cpu = {**inputs["cpu"], "enc": with_external_data(inputs["cpu"]["enc"], tmp_path / "src" / "enc.onnx", location)}
    with pytest.raises(QnnDeployError) as e:
        build_bundle(spec(inputs, cpu=cpu), tmp_path / "out")
    assert f"would be bundled as cpu/{location}: " in str(e.value) and "is not a portable file name" in str(e.value)
    assert not (tmp_path / "out").exists()


def relocate(path: Path, location: str) -> Path:
    """Point a model at another data file location (onnx.save refuses to write '..' itself)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    for t in model.graph.initializer:
        next(e for e in t.external_data if e.key == "location").value = location
    onnx.save(model, str(path))
    return path


def relocate_enc(b: Path, location: str) -> None:
    """The bundle's enc model pointed elsewhere, its manifest entry updated: only that check may fire."""
    relocate(b / "cpu/enc.onnx", location)
    rehash(b, "cpu/enc.onnx")


def unlist(b: Path, rel: str) -> None:
    m = manifest(b)
    m["cpu"] = [a for a in m["cpu"] if a["path"] != rel]
    (b / "manifest.json").write_text(json.dumps(m))


ENC_DATA = "cpu/enc.onnx.data"
CHANGED = f"{ENC_DATA}: sha256 differs from the manifest (the file changed after bundling)"
MISSING = f"{ENC_DATA}: is listed in the manifest but missing from the bundle"
NOT_NAMED = f"{ENC_DATA}: is listed as external data of graph 'enc', but its CPU model does not name it"


def not_listed(rel: str) -> str:
    return f"cpu/enc.onnx: keeps its weights in {rel}, which the manifest does not list as external data of graph 'enc'"


def outside(location: str) -> str:
    return (f"cpu/enc.onnx: keeps its weights in '{location}', which is not a plain relative path inside its folder "
            "(absolute or '..'): ONNX Runtime would read it from outside the bundle's cpu/")


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-8])


@pytest.mark.parametrize("tamper, expected", [
    (lambda b: flip(b / ENC_DATA), [CHANGED]),
    (lambda b: truncate(b / ENC_DATA), [f"{ENC_DATA}: has 1016 bytes, the manifest says 1024 (truncated or replaced)"]),
    (lambda b: (truncate(b / ENC_DATA), rehash(b, ENC_DATA)),  # type: ignore[func-returns-value]  # both, in order
     [("cpu/enc.onnx: the external data file cpu/enc.onnx.data is truncated or damaged: tensor w needs bytes 0-1024, "
       "the file has 1016; copy the model together with its complete data file, or re-export it")]),
    (lambda b: (b / ENC_DATA).unlink(), [MISSING]),
    (lambda b: unlist(b, ENC_DATA), [f"{ENC_DATA}: is not listed in the manifest", not_listed(ENC_DATA)]),
    (lambda b: (b / "cpu/extra.data").write_bytes(b"x"), ["cpu/extra.data: is not listed in the manifest"]),
    (lambda b: relocate_enc(b, "../enc.onnx.data"), [outside("../enc.onnx.data"), NOT_NAMED]),
    (lambda b: relocate_enc(b, str(b / ENC_DATA)), [outside("{bundle}/cpu/enc.onnx.data"), NOT_NAMED]),
    (lambda b: relocate_enc(b, "enc.weights"), [not_listed("cpu/enc.weights"), NOT_NAMED]),
], ids=["flipped-byte", "truncated", "truncated-and-rehashed", "missing", "unlisted", "extra-file", "dotdot",
        "absolute", "other-name"])
def test_external_data_tampering_is_caught(ext, tamper, expected):
    tamper(ext)
    assert problems(ext) == [e.replace("{bundle}", str(ext)) for e in expected]


def test_a_listed_data_file_that_no_model_names(ext):
    (ext / "cpu/dec.onnx.data").write_bytes(b"weights of nothing")
    m = manifest(ext)
    m["cpu"].append({"path": "cpu/dec.onnx.data", "sha256": hashlib.sha256(b"weights of nothing").hexdigest(),
                     "size": 18, "graph": "dec", "format": "onnx-external-data"})
    (ext / "manifest.json").write_text(json.dumps(m))
    assert problems(ext) == [("cpu/dec.onnx.data: is listed as external data of graph 'dec', but its CPU model does "
                              "not name it")]


@pytest.mark.parametrize("fmt", ["tar.gz", "zip"])
def test_external_data_from_an_archive(ext, tmp_path, fmt):
    from qnndeploy.formats.archive import write_archive

    packed = tmp_path / f"ext.{fmt}"
    write_archive(ext, packed, fmt, top=ext.name)
    assert verify_bundle(packed).ok
    flip(ext / ENC_DATA)
    write_archive(ext, packed, fmt, top=ext.name)
    assert problems(packed) == [CHANGED]
    (ext / ENC_DATA).unlink()
    write_archive(ext, packed, fmt, top=ext.name)
    assert problems(packed) == [MISSING]


def test_external_data_that_cannot_be_bundled(inputs, tmp_path):
    outside = relocate(with_external_data(inputs["cpu"]["enc"], tmp_path / "a" / "enc.onnx"), "../a/enc.onnx.data")
    with pytest.raises(QnnDeployError, match=r"keeps its weights in '\.\./a/enc.onnx.data', which is not a plain"):
        build_bundle(spec(inputs, cpu={**inputs["cpu"], "enc": outside}), tmp_path / "out")
    enc = with_external_data(inputs["cpu"]["enc"], tmp_path / "b" / "enc.onnx", location="weights.data")
    dec = with_external_data(inputs["cpu"]["dec"], tmp_path / "c" / "dec.onnx", location="weights.data")
    clash = "two CPU model files would both be cpu/weights.data in the bundle"
    with pytest.raises(QnnDeployError, match=re.escape(clash)):
        build_bundle(spec(inputs, cpu={"enc": enc, "dec": dec}), tmp_path / "out")
    assert no_output(tmp_path / "out")


# --- bad input: one-line error, nothing written -------------------------------------------------------------------

def no_output(out: Path) -> bool:
    return not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize("change, message", [
    (dict(npu={"SM9999": {}}), "unknown SoC 'SM9999'"),
    (dict(npu=None), "SoC SM8750 is given twice (as SM8750 and sm8750p)"),
    (dict(cpu={"enc": Path("/nonexistent/enc.onnx"), "dec": None}),
     "CPU model for graph enc /nonexistent/enc.onnx does not exist"),
    (dict(name="bad name"), "bundle name 'bad name' is not valid"),
    (dict(qairt_version="2.48.0"), "--qairt 2.48.0 contradicts the binaries, which say QAIRT v2.50.40"),
    (dict(qairt_version="banana"), "--qairt .banana. is not a version X.Y.Z"),
    (dict(npu={}), "a bundle needs context binaries"),
    (dict(npu={"SM8350": {}}), "SM8350 (Snapdragon 888) has no fp16 on its HTP"),
])
def test_bad_input_writes_nothing(inputs, tmp_path, change, message):
    if "npu" in change and change["npu"] is None:
        change = dict(npu={**inputs["npu"], "sm8750p": inputs["npu"]["SM8750"]})
    if "cpu" in change:
        change = dict(cpu={"enc": change["cpu"]["enc"], "dec": inputs["cpu"]["dec"]})
    out = tmp_path / "out"
    with pytest.raises(QnnDeployError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_bundle(spec(inputs, **change), out)
    assert no_output(out)


def test_non_elf_library_in_the_sdk_is_refused(inputs, tmp_path):
    sdk = shutil.copytree(inputs["sdk"], tmp_path / "sdk")
    (sdk / "lib/aarch64-android/libQnnHtp.so").write_text("not a library")
    not_elf = "lib/arm64-v8a/libQnnHtp.so: is not a usable library: not an ELF"
    with pytest.raises(QnnDeployError, match=re.escape(not_elf)):
        build_bundle(spec(inputs, sdk_root=sdk), tmp_path / "out")
    assert no_output(tmp_path / "out")


def test_not_onnx_cpu_model(inputs, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01garbage")
    with pytest.raises(QnnDeployError, match="is not a readable ONNX model"):
        build_bundle(spec(inputs, cpu={"enc": bad, "dec": inputs["cpu"]["dec"]}), tmp_path / "out")


def test_existing_bundle_needs_force(inputs, tmp_path):
    build_bundle(spec(inputs), tmp_path)
    with pytest.raises(QnnDeployError, match="already exists; remove it or pass --force"):
        build_bundle(spec(inputs), tmp_path)
    assert build_bundle(spec(inputs), tmp_path, force=True).path.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo-1.0.0"]


def test_interrupted_build_leaves_nothing(inputs, tmp_path, monkeypatch):
    from qnndeploy.bundle import build

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "write_json", boom)
    with pytest.raises(KeyboardInterrupt):
        build_bundle(spec(inputs), tmp_path / "out")
    assert no_output(tmp_path / "out")


# --- the command line ---------------------------------------------------------------------------------------------

def cli_args(inputs, out: Path) -> list[str]:
    args = ["bundle", "build", "--name", "demo", "--version", "1.0.0", "-o", str(out),
            "--qnn-sdk-root", str(inputs["sdk"])]
    args += [x for g, p in inputs["cpu"].items() for x in ("--cpu", f"{g}={p}")]
    args += [x for soc, gs in inputs["npu"].items() for g, ps in gs.items() for x in ("--npu", f"{soc}:{g}={ps[0]}")]
    return args


def test_cli_bundle_then_verify(inputs, tmp_path):
    r = run(*cli_args(inputs, tmp_path), "--archive", "zip")
    assert r.exit_code == 0, r.output
    assert "targets: SM8550 (v73), SM8750 (v79)" in r.output
    r = run("bundle", "verify", str(tmp_path / "demo-1.0.0.zip"), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["ok"] is True
    zipped = tmp_path / "demo-1.0.0.zip"
    r = run("bundle", "verify", str(zipped), "--shallow")
    assert r.exit_code == 0 and r.output.splitlines()[-1] == (  # the next stages, ready to paste
        f"next: qnndeploy scaffold {zipped} --package com.example.app -o app/qnndeploy, then "
        f"qnndeploy device verify {zipped}"), r.output
    (tmp_path / "demo-1.0.0/cpu/enc.onnx").write_bytes(b"changed")
    r = run("bundle", "verify", str(tmp_path / "demo-1.0.0"))
    assert r.exit_code == 1
    assert "FAIL" in r.output and "cpu/enc.onnx: has 7 bytes" in r.output and "next:" not in r.output


def test_cli_errors_are_one_line(inputs, tmp_path):
    for args in (["bundle", "--name", "x", "--version", "1", "--cpu", "enc"],
                 ["bundle", "verify", str(tmp_path / "nothing")],
                 [*cli_args(inputs, tmp_path), "--npu", "SM8750:enc=/missing.bin"]):
        r = run(*args)
        assert r.exit_code == 2, r.output
        assert r.output.startswith("error: ") and r.output.count("\n") == 1, r.output


@pytest.mark.slow
def test_real_executable(inputs, tmp_path):
    alias = ["bundle", *cli_args(inputs, tmp_path)[2:]]  # `bundle --name …`, no subcommand: still `bundle build`
    subprocess.run(["qnndeploy", *alias], check=True, capture_output=True)
    r = subprocess.run(["qnndeploy", "bundle", "verify", str(tmp_path / "demo-1.0.0")], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0 and r.stdout.startswith("OK")
    (tmp_path / "demo-1.0.0/records").mkdir()
    (tmp_path / "demo-1.0.0/records/x.json").write_text("{}")
    r = subprocess.run(["qnndeploy", "bundle", "verify", str(tmp_path / "demo-1.0.0")], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 1 and "records/x.json: is not listed in the manifest" in r.stdout
    assert "Traceback" not in r.stderr


# --- from a compile output folder ----------------------------------------------------------------------------------

@pytest.fixture
def build_dir(inputs, tmp_path):
    """A real `compile` output for the two tiny graphs on SM8750, one of them validated."""
    import shutil as sh

    from qnndeploy.compile import compile_models
    from qnndeploy.validate import validate_build

    models = {g: sh.copy(p, tmp_path / f"{g}.onnx") for g, p in inputs["cpu"].items()}
    build = tmp_path / "build"
    assert compile_models({g: Path(p) for g, p in models.items()}, ["SM8750"], build).ok
    assert validate_build(build).ok
    return build


def test_from_build_carries_records_and_validation(build_dir, tmp_path):
    from qnndeploy.bundle.build import spec_from_build

    result = build_bundle(spec_from_build(build_dir, "fb", "1.0.0"), tmp_path / "out")
    m = manifest(result.path)
    assert m["targets"][0]["validation"]["passed"] is True
    assert set(m["targets"][0]["validation"]["graphs"]) == {"enc", "dec"}
    assert {a["format"] for a in m["targets"][0]["artifacts"]} == {"qnn-context-binary", "ort-epcontext"}
    assert "records/enc-SM8750-compile.json" in {r["path"] for r in m["records"]}
    assert verify_bundle(result.path).ok


@pytest.mark.parametrize("record", ["compile", "validation"])
def test_a_binary_that_is_not_the_one_its_records_name_is_a_problem(build_dir, tmp_path, record):
    """A bundle whose enc binary (or, here, whose record of it) comes from another build: the record vouches for
    numbers measured on other bytes."""
    from qnndeploy.bundle.build import spec_from_build

    b = build_bundle(spec_from_build(build_dir, "fb", "1.0.0"), tmp_path / "out").path
    rel = f"records/enc-SM8750-{record}.json"
    data = json.loads((b / rel).read_text())
    for named in (data["outputs"] if record == "compile" else [data["binary"]]):
        if named.get("format", "qnn-context-binary") == "qnn-context-binary":
            named["sha256"] = "ab" * 32
    (b / rel).write_text(json.dumps(data))
    rehash(b, rel)
    [found] = problems(b)
    assert found.startswith(f"npu/SM8750/enc.bin: is not the binary its record {rel} names (sha256 ")
    assert found.endswith("the record's abababababab…): the bundle mixes builds; bundle it again from one build")


def test_from_build_refuses_what_changed_since_the_compile(build_dir, tmp_path):
    from qnndeploy.bundle.build import spec_from_build

    (tmp_path / "enc.onnx").write_bytes((tmp_path / "dec.onnx").read_bytes())  # the source model was replaced
    with pytest.raises(QnnDeployError, match=re.escape("enc.onnx changed since it was compiled")):
        build_bundle(spec_from_build(build_dir, "fb", "1.0.0"), tmp_path / "out")
    assert no_output(tmp_path / "out")


def test_from_build_flags_graphs_not_validated(build_dir, tmp_path):
    from qnndeploy.bundle.build import spec_from_build

    (build_dir / "dec/SM8750/validation.json").unlink()
    result = build_bundle(spec_from_build(build_dir, "fb", "1.0.0"), tmp_path / "out")
    v = manifest(result.path)["targets"][0]["validation"]
    assert v["passed"] is None and v["graphs"]["dec"]["passed"] is None
    assert [w.message for w in result.warnings if "dec" in w.path] == ["not validated: run qnndeploy validate"]


def test_from_build_refuses_failed_jobs(inputs, tmp_path):
    from onnx import TensorProto, helper, save

    from qnndeploy.bundle.build import spec_from_build
    from qnndeploy.compile import compile_models

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    save(helper.make_model(helper.make_graph([helper.make_node("Sinh", ["x"], ["y"], name="bad0")], "g", [x], [y]),
                           opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "sinh.onnx")
    build = tmp_path / "build"
    assert not compile_models({"sinh": tmp_path / "sinh.onnx", "enc": inputs["cpu"]["enc"]}, ["SM8750"], build).ok
    with pytest.raises(QnnDeployError, match=r"has failed compile jobs \(sinh/SM8750\)"):
        spec_from_build(build, "fb", "1.0.0")


def test_another_graphs_file_is_caught(inputs, tmp_path):
    """The dec binary and wrapper filed as enc's: one binary given for two graphs is taken for a shared context,
    and its own metadata gives it away (one graph in it); dec's wrapper beside enc's binary runs a graph that
    binary does not hold."""
    npu = {"SM8750": {"enc": [inputs["npu"]["SM8750"]["dec"][0], inputs["root"] / "SM8750/dec_ctx.onnx"],
                      "dec": [inputs["npu"]["SM8750"]["dec"][0], inputs["root"] / "SM8750/dec_ctx.onnx"]}}
    with pytest.raises(QnnDeployError, match=r"npu/SM8750/dec_ctx_qnn.bin: holds 1 graph\(s\) \(QNNExecutionProvider_"
                                             r".*\), but the manifest gives it 2 \(enc, dec\)"):
        build_bundle(spec(inputs, npu=npu, sdk_root=None), tmp_path / "out")
    npu["SM8750"]["dec"] = inputs["npu"]["SM8750"]["dec"]
    npu["SM8750"]["enc"] = [inputs["npu"]["SM8750"]["enc"][0], inputs["root"] / "SM8750/dec_ctx.onnx"]
    with pytest.raises(QnnDeployError, match=r"npu/SM8750/enc.bin: holds no graph 'QNNExecutionProvider_.*', the "
                                             r"one graph 'enc''s EPContext wrapper runs .*\(and 1 more\)"):
        build_bundle(spec(inputs, npu=npu, sdk_root=None), tmp_path / "out")


def test_an_empty_or_swapped_cpu_model(inputs, bundle, tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(QnnDeployError, match="has no graph outputs"):
        build_bundle(spec(inputs, cpu={"enc": empty, "dec": inputs["cpu"]["dec"]}), tmp_path / "out")
    shutil.copy(bundle / "cpu/dec.onnx", bundle / "cpu/enc.onnx")
    rehash(bundle, "cpu/enc.onnx")
    assert [p.split(":")[0] for p in problems(bundle)] == ["cpu/enc.onnx"]


# --- hostile inputs: bounded reading of manifests and archives (issue 11) ----------------------------------------

TOP = "demo-1.0.0"


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """Run `bundle verify` on a hostile input: (exit code, output lines). Each ends in under 10 s with no traceback
    and leaves nothing in TMPDIR."""
    import tempfile
    import time

    tmpdir = tmp_path / "TMPDIR"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))

    def verify(path: Path) -> tuple[int, list[str]]:
        start = time.monotonic()
        r = run("bundle", "verify", str(path))
        seconds = time.monotonic() - start
        assert seconds < 10, f"{path.name} took {seconds:.1f} s"
        assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
        assert "Traceback" not in r.output
        assert list(tmpdir.iterdir()) == []
        lines = [line for line in r.output.splitlines() if line.strip() and not line.startswith("verifying")]
        return r.exit_code, lines

    return verify


def zip_with(path: Path, change=None, members: dict[str, bytes] | None = None) -> Path:
    """A zip of `members`; `change(info)` edits the last member's central directory header before it is written."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in (members or {f"{TOP}/manifest.json": b"{}"}).items():
            z.writestr(name, data)
        if change:
            change(z.filelist[-1])
    return path


def refusal(hostile, path: Path) -> str:
    """The one problem `bundle verify` reports for an archive refused before extraction (exit 1)."""
    code, lines = hostile(path)
    assert code == 1 and len(lines) == 2 and lines[0].startswith("FAIL"), lines
    return lines[1]


def test_zip_bomb_is_refused_from_its_header(hostile, tmp_path):
    def ten_gib(info: zipfile.ZipInfo) -> None:
        info.file_size = 10 << 30  # what the central directory of a real 10 GiB member says

    line = refusal(hostile, zip_with(tmp_path / "bomb.zip", ten_gib))
    assert re.fullmatch(rf"  - {TOP}/manifest.json: expands its [\d,]+ compressed bytes to 10,737,418,240, over the "
                        r"limit of 200:1 \(a zip bomb\?\); archive refused before extraction", line)


@pytest.mark.slow
def test_a_real_zip_and_tar_bomb(hostile, tmp_path):
    zeros = bytes(64 << 20)  # compresses about 1000:1
    assert "over the limit of 200:1" in refusal(hostile, zip_with(tmp_path / "bomb.zip", None,
                                                                  {f"{TOP}/zeros.bin": zeros}))
    with tarfile.open(tmp_path / "bomb.tar.gz", "w:gz") as t:
        info = tarfile.TarInfo(f"{TOP}/zeros.bin")
        info.size = len(zeros)
        t.addfile(info, io.BytesIO(zeros))
    assert re.fullmatch(rf"  - {TOP}/zeros.bin: expands the archive's [\d,]+ compressed bytes to 67,108,864, over the "
                        r"limit of 200:1 \(a zip bomb\?\); archive refused before extraction",
                        refusal(hostile, tmp_path / "bomb.tar.gz"))


def test_total_uncompressed_bytes_limit(hostile, tmp_path, monkeypatch):
    from qnndeploy.formats import archive

    monkeypatch.setattr(archive, "MAX_TOTAL_BYTES", 1000)
    line = refusal(hostile, zip_with(tmp_path / "big.zip", None, {f"{TOP}/a": b"a" * 600, f"{TOP}/b": b"b" * 600}))
    assert line == (f"  - {TOP}/b: brings the archive to 1,200 uncompressed bytes, over the limit of 1,000 "
                    "(qnndeploy.formats.archive.MAX_TOTAL_BYTES); archive refused before extraction")


def test_sparse_tar_member(hostile, tmp_path):
    with tarfile.open(tmp_path / "sparse.tar.gz", "w:gz", format=tarfile.PAX_FORMAT) as t:
        info = tarfile.TarInfo(f"{TOP}/cpu/enc.onnx")
        info.size = 512  # stored; the pax headers make it a 1 TiB sparse file
        info.pax_headers = {"GNU.sparse.size": str(1 << 40), "GNU.sparse.numblocks": "1",
                            "GNU.sparse.offset": str((1 << 40) - 512), "GNU.sparse.numbytes": "512"}
        t.addfile(info, io.BytesIO(b"x" * 512))
    assert refusal(hostile, tmp_path / "sparse.tar.gz") == (
        f"  - {TOP}/cpu/enc.onnx: is a sparse file: archive refused before extraction")


def test_a_huge_tar_extension_header_is_not_read(hostile, tmp_path):
    with tarfile.open(tmp_path / "pax.tar.gz", "w:gz") as t:
        header = tarfile.TarInfo(f"{TOP}/PaxHeader")
        header.type, header.size = tarfile.XHDTYPE, 2 << 20  # tarfile would read these 2 MiB into memory
        t.addfile(header, io.BytesIO(bytes(header.size)))
    assert refusal(hostile, tmp_path / "pax.tar.gz") == (
        f"  - {TOP}/PaxHeader: is an extension header of 2,097,152 bytes, over the limit of 1,048,576; archive "
        "refused before extraction")


def test_encrypted_and_unsupported_zip_members(hostile, tmp_path):
    def encrypted(info: zipfile.ZipInfo) -> None:
        info.flag_bits |= 0x1

    def method_99(info: zipfile.ZipInfo) -> None:
        info.compress_type = 99  # AES, or anything zipfile cannot read

    assert refusal(hostile, zip_with(tmp_path / "enc.zip", encrypted)) == (
        f"  - {TOP}/manifest.json: is encrypted: archive refused before extraction")
    assert refusal(hostile, zip_with(tmp_path / "m99.zip", method_99)) == (
        f"  - {TOP}/manifest.json: uses compression method 99, which qnndeploy does not read (it reads stored, "
        "deflate, bzip2, lzma): archive refused before extraction")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["zip", "tar.gz"])
def test_too_many_members(hostile, tmp_path, fmt):
    names = [f"{TOP}/r/{i}" for i in range(20_000)]
    path = tmp_path / f"many.{fmt}"
    if fmt == "zip":
        zip_with(path, None, dict.fromkeys(names, b""))
    else:
        with tarfile.open(path, "w:gz") as t:
            for name in names:
                t.addfile(tarfile.TarInfo(name))
    assert refusal(hostile, path) == (f"  - {TOP}/r/4096: is member 4,097: the archive has more than the limit "
                                      "of 4,096 members; archive refused before extraction")


@pytest.mark.parametrize("fmt", ["zip", "tar.gz"])
def test_member_path_too_deep(hostile, tmp_path, fmt):
    name = "d/" * 1_100 + "x"
    path = tmp_path / f"deep.{fmt}"
    if fmt == "zip":
        zip_with(path, None, {name: b"x"})
    else:
        with tarfile.open(path, "w:gz") as t:
            t.addfile(tarfile.TarInfo(name))
    assert refusal(hostile, path) == (f"  - {name}: is 1,101 folders deep, over the limit of 64: archive refused "
                                      "before extraction")


@pytest.mark.parametrize("make", ["fifo", "urandom", "socket", "folder"])
def test_archive_that_is_not_a_regular_file(hostile, tmp_path, make):
    import os
    import socket

    path = tmp_path / "x.zip"
    if make == "fifo":
        os.mkfifo(path)
    elif make == "urandom":
        path.symlink_to("/dev/urandom")
    elif make == "socket":
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))
    else:
        path.mkdir()
        (path / "manifest.json").write_text("{")
    code, lines = hostile(path)
    kind = {"fifo": "a FIFO", "urandom": "a character device", "socket": "a socket"}.get(make)
    if kind is None:  # a folder named x.zip is a bundle folder, whose manifest is not JSON
        assert code == 2 and lines[0].startswith(f"error: {path}/manifest.json is not readable JSON")
    else:
        assert code == 2
        assert lines == [f"error: {path} is {kind}, not a regular file; a zip archive must be a regular file"]


def test_a_symlink_to_a_good_archive_is_followed(hostile, tmp_path):
    real = zip_with(tmp_path / "real.zip")
    (tmp_path / "link.zip").symlink_to(real)
    code, lines = hostile(tmp_path / "link.zip")
    assert code == 2 and "is not a qnndeploy bundle manifest" in lines[0]  # read: the manifest is only {}


@pytest.mark.parametrize(("text", "expected"), [
    (b"[" * 100_000 + b"]" * 100_000, "nests arrays/objects 100,000 deep, over the limit of 64"),
    (b'{"format": "qnndeploy-bundle", "size": ' + b"9" * 5_000 + b"}",
     "has an integer of 5,000 digits, over the limit of 100"),
    (b'{"name": "a\\ud800b"}', "has a string with a lone surrogate ('\\ud800'): strings must be valid Unicode"),
    (b'{"name": "\xff"}', "is not valid UTF-8 (byte 10): a manifest is UTF-8 JSON"),
    (b'{"name": "a[[[[", "x": ' + b"[" * 60 + b"]" * 60 + b"}", "is not a qnndeploy bundle manifest"),
], ids=["100k-deep", "5000-digits", "lone-surrogate", "not-utf8", "brackets-in-strings"])
def test_hostile_manifest(hostile, tmp_path, text, expected):
    folder = tmp_path / TOP
    folder.mkdir()
    (folder / "manifest.json").write_bytes(text)
    code, lines = hostile(folder)
    assert code == 2 and lines[0].startswith(f"error: {folder}/manifest.json {expected}") and len(lines) == 1
    packed = zip_with(tmp_path / "m.zip", None, {f"{TOP}/manifest.json": text})  # the same from an archive
    code, lines = hostile(packed)
    assert code == 2 and lines[0].startswith(f"error: {packed}:{TOP}/manifest.json {expected}") and len(lines) == 1


def test_manifest_over_the_size_limit_is_not_read(tmp_path, monkeypatch):
    from qnndeploy.formats import manifest as manifest_module
    from qnndeploy.formats.manifest import read_manifest

    monkeypatch.setattr(manifest_module, "MAX_MANIFEST_BYTES", 100)
    (tmp_path / "manifest.json").write_text(" " * 101)
    with pytest.raises(QnnDeployError, match=r"manifest.json has 101 bytes, over the limit of 100 for a bundle "
                                             r"manifest$"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").unlink()
    (tmp_path / "manifest.json").symlink_to("/dev/zero")
    with pytest.raises(QnnDeployError, match=r"manifest.json is a symlink; a bundle manifest must be a regular file$"):
        read_manifest(tmp_path)


def test_an_external_data_location_that_is_not_utf8():
    from qnndeploy.formats.manifest import external_data_path

    assert external_data_path("cpu/det.onnx", b"det.onnx\xff.data") is None  # protobuf gives bytes for it
    assert external_data_path("cpu/det.onnx", "det.onnx.data") == "cpu/det.onnx.data"


def test_a_lying_zip_header_cannot_write_more_than_it_says(tmp_path):
    from qnndeploy.formats.archive import extracted

    def one_byte(info: zipfile.ZipInfo) -> None:
        info.file_size = 1  # the data holds 1 MiB

    packed = zip_with(tmp_path / "lie.zip", one_byte, {f"{TOP}/manifest.json": bytes(1 << 20)})
    with (pytest.raises(QnnDeployError, match=r"lie.zip is a damaged archive \(.*\): copy or download it again$"),
          extracted(packed)):
        pass


# --- what the app relies on: broken bundles that must not verify (issue 11) -----------------------------------------

def one_line_problems(b: Path, allow_unchecked: bool = False) -> list[str]:
    found = problems(b, allow_unchecked)
    assert all("\n" not in p and "\r" not in p for p in found), found
    return found


@pytest.fixture(scope="module")
def wrapped_inputs(tmp_path_factory) -> dict:
    """Two graphs compiled for SM8750, each with its context binary and the EPContext wrapper that loads it."""
    require(htp.available(), "onnxruntime-qnn")
    from tests.support.bundles import compile_inputs

    return compile_inputs(tmp_path_factory.mktemp("wrapped"), targets=("SM8750",), graphs=("det", "rec"))


@pytest.fixture
def wrapped(wrapped_inputs, tmp_path) -> Path:
    from tests.support.bundles import build

    b = build(tmp_path, wrapped_inputs)
    report = verify_bundle(b)
    # the correct bundle verifies clean (but for warnings of a runtime in no validated ONNX Runtime set)
    assert report.ok and [w for w in report.warnings if "no validated" not in w.message] == [], report.problems
    return b


def external_tensor(location: str) -> onnx.TensorProto:
    from onnx import TensorProto, helper

    t = helper.make_tensor("hidden", TensorProto.FLOAT, [4], [0.0] * 4)
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    t.external_data.add(key="length", value="16")
    return t


def point_outside(model_path: Path, location: str, where: str) -> None:
    """Make one tensor of the model at `model_path` keep its data at `location`, in an initializer, a Constant
    inside a function, or a sparse initializer."""
    import onnx
    from onnx import helper

    m = onnx.load(str(model_path))
    if where == "initializer":
        m.graph.initializer.append(external_tensor(location))
    elif where == "function":
        constant = helper.make_node("Constant", [], ["c"], value=external_tensor(location))
        m.functions.append(helper.make_function("local", "hide", [], ["c"], [constant], [helper.make_opsetid("", 17)]))
    else:
        indices = helper.make_tensor("hidden_i", onnx.TensorProto.INT64, [1], [0])
        m.graph.sparse_initializer.append(helper.make_sparse_tensor(external_tensor(location), indices, [4]))
    onnx.save(m, str(model_path))


@pytest.mark.parametrize("where", ["initializer", "function", "sparse"])
@pytest.mark.parametrize("location", ["/etc/passwd", "../x", "sub/../../x"])
def test_cpu_external_data_outside_the_bundle(bundle, location, where):
    point_outside(bundle / "cpu/enc.onnx", location, where)
    rehash(bundle, "cpu/enc.onnx")
    assert one_line_problems(bundle) == [
        (f"cpu/enc.onnx: keeps its weights in '{location}', which is not a plain relative path inside its folder "
         "(absolute or '..'): ONNX Runtime would read it from outside the bundle's cpu/")]


def seeded_bytes(n: int) -> bytes:
    import random

    return random.Random(n).randbytes(n)


BINARY = "npu/SM8750/enc.bin"
TOO_FEW = ("too few for a QNN context binary (at least 4096): it is empty, truncated or another file; recompile it or "
           "copy it again")
CUT = "it is truncated or padded; recompile it or copy it again"
NOT_A_BINARY = "it is not a QNN context binary (damaged, truncated or another file); recompile it or copy it again"


@pytest.mark.parametrize("change, expected", [
    (lambda d: b"", lambda n: f"has 0 bytes, {TOO_FEW}"),
    (lambda d: d[:100], lambda n: f"has 100 bytes, {TOO_FEW}"),
    (lambda d: d[:-4096], lambda n: f"has {n - 4096} bytes, but its QNN header says {n}: {CUT}"),
    (lambda d: d + b"\0" * 10, lambda n: f"has {n + 10} bytes, but its QNN header says {n}: {CUT}"),
    (lambda d: d[:8192], lambda n: f"has no soc_type/arch marker: {NOT_A_BINARY}"),
    (lambda d: seeded_bytes(len(d)),
     lambda n: f"has no QAIRT build string and no soc_type/arch marker: {NOT_A_BINARY}"),
    (lambda d: d.replace(b"soc_type=SM8750;", b"soc_type=SM8650;"),
     lambda n: "was compiled for SM8650, but target SM8750 is SM8750: recompile it for this SoC"),
], ids=["empty", "tiny", "truncated", "padded", "first-pages", "random", "other-soc-same-arch"])
def test_a_context_binary_that_is_not_one(bundle, change, expected, monkeypatch, tmp_path):
    """Each rehashed into the manifest: the file itself must be judged, not only its checksum. Without libQnnSystem
    (the markers then decide: see test_contextcheck.py for what the library's reading adds)."""
    monkeypatch.setenv("QNNDEPLOY_QNN_SYSTEM_LIB", str(tmp_path / "no" / "libQnnSystem.so"))
    p = bundle / BINARY
    data = p.read_bytes()
    assert len(data) > 8192 + 4096  # the cuts above fall inside this tiny graph's binary
    p.write_bytes(change(data))
    rehash(bundle, BINARY)
    assert one_line_problems(bundle, allow_unchecked=True) == [f"{BINARY}: {expected(len(data))}"]
    assert one_line_problems(bundle)[-1].startswith("manifest.json: no libQnnSystem here")  # refused without it


def test_ctx_onnx_listed_as_a_context_binary(wrapped):
    m = manifest(wrapped)
    for a in m["targets"][0]["artifacts"]:
        if a["path"] == "npu/SM8750/det_ctx.onnx":
            a["format"] = "qnn-context-binary"
    (wrapped / "manifest.json").write_text(json.dumps(m))
    assert one_line_problems(wrapped) == [
        ("npu/SM8750/det_ctx.onnx: is an ONNX file (an EPContext wrapper?) listed as a qnn-context-binary: list it as "
         "ort-epcontext and list its .bin as the context binary")]


def test_epcontext_wrapper_copied_over_the_cpu_model(wrapped):
    shutil.copy(wrapped / "npu/SM8750/det_ctx.onnx", wrapped / "cpu/det.onnx")
    rehash(wrapped, "cpu/det.onnx")
    assert one_line_problems(wrapped) == [
        ("cpu/det.onnx: holds 1 EPContext node(s): it is an NPU wrapper, not a CPU model; on a phone without the NPU "
         "the CPU fallback would fail too. Put the original model in cpu/")]


def name_binary(wrapper: Path, name: bytes) -> None:
    import onnx

    m = onnx.load(str(wrapper))
    for node in m.graph.node:
        for a in node.attribute:
            if a.name == "ep_cache_context":
                a.s = name
    onnx.save(m, str(wrapper))


@pytest.mark.parametrize("name, expected", [
    (b"\xffdet.bin", ("names its context binary in ep_cache_context with bytes that are not UTF-8: ONNX Runtime "
                      "cannot open it on the phone; re-export the wrapper")),
    (b"rec.bin", ("loads 'rec.bin', but its graph's context binary in this target is 'det.bin': ONNX Runtime would "
                  "load the wrong file")),
    (b"det_ctx.onnx", ("loads 'det_ctx.onnx', but its graph's context binary in this target is 'det.bin': ONNX "
                       "Runtime would load the wrong file")),
    (b"../SM8750/det.bin", ("loads its context binary from '../SM8750/det.bin', which is not in the bundle beside "
                            "it: ONNX Runtime would fail on the phone")),
], ids=["not-utf8", "other-graph", "itself", "dotdot"])
def test_epcontext_wrapper_names_its_own_binary(wrapped, name, expected):
    name_binary(wrapped / "npu/SM8750/det_ctx.onnx", name)
    rehash(wrapped, "npu/SM8750/det_ctx.onnx")
    assert one_line_problems(wrapped) == [f"npu/SM8750/det_ctx.onnx: {expected}"]


def set_field(b: Path, path: tuple, value: object) -> None:
    m = manifest(b)
    node = m
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    (b / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("path, value", [
    (("name",), "demo\n"), (("version",), "1.0.0\n"), (("targets", 1, "soc"), "SM8750\n"),
    (("version",), "1.0.0\r"), (("name",), "demo\x00"), (("graphs", 0, "name"), "enc\n"),
])
def test_control_characters_in_names(bundle, path, value):
    set_field(bundle, path, value)
    field_name = "/".join(str(p) for p in path)
    assert one_line_problems(bundle) == [
        (f"manifest.json: {field_name}: {value!r} holds a control character (a newline, tab, NUL…); names, versions "
         "and coordinates must be plain text")]


def test_control_character_in_the_maven_coordinates(inputs, tmp_path):
    b = build_bundle(spec(inputs, sdk_root=None), tmp_path).path
    set_field(b, ("runtime", "maven"), "com.qualcomm.qti:qnn-runtime:2.49.0\n")
    assert one_line_problems(b) == [
        ("manifest.json: runtime/maven: 'com.qualcomm.qti:qnn-runtime:2.49.0\\n' holds a control character (a "
         "newline, tab, NUL…); names, versions and coordinates must be plain text")]


def test_trailing_newline_fails_the_schema_too():
    from qnndeploy.formats.manifest import schema_errors
    from tests.support.bundles import manifest as make_manifest

    good = make_manifest(runtime="external")
    assert schema_errors(good) == []
    for key in ("name", "version"):
        assert schema_errors({**good, key: good[key] + "\n"}), key
    assert schema_errors({**good, "runtime": {"mode": "external", "maven": good["runtime"]["maven"] + "\n"}})


@pytest.mark.parametrize("soc", ["43", "SM9999", "KALAMA"])
def test_soc_must_be_a_catalog_model(bundle, soc):
    set_field(bundle, ("targets", 0, "soc"), soc)
    assert one_line_problems(bundle) == [
        (f"manifest.json: target {soc}: '{soc}' is not a SoC model of the catalog (e.g. SM8750): the app matches "
         "targets by model name, so no phone would ever use this one")]


@pytest.mark.parametrize("text", ["1.0", "true", "3.0", "\"3\""])
def test_format_version_must_be_an_integer(bundle, text):
    from qnndeploy.decide.decision import DeviceIdentity, decide
    from qnndeploy.formats.manifest import Manifest

    raw = (bundle / "manifest.json").read_text().replace(f'"format_version": {FORMAT_VERSION}',
                                                         f'"format_version": {text}')
    (bundle / "manifest.json").write_text(raw)
    found = one_line_problems(bundle)
    assert len(found) == 1 and found[0].startswith("manifest.json: ") and "format_version" in found[0], found
    # the app's decision refuses the same manifest
    d = decide(Manifest.parse(json.loads(raw)), DeviceIdentity("SM8750", None, 34), load_errors={}, lib_dir="/x")
    assert d.reason_key == "format_unsupported"


def test_sizes_are_compared_before_any_hashing(bundle, monkeypatch):
    """A sparse 1 TiB file listed with another size: found from its size, never read."""
    from qnndeploy.verification import checks

    big = bundle / "records" / "big.bin"
    big.parent.mkdir()
    with big.open("wb") as f:
        f.truncate(1 << 40)
    m = manifest(bundle)
    m["records"].append({"path": "records/big.bin", "sha256": "0" * 64, "size": 10})
    (bundle / "manifest.json").write_text(json.dumps(m))
    read: list[str] = []
    real = checks.scan_file
    monkeypatch.setattr(checks, "scan_file", lambda path, *a, **k: (read.append(path.name), real(path, *a, **k))[1])
    assert one_line_problems(bundle) == [
        f"records/big.bin: has {1 << 40} bytes, the manifest says 10 (truncated or replaced)"]
    assert "big.bin" not in read and read  # the other files were read


def test_the_schema_knows_the_performance_modes_the_cli_takes():
    from qnndeploy.base.names import PERFORMANCE_MODES
    from qnndeploy.formats.manifest import schema

    assert schema()["properties"]["htp"]["properties"]["performance_mode"]["enum"] == list(PERFORMANCE_MODES)

"""The typed manifest (qnndeploy/formats/manifest.py): parsed once, field for field like the Kotlin twin, its closed
sets the schema's, and the only reader of manifest.json by key."""

from __future__ import annotations

import dataclasses
import re

import pytest

from qnndeploy.base.errors import QnnDeployError
from qnndeploy.base.names import CONTEXT_BINARY, FORMAT_VERSION
from qnndeploy.formats import manifest as manifest_module
from qnndeploy.formats import playplan
from qnndeploy.formats.manifest import (
    BundleFile,
    FileFormat,
    LibRole,
    Manifest,
    Provider,
    RuntimeMode,
    Tensor,
    schema,
)
from qnndeploy.qnn.markers import scan_file
from tests.support import REPO, bundles

ROOT = REPO


def test_closed_sets_are_the_schemas():
    """Each enum holds exactly the values the schema allows, in its order: output and files keep their strings."""
    defs = schema()["$defs"]
    assert [f.value for f in FileFormat] == defs["artifact"]["properties"]["format"]["enum"]
    assert [r.value for r in LibRole] == defs["lib"]["properties"]["role"]["enum"]
    assert [m.value for m in RuntimeMode] == [o["properties"]["mode"]["const"]
                                              for o in schema()["properties"]["runtime"]["oneOf"]]
    target = schema()["properties"]["targets"]["items"]["properties"]
    assert [p.value for p in Provider] == target["accepted_on"]["enum"]
    assert [d.value for d in playplan.Delivery] == playplan.schema()["properties"]["delivery"]["enum"]
    assert FileFormat.QNN_CONTEXT_BINARY == CONTEXT_BINARY and f"{RuntimeMode.BUNDLED}" == "bundled"


def _kotlin_classes(text: str) -> dict[str, list[str]]:
    """Data class name -> its constructor's val names, from Kotlin source."""
    classes = {}
    for m in re.finditer(r"data class (\w+)\(", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        classes[m.group(1)] = re.findall(r"\bval (\w+)\s*:", text[m.end():i])
    return classes


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def test_the_dataclasses_have_every_field_of_the_kotlin_twin():
    """BundleManifest.kt parses the manifest in the app: every field it reads is a field here, in snake case."""
    sources = [p for p in ROOT.rglob("BundleManifest.kt") if "android-sample" not in p.parts and ".git" not in p.parts]
    assert sources, "no BundleManifest.kt"
    kotlin = _kotlin_classes(sources[0].read_text())
    assert set(kotlin) == {"BundleFile", "Tensor", "Graph", "Target", "Qairt", "Runtime", "OnDeviceGraph", "OnDevice",
                           "BundleLoop", "BundleManifest"}
    for name, fields in kotlin.items():
        python = getattr(manifest_module, "Manifest" if name == "BundleManifest" else name)
        assert {_snake(f) for f in fields} <= {f.name for f in dataclasses.fields(python)}, name
    assert re.search(r"enum class RuntimeMode \{ (\w+), (\w+) \}", sources[0].read_text()).groups() == tuple(
        m.name for m in RuntimeMode)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_format_version_parses_with_the_defaults_its_readers_assume(version):
    """What older manifests lack (min_runtime, pipeline, cpu_only, accepted_on, shared binaries) gets the default
    the readers used: none, the graphs' order, False."""
    m = Manifest.parse(bundles.manifest(format_version=version, runtime="bundled"))
    assert m.supported and m.format_number == version and m.name == "demo" and m.bundle_version == "demo 1.0.0"
    assert m.qairt.min_runtime is None and m.htp_performance_mode is None and m.pipeline == ["det", "rec"]
    assert [g.cpu_only for g in m.graphs] == [False, False] and m.cpu_only == []
    assert m.graphs[0].inputs == (Tensor("x", "float32", (1, 16)),)
    assert all(t.accepted == {} and t.accepted_on is None and t.validations == {} for t in m.targets)
    det = m.targets[1].artifacts[0]
    assert (det.path, det.graph, det.format, det.served) == ("npu/SM8750/det.bin", "det", FileFormat.QNN_CONTEXT_BINARY,
                                                             ["det"])
    assert m.runtime.mode is RuntimeMode.BUNDLED and m.runtime.bundled and m.runtime.maven == ""
    assert {lib.role for lib in m.runtime.libs} == set(LibRole)
    assert [kind for kind, _ in m.files()].count("lib") == len(m.runtime.libs) == 7
    external = Manifest.parse(bundles.manifest(format_version=version))
    assert external.runtime.mode is RuntimeMode.EXTERNAL and external.runtime.libs == ()
    assert external.runtime.maven == f"com.qualcomm.qti:qnn-runtime:{bundles.QAIRT}"


def test_shared_binaries_accepted_failures_and_a_pipeline_parse():
    m = Manifest.parse(bundles.split(bundles.accepted(bundles.shared(bundles.manifest(format_version=3)))))
    pair = next(a for a in m.targets[1].artifacts if a.format == FileFormat.QNN_CONTEXT_BINARY)
    assert pair.graph == "" and pair.graphs == ("det", "rec") and pair.serves("rec") and pair.served == ["det", "rec"]
    t = m.targets[1]
    assert t.soc == "SM8750" and t.accepted_on == Provider.CPU and dict(t.accepted) == {"rec": "r-rec"}
    assert t.validations["rec"]["accepted"]["reason"] == "r-rec"
    assert m.pipeline_order == ("det", "rec") and m.cpu_only == ["det"]


def test_a_format_this_qnndeploy_does_not_read_parses_to_its_header():
    newer = FORMAT_VERSION + 1
    m = Manifest.parse({**bundles.manifest(), "format_version": newer, "graphs": "anything"})
    assert (m.format, m.format_version, m.supported, m.graphs) == ("qnndeploy-bundle", newer, False, ())
    assert not Manifest.parse({"format": "other", "format_version": True}).supported


@pytest.mark.parametrize("change", [
    lambda m: m["targets"][0].update(soc=5),
    lambda m: m["targets"][0].update(soc_id="12"),
    lambda m: m["cpu"][0].update(format="onnx-v2"),
    lambda m: m["graphs"][0]["inputs"][0].update(shape=[1.5]),
    lambda m: m.update(pipeline="det"),
])
def test_a_field_of_the_wrong_type_is_one_line(change):
    m = bundles.manifest()
    change(m)
    with pytest.raises(QnnDeployError, match=r'^the bundle manifest has no valid "\w+" in \{') as e:
        Manifest.parse(m)
    assert "\n" not in str(e.value)
    with pytest.raises(QnnDeployError, match="is not a JSON object"):
        Manifest.parse([])


def test_the_kotlin_twin_lenience_is_kept():
    """What the Kotlin parser reads as absent when it is of another type, so both twins decide alike."""
    m = bundles.accepted(bundles.manifest(), on=1, reasons={"rec": {"reason": 5}})
    m["qairt"]["min_runtime"] = 249
    parsed = Manifest.parse(m)
    assert parsed.targets[1].accepted_on is None and parsed.targets[1].accepted == {}
    assert parsed.qairt.min_runtime is None


def test_manifest_json_is_read_by_key_only_in_the_manifest_module():
    """Readers use the types; the qnn floor below formats/ (the host emulator) is handed the JSON."""
    allowed = {ROOT / "qnndeploy/formats/manifest.py", ROOT / "qnndeploy/qnn/emulator.py"}
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "qnndeploy").rglob("*.py")) if p not in allowed
             for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"manifest(\[|\.get\()", line)]
    assert found == []


def test_a_bundle_file_is_frozen():
    f = BundleFile("cpu/det.onnx", "0" * 64, 1, "det", FileFormat.ONNX)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.path = "x"  # type: ignore[misc]


def _with_loop(m: dict, **change) -> dict:
    """A format-5 manifest whose graphs are an encoder (mel -> cross_k) and a decoder fed by a loop over them."""
    def t(name, shape, dtype="float32"):
        return {"name": name, "dtype": dtype, "shape": shape}

    m = {**m, "format_version": 5}
    m["graphs"] = [{"name": "det", "inputs": [t("mel", [1, 80, 100])], "outputs": [t("cross_k", [1, 50, 8])]},
                   {"name": "rec", "inputs": [t("tokens", [1, 1], "int32"), t("offset", [1], "int32"),
                                              t("self_k", [1, 16, 8]), t("cross_k_in", [1, 50, 8])],
                    "outputs": [t("logits", [1, 1, 10]), t("this_self_k", [1, 1, 8])]}]
    m["loop"] = {"encoder": "det", "decoder": "rec", "encoder_input": "mel", "token": "tokens", "position": "offset",
                 "mask": None, "logits": "logits", "cross": {"cross_k_in": "cross_k"},
                 "cache": {"self_k": "this_self_k"}, "prompt": [1, 2], "end": 3, "max_tokens": 16, **change}
    return m


def _loop_problems(m: dict, tmp_path) -> list[str]:
    from qnndeploy.verification.checks import check_manifest

    assert manifest_module.schema_errors(m) == []
    found = check_manifest(Manifest.parse(m), {}, set(), tmp_path)
    return [p.message for p in found if "loop" in p.message]


def test_a_decode_loop_parses_and_is_checked_against_the_graphs_it_runs(tmp_path):
    m = _with_loop(bundles.manifest())
    parsed = Manifest.parse(m)
    assert parsed.loop is not None and parsed.loop.loop.cache == (("self_k", "this_self_k"),)
    assert parsed.loop.loop.prompt == (1, 2) and parsed.loop.tokenizer is None and parsed.loop_files == ()
    assert _loop_problems(m, tmp_path) == []
    assert _loop_problems(_with_loop(bundles.manifest(), logits="scores"), tmp_path) == [
        "loop names output 'scores' of graph 'rec', which has no such output"]
    unfed = _with_loop(bundles.manifest(), cross={"self_k": "cross_k"})  # cross_k_in gets nothing
    assert any("feeds no value to decoder input(s) cross_k_in" in p for p in _loop_problems(unfed, tmp_path))
    assert _loop_problems(_with_loop(bundles.manifest(), encoder="nope"), tmp_path) == [
        "loop names encoder 'nope', which is not a graph the NPU runs"]


def test_a_loop_needs_format_5_and_a_readable_tokenizer(tmp_path):
    from qnndeploy.verification.checks import check_manifest

    assert any("loop" in e for e in manifest_module.schema_errors({**_with_loop(bundles.manifest()),
                                                                   "format_version": 4}))
    (tmp_path / "loop").mkdir()
    (tmp_path / "loop" / "tokens.txt").write_text("not base64!! 7\n")
    m = _with_loop(bundles.manifest(), tokenizer={"path": "loop/tokens.txt", "sha256": "0" * 64, "size": 15})
    parsed = Manifest.parse(m)
    assert parsed.loop_files == (BundleFile("loop/tokens.txt", "0" * 64, 15),)
    assert ("loop", parsed.loop_files[0]) in parsed.files() and parsed.loop_files[0] in parsed.model_files
    facts = {"loop/tokens.txt": scan_file(tmp_path / "loop" / "tokens.txt", False)}
    m["loop"]["tokenizer"]["sha256"] = facts["loop/tokens.txt"].sha256
    found = [p for p in check_manifest(Manifest.parse(m), facts, set(facts), tmp_path) if p.path == "loop/tokens.txt"]
    assert [p.message.split(":")[0] for p in found] == ["is not a tokenizer the app can read"]

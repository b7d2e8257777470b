"""bundle verify, deep: each context binary loaded and run on the host HTP emulator against its CPU model, so a
binary whose metadata is fine and whose body is not (a forged or damaged one) is caught, and so is one that loads
but computes another graph's numbers. Real binaries from onnxruntime-qnn, mutated here."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnndeploy.qnn import emulator, htp
from qnndeploy.verification import emulated
from qnndeploy.verification.checks import verify_bundle
from tests.support.cli import run

pytestmark = [pytest.mark.slow, pytest.mark.needs_qnn]


def _mlp(path: Path, seed: int) -> Path:
    """MatMul + Relu on [1, 16] with seeded weights: two seeds give two graphs of one signature."""
    w = numpy_helper.from_array(np.random.default_rng(seed).standard_normal((16, 16)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """compile -> validate (seeded random inputs) -> bundle --from-build: the bundle holds the validation records."""
    root = tmp_path_factory.mktemp("deep")
    a, b = _mlp(root / "a.onnx", 1), _mlp(root / "b.onnx", 2)
    compiled = run("compile", a, b, "--soc", "SM8550", "--soc", "SM8750", "-o", root / "build", process=True)
    assert compiled.returncode == 0
    assert run("validate", root / "build", "--random", "2", "--seed", "7", process=True).returncode == 0
    done = run("bundle", "build", "--from-build", root / "build", "--name", "m", "--version", "1.0.0",
               "-o", root / "dist", process=True)
    assert done.returncode == 0, done.stderr
    return root / "dist" / "m-1.0.0"


def _copy(bundle: Path, dest: Path) -> Path:
    subprocess.run(["cp", "-r", str(bundle), str(dest)], check=True)
    return dest


def _replace(bundle: Path, rel: str, data: bytes) -> None:
    """Write `data` at `rel` and into the manifest (sha256, size): only the file itself can give it away."""
    (bundle / rel).write_bytes(data)
    m = json.loads((bundle / "manifest.json").read_text())
    for t in m["targets"]:
        for a in t["artifacts"]:
            if a["path"] == rel:
                a["sha256"], a["size"] = hashlib.sha256(data).hexdigest(), len(data)
    for entry in m["licences"]["files"]:
        if entry["path"] == rel:
            entry["sha256"] = hashlib.sha256(data).hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(m))


def _vouch(bundle: Path, soc: str, graph: str, sha256: str) -> None:
    """Forge graph's compile and validation records to name a binary of this sha256, and list them rehashed."""
    m = json.loads((bundle / "manifest.json").read_text())
    for entry in m["records"]:
        if entry["path"] in (f"records/{graph}-{soc}-compile.json", f"records/{graph}-{soc}-validation.json"):
            record = json.loads((bundle / entry["path"]).read_text())
            for named in [*record.get("outputs", []), *([record["binary"]] if "binary" in record else [])]:
                if named.get("format", "qnn-context-binary") == "qnn-context-binary":
                    named["sha256"] = sha256
            data = json.dumps(record).encode()
            (bundle / entry["path"]).write_bytes(data)
            entry["sha256"], entry["size"] = hashlib.sha256(data).hexdigest(), len(data)
    (bundle / "manifest.json").write_text(json.dumps(m))


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(emulator.CACHE_ENV, str(tmp_path / "emulated"))


def test_each_graphs_cpu_model_runs_once_for_all_its_socs(bundle, monkeypatch):
    """The CPU reference of a graph is the same for its binaries of every SoC (same model, inputs and seed): the
    emulator child runs it once, not once per SoC, since a CPU model can be gigabytes of fp32."""
    from qnndeploy.model import samples

    ran: list[str] = []
    cpu_outputs = samples.cpu_outputs
    monkeypatch.setattr(samples, "cpu_outputs", lambda model, feeds: ran.append(Path(model).name) or
                        cpu_outputs(model, feeds))

    def in_process(jobs, tc, timeout, started=None):  # the child's loop, here, so that the CPU runs can be counted
        spec = Path(emulator.tempfile.mkdtemp()) / "jobs.json"
        spec.write_text(emulator.child_spec(jobs, spec.parent, spec.parent / "result.json"))
        emulator.main([str(spec)])
        return [emulator.EmulatorOutcome(**o) for o in json.loads((spec.parent / "result.json").read_text())]

    monkeypatch.setattr(emulator, "_run", in_process)
    report = verify_bundle(bundle, deep=True)
    assert report.ok and report.deep.startswith("4 context binaries loaded and run"), report.problems
    assert sorted(ran) == ["a.onnx", "b.onnx"]


def test_a_sound_bundle_loads_and_matches_and_the_report_says_so(bundle):
    report = verify_bundle(bundle, deep=True)
    assert report.ok and report.problems == [], report.problems
    assert report.deep.startswith(
        f"4 context binaries loaded and run on the host HTP emulator (QAIRT {htp.qairt_version()})")
    done = run("bundle", "verify", bundle, process=True)
    assert done.returncode == 0 and "4 context binaries loaded and run on the host HTP emulator" in done.stdout
    shallow = run("bundle", "verify", bundle, "--shallow", process=True)
    assert shallow.returncode == 0 and "not loaded on the host emulator (--shallow)" in shallow.stdout


def test_a_run_the_child_did_not_finish_is_not_kept_as_the_bytes_outcome(bundle, monkeypatch):
    """A child killed by the time limit (or by a signal from outside) says nothing lasting of the bytes: the next
    verify runs them again instead of failing from the cache (it once failed a sound 10 GB bundle that way), and a
    verdict is kept."""
    real = emulator._run

    def hung(jobs, tc, timeout, started=None):
        raise emulator._Crashed(f"the host HTP emulator did not finish loading the context binaries in {timeout:g} s")

    monkeypatch.setattr(emulator, "_run", hung)
    first = verify_bundle(bundle, deep=True)
    assert not first.ok and all("did not finish loading" in p.message for p in first.problems), first.problems
    assert not list(emulator.cache_dir().glob("*.json"))
    monkeypatch.setattr(emulator, "_run", real)
    again = verify_bundle(bundle, deep=True)
    assert again.ok, again.problems
    kept = sorted(emulator.cache_dir().glob("*.json"))
    assert len(kept) == 4  # the verdicts are kept
    for path in kept:  # as older qnndeploy kept a dead child's outcome: read as a miss, run again
        path.write_text(json.dumps({"loaded": False, "passed": False,
                                    "error": "the host HTP emulator crashed loading the context binaries (signal 15)"}))
    assert verify_bundle(bundle, deep=True).ok


def test_another_graphs_binary_computes_other_numbers_and_fails(bundle, tmp_path):
    """b's binary and wrapper under a's names: the same signature, real metadata, another graph's weights."""
    forged = _copy(bundle, tmp_path / "forged")
    _replace(forged, "npu/SM8750/a.bin", (forged / "npu/SM8750/b.bin").read_bytes())
    wrapper = onnx.load(str(forged / "npu/SM8750/b_ctx.onnx"))
    for node in wrapper.graph.node:
        for attr in node.attribute:
            if attr.name == "ep_cache_context":
                attr.s = b"a.bin"
    _replace(forged, "npu/SM8750/a_ctx.onnx", wrapper.SerializeToString())
    _vouch(forged, "SM8750", "a", hashlib.sha256((forged / "npu/SM8750/a.bin").read_bytes()).hexdigest())
    assert verify_bundle(forged).ok  # neither the metadata nor the (forged) records can tell
    report = verify_bundle(forged, deep=True)
    assert not report.ok
    [p] = [p for p in report.problems if p.path == "npu/SM8750/a.bin"]
    assert p.message.startswith("computes other numbers than its CPU model on 2 seeded input(s)")


@pytest.mark.parametrize("tail", ["random", "zeros", "flips"])
def test_a_real_metadata_page_with_a_damaged_body_is_caught(bundle, tmp_path, tail):
    good = (bundle / "npu/SM8550/a.bin").read_bytes()
    rng = random.Random(tail)
    body = bytearray(good)
    if tail == "random":
        body[4096:] = rng.randbytes(len(good) - 4096)
    elif tail == "zeros":
        body[4096:] = bytes(len(good) - 4096)
    else:
        for i in rng.sample(range(4096, len(good)), 64):
            body[i] ^= 0xFF
    damaged = _copy(bundle, tmp_path / tail)
    _replace(damaged, "npu/SM8550/a.bin", bytes(body))
    _vouch(damaged, "SM8550", "a", hashlib.sha256(bytes(body)).hexdigest())  # records that lie: the bytes must tell
    report = verify_bundle(damaged, deep=True)
    shallow = verify_bundle(damaged)
    # caught by the metadata reader, or else by loading it: never accepted unless it still computes a's numbers
    assert not report.ok or not shallow.ok or all(p.path != "npu/SM8550/a.bin" for p in report.problems)
    if shallow.ok:
        assert not report.ok, f"{tail}: a damaged body passed both checks"


def test_without_libqnnsystem_verify_fails_unless_unchecked_is_allowed(bundle, monkeypatch, tmp_path):
    monkeypatch.setenv("QNNDEPLOY_QNN_SYSTEM_LIB", str(tmp_path / "no" / "libQnnSystem.so"))
    report = verify_bundle(bundle)
    assert not report.ok and "no libQnnSystem here to read the context binaries" in report.problems[-1].message
    allowed = verify_bundle(bundle, allow_unchecked=True)
    assert allowed.ok and sorted(allowed.unchecked) == sorted(str(p.relative_to(bundle)) for p in
                                                              bundle.glob("npu/*/*.bin"))
    done = run("bundle", "verify", bundle, "--allow-unchecked", process=True)
    assert done.returncode == 0 and "unchecked" in done.stdout


def test_an_accepted_failure_must_not_be_worse_than_what_was_accepted():
    """A graph shipped with --accept failed validation: the deep check holds it to its record's own figures."""
    recorded = [{"name": "y", "snr_db": 22.0, "cosine": 0.99}]
    assert emulated._worse([{"name": "y", "snr_db": 21.0, "cosine": 0.99, "passed": False}], recorded) is None
    assert emulated._worse([{"name": "y", "snr_db": 12.5, "cosine": 0.9, "passed": False}], recorded) == (
        "output y SNR 12.5 dB, the record's 22.0 dB")
    assert emulated._worse([{"name": "y", "snr_db": None, "cosine": 0.95, "passed": False}],
                           [{"name": "y", "snr_db": None, "cosine": 0.99}]) == (
        "output y cosine 0.9500, the record's 0.9900")

"""The split remedy end to end, on the real onnxruntime-qnn: a log front end that fails validation in fp16 on inputs
with tiny values is cut (prepare --split-at), its tail compiled and validated alone (it passes), and the two parts
bundled with their order; verify, the decision and scaffold take the CPU-only part."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qnndeploy.decide.decision import DeviceIdentity, decide
from qnndeploy.formats.manifest import FileFormat, Manifest
from qnndeploy.formats.records import SplitRecord
from qnndeploy.scaffold import scaffold
from qnndeploy.verification.checks import verify_bundle
from tests.support.cli import run

pytestmark = [pytest.mark.needs_qnn, pytest.mark.slow]


def outcome(*args: object) -> dict:
    """`qnndeploy ARGS... --json`: its exit code and what it printed."""
    r = run(*args, "--json")
    assert r.exit_code in (0, 1, 10), r.output  # 10: check's fixable
    return {"code": r.exit_code, **json.loads(r.stdout)}  # stderr has the progress lines


def front(path: Path) -> Path:
    import onnx

    from tests.support import synth_models

    onnx.save(synth_models.log_front(), path)
    return path


def test_split_at_the_log_makes_the_npu_part_pass_and_the_bundle_runs_both_in_order(tmp_path: Path) -> None:
    model = front(tmp_path / "front.onnx")
    # power-spectrum-like values over nine decades: most below fp16's smallest normal (6.1e-5)
    x = (10 ** np.random.default_rng(1).uniform(-12, -3, (1, 64))).astype(np.float32)
    (tmp_path / "in").mkdir()
    np.save(tmp_path / "in" / "x.npy", x)

    # whole on the NPU: fp16 cannot hold the tiny values the Log reads
    outcome("compile", model, "--soc", "SM8750", "-o", tmp_path / "whole", "--no-cache")
    whole = outcome("validate", tmp_path / "whole", "--inputs", tmp_path / "in")
    assert whole["code"] == 1 and whole["targets"][0]["status"] == "failed"

    # the remedy: the Log on the CPU, the rest on the NPU
    split = outcome("prepare", model, "--split-at", "logx", "-o", tmp_path / "front.onnx.parts")
    assert split["cut"] == ["logx"]
    head, tail = (Path(p["path"]) for p in split["parts"])
    outcome("compile", tail, "--soc", "SM8750", "-o", tmp_path / "build", "--no-cache")
    # the tail is fed what the CPU head makes of the model's own inputs: the log of the tiny values
    passed = outcome("validate", tmp_path / "build", "--inputs", tmp_path / "in")
    assert passed["code"] == 0 and passed["targets"][0]["status"] == "passed"
    assert passed["targets"][0]["inputs"]["kind"] == "chain" and passed["targets"][0]["chain"]["passed"]
    (tmp_path / "mid").mkdir()
    np.save(tmp_path / "mid" / "logx.npy", np.log(x))  # the cut tensor itself: not what the app feeds the model
    mid = run("validate", tmp_path / "build", "--inputs", tmp_path / "mid")
    assert mid.exit_code == 2 and "validated on the model's own inputs, x" in mid.output, mid.output

    record = tmp_path / "front.onnx.parts.split.json"
    written = json.loads(record.read_text())
    assert SplitRecord.parse(written, record).to_json() == written  # read strictly, it is what was written
    bundled = outcome("bundle", "--from-build", tmp_path / "build", "--split", record, "--name", "front", "--version",
                  "1", "-o", tmp_path)
    assert bundled["code"] == 0
    bundle = tmp_path / "front-1"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert json.dumps(Manifest.parse(manifest).to_json()) == json.dumps(manifest)  # a split's manifest both ways
    assert manifest["pipeline"] == [head.stem, tail.stem]
    assert [(g["name"], g.get("cpu_only", False)) for g in manifest["graphs"]] == [(tail.stem, False),
                                                                                 (head.stem, True)]
    assert not any(head.stem in a.get("graph", "") for t in manifest["targets"] for a in t["artifacts"])
    assert verify_bundle(bundle).ok

    d = decide(Manifest.parse(manifest), DeviceIdentity("SM8750", None, 34), load_errors={}, lib_dir="/lib",
               npu_format=FileFormat.ORT_EPCONTEXT)
    assert d.npu and d.cpu_graphs == [head.stem]
    assert d.paths == {head.stem: f"cpu/{head.stem}.onnx", tail.stem: f"npu/SM8750/{tail.stem}_ctx.onnx"}
    assert f"cpu/{head.stem}.onnx" in d.files
    glue = scaffold(bundle, "com.example.front", tmp_path / "glue")
    assert (glue.path / "bundle" / "assets" / "qnndeploy" / "cpu" / f"{head.stem}.onnx").is_file()

    # a manifest that lost its pipeline is refused: the app would not know the order
    broken = {k: v for k, v in manifest.items() if k != "pipeline"}
    (bundle / "manifest.json").write_text(json.dumps(broken))
    assert any("needs the pipeline" in p.message for p in verify_bundle(bundle).problems)


def test_a_split_into_a_new_folder_makes_it_and_a_failed_one_leaves_none(tmp_path: Path) -> None:
    """-o NEWDIR/x.onnx: plain prepare creates NEWDIR, so the split does too; when the split fails (a cut tensor
    that does not exist), the folders it would have made are not left behind. The printed next step is runnable."""
    model = front(tmp_path / "front.onnx")
    out = tmp_path / "a" / "b" / "x.onnx"
    r = run("prepare", str(model), "--split-at", "logx", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == ["x-head.onnx", "x-tail.onnx", "x.split.json"]
    assert "next: qnndeploy compile " in r.output
    assert " then qnndeploy bundle build --from-build build --split " in r.output
    r = run("prepare", str(model), "--split-at", "nosuch", "-o", str(tmp_path / "c" / "x.onnx"))
    assert r.exit_code == 2 and "Traceback" not in r.output and not (tmp_path / "c").exists()


@pytest.mark.parametrize("cpu", ["head", "tail"])
def test_a_constant_read_on_both_sides_is_copied_not_cut(tmp_path: Path, cpu: str) -> None:
    """A scalar Constant node read before and after the cut is no cut tensor: each part gets its own copy, and the
    tail reads only the cut tensor from the head."""
    import onnx

    from tests.support import synth_models

    onnx.save(synth_models.shared_constant(), tmp_path / "m.onnx")
    r = run("prepare", str(tmp_path / "m.onnx"), "--split-at", "r", "--cpu-part", cpu,
            "-o", str(tmp_path / "parts.onnx"), "--json")
    assert r.exit_code == 0, r.output
    split = json.loads(r.stdout)
    assert split["cut"] == ["r"]
    assert [(p["name"], [i["name"] for i in p["inputs"]], p["runs_on"]) for p in split["parts"]] == [
        ("head", ["x"], "cpu" if cpu == "head" else "npu"), ("tail", ["r"], "cpu" if cpu == "tail" else "npu")]


def test_a_model_over_one_context_is_split_by_size_into_npu_graphs_bundled_as_a_pipeline(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    """check says the model's weights exceed one context and prints the split; the printed prepare writes NPU parts
    each under the size, self-contained although the source keeps its weights in external data (and each part
    keeps its own in a data file when over BIG, shrunk here); compiled, validated and bundled they run in order."""
    import shlex

    import onnx

    from qnndeploy.model import split
    from tests.support import synth_models

    model = synth_models.save_with_external_data(synth_models.residual_stack(6, 64), tmp_path / "stack.onnx")
    checked = outcome("check", model, "--context-gb", "2e-05")  # 6 weights of 8,192 bytes at fp16
    assert checked["code"] == 10
    report = checked["models"][0]
    assert [(f["code"], f["severity"]) for f in report["findings"]] == [("size", "fixable")]
    assert not report["htp"]["measured"]
    command = shlex.split(report["prepare_command"])
    assert command[:2] == ["qnndeploy", "prepare"] and command[-2:] == ["--split-size", "2e-05"]

    monkeypatch.setattr(split, "BIG", 10_000)
    parts = outcome(*command[1:])
    assert parts["code"] == 0 and parts["cut"] == ["h2", "h4"]
    assert [(p["name"], p["runs_on"], p["weight_bytes"]) for p in parts["parts"]] == [
        ("1", "npu", 16_384), ("2", "npu", 16_384), ("3", "npu", 16_384)]
    paths = [Path(p["path"]) for p in parts["parts"]]
    assert all(p.with_name(p.name + ".data").is_file() for p in paths)
    (tmp_path / "stack.onnx.weights").unlink()  # the parts read nothing of the source
    assert [i.name for i in onnx.load(str(paths[1])).graph.input] == ["h2"]

    outcome("compile", *paths, "--soc", "SM8750", "-o", tmp_path / "build", "--no-cache")
    validated = run("validate", str(tmp_path / "build"))
    assert validated.exit_code == 0, validated.output
    record = tmp_path / "stack-parts" / "stack.split.json"
    assert f"next: qnndeploy bundle build --from-build {tmp_path / 'build'} --split {record} " in validated.output
    unsplit = run("bundle", "--from-build", str(tmp_path / "build"), "--name", "stack",
                  "--version", "1", "-o", str(tmp_path))
    assert unsplit.exit_code == 2 and f"parts of a split: bundle them with its record, --split {record}" \
        in unsplit.output
    assert outcome("bundle", "--from-build", tmp_path / "build", "--split", record, "--name", "stack", "--version", "1",
               "-o", tmp_path)["code"] == 0
    bundle = tmp_path / "stack-1"
    manifest = json.loads((bundle / "manifest.json").read_text())
    names = [p.stem for p in paths]
    assert manifest["pipeline"] == names and not any(g.get("cpu_only") for g in manifest["graphs"])
    assert {a["path"] for a in manifest["cpu"]} >= {f"cpu/{n}.onnx.data" for n in names}
    assert verify_bundle(bundle).ok
    d = decide(Manifest.parse(manifest), DeviceIdentity("SM8750", None, 34), load_errors={}, lib_dir="/lib",
               npu_format=FileFormat.ORT_EPCONTEXT)
    assert d.npu and d.paths == {n: f"npu/SM8750/{n}_ctx.onnx" for n in names}


def test_a_skip_past_a_size_cut_crosses_it_and_a_node_over_the_size_is_refused(tmp_path: Path) -> None:
    """One weight per part: the second part reads the first layer's input through the skip connection as well."""
    import onnx

    from tests.support import synth_models

    onnx.save(synth_models.residual_stack(4, 64), tmp_path / "stack.onnx")
    parts = outcome("prepare", tmp_path / "stack.onnx", "--split-size", "1e-05", "-o", tmp_path / "p.onnx")
    assert [[i["name"] for i in p["inputs"]] for p in parts["parts"]] == [["x"], ["h1", "h0"], ["h2"], ["h3", "h2"]]
    r = run("prepare", str(tmp_path / "stack.onnx"), "--split-size", "5e-06", "-o",
            str(tmp_path / "q.onnx"))
    assert r.exit_code == 2 and "node mm0 alone reads 8.19e-06 GB of weights" in r.output
    assert not list(tmp_path.glob("q*"))

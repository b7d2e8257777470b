"""A graph that failed validation is never shipped silently: `bundle --from-build` refuses it unless `--accept
GRAPH@SOC=REASON` gives the reason, the manifest records it, `bundle verify` prints it (and refuses a failure without
one), and `--accept-on cpu` makes the on-device decision take the CPU on that SoC.

The failing build is real: two tiny graphs compiled by onnxruntime-qnn for two SoCs and validated on the host HTP
emulator, enc against an SNR threshold no fp16 output can meet (--min-snr-db 200), dec with the defaults.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest

from qnndeploy.base.errors import QnnDeployError
from qnndeploy.bundle.build import build_bundle, spec_from_build
from qnndeploy.decide.decision import DeviceIdentity, decide
from qnndeploy.formats.manifest import Manifest, schema_errors, worst_metric
from qnndeploy.model.onnxio import model_inputs
from qnndeploy.model.samples import write_samples
from qnndeploy.qnn import htp
from qnndeploy.verification.checks import verify_bundle
from tests.support import bundles
from tests.support.cli import run
from tests.support.host import require

SOCS = ["SM8550", "SM8750"]
PHONE = DeviceIdentity("SM8750", "sun", 35)


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    """enc failed validation on both SoCs (snr < 200 dB); dec passed on both."""
    require(htp.available(), "onnxruntime-qnn")
    from qnndeploy.compile import compile_models
    from qnndeploy.validate import ValidateOptions, validate_build

    root = tmp_path_factory.mktemp("accept")
    models = {g: bundles.tiny_model(root / f"{g}.onnx", 8 * (i + 1)) for i, g in enumerate(("enc", "dec"))}
    out = root / "build"
    assert compile_models(models, SOCS, out).ok
    assert validate_build(out).ok
    passed = {soc: (out / "dec" / soc / "validation.json").read_bytes() for soc in SOCS}
    assert not validate_build(out, ValidateOptions(thresholds={"min_snr_db": 200.0})).ok
    for soc, record in passed.items():
        (out / "dec" / soc / "validation.json").write_bytes(record)
    return out


def outcome(*args: str) -> tuple[int, str, str]:
    """The exit code, stdout and stderr of `qnndeploy ARGS...`."""
    r = run(*args)
    return r.exit_code, r.stdout, r.stderr


def manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def edit(bundle: Path, change) -> None:
    m = manifest(bundle)
    change(m)
    (bundle / "manifest.json").write_text(json.dumps(m))


@pytest.mark.slow
def test_a_failed_graph_is_refused_with_its_worst_metric_and_the_accept_form(build, tmp_path):
    code, out, err = outcome("bundle", "--name", "x", "--version", "1.0.0", "--from-build", str(build),
                         "-o", str(tmp_path))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and not out, err
    assert re.fullmatch(r'error: validation failed for enc@SM8550 \(snr \d+\.\d dB < 200\), enc@SM8750 \(snr '
                        r'\d+\.\d dB < 200\): fix the graph \(qnndeploy validate .*build shows every output\), or '
                        r'ship it with a reason: --accept enc@SM8550="REASON" for each \(GRAPH@\* for all its SoCs; '
                        r'add --accept-on cpu to make the app use the CPU there\)', lines[0]), lines[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize(("accept", "message"), [
    ({("enc", "SM8550"): "fine"}, r"validation failed for enc@SM8750 \(snr"),  # one pair of two
    ({("enc", "*"): "fine", ("dec", "SM8750"): "fine"},
     r"--accept dec@SM8750: dec@SM8750 passed validation, so there is no failure to accept"),
    ({("enc", "*"): "fine", ("enc", "SM8650"): "fine"}, r"--accept enc@SM8650: enc@SM8650 is not in the build"),
    ({("dec", "*"): "fine"}, r"--accept dec@\*: graph dec failed validation on no SoC"),
    ({("enc", "*"): "  "}, r"--accept enc@\*: give a reason of one line"),
    ({("enc", "*"): "two\nlines"}, r"--accept enc@\*: give a reason of one line"),
    ({("enc", "*"): "x" * 501}, r"1 to 500 characters"),
    ({("enc", "SM9999"): "fine"}, r"SM9999"),  # the catalog's own error for an unknown SoC
])
def test_accepts_that_would_record_a_false_or_empty_reason_are_refused(build, accept, message):
    with pytest.raises(QnnDeployError, match=message):
        spec_from_build(build, "x", "1.0.0", accept)


@pytest.mark.slow
def test_accepted_failures_ship_with_their_reason_and_verify_prints_them(build, tmp_path):
    code, out, err = outcome("bundle", "--name", "x", "--version", "1.0.0", "--from-build", str(build),
                         "--accept", "enc@*=cosine 0.9999 is enough for wake words",
                         "--accept", "enc@SM8750=checked on a Galaxy S25: same top-1", "-o", str(tmp_path))
    assert code == 0, err
    m = manifest(tmp_path / "x-1.0.0")
    by_soc = {t["soc"]: t for t in m["targets"]}
    assert by_soc["SM8550"]["validation"]["graphs"]["enc"]["accepted"] == {
        "reason": "cosine 0.9999 is enough for wake words", "by": "bundle --accept"}
    graphs = by_soc["SM8750"]["validation"]["graphs"]
    assert graphs["enc"]["accepted"]["reason"] == "checked on a Galaxy S25: same top-1"  # the SoC's own wins
    assert "accepted" not in graphs["dec"]
    assert all(t["validation"]["passed"] is False and t["accepted_on"] == "npu" for t in m["targets"])
    assert not schema_errors(m)
    assert "warning: manifest.json: target SM8750: graph 'enc' FAILED validation (snr" in out
    assert "accepted: checked on a Galaxy S25: same top-1; the app uses the NPU on SM8750" in out

    code, out, _ = outcome("bundle", "verify", str(tmp_path / "x-1.0.0"))
    assert code == 0 and out.startswith("OK ")
    assert re.search(r"warning: manifest.json: target SM8550: graph 'enc' FAILED validation \(snr \d+\.\d dB < 200\), "
                     r"accepted: cosine 0.9999 is enough for wake words; the app uses the NPU on SM8550", out), out
    code, out, _ = outcome("bundle", "verify", str(tmp_path / "x-1.0.0"), "--json")
    report = json.loads(out)
    assert code == 0 and [(a["soc"], a["graph"], a["runs_on"], a["by"]) for a in report["accepted"]] == [
        ("SM8550", "enc", "npu", "bundle --accept"), ("SM8750", "enc", "npu", "bundle --accept")]
    assert any("FAILED validation" in w["message"] for w in report["warnings"])
    assert decide(Manifest.parse(m), PHONE, load_errors={}, lib_dir="/lib").reason_key == "npu"


@pytest.mark.slow
def test_accept_on_cpu_makes_the_app_take_the_cpu_on_that_soc(build, tmp_path):
    spec = spec_from_build(build, "x", "1.0.0", {("enc", "*"): "too far off on the NPU"}, "cpu")
    bundle = build_bundle(spec, tmp_path).path
    m = manifest(bundle)
    assert [t["accepted_on"] for t in m["targets"]] == ["cpu", "cpu"]
    assert verify_bundle(bundle).ok
    d = decide(Manifest.parse(m), PHONE, load_errors={}, lib_dir="/lib")
    assert (d.provider, d.reason_key) == ("cpu", "validation_failed")
    assert d.reason == ('graph "enc" failed validation on SM8750 and the bundle asks for the CPU there (accepted: '
                        "too far off on the NPU)")
    assert d.paths == {"enc": "cpu/enc.onnx", "dec": "cpu/dec.onnx"} and d.adsp_library_path is None


@pytest.mark.slow
def test_accept_options_need_a_compile_folder_and_each_other(build, tmp_path):
    code, _, err = outcome("bundle", "--name", "x", "--version", "1.0.0", "--cpu", "enc=e.onnx",
                       "--accept", "enc@SM8750=ok", "-o", str(tmp_path))
    assert code == 2 and "--accept and --accept-on need --from-build" in err
    code, _, err = outcome("bundle", "--name", "x", "--version", "1.0.0", "--from-build", str(build),
                       "--accept-on", "cpu", "-o", str(tmp_path))
    assert code == 2 and "--accept-on says where the app runs accepted failures: give them with --accept" in err
    code, _, err = outcome("bundle", "--name", "x", "--version", "1.0.0", "--from-build", str(build),
                       "--accept", "enc=ok", "-o", str(tmp_path))
    assert code == 2 and "is not of the form GRAPH@SOC=" in err
    code, _, err = outcome("bundle", "--name", "x", "--version", "1.0.0", "--from-build", str(build),
                       "--accept", "enc@*=a", "--accept", "enc@*=b", "-o", str(tmp_path))
    assert code == 2 and "--accept gives enc@* twice" in err


@pytest.fixture(scope="module")
def accepted(build, tmp_path_factory) -> Path:
    spec = spec_from_build(build, "x", "1.0.0", {("enc", "*"): "fine"}, "cpu")
    return build_bundle(spec, tmp_path_factory.mktemp("accepted")).path


@pytest.mark.slow
@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m["targets"][1]["validation"]["graphs"]["enc"].pop("accepted"),
     (r"target SM8750: graph 'enc' failed validation \(snr \d+\.\d dB < 200\) and no reason accepts it: fix the "
      r'graph, or bundle again with --accept enc@SM8750="REASON"')),
    (lambda m: m["targets"][1]["validation"]["graphs"]["dec"].update(accepted={"reason": "made up"}),
     r"target SM8750: graph 'dec' has an accepted failure, but its validation did not fail \(passed: True\)"),
    (lambda m: [s.pop("accepted") for s in m["targets"][0]["validation"]["graphs"].values() if "accepted" in s]
     and m["targets"][0]["validation"]["graphs"]["enc"].update(passed=True),
     r"target SM8550: accepted_on 'cpu' but no graph of it has an accepted validation failure"),
    (lambda m: m["targets"][0]["validation"]["graphs"]["enc"]["accepted"].update(reason="a\nb"),
     r"accepted/reason: 'a\\nb' holds a control character"),
])
def test_verify_refuses_a_hand_edited_validation(accepted, tmp_path, change, message):
    bundle = shutil.copytree(accepted, tmp_path / "b")
    edit(bundle, change)
    report = verify_bundle(bundle)
    assert not report.ok
    assert any(re.search(message, p.message) for p in report.problems), [p.message for p in report.problems]


def test_worst_metric_names_the_test_an_output_missed():
    limits = {"min_cosine": 0.999, "min_snr_db": 30.0, "atol": 1e-3}
    out = {"name": "y", "passed": False, "cosine": 0.982, "snr_db": 12.44, "max_abs_diff": 0.5,
           "judged_on": "cosine+snr"}
    assert worst_metric({"passed": False, "thresholds": limits, "outputs": [out]}) == "snr 12.4 dB < 30"
    assert worst_metric({"thresholds": limits, "outputs": [{**out, "snr_db": 31.0}]}) == "cosine 0.982 < 0.999"
    near_zero = {**out, "judged_on": "max_abs_diff", "max_abs_diff": 0.02}
    assert worst_metric({"thresholds": limits, "outputs": [near_zero]}) == "max abs diff 0.02 > atol 0.001"
    assert worst_metric({"thresholds": limits, "outputs": [{**out, "judged_on": "finite"}]}) == (
        "NaN or Inf in the NPU output")
    two = [{**out, "name": "boxes", "snr_db": 25.0}, {**out, "name": "scores"}, {**out, "name": "ok", "passed": True}]
    assert worst_metric({"thresholds": limits, "outputs": two}) == "scores: snr 12.4 dB < 30"
    assert worst_metric({"outputs": [{**out, "judged_on": "topk"}]}) == "failed, judged on topk"


def accepted_manifest(on: str | None = "cpu", graphs: tuple[str, ...] = ("rec",), soc: str = "SM8750") -> dict:
    """bundles.manifest() with `graphs` of the SoC's target failed and accepted (reason "r-GRAPH")."""
    m = bundles.manifest(format_version=3)
    target = next(t for t in m["targets"] if t["soc"] == soc)
    target["validation"] = {"passed": False, "graphs": {
        g: {"passed": g not in graphs, **({"accepted": {"reason": f"r-{g}"}} if g in graphs else {})}
        for g in ("det", "rec")}}
    if on is not None:
        target["accepted_on"] = on
    return m


def test_the_decision_takes_the_cpu_only_where_the_bundle_asks_for_it():
    def key(m: dict, device: DeviceIdentity = PHONE, load_errors: dict | None = None) -> tuple[str, str]:
        assert not schema_errors(m)
        d = decide(Manifest.parse(m), device, load_errors=load_errors or {}, lib_dir="/lib")
        return d.reason_key, d.reason

    first = 'graph "det" failed validation on SM8750 and the bundle asks for the CPU there (accepted: r-det)'
    assert key(accepted_manifest(graphs=("det", "rec"))) == ("validation_failed", first)  # the manifest's order
    assert key(accepted_manifest())[0] == "validation_failed"
    assert key(accepted_manifest(on="npu"))[0] == "npu"
    assert key(accepted_manifest(on=None))[0] == "npu"
    assert key(accepted_manifest(soc="SM8550"))[0] == "npu"  # another SoC's target
    assert key(accepted_manifest(soc="SM8550"), DeviceIdentity("SM8550", None, 34))[0] == "validation_failed"
    # decided before the libraries are loaded
    assert key(accepted_manifest(), load_errors={"libQnnHtp.so": "x"})[0] == "validation_failed"


def test_a_graph_judged_on_other_inputs_per_target_is_said_in_the_manifest_and_warned(tmp_path):
    """SM8750 validated on sample files, SM8550 on random values: each target's summary says what judged it, and
    bundle build and verify warn that the verdicts rest on different evidence."""
    require(htp.available(), "onnxruntime-qnn")
    model = bundles.tiny_model(tmp_path / "net.onnx", 8)
    assert run("compile", model, "--soc", ",".join(SOCS), "-o", tmp_path / "build", "--no-cache").exit_code == 0
    (tmp_path / "samples").mkdir()
    spec = model_inputs(model)[0]
    write_samples(tmp_path / "samples", [{spec.name: np.full(spec.static_shape, 0.5, np.float32)}] * 2)
    assert run("validate", tmp_path / "build", "--soc", "SM8750", "--inputs", tmp_path / "samples").exit_code == 0
    shown = run("validate", tmp_path / "build", "--soc", "SM8550")
    assert shown.exit_code == 0
    printed = shown.output.splitlines()[-1]  # the next line names the bundle after the build's one graph
    assert printed == f"next: qnndeploy bundle build --from-build {tmp_path / 'build'} --name net --version VERSION"
    built = run(*shlex.split(printed.removeprefix("next: qnndeploy "))[:-1], "1", "-o", tmp_path / "out")
    assert built.exit_code == 0, built.output
    said = {t["soc"]: t["validation"]["graphs"]["net"]["inputs"]
            for t in json.loads((tmp_path / "out" / "net-1" / "manifest.json").read_text())["targets"]}
    assert said == {"SM8750": "2 sample files", "SM8550": "1 seeded random sample"}
    warning = "graph 'net' was judged on different inputs per target"
    assert warning in built.output
    assert warning in run("bundle", "verify", tmp_path / "out" / "net-1", "--shallow").output

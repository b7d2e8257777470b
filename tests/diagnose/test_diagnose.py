"""`qnndeploy diagnose` on fp16-sensitive graphs built here and compiled with the real onnxruntime-qnn: a log of tiny
values in the front end (underflow) and a normalization whose scaled values overflow fp16 late in the graph; the
bisection on a stand-in session; the PNG writer."""

from __future__ import annotations

import json
import shlex
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from qnndeploy import compile as compile_stage
from qnndeploy import diagnose as stage
from qnndeploy import validate as validate_stage
from qnndeploy.diagnose import plot
from qnndeploy.model import metrics
from qnndeploy.qnn import htp
from tests.support import SPEECH
from tests.support.cli import run
from tests.support.host import require
from tests.support.synth_models import log_energy_graph, offset_free_scalenorm, scalenorm_after_gain
from tests.support.synth_models import save_graph as save_fit


def save(nodes, inits, shape, path: Path) -> Path:
    graph = h.make_graph(nodes, path.stem, [h.make_tensor_value_info("x", T.FLOAT, shape)],
                         [h.make_tensor_value_info("y", T.FLOAT, shape)], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def dense_layers(start: str, count: int, width: int, rng: np.random.Generator, last: str | None = None):
    """MatMul+Relu layers with weights that keep values near 1: harmless in fp16."""
    nodes, inits, x = [], [], start
    for i in range(count):
        w = f"W{start}{i}"
        inits.append(nh.from_array(rng.normal(0, 1 / np.sqrt(width), (width, width)).astype(np.float32), w))
        out = last if (last and i == count - 1) else f"{start}_relu{i}"
        nodes += [h.make_node("MatMul", [x, w], [f"{start}_mm{i}"], name=f"mm{i}"),
                  h.make_node("Relu", [f"{start}_mm{i}"], [out], name=f"relu{i}")]
        x = out
    return nodes, inits, x


def log_frontend(path: Path) -> Path:
    """A log-mel-like front end: Log of the input, then three dense layers."""
    nodes, inits, _ = dense_layers("logx", 3, 64, np.random.default_rng(1), last="y")
    return save([h.make_node("Log", ["x"], ["logx"], name="log"), *nodes], inits, [1, 32, 64], path)


def scaled_norm(path: Path) -> Path:
    """Six harmless dense layers, then a normalization that scales by 1e6 (values up to ~4e5, over fp16's 65504)
    before taking the mean off and scaling back."""
    nodes, inits, x = dense_layers("x", 6, 64, np.random.default_rng(2))
    inits += [nh.from_array(np.array(1e6, np.float32), "big")]
    nodes += [h.make_node("Mul", [x, "big"], ["scaled"], name="scale"),
              h.make_node("ReduceMean", ["scaled"], ["mean"], name="mean", axes=[-1], keepdims=1),
              h.make_node("Sub", ["scaled", "mean"], ["centered"], name="center"),
              h.make_node("Div", ["centered", "big"], ["y"], name="unscale")]
    return save(nodes, inits, [1, 16, 64], path)


def tiny_inputs(folder: Path) -> Path:
    """A real-looking spectrogram: values in (0, 1] spread log-uniformly down to 1e-10 (silence)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    np.save(folder / "x.npy", (10 ** rng.uniform(-10, 0, (1, 32, 64))).astype(np.float32))
    return folder


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    folder = tmp_path_factory.mktemp("diag")
    models = {"logmel": log_frontend(folder / "logmel.onnx"), "norm": scaled_norm(folder / "norm.onnx")}
    out = folder / "build"
    assert compile_stage.compile_models(models, ["SM8750"], out, compile_stage.CompileOptions(use_cache=False)).ok
    (folder / "inputs" / "norm").mkdir(parents=True)
    np.save(folder / "inputs" / "norm" / "x.npy", np.random.default_rng(0).uniform(-1, 1, (1, 16, 64)).astype("f4"))
    return {"build": out, "inputs": tiny_inputs(folder / "inputs" / "logmel"), "folder": folder, **models}


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_a_log_of_tiny_values_fails_validation_and_diagnose_names_the_log(builds):
    summary = validate_stage.validate_build(builds["build"], validate_stage.ValidateOptions(builds["inputs"].parent))
    status = {t.graph: t.status for t in summary.targets}
    assert status == {"logmel": "failed", "norm": "failed"}  # measured: logmel 7 dB
    result = stage.diagnose(builds["build"] / "logmel" / "SM8750", stage.DiagnoseOptions(builds["inputs"]))
    bad = result.first_bad
    assert bad is not None and (bad.tensor, bad.op_type, bad.node, bad.position) == ("logx", "Log", "log", 0)
    assert result.last_good is None and not result.ok and result.compiles == 1
    assert {e.kind for e in result.explanations} >= {"underflow"}
    under = next(e for e in result.explanations if e.kind == "underflow")
    assert under.tensor == "x" and "below 6.1e-5" in under.text and "1e-10" in under.text
    (x,) = result.input_ranges
    assert x.tensor == "x" and x.subnormal_share > 0.5 and x.min_nonzero_abs is not None and x.min_nonzero_abs < 1e-9
    split = next(r for r in result.remedies if r.kind == "split")
    assert split.command == (f"qnndeploy prepare {builds['logmel']} --split-at logx --cpu-part head "
                             f"-o {builds['folder']}/logmel-parts/logmel.onnx")
    clamp = next(r for r in result.remedies if r.kind == "clamp")
    assert "Log of values down to 1e-10: add Max(x, 1e-4) before it" in clamp.text
    threshold = next(r for r in result.remedies if r.kind == "threshold")
    assert threshold.command is not None and threshold.command.startswith(
        f"qnndeploy validate {builds['build']} --graph logmel --soc SM8750 --inputs {builds['inputs']} --min-snr-db ")
    assert threshold.command.endswith(' --reason "REASON"') and "--min-cosine 0." in threshold.command


@pytest.mark.needs_qnn
def test_the_same_graph_passes_on_random_input(builds):
    """Random input in [-1, 1) has no tiny values (and Log of the negatives is NaN on both sides): why real
    samples matter. Here simply: uniform (0, 1] input keeps every tensor above 30 dB."""
    folder = builds["folder"] / "uniform"
    folder.mkdir()
    np.save(folder / "x.npy", np.random.default_rng(3).uniform(0.05, 1, (1, 32, 64)).astype(np.float32))
    result = stage.diagnose(builds["build"] / "logmel" / "SM8750", stage.DiagnoseOptions(folder))
    assert result.ok and result.first_bad is None and result.remedies == []
    assert all(p.snr_db is not None and p.snr_db > 30 for p in result.probes)


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_the_split_remedy_makes_the_npu_part_pass(builds, tmp_path):
    """The tail after the printed split point, on the NPU, with the log on the CPU, passes validate. The tail is cut
    with onnx.utils.extract_model here, standing in for prepare --split-at until it exists."""
    result = stage.diagnose(builds["build"] / "logmel" / "SM8750", stage.DiagnoseOptions(builds["inputs"]))
    split = next(r for r in result.remedies if r.kind == "split")
    point = split.command.split("--split-at ")[1].split()[0]
    tail = tmp_path / "tail.onnx"
    onnx.utils.extract_model(str(builds["logmel"]), str(tail), [point], ["y"])
    out = tmp_path / "build"
    assert compile_stage.compile_models({"tail": tail}, ["SM8750"], out,
                                        compile_stage.CompileOptions(use_cache=False)).ok
    x = np.load(builds["inputs"] / "x.npy")
    samples = tmp_path / "samples"
    samples.mkdir()
    np.savez(samples / "s.npz", **{point: np.log(x)})  # what the CPU head hands the NPU
    summary = validate_stage.validate_build(out, validate_stage.ValidateOptions(samples))
    assert summary.ok, [(m.name, m.snr_db) for t in summary.targets for m in t.outputs]


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_the_split_remedy_run_as_printed_makes_validate_pass(builds, tmp_path):
    """The done-when: run the printed prepare --split-at, compile the NPU part, validate it with what the CPU part
    hands it: it passes where the whole graph failed."""
    result = stage.diagnose(builds["build"] / "logmel" / "SM8750", stage.DiagnoseOptions(builds["inputs"]))
    split = next(r for r in result.remedies if r.kind == "split")
    assert split.command is not None
    args = shlex.split(split.command)[1:]
    out = tmp_path / "logmel-split.onnx"
    args[args.index("-o") + 1] = str(out)
    (tmp_path / "prep").mkdir()
    shutil.copy(builds["inputs"] / "x.npy", tmp_path / "prep")  # the equivalence run: real input, no log of < 0
    done = run(*args, "--inputs", tmp_path / "prep")
    assert done.exit_code == 0, done.output
    record = json.loads((tmp_path / "logmel-split.split.json").read_text())
    npu = next(p for p in record["parts"] if p["runs_on"] == "npu")
    cpu = next(p for p in record["parts"] if p["runs_on"] == "cpu")
    assert (cpu["name"], npu["name"]) == ("head", "tail")
    build = tmp_path / "build"
    assert compile_stage.compile_models({"tail": tmp_path / npu["path"]}, ["SM8750"], build,
                                        compile_stage.CompileOptions(use_cache=False)).ok
    # the model's own inputs: validate feeds the tail what the CPU head makes of them
    summary = validate_stage.validate_build(build, validate_stage.ValidateOptions(builds["inputs"]))
    assert summary.ok, [(m.name, m.snr_db) for t in summary.targets for m in t.outputs]
    assert summary.targets[0].inputs is not None and summary.targets[0].inputs["kind"] == "chain"
    assert all(m.snr_db is not None and m.snr_db > 40 for t in summary.targets for m in t.outputs)


@pytest.mark.needs_qnn
def test_values_over_65504_late_in_the_graph_are_an_overflow_with_the_tail_split(builds):
    result = stage.diagnose(builds["build"] / "norm" / "SM8750", stage.DiagnoseOptions(random=1))
    bad, good = result.first_bad, result.last_good
    assert bad is not None and good is not None
    assert (bad.tensor, bad.op_type, bad.node) == ("scaled", "Mul", "scale") and good.tensor == "x_relu5"
    assert not result.ok and 1 < result.compiles <= 4
    over = next(e for e in result.explanations if e.kind == "overflow")
    assert over.tensor == "scaled" and "above 65504" in over.text
    split = next(r for r in result.remedies if r.kind == "split")
    assert split.command is not None and "--split-at x_relu5 --cpu-part tail " in split.command
    assert split.measured is not None and split.measured.passed  # measured: 61.9 dB as a chain
    assert any(r.kind == "rescale" and "scale it down by" in r.text for r in result.remedies)
    # the other direction was cut and run too: its NPU tail overflows, so it is reported as failing, never offered
    head = next(t for t in result.splits if t.cpu_part == "head")
    assert head.split_at == ["scaled"] and head.measured is not None and not head.measured.passed
    assert [r.command for r in result.remedies if r.kind == "split"] == [split.command]


@pytest.mark.needs_qnn
def test_the_command_line(builds, tmp_path):
    target = builds["build"] / "logmel" / "SM8750"
    png = tmp_path / "curve.png"
    text = run("diagnose", target, "--inputs", builds["inputs"], "--plot", png)
    assert text.exit_code == 1, text.output  # the outputs fail, as validate says
    assert "SNR dB" in text.output and "first bad tensor: logx, made by Log log" in text.output
    assert "--split-at logx" in text.output and "fp16 underflow" in text.output
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (640, 360)
    idat = data[33 + 8:]  # after the IHDR chunk: the IDAT chunk's data
    (length,) = struct.unpack(">I", data[33:37])
    assert data[37:41] == b"IDAT"
    assert len(zlib.decompress(idat[:length])) == height * (1 + 3 * width)
    as_json = run("diagnose", target, "--inputs", builds["inputs"], "--json")
    parsed = json.loads(as_json.stdout)
    assert parsed["first_bad"]["tensor"] == "logx" and parsed["compiles"] == 1 and parsed["probes"]
    bad = run("diagnose", tmp_path / "nowhere")
    assert bad.exit_code == 2 and bad.output.count("\n") == 1 and "no compile record" in bad.output
    both = run("diagnose", target, "--inputs", builds["inputs"], "--random", "2")
    assert both.exit_code == 2 and "not both" in both.output


def fused_sigmoid(path: Path) -> Path:
    """A pitch-salience head: a Conv whose logits sit near -7, a Sigmoid, a Reshape. The HTP fuses the Conv with the
    Sigmoid and returns most of the small probabilities (below 0.0035) as 0; exposing the logits splits that fusion,
    and the probes then measure better numbers than the build's binary (measured: 28.9 dB against 46.0 dB)."""
    rng = np.random.default_rng(0)
    weights = rng.normal(0, 4 / np.sqrt(64 * 3), (32, 64, 3)).astype(np.float32)
    bias = (rng.normal(0, 1, 32) - 7).astype(np.float32)
    graph = h.make_graph(
        [h.make_node("Conv", ["x", "W", "B"], ["logits"], name="conv", pads=[1, 1]),
         h.make_node("Sigmoid", ["logits"], ["probs"], name="sigmoid"),
         h.make_node("Reshape", ["probs", "shape"], ["y"], name="flat")], "pitch",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 64, 256])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 32 * 256])],
        [nh.from_array(weights, "W"), nh.from_array(bias, "B"),
         nh.from_array(np.array([1, 32 * 256], np.int64), "shape")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.needs_qnn
def test_a_failure_the_probes_do_not_see_is_answered_with_what_was_measured_and_the_metric_that_fits(tmp_path):
    """validate fails; exposing tensors changes the HTP's fusion and every probe passes. diagnose reproduces the
    failure on validate's own samples with the build's binary, says both figures, what the SNR measures on this
    output, and prints a validate command with the metric that fits, which passes as printed."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    build = tmp_path / "build"
    assert compile_stage.compile_models({"pitch": fused_sigmoid(tmp_path / "pitch.onnx")}, ["SM8750"], build,
                                        compile_stage.CompileOptions(use_cache=False)).ok
    assert run("validate", build, "--random", "2", "--seed", "4").exit_code == 1
    target = build / "pitch" / "SM8750"
    text = run("diagnose", target)
    assert text.exit_code == 1, text.output  # not "nothing to diagnose", exit 0
    assert "inputs: 2 random sample(s), seed 4, from validate's record" in text.output
    assert "no probed tensor is to blame: y " in text.output and " in the build's binary, " in text.output
    result = json.loads(run("diagnose", target, "--json").stdout)
    assert not result["ok"] and result["first_bad"] is None and result["inputs"]["seed"] == 4
    (y,) = result["reference"]
    probed = next(p for p in result["probes"] if p["tensor"] == "y")
    assert not y["passed"] and y["snr_db"] < 30 < probed["snr_db"]  # measured: 28.9 dB in the binary, 46.0 probed
    (fit,) = result["fits"]
    assert fit["kind"] == "small-values" and "of values below 1% of its peak" in fit["measures"]
    assert "the HTP returns" in fit["measures"] and "the cosine" in fit["fits"]
    threshold = result["remedies"][0]
    assert threshold["kind"] == "threshold"
    command = shlex.split(threshold["command"].replace("REASON", "salience below 1% of the peak is not read"))
    assert command[:7] == ["qnndeploy", "validate", str(build), "--graph", "pitch", "--soc", "SM8750"]
    assert "--min-cosine" in command and "--min-snr-db" in command
    assert run(*command[1:]).exit_code == 0


def test_what_a_failing_metric_measures_on_an_output():
    """A scale error fits the cosine; an error made in the small values is said with its share; a spread one is
    said as such. The options are thresholds the output passes."""
    limits = metrics.thresholds_for("fp16")
    rng = np.random.default_rng(0)
    ref = rng.normal(0, 1, 4096)

    def fit_of(out):
        m = metrics.judge("y", [ref], [out], limits)
        assert not m.passed
        found = metrics.fit(m, ref[None], out[None], limits)
        passes = {**limits, **found.options}
        assert metrics.judge("y", [ref], [out], passes).passed
        return found

    # A pure scale's cosine is 1 up to rounding, which the machine's summation order decides (1.05 gives
    # 0.9999999999999998 here, 1.0 or 1.0000000000000002 elsewhere): no option then, the default cosine stays.
    pure = fit_of(ref * 1.05)
    assert pure.kind == "gain" and "1.05 times the CPU's (+5.00%)" in pure.measures and "cosine" in pure.fits
    assert pure.options.get("min_cosine", limits["min_cosine"]) >= limits["min_cosine"]
    gain = fit_of(ref * 1.05 + rng.normal(0, 1e-3, 4096))  # a scale and a little fp16-like noise: cosine below 1
    assert gain.kind == "gain" and "cosine" in gain.fits
    assert gain.options["min_cosine"] > limits["min_cosine"]  # held to what it reaches, as the SNR is loosened
    peaks = rng.random(4096) < 0.03  # a salience map: a few peaks, the rest just below 1% of the highest
    salience = np.where(peaks, rng.uniform(0.2, 1, 4096), 0.008)
    ref = salience
    small = fit_of(np.where(peaks, salience * (1 + 1e-3 * rng.normal(size=4096)), 0.0))  # the small ones flushed
    assert small.kind == "small-values" and "the HTP returns 100% of them as 0 (CPU values up to 0.008)" in \
        small.measures
    ref = rng.normal(0, 1, 4096)
    spread = fit_of(ref + rng.normal(0, 0.05, 4096))
    assert spread.kind == "spread" and "no metric of validate's judges it better" in spread.fits


# --- without the HTP --------------------------------------------------------------------------------------------

class FakeSession:
    """Stands in for the compile-and-run: tensor i's SNR is 60 dB before `first_bad`, 10 dB from there on."""

    def __init__(self, first_bad: int) -> None:
        self.first_bad, self.compiles = first_bad, 0
        self.probes: dict[str, stage.Probe] = {}

    def run(self, names, tensors, again=False):
        self.compiles += 1
        for n in names:
            t = tensors[n]
            snr = 10.0 if t.position >= self.first_bad else 60.0
            r = stage.ranges(n, np.ones(4))
            self.probes[n] = stage.Probe(n, "Relu", n, t.position, snr, 1.0, 0.0, snr < 30, self.compiles, r)


@pytest.mark.parametrize("first_bad", [0, 1, 37, 98, 99])
def test_the_bisection_finds_the_first_bad_tensor_in_few_compiles(first_bad):
    tensors = {f"t{i}": stage._Tensor(f"t{i}", i, "Relu", f"n{i}", [f"t{i - 1}"] if i else ["x"]) for i in range(100)}
    session = FakeSession(first_bad)
    bad, good = stage._bisect(session, tensors, ["t99"], 8)  # type: ignore[arg-type]
    assert bad is not None and bad.tensor == f"t{first_bad}"
    assert (good.tensor if good else None) == (f"t{first_bad - 1}" if first_bad else None)
    assert session.compiles <= 4  # 100 tensors, 8 probes a compile: 100 -> 14 -> 2 -> 1, and the confirmation
    assert len(session.probes) < 30  # against 100 for a full sweep


def test_a_branch_joining_at_the_bad_node_is_followed():
    """t5 = Add(t4, b2) where the side branch b0 -> b1 -> b2 went bad at b1: the bad node is b1, not t5."""
    order = ["t0", "t1", "b0", "b1", "b2", "t2", "t3", "t4", "t5", "t6"]
    inputs = {"t5": ["t4", "b2"], "b1": ["b0"], "b2": ["b1"]}
    tensors = {n: stage._Tensor(n, i, "Add", n, inputs.get(n, [order[i - 1]] if i else ["x"]))
               for i, n in enumerate(order)}

    class Branchy(FakeSession):
        def run(self, names, tensors, again=False):
            self.compiles += 1
            for n in names:
                snr = 10.0 if n in ("b1", "b2", "t5", "t6") else 60.0
                self.probes[n] = stage.Probe(n, "Add", n, tensors[n].position, snr, 1.0, 0.0, snr < 30,
                                             self.compiles, stage.ranges(n, np.ones(2)))

    bad, _ = stage._bisect(Branchy(0), tensors, ["t6"], 2)  # type: ignore[arg-type]
    assert bad is not None and bad.tensor == "b1"


def test_ranges_say_what_fp16_cannot_hold():
    r = stage.ranges("v", np.array([0.0, 1e-9, 1e-6, 0.5, 1e5], np.float32))
    assert r.over_fp16_max == pytest.approx(0.2) and r.subnormal_share == pytest.approx(0.5)
    assert r.flushed_share == pytest.approx(0.25) and r.dynamic_range == pytest.approx(1e14, rel=1e-3)


def test_the_chart_is_a_png_of_the_asked_size(tmp_path):
    points = [plot.Point(0, 60.0), plot.Point(5, 55.0), plot.Point(10, 12.0, marked=True), plot.Point(20, 8.0, True)]
    path = plot.line_chart(points, tmp_path / "c.png", threshold=30.0, width=320, height=200)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (320, 200)
    (length,) = struct.unpack(">I", data[33:37])
    raw = np.frombuffer(zlib.decompress(data[41:41 + length]), np.uint8).reshape(200, 1 + 320 * 3)
    pixels = raw[:, 1:].reshape(200, 320, 3)
    assert (raw[:, 0] == 0).all()
    assert (pixels == plot.RED).all(axis=2).any() and (pixels == plot.BLUE).all(axis=2).any()


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_a_shared_context_is_diagnosed_per_graph_and_w8a16_is_refused(builds, tmp_path):
    models = {"logmel": builds["logmel"], "norm": builds["norm"]}
    shared = tmp_path / "shared"
    assert compile_stage.compile_models(models, ["SM8750"], shared,
                                        compile_stage.CompileOptions(shares={"both": ["logmel", "norm"]},
                                                                     use_cache=False)).ok
    target = shared / "both" / "SM8750"
    bare = run("diagnose", target, "--inputs", builds["inputs"])
    assert bare.exit_code == 2 and "shared context of graphs logmel, norm: pass --graph GRAPH" in bare.output
    named = run("diagnose", target, "--graph", "logmel", "--inputs", builds["inputs"], "--json")
    assert named.exit_code == 1 and json.loads(named.stdout)["first_bad"]["tensor"] == "logx"
    quantized = tmp_path / "w8a16"
    assert compile_stage.compile_models({"logmel": builds["logmel"]}, ["SM8750"], quantized,
                                        compile_stage.CompileOptions(precision="w8a16", calib=builds["inputs"],
                                                                     use_cache=False)).ok
    refused = run("diagnose", quantized / "logmel" / "SM8750", "--inputs", builds["inputs"])
    assert refused.exit_code == 2 and "diagnose supports fp16 jobs only so far" in refused.output


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_real_speech_names_the_log_and_cuts_before_the_values_fp16_cannot_hold(tmp_path):
    """validate's log-energy front end on the shipped sentence: the Log's input has good SNR (57 dB: the SNR weighs
    the large values) but every value in fp16's subnormal range, so a cut there would hand the CPU values the NPU
    already flushed; the cut moves back to the last tensor fp16 holds."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    model = save_fit(log_energy_graph(), tmp_path / "logenergy.onnx")
    build = tmp_path / "build"
    assert compile_stage.compile_models({"logenergy": model}, ["SM8750"], build,
                                        compile_stage.CompileOptions(use_cache=False)).ok
    speech = tmp_path / "speech"
    speech.mkdir()
    shutil.copy(SPEECH, speech)
    target = build / "logenergy" / "SM8750"
    text = run("diagnose", target, "--inputs", speech, "--preprocess", "audio:raw,rate=16000")
    assert text.exit_code == 1 and "(preprocess audio:raw,rate=16000)" in text.output, text.output
    as_json = run("diagnose", target, "--inputs", speech, "--preprocess", "audio:raw,rate=16000", "--json")
    result = json.loads(as_json.stdout)
    assert result["inputs"]["preprocess"]["given"] == "audio:raw,rate=16000"
    assert result["first_bad"]["tensor"] == "log_energy" and result["first_bad"]["op_type"] == "Log"
    assert result["last_good"]["tensor"] == "floored" and result["last_good"]["snr_db"] > 40
    under = next(e for e in result["explanations"] if e["kind"] == "underflow")
    assert under["tensor"] == "floored" and "100% of floored's nonzero values are below 6.1e-5" in under["text"]
    assert (result["split_at"], result["cpu_part"]) == (["frames"], "tail")  # the squares of quiet audio underflow
    split = next(r for r in result["remedies"] if r["kind"] == "split")
    assert "--split-at frames --cpu-part tail" in split["command"] and "sq is out of fp16's range" in split["text"]
    random = stage.diagnose(target)  # random input hides it
    assert random.ok and random.first_bad is None


@pytest.mark.needs_qnn
def test_an_l2_norm_whose_sum_of_squares_overflows_is_named_and_its_remedies_are_measured_before_they_are_printed(
        tmp_path):
    """A ScaleNorm over values near 700: the ReduceL2's output fits fp16 (3.5e3) but its sum of squares (1.2e7) does
    not. diagnose says so (not "rounding") at the default threshold and at --min-snr-db 0, where the ReduceL2's 1 dB
    passes and the first tensor below the threshold is the Div reading it (the advice flipped there). Before printing
    a split it cuts both (the front end up to the norm on the CPU; the tail after the last good tensor on the CPU),
    compiles the NPU part and runs the chain: it prints the same best split at both thresholds, with its figure, and
    that split run as printed (prepare, compile, validate) passes as a chain with that figure. The rescale (the norm
    of x/64, times 64) is done in the graph and measured before it is printed; done by hand it passes too, as said."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    onnx.save(scalenorm_after_gain(), tmp_path / "pose.onnx")
    assert compile_stage.compile_models({"pose": tmp_path / "pose.onnx"}, ["SM8650"], tmp_path / "build").ok
    assert not validate_stage.validate_build(tmp_path / "build").ok
    target = tmp_path / "build" / "pose" / "SM8650"
    results = []
    for threshold in ([], ["--min-snr-db", "0"]):
        done = run("diagnose", target, *threshold, "--json")
        assert done.exit_code == 1, done.output
        result = json.loads(done.stdout)
        assert result["first_bad"]["op_type"] == "ReduceL2" and result["last_good"]["tensor"] == "feat"
        (why,) = result["explanations"]
        assert why["kind"] == "accumulation" and "sum of squares reaches 1.21e+07" in why["text"]
        measured = {(*t["split_at"], t["cpu_part"]): t["measured"] for t in result["splits"]}
        assert set(measured) == {("norm", "head"), ("feat", "tail")}  # both directions, each cut and run
        assert all(m["passed"] for m in measured.values())  # measured: 68.2 dB and 44.0 dB
        split = result["remedies"][0]  # printed first: of the splits that pass, the one moving least to the CPU
        assert split["kind"] == "split" and split["measured"] == measured[("feat", "tail")]
        assert "measured as a chain: passes" in split["text"] and "moves 3 of 6 nodes and " in split["text"]
        costs = {(*t["split_at"], t["cpu_part"]): t["cpu_weight_bytes"] for t in result["splits"]}
        assert 0 < costs[("feat", "tail")] < costs[("norm", "head")]  # its cost, in weights moved to the CPU
        second = result["remedies"][1]  # the other passing split, with its figure
        assert "--split-at norm --cpu-part head" in second["command"]
        assert second["measured"] == measured[("norm", "head")]
        rescale = next(r for r in result["remedies"] if r["kind"] == "rescale")
        assert rescale["measured"]["passed"] and "measured with the scale put into the graph" in rescale["text"]
        assert "divide feat by 64 before scalenorm_l2 and multiply its result by 64" in rescale["text"]
        threshold_remedy = next(r for r in result["remedies"] if r["kind"] == "threshold")
        assert threshold_remedy["measured"]["snr_db"] == result["outputs_snr_db"]
        results.append(result)
    default, loose = results
    assert "--split-at feat --cpu-part tail" in default["remedies"][0]["command"]
    assert loose["remedies"][0]["command"] == default["remedies"][0]["command"]  # the advice does not flip
    text = run("diagnose", target).output
    assert "measured as a chain: passes, worst output " in text and "ok  --split-at norm --cpu-part head: " in text

    args = shlex.split(default["remedies"][0]["command"])[1:]
    args[args.index("-o") + 1] = str(tmp_path / "parts" / "pose.onnx")
    assert run(*args).exit_code == 0
    record = json.loads((tmp_path / "parts" / "pose.split.json").read_text())
    (npu,) = [p["path"] for p in record["parts"] if p["runs_on"] == "npu"]
    assert compile_stage.compile_models({"pose-npu": tmp_path / "parts" / npu}, ["SM8650"],
                                        tmp_path / "split-build").ok
    chained = validate_stage.validate_build(tmp_path / "split-build")
    (checked,) = chained.targets
    assert chained.ok and checked.chain is not None and checked.chain.passed  # the chain, as the app runs it
    (y,) = checked.chain.outputs
    assert y.snr_db == pytest.approx(default["remedies"][0]["measured"]["snr_db"], abs=1.0)  # what diagnose said

    onnx.save(offset_free_scalenorm(64.0), tmp_path / "rescaled.onnx")
    assert compile_stage.compile_models({"rescaled": tmp_path / "rescaled.onnx"}, ["SM8650"],
                                        tmp_path / "rescaled-build").ok
    assert validate_stage.validate_build(tmp_path / "rescaled-build").ok

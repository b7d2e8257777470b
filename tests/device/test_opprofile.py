"""Per-op profiles (qnndeploy/device/opprofile.py): on an emulated phone through the real adb server, a real context
binary (compiled by onnxruntime-qnn) profiled by the qnn-net-run STAND-IN, whose profile events come from the QNN
HTP backend of onnxruntime-qnn measuring that very run, read back through the qnn-profile-viewer STAND-IN; the
parser on rows in the published layout; CPU fallback from ONNX Runtime's own profile of a real run; the Chrome
trace against the rules of the Trace Event Format."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from qnndeploy.device import opprofile
from qnndeploy.device.adb import connect
from qnndeploy.device.opprofile import Level, Where
from qnndeploy.device.runner import NetRun
from qnndeploy.qnn import htp
from tests.support import bundles
from tests.support.cli import run
from tests.support.device_emulator.qnn_net_run import write_launcher
from tests.support.device_emulator.qnn_profile_viewer import write_launcher as write_viewer
from tests.support.host import require

pytest_plugins = ["tests.support.device_emulator.fixtures"]

REMOTE = "/data/local/tmp/qnndeploy/demo-1.0.0"

# Rows in the event CSV layout (header and field order: microsoft/onnxruntime, onnxruntime/core/providers/qnn/
# builder/qnn_backend_manager.cc, ExtractProfilingEvent; event identifiers as in the detailed qnn-net-run profile at
# https://gist.github.com/hushell/23e68eef236673655db4635b80297c40). The values are one execution of
# tests/support/bundles.tiny_model (MatMul, Relu) as the QNN HTP backend of onnxruntime-qnn 2.5.0 measured it here.
PUBLISHED = """Msg Timestamp,Message,Time,Unit of Measurement,Timing Source,Event Level,Event Identifier
0,BACKEND,6122,US,BACKEND,ROOT,Accelerator (load binary) time
0,INIT,6367,US,BACKEND,ROOT,QNN (load binary) time
0,BACKEND,0,COUNT,BACKEND,ROOT,Number of HVX threads used
0,BACKEND,0,COUNT,BACKEND,ROOT,Num times yield occured
0,BACKEND,4328,US,BACKEND,ROOT,Time for initial VTCM acquire
0,BACKEND,32240,US,BACKEND,ROOT,Time for HVX + HMX power on and acquire
0,BACKEND,50079,CYCLES,BACKEND,ROOT,Accelerator (execute) time (cycles)
0,NODE,1661,CYCLES,BACKEND,SUB-EVENT,Input OpId_2 (cycles)
0,NODE,11707,CYCLES,BACKEND,SUB-EVENT,MatMul0:OpId_17 (cycles)
0,NODE,21243,CYCLES,BACKEND,SUB-EVENT,Relu1:OpId_20 (cycles)
0,NODE,15468,CYCLES,BACKEND,SUB-EVENT,Output OpId_3 (cycles)
0,BACKEND,14817,US,BACKEND,ROOT,Accelerator (execute) time
0,EXECUTE,14987,US,BACKEND,ROOT,QNN (execute) time
"""


def check_trace(trace: dict) -> list[dict]:
    """The Trace Event Format's rules (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
    the JSON Object Format holds a traceEvents list, displayTimeUnit is "ms" or "ns"; every event has a name, a ph,
    integer pid and tid; a complete event ("X") has numeric ts and dur in microseconds, dur >= 0; a metadata event
    ("M") named process_name/thread_name carries args.name; args is an object. Complete events on one thread nest:
    two that overlap are one inside the other. Returns the complete events."""
    text = json.dumps(trace, allow_nan=False)  # NaN or Infinity is not JSON: the viewers refuse the file
    assert isinstance(json.loads(text)["traceEvents"], list)
    assert trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    complete = []
    for e in trace["traceEvents"]:
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e.get("args", {}), dict)
        if e["ph"] == "X":
            assert all(isinstance(e[k], (int, float)) and not isinstance(e[k], bool) for k in ("ts", "dur"))
            assert e["ts"] >= 0 and e["dur"] >= 0 and math.isfinite(e["ts"] + e["dur"])
            complete.append(e)
        else:
            assert e["ph"] == "M" and e["name"] in ("process_name", "thread_name") and e["args"]["name"]
    by_thread: dict[tuple[int, int], list[dict]] = {}
    for e in complete:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    for events in by_thread.values():
        for a in events:
            for b in events:
                a0, a1, b0, b1 = a["ts"], a["ts"] + a["dur"], b["ts"], b["ts"] + b["dur"]
                if a is not b and a0 < b1 - 1e-6 and b0 < a1 - 1e-6:  # they overlap: one holds the other
                    assert (a0 <= b0 and b1 <= a1 + 1e-3) or (b0 <= a0 and a1 <= b1 + 1e-3), (a, b)
    return complete


def test_parser_reads_the_published_layout():
    p = opprofile.from_events_csv(PUBLISHED, "det", Level.DETAILED, {"MatMul0": "MatMul", "Relu1": "Relu"})
    assert [(o.name, o.type, o.op_id, o.where) for o in p.ops] == [
        ("Input", "Input", 2, Where.HTP), ("MatMul0", "MatMul", 17, Where.HTP), ("Relu1", "Relu", 20, Where.HTP),
        ("Output", "Output", 3, Where.HTP)]
    relu = p.ops[2]
    assert relu.share == pytest.approx(21243 / 50079)
    assert relu.cycles == 21243
    assert relu.time_us == pytest.approx(21243 / 50079 * 14817)  # its share of the accelerator's execute time
    assert sum(o.share or 0 for o in p.ops) == pytest.approx(1.0)
    assert [(q.name, q.time_us, q.where) for q in p.partitions] == [("det", 14987, Where.HTP)]
    assert p.executions == 1 and p.load_us == 6367
    record = p.record()
    assert set(record) == {"level", "ops", "partitions", "trace", "source"}
    assert record["ops"][2] == {"name": "Relu1", "type": "Relu", "time_us": round(21243 / 50079 * 14817, 3),
                                "share": round(21243 / 50079, 6), "where": "htp"}


def test_parser_means_over_executions_and_basic_has_no_ops():
    body = PUBLISHED.split("\n", 1)[1]
    second = body.replace("14817,US", "7000,US").replace("14987,US", "8000,US")
    p = opprofile.from_events_csv(PUBLISHED + second, "det", Level.DETAILED)
    assert p.executions == 2
    assert p.partitions[0].time_us == pytest.approx((14987 + 8000) / 2)
    assert p.ops[2].time_us == pytest.approx(21243 / 50079 * (14817 + 7000) / 2)
    assert p.ops[1].type is None  # no model given: the type is not known, not guessed
    basic = "\n".join(ln for ln in PUBLISHED.splitlines() if ",NODE," not in ln)
    b = opprofile.from_events_csv(basic, "det", Level.BASIC)
    assert b.ops == [] and b.partitions[0].time_us == 14987 and not b.notes


def test_parser_refuses_another_layout():
    with pytest.raises(opprofile.QnnDeployError, match="not QNN's event header"):
        opprofile.from_events_csv("Op Name,Time (us)\nconv,12\n", "det", Level.DETAILED)
    with pytest.raises(opprofile.QnnDeployError, match="not a number"):
        opprofile.from_events_csv(PUBLISHED.replace("21243", "lots"), "det", Level.DETAILED)


def test_cpu_fallback_is_reported_as_cpu(tmp_path):
    """A graph with an op the HTP cannot take (Det), run by ONNX Runtime with the QNN EP and CPU fallback on, as an
    app's session would: ONNX Runtime's own profile says Det ran on the CPU, the rest in one HTP partition."""
    require(htp.available(), "onnxruntime-qnn")
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from qnndeploy.base import socs

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu_a"),
                           helper.make_node("Det", ["r"], ["y"], name="det_b")], "g", [x], [y])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "fallback.onnx")
    so = htp.session_options(socs.find("SM8750"), cpu_fallback=True,
                             provider={"profiling_level": "detailed", "profiling_file_path": str(tmp_path / "q.csv")})
    so.enable_profiling, so.profile_file_prefix = True, str(tmp_path / "ort")
    with htp.quiet_native_stdout():
        session = ort.InferenceSession(str(tmp_path / "fallback.onnx"), so)
        for _ in range(3):
            session.run(None, {"x": np.eye(4, dtype=np.float32)[None]})
        ort_json = Path(session.end_profiling()).read_text()
        del session
    cpu = opprofile.from_ort_profile(ort_json, "fallback", Level.DETAILED)
    assert [(o.name, o.type, o.where) for o in cpu.ops] == [("det_b", "Det", Where.CPU)]
    assert [q.where for q in cpu.partitions] == [Where.HTP] and cpu.executions == 3
    npu = opprofile.from_events_csv((tmp_path / "q.csv").read_text(), "fallback", Level.DETAILED,
                                    opprofile.node_types(tmp_path / "fallback.onnx"))
    both = opprofile.merged(npu, cpu)
    rows = {o["name"]: o for o in both.record()["ops"]}
    assert rows["det_b"]["where"] == "cpu" and rows["relu_a"]["where"] == "htp" and rows["relu_a"]["type"] == "Relu"
    trace = both.trace_events()
    complete = check_trace(trace)
    assert {e["name"] for e in complete if e["pid"] == 2} == {"det_b"}


@pytest.fixture(scope="module")
def demo_bundle(tmp_path_factory) -> Path:
    """The demo model (qnndeploy/data/demo.onnx, the CNN `qnndeploy demo` ships), prepared as the demo does and
    compiled for SM8750 by the real QNN HTP compiler of onnxruntime-qnn, in a bundle with its runtime libraries
    (elfgen's stand-ins) as graph det."""
    require(htp.available(), "onnxruntime-qnn")
    import onnx
    import onnxruntime as ort

    from qnndeploy import demo
    from qnndeploy.base import socs
    from qnndeploy.prepare import PrepareOptions, prepare_model

    root = tmp_path_factory.mktemp("demo")
    source = root / "kws_demo.onnx"
    source.write_bytes((Path(opprofile.__file__).parents[1] / "data" / "demo.onnx").read_bytes())
    model = root / "cpu" / "det.onnx"  # as `qnndeploy demo` prepares it: its batch fixed to 1, simplified
    model.parent.mkdir()
    prepare_model(source, model, PrepareOptions(shapes=demo.SHAPES))
    out = root / "SM8750"
    out.mkdir()
    with htp.quiet_native_stdout():
        ort.InferenceSession(str(model), htp.session_options(socs.find("SM8750"), context_path=out / "det_ctx.onnx"))
    (out / "det_ctx_qnn.bin").rename(out / "det.bin")
    wrapper = onnx.load(str(out / "det_ctx.onnx"))
    for node in wrapper.graph.node:
        for a in node.attribute:
            if a.name == "ep_cache_context":
                a.s = b"det.bin"
    onnx.save(wrapper, str(out / "det_ctx.onnx"))
    inputs = {"cpu": {"det": model}, "npu": {"SM8750": {"det": [out / "det.bin", out / "det_ctx.onnx"]}}, "root": root}
    return bundles.build(root / "bundle", inputs, runtime="bundled")


DEMO_OPS = {"Relu_1": "Relu", "Gemm_7": "Gemm", "Softmax_8": "Softmax"}  # ops the HTP names as the ONNX node


def test_profile_on_an_emulated_phone(emulated_devices, demo_bundle, tmp_path):
    """The demo bundle verified on an emulated SM8750 phone, then its graph profiled there at each level: the ops of
    the real graph, their shares summing to 1, all on the HTP; the trace passes the format's rules; a missing
    viewer is a one-line error."""
    bundle = demo_bundle
    phone = emulated_devices("sm8750")[0]
    launcher = write_launcher(tmp_path / "qnn-net-run")
    r = run("device", "verify", str(bundle), "-s", phone.serial, "--runner", str(launcher), "--runs", "3", "--json",
            "-o", str(tmp_path / "records"))
    assert r.exit_code == 0, r.output
    dev = connect(phone.serial)
    viewer = opprofile.find_viewer(write_viewer(tmp_path / "qnn-profile-viewer"), None)
    workdir = "/data/local/tmp/qnndeploy/run/demo-1.0.0/det"  # where verify left det's inputs
    env = (f"{REMOTE}/lib/arm64-v8a", f"{REMOTE}/lib/hexagon-v79;/vendor/dsp/cdsp")
    types = opprofile.node_types(bundle / "cpu" / "det.onnx")

    # what bench records: the profile, its notes, the trace beside the record
    trace_path = tmp_path / "bench-emu-det-trace.json"
    detailed, notes = opprofile.profile_for_bench(dev, "det", NetRun(workdir, f"{REMOTE}/npu/SM8750/det.bin", *env),
                                                  Level.DETAILED, trace_path, viewer=viewer,
                                                  model=bundle / "cpu" / "det.onnx")
    assert detailed is not None, notes
    assert detailed.executions == 3  # one per line of the input list
    ops = {o.name: (o.type, o.where) for o in detailed.ops}
    assert all(ops.get(name) == (kind, Where.HTP) for name, kind in DEMO_OPS.items()), ops
    # every node of the model is an op of the HTP's graph, with its ONNX type (the HTP may add layout ops)
    assert {(o.node, o.type) for o in detailed.ops if o.node} == set(types.items()), ops
    assert {o.where for o in detailed.ops} == {Where.HTP}
    assert sum(o.share or 0 for o in detailed.ops) == pytest.approx(1.0, abs=1e-6)
    assert all(o.time_us is not None and o.time_us >= 0 for o in detailed.ops)
    assert [p.name for p in detailed.partitions] == ["det"] and (detailed.partitions[0].time_us or 0) > 0
    assert any("apportioned" in n for n in notes)
    record = detailed.record()
    assert record["trace"] == "bench-emu-det-trace.json" and record["source"] == "qnn-profile-viewer"
    assert record["level"] == "detailed" and all(o["where"] == "htp" for o in record["ops"])
    json.dumps(record, allow_nan=False)
    complete = check_trace(json.loads(trace_path.read_text()))
    assert {e["name"] for e in complete} >= {"det", *DEMO_OPS}
    no_viewer = opprofile.profile_for_bench(dev, "det", NetRun(workdir, "x.bin", *env), Level.DETAILED,
                                            tmp_path / "t.json", viewer=None)
    assert no_viewer == (None, [opprofile.NO_VIEWER]) and not (tmp_path / "t.json").exists()

    basic = opprofile.profile_graph(dev, "det", NetRun(workdir, f"{REMOTE}/npu/SM8750/det.bin", *env), Level.BASIC)
    assert basic.ops == [] and basic.partitions[0].time_us
    optrace = opprofile.profile_graph(dev, "det", NetRun(workdir, f"{REMOTE}/npu/SM8750/det.bin", *env),
                                      Level.OPTRACE, types=types)
    assert [o.name for o in optrace.ops] == [o.name for o in detailed.ops]
    log = phone.host_path(f"{workdir}/{opprofile.PROFILE_DIR}/{opprofile.LOG}")
    assert log.stat().st_size > 0  # qnn-net-run's log, where the viewer read it

    # a phone without the viewer: one line naming the step and the phone's last line
    with pytest.raises(opprofile.QnnDeployError, match=r"^qnn-profile-viewer on .* exited with \d+: ") as e:
        opprofile.profile_graph(dev, "det", NetRun(workdir, f"{REMOTE}/npu/SM8750/det.bin", *env), Level.BASIC,
                                viewer="/data/local/tmp/nowhere/qnn-profile-viewer")
    assert "\n" not in str(e.value)


def test_net_run_options():
    assert opprofile.net_run_args(Level.BASIC) == ["--profiling_level", "basic"]
    assert opprofile.net_run_args(Level.OPTRACE) == ["--profiling_level", "detailed", "--profiling_option", "optrace"]
    line = opprofile.viewer_command("/data/local/tmp/q v", "out/x.log", "out/p.csv", "/data/lib dir")
    assert line == ("LD_LIBRARY_PATH='/data/lib dir' '/data/local/tmp/q v' --input_log out/x.log --output out/p.csv")



def test_the_bench_options_parse_to_a_level(tmp_path):
    import click
    from click.testing import CliRunner

    from qnndeploy.cli._profile import profile_options

    @click.command()
    @profile_options
    def bench(profile_level: Level | None, profile_viewer: Path | None) -> None:
        click.echo(f"{profile_level!r} {profile_viewer}")

    assert CliRunner().invoke(bench, ["--profile", "optrace"]).output == "<Level.OPTRACE: 'optrace'> None\n"
    assert CliRunner().invoke(bench, []).output == "None None\n"
    wrong = CliRunner().invoke(bench, ["--profile", "backend"])
    assert wrong.exit_code == 2 and "basic" in wrong.output and "optrace" in wrong.output

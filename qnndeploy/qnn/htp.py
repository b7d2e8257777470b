"""The host QNN HTP backend from the onnxruntime-qnn wheel: compiler and emulator, and the op-support measurement
built on it; shared by check, compile and validate."""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from qnndeploy.base import child, socs
from qnndeploy.base.errors import BadInput, MissingTool, first_line
from qnndeploy.model.onnxio import MAX_FOLDED_BYTES, inferred_values, load_model, oversized_constants
from qnndeploy.model.quantize import Encoding
from qnndeploy.qnn import epcontext, qnnsystem
from qnndeploy.qnn.refusals import Refused
from qnndeploy.qnn.refusals import parse as refused_nodes

if TYPE_CHECKING:
    import onnx
    import onnxruntime as ort

EP_NAME = "QNNExecutionProvider"
# The HTP compiler's time grows faster than linearly with a partition's node count (a chain of 8,000 Relu takes
# about 18 s, of 100,000 hours, in one uninterruptible native call): above this the graph is read, not measured.
MAX_MEASURED_NODES = 20_000
# It also unrolls recurrent layers over their time steps: a 3-layer LSTM over 40 steps took 13 s here, a 2-layer
# bidirectional one over hundreds of steps many minutes. So the partitioning runs in a child process that a stop
# request or this budget (check --timeout) ends, where an in-process native call would run to its end.
DEFAULT_TIMEOUT_S = 300.0
# Seconds per unrolled cell step (one layer, one direction, one time step): the range check's own timings gave
# for LSTM and GRU layers of hidden size 64-256 on a 2-core x86-64 host; only for telling the user what to expect.
SECONDS_PER_CELL_STEP = (0.05, 0.3)
RECURRENT_OPS = ("LSTM", "GRU", "RNN")
# Two threads creating QNN sessions at once crashed the process (a segfault inside session creation, seen once in CI
# with validate's parallel runs): creation is serialised; the runs of created sessions still overlap.
_CREATING = threading.Lock()


def available() -> bool:
    try:
        import onnxruntime_qnn  # noqa: F401
    except ImportError:
        return False
    return True


def _require() -> ModuleType:
    """The onnxruntime_qnn module (heavy: imported on first use)."""
    try:
        return importlib.import_module("onnxruntime_qnn")
    except ImportError:
        raise MissingTool(
            "onnxruntime-qnn is not installed: pip install onnxruntime-qnn (Linux x86-64 only); "
            "it holds the QNN HTP compiler and emulator") from None


def qairt_version() -> str:
    """The QAIRT version the wheel's QNN libraries come from, e.g. '2.51.0'."""
    return str(_require().build_and_package_info.qnn_version)


@cache
def _devices() -> tuple[Any, ...]:  # onnxruntime's OrtEpDevice, untyped
    import onnxruntime as ort

    qnn = _require()
    with quiet_native_stdout():
        if not any(d.ep_name == EP_NAME for d in ort.get_ep_devices()):  # a library registers once per process
            ort.register_execution_provider_library(EP_NAME, qnn.get_library_path())
        devices = tuple(d for d in ort.get_ep_devices() if d.ep_name == EP_NAME)
    if not devices:
        raise MissingTool("onnxruntime-qnn is installed but offers no QNN device")
    return devices


def session_options(soc: socs.Soc, *, fp16: bool = True, context_path: Path | None = None,
                    cpu_fallback: bool = False, log_level: int = 3, config: dict[str, str] | None = None,
                    provider: dict[str, str] | None = None) -> ort.SessionOptions:
    """Options for an HTP session for one SoC.

    With `context_path`, creating the session compiles the model and writes the EPContext model there
    (embed mode 0: a `<stem>_qnn.bin` context binary beside it). Without it, a session runs on the emulator.
    CPU fallback is off by default so that a node the HTP cannot run is an error, not a silent slowdown.
    `config`: more session config entries (e.g. ep.share_ep_contexts); `provider`: more QNN EP options.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = log_level
    if not cpu_fallback:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if context_path is not None:
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_embed_mode", "0")
        so.add_session_config_entry("ep.context_file_path", str(context_path))
    for key, value in (config or {}).items():
        so.add_session_config_entry(key, value)
    options = {"backend_type": "htp", "htp_arch": str(soc.arch_number), "soc_model": str(soc.soc_id)}
    if fp16:
        options["enable_htp_fp16_precision"] = "1"
    options.update(provider or {})
    if "backend_path" in options:  # the QNN EP takes one of the two
        del options["backend_type"]
    so.add_provider_for_devices(list(_devices()), options)
    return so


@contextmanager
def quiet_native_stdout() -> Iterator[None]:
    """The QNN libraries print a banner ("# LIBNATIVE: No alternate configuration…") on the process's stdout when a
    session first loads them: drop it, so that --json output parses and errors stay one line. QNN's real messages go
    through onnxruntime's logger on stderr. The banner goes through C stdio's buffer, flushed before stdout returns.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    try:
        yield
    finally:
        ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


def run_model(path: Path, soc: socs.Soc, feeds: list[dict[str, Any]], *, fp16: bool = True,
              provider: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], float]:
    """Each sample through `path` on the host HTP emulator (an EPContext model loads its binary; a plain model is
    compiled first): one {output: array} per sample, and the seconds the runs took. validate and diagnose run
    binaries this one way."""
    call = session(path, soc, fp16=fp16, provider=provider)
    start = time.monotonic()
    outputs = [call(s) for s in feeds]
    return outputs, time.monotonic() - start


def session(path: Path, soc: socs.Soc, *, fp16: bool = True, provider: dict[str, str] | None = None
            ) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """One model loaded once on the host HTP emulator, run call by call: what a decode loop needs, whose every
    step's inputs come from the step before. Inputs and outputs the binary keeps in uint8 (a KV cache compiled
    with --kv-bits 8) take and give float values, through the binary's own encodings."""
    import onnxruntime as ort

    try:
        with _CREATING, quiet_native_stdout():
            loaded = ort.InferenceSession(str(path), session_options(soc, fp16=fp16, provider=provider))
    except Exception as e:  # noqa: BLE001 onnxruntime's own error types
        raise BadInput(first_line(e)) from None
    names = [o.name for o in loaded.get_outputs()]
    wanted = {i.name for i in loaded.get_inputs()}
    eight = [t.name for t in (*loaded.get_inputs(), *loaded.get_outputs()) if t.type == "tensor(uint8)"]
    codes = quantized_io(path, eight) if eight else {}

    def run(feeds: dict[str, Any]) -> dict[str, Any]:
        fed = {k: (codes[k].quantize(v) if k in codes else v) for k, v in feeds.items() if k in wanted}
        try:
            got = dict(zip(names, loaded.run(None, fed), strict=True))
        except Exception as e:  # noqa: BLE001 onnxruntime's own error types
            raise BadInput(first_line(e)) from None
        return {k: (codes[k].dequantize(v) if k in codes else v) for k, v in got.items()}

    return run


def quantized_io(path: Path, names: list[str]) -> dict[str, Encoding]:
    """The encodings of an EPContext model's uint8 inputs and outputs `names`, as its context binary records them
    (read by libQnnSystem): a loop that keeps float values (validate's, on both sides) feeds the graph what an app
    that keeps the 8-bit values would."""
    binaries = [path.parent / ref for ref in epcontext.context_refs(path)]
    graphs = set(epcontext.graph_names(path))
    found: dict[str, Encoding] = {}
    for answer in qnnsystem.read_contexts(binaries):
        if isinstance(answer, Exception):
            raise BadInput(f"{path.name}: its context binary does not read back ({answer})")
        for graph in answer.graphs:
            if graph.name in graphs:
                for t in (*graph.inputs, *graph.outputs):
                    q = t.quantization
                    if t.name in names and q is not None and q.scale is not None and q.offset is not None:
                        found[t.name] = Encoding(q.scale, -q.offset)  # QNN's real = scale * (q + offset)
    missing = [n for n in names if n not in found]
    if missing:
        raise BadInput(f"{path.name}: its uint8 {', '.join(missing)} have no encoding in its context binary")
    return found


# --- measured op support --------------------------------------------------------------------------

@dataclass
class CpuNode:
    name: str
    op_type: str


@dataclass
class HtpMeasurement:
    soc: str
    measured: bool
    reason: str = ""  # why it was not measured, or how the compile failed
    qairt: str = ""
    qnn_partitions: int = 0
    cpu_partitions: int = 0
    cpu_nodes: list[CpuNode] = field(default_factory=list)
    total_nodes: int = 0
    seconds: float = 0.0
    timed_out: bool = False  # the compile was ended at the time budget
    refused: list[Refused] = field(default_factory=list)  # nodes QNN refused while composing the graph (its log)


def measure_htp(path: Path, soc: socs.Soc, graph: onnx.GraphProto | None = None, fp16: bool | None = None,
                timeout: float | None = DEFAULT_TIMEOUT_S) -> HtpMeasurement:
    """Partition the model for the HTP of `soc` on the host and list every node left on the CPU.

    onnxruntime-qnn compiles with CPU fallback allowed and writes an EPContext model: each EPContext node is
    one HTP partition, every other node in it runs on the CPU. When the HTP takes nothing, no EPContext model
    is written and every node of the graph is a CPU node. The compile runs in a child process (_partition): past
    `timeout` seconds it is ended and the result says so; a stop request (SIGTERM) ends it at once.
    """
    import onnx

    if graph is None:
        graph = load_model(path, weights=False).graph
    total = sum(1 for n in graph.node if n.op_type != "Constant")
    if not available():
        return HtpMeasurement(soc.model, False, "onnxruntime-qnn is not installed", total_nodes=total)
    refused = measure_refusal(graph, total)
    if refused:
        return HtpMeasurement(soc.model, False, refused, total_nodes=total)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="qnndeploy-check-") as tmp:
        ctx = Path(tmp) / "m_ctx.onnx"
        failure = _partition(path, soc, soc.fp16 is not False if fp16 is None else fp16, ctx, timeout)
        seconds = round(time.monotonic() - start, 2)
        if failure:
            why, timed_out = failure
            composed = refused_nodes(ctx.with_name("partition.log").read_text(errors="replace"))
            return HtpMeasurement(soc.model, False, why, qairt=qairt_version(), total_nodes=total, seconds=seconds,
                                  timed_out=timed_out, refused=composed)
        if ctx.is_file():
            nodes = list(onnx.load(str(ctx), load_external_data=False).graph.node)
        else:
            nodes = [n for n in graph.node if n.op_type != "Constant"]
    qnn = [n for n in nodes if n.op_type == "EPContext" and n.domain == "com.microsoft"]
    cpu = [n for n in nodes if not (n.op_type == "EPContext" and n.domain == "com.microsoft")]
    return HtpMeasurement(
        soc.model, True, qairt=qairt_version(), qnn_partitions=len(qnn), cpu_partitions=_components(cpu),
        cpu_nodes=[CpuNode(n.name, n.op_type) for n in cpu], total_nodes=total, seconds=seconds)


def _partition(path: Path, soc: socs.Soc, fp16: bool, ctx: Path, timeout: float | None) -> tuple[str, bool] | None:
    """Run the partitioning compile in a child (`python -m qnndeploy.qnn.htp`, main below) and wait for it, checking for
    a stop request and the time budget every 0.1 s. Returns None when it wrote its result, else (why not, whether
    the budget ended it)."""
    log = ctx.with_name("partition.log")
    with log.open("wb") as err:
        proc = subprocess.Popen(child.module("qnn.htp", str(path), soc.model, "fp16" if fp16 else "int", str(ctx)),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                env=child.environ(), start_new_session=True)
    code = child.wait(proc, timeout)
    if code is None:
        return f"the HTP compiler did not finish within {timeout:g} s", True
    if code == 0:
        return None
    if code < 0:
        return f"the HTP compiler crashed ({signal.Signals(-code).name})", False
    said = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return f"the HTP compile failed: {said[-1] if said else f'exit {code}'}", False


def recurrent_steps(model: onnx.ModelProto) -> tuple[int, int]:
    """(recurrent layers, unrolled cell steps) of the graph's LSTM/GRU/RNN nodes whose time dim is known: what the
    HTP compiler's time grows with. A layer's steps are its sequence length times its directions."""
    import onnx

    nodes = [n for n in model.graph.node if n.op_type in RECURRENT_OPS]
    if not nodes:
        return 0, 0
    known = inferred_values(model)
    steps = 0
    for n in nodes:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        dims = known[n.input[0]].type.tensor_type.shape.dim if n.input[0] in known else []
        time_dim = dims[1 if attrs.get("layout", 0) else 0] if len(dims) == 3 else None
        if time_dim is not None and time_dim.HasField("dim_value"):
            steps += time_dim.dim_value * (2 if attrs.get("direction") == b"bidirectional" else 1)
    return len(nodes), steps


def main(argv: list[str]) -> int:
    """The child of _partition: MODEL SOC fp16|int CTX. Compiles with CPU fallback allowed, which writes the
    EPContext model CTX (nothing when the HTP takes no node); a failure is its one line on stderr, exit 1."""
    import onnxruntime as ort

    path, soc_name, precision, ctx = argv
    options = session_options(socs.find(soc_name), fp16=precision == "fp16", context_path=Path(ctx), cpu_fallback=True)
    # Basic optimizations run before partitioning anyway; the later ones would rename the CPU nodes.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    try:
        ort.InferenceSession(path, options)
    except Exception as e:  # noqa: BLE001 onnxruntime raises its own, unexported exception types
        print(first_line(e), file=sys.stderr)
        return 1
    return 0


def measure_refusal(graph: onnx.GraphProto, total: int | None = None) -> str | None:
    """Why the graph is not handed to an ONNX Runtime session for measuring, else None: too many nodes for the HTP
    compiler to finish in reasonable time, or a constant result a session would fold into memory."""
    total = sum(1 for n in graph.node if n.op_type != "Constant") if total is None else total
    if total > MAX_MEASURED_NODES:
        return (f"{total:,} nodes, over the {MAX_MEASURED_NODES:,} the HTP compiler partitions in "
                "reasonable time (findings come from reading the graph)")
    oversized = oversized_constants(graph)
    if oversized:
        return f"{oversized[0]}, over {MAX_FOLDED_BYTES >> 20} MiB"
    return None


def relu_probe() -> onnx.ModelProto:
    """A lone float Relu: the smallest graph the HTP takes, to ask the compiler about a SoC rather than a model."""
    from onnx import TensorProto
    from onnx import helper as h

    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="probe")], "probe",
                         [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@cache
def htp_takes_nothing(soc: socs.Soc) -> bool:
    """Whether this QAIRT's HTP compiler refuses even a lone Relu for `soc`. It lists some SoCs it compiles
    nothing for; then every node of every model lands on the CPU and the model is not to blame. (A SoC without
    fp16 refuses a float Relu anyway: the probe says nothing about it, and its own warning covers it.)"""
    import onnx

    if soc.fp16 is False:
        return False

    model = relu_probe()
    with tempfile.TemporaryDirectory(prefix="qnndeploy-probe-") as tmp:
        probe = Path(tmp) / "relu.onnx"
        onnx.save(model, probe)
        m = measure_htp(probe, soc, model.graph)
    return m.measured and m.qnn_partitions == 0


def soc_takes_nothing(soc: socs.Soc, qairt: str) -> str:
    return (f"the HTP compiler of QAIRT {qairt} takes no node at all for {soc.model} (soc_model {soc.soc_id}, "
            f"{soc.dsp_arch}), not even a lone Relu: no model runs on its NPU with this QAIRT, whatever the export")


def _components(nodes: list[onnx.NodeProto]) -> int:
    """Connected groups of CPU nodes (linked by the tensors between them): each is one CPU partition."""
    parent = list(range(len(nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    for i, n in enumerate(nodes):
        for name in n.input:
            if name in producer:
                parent[root(i)] = root(producer[name])
    return len({root(i) for i in range(len(nodes))})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

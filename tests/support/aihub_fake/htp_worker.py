"""The fake AI Hub's "cloud compiler" and "hosted phone": one job's real work on this machine's QNN HTP (the
onnxruntime-qnn wheel, QAIRT 2.51 host HTP compiler and emulator), run in a child process per job.

A child per job keeps onnxruntime-qnn out of the test process (the QNN EP library can be registered only once per
process, and the product code under test registers it too), makes a native crash a FAILED job instead of a dead test
run, and gives each job its own process whose memory can be measured.

    python tests/support/aihub_fake/htp_worker.py SPEC.json RESULT.json   (PYTHONPATH: the repository, for qnndeploy)

SPEC.json: {"task": "compile" | "dlc" | "link" | "run", ...} (see compile_job, dlc_job, link_job and run_job).
RESULT.json: {"ok": bool, "error": str, ...}. Everything here is written against onnxruntime directly; it does not
use qnndeploy's compile code. The one product import is qnndeploy.qnn.qnnsystem.read_context, used only to read the
graph I/O of an uploaded context binary this fake did not compile itself (QAIRT's own QnnSystem library does the
reading).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

EP_NAME = "QNNExecutionProvider"
# ONNX TensorProto element types by numpy dtype name
ONNX_TYPES = {"float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7, "bool": 9,
              "float16": 10, "float64": 11, "uint32": 12, "uint64": 13}
# onnxruntime's type strings, e.g. "tensor(float)", by numpy dtype name
ORT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(uint8)": "uint8", "tensor(int8)": "int8",
             "tensor(uint16)": "uint16", "tensor(int16)": "int16", "tensor(int32)": "int32", "tensor(int64)": "int64",
             "tensor(bool)": "bool", "tensor(double)": "float64", "tensor(uint32)": "uint32",
             "tensor(uint64)": "uint64"}


def _memory() -> tuple[int, int]:
    """(current RSS, peak RSS) of this process in bytes, from /proc/self/status (VmRSS, VmHWM)."""
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) * 1024
    return values["VmRSS"], values["VmHWM"]


def _devices() -> list[Any]:
    import onnxruntime as ort
    import onnxruntime_qnn

    ort.register_execution_provider_library(EP_NAME, onnxruntime_qnn.get_library_path())
    return [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]


def _options(spec: dict[str, Any], context_path: Path | None = None) -> Any:
    import onnxruntime as ort
    import onnxruntime_qnn

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")  # the graph runs on the NPU or not at all
    if context_path is not None:
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_embed_mode", "0")
        so.add_session_config_entry("ep.context_file_path", str(context_path))
    backend = Path(onnxruntime_qnn.get_library_path()).with_name("libQnnHtp.so")
    provider = {"backend_path": str(backend), "soc_model": str(spec["soc_model"]),
                "htp_arch": str(spec["htp_arch"]), "enable_htp_fp16_precision": "1"}
    so.add_provider_for_devices(_devices(), provider)
    return so


def _io(values: Any) -> list[dict[str, Any]]:
    return [{"name": v.name, "shape": list(v.shape), "dtype": ORT_TYPES.get(v.type, v.type)} for v in values]


def _shaped(spec: dict[str, Any], out: Path) -> tuple[str, str | None]:
    """(the model to compile, an error): spec["model"] with the job's input specs applied to its input shapes, as
    the service does, written to out/source.onnx when there are any."""
    import onnx

    source = spec["model"]
    if not spec.get("input_shapes"):
        return source, None
    model = onnx.load(source)
    inputs = {i.name: i for i in model.graph.input}
    unknown = sorted(set(spec["input_shapes"]) - set(inputs))
    if unknown:
        return source, f"input specs name {unknown}, not inputs of the model {sorted(inputs)}"
    for name, shape in spec["input_shapes"].items():
        dims = inputs[name].type.tensor_type.shape.dim
        del dims[:]
        for size in shape:
            dims.add().dim_value = size
    source = str(out / "source.onnx")
    onnx.save(model, source)
    return source, None


def compile_job(spec: dict[str, Any]) -> dict[str, Any]:
    """Compile spec["model"] (ONNX) for soc_model/htp_arch into spec["out_dir"]: model_ctx.onnx, the EPContext
    wrapper, and model_ctx_qnn.bin, the QNN context binary (embed mode 0)."""
    import onnx
    import onnxruntime as ort

    out = Path(spec["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    ctx = out / "model_ctx.onnx"
    source, error = _shaped(spec, out)
    if error:
        return {"ok": False, "error": error}
    start = time.perf_counter()
    before = _memory()
    session = ort.InferenceSession(source, _options(spec, ctx))
    seconds = time.perf_counter() - start
    after = _memory()
    if not ctx.is_file():
        return {"ok": False, "error": "the HTP compiler produced no context binary"}
    nodes = list(onnx.load(str(ctx), load_external_data=False).graph.node)
    contexts = [n for n in nodes if n.op_type == "EPContext" and n.domain == "com.microsoft"]
    if len(nodes) != 1 or len(contexts) != 1:
        return {"ok": False, "error": f"the model compiled into {len(contexts)} NPU partitions and "
                f"{len(nodes) - len(contexts)} other nodes; a context binary needs the whole graph on the NPU"}
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in contexts[0].attribute}
    binary = out / attrs["ep_cache_context"].decode()
    return {"ok": True, "binary": str(binary), "wrapper": str(ctx), "graph": contexts[0].name,
            "sdk_version": attrs.get("ep_sdk_version", b"").decode(),
            "inputs": _io(session.get_inputs()), "outputs": _io(session.get_outputs()),
            "compile_time_us": round(seconds * 1e6), "before_memory": before, "after_memory": after}


# The DLC stand-in: a zip holding DLC_MEMBER (this JSON header) and DLC_MODEL (the ONNX model, input shapes fixed).
DLC_FORMAT = "aihub_fake DLC stand-in, version 1: not a QNN DLC"
DLC_MEMBER = "aihub_fake_dlc.json"
DLC_MODEL = "model.onnx"


def dlc_job(spec: dict[str, Any]) -> dict[str, Any]:
    """A compile to --target_runtime qnn_dlc: the fake has no QNN converter, so it writes spec["out_dir"]/spec["name"],
    a DLC STAND-IN that only its own link jobs read (a zip of the model with the job's input shapes applied, and a
    header naming the format and the graph's I/O). The model must load in onnxruntime's CPU session, the one check
    of this step; whether the HTP can take the graph is the link job's to find out."""
    import zipfile

    import onnxruntime as ort

    out = Path(spec["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    source, error = _shaped(spec, out)
    if error:
        return {"ok": False, "error": error}
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    inputs, outputs = _io(session.get_inputs()), _io(session.get_outputs())
    dlc = out / spec["name"]
    with zipfile.ZipFile(dlc, "w") as archive:
        archive.writestr(DLC_MEMBER, json.dumps({"format": DLC_FORMAT, "inputs": inputs, "outputs": outputs}))
        archive.write(source, DLC_MODEL)
    return {"ok": True, "dlc": str(dlc), "inputs": inputs, "outputs": outputs}


def link_job(spec: dict[str, Any]) -> dict[str, Any]:
    """Link spec["dlc"], one of this fake's DLC stand-ins, into a QNN context binary for soc_model/htp_arch: the host
    HTP compiler compiles the model it holds (compile_job). Any other file is refused ({"refused": True})."""
    import zipfile

    path = Path(spec["dlc"])
    header = None
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            if DLC_MEMBER in archive.namelist() and DLC_MODEL in archive.namelist():
                header = json.loads(archive.read(DLC_MEMBER))
                out = Path(spec["out_dir"])
                out.mkdir(parents=True, exist_ok=True)
                (out / "dlc_model.onnx").write_bytes(archive.read(DLC_MODEL))
    if not header or header.get("format") != DLC_FORMAT:
        return {"ok": False, "refused": True,
                "error": "the input is not a DLC this fake's compile jobs made: the fake cannot read real QNN DLCs, "
                         "it links only its own DLC stand-ins"}
    return compile_job({**spec, "model": str(Path(spec["out_dir"]) / "dlc_model.onnx"), "input_shapes": None})


def make_wrapper(binary: Path, wrapper: Path) -> dict[str, Any]:
    """An EPContext ONNX model around a context binary the fake did not compile, with the graph's I/O read from
    the binary by QAIRT's QnnSystem library (through qnndeploy.qnn.qnnsystem.read_context)."""
    import onnx
    from onnx import helper

    from qnndeploy.qnn.qnnsystem import read_context

    info = read_context(binary)
    if len(info.graphs) != 1:
        raise ValueError(f"the context binary holds {len(info.graphs)} graphs; the fake runs binaries of one graph")
    graph = info.graphs[0]

    def value(t: Any) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(t.name, ONNX_TYPES[t.dtype], list(t.dims))

    node = helper.make_node("EPContext", [t.name for t in graph.inputs], [t.name for t in graph.outputs],
                            name=graph.name, domain="com.microsoft", embed_mode=0, main_context=1,
                            ep_cache_context=binary.name, source="Qnn", partition_name=graph.name)
    model = helper.make_model(
        helper.make_graph([node], "aihub_fake_wrapper", [value(t) for t in graph.inputs],
                          [value(t) for t in graph.outputs]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    onnx.save(model, str(wrapper))
    return {"dsp_arch": info.dsp_arch, "soc_model": info.soc_model, "build_id": info.build_id, "graph": graph.name}


def _read_h5(path: Path) -> dict[str, list[Any]]:
    """The qai-hub dataset layout: data/<i> groups (attrs name, order, batch_count) of batch_<k> arrays."""
    import h5py

    entries: dict[str, list[Any]] = {}
    with h5py.File(path, "r") as h5:
        groups = sorted(h5["data"].values(), key=lambda g: int(g.attrs["order"]))
        for group in groups:
            count = int(group.attrs["batch_count"])
            entries[str(group.attrs["name"])] = [group[f"batch_{k}"][()] for k in range(count)]
    return entries


def _write_h5(path: Path, entries: dict[str, list[Any]]) -> None:
    import h5py

    with h5py.File(path, "w") as h5:
        for order, (name, batches) in enumerate(entries.items()):
            group = h5.create_group(f"data/{order}")
            group.attrs["name"] = name
            group.attrs["order"] = order
            group.attrs["batch_count"] = len(batches)
            for k, array in enumerate(batches):
                group.create_dataset(f"batch_{k}", data=array)


def run_job(spec: dict[str, Any]) -> dict[str, Any]:
    """Load spec["wrapper"] (the context binary beside it) on the HTP emulator for soc_model/htp_arch, twice (cold
    and warm load), and run it: on the inputs of spec["inputs_h5"] (outputs to spec["outputs_h5"]), and when
    spec["profile"] is set, spec["iterations"] more times on the first batch (or on random inputs without a
    dataset) to time execution. Times in microseconds, memory in bytes of this process."""
    import numpy as np
    import onnxruntime as ort

    so = _options(spec)
    before_cold = _memory()
    start = time.perf_counter()
    session = ort.InferenceSession(spec["wrapper"], so)
    cold = time.perf_counter() - start
    after_cold = _memory()
    start = time.perf_counter()
    warm_session = ort.InferenceSession(spec["wrapper"], so)
    warm = time.perf_counter() - start
    after_warm = _memory()
    del warm_session

    result: dict[str, Any] = {"ok": True, "inputs": _io(session.get_inputs()), "outputs": _io(session.get_outputs())}
    names = [o.name for o in session.get_outputs()]
    if spec.get("inputs_h5"):
        inputs = _read_h5(Path(spec["inputs_h5"]))
        expected = {i.name for i in session.get_inputs()}
        if set(inputs) != expected:
            return {"ok": False,
                    "error": f"the dataset has inputs {sorted(inputs)}, the model takes {sorted(expected)}"}
        batches = {len(v) for v in inputs.values()}
        if len(batches) != 1:
            return {"ok": False, "error": f"the dataset's inputs have different batch counts {sorted(batches)}"}
        outputs: dict[str, list[Any]] = {n: [] for n in names}
        for k in range(batches.pop()):
            feed = {name: np.asarray(values[k]) for name, values in inputs.items()}
            for name, array in zip(names, session.run(None, feed), strict=True):
                outputs[name].append(array)
        _write_h5(Path(spec["outputs_h5"]), outputs)
        first = {name: np.asarray(values[0]) for name, values in inputs.items()}
    else:
        rng = np.random.default_rng(0)
        first = {i.name: rng.random([d if isinstance(d, int) else 1 for d in i.shape]).astype(ORT_TYPES[i.type])
                 for i in session.get_inputs()}
    before_exec = _memory()
    times = []
    for _ in range(spec.get("iterations", 0) if spec.get("profile") else 0):
        start = time.perf_counter()
        session.run(None, first)
        times.append(round((time.perf_counter() - start) * 1e6))
    after_exec = _memory()
    result.update(cold_load_time_us=round(cold * 1e6), warm_load_time_us=round(warm * 1e6),
                  execution_times_us=times, execution_time_us=round(statistics.median(times)) if times else 0,
                  memory={"before_cold_load": before_cold, "after_cold_load": after_cold,
                          "before_warm_load": after_cold, "after_warm_load": after_warm,
                          "before_execution": before_exec, "after_execution": after_exec})
    return result


TASKS = {"compile": compile_job, "dlc": dlc_job, "link": link_job}  # "run": an inference or profile job


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    try:
        if spec["task"] in TASKS:
            result = TASKS[spec["task"]](spec)
        else:
            info = None
            if not Path(spec["wrapper"]).is_file():
                info = make_wrapper(Path(spec["binary"]), Path(spec["wrapper"]))
            if info and info["dsp_arch"] and info["dsp_arch"] != f"v{spec['htp_arch']}":
                result = {"ok": False, "error": f"the binary is for Hexagon {info['dsp_arch']}"}  # a phone refuses it
            else:
                result = run_job(spec)
            result["binary_info"] = info
    except Exception as e:  # noqa: BLE001 onnxruntime and QNN raise their own, unexported exception types
        lines = [line for line in str(e).splitlines() if line.strip()] or [type(e).__name__]
        result = {"ok": False, "error": lines[0][:2000], "traceback": traceback.format_exc()}
    Path(argv[2]).write_text(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # skip native library teardown at exit


if __name__ == "__main__":
    main(sys.argv)

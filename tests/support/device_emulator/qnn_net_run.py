"""STAND-IN for QAIRT's qnn-net-run (tests only: there is no phone and no QAIRT SDK here).

`device verify --runner LAUNCHER` pushes a small launcher (write_launcher) to the emulated phone, which runs this
script with the host's Python. It takes qnn-net-run's command line for a saved context and refuses options it
does not know, as the real tool does:

  qnn-net-run --backend libQnnHtp.so --retrieve_context GRAPH.bin --input_list LIST --output_dir DIR
              [--use_native_input_files] [--use_native_output_files] [--log_level L] [--profiling_level L]
              [--perf_profile P] [--profiling_option optrace]

What it checks, in the order the real HTP backend loads things:
- the backend library: a bare name must be found on LD_LIBRARY_PATH (dlopen's rule);
- the context binary: the HTP arch it was compiled for is read from it (QNN embeds "soc_type=SM8750;arch=79");
- the Skel: libQnnHtpV<arch>Skel.so must be in a folder of ADSP_LIBRARY_PATH (';'-separated), else it prints
  errors like the DSP loader's ("Failed to load skel, error: 4000", device creation 1008) and exits 1.
A context of several graphs (compile --share) is checked for one input list per graph ("__" for a graph not to run)
and then refused (exit 2): the host emulator crashes on contexts whose graphs share weights. Otherwise it runs
the context on the host HTP emulator of onnxruntime-qnn. ONNX Runtime loads a context binary
through its EPContext wrapper, so it REQUIRES <graph>_ctx.onnx beside <graph>.bin (bundles carry it as the
ort-epcontext artifact), or the EPContext model the QNN EP wrote beside the binary it compiled (device verify's
on-device path). Inputs are read from the raw files of the input list, outputs written to DIR/Result_<line>/<name>.raw:
the numbers are the HTP emulator's, really computed.

Profiling (`--profiling_level basic|detailed`, `--profiling_option optrace`): the session runs with the QNN EP's
profiling_level/profiling_file_path options, so the QNN HTP backend of onnxruntime-qnn itself measures the run
and emits its profile events; nothing is made up here. Where each output comes from:
- <output_dir>/qnn-profiling-data_0.log: qnn-net-run's log name (QAIRT's model-level API reads that name). Its bytes
  are the binary log the QNN EP writes through QNN's System Profile API (<file>_qnn.log, "compatible with
  qnn-profile-viewer", microsoft/onnxruntime#25987); its layout is not public and nothing here reads it.
- <output_dir>/qnn-profiling-data_0.log.standin.csv: STAND-IN ONLY, the same events in the event CSV layout the QNN
  EP writes (qnn_backend_manager.cc); the qnn-profile-viewer stand-in (qnn_profile_viewer.py) gives it back as
  the real viewer would give its --output from the log.
- <output_dir>/qnn-profiling-data_0.log.standin.txt: STAND-IN ONLY, the summary the real viewer prints without
  --output ("Init Stats:" ... "NetRun: N us", device/opprofile.py names where that layout was read), with this
  process's own times: Init the session creation (the context binary loaded on the host HTP emulator), Execute the
  mean inference. The host's times, not a phone's HTP's.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import NoReturn

FLAGS = {"--backend": True, "--retrieve_context": True, "--input_list": True, "--output_dir": True,
         "--use_native_input_files": False, "--use_native_output_files": False, "--log_level": True,
         "--profiling_level": True, "--perf_profile": True}
# --perf_profile's values, as the QNN SDK docs list them for qnn-net-run (Tools, qnn-net-run)
PERF_PROFILES = ("low_balanced", "balanced", "default", "high_performance", "sustained_high_performance", "burst",
                 "low_power_saver", "power_saver", "high_power_saver", "extreme_power_saver", "system_settings")
CONTEXT_TARGET = re.compile(rb"soc_type=([A-Za-z0-9]{2,16});arch=(\d{2,3})")


def write_launcher(path: Path, adsp_library_path: str | None = None) -> Path:
    """An executable for the emulated phone that starts this stand-in with the host Python.

    LD_LIBRARY_PATH points at the bundle's stand-in aarch64 libraries, which the host's loader must not see: it is
    handed over as QNN_STANDIN_LD_LIBRARY_PATH. adsp_library_path, when given, replaces ADSP_LIBRARY_PATH the way
    a wrapper or a device setting that drops the Skel folder would (to test the advice for error 4000/1008).
    """
    override = f"ADSP_LIBRARY_PATH='{adsp_library_path}'; export ADSP_LIBRARY_PATH\n" if adsp_library_path else ""
    path.write_text("#!/bin/sh\n# STAND-IN for qnn-net-run (tests/support/device_emulator/qnn_net_run.py)\n"
                    'QNN_STANDIN_LD_LIBRARY_PATH="$LD_LIBRARY_PATH"; export QNN_STANDIN_LD_LIBRARY_PATH\n'
                    f"unset LD_LIBRARY_PATH\n{override}"
                    f"PYTHONPATH={Path(__file__).resolve().parents[3]}; export PYTHONPATH\n"  # this checkout's
                    f'exec {sys.executable} {Path(__file__).resolve()} "$@"\n')
    path.chmod(0o755)
    return path


def _device_path(path: str) -> Path:
    """Paths inside files (the input list) are the phone's; the emulated phone's / is $EMU_ROOT."""
    p = Path(path)
    root = os.environ.get("EMU_ROOT")
    if p.is_absolute() and root and not p.exists():
        return Path(root + path)
    return p


def skel_missing(arch: str) -> list[str]:
    """The QNN HTP backend's lines when the arch's Skel is in no folder of ADSP_LIBRARY_PATH (the DSP loads it from
    there), as qnn-net-run and the QNN EP print them; empty when it is found."""
    skel = f"libQnnHtpV{arch}Skel.so"
    adsp = [d for d in os.environ.get("ADSP_LIBRARY_PATH", "").split(";") if d]
    if any((_device_path(d) / skel).is_file() for d in adsp):
        return []
    return [f"     0.4ms [ ERROR ] <E> Failed to load skel, error: 4000 ({skel} not found on ADSP_LIBRARY_PATH)",
            "     0.5ms [ ERROR ] <E> Transport layer setup failed: 14001",
            "     0.5ms [ ERROR ] <E> Failed to create device: 1008"]


def _fail(*lines: str, code: int = 1) -> NoReturn:
    for line in lines:
        print(line, flush=True)
    sys.exit(code)


def _parse(argv: list[str]) -> dict:
    args: dict = {}
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag in ("--help", "-h"):
            _fail("usage: qnn-net-run --backend FILE --retrieve_context FILE --input_list FILE [--output_dir DIR] "
                  "(stand-in: " + ", ".join(FLAGS) + ")", code=0)
        if flag not in FLAGS:
            _fail(f"ERROR: Invalid argument passed: {flag}", "Please check help (--help) for valid arguments.")
        if FLAGS[flag]:
            if i + 1 >= len(argv):
                _fail(f"ERROR: {flag} requires a value")
            args[flag] = argv[i + 1]
            i += 2
        else:
            args[flag] = True
            i += 1
    for required in ("--backend", "--retrieve_context", "--input_list"):
        if required not in args:
            _fail(f"ERROR: Missing required argument {required} (this stand-in runs saved contexts only)")
    return args


def main(argv: list[str]) -> None:
    args = _parse(argv)
    if args.get("--perf_profile", "default") not in PERF_PROFILES:
        _fail(f"ERROR: Invalid value for --perf_profile: {args['--perf_profile']}")
    backend = args["--backend"]
    lib_dirs = [d for d in os.environ.get("QNN_STANDIN_LD_LIBRARY_PATH", "").split(":") if d]
    found = Path(backend).is_file() if "/" in backend else any((Path(d) / backend).is_file() for d in lib_dirs)
    if not found:
        _fail(f"ERROR: Unable to load backend. dlerror(): dlopen failed: library \"{backend}\" not found")

    binary = Path(args["--retrieve_context"])
    if not binary.is_file():
        _fail(f"ERROR: Could not open context binary {binary}")
    target = CONTEXT_TARGET.search(binary.read_bytes())
    if target is None:
        _fail(f"ERROR: {binary} is not a QNN context binary", "Graph Prepare failure")
    soc_name, arch = target.group(1).decode(), target.group(2).decode()

    if missing := skel_missing(arch):
        _fail(*missing, "Device Creation failure")

    # A context of several graphs (compile --share) takes one input list per graph, in the context's order, "__"
    # for a graph not to run (qnn-net-run's documented --input_list form for several graphs).
    from qnndeploy.qnn import qnnsystem

    graphs = [g.name for g in qnnsystem.read_context(binary).graphs]
    lists = args["--input_list"].split(",")
    if len(lists) != len(graphs):
        _fail(f"ERROR: --input_list gives {len(lists)} list(s) for a context of {len(graphs)} graph(s)")
    chosen = [i for i, name in enumerate(lists) if name != "__"]
    if len(graphs) > 1:
        _fail(f"STAND-IN qnn-net-run: graph {chosen[0] + 1 if chosen else '?'} of {len(graphs)} of {binary.name} "
              f"(input lists {args['--input_list']}): the host HTP emulator cannot run a context whose graphs share "
              "weights; run it on a phone", code=2)
    profiling = _profiling_of(args)
    wrapper = _wrapper_of(binary)
    if wrapper is None:
        _fail(f"STAND-IN: {binary.stem}_ctx.onnx must sit beside {binary.name}: the host HTP emulator loads a context "
              "binary through its ONNX Runtime EPContext wrapper", code=2)
    init_s, times = run(wrapper, soc_name, Path(args["--input_list"]), Path(args.get("--output_dir", "output")),
                        native_in="--use_native_input_files" in args,
                        native_out="--use_native_output_files" in args, profiling=profiling)
    if profiling:
        _finish_profile(Path(args.get("--output_dir", "output")), binary.stem, init_s, times)


def _wrapper_of(binary: Path) -> Path | None:
    """The EPContext model beside a context binary: <stem>_ctx.onnx (a bundle's), else the one whose EPContext node
    names the binary (what the QNN EP writes with ep.context_file_path: GRAPH_ctx.onnx beside GRAPH_ctx_qnn.bin)."""
    named = binary.with_name(binary.stem + "_ctx.onnx")
    if named.is_file():
        return named
    from qnndeploy.qnn import epcontext

    return next((p for p in sorted(binary.parent.glob("*.onnx")) if binary.name in epcontext.context_refs(p)), None)


# --- profiling -----------------------------------------------------------------------------------------------------

FLAGS["--profiling_option"] = True
PROFILING_LEVELS = ("basic", "detailed")  # qnn-net-run's, for the HTP (QAIRT docs: basic, detailed)
LOG = "qnn-profiling-data_0.log"
SIDECAR = LOG + ".standin.csv"
SUMMARY = LOG + ".standin.txt"
_EP_CSV = "qnn-profiling-data.standin.csv"  # what the QNN EP is told to write; it adds <stem>_qnn.log beside it


def _profiling_of(args: dict) -> str | None:
    """The QNN EP's profiling_level for qnn-net-run's options (optrace is the EP's own level), None for none."""
    level = args.get("--profiling_level")
    if level is not None and level not in PROFILING_LEVELS:
        _fail(f"ERROR: Invalid profiling level: {level} (stand-in: {', '.join(PROFILING_LEVELS)})")
    option = args.get("--profiling_option")
    if option is not None and (option != "optrace" or level != "detailed"):
        _fail(f"ERROR: --profiling_option {option} needs --profiling_level detailed (stand-in: optrace only)")
    return "optrace" if option else level


def _profile_options(out: Path, profiling: str | None) -> dict[str, str] | None:
    """The QNN EP options that make the QNN HTP backend profile the run into `out` (earlier files removed)."""
    if not profiling:
        return None
    out.mkdir(parents=True, exist_ok=True)
    for old in (out / _EP_CSV, out / _EP_CSV.replace(".csv", "_qnn.log"), out / LOG, out / SIDECAR, out / SUMMARY):
        old.unlink(missing_ok=True)
    return {"profiling_level": profiling, "profiling_file_path": str(out / _EP_CSV)}


def _finish_profile(out: Path, graph: str, init_s: float, times: list[float]) -> None:
    """Once the session has ended (the QNN EP writes its binary log then): the files under qnn-net-run's names, and
    the summary the viewer prints of them (SUMMARY)."""
    import gc
    import shutil

    gc.collect()
    mean = round(sum(times) / len(times) * 1e6) if times else 0
    (out / SUMMARY).write_text(
        "Qnn Init/Prepare/Finalize/De-Init/Execute/Lib-Load Statistics:\n------------------------------------------"
        f"---------------------\n\nInit Stats:\n-----------\n    NetRun: {round(init_s * 1e6)} us\n\n"
        f"Execute Stats (Average):\n------------------------\nTotal Inference Time:\n---------------------\n"
        f"Graph 0 ({graph}):\n    NetRun: {mean} us\n\n"
        "STAND-IN qnn-profile-viewer: the host HTP emulator's times, not a phone's\n")
    shutil.move(out / _EP_CSV, out / SIDECAR)
    binary_log = out / _EP_CSV.replace(".csv", "_qnn.log")
    if binary_log.is_file():
        shutil.move(binary_log, out / LOG)
    else:  # an onnxruntime-qnn before QNN API 2.29 writes no binary log: the sidecar stands for it
        (out / LOG).write_bytes(b"STAND-IN: no binary log from this onnxruntime-qnn\n")


def run(wrapper: Path, soc_name: str, input_list: Path, out: Path, native_in: bool, native_out: bool,
        profiling: str | None = None) -> tuple[float, list[float]]:
    """Run every line of the input list; (the session creation's seconds, each inference's seconds)."""
    import time

    import numpy as np
    import onnxruntime as ort

    from qnndeploy.base import socs
    from qnndeploy.qnn import htp

    provider = _profile_options(out, profiling)
    start = time.perf_counter()
    session = ort.InferenceSession(str(wrapper), htp.session_options(socs.find(soc_name), provider=provider))
    init_s = time.perf_counter() - start
    inputs = session.get_inputs()
    types = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int32)": np.int32,
             "tensor(int64)": np.int64, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8, "tensor(bool)": np.bool_}
    lines = [ln.split() for ln in input_list.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    times = _infer(session, inputs, types, lines, out, native_in, native_out)
    print(f"STAND-IN qnn-net-run: {len(lines)} inference(s) of {wrapper.name} on the host HTP emulator ({soc_name})")
    return init_s, times


def power() -> ModuleType:
    """power.py, loaded by its path: this file also runs as a plain script, outside the tests package."""
    spec = importlib.util.spec_from_file_location("device_emulator_power", Path(__file__).with_name("power.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _infer(session, inputs, types, lines, out: Path, native_in: bool, native_out: bool) -> list[float]:
    import time

    import numpy as np

    times = []
    for n, tokens in enumerate(lines):
        named = {}  # input name -> file: NAME:=FILE, or FILE for the i-th input
        for i, token in enumerate(tokens):
            name, given, file = token.partition(":=")
            named[name if given else inputs[i].name] = file if given else token
        feed: dict[str, np.ndarray] = {}
        for spec in inputs:
            if spec.name not in named:
                _fail(f"ERROR: input list line {n + 1} has no file for input {spec.name}")
            dtype = types[spec.type]
            data: np.ndarray = np.fromfile(_device_path(named[spec.name]), dtype=dtype if native_in else np.float32)
            feed[spec.name] = data.reshape(spec.shape).astype(dtype)
        start = time.perf_counter()
        results = session.run(None, feed)
        times.append(time.perf_counter() - start)
        folder = out / f"Result_{n}"
        folder.mkdir(parents=True, exist_ok=True)
        for spec, result in zip(session.get_outputs(), results, strict=True):
            value = result if native_out else result.astype(np.float32)
            (folder / (re.sub(r"[^A-Za-z0-9_.-]", "_", spec.name) + ".raw")).write_bytes(value.tobytes())
    return times


if __name__ == "__main__":
    with power().busy("npu"):  # the emulated phone's battery current and temperature follow the load
        main(sys.argv[1:])

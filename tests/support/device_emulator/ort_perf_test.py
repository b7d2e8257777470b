"""STAND-IN for ONNX Runtime's onnxruntime_perf_test built for Android with the QNN EP (tests only: there is no phone
here, and no Android build of ONNX Runtime).

`device verify --ort-runner LAUNCHER` pushes a small launcher (write_launcher) to the emulated phone, which runs this
script with the host's Python. It takes the tool's command line (onnxruntime/test/perftest/command_args_parser.cc)
for the options qnndeploy uses and refuses any other, as the real tool's getopt does:

  onnxruntime_perf_test -e qnn -i "k|v k|v ..." -C "k|v k|v ..." [-m times] [-r N] [-I] [-S SEED] [-v] [-s] MODEL

and does what the phone's would, with the host's onnxruntime-qnn in place of the phone's HTP:
- the QNN backend: backend_path, a bare name, must be found on the phone's LD_LIBRARY_PATH (dlopen's rule); the
  Skel of htp_arch must be in a folder of ADSP_LIBRARY_PATH, else the DSP loader's errors and exit 255;
- the session: MODEL with the -C session config entries and the -i provider options verbatim (backend_path becomes
  the host's HTP backend), so a plain ONNX model is really compiled by QNN for the given soc_model and htp_arch, with
  the given ep_options, and ep.context_enable writes the EP context (the app's on-device cache) where
  ep.context_file_path says; an EPContext model (a later run, the cache hit) loads its context binary;
- the inputs: test_data_set_<k>/input_<i>.pb beside MODEL (the real tool's rule without -I), else "there is no test
  data"; one warm-up inference, then N;
- the figures it prints are the real tool's lines, with the host's times: the compile and the emulated HTP's runs.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import NoReturn

from .qnn_net_run import _device_path, skel_missing

# getopt: the options that take a value, and the flags (the real tool's string is
# "m:e:r:t:p:x:y:c:d:o:u:i:f:F:S:T:C:AMPIDZvhsqznlgR:X"; only these are implemented)
VALUED = {"-e", "-i", "-C", "-m", "-r", "-S", "-x"}
FLAGS = {"-I", "-v", "-s"}
_REPO = Path(__file__).resolve().parents[3]  # the stand-in runs this checkout's qnndeploy, not an installed one


def write_launcher(path: Path, adsp_library_path: str | None = None) -> Path:
    """An executable for the emulated phone that starts this stand-in with the host Python; LD_LIBRARY_PATH (the
    bundle's stand-in aarch64 libraries) is handed over as QNN_STANDIN_LD_LIBRARY_PATH, out of the host loader's way.
    adsp_library_path replaces ADSP_LIBRARY_PATH, as a wrapper or a device setting that drops the Skel folder would."""
    override = f"ADSP_LIBRARY_PATH='{adsp_library_path}'; export ADSP_LIBRARY_PATH\n" if adsp_library_path else ""
    path.write_text("#!/bin/sh\n# STAND-IN for onnxruntime_perf_test (tests/support/device_emulator/ort_perf_test.py)\n"
                    'QNN_STANDIN_LD_LIBRARY_PATH="$LD_LIBRARY_PATH"; export QNN_STANDIN_LD_LIBRARY_PATH\n'
                    f"unset LD_LIBRARY_PATH\n{override}"
                    f"PYTHONPATH={_REPO}; export PYTHONPATH\n"
                    f'exec {sys.executable} -m tests.support.device_emulator.ort_perf_test "$@"\n')
    path.chmod(0o755)
    return path


def _fail(*lines: str, code: int = 255) -> NoReturn:
    for line in lines:
        print(line, flush=True)
    sys.exit(code)


def _usage() -> NoReturn:
    _fail("perf_test [options...] model_path [result_file]", "(STAND-IN: options " + " ".join(sorted(VALUED | FLAGS))
          + ")", code=255)


def _pairs(text: str, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("|")
        if not sep or not key or not value:
            _fail(f"Use a '|' to separate the key and value for the {what} you are trying to use.")
        if key in out:
            _fail(f"Specified duplicate {what}: {key}")
        out[key] = value
    return out


def _parse(argv: list[str]) -> tuple[dict[str, str], set[str], list[str]]:
    valued: dict[str, str] = {}
    flags: set[str] = set()
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        opt = argv[i]
        if opt in VALUED:
            if i + 1 >= len(argv):
                _usage()
            valued[opt] = argv[i + 1]
            i += 2
        elif opt in FLAGS:
            flags.add(opt)
            i += 1
        else:
            _usage()
    rest = argv[i:]
    if len(rest) not in (1, 2):
        _usage()
    return valued, flags, rest


def main(argv: list[str]) -> None:
    valued, flags, rest = _parse(argv)
    if valued.get("-e", "cpu") not in ("qnn", "cpu"):
        _fail(f"STAND-IN onnxruntime_perf_test: only -e qnn and -e cpu are implemented (got -e {valued['-e']})")
    if valued.get("-m", "times") != "times":
        _fail("STAND-IN onnxruntime_perf_test: only -m times is implemented")
    threads = valued.get("-x", "0")
    if not threads.isdigit():
        _fail(f"Invalid value for -x: {threads}")
    if valued.get("-e", "cpu") == "cpu":  # the CPU EP: ONNX Runtime's own kernels, no QNN library to load
        model = _device_path(rest[0])
        if not model.is_file():
            _fail(f"Load model from {rest[0]} failed: No such file")
        run(model, None, _pairs(valued.get("-C", ""), "session configuration entry"), int(valued.get("-r", "1000")),
            generate="-I" in flags, seed=int(valued.get("-S", "-1")), threads=int(threads))
        return
    provider = _pairs(valued.get("-i", ""), "run-time option")
    config = _pairs(valued.get("-C", ""), "session configuration entry")
    runs = int(valued.get("-r", "1000"))
    model = _device_path(rest[0])

    backend = provider.get("backend_path")
    if backend is None:
        _fail("STAND-IN onnxruntime_perf_test: give -i backend_path|libQnnHtp.so, as the app does")
    lib_dirs = [d for d in os.environ.get("QNN_STANDIN_LD_LIBRARY_PATH", "").split(":") if d]
    found = Path(backend).is_file() if "/" in backend else any((Path(d) / backend).is_file() for d in lib_dirs)
    if not found:
        _fail(f"QnnBackendManager: Unable to load backend, error: dlopen failed: library \"{backend}\" not found",
              "Failed to create session")
    arch = provider.get("htp_arch", "")
    if not arch.isdigit():
        _fail(f"Wrong value for htp_arch: {arch!r}")
    if missing := skel_missing(arch):
        _fail(*missing, "QNN EP: Failed to create device", "Failed to create session")
    if not model.is_file():
        _fail(f"Load model from {rest[0]} failed: No such file")
    run(model, provider, config, runs, generate="-I" in flags, seed=int(valued.get("-S", "-1")))


def _inputs(model: Path, session, generate: bool, seed: int) -> list[dict]:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    if generate:
        rng = np.random.default_rng(None if seed < 0 else seed)
        types = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int32)": np.int32,
                 "tensor(int64)": np.int64}
        return [{i.name: rng.random([d if isinstance(d, int) else 1 for d in i.shape]).astype(types[i.type])
                 for i in session.get_inputs()}]
    sets = sorted(p for p in model.parent.glob("test_data_set_*") if p.is_dir())
    names = [i.name for i in session.get_inputs()]
    feeds = []
    for folder in sets:
        feed = {}
        for i, name in enumerate(names):
            tensor = onnx.TensorProto()
            tensor.ParseFromString((folder / f"input_{i}.pb").read_bytes())
            feed[tensor.name or name] = numpy_helper.to_array(tensor)
        feeds.append(feed)
    if not feeds:
        _fail(f"there is no test data for model {model.stem}")
    return feeds


def run(model: Path, provider: dict[str, str] | None, config: dict[str, str], runs: int, generate: bool, seed: int,
        threads: int = 0) -> None:
    """provider None: -e cpu, ONNX Runtime's CPU EP with `threads` intra-op threads (-x; 0: its default)."""
    import onnxruntime as ort

    from qnndeploy.base import socs
    from qnndeploy.qnn import htp

    if provider is None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        start = time.perf_counter()
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        _timed(session, model, time.perf_counter() - start, runs, generate, seed)
        print(f"STAND-IN onnxruntime_perf_test: {model.name} on the host's CPU EP (-x {threads})")
        return
    options = {k: v for k, v in provider.items() if k != "backend_path"}  # the host's HTP backend instead
    if "ep.context_file_path" in config:  # a file to be written: its folder is the phone's
        cache = Path(config["ep.context_file_path"])
        root = os.environ.get("EMU_ROOT")
        if cache.is_absolute() and root and not cache.parent.exists():
            cache = Path(root + str(cache))
        config = {**config, "ep.context_file_path": str(cache)}
    soc = next((s for s in socs.catalog() if str(s.soc_id) == options.get("soc_model")), socs.catalog()[0])
    start = time.perf_counter()
    try:
        with htp.quiet_native_stdout():
            session = ort.InferenceSession(str(model), htp.session_options(
                soc, fp16=False, cpu_fallback=True, config=config, provider=options))
    except Exception as e:  # noqa: BLE001 onnxruntime's own error types
        _fail(f"Failed to create session: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    _timed(session, model, time.perf_counter() - start, runs, generate, seed)
    print(f"STAND-IN onnxruntime_perf_test: {model.name} on the host HTP emulator (soc_model "
          f"{options.get('soc_model')}, htp_arch {options.get('htp_arch')})")


def _timed(session, model: Path, created: float, runs: int, generate: bool, seed: int) -> None:
    """One warm-up inference, then `runs`, each timed, with the real tool's summary lines. Their wording and units
    are performance_runner.cc's (PerformanceRunner::Run and its latency summary): session creation in s, the
    first inference in ms, the totals, then "Min Latency: X s", "Max Latency", "P50", "P90", "P95", "P99", "P999
    Latency" over the sorted per-inference times, in seconds."""
    print(f"\nSession creation time cost: {created:.6f} s")
    feeds = _inputs(model, session, generate, seed)
    times = []
    start = time.perf_counter()
    session.run(None, feeds[0])
    print(f"First inference time cost: {round((time.perf_counter() - start) * 1000)} ms")
    begin = time.perf_counter()
    for n in range(runs):
        t = time.perf_counter()
        session.run(None, feeds[n % len(feeds)])
        times.append(time.perf_counter() - t)
    total = time.perf_counter() - begin
    print(f"Total inference time cost: {sum(times):.6f} s")
    print(f"Total inference requests: {runs}")
    print(f"Average inference time cost total: {sum(times) / runs * 1000:.6f} ms")
    print(f"Total inference run time: {total:.6f} s")
    print(f"Number of inferences per second: {runs / total:.6f}")
    times.sort()

    def at(q: float) -> float:  # the real tool's index: time_costs[size * q] of the sorted times
        return times[min(len(times) - 1, int(len(times) * q))]

    print(f"Min Latency: {times[0]:.6f} s\nMax Latency: {times[-1]:.6f} s\nP50 Latency: {at(0.5):.6f} s\n"
          f"P90 Latency: {at(0.9):.6f} s\nP95 Latency: {at(0.95):.6f} s\nP99 Latency: {at(0.99):.6f} s\n"
          f"P999 Latency: {at(0.999):.6f} s")


if __name__ == "__main__":
    from .qnn_net_run import power

    # the emulated phone's battery current and temperature follow the load, by the path this run stands for
    ep = next((b for a, b in zip(sys.argv, sys.argv[1:], strict=False) if a == "-e"), "cpu")
    with power().busy("cpu" if ep == "cpu" else "npu"):
        main(sys.argv[1:])

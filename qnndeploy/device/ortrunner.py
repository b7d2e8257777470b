"""onnxruntime_perf_test on a phone: the on-device NPU path ("npu_source": "on-device") compiled and run the way the
app's QNN execution provider does it, with its first-compile and run times.

The tool is ONNX Runtime's own benchmark, onnxruntime_perf_test, built for Android with the QNN EP (ONNX Runtime's
build.py --android --use_qnn static_lib; it is built with the tests). It is the one ONNX Runtime tool that takes a
session's configuration entries and the EP's provider options verbatim, so it can make exactly the session the
glue makes (OrtModels.kt), and it reports the session creation time, which on a first run is the compile. Where each
part of the command line comes from (onnxruntime/test/perftest/command_args_parser.cc, ShowUsage and
ParseArguments, onnxruntime-qnn's copy read 2026-12-02):

  onnxruntime_perf_test -e qnn -i "backend_path|libQnnHtp.so htp_arch|81 soc_model|97 KEY|VALUE ..."
                        -C "session.disable_cpu_ep_fallback|1 ep.context_enable|1 ep.context_embed_mode|0
                            ep.context_file_path|CACHE/GRAPH_ctx.onnx" -m times -r N MODEL.onnx

- `-e qnn`: the QNN execution provider.
- `-i "k|v k|v"`: the EP's runtime (provider) options, space-separated key|value pairs: backend_path, htp_arch,
  soc_model, htp_performance_mode, enable_htp_fp16_precision, htp_graph_finalization_optimization_mode, vtcm_mb are
  all listed there. A value cannot hold a space or a '|' (the tool splits on them): such options are refused here.
- `-C "k|v k|v"`: session configuration entries (onnxruntime_session_options_config_keys.h); its own example is
  "session.disable_cpu_ep_fallback|1 ep.context_enable|1".
- `-m times -r N`: N inferences after one warm-up inference.
- the model path; without -I, the inputs are the ONNX test-data folders beside it: test_data_set_<k>/input_<i>.pb,
  one TensorProto per input (the format onnx_test_runner reads too).

What it prints and is read here (performance_runner.cc): "Session creation time cost: S s", "First inference time
cost: M ms", "Total inference requests: N", "Average inference time cost total: M ms" (older releases: "Average
inference time cost: M ms").

The glue's session, which the command line repeats: session.disable_cpu_ep_fallback=1 (OrtModels.sessionOptions),
ep.context_enable=1, ep.context_embed_mode=0, ep.context_file_path=<cache>/<graph>_ctx.onnx (the on-device cache),
and the provider options backend_path=libQnnHtp.so, htp_performance_mode (the bundle's, else the glue's
DEFAULT_PERFORMANCE_MODE "burst"), soc_model, htp_arch, then the manifest's on_device ep_options for the graph.
A later app start opens the cached <graph>_ctx.onnx instead of the ONNX: the second run here does the same.

Why not onnx_test_runner (onnxruntime/test/onnx/main.cc), which takes the same -e qnn -i/-C options and a folder of
model.onnx + test_data_set_0/input_N.pb/output_N.pb: it judges the outputs itself, on the phone, by one absolute and
relative tolerance (-a, -t), where device verify judges by validate's rules on this host; it prints no time; and the
copy in onnxruntime-qnn read on 2026-12-02 refuses htp_arch values other than 0, 68, 69, 73 and 75, so it could not
compile for a v79 or v81 phone. The outputs are compared instead by running the context binary the EP compiled
through qnn-net-run (device/runner.py), as for a bundle's own binaries.
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from qnndeploy.base import numbers
from qnndeploy.base.errors import BadInput
from qnndeploy.base.htparch import HtpArch
from qnndeploy.device.adb import RUN, Device, parse_int
from qnndeploy.device.runner import Clock, phone_executable

if TYPE_CHECKING:
    import numpy as np

REMOTE_ORT_RUNNER = "/data/local/tmp/qnndeploy/bin/onnxruntime_perf_test"
BACKEND = "libQnnHtp.so"  # as the glue passes it: a bare name, found through LD_LIBRARY_PATH (nativeLibraryDir)
DEFAULT_PERFORMANCE_MODE = "burst"  # the glue's, OrtModels.DEFAULT_PERFORMANCE_MODE
WANT = "onnxruntime_perf_test built for Android arm64 with the QNN EP (ONNX Runtime's build.py --android --use_qnn)"
_TIME = "QNNDEPLOY-TIME"
# The figure lines onnxruntime_perf_test prints, each "LABEL: NUMBER UNIT": the field each fills, its unit, and
# whether it is a count. Each is read through the bounded reader (base/numbers.py): a value that is not a finite,
# non-negative number of at most MAX_TIME (or MAX_COUNT) in that unit is None, and its line a problem said.
FIGURES = {"Session creation time cost": ("session_s", "s"),
           "First inference time cost": ("first_inference_ms", "ms"),
           "Average inference time cost total": ("average_ms", "ms"),
           "Average inference time cost": ("average_ms", "ms"),
           "Total inference requests": ("requests", ""),
           **{f"{q} Latency": (q.lower(), "s") for q in ("Min", "Max", "P50", "P90", "P99")}}
MAX_TIME = {"s": 1e6, "ms": 1e9}  # about 11 days: no run of the tool takes longer
MAX_COUNT = 10**12
_LINE = re.compile(r"^[ \t]*(" + "|".join(map(re.escape, FIGURES)) + r"):[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_VALUE = re.compile(r"(\S+?)[ \t]*([A-Za-z]*)")


@dataclass(frozen=True)
class PerfRun:
    """One onnxruntime_perf_test process: what it printed, and the figures read from it."""

    code: int
    output: str
    command: str
    session_s: float | None  # session creation: the compile on a first run, the cache load on a later one
    first_inference_ms: float | None
    average_ms: float | None
    requests: int | None
    seconds: float  # the whole process, on the phone's clock when its date can (else the host's)
    clock: Clock
    problems: tuple[str, ...] = ()  # the figure lines that did not read as their number (see FIGURES)


def find_ort_runner(path: Path | None) -> Path | None:
    """--ort-runner: an Android arm64 onnxruntime_perf_test (or a script standing for one), else none."""
    if path is None:
        return None
    if not Path(path).is_file():
        raise BadInput(f"--ort-runner {path}: no such file (give {WANT})")
    return phone_executable(Path(path), WANT)


def provider_options(arch: str, soc_id: int, ep_options: dict[str, str],
                     performance_mode: str | None) -> dict[str, str]:
    """The QNN EP options of the glue's on-device session, in its order: backend, performance mode, SoC, arch, then
    the bundle's ep_options for the graph (which cannot replace the four)."""
    options = {"backend_path": BACKEND, "htp_performance_mode": performance_mode or DEFAULT_PERFORMANCE_MODE,
               "soc_model": str(soc_id), "htp_arch": str(HtpArch.parse(arch).number)}
    for key, value in ep_options.items():
        options.setdefault(key, value)
    return options


def session_config(cache: str | None) -> dict[str, str]:
    """The glue's session configuration entries; with `cache` (a first run), the EP context written there."""
    config = {"session.disable_cpu_ep_fallback": "1"}
    if cache is not None:
        config.update({"ep.context_enable": "1", "ep.context_embed_mode": "0", "ep.context_file_path": cache})
    return config


def pairs(options: dict[str, str], what: str) -> str:
    """key|value pairs, space-separated, as -i and -C take them; a key or value the tool would split is refused."""
    for key, value in options.items():
        if not key or not value or re.search(r"[\s|]", key + value):
            raise BadInput(f"{what} {key}={value!r}: onnxruntime_perf_test reads 'key|value' pairs split on spaces, "
                           "so neither may be empty or hold a space or '|'")
    return " ".join(f"{k}|{v}" for k, v in options.items())


def command(model: str, provider: dict[str, str], config: dict[str, str], runs: int) -> list[str]:
    return [REMOTE_ORT_RUNNER, "-e", "qnn", "-i", pairs(provider, "QNN EP option"),
            "-C", pairs(config, "session config entry"), "-m", "times", "-r", str(runs), model]


def write_test_data(folder: Path, samples: list[dict[str, np.ndarray]], input_names: list[str]) -> None:
    """test_data_set_<k>/input_<i>.pb for each sample, the inputs in the model's order, each a TensorProto named
    after its input: the ONNX test-data layout onnxruntime_perf_test and onnx_test_runner read."""
    from onnx import numpy_helper

    for k, sample in enumerate(samples):
        data = folder / f"test_data_set_{k}"
        data.mkdir(parents=True, exist_ok=True)
        for i, name in enumerate(input_names):
            (data / f"input_{i}.pb").write_bytes(numpy_helper.from_array(sample[name], name).SerializeToString())


class Summary(NamedTuple):
    """The figures an onnxruntime_perf_test run prints about itself (None: not printed or not a number)."""

    session_s: float | None
    first_inference_ms: float | None
    average_ms: float | None
    requests: int | None
    latency_s: dict[str, float]  # "min", "max", "p50", "p90", "p99" -> seconds, as printed
    problems: tuple[str, ...]  # each figure line that did not read, and why ("P50 Latency: '1.2.3' is not a number")


def summary(text: str) -> Summary:
    """The last of each figure line in `text` (the tool's output), each through the bounded reader."""
    values: dict[str, float | None] = {}
    problems: dict[str, str] = {}
    for label, rest in _LINE.findall(text):
        field_, unit = FIGURES[label]
        values[field_] = None
        problems.pop(field_, None)
        m = _VALUE.fullmatch(rest)
        if m is None:
            problems[field_] = f"{label}: {rest[:40]!r} is not a number"
            continue
        if m.group(2) != unit:
            problems[field_] = (f"{label}: {rest[:40]!r} is not in {unit}" if unit else
                                f"{label}: {rest[:40]!r} is not a count")
            continue
        reading = numbers.read(m.group(1), integer=not unit, low=0, high=MAX_TIME[unit] if unit else MAX_COUNT)
        values[field_] = reading.value
        if reading.problem:
            problems[field_] = f"{label}: {reading.problem}"
    requests = values.get("requests")
    return Summary(values.get("session_s"), values.get("first_inference_ms"), values.get("average_ms"),
                   int(requests) if requests is not None else None,
                   {q: v for q in ("min", "max", "p50", "p90", "p99") if (v := values.get(q)) is not None},
                   tuple(problems.values()))


def run(dev: Device, workdir: str, lib_dir: str, adsp_library_path: str, argv: list[str], doing: str) -> PerfRun:
    """One onnxruntime_perf_test process in workdir with the app's LD_LIBRARY_PATH and ADSP_LIBRARY_PATH, timed on
    the phone (date +%s%N) when it can; within RUN's deadline (or --timeout) and output cap."""
    env = f"LD_LIBRARY_PATH={shlex.quote(lib_dir)} ADSP_LIBRARY_PATH={shlex.quote(adsp_library_path)}"
    line = f"{env} {shlex.join(argv)}"
    start = time.perf_counter()
    r = dev.run(f"cd {shlex.quote(workdir)} && s=$(date +%s%N) && {line} 2>&1; rc=$?; e=$(date +%s%N); "
                f"echo {_TIME} $s $e; exit $rc", doing=doing, limit=RUN)
    host = time.perf_counter() - start
    head, sep, tail = r.output.rpartition(_TIME)
    stamps = [parse_int(s) for s in tail.split()] if sep else []
    s0, s1 = stamps if len(stamps) == 2 else (None, None)
    seconds, clock = ((s1 - s0) / 1e9, Clock.DEVICE) if s0 is not None and s1 is not None and s1 >= s0 \
        else (host, Clock.HOST)
    text = head if sep else r.output
    said = summary(text)
    return PerfRun(r.code, text, line, said.session_s, said.first_inference_ms, said.average_ms, said.requests, seconds,
                   clock, said.problems)

"""What every benchmark shares, so that none of them can rot unnoticed: `--smoke` (tiny sizes, one repeat, every
code path of the real run; tests/test_benchmarks.py runs it in CI), medians of `--repeat` runs, ratios against a
reference measured in the same run, issue 23's targets printed beside the figures they judge, and a non-zero exit
when a contender or its sanity check fails.

Real context binaries for the bundle benchmarks: `qnndeploy bundle verify` reads every binary with libQnnSystem,
so stand-in bytes are refused. `real_inputs` compiles MatMul models with large fp32 initializers with
onnxruntime-qnn (about half their fp32 size at fp16) and caches them, keyed by QAIRT version, graph and size.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # the tests' helpers (tests.support); qnndeploy is whichever this Python imports
CACHE = Path.home() / ".cache" / "qnndeploy-bench"
QNNDEPLOY = [sys.executable, "-m", "qnndeploy"]  # the CLI of the qnndeploy this Python imports


def parser(doc: str | None, repeat: int | None = 3) -> argparse.ArgumentParser:
    """The script's options with the shared ones: --smoke, and --repeat unless `repeat` is None (a script whose
    figures are sizes or outcomes, not times)."""
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes and one repeat: seconds, every code path, figures that mean nothing")
    if repeat is not None:
        ap.add_argument("--repeat", type=int, default=repeat, help=f"runs per contender, median printed [{repeat}]")
    return ap


def parse(ap: argparse.ArgumentParser) -> argparse.Namespace:
    args = ap.parse_args()
    if args.smoke:
        print("smoke run: tiny sizes, one repeat; it proves the benchmark runs, its figures mean nothing")
    if "repeat" in args:
        args.repeat = 1 if args.smoke else args.repeat
        if args.repeat < 1:
            ap.error("--repeat must be 1 or more")
    return args


def fail(message: str) -> NoReturn:
    """A contender or a sanity check failed: the benchmark's figures would be wrong, so it exits 1."""
    sys.exit(f"FAIL: {message}")


def median(values: list[float]) -> float:
    return statistics.median(values)


@dataclass(frozen=True)
class Measure:
    seconds: float
    peak_mb: float


def _tree(pid: int) -> list[int]:
    """The process and all its descendants, from /proc's children lists."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo.extend(int(c) for c in task.read_text().split())
    return found


def _status_kb(pid: int, field: str) -> int:
    try:
        return int(Path(f"/proc/{pid}/status").read_text().split(f"{field}:")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return 0


def run(cmd: list[str], ok: tuple[int, ...] = (0,), out: Path | None = None, **kwargs: object) -> Measure:
    """Wall seconds and peak RSS (MB) of one command with its child processes (e.g. verify's emulator child); a
    command that exits other than `ok` fails the benchmark. `out`: a file its stdout is written to (e.g. a printed
    next command, or --json), else it is dropped.

    Peak RSS, polled every 20 ms while the command runs: the command's own VmHWM, or the sum of the VmRSS of it and
    its descendants where that is more. rusage's ru_maxrss would count the benchmark's own memory, which the forked
    child carries until exec.
    """
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err, Path(out or os.devnull).open("wb") as stdout:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=err, stdin=subprocess.DEVNULL, **kwargs)
        peak_kb = 0
        while proc.poll() is None:
            together = sum(_status_kb(p, "VmRSS") for p in _tree(proc.pid))
            peak_kb = max(peak_kb, _status_kb(proc.pid, "VmHWM"), together)
            time.sleep(0.02)
        elapsed = time.perf_counter() - start
        if proc.returncode not in ok:
            err.seek(0)
            how = f"exited {proc.returncode}"
            if proc.returncode < 0:
                how = f"was killed by {signal.Signals(-proc.returncode).name}"
                how += " (e.g. by the kernel's OOM killer)" if proc.returncode == -signal.SIGKILL else ""
            fail(f"{' '.join(cmd[:4])} {how} after {elapsed:.0f} s at a peak RSS of {peak_kb / 1024:.0f} MB: "
                 f"{err.read().decode(errors='replace').strip()}")
    return Measure(elapsed, peak_kb / 1024)


@dataclass(frozen=True)
class Target:
    """One of issue 23's targets: `figure` must be `op` (">=" or "<=") `limit`."""

    what: str
    figure: float
    op: str
    limit: float
    unit: str = "x"

    @property
    def met(self) -> bool:
        return self.figure >= self.limit if self.op == ">=" else self.figure <= self.limit

    def __str__(self) -> str:
        return f"{self.what} {self.op} {self.limit:g}{self.unit}: {'met' if self.met else 'NOT met'}"


def table(header: list[str], rows: list[list[str]], targets: list[list[Target]] | None = None) -> None:
    """Aligned columns, the first left-aligned, and the targets each row's figures are judged by in the last."""
    if targets is not None:
        header = [*header, "target"]
        rows = [[*r, "; ".join(map(str, t)) or "-"] for r, t in zip(rows, targets, strict=True)]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        out = [f"{cells[0]:<{widths[0]}}"]
        for i, cell in enumerate(cells[1:], 1):
            prose = targets is not None and i == len(cells) - 1  # the target's text reads left-aligned
            out.append(cell if prose else f"{cell:>{widths[i]}}")
        return "  ".join(out).rstrip()

    print(line(header))
    for r in rows:
        print(line(r))


# --- real context binaries --------------------------------------------------------------------------------------

def weights_model(path: Path, size: int, seed: int) -> Path:
    """MatMuls over [1, W] whose fp32 weights total about `size` bytes (W from 64 to 4096 by size); values stay near
    1, so the HTP compiles them at fp16 without trouble."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    width = next(w for w in (4096, 1024, 256, 64) if w * w * 4 * 2 <= size or w == 64)
    layers = max(1, round(size / (width * width * 4)))
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width), dtype=np.float32) / np.float32(np.sqrt(width)))
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]))
        x = f"m{i}"
    nodes.append(helper.make_node("Relu", [x], ["y"]))
    graph = helper.make_graph(nodes, "weights", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10  # what every ONNX Runtime an app may use reads
    onnx.save(model, path)
    return path


def real_inputs(cache: Path, graphs: dict[str, int], socs: list[str]) -> tuple[dict[str, Path], dict]:
    """Per graph (name -> fp32 weight bytes) a CPU model and, per SoC, its context binary compiled by onnxruntime-qnn,
    as (cpu, npu) for BundleSpec or `bundle build --cpu/--npu`. Cached under `cache`/QAIRT/GRAPH-BYTES/, so repeated
    runs do not recompile; each file appears there only once complete."""
    import onnxruntime as ort

    from qnndeploy.base import socs as catalog
    from qnndeploy.qnn import htp

    cpu, npu = {}, {}
    for i, (graph, size) in enumerate(graphs.items()):
        folder = cache.expanduser() / htp.qairt_version() / f"{graph}-{size}"
        folder.mkdir(parents=True, exist_ok=True)
        model = folder / f"{graph}.onnx"
        if not model.is_file():
            weights_model(folder / f"{graph}.onnx.partial", size, seed=i).rename(model)
        cpu[graph] = model
        for soc in socs:
            binary = folder / soc / f"{graph}.bin"
            if not binary.is_file():
                print(f"compiling {graph} ({size / 1e6:.0f} MB fp32) for {soc} into {folder}", flush=True)
                with tempfile.TemporaryDirectory(dir=folder) as work_name:
                    work = Path(work_name)
                    options = htp.session_options(catalog.find(soc), context_path=work / f"{graph}_ctx.onnx")
                    with htp.quiet_native_stdout():  # the HTP compiler's stage log
                        ort.InferenceSession(str(model), options)
                    binary.parent.mkdir(exist_ok=True)
                    (work / f"{graph}_ctx_qnn.bin").rename(binary)
            npu.setdefault(soc, {})[graph] = [binary]
    return cpu, npu

"""Throughput and peak memory of `qnndeploy bundle` and `bundle verify` over ~2 GB of artifacts.

Reference: `sha256sum` over the same files, in the same run. Target (issue 2): at least 80% of sha256sum's
throughput, peak RSS under 200 MB. All files sit in the page cache after the first pass, for every contender.
Prints the median of --repeat runs. Usage: python benchmarks/bundle_throughput.py [--gb 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from elfgen import BUILD, fake_sdk

SOCS = {"SM8650": 75, "SM8750": 79}
GRAPHS = ("encoder", "decoder")


def make_inputs(root: Path, total_bytes: int) -> list[Path]:
    """Context-binary-like files (QNN markers in the header, random bytes after) and stand-in libraries."""
    from onnx import TensorProto, helper, save

    block = os.urandom(64 << 20)
    per_file = total_bytes // (len(SOCS) * len(GRAPHS))
    files = []
    for soc, arch in SOCS.items():
        for g in GRAPHS:
            p = root / soc / f"{g}.bin"
            p.parent.mkdir(parents=True, exist_ok=True)
            with p.open("wb") as f:
                f.write(f"{BUILD}\0soc_type={soc};arch={arch}\0".encode())
                f.writelines(block[: min(len(block), per_file - i)] for i in range(0, per_file, len(block)))
            files.append(p)
    for g in GRAPHS:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
        save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], g, [x], [y])),
             root / f"{g}.onnx")
        files.append(root / f"{g}.onnx")
    fake_sdk(root / "sdk", ["v75", "v79"])
    files += sorted((root / "sdk").rglob("*.so"))
    return files


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one command.

    Peak RSS is VmHWM from /proc, polled while the command runs: rusage's ru_maxrss would also count the
    benchmark's own memory, which the forked child carries until exec.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak_kb = 0
    while proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            peak_kb = max(peak_kb, int(status.split("VmHWM:")[1].split()[0]))
        except (OSError, IndexError):
            pass
        time.sleep(0.02)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed: {proc.stderr.read().decode()}")
    return elapsed, peak_kb / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="qnndeploy-bench-"))
    try:
        files = make_inputs(root, int(args.gb * (1 << 30)))
        size_mb = sum(p.stat().st_size for p in files) / 1e6
        bundle_cmd = ["qnndeploy", "bundle", "build", "--name", "bench", "--version", "1", "-o", str(root / "out"),
                      "--force", "--qnn-sdk-root", str(root / "sdk")]
        bundle_cmd += [x for g in GRAPHS for x in ("--cpu", f"{g}={root / f'{g}.onnx'}")]
        bundle_cmd += [x for s in SOCS for g in GRAPHS for x in ("--npu", f"{s}:{g}={root / s / f'{g}.bin'}")]
        verify_cmd = ["qnndeploy", "bundle", "verify", str(root / "out" / "bench-1")]
        sha_cmd = ["sha256sum", *map(str, files)]
        timed(sha_cmd)  # warm the page cache
        runs: dict[str, list[tuple[float, float]]] = {"sha256sum": [], "bundle": [], "bundle verify": []}
        for _ in range(args.repeat):
            runs["sha256sum"].append(timed(sha_cmd))
            runs["bundle"].append(timed(bundle_cmd))
            runs["bundle verify"].append(timed(verify_cmd))
        ref = statistics.median(t for t, _ in runs["sha256sum"])
        print(f"{size_mb:.0f} MB in {len(files)} files, {os.cpu_count()} cores, median of {args.repeat} runs")
        print(f"{'':<14} {'seconds':>8} {'MB/s':>8} {'vs sha256sum':>13} {'peak RSS MB':>12}")
        for name, rs in runs.items():
            t = statistics.median(x for x, _ in rs)
            rss = max(m for _, m in rs)
            print(f"{name:<14} {t:>8.2f} {size_mb / t:>8.0f} {ref / t:>12.0%} {rss:>12.0f}")
        print("target: bundle and verify >= 80% of sha256sum's throughput, peak RSS < 200 MB")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

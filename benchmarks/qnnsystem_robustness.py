"""How libQnnSystem takes damaged context binaries: why `inspect` reads each binary in a child process.

Run: python benchmarks/qnnsystem_robustness.py [--cases 400] [--seed 1] [BINARY]
(needs onnxruntime-qnn; without BINARY it compiles a tiny model for SM8750; about 30 s for 400 cases on 2 cores)
Each case is the binary truncated, with bits flipped, with 4-byte words overwritten (0, 0xffffffff, random…) in
its header or anywhere, or random bytes, read in-process by `python -m qnndeploy.qnnsystem` in its own process;
prints how many were read, refused (a QNN error code), crashed (signal) or hung (over 20 s), and the median time
of one child-process read of the intact binary. Not a test: the counts depend on the seed and the QAIRT."""

from __future__ import annotations

import argparse
import collections
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from qnndeploy import qnnsystem


def tiny_binary(tmp: Path) -> Path:
    from test_inspect import tiny

    from qnndeploy.compile import compile_models

    summary = compile_models({"tiny": tiny(tmp / "tiny.onnx")}, ["SM8750"], tmp / "build", use_cache=False)
    assert summary.ok, [j.error for j in summary.failures]
    return tmp / "build" / "tiny" / "SM8750" / "tiny.bin"


def mutations(src: bytes, n: int, rng: random.Random) -> list[tuple[str, bytes]]:
    cases = [("empty", b"")] + [(f"truncated-{k}", src[:k]) for k in (1, 64, 4096, len(src) // 2, len(src) - 1)]
    cases += [(f"random-{i}", rng.randbytes(rng.choice([100, 5000, 100_000]))) for i in range(10)]
    for i in range(n):
        b = bytearray(src)
        kind = rng.choice(["flip", "word", "word", "zero"])
        end = rng.choice([512, 4096, len(b) - 4])
        for _ in range(rng.choice([1, 2, 8])):
            at = rng.randrange(0, end)
            if kind == "flip":
                b[at] ^= 1 << rng.randrange(8)
            else:
                word = 0 if kind == "zero" else rng.choice([0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, rng.getrandbits(32)])
                b[at:at + 4] = word.to_bytes(4, "little")
        cases.append((f"{kind}-{i}", bytes(b)))
    return cases


def read(path: Path) -> str:
    try:
        done = subprocess.run([sys.executable, "-m", "qnndeploy.qnnsystem", str(path)], capture_output=True,
                              text=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        return "hung"
    if done.returncode < 0:
        return f"crashed (signal {-done.returncode})"
    return "refused" if '"error"' in done.stdout else "read"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("binary", nargs="?", type=Path)
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        binary = args.binary or tiny_binary(tmp)
        print(f"{binary} ({binary.stat().st_size:,} bytes), libQnnSystem API {qnnsystem.system_api_version()}")
        times = []
        for _ in range(5):
            start = time.monotonic()
            qnnsystem.read_context(binary)
            times.append(time.monotonic() - start)
        print(f"one read in a child process: {statistics.median(times) * 1000:.0f} ms (median of 5)")
        paths = []
        for name, data in mutations(binary.read_bytes(), args.cases, random.Random(args.seed)):
            paths.append(tmp / f"{name}.bin")
            paths[-1].write_bytes(data)
        start = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            outcomes = list(pool.map(read, paths))
        counts = collections.Counter(outcomes)
        print(f"{len(paths)} damaged binaries in {time.monotonic() - start:.0f} s:",
              ", ".join(f"{k} {v}" for k, v in counts.most_common()))
        for path, outcome in zip(paths, outcomes, strict=True):
            if outcome.startswith(("crashed", "hung")):
                print(f"  {path.stem}: {outcome}")


if __name__ == "__main__":
    main()

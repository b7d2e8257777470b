"""How libQnnSystem takes damaged context binaries: why `inspect` reads each binary in a child process.

Run: python benchmarks/qnnsystem_robustness.py [--cases 400] [--seed 1] [--repeat 5] [--smoke] [BINARY]
(needs onnxruntime-qnn; without BINARY it compiles a tiny model for SM8750; about 30 s for 400 cases on 2 cores;
--smoke: 10 cases)
Each case is the binary truncated, with bits flipped, with 4-byte words overwritten (0, 0xffffffff, random…) in
its header or anywhere, or random bytes, read in-process by `python -m qnndeploy.qnn.qnnsystem` in its own process;
prints how many were read, refused (a QNN error code), crashed (signal) or hung (over 20 s), and the median time
of --repeat child-process reads of the intact binary. Not a test: the counts depend on the seed and the QAIRT; it
fails only when the intact binary does not read, or the empty file does.
"""

from __future__ import annotations

import collections
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchlib import fail, median, parse, parser, table

from qnndeploy.qnn import qnnsystem


def tiny_binary(tmp: Path) -> Path:
    from qnndeploy.compile import CompileOptions, compile_models
    from tests.support.synth_models import tiny

    summary = compile_models({"tiny": tiny(tmp / "tiny.onnx")}, ["SM8750"], tmp / "build",
                             CompileOptions(use_cache=False))
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
        done = subprocess.run([sys.executable, "-m", "qnndeploy.qnn.qnnsystem", str(path)], capture_output=True,
                              text=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        return "hung"
    if done.returncode < 0:
        return f"crashed (signal {-done.returncode})"
    return "refused" if '"error"' in done.stdout else "read"


def main() -> None:
    ap = parser(__doc__, repeat=5)
    ap.add_argument("binary", nargs="?", type=Path)
    ap.add_argument("--cases", type=int, default=400, help="damaged copies, besides the fixed ones [400]")
    ap.add_argument("--seed", type=int, default=1)
    args = parse(ap)
    cases = 10 if args.smoke else args.cases
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        binary = args.binary or tiny_binary(tmp)
        print(f"{binary} ({binary.stat().st_size:,} bytes), libQnnSystem API {qnnsystem.system_api_version()}")
        if read(binary) != "read":
            fail(f"libQnnSystem does not read the intact binary {binary}")
        times = []
        for _ in range(args.repeat):
            start = time.monotonic()
            qnnsystem.read_context(binary)
            times.append(time.monotonic() - start)
        paths = []
        for name, data in mutations(binary.read_bytes(), cases, random.Random(args.seed)):
            paths.append(tmp / f"{name}.bin")
            paths[-1].write_bytes(data)
        start = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            outcomes = list(pool.map(read, paths))
        seconds = time.monotonic() - start
        counts = collections.Counter(outcomes)
        table(["outcome", "count"], [[k, str(v)] for k, v in sorted(counts.items())])
        print(f"{len(paths)} damaged binaries in {seconds:.0f} s; one read of the intact binary in a child process: "
              f"{median(times) * 1000:.0f} ms (median of {args.repeat})")
        for path, outcome in zip(paths, outcomes, strict=True):
            if outcome.startswith(("crashed", "hung")):
                print(f"  {path.stem}: {outcome}")
        if outcomes[0] == "read":
            fail("libQnnSystem read the empty file as a context binary")


if __name__ == "__main__":
    main()

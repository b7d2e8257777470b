"""Time and peak memory of `qnndeploy bundle build` and `bundle verify` on a bundle of real context binaries.

Inputs: two graphs (MatMuls with large fp32 weights), each compiled by onnxruntime-qnn for SM8650 and SM8750
(benchlib.real_inputs, cached in ~/.cache/qnndeploy-bench), their fp32 CPU models, and runtime libraries that are
support/elfgen.py's stand-ins (there is no QAIRT SDK here; verify checks their ELF headers and QAIRT markers, which
the stand-ins carry). --gb is the size of all inputs. References, measured in the same run: copying and hashing the
inputs once (`cp` then `sha256sum`) for bundle build, and `sha256sum` of the bundle's files for bundle verify, both
`--shallow` (hashes, headers, libQnnSystem reads) and deep (also loads and runs each binary on the host HTP
emulator against its CPU model, with an empty outcome store every run). Every file sits in the page cache after the
first pass, for every contender. Prints medians of --repeat runs. Peak RSS counts a command's child processes
(deep verify runs the binaries and the CPU models in an emulator child: running a model holds its weights).

    python benchmarks/bundle_throughput.py [--gb 4] [--repeat 3] [--cache-dir DIR] [--smoke]
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from benchlib import CACHE, QNNDEPLOY, Measure, Target, median, parse, parser, real_inputs, run, table

from tests.support.elfgen import fake_sdk

SOCS = ("SM8650", "SM8750")
GRAPHS = ("encoder", "decoder")
# contender -> (its reference, what the ratio compares); issue 23's targets for each kind of ratio
CONTENDERS = {"copy + sha256sum": (None, ""), "bundle build": ("copy + sha256sum", "time"),
              "sha256sum": (None, ""), "bundle verify --shallow": ("sha256sum", "throughput"),
              "bundle verify": ("sha256sum", "throughput")}
TARGETS = {"time": ("<=", 1.2), "throughput": (">=", 1.5)}
COPY_AND_HASH = 'set -e; d=$1; shift; i=0; for f; do i=$((i+1)); cp -- "$f" "$d/$i"; done; sha256sum "$d"/*'


def fresh_outcomes(root: Path) -> dict[str, str]:
    """The environment for one qnndeploy run with an empty emulator outcome store, so that every verify really
    loads and runs the binaries (verify keeps outcomes by content; a second run would skip the emulator)."""
    return {**os.environ, "QNNDEPLOY_EMULATED_DIR": tempfile.mkdtemp(dir=root, prefix="outcomes-")}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--gb", type=float, default=4.0, help="total size of the inputs, GB [4, issue 23's size]")
    ap.add_argument("--cache-dir", type=Path, default=CACHE, help=f"compiled inputs are kept here [{CACHE}]")
    args = parse(ap)
    total = 4e6 if args.smoke else args.gb * 1e9
    # each graph: its fp32 CPU model, and one binary per SoC at about half that size
    weights = int(total / (len(GRAPHS) * (1 + len(SOCS) / 2)))
    cpu, npu = real_inputs(args.cache_dir, dict.fromkeys(GRAPHS, weights), list(SOCS))
    root = Path(tempfile.mkdtemp(prefix="qnndeploy-bench-"))
    try:
        sdk = fake_sdk(root / "sdk", ["v75", "v79"])
        inputs = [*cpu.values(), *(f for s in npu.values() for fs in s.values() for f in fs), *sdk.rglob("*.so")]
        size_mb = sum(p.stat().st_size for p in inputs) / 1e6
        out, copy = root / "out", root / "copy"
        build = [*QNNDEPLOY, "bundle", "build", "--name", "bench", "--version", "1", "-o", str(out),
                 "--qnn-sdk-root", str(sdk), *(x for g, m in cpu.items() for x in ("--cpu", f"{g}={m}")),
                 *(x for s, gs in npu.items() for g, (f,) in gs.items() for x in ("--npu", f"{s}:{g}={f}"))]
        bundle = out / "bench-1"
        copy_and_hash = ["sh", "-c", COPY_AND_HASH, "sh", str(copy), *map(str, inputs)]
        verify = [*QNNDEPLOY, "bundle", "verify", str(bundle)]
        run(build, env=fresh_outcomes(root))  # warms the page cache and proves the inputs bundle
        bundle_files = [str(p) for p in sorted(bundle.rglob("*")) if p.is_file()]
        runs: dict[str, list[Measure]] = {name: [] for name in CONTENDERS}
        for _ in range(args.repeat):
            shutil.rmtree(copy, ignore_errors=True)
            copy.mkdir()
            runs["copy + sha256sum"].append(run(copy_and_hash))
            shutil.rmtree(out)
            runs["bundle build"].append(run(build, env=fresh_outcomes(root)))
            runs["sha256sum"].append(run(["sha256sum", *bundle_files]))
            runs["bundle verify --shallow"].append(run([*verify, "--shallow"], env=fresh_outcomes(root)))
            runs["bundle verify"].append(run(verify, env=fresh_outcomes(root)))
        print(f"{size_mb:.0f} MB of inputs in {len(inputs)} files ({len(GRAPHS)} graphs x {len(SOCS)} SoCs, "
              f"real context binaries), median of {args.repeat} runs")
        rows, targets = [], []
        for name, (reference, kind) in CONTENDERS.items():
            t = median([m.seconds for m in runs[name]])
            rss = max(m.peak_mb for m in runs[name])
            row_targets = []
            if reference is None:
                ratio = "reference"
            else:
                t_ref = median([m.seconds for m in runs[reference]])
                figure = t / t_ref if kind == "time" else t_ref / t
                ratio = f"{figure:.2f}x the {kind} of {reference}"
                row_targets = [Target(f"{kind} vs {reference}", figure, *TARGETS[kind]),
                               Target("peak RSS", rss, "<=", 300, " MB")]
            rows.append([name, f"{t:.2f}", f"{size_mb / t:.0f}", ratio, f"{rss:.0f}"])
            targets.append(row_targets)
        table(["", "seconds", "MB/s", "ratio", "peak RSS MB"], rows, targets)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

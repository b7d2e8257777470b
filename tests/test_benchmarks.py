"""Every script in benchmarks/ runs here with --smoke (tiny sizes, one repeat, every code path of the real run), as a
user runs it: a benchmark that no longer runs fails CI instead of rotting unnoticed. Only the exit code and the
printed table are asserted, never a figure or a time: a smoke run's figures mean nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
QNN, ADB = pytest.mark.needs_qnn, pytest.mark.needs_adb

# script -> (its marks, its options besides --smoke ({tmp}: the test's folder), the table's header cells, the first
# cell of each row it must print)
SMOKE = {
    "bundle_throughput.py": ([QNN], ["--cache-dir", "{tmp}/bench-cache"], ["seconds", "MB/s", "peak RSS MB", "target"],
                             ["copy + sha256sum", "bundle build", "sha256sum", "bundle verify --shallow",
                              "bundle verify"]),
    "device_push.py": ([QNN, ADB], ["--cache-dir", "{tmp}/bench-cache"], ["seconds", "MB/s", "ratio", "target"],
                       ["plain adb push (same files)", "device verify, push_folder", "device verify, one phone",
                        "sha256sum on the phone", "plain adb push + one sha256sum pass", "second verify, unchanged"]),
    "compile_parallel.py": ([QNN], [], ["seconds", "ratio", "target"],
                            ["-j 1", "-j 2", "-j 2, cold cache", "-j 2, cache hit"]),
    "corpus.py": ([QNN], ["--work", "{tmp}/work"], ["model", "family", "reached", "expected"],
                  [f"ppocr_cls          {stage}" for stage in ("check", "prepare", "compile", "validate", "bundle",
                                                             "verify")]),
    "diagnose.py": ([QNN], ["--work", "{tmp}/work"], ["seconds", "compiles", "ratio", "finds"],
                    ["diagnose (bisection)", "sweep, one compile per tensor", "sweep, all in one compile"]),
    "play_sizes.py": ([QNN], ["--work", "{tmp}/work"], ["group", "SoCs", "MB deflated", "of one APK"],
                      ["sm8650", "sm8750", "other"]),
    "qnnsystem_robustness.py": ([QNN], [], ["outcome", "count"], ["read", "refused"]),
    "model_memory.py": ([], [], ["seconds", "peak RSS MB", "x model size", "vs onnx.load"],
                        ["onnx.load", "check --no-measure"]),
    "large_model.py": ([QNN], [], ["stage", "seconds", "peak RSS MB", "target"],
                       ["check ", "prepare --split-size", "compile 3 parts", "validate", "bundle build --split",
                        "bundle verify --shallow", "bundle verify "]),
    "whisper_large.py": ([QNN], ["--work", "{tmp}/work"], ["stage", "seconds", "peak RSS MB", "x model size"],
                         ["export (torch, TorchScript)", "check encoder", "prepare --fuse, encoder",
                          "prepare --split-size, encoder", "check decoder", "prepare --fuse, decoder",
                          "prepare --split-size, decoder", "compile ",
                          "validate --loop whisper", "bundle build", "bundle verify",
                          "SM8750: samples token for token the same"]),
    "llm_generate.py": ([QNN], ["--work", "{tmp}/work"], ["stage", "seconds", "peak RSS MB", "x model size"],
                        ["export (torch, TorchScript)", "check --precision w4a16", "prepare --generate --parts 2",
                         "compile w4a16, 4 graphs x 2 SoCs", "validate --loop generation, 8 steps", "bundle build",
                         "bundle verify", "model-p2  SM8750", "SM8750: token agreement"]),
    "whisper_loop.py": ([QNN], ["--work", "{tmp}/work"], ["figure", "value"],
                        ["word error rate, NPU vs CPU", "clips token for token the same", "emulator decoder steps"]),
    "report_memory.py": ([], [], ["inputs MB", "seconds", "peak RSS MB", "page MB", "target"],
                         ["1 record", "4 records"]),
    "estimate_vs_aihub.py": ([QNN], ["--work", "{tmp}/work"], ["model", "chip", "measured ms", "estimate x factor"],
                             ["mnasnet05 ", "squeezenet1_1 "]),
    "startup.py": ([], [], ["ms", "difference ms", "ratio", "target"],
                   ["python -c 'import click'", "qnndeploy --help", "qnndeploy check --help",
                    "qnndeploy bundle verify --help"]),
}


def bench(script: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *(a.format(tmp=tmp) for a in args)],
                          capture_output=True, text=True, cwd=tmp, check=False, timeout=900)


def test_every_benchmark_has_a_smoke_run_here():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")} - {"benchlib.py"}
    assert scripts == set(SMOKE)


@pytest.mark.slow
@pytest.mark.parametrize("script", [pytest.param(s, marks=marks) for s, (marks, *_) in SMOKE.items()])
def test_the_smoke_run_exits_0_and_prints_the_table(script, tmp_path):
    _, args, header, rows = SMOKE[script]
    done = bench(script, tmp_path, "--smoke", *args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("smoke run:")
    heads = [i for i, line in enumerate(lines) if all(cell in line for cell in header)]
    assert heads, f"no table header {header} in:\n{done.stdout}"
    for row in rows:
        assert any(line.startswith(row) for line in lines), f"no row {row!r} in:\n{done.stdout}"


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_a_contender_that_fails_fails_the_benchmark(tmp_path):
    """A benchmark whose contender fails exits 1 with the reason, instead of printing figures of nothing."""
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"not a context binary" * 100)
    done = bench("qnnsystem_robustness.py", tmp_path, "--smoke", str(garbage))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("FAIL: libQnnSystem does not read the intact binary")
    assert "count" not in done.stdout

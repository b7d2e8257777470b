"""Publication survives a kill at any instant, signals stop work at safe points, and ONNX Runtime leaves no files.

The kill-before-every-rename tests wrap every rename a command makes (os.replace, which Path.replace calls, and
fileio.exchange, renameat2) and check the invariant on disk just before each one: that is the state a SIGKILL at
that instant would leave. Then a run that stops at the Nth rename shows the next run cleans what it left.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from onnx import TensorProto
from onnx import helper as h

from qnndeploy.base import fileio, interrupt
from qnndeploy.base.pool import Pool
from qnndeploy.cli import _common
from qnndeploy.qnn import htp
from tests.support.cli import run
from tests.support.elfgen import fake_sdk
from tests.support.host import alive, pids_mentioning, require


class Killed(BaseException):
    """Stands for a SIGKILL at a rename: not an Exception, so only `except BaseException` cleanup sees it."""


def watch_renames(monkeypatch, check: Callable[[str], None], kill_at: int | None = None) -> list[str]:
    """Call `check(what)` before every rename (and exchange); raise Killed at the `kill_at`th. Returns the calls."""
    calls: list[str] = []
    real_replace, real_exchange = os.replace, fileio.exchange

    def before(what: str) -> None:
        calls.append(what)
        check(what)
        if kill_at is not None and len(calls) == kill_at:
            raise Killed

    def replace(src, dst, **kw):
        before(f"rename {Path(src).name} -> {Path(dst).name}")
        return real_replace(src, dst, **kw)

    def exchange(a: Path, b: Path) -> bool:
        before(f"exchange {a.name} <-> {b.name}")
        return real_exchange(a, b)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(fileio, "exchange", exchange)
    return calls


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def matmul_model(path: Path, width: int, seed: int) -> Path:
    import numpy as np
    import onnx

    x = h.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])
    y = h.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])
    w = h.make_tensor("w", TensorProto.FLOAT, [width, width], np.random.default_rng(seed).random(width * width))
    graph = h.make_graph([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Relu", ["m"], ["y"])],
                         "g", [x], [y], [w])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
    return path


# --- fileio: exchange, staging, stale leftovers -----------------------------------------------------------------

def test_exchange_swaps_two_folders_in_one_step(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    (b / "x").write_text("b")
    if not fileio.exchange(a, b):
        pytest.skip("renameat2 RENAME_EXCHANGE is not available here (the two-rename fallback is used)")
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"


def test_staging_dir_replaces_a_folder_without_a_moment_of_absence(tmp_path, monkeypatch):
    final = tmp_path / "out"
    final.mkdir()
    (final / "v").write_text("old")

    def check(_: str) -> None:
        assert (final / "v").read_text() in ("old", "new")

    calls = watch_renames(monkeypatch, check)
    with fileio.staging_dir(final, force=True) as tmp:
        (tmp / "v").write_text("new")
    assert (final / "v").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    if fileio._renameat2() is not None:
        assert [c for c in calls if c.startswith("exchange")], calls


def test_without_rename_exchange_two_renames_still_end_in_the_new_folder(tmp_path, monkeypatch):
    """The fallback (no renameat2, or a file system without RENAME_EXCHANGE): old aside, new in, old removed."""
    monkeypatch.setattr(fileio, "exchange", lambda a, b: False)
    final = tmp_path / "out"
    final.mkdir()
    (final / "v").write_text("old")
    with fileio.staging_dir(final, force=True) as tmp:
        (tmp / "v").write_text("new")
    assert (final / "v").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_stale_leftovers_of_dead_runs_are_removed_only_for_the_same_name(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    stale = [tmp_path / f".out.partial-{dead}-abc_123", tmp_path / f".out.old-{dead}",
             tmp_path / ".out.partial-legacy1"]
    kept = [tmp_path / f".out.partial-{os.getpid()}-live0001",  # a running process's staging
            tmp_path / f".out2.partial-{dead}-abc", tmp_path / f".out.old-{dead}x", tmp_path / "out.partial-1-a"]
    for p in stale + kept:
        p.mkdir()
    with fileio.staging_dir(tmp_path / "out") as tmp:
        (tmp / "f").write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", *(p.name for p in kept)])


def test_hashing_stops_at_a_safe_point(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"\0" * (3 * fileio.CHUNK))
    with interrupt.Run() as run, pytest.raises(KeyboardInterrupt):
        run.stop()
        fileio.sha256_file(big, copy_to=tmp_path / "copy")
    assert fileio.sha256_file(big)  # outside the run that was stopped, the same work runs


def test_sigterm_handler_only_sets_a_flag():
    with interrupt.Run() as run:
        _common.on_sigterm(signal.SIGTERM, None)  # no exception: the work stops at its next safe point
        assert run.stopping and interrupt.requested()
    assert not interrupt.requested()


def test_a_stop_reaches_the_pool_workers_of_its_run_and_no_other_run(tmp_path):
    """A stop is the state of one run, not of the process: the workers of the stopped run stop at their next safe
    point; a run beside it (another thread, as a notebook or a test runs them) and work outside any run go on."""
    big = tmp_path / "big"
    big.write_bytes(b"\0" * (3 * fileio.CHUNK))
    other = interrupt.Run()
    with interrupt.Run() as run, Pool(max_workers=2) as pool:
        run.stop()
        stopped = pool.submit(fileio.sha256_file, big)
        with pytest.raises(KeyboardInterrupt):
            stopped.result()
        with other, Pool(max_workers=1) as beside:
            assert beside.submit(fileio.sha256_file, big).result() == fileio.sha256_file(big)
    assert not other.stopping


def stop_current_run() -> None:
    """What the SIGTERM handler does, from wherever the work is (a pool worker sees its command's run)."""
    run = interrupt.current()
    assert run is not None
    run.stop()


# --- bundle --force --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bundle_inputs(tmp_path_factory) -> dict:
    """One graph compiled for SM8750 by onnxruntime-qnn, stand-in runtime libraries."""
    require(htp.available(), "onnxruntime-qnn")
    import onnxruntime as ort

    from qnndeploy.base import socs

    root = tmp_path_factory.mktemp("inputs")
    model = matmul_model(root / "enc.onnx", 16, 0)
    ctx = root / "enc_ctx.onnx"
    ort.InferenceSession(str(model), htp.session_options(socs.find("SM8750"), context_path=ctx))
    return {"cpu": model, "bin": root / "enc_ctx_qnn.bin", "sdk": fake_sdk(root / "sdk", ["v79"])}


def bundle_args(inputs: dict, out: Path, license_: str) -> list[str]:
    return ["bundle", "build", "--name", "demo", "--version", "1.0.0", "-o", str(out), "--qnn-sdk-root",
            str(inputs["sdk"]), "--cpu", f"enc={inputs['cpu']}", "--npu", f"SM8750:enc={inputs['bin']}",
            "--license", license_, "--archive", "zip", "--force"]


def bundle_state(out: Path) -> tuple[str, str]:
    """(license of the bundle under the final name, of the archive); each must be complete and verify."""
    from qnndeploy.verification.checks import verify_bundle

    final, archive = out / "demo-1.0.0", out / "demo-1.0.0.zip"
    assert final.is_dir(), "no bundle under the final name"
    result = verify_bundle(final)
    assert result.ok, result
    with zipfile.ZipFile(archive) as z:
        assert z.testzip() is None
        zipped = json.loads(z.read("demo-1.0.0/manifest.json"))
    return json.loads((final / "manifest.json").read_text())["source"]["license"], zipped["source"]["license"]


def test_bundle_force_kill_before_every_rename(bundle_inputs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert run(*bundle_args(bundle_inputs, out, "OLD")).exit_code == 0
    seen: list[tuple[str, str]] = []
    calls = watch_renames(monkeypatch, lambda _: seen.append(bundle_state(out)))
    r = run(*bundle_args(bundle_inputs, out, "NEW"))
    assert r.exit_code == 0, r.output
    assert bundle_state(out) == ("NEW", "NEW")
    assert set(seen) <= {("OLD", "OLD"), ("NEW", "OLD")}, seen  # the bundle first, then its archive
    assert len(calls) >= 2
    for n in range(1, len(calls) + 1):  # stop at the Nth rename: the next run cleans up and publishes
        monkeypatch.undo()
        watch_renames(monkeypatch, lambda _: None, kill_at=n)
        with pytest.raises(Killed):
            run(*bundle_args(bundle_inputs, out, f"K{n}"), catch_exceptions=False)
        assert bundle_state(out)[0] in ("NEW", f"K{n - 1}", f"K{n}", "OLD")
        monkeypatch.undo()
        assert run(*bundle_args(bundle_inputs, out, f"K{n}")).exit_code == 0
        assert bundle_state(out) == (f"K{n}", f"K{n}")
        assert sorted(p.name for p in out.iterdir()) == ["demo-1.0.0", "demo-1.0.0.zip"]


def test_sigterm_at_the_last_rename_says_the_bundle_was_published(bundle_inputs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert run(*bundle_args(bundle_inputs, out, "OLD")).exit_code == 0

    def sigterm_at_publication(what: str) -> None:
        if "demo-1.0.0" in what and "manifest" not in what and not interrupt.requested():
            _common.on_sigterm(signal.SIGTERM, None)  # once: a second SIGTERM would end this process

    watch_renames(monkeypatch, sigterm_at_publication)
    r = run(*bundle_args(bundle_inputs, out, "NEW"))
    assert r.exit_code == 130, r.output
    assert "was published" in r.output or "were published" in r.output, r.output
    assert "demo-1.0.0" in r.output
    assert bundle_state(out) == ("NEW", "NEW")


def test_sigterm_before_publication_leaves_the_old_bundle(bundle_inputs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert run(*bundle_args(bundle_inputs, out, "OLD")).exit_code == 0
    real, real_copy = fileio.sha256_file, fileio.copy_verified

    def hashing(*a, **k):
        stop_current_run()
        return real(*a, **k)

    def copying(*a, **k):  # bundle copies and hashes in one read (fileio.copy_verified)
        stop_current_run()
        return real_copy(*a, **k)

    monkeypatch.setattr(fileio, "sha256_file", hashing)
    monkeypatch.setattr("qnndeploy.qnn.markers.sha256_file", hashing)
    monkeypatch.setattr("qnndeploy.bundle.build.copy_verified", copying)
    r = run(*bundle_args(bundle_inputs, out, "NEW"))
    assert r.exit_code == 130 and "interrupted; nothing was left half-written" in r.output, r.output
    monkeypatch.undo()
    assert bundle_state(out) == ("OLD", "OLD")
    assert sorted(p.name for p in out.iterdir()) == ["demo-1.0.0", "demo-1.0.0.zip"]


# --- prepare --force -------------------------------------------------------------------------------------------

def prepare_state(out: Path) -> str | None:
    """The source sha256 of the record beside OUT, or None when there is none; a record always describes OUT."""
    record = out.with_name(out.name.removesuffix(".onnx") + ".prepare.json")
    if not record.exists():
        return None
    data = json.loads(record.read_text())
    assert data["output_sha256"] == sha256(out), "a record beside a model it does not describe"
    assert data["external_data"] is None or Path(data["external_data"]).is_file()
    return str(data["source_sha256"])


def test_prepare_force_kill_before_every_rename(tmp_path, monkeypatch):
    from qnndeploy.prepare import PrepareOptions, prepare_model

    old_src, new_src = matmul_model(tmp_path / "a.onnx", 8, 1), matmul_model(tmp_path / "b.onnx", 8, 2)
    out = tmp_path / "out" / "m.onnx"
    prepare_model(old_src, out)
    (out.parent / "m.onnx.data").write_bytes(b"an old external-data file")  # as an earlier big model left it
    seen: list[str | None] = []
    calls = watch_renames(monkeypatch, lambda _: seen.append(prepare_state(out)))
    prepare_model(new_src, out, PrepareOptions(force=True))
    assert prepare_state(out) == sha256(new_src)
    assert set(seen) <= {sha256(old_src), sha256(new_src), None}, seen
    assert not (out.parent / "m.onnx.data").exists()
    for n in range(1, len(calls) + 1):
        monkeypatch.undo()
        watch_renames(monkeypatch, lambda _: prepare_state(out), kill_at=n)
        with pytest.raises(Killed):
            prepare_model(old_src if n % 2 else new_src, out, PrepareOptions(force=True))
        prepare_state(out)
        monkeypatch.undo()
        prepare_model(new_src, out, PrepareOptions(force=True))
        assert prepare_state(out) == sha256(new_src)
        assert sorted(p.name for p in out.parent.iterdir()) == ["m.onnx", "m.prepare.json"]


# --- compile ---------------------------------------------------------------------------------------------------

def compile_state(job: Path) -> str | None:
    """The cache key of the job folder's record; the folder must always be complete (record and its outputs)."""
    from qnndeploy.compile import cache
    from qnndeploy.formats.records import RECORD_FILE, JobRecord

    if not job.exists():
        return None
    record = JobRecord.parse(json.loads((job / RECORD_FILE).read_text()), job / RECORD_FILE)
    assert cache.outputs_intact(job, record), "a job folder whose files are not its record's"
    return str(record.cache_key)


@pytest.mark.slow
def test_compile_kill_before_every_rename(tmp_path, monkeypatch):
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    from qnndeploy import compile as stage

    a, b = matmul_model(tmp_path / "a.onnx", 16, 1), matmul_model(tmp_path / "b.onnx", 16, 2)
    out = tmp_path / "build"
    job = out / "m" / "SM8750"
    first = stage.compile_models({"m": a}, ["SM8750"], out, stage.CompileOptions(use_cache=False))
    old_key = compile_state(job)
    seen: list[str | None] = []
    calls = watch_renames(monkeypatch, lambda _: seen.append(compile_state(job)))
    second = stage.compile_models({"m": b}, ["SM8750"], out, stage.CompileOptions(use_cache=False))
    assert first.ok and second.ok
    new_key = compile_state(job)
    assert new_key != old_key and set(seen) <= {old_key, new_key}, seen
    assert "m-SM8750.log" in (job / "compile.json").read_text()
    for n in range(1, len(calls) + 1):
        monkeypatch.undo()
        watch_renames(monkeypatch, lambda _: compile_state(job), kill_at=n)
        with pytest.raises(Killed):
            stage.compile_models({"m": a}, ["SM8750"], out, stage.CompileOptions(use_cache=False))
        assert compile_state(job) in (old_key, new_key)
        monkeypatch.undo()
        assert stage.compile_models({"m": b}, ["SM8750"], out, stage.CompileOptions(use_cache=False)).ok
        assert compile_state(job) == new_key
        assert sorted(p.name for p in job.parent.iterdir()) == ["SM8750"]
        assert sorted(p.name for p in (out / "logs").iterdir()) == ["m-SM8750.log"]


def test_a_killed_cli_leaves_no_compile_worker(tmp_path):
    """SIGKILL to the CLI: no cleanup runs, yet its tool dies with it (PR_SET_PDEATHSIG)."""
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler)")
    model = matmul_model(tmp_path / "m.onnx", 64, 0)
    out = tmp_path / "b"
    proc = subprocess.Popen([sys.executable, "-m", "qnndeploy", "compile", str(model), "--soc", "SM8750", "-o",
                             str(out), "--no-cache"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    for _ in range(600):
        workers = [p for p in pids_mentioning(str(out)) if p != proc.pid]
        if workers or proc.poll() is not None:
            break
        time.sleep(0.05)
    if not workers:
        pytest.skip("the compile finished before its worker could be seen")
    proc.kill()
    proc.wait()
    for _ in range(100):
        if not [p for p in workers if alive(p)]:
            break
        time.sleep(0.05)
    assert [p for p in workers if alive(p)] == []


# --- ONNX Runtime's telemetry ----------------------------------------------------------------------------------

def test_check_leaves_no_onnxruntime_files_in_home_or_tmpdir(tmp_path):
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME")}
    model = matmul_model(tmp_path / "m.onnx", 8, 0)
    done = subprocess.run([sys.executable, "-m", "qnndeploy", "check", str(model)], capture_output=True, text=True,
                          env={**env, "HOME": str(home), "TMPDIR": str(tmp)}, timeout=300, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    assert sorted(str(p.relative_to(tmp_path)) for p in (*home.rglob("*"), *tmp.rglob("*"))) == []


@pytest.mark.slow
def test_sigterm_at_many_instants_of_bundle_force(bundle_inputs, tmp_path):
    """Real SIGTERMs at spread instants of `bundle build --force`: never a native crash (the handler only sets a
    flag), exit 0 or 130 with the matching message, and the final name always holds a complete bundle."""
    out = tmp_path / "out"
    assert run(*bundle_args(bundle_inputs, out, "OLD")).exit_code == 0
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "qnndeploy", *bundle_args(bundle_inputs, out, "T")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    span = time.monotonic() - start
    for i in range(12):
        proc = subprocess.Popen([sys.executable, "-m", "qnndeploy", *bundle_args(bundle_inputs, out, f"T{i}")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(span * (i + 0.5) / 12)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
        # -SIGTERM: the signal came before the CLI installed its handler (start-up, imports) or after Python restored
        # the default one (finalization, the work done): old or new, the bundle is complete (bundle_state checks)
        assert proc.returncode in (0, 130, -signal.SIGTERM), (proc.returncode, err)
        assert "Traceback" not in err, err
        license_, _ = bundle_state(out)
        if proc.returncode == 0 or "published" in err:
            assert license_ == f"T{i}", err
        elif proc.returncode == 130:
            assert license_ != f"T{i}", err
        assert sorted(p.name for p in out.iterdir()) == ["demo-1.0.0", "demo-1.0.0.zip"]

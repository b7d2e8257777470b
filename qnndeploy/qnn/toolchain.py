"""QAIRT toolchains: the onnxruntime-qnn wheel that carries a QAIRT release, installed on demand into a folder of
its own, so one qnndeploy compiles and validates for the runtime an app can ship.

The onnxruntime-qnn qnndeploy is installed with is the default toolchain. Another release (data/runtime.json,
"compilers") is installed once with pip (--target, --no-deps: the wheel, plus the onnxruntime it needs when the
current one refuses it) into <toolchains>/onnxruntime-qnn-<version>/, and a command runs under it in a child
process whose import path starts with that folder: every onnxruntime_qnn import there is that release's.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from qnndeploy.base import child, compat, fileio
from qnndeploy.base.errors import BadInput, MissingTool, first_line

ENV_DIR = "QNNDEPLOY_TOOLCHAINS_DIR"
ENV_ACTIVE = "QNNDEPLOY_TOOLCHAIN"  # in a process run under a toolchain: its onnxruntime-qnn version
DONE = "qnndeploy-toolchain.json"  # written last into a toolchain folder: what was installed and checked
PIP_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Toolchain:
    onnxruntime_qnn: str  # the wheel's version
    qairt: str  # the QAIRT release its QNN libraries are, "2.49.40"
    onnxruntime: str | None  # installed beside it when the current onnxruntime refuses it

    @property
    def family(self) -> str:
        return ".".join(self.qairt.split(".")[:2])

    @property
    def name(self) -> str:
        return f"onnxruntime-qnn {self.onnxruntime_qnn} (QAIRT {self.qairt})"


def known() -> list[Toolchain]:
    """The onnxruntime-qnn wheels of data/runtime.json, oldest first."""
    return [Toolchain(w["onnxruntime_qnn"], w["qairt"], w["onnxruntime"])
            for w in compat.rows()["compilers"]["wheels"]]


def default() -> Toolchain:
    """The newest known wheel whose binaries a published Maven qnn-runtime loads: the compiler qnndeploy installs with
    (pyproject.toml pins it; a test keeps the two equal), so the default moves with the data and never past a runtime
    an app cannot get from Maven."""
    shippable = [t for t in known() if compat.maven_for(t.qairt)]
    return max(shippable, key=lambda t: compat.version_key(t.qairt))


def current() -> Toolchain | None:
    """The toolchain this process imports (read from package metadata, without importing it); None when
    onnxruntime-qnn is not installed."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 10 ms at start-up (email.*)

    try:
        installed = version("onnxruntime-qnn")
    except PackageNotFoundError:
        return None
    return next((t for t in known() if t.onnxruntime_qnn == installed), Toolchain(installed, "unknown", None))


def resolve(qairt: str) -> Toolchain:
    """The toolchain of QAIRT `qairt`: a release family ("2.49") or an exact release ("2.49.40")."""
    want = qairt.strip()
    found = [t for t in known() if want in (t.qairt, t.family)]
    if not found:
        listed = ", ".join(f"{t.family} ({t.qairt})" for t in known())
        raise BadInput(f"--qairt {qairt}: no onnxruntime-qnn wheel carries that QAIRT release; known: {listed}")
    return found[-1]


def for_qairt(qairt: str) -> Toolchain | None:
    """The toolchain whose compiler is exactly QAIRT `qairt` (a compile record's qairt_version), None if none is."""
    return next((t for t in known() if t.qairt == qairt), None)


def needed(qairts: Iterable[str]) -> Toolchain | None:
    """The toolchain that runs binaries compiled with these QAIRT releases (a build's records) on the host
    emulator, None when it is this process's own or no known wheel carries them (a QAIRT SDK build: the emulator
    here then runs them, newer runtimes load older binaries)."""
    wanted = {t for q in qairts if (t := for_qairt(q)) is not None}
    if len(wanted) > 1:
        listed = ", ".join(sorted(t.qairt for t in wanted))
        raise BadInput(f"the build holds context binaries of several QAIRT releases ({listed}): compile all of "
                       "them with one --qairt")
    tc = wanted.pop() if wanted else None
    return None if tc is None or is_current(tc) else tc


def is_current(tc: Toolchain) -> bool:
    here = current()
    return here is not None and here.onnxruntime_qnn == tc.onnxruntime_qnn


def root() -> Path:
    """$QNNDEPLOY_TOOLCHAINS_DIR, else $XDG_CACHE_HOME/qnndeploy/toolchains, else ~/.cache/qnndeploy/toolchains."""
    if env := os.environ.get(ENV_DIR):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "qnndeploy" / "toolchains"


def folder(tc: Toolchain) -> Path:
    return root() / f"onnxruntime-qnn-{tc.onnxruntime_qnn}"


def installed(tc: Toolchain) -> bool:
    try:
        done = json.loads((folder(tc) / DONE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(done, dict) and done.get("qairt") == tc.qairt


def environ(tc: Toolchain) -> dict[str, str]:
    """The environment of a process that runs under `tc`: its folder first on the import path, then this
    qnndeploy, and never the current folder."""
    return {**child.environ([str(folder(tc))]), ENV_ACTIVE: tc.onnxruntime_qnn}


def _probe(tc: Toolchain, path: Path) -> str:
    """The QAIRT version the wheel in `path` reports, read in a child process that imports it from there."""
    code = ("import json, onnxruntime, onnxruntime_qnn as q; "
            "print(json.dumps([q.build_and_package_info.qnn_version, onnxruntime.__version__, q.__file__]))")
    env = {**child.environ([str(path)]), ENV_ACTIVE: tc.onnxruntime_qnn}
    done = subprocess.run(child.python("-c", code), capture_output=True, text=True, env=env, timeout=120, check=False)
    try:
        qairt, _ort, where = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise MissingTool(f"{tc.name} was installed into {path} but does not import: "
                          f"{first_line(Exception(done.stderr)) if done.stderr.strip() else 'no output'}") from None
    if not str(where).startswith(str(path)):
        raise MissingTool(f"{tc.name} in {path} is shadowed by {where}")
    return str(qairt)


def install(tc: Toolchain, say: Callable[[str], None] | None = None) -> Path:
    """Install `tc` into its folder once (pip, into a staging folder renamed when it imports and names the expected
    QAIRT), and return the folder. Two processes installing the same toolchain take turns (a lock file beside it):
    the second finds it installed. A killed install leaves only its staging folder (its pip dies with it), which
    the next install removes; the toolchain's folder appears complete or not at all."""
    target = folder(tc)
    if installed(tc):
        return target
    try:
        root().mkdir(parents=True, exist_ok=True)
        lock = os.open(root() / f".{target.name}.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as e:
        raise BadInput(f"cannot create {root()}: {e.strerror} (set {ENV_DIR} to a writable folder)") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return target if installed(tc) else _install(tc, target, say)
    finally:
        os.close(lock)


def _install(tc: Toolchain, target: Path, say: Callable[[str], None] | None) -> Path:
    wheels = [f"onnxruntime-qnn=={tc.onnxruntime_qnn}"] + ([f"onnxruntime=={tc.onnxruntime}"] if tc.onnxruntime else [])
    if say:
        say(f"installing {' and '.join(wheels)} into {target} (once; about 100 MB)")
    try:
        root().mkdir(parents=True, exist_ok=True)
        _remove_stale(target)
        staging = Path(tempfile.mkdtemp(prefix=fileio.partial_prefix(target), dir=root()))
    except OSError as e:
        raise BadInput(f"cannot create {root()}: {e.strerror} (set {ENV_DIR} to a writable folder)") from None
    try:
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input", "--disable-pip-version-check",
               "--only-binary=:all:", "--target", str(staging), *wheels]
        try:
            done = subprocess.run(child.dies_with_parent(cmd), capture_output=True, text=True,
                                  timeout=PIP_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise MissingTool(f"pip did not install {tc.name} in {PIP_TIMEOUT_S:g} s") from None
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.splitlines() if ln.startswith("ERROR")] or done.stderr.splitlines()[-1:]
            raise MissingTool(f"pip could not install {tc.name}: {lines[0] if lines else 'no output'} (run: "
                              f"{sys.executable} -m pip install --no-deps --target {target} {' '.join(wheels)})")
        reported = _probe(tc, staging)
        if reported != tc.qairt:
            raise MissingTool(f"onnxruntime-qnn {tc.onnxruntime_qnn} reports QAIRT {reported}, qnndeploy's data "
                              f"says {tc.qairt}")
        (staging / DONE).write_text(json.dumps({"onnxruntime_qnn": tc.onnxruntime_qnn, "qairt": tc.qairt,
                                                "onnxruntime": tc.onnxruntime}))
        shutil.rmtree(target, ignore_errors=True)  # a folder without DONE: an earlier, broken install
        staging.replace(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _remove_stale(target: Path) -> None:
    """What killed installs of `target` left: its staging folders (.NAME.partial-PID-*, and .NAME.* of earlier
    qnndeploy versions), as large as the wheel. Called with the install lock held, so no live install of that
    toolchain owns one (its pip died with it: dies_with_parent); the lock file itself stays."""
    lock = f".{target.name}.lock"
    for path in root().iterdir():
        if path.name.startswith(f".{target.name}.") and path.name != lock:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def command(args: list[str]) -> list[str]:
    """The command line that runs `qnndeploy ARGS` in a child under a toolchain (environ gives its environment)."""
    return child.module("", *args)

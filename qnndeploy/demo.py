"""`qnndeploy demo`: the whole procedure on the embedded model, one stage calling the next as a user would.

check -> prepare -> check -> compile (3 SoCs) -> validate on the host HTP emulator -> bundle -> bundle verify.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from qnndeploy import __version__
from qnndeploy.base import socs as catalog
from qnndeploy.base.errors import BadInput, CheckFailed
from qnndeploy.base.fileio import check_apart, check_writable, first_missing, no_room, remove_made, write_error, writing
from qnndeploy.bundle.build import build_bundle, spec_from_build
from qnndeploy.check import check_model
from qnndeploy.compile import compile_models
from qnndeploy.formats.manifest import read_manifest
from qnndeploy.model.metrics import OutputMetrics
from qnndeploy.prepare import PrepareOptions, prepare_model
from qnndeploy.qnn import htp
from qnndeploy.scaffold import runtime_set
from qnndeploy.validate import TargetStatus, ValidateOptions, validate_build
from qnndeploy.verification.checks import verify_bundle

MODEL = "kws_demo"  # a keyword-spotting-shaped CNN made by data/make_demo_model.py (Apache-2.0, no training data)
SHAPES = {"features": [1, 1, 49, 10]}  # 49 frames x 10 MFCC: the fixed size the NPU needs
DEFAULT_SOCS = ("SM8550", "SM8650", "SM8750")
BUNDLE_NAME, BUNDLE_VERSION = "kws-demo", "1.0.0"
MARKER = ".qnndeploy-demo"  # what lets --force replace a folder: only an earlier demo output

Step = Callable[[str], None]  # told the name of each stage as it starts
STEPS = 6


@dataclass
class DemoResult:
    out: Path
    verdict_before: str
    prepare_changes: list[str]
    max_abs_diff_cpu: float
    verdict_after: str
    cpu_partitions: int
    compiled: list[str]
    cached: int  # how many of them came from the compile cache
    compile_s: float
    validated: list[str]
    bundle: Path
    bundle_files: int
    runtime: str
    qairt: str
    next_commands: list[str]
    verified: str  # what bundle verify did with the binaries (loaded on the host emulator, or why not)
    app_set: str  # the ONNX Runtime set `scaffold` pins for the bundle, and whether it is validated (one line)
    warnings: list[str]  # bundle build's and bundle verify's, each once: the happy path hides none


def run_demo(out: Path, socs: tuple[str, ...] = DEFAULT_SOCS, force: bool = False, step: Step | None = None,
             sdk_root: Path | None = None, libs_dir: Path | None = None) -> DemoResult:
    """Run every stage into `out`. Without `sdk_root`/`libs_dir` the bundle declares the external Maven runtime."""

    qairt = htp.qairt_version() if htp.available() else ""
    for name in socs:  # the demo builds fp16 and verifies its bundle: what the catalog knows fails is refused now
        soc = catalog.find(name)
        why = catalog.refusal(soc, qairt, "fp16") or catalog.arch_mismatch(soc, qairt)
        if why:
            raise BadInput(f"--soc {soc.model}: {why}; leave it out of the demo")
    for folder in (sdk_root, libs_dir):
        if folder is not None and not Path(folder).is_dir():
            raise BadInput(f"{folder} is not a folder")
    out = Path(out)
    check_writable(out)  # a symlink, a name too long, a read-only or unwritable place: refused before any stage
    if out.exists() and not out.is_dir():
        raise BadInput(f"-o {out} is a file, not a folder")
    check_apart(out, [("QAIRT SDK folder", sdk_root), ("runtime-libs folder", libs_dir)])
    existed, old = out.exists(), None
    if existed and any(out.iterdir()):
        if not force:
            raise BadInput(f"{out} exists and is not empty; choose another -o or pass --force")
        if not (out / MARKER).is_file():
            raise BadInput(f"{out} is not an earlier demo output (it has no {MARKER}): --force only replaces "
                           "an earlier demo output; choose another -o")
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
    made = first_missing(out.parent)
    try:
        with writing(out):
            if old is not None:
                out.replace(old)  # kept until the new run succeeds, put back if it fails
            try:
                (out / "model").mkdir(parents=True)
                (out / MARKER).write_text(f"written by qnndeploy {__version__}; `qnndeploy demo --force` may "
                                          "replace this folder\n")
                result = _stages(out, socs, step or (lambda _: None), sdk_root, libs_dir)
            except BaseException:  # a failed or interrupted demo leaves what was there before, and nothing half-made
                shutil.rmtree(out, ignore_errors=True)
                if old is not None:
                    old.replace(out)
                elif existed:
                    out.mkdir()
                raise
    except BaseException:
        remove_made(out.parent, made)  # the folders above -o this run created
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return result


def _stages(out: Path, socs: tuple[str, ...], say: Step, sdk_root: Path | None, libs_dir: Path | None) -> DemoResult:

    model = out / "model" / f"{MODEL}.onnx"
    model.write_bytes(resources.files("qnndeploy").joinpath("data/demo.onnx").read_bytes())

    say(f"check {model.name}: is it ready for the NPU?")
    before = check_model(model, soc=socs[-1])
    say("prepare: fix the dynamic batch to 1, simplify, prove it equivalent on CPU")
    prepared = prepare_model(model, out / "model" / f"{MODEL}.npu.onnx", PrepareOptions(shapes=SHAPES))
    say("check the prepared model on the real HTP compiler")
    after = check_model(Path(prepared.output), soc=socs[-1])
    if after.verdict != "ready":  # the output is rolled back on failure: say why here, not in a file
        why = next((f.message for f in after.findings if f.severity in ("blocker", "fixable")), "")
        raise CheckFailed(f"the prepared demo model is '{after.verdict}' on the HTP: {why}")

    say(f"compile for {', '.join(socs)} with onnxruntime-qnn (CPU fallback off)")
    build = out / "build"
    compiled = compile_models({MODEL: Path(prepared.output)}, list(socs), build)
    if not compiled.ok:
        _no_room(out, Path(prepared.output))
        first = compiled.failures[0]
        raise CheckFailed(f"compile failed for {first.soc}: {first.error}")
    say("validate: each context binary on the host HTP emulator against onnxruntime CPU")
    validated = validate_build(build, ValidateOptions(random=4))
    if not validated.ok:
        _no_room(out, Path(prepared.output))
        bad = next(t for t in validated.targets if t.status != TargetStatus.PASSED)
        raise CheckFailed(f"validation failed for {bad.soc}: {bad.reason or 'outputs differ'}")

    say("bundle: context binaries per SoC, CPU fallback, records, manifest; then bundle verify")
    spec = dataclasses.replace(spec_from_build(build, BUNDLE_NAME, BUNDLE_VERSION), source_model=MODEL,
                               source_path=model, license="Apache-2.0", sdk_root=sdk_root, libs_dir=libs_dir)
    bundled = build_bundle(spec, out / "bundle")
    report = verify_bundle(bundled.path, deep=True)
    if not report.ok:
        raise CheckFailed(f"the demo bundle does not verify: {report.problems[0].path}: "
                          f"{report.problems[0].message}")
    b = shlex.quote(str(bundled.path))
    sdk = shlex.quote(str(sdk_root)) if sdk_root else '"$QNN_SDK_ROOT"'  # the QAIRT SDK the user set up
    return DemoResult(
        out=out, verdict_before=before.verdict, prepare_changes=prepared.changes,
        max_abs_diff_cpu=max(d.max_abs_diff for d in prepared.equivalence), verdict_after=after.verdict,
        cpu_partitions=after.htp.cpu_partitions, compiled=[f"{j.graph}/{j.soc}" for j in compiled.jobs],
        cached=sum(j.status == "cached" for j in compiled.jobs), compile_s=compiled.duration_s,
        validated=[f"{t.graph}/{t.soc}: " + ", ".join(_figures(o) for o in t.outputs) for t in validated.targets],
        bundle=bundled.path, bundle_files=bundled.files, runtime=bundled.runtime, qairt=bundled.qairt,
        verified=report.deep or "", app_set=runtime_set(read_manifest(bundled.path)).line(),
        warnings=list(dict.fromkeys(f"{w.path}: {w.message}" for w in [*bundled.warnings, *report.warnings])),
        next_commands=[
            f"qnndeploy scaffold {b} --package com.example.kws -o app/qnndeploy",
            f"qnndeploy device info --bundle {b}",
            # a runner, or nothing runs on the phone (exit 4): qnn-net-run of the QAIRT SDK, which (external
            # runtime) also gives the QNN libraries; without a phone, the emulated one (README, "Try the phone side")
            f"qnndeploy device verify {b} --qnn-sdk-root {sdk}",
        ],
    )


def _no_room(out: Path, model: Path) -> None:
    """After a failed stage: when DIR cannot take two more copies of the model, the disk (not the model) made the
    stage fail, whatever its tool said (a compiler that died writing its binary): raise that write error."""
    full = no_room(out, 2 * model.stat().st_size)
    if full is not None:
        raise write_error(full, out)


def _figures(o: OutputMetrics) -> str:
    snr = f"SNR {o.snr_db:.1f} dB" if o.snr_db is not None else "no SNR (all-zero reference)"
    return f"{o.name} max|d| {o.max_abs_diff:.1e} {snr}"

"""The public Python API: what the commands call, for scripts and notebooks that would otherwise run the CLI.

The API is what `__all__` lists (docs/api.md documents each name); everything else in qnndeploy is internal and may
change. Most names are the rooms' own entry points and result types, re-exported. The few functions defined here
do what the command line does around a room's function and a script needs too: a bundle argument may be a folder
or an archive, is refused as bad input (exit code 2) when it is not a bundle at all, and with the CLI's message
(exit code 1) when it fails `bundle verify`; `estimate` gives the estimate room's function the command's name
and option names. Errors are QnnDeployError, with the message and exit code the CLI prints. It is not in
`qnndeploy/__init__`: `qnndeploy --help` imports no room, and the rooms `qnndeploy.check` and `qnndeploy.compile`
are packages, so they cannot also be functions of `qnndeploy`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from qnndeploy.base.errors import BadInput, CheckFailed, MissingTool, QnnDeployError
from qnndeploy.base.fileio import ByteProgress as Progress
from qnndeploy.base.interrupt import Run
from qnndeploy.base.socs import Soc
from qnndeploy.base.socs import catalog as socs
from qnndeploy.base.socs import find as find_soc
from qnndeploy.bundle.build import (
    BundleResult,
    BundleSpec,
    OnDeviceRequest,
    build_bundle,
    spec_from_build,
    with_split,
)
from qnndeploy.check import CheckReport, check_model
from qnndeploy.compile import CompileOptions, CompileSummary, JobResult, compile_models
from qnndeploy.decide.reach import Reach
from qnndeploy.device import hosted
from qnndeploy.device import verify as on_device
from qnndeploy.device.hosted import HostedChoice
from qnndeploy.device.info import DeviceInfo, ListedDevice, device_info, devices
from qnndeploy.device.verify import DeviceVerification
from qnndeploy.diagnose import DiagnoseOptions, DiagnoseResult, diagnose
from qnndeploy.estimate import Estimates, ModelEstimate, SocEstimate, estimate_models
from qnndeploy.formats.manifest import Manifest
from qnndeploy.formats.records import HtpSettings
from qnndeploy.inspect import BinaryReport, InspectResult, inspect
from qnndeploy.package import play as playroom
from qnndeploy.package.play import PlayPackage
from qnndeploy.prepare import PrepareOptions, PrepareResult, prepare_model
from qnndeploy.prepare.split import SplitResult, split_by_size, split_model
from qnndeploy.qnn.hextimate import DEFAULT_TIMEOUT_S as _ESTIMATE_TIMEOUT_S
from qnndeploy.reach import DOING as _REACHING
from qnndeploy.reach import check_request as _check_reach
from qnndeploy.reach import reach_bundle
from qnndeploy.report import ReportResult, report
from qnndeploy.scaffold import ScaffoldResult
from qnndeploy.scaffold import check_request as _check_scaffold
from qnndeploy.scaffold import scaffold as _scaffold
from qnndeploy.validate import TargetValidation, ValidateOptions, ValidationSummary, validate_build
from qnndeploy.verification.checks import Problem, VerifyReport, opened, refusal, require_bundle

__all__ = [
    "BadInput",
    "BinaryReport",
    "BundleResult",
    "BundleSpec",
    "CheckFailed",
    "CheckReport",
    "CompileOptions",
    "CompileSummary",
    "DeviceInfo",
    "DeviceVerification",
    "DiagnoseOptions",
    "DiagnoseResult",
    "Estimates",
    "HostedChoice",
    "HtpSettings",
    "InspectResult",
    "JobResult",
    "ListedDevice",
    "MissingTool",
    "ModelEstimate",
    "OnDeviceRequest",
    "PlayPackage",
    "PrepareOptions",
    "PrepareResult",
    "Problem",
    "QnnDeployError",
    "Reach",
    "ReportResult",
    "Run",
    "ScaffoldResult",
    "Soc",
    "SocEstimate",
    "SplitResult",
    "TargetValidation",
    "ValidateOptions",
    "ValidationSummary",
    "VerifyReport",
    "build_bundle",
    "check_model",
    "compile_models",
    "device_info",
    "device_verify",
    "device_verify_hosted",
    "devices",
    "diagnose",
    "estimate",
    "find_soc",
    "hosted_devices",
    "inspect",
    "package_play",
    "prepare_model",
    "reach",
    "report",
    "scaffold",
    "socs",
    "spec_from_build",
    "split_by_size",
    "split_model",
    "validate_build",
    "verify_bundle",
    "with_split",
]


def estimate(models: Path | Sequence[Path], socs: Sequence[str] = (), *,
             timeout: float | None = _ESTIMATE_TIMEOUT_S) -> Estimates:
    """`qnndeploy estimate`: each model file, or each graph of a build folder (compile's output), estimated for
    QCS9100 at fp16 by the HTP backend's own cost model on this machine, then for each SoC of `socs` (the command's
    --soc; default: a build's SoCs, else every SoC with a chip factor) scaled by its chip factor. A build's graphs
    get an estimate record beside each job's compile.json, as the command writes them; nothing is measured."""
    paths = [Path(models)] if isinstance(models, str | Path) else [Path(m) for m in models]
    return estimate_models(paths, socs, timeout=timeout)


def verify_bundle(bundle: Path, *, deep: bool = True, allow_unchecked: bool = False,
                  progress: Progress | None = None) -> VerifyReport:
    """`qnndeploy bundle verify`: the report of a bundle folder or archive (`ok` False is the CLI's exit 1); a path
    that is not a bundle at all raises (exit code 2). `deep=False` is --shallow."""
    with opened(Path(bundle), progress, deep=deep, allow_unchecked=allow_unchecked) as (root, report):
        require_bundle(Path(bundle), root, report)
    return report


def scaffold(bundle: Path, package: str, out: Path, *, engine: str = "ort", ort_aar: str = "microsoft",
             app: bool = False, play: Path | None = None, force: bool = False, deep: bool = True,
             allow_unchecked: bool = False, progress: Progress | None = None) -> ScaffoldResult:
    """`qnndeploy scaffold`: the Kotlin glue (with `app`, the sample app) for a bundle folder or archive that passes
    `bundle verify`; `play` is a package play output. The request is checked before the bundle is hashed."""
    _check_scaffold(package, Path(out), engine=engine, app=app, force=force, ort_aar=ort_aar, play=play is not None)
    with _sound(bundle, "scaffolding from it", deep, allow_unchecked, progress) as (root, report):
        return _scaffold(root, package, Path(out), engine=engine, app=app, force=force, report=report,
                         ort_aar=ort_aar, play=play)


def package_play(bundle: Path, out: Path, *, pack: str = playroom.DEFAULT_PACK, delivery: str = "fast-follow",
                 force: bool = False, deep: bool = True, allow_unchecked: bool = False,
                 progress: Progress | None = None) -> PlayPackage:
    """`qnndeploy package play`: a Google Play AI pack of a bundle folder or archive that passes `bundle verify`,
    one device group per SoC; `delivery` is install-time, fast-follow or on-demand."""
    playroom.check_request(Path(out), pack=pack, delivery=delivery, force=force, bundle=Path(bundle))
    with _sound(bundle, "packaging it", deep, allow_unchecked, progress) as (root, r):
        return playroom.package_play(root, Path(out), pack=pack, delivery=delivery, force=force, report=r,
                                     progress=progress)


def reach(bundle: Path, *, engine: str = "ort", worlds: Sequence[str] = (), allow_unchecked: bool = False,
          progress: Progress | None = None) -> Reach:
    """`qnndeploy reach`: for every chipset of Qualcomm's table and the SoC catalog, under every name phones report,
    the path the app's decision takes with a bundle folder or archive that passes `bundle verify` (checked without
    the host emulator); `engine` "ort" or "sherpa-onnx", `worlds` only those of Qualcomm's table."""
    _check_reach(engine, worlds)
    with _sound(bundle, _REACHING, False, allow_unchecked, progress) as (root, report):
        return reach_bundle(root, engine, worlds, report=report)


@contextmanager
def _sound(bundle: Path, doing: str, deep: bool, allow_unchecked: bool,
           progress: Progress | None) -> Iterator[tuple[Path, VerifyReport]]:
    """(bundle folder, report) of a bundle that passes `bundle verify`, an archive staying extracted while the
    caller uses it; one that fails is refused (exit code 1) with the CLI's message (verification.checks.refusal)."""
    with opened(Path(bundle), progress, deep=deep, allow_unchecked=allow_unchecked) as (root, report):
        require_bundle(Path(bundle), root, report)
        if not report.ok:
            raise CheckFailed(refusal(Path(bundle), report, doing))
        yield root, report


@contextmanager
def _pushable(bundle: Path, refusal: Callable[[Path], str], allow_unchecked: bool = False
              ) -> Iterator[tuple[Path, Manifest]]:
    """(bundle folder, manifest) of a bundle that passes `bundle verify` without the host emulator (the phone runs
    the binaries), as the device commands take it; one that fails is refused (exit code 1) with `refusal(bundle)`."""
    with on_device.checked_bundle(Path(bundle), allow_unchecked) as (root, report, manifest):
        require_bundle(Path(bundle), root, report)
        if manifest is None:
            raise CheckFailed(refusal(Path(bundle)))
        yield root, manifest


def hosted_devices(bundle: Path | None = None) -> list[HostedChoice]:
    """`qnndeploy device list --aihub [--bundle BUNDLE]`: the phones Qualcomm AI Hub hosts, and with a bundle the
    target the app would choose on each."""
    if bundle is None:
        return hosted.list_hosted(None)
    with _pushable(bundle, lambda b: f"{b} fails bundle verify: fix the bundle (qnndeploy bundle verify {b})") as (
            _, manifest):
        return hosted.list_hosted(manifest)


def _push_refusal(bundle: Path) -> str:
    return f"{bundle} fails bundle verify: fix the bundle (or build it again) before pushing it"


def device_verify(bundle: Path, serial: str | None = None, *, all_devices: bool = False, runner: Path | None = None,
                  qnn_sdk_root: Path | None = None, inputs: Path | None = None, preprocess: str | Path | None = None,
                  random: int | None = None, seed: int = 0, runs: int = 10,
                  record_dir: Path = on_device.DEFAULT_RECORD_DIR, play: Path | None = None,
                  timeout: float | None = None, allow_unchecked: bool = False,
                  progress: Progress | None = None, ort_runner: Path | None = None) -> list[DeviceVerification]:
    """`qnndeploy device verify` over adb: push a bundle folder or archive that passes `bundle verify` to one phone
    (`serial`, else $ANDROID_SERIAL, else the only one connected) or to every connected one (`all_devices`), run it
    there with a `runner` (qnn-net-run) and record each phone's result in `record_dir`. `ort_runner`: an Android
    onnxruntime_perf_test with the QNN EP, which compiles the ONNX on a phone on the on-device path (--ort-runner)."""
    if all_devices and serial:
        raise QnnDeployError("give a serial or all_devices, not both")
    with _pushable(bundle, _push_refusal, allow_unchecked) as (root, manifest):
        job = on_device.DeviceJob(root, manifest, runner, qnn_sdk_root, inputs, random, seed, runs, record_dir, play,
                                  timeout, preprocess, given=Path(bundle), ort_runner=ort_runner)
        return on_device.verify_all(job) if all_devices else [on_device.verify_device(job, serial, progress)]


def device_verify_hosted(bundle: Path, names: Sequence[str] = (), soc_names: Sequence[str] = (), *,
                         inputs: Path | None = None, preprocess: str | Path | None = None, random: int | None = None,
                         seed: int = 0, runs: int = 10, record_dir: Path = on_device.DEFAULT_RECORD_DIR,
                         allow_unchecked: bool = False) -> list[DeviceVerification]:
    """`qnndeploy device verify --aihub`: the bundle on phones Qualcomm AI Hub hosts, chosen by AI Hub device name
    (`names`) or by SoC (`soc_names`), one inference job with profiling per phone and graph."""
    with _pushable(bundle, _push_refusal, allow_unchecked) as (root, manifest):
        job = on_device.DeviceJob(root, manifest, None, None, inputs, random, seed, runs, record_dir, None, None,
                                  preprocess, given=Path(bundle))
        return hosted.verify_hosted(job, list(names), list(soc_names))

"""The public Python API: what the commands call, for scripts and notebooks that would otherwise run the CLI, and the
command line's one door to the rooms (every `qnndeploy` command calls a function of this package).

The API is what `__all__` lists (docs/api.md documents each name); everything else in qnndeploy is internal and may
change, the other names this package resolves (the command line's too) included. Most names are the rooms' own
entry points and result types, re-exported. The functions defined in this package's modules do what the command
line does around a room's function and a script needs too: a bundle argument may be a folder or an archive, is
refused as bad input (exit code 2) when it is not a bundle at all, and as `Unverified` (exit code 1, carrying the
report) when it fails `bundle verify` (_bundles.py, the one place that rule is applied); `estimate` gives the estimate
room's function the command's name and option names. Errors are QnnDeployError, with the message and exit code the
CLI prints.

Importing this package imports no room: each name is imported from its home on first use (PEP 562's module
`__getattr__`, HOMES below), so `qnndeploy socs` and `--help` pay only for what they use. It is not in
`qnndeploy/__init__`: the rooms `qnndeploy.check` and `qnndeploy.compile` are packages, so they cannot also be
functions of `qnndeploy`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from qnndeploy.api._errors import Unverified
from qnndeploy.base.errors import CheckFailed

if TYPE_CHECKING:  # what mypy and a script's type checker see; at run time __getattr__ imports each on first use
    from qnndeploy.api._bundles import PlayRequest, ScaffoldRequest, package_play, reach, scaffold, verify_bundle
    from qnndeploy.api._estimate import estimate
    from qnndeploy.api._phones import device_verify, hosted_devices
    from qnndeploy.base.compat import Aar
    from qnndeploy.base.errors import BadInput, MissingTool, QnnDeployError
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
    from qnndeploy.decide.reach import Engine, Reach
    from qnndeploy.device.hosted import HostedChoice
    from qnndeploy.device.info import DeviceInfo, ListedDevice, device_info, devices
    from qnndeploy.device.verify import DeviceVerification, PhoneRequest
    from qnndeploy.diagnose import DiagnoseOptions, DiagnoseResult, diagnose
    from qnndeploy.estimate import Estimates, ModelEstimate, SocEstimate
    from qnndeploy.formats.generation import GenerationPlan
    from qnndeploy.formats.playplan import Delivery
    from qnndeploy.formats.records import HtpSettings
    from qnndeploy.inspect import BinaryReport, InspectResult, inspect
    from qnndeploy.package.play import PlayPackage
    from qnndeploy.prepare import PrepareOptions, PrepareResult, prepare_model
    from qnndeploy.prepare.generate import GenerateOptions, prepare_generation
    from qnndeploy.prepare.split import SplitResult, split_by_size, split_model
    from qnndeploy.report import ReportResult, report
    from qnndeploy.scaffold import ScaffoldResult
    from qnndeploy.validate import TargetValidation, ValidateOptions, ValidationSummary, validate_build
    from qnndeploy.verification.checks import Problem, VerifyReport

if TYPE_CHECKING:  # the command line's names, not public (docs/api.md: internal, may change)
    from qnndeploy import check as _check
    from qnndeploy import compile as _compile
    from qnndeploy import demo as _demo
    from qnndeploy import diagnose as _diagnose
    from qnndeploy import inspect as _inspect
    from qnndeploy import validate as _validate
    from qnndeploy.api import _diagnose as _plotting
    from qnndeploy.api._bundles import verify_with_runtime as verify_with_runtime
    from qnndeploy.api._phones import device_bench as device_bench
    from qnndeploy.api._phones import device_profile as device_profile
    from qnndeploy.api._phones import on_phones as on_phones
    from qnndeploy.base import socs as _socs
    from qnndeploy.compile import cache as _cache
    from qnndeploy.compile import models_from_args as models_from_args
    from qnndeploy.compile import shares_from_args as shares_from_args
    from qnndeploy.compile.cache import CacheListing as CacheListing
    from qnndeploy.compile.cache import ClearResult as ClearResult
    from qnndeploy.compile.cache import EntryState as EntryState
    from qnndeploy.demo import DemoResult as DemoResult
    from qnndeploy.demo import run_demo as run_demo
    from qnndeploy.device import bench as _bench
    from qnndeploy.device import opprofile as _opprofile
    from qnndeploy.device import profile as _profile
    from qnndeploy.device.profile import Battery as Battery
    from qnndeploy.device.profile import Profile as Profile
    from qnndeploy.device.verify import NOT_RUN as NOT_RUN
    from qnndeploy.device.verify import GraphRun as GraphRun
    from qnndeploy.device.verify import VerifyOutcome as VerifyOutcome
    from qnndeploy.diagnose import check_plot as check_plot
    from qnndeploy.doctor import DoctorReport as DoctorReport
    from qnndeploy.doctor import doctor as doctor
    from qnndeploy.package import play as _play
    from qnndeploy.package.play import DEFAULT_PACK as DEFAULT_PACK
    from qnndeploy.package.play import DELIVERIES as DELIVERIES
    from qnndeploy.package.play import ON_DEVICE_ROW as ON_DEVICE_ROW
    from qnndeploy.prepare import parse_assignment as parse_assignment
    from qnndeploy.prepare import parse_shape as parse_shape
    from qnndeploy.validate import TargetStatus as TargetStatus
    from qnndeploy.validate import emulated_qairts as emulated_qairts

    soc_sources = _socs.sources
    CheckVerdict = _check.Verdict
    CompileJobStatus = _compile.JobStatus
    scan_cache = _cache.scan
    clear_cache = _cache.clear
    VALIDATE_TWIN_NOTE = _validate.TWIN_NOTE
    diagnose_job_record = _diagnose.job_record
    write_diagnose_plot = _plotting.write_plot
    BenchOptions = _bench.Options
    BENCH_THRESHOLD = _bench.DEFAULT_THRESHOLD
    ProfileLevel = _opprofile.Level
    write_profile_csv = _profile.write_csv
    DEMO_MARKER = _demo.MARKER
    DEMO_SOCS = _demo.DEFAULT_SOCS
    DEMO_STEPS = _demo.STEPS
    INSPECT_MARKERS = _inspect.MARKERS
    play_size_text = _play.size_text

__all__ = [
    "Aar",
    "BadInput",
    "BinaryReport",
    "BundleResult",
    "BundleSpec",
    "CheckFailed",
    "CheckReport",
    "CompileOptions",
    "CompileSummary",
    "Delivery",
    "DeviceInfo",
    "DeviceVerification",
    "DiagnoseOptions",
    "DiagnoseResult",
    "Engine",
    "Estimates",
    "GenerateOptions",
    "GenerationPlan",
    "HostedChoice",
    "HtpSettings",
    "InspectResult",
    "JobResult",
    "ListedDevice",
    "MissingTool",
    "ModelEstimate",
    "OnDeviceRequest",
    "PhoneRequest",
    "PlayPackage",
    "PlayRequest",
    "PrepareOptions",
    "PrepareResult",
    "Problem",
    "QnnDeployError",
    "Reach",
    "ReportResult",
    "Run",
    "ScaffoldRequest",
    "ScaffoldResult",
    "Soc",
    "SocEstimate",
    "SplitResult",
    "TargetValidation",
    "Unverified",
    "ValidateOptions",
    "ValidationSummary",
    "VerifyReport",
    "build_bundle",
    "check_model",
    "compile_models",
    "device_info",
    "device_verify",
    "devices",
    "diagnose",
    "estimate",
    "find_soc",
    "hosted_devices",
    "inspect",
    "package_play",
    "prepare_generation",
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


# Where each name lives, module by module: NAME, or NAME=ITS_NAME_THERE when the API names it otherwise. Imported
# when it is asked for (__getattr__).
HOMES: dict[str, str] = {
    "qnndeploy.api._bundles": ("PlayRequest ScaffoldRequest package_play reach scaffold verify_bundle "
                               "verify_with_runtime"),
    "qnndeploy.api._diagnose": "write_diagnose_plot=write_plot",
    "qnndeploy.api._estimate": "estimate",
    "qnndeploy.api._phones": "device_verify hosted_devices device_bench device_profile on_phones",
    "qnndeploy.base.errors": "BadInput MissingTool QnnDeployError",
    "qnndeploy.base.interrupt": "Run",
    "qnndeploy.base.socs": "Soc socs=catalog find_soc=find soc_sources=sources",
    "qnndeploy.bundle.build": "BundleResult BundleSpec OnDeviceRequest build_bundle spec_from_build with_split",
    "qnndeploy.check": "CheckReport check_model CheckVerdict=Verdict",
    "qnndeploy.compile": ("CompileOptions CompileSummary JobResult compile_models CompileJobStatus=JobStatus "
                          "models_from_args shares_from_args"),
    "qnndeploy.compile.cache": "CacheListing ClearResult EntryState scan_cache=scan clear_cache=clear",
    "qnndeploy.demo": "DemoResult run_demo DEMO_MARKER=MARKER DEMO_SOCS=DEFAULT_SOCS DEMO_STEPS=STEPS",
    "qnndeploy.device.hosted": "HostedChoice",
    "qnndeploy.device.info": "DeviceInfo ListedDevice device_info devices",
    "qnndeploy.device.bench": "BenchOptions=Options BENCH_THRESHOLD=DEFAULT_THRESHOLD",
    "qnndeploy.device.opprofile": "ProfileLevel=Level",
    "qnndeploy.device.profile": "Battery Profile write_profile_csv=write_csv",
    "qnndeploy.device.verify": "DeviceVerification GraphRun VerifyOutcome NOT_RUN PhoneRequest",
    "qnndeploy.diagnose": "DiagnoseOptions DiagnoseResult diagnose check_plot diagnose_job_record=job_record",
    "qnndeploy.doctor": "DoctorReport doctor",
    "qnndeploy.estimate": "Estimates ModelEstimate SocEstimate",
    "qnndeploy.base.compat": "Aar",
    "qnndeploy.decide.reach": "Engine Reach",
    "qnndeploy.formats.playplan": "Delivery",
    "qnndeploy.formats.records": "HtpSettings",
    "qnndeploy.verification.checks": "Problem VerifyReport",
    "qnndeploy.inspect": "BinaryReport InspectResult inspect INSPECT_MARKERS=MARKERS",
    "qnndeploy.package.play": "PlayPackage DEFAULT_PACK DELIVERIES ON_DEVICE_ROW play_size_text=size_text",
    "qnndeploy.prepare": "PrepareOptions PrepareResult prepare_model parse_assignment parse_shape",
    "qnndeploy.prepare.split": "SplitResult split_by_size split_model",
    "qnndeploy.prepare.generate": "GenerateOptions prepare_generation",
    "qnndeploy.formats.generation": "GenerationPlan",
    "qnndeploy.report": "ReportResult report",
    "qnndeploy.scaffold": "ScaffoldResult",
    "qnndeploy.validate": ("TargetValidation ValidateOptions ValidationSummary validate_build TargetStatus "
                           "emulated_qairts VALIDATE_TWIN_NOTE=TWIN_NOTE"),
}
_HOME: dict[str, tuple[str, str]] = {name: (module, there or name) for module, names in HOMES.items()
                                     for name, _, there in (n.partition("=") for n in names.split())}


def __getattr__(name: str) -> Any:
    """PEP 562: a name of HOMES, imported from its module when it is asked for. Not kept here: the module's own
    attribute is the one truth (a test that replaces a room's function replaces it for the command line too)."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, there = _HOME[name]
    return getattr(importlib.import_module(module), there)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})

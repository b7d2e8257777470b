"""A bundle on phones: device list --aihub --bundle, device verify (over adb or on AI Hub) and device bench, each
taking the bundle through the one rule (_bundles.verified: without the host emulator, the phone runs the binaries)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from qnndeploy.api._bundles import verified
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.base.fileio import ByteProgress as Progress
from qnndeploy.device import bench, hosted, profile
from qnndeploy.device import verify as on_device
from qnndeploy.device.adb import connect
from qnndeploy.device.hosted import HostedChoice
from qnndeploy.device.verify import DeviceVerification, PhoneRequest
from qnndeploy.formats.manifest import load_manifest
from qnndeploy.verification.checks import Steps, VerifyReport


def hosted_devices(bundle: Path | None = None) -> list[HostedChoice]:
    """`qnndeploy device list --aihub [--bundle BUNDLE]`: the phones Qualcomm AI Hub hosts, and with a bundle the
    target the app would choose on each."""
    if bundle is None:
        return hosted.list_hosted(None)
    with verified(bundle, "choosing its targets") as (root, _):
        return hosted.list_hosted(load_manifest(root))


def on_phones(request: PhoneRequest, progress: Progress | None = None, steps: Steps | None = None
              ) -> tuple[VerifyReport, list[DeviceVerification]]:
    """`qnndeploy device verify`: the bundle's report and each phone's verification (AI Hub's with `aihub`)."""
    if request.all_devices and request.serial:
        raise QnnDeployError("give a serial or all_devices, not both")
    with verified(request.bundle, "pushing it", allow_unchecked=request.allow_unchecked, steps=steps) as (root, report):
        job = on_device.DeviceJob(root, load_manifest(root), request)
        if request.aihub:
            return report, hosted.verify_hosted(job, list(request.hosted_names), list(request.hosted_socs))
        if request.all_devices:
            return report, on_device.verify_all(job)
        return report, [on_device.verify_device(job, request.serial, progress, steps)]


def device_verify(request: PhoneRequest, *, progress: Progress | None = None) -> list[DeviceVerification]:
    """`qnndeploy device verify`: push a bundle folder or archive that passes `bundle verify` to one phone
    (`serial`, else $ANDROID_SERIAL, else the only one connected) or every connected one (`all_devices`), run it
    there with a `runner` (qnn-net-run) and record each phone's result in `record_dir`; with `aihub`, on the phones
    Qualcomm AI Hub hosts instead (`hosted_names`, `hosted_socs`), one inference job with profiling per phone and
    graph."""
    return on_phones(request, progress)[1]


def device_bench(request: PhoneRequest, options: bench.Options, steps: Steps | None = None
                 ) -> list[bench.PhoneBench]:
    """`qnndeploy device bench`: NPU against CPU on one phone or every connected one, `options` the bench's own."""
    if request.all_devices and request.serial:
        raise QnnDeployError("give a serial or all_devices, not both")
    say = steps or (lambda _text: None)
    with verified(request.bundle, "benchmarking it", allow_unchecked=request.allow_unchecked, steps=steps) as (
            root, _):
        job = on_device.DeviceJob(root, load_manifest(root), request)
        if request.all_devices:
            return bench.bench_all(job, options, say)
        return [bench.bench_device(job, options, request.serial, say)]


def device_profile(serial: str | None, *, pid: int | None = None, package: str | None = None, interval: float = 2.0,
                   timeout: float | None = None) -> tuple[profile.Profile, Iterator[profile.UsageSample]]:
    """`qnndeploy device profile`: the process (`pid`, or the app `package`'s) on a phone, and its samples, one per
    `interval` seconds, each also kept in the Profile, until the caller stops or the process ends."""
    dev = connect(serial, timeout)
    found, name = profile.find_process(dev, pid, package)
    result = profile.start(dev, found, name, interval)
    return result, profile.samples(dev, result)

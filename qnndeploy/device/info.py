"""`device list` and `device info`: what a phone is and whether the NPU path can work on it.

The SoC is identified by qnndeploy.decide.decision, the Python twin of the app's Kotlin selector: ro.soc.model
(= Build.SOC_MODEL, API 31+), else ro.board.platform through the catalog's codenames. The kernel's
/sys/devices/soc0/soc_id is shown as a cross-check, never used to decide. Given a bundle, the same decision
function names the target the app would choose.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from qnndeploy.base import socs
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.base.pool import Pool
from qnndeploy.decide import decision
from qnndeploy.device.adb import Device, DeviceEntry, connect, list_devices, parse_int
from qnndeploy.formats.manifest import load_manifest
from qnndeploy.qnn import markers
from qnndeploy.verification.checks import bundle_folder

CDSPRPC = "/vendor/lib64/libcdsprpc.so"
# Where a phone's own QNN libraries can shadow the app's ("Stub lib id mismatch").
VENDOR_DIRS = ("/vendor", "/odm")


@dataclass
class ListedDevice:
    serial: str
    state: str
    model: str
    soc: str | None  # ro.soc.model or ro.board.platform, for ready devices
    error: str | None = None  # why a ready device's properties could not be read (it missed a deadline...)


@dataclass
class DeviceInfo:
    serial: str
    model: str
    manufacturer: str
    android_release: str
    sdk: int | None
    abi: str
    soc_model_prop: str | None  # ro.soc.model
    soc_manufacturer: str | None  # ro.soc.manufacturer
    board_platform: str | None  # ro.board.platform
    kernel_soc_id: int | None  # /sys/devices/soc0/soc_id
    soc: str | None  # the catalog's model, as the app's glue identifies it
    identified_by: str | None  # "Build.SOC_MODEL", "ro.soc.model" (before API 31) or "ro.board.platform"
    dsp_arch: str | None
    qnn_soc_id: int | None
    fp16: bool | None
    page_size: int | None
    cdsprpc: bool
    dsp_dirs: list[str]
    vendor_qnn_libs: list[str]
    notes: list[str] = field(default_factory=list)
    bundle: str | None = None  # "name version" of the bundle given with --bundle
    app_choice: decision.Decision | None = None  # what the app would choose with that bundle


def devices(timeout: float | None = None) -> list[ListedDevice]:
    """Every device the adb server knows; the ready ones' SoC read from their properties, all at once, each within
    its deadline (`timeout` replaces it). A phone that cannot be read keeps its row, with the error."""
    entries = list_devices(timeout)

    def one(e: DeviceEntry) -> ListedDevice:
        row = ListedDevice(e.serial, e.state, e.model, None)
        if e.state == "device":
            try:
                row.soc = _soc_label(e, timeout)
            except QnnDeployError as err:
                row.error = str(err)
        return row

    with Pool(max_workers=max(1, len(entries))) as pool:
        return list(pool.map(one, entries))


def _soc_label(entry: DeviceEntry, timeout: float | None) -> str | None:
    """The SoC as the app identifies it (catalog name), else the raw ro.soc.model or ro.board.platform."""
    phone = decision.DeviceIdentity.from_props(Device(entry.serial, timeout).getprops())
    name, _ = decision.identify(phone)
    return name or phone.soc_model or phone.board_platform


def device_info(serial: str | None = None, bundle: Path | None = None, timeout: float | None = None) -> DeviceInfo:
    """Everything `device info` shows; with a bundle (folder or archive), also the target the app would choose there.
    `timeout` replaces the deadline of every adb step (None: each step's default)."""
    manifest, runtime_version = None, None
    if bundle is not None:  # a bad bundle fails before any adb traffic
        with bundle_folder(bundle) as root:
            manifest = load_manifest(root)
            # The runtime's version is the bundle's own libQnnHtp.so's; an external runtime's is known only in the app.
            backend = decision.bundled_backend(manifest)
            runtime_version = markers.library_version(root / backend) if backend else None
    dev = connect(serial, timeout)
    props = dev.getprops()
    phone = decision.DeviceIdentity.from_props(props)
    name, identified_by = decision.identify(phone)
    soc = next((s for s in socs.catalog() if s.model == name), None)
    kernel_id = parse_int(dev.read_text("/sys/devices/soc0/soc_id"))
    folders = " ".join(decision.VENDOR_DSP_FOLDERS)
    dsp_dirs = dev.run(f"for d in {folders}; do test -d $d && echo $d; done",
                       doing="looking for the DSP library folders").output.split()
    libs = dev.run(f"find {' '.join(VENDOR_DIRS)} -name 'libQnn*.so' 2>/dev/null",
                   doing="looking for QNN libraries in /vendor and /odm").output.splitlines()
    info = DeviceInfo(
        serial=dev.serial, model=props.get("ro.product.model", ""),
        manufacturer=props.get("ro.product.manufacturer", ""),
        android_release=props.get("ro.build.version.release", ""), sdk=phone.sdk_int or None,
        abi=props.get("ro.product.cpu.abi", ""), soc_model_prop=phone.soc_model,
        soc_manufacturer=props.get("ro.soc.manufacturer") or None, board_platform=phone.board_platform,
        kernel_soc_id=kernel_id, soc=soc.model if soc else None, identified_by=identified_by if soc else None,
        dsp_arch=soc.dsp_arch if soc else None, qnn_soc_id=soc.soc_id if soc else None,
        fp16=soc.fp16 if soc else None,
        page_size=parse_int(dev.run("getconf PAGE_SIZE", doing="reading the page size (getconf)").output),
        cdsprpc=dev.run(f"test -f {shlex.quote(CDSPRPC)}", doing=f"looking for {CDSPRPC}").code == 0,
        dsp_dirs=dsp_dirs, vendor_qnn_libs=sorted(lib for lib in libs if lib.strip()))
    info.notes = _notes(info)
    if manifest is not None:
        info.bundle = manifest.bundle_version
        # The libraries' loading can only be seen in the app (or by `device verify`); assume they load.
        info.app_choice = decision.decide(manifest, phone, load_errors={}, lib_dir="<app native library dir>",
                                          runtime_version=runtime_version)
    return info


def _notes(i: DeviceInfo) -> list[str]:
    """Advice a user acts on; empty when nothing stands in the way of the NPU path."""
    notes = []
    if i.soc is None:
        seen = i.soc_model_prop or i.board_platform or "unknown"
        notes.append(f"SoC {seen} is not in the catalog: the app takes the CPU fallback on this phone")
    elif i.identified_by == "ro.board.platform":
        notes.append(f"no ro.soc.model (Android {i.android_release}, API {i.sdk}): identified by ro.board.platform "
                     f"'{i.board_platform}', as the app's glue does")
    if i.sdk is None:
        notes.append("no readable API level (ro.build.version.sdk is missing or not a number): read as 0 (older "
                     "than Android 12), as the decision does for a phone that reports none")
    if i.soc and i.kernel_soc_id is not None:
        by_id = next((s for s in socs.catalog() if i.kernel_soc_id in s.kernel_soc_ids), None)
        if by_id is not None and by_id.model != i.soc:
            notes.append(f"kernel soc_id {i.kernel_soc_id} is {by_id.model} in the catalog, but the props say "
                         f"{i.soc}: check the catalog entry")
    if i.fp16 is False:
        notes.append(f"{i.soc} ({i.dsp_arch}) has no fp16 on the HTP: fp16 targets cannot run here, use w8a16")
    if not i.cdsprpc:
        notes.append(f"no {CDSPRPC}: the DSP cannot be reached from apps, the NPU path will fail")
    if i.vendor_qnn_libs:
        notes.append("QNN libraries in /vendor or /odm can shadow the app's own ('Stub lib "
                     "id mismatch'): load the app's own by full path and keep /vendor out of LD_LIBRARY_PATH")
    if i.abi and i.abi != "arm64-v8a":
        notes.append(f"ABI {i.abi}: QNN ships arm64-v8a libraries only")
    if i.page_size and i.page_size > 4096:
        notes.append(f"{i.page_size // 1024} KB pages: native libraries need LOAD segments aligned to "
                     f"{i.page_size} (link with -z max-page-size=16384)")
    return notes

"""The on-device decision, NPU or CPU, as a pure function: the same steps the generated Kotlin selector runs.

`device info/verify` use it to say what an app will do on a phone; tests/test_kotlin.py feeds the same inputs to
this function and to the Kotlin selector and requires identical results, reason strings included. So every rule
and every message here has a twin in templates/glue/.../QnnSelector.kt: change both or neither.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from qnndeploy import socs
from qnndeploy.formats import CONTEXT_BINARY, EPCONTEXT, FORMAT, FORMAT_VERSION, ONNX  # noqa: F401 (EPCONTEXT: scaffold)

BACKEND_LIB, SYSTEM_LIB = "libQnnHtp.so", "libQnnSystem.so"
ADSP_VAR = "ADSP_LIBRARY_PATH"
# Where the DSP loader looks when ADSP_LIBRARY_PATH is unset. Setting the variable replaces that default, so these
# are kept after the app's own folder, or the device's own DSP libraries would no longer be found.
VENDOR_DSP_FOLDERS = ("/vendor/lib/rfsa/adsp", "/vendor/dsp/cdsp", "/system/lib/rfsa/adsp",
                      "/system/vendor/lib/rfsa/adsp", "/dsp")
SOC_MODEL_SINCE_SDK = 31  # Build.SOC_MODEL exists from Android 12


@dataclass(frozen=True)
class Device:
    """What a phone says about its chip: ro.soc.model (Build.SOC_MODEL), ro.board.platform, the SDK level."""

    soc_model: str | None
    board_platform: str | None
    sdk_int: int

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> Device:
        """From a phone's `getprop` output; an empty prop counts as unset, an unreadable SDK level as 0."""
        sdk = props.get("ro.build.version.sdk", "").strip()
        return cls(props.get("ro.soc.model") or None, props.get("ro.board.platform") or None,
                   int(sdk) if sdk.isdigit() else 0)


@dataclass(frozen=True)
class Remembered:
    """A failed NPU init the app recorded; it counts only while the app and the bundle are the same versions."""

    app_version: str
    bundle_version: str
    message: str


@dataclass(frozen=True)
class Decision:
    provider: str  # "npu" or "cpu"
    soc: str | None  # the catalog model (SM8750 for an SM8750P), or what the device reported
    identified_by: str | None  # Build.SOC_MODEL, ro.soc.model or ro.board.platform
    reason: str
    dsp_arch: str | None = None  # of the chosen target (NPU only)
    paths: dict[str, str] = field(default_factory=dict)  # graph -> bundle path of the model to load
    files: list[str] = field(default_factory=list)  # every bundle file this decision needs on the phone
    backend_lib: str | None = None
    system_lib: str | None = None
    adsp_library_path: str | None = None  # the value set before loading the QNN libraries, if it was set

    @property
    def npu(self) -> bool:
        return self.provider == "npu"


def bundle_version(manifest: Mapping) -> str:
    return f"{manifest.get('name')} {manifest.get('version')}"


def soc_tables() -> tuple[dict[str, str], dict[str, str]]:
    """(SOC_MODEL value -> catalog model, ro.board.platform codename -> catalog model), from the one catalog.

    The Kotlin selector gets the same two tables, generated from these by `qnndeploy scaffold`.
    """
    models, codenames = {}, {}
    for soc in socs.catalog():
        for name in (soc.model, *soc.aliases):
            models[name.upper()] = soc.model
        for c in soc.codenames:
            codenames[c.lower()] = soc.model
    return models, codenames


def identify(device: Device) -> tuple[str | None, str | None]:
    """(SoC, how it was found): the SoC model first, else the board platform codename through the catalog."""
    models, codenames = soc_tables()
    raw = (device.soc_model or "").strip()
    if raw and raw.lower() != "unknown":  # Build.SOC_MODEL is "unknown" when the vendor did not set it
        via = "Build.SOC_MODEL" if device.sdk_int >= SOC_MODEL_SINCE_SDK else "ro.soc.model"
        return models.get(raw.upper(), raw.upper()), via
    platform = (device.board_platform or "").strip().lower()
    if platform:
        return codenames.get(platform), "ro.board.platform"
    return None, None


def adsp_library_path(skel_dir: str, current: str | None) -> str:
    """The Skel folder first, then the existing entries, then the vendor DSP folders; ';'-separated, no repeats."""
    entries = [skel_dir, *(current or "").split(";"), *VENDOR_DSP_FOLDERS]
    out: list[str] = []
    for e in entries:
        if e.strip() and e not in out:
            out.append(e)
    return ";".join(out)


def qnn_libraries(dsp_arch: str) -> tuple[str, str, str, str]:
    """(backend, system, stub, skel) file names. QNN loads the Stub and the Skel by these exact names."""
    n = dsp_arch[1:]
    return BACKEND_LIB, SYSTEM_LIB, f"libQnnHtpV{n}Stub.so", f"libQnnHtpV{n}Skel.so"


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _cpu(manifest: Mapping, soc: str | None, via: str | None, reason: str, adsp: str | None = None) -> Decision:
    """The CPU models to load, and every CPU file to put beside them: the models and their external data."""
    cpu = manifest.get("cpu") if isinstance(manifest.get("cpu"), list) else []
    return Decision("cpu", soc, via, reason, paths={a["graph"]: a["path"] for a in cpu if a.get("format") == ONNX},
                    files=[a["path"] for a in cpu], adsp_library_path=adsp)


def decide(manifest: Mapping, device: Device, *, load_errors: Mapping[str, str], lib_dir: str,
           adsp_before: str | None = None, npu_format: str = CONTEXT_BINARY, app_version: str = "",
           remembered: Remembered | None = None) -> Decision:
    """NPU only when the SoC matches a bundle target AND the QNN libraries load; otherwise CPU, always with a reason.

    load_errors: library file name -> the loader's message, for each library that failed to load (on a phone:
    what System.loadLibrary threw); a library not in it loaded. lib_dir: the folder holding the app's native
    libraries, where the Skel is. adsp_before: ADSP_LIBRARY_PATH before the app touched it.
    """
    soc, via = identify(device)
    fmt, version = manifest.get("format"), manifest.get("format_version")
    if fmt != FORMAT or type(version) is not int or not 1 <= version <= FORMAT_VERSION:
        return Decision("cpu", soc, via, f"bundle manifest format {_json(fmt)} version {_json(version)} is not "
                        f"supported (this app reads \"{FORMAT}\" versions 1 to {FORMAT_VERSION}): scaffold again")
    if soc is None:
        if via is None:
            reason = "SoC unknown: the device reports no Build.SOC_MODEL / ro.soc.model and no ro.board.platform"
        else:
            reason = f"SoC unknown: ro.board.platform \"{device.board_platform.strip()}\" is not in the SoC catalog"
        return _cpu(manifest, None, via, reason)

    models, _ = soc_tables()
    targets = manifest.get("targets") or []
    target = next((t for t in targets if models.get(t["soc"].upper(), t["soc"].upper()) == soc), None)
    if target is None:
        listed = ", ".join(t["soc"] for t in targets) or "none"
        return _cpu(manifest, soc, via, f"SoC {soc} is not in the bundle (targets: {listed})")
    paths: dict[str, str] = {}
    for g in manifest.get("graphs") or []:
        art = next((a for a in target["artifacts"] if a["graph"] == g["name"] and a["format"] == npu_format), None)
        if art is None:
            return _cpu(manifest, soc, via, f"target {soc} has no {npu_format} file for graph \"{g['name']}\"")
        paths[g["name"]] = art["path"]
    arch = target["dsp_arch"]
    backend, system, stub, skel = qnn_libraries(arch)
    runtime = manifest.get("runtime") or {}
    if runtime.get("mode") == "bundled":
        shipped = {lib["path"].rsplit("/", 1)[-1] for lib in runtime.get("libs") or []}
        missing = [n for n in (backend, system, stub, skel) if n not in shipped]
        if missing:
            return _cpu(manifest, soc, via, f"the bundle has no {', '.join(missing)} for {soc} ({arch})")
    if remembered is not None and (remembered.app_version, remembered.bundle_version) == (
            app_version, bundle_version(manifest)):
        return _cpu(manifest, soc, via, f"NPU init failed before with this app and bundle version "
                                        f"({remembered.message}); using the CPU until either changes")

    adsp = adsp_library_path(lib_dir, adsp_before)
    failed = [f"{name}: {load_errors[name]}" for name in (system, backend, stub) if name in load_errors]
    if failed:
        return _cpu(manifest, soc, via, f"QNN libraries did not load: {'; '.join(failed)}", adsp)
    return Decision("npu", soc, via, f"SoC {soc} ({arch}) is in the bundle and the QNN libraries loaded",
                    dsp_arch=arch, paths=paths, files=[a["path"] for a in target["artifacts"]],
                    backend_lib=backend, system_lib=system, adsp_library_path=adsp)

"""The on-device decision, NPU or CPU, as a pure function: the same steps the generated Kotlin selector runs.

`device info/verify` use it to say what an app will do on a phone; tests/scaffold/test_kotlin.py feeds the same
inputs to this function and to the Kotlin selector and requires identical results, reason strings included. So every
rule here has a twin in templates/glue/kotlin/common/QnnSelector.kt: change both or neither. The reason strings
themselves have one source, data/reasons.json, which this module reads and `qnndeploy scaffold` renders into the
Kotlin (Generated.kt).

Text is normalised with ASCII rules only (trim ASCII whitespace, upper/lower-case ASCII letters) on both sides:
Python's and the JVM's Unicode tables differ (U+0085 is whitespace to Python, not to Java), so Unicode rules would
let the twins disagree on odd device properties.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import NamedTuple

from qnndeploy.base import socs
from qnndeploy.base.htparch import HtpArch
from qnndeploy.base.names import FORMAT, FORMAT_VERSION
from qnndeploy.base.socs import lower, trim, upper
from qnndeploy.formats.manifest import FileFormat, Manifest, OnDevice, Provider, Target

BACKEND_LIB, SYSTEM_LIB = "libQnnHtp.so", "libQnnSystem.so"
ADSP_VAR = "ADSP_LIBRARY_PATH"
# Where the DSP loader looks when ADSP_LIBRARY_PATH is unset. Setting the variable replaces that default, so these
# are kept after the app's own folder, or the device's own DSP libraries would no longer be found.
VENDOR_DSP_FOLDERS = ("/vendor/lib/rfsa/adsp", "/vendor/dsp/cdsp", "/system/lib/rfsa/adsp",
                      "/system/vendor/lib/rfsa/adsp", "/dsp")
SOC_MODEL_SINCE_SDK = 31  # Build.SOC_MODEL exists from Android 12
# A QAIRT version as the decision compares it: X.Y.Z, ASCII digits only, at most 9 per part (an Int in Kotlin).
# Anything else (no trimming, no fourth part, no sign) is not a version: the twin's Regex is the same.
_VERSION = re.compile(r"[0-9]{1,9}\.[0-9]{1,9}\.[0-9]{1,9}")


def template_fields(template: str) -> list[str]:
    """The {field} names of a reason template, in order of first appearance; only plain names are allowed."""
    names: list[str] = []
    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise ValueError(f"reason template field {{{name}}} must be a plain name: {template!r}")
        if name not in names:
            names.append(name)
    return names


def _load_reasons() -> dict[str, dict[str, str]]:
    raw = json.loads(resources.files("qnndeploy").joinpath("data/reasons.json").read_text(encoding="utf-8"))
    groups = {group: raw[group] for group in ("decide", "app")}
    for templates in groups.values():
        for template in templates.values():
            template_fields(template)
    return groups


REASONS = _load_reasons()  # group ("decide" or "app") -> reason key -> template


class Reason(NamedTuple):
    key: str  # a key of data/reasons.json
    text: str


def reason(key: str, **fields: object) -> Reason:
    """The decision's reason `key` of data/reasons.json, filled in; the fields must be exactly the template's."""
    template = REASONS["decide"][key]
    if sorted(fields) != sorted(template_fields(template)):
        raise ValueError(f"reason {key} takes {template_fields(template)}, not {sorted(fields)}")
    return Reason(key, template.format(**fields))


@dataclass(frozen=True)
class DeviceIdentity:
    """What a phone says about its chip: ro.soc.model (Build.SOC_MODEL), ro.board.platform, the SDK level."""

    soc_model: str | None
    board_platform: str | None
    sdk_int: int

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> DeviceIdentity:
        """From a phone's `getprop` output; an empty prop counts as unset, an SDK level that is not 1-4 ASCII digits
        as 0 (unknown)."""
        sdk = props.get("ro.build.version.sdk", "").strip()
        return cls(props.get("ro.soc.model") or None, props.get("ro.board.platform") or None,
                   int(sdk) if re.fullmatch(r"[0-9]{1,4}", sdk) else 0)  # ASCII digits: int() takes '²' and 5,000


class SocIdentity(NamedTuple):
    """The phone's SoC (the catalog model, or what the phone reported) and the property that said so."""

    soc: str | None  # None: unknown
    identified_by: str | None  # Build.SOC_MODEL, ro.soc.model or ro.board.platform; None: the phone reports none


class QnnLibraries(NamedTuple):
    """The QNN library file names of one HTP arch; QNN loads the Stub and the Skel by these exact names."""

    backend: str
    system: str
    stub: str
    skel: str


class Platform(NamedTuple):
    """What the loaded QNN HTP backend reports as the phone's platform (QnnDevice platform info): asked only when the
    phone's SoC is not in the catalog. On a phone, reading it takes QnnDevice_getPlatformInfo through JNI, which the
    glue does not ship: the app passes what it knows."""

    soc_model: int  # QNN's soc_model number (a catalog SoC's soc_id)
    dsp_arch: str  # "v81"


class NpuSource(StrEnum):
    """Where an NPU decision's model comes from: a context binary compiled for the SoC, or the ONNX compiled on the
    phone by ONNX Runtime's QNN EP (a SoC without a target, whose HTP arch the bundle validated)."""

    PREBUILT = "prebuilt"
    ON_DEVICE = "on-device"


@dataclass(frozen=True)
class Remembered:
    """A failed NPU init the app recorded; it counts only while the app and the bundle are the same versions."""

    app_version: str
    bundle_version: str
    message: str


@dataclass(frozen=True)
class Decision:
    provider: Provider
    soc: str | None  # the catalog model (SM8750 for an SM8750P), or what the device reported
    identified_by: str | None  # Build.SOC_MODEL, ro.soc.model or ro.board.platform
    reason: str
    reason_key: str  # the reason's key in data/reasons.json
    dsp_arch: str | None = None  # of the chosen target (NPU only)
    # the chosen target's QNN soc_model number (its manifest "soc_id"; NPU only): the glue passes it, and the arch,
    # to the QNN EP, whose own SoC detection fails on some phones (QNN_DEVICE_ERROR_INVALID_CONFIG on SM8750-AC)
    soc_id: int | None = None
    paths: dict[str, str] = field(default_factory=dict)  # graph -> bundle path of the model to load
    files: list[str] = field(default_factory=list)  # every bundle file this decision needs on the phone
    backend_lib: str | None = None
    system_lib: str | None = None
    adsp_library_path: str | None = None  # the value set before loading the QNN libraries, if it was set
    runtime_version: str | None = None  # the QAIRT version of the loaded libQnnHtp.so, once the libraries loaded
    cpu_graphs: list[str] = field(default_factory=list)  # on the NPU: the graphs that run on the CPU all the same
    npu_source: NpuSource | None = None  # NPU only
    compile_budget_s: float | None = None  # on-device only: the first run's compile budget
    ep_options: dict[str, dict[str, str]] = field(default_factory=dict)  # on-device only: graph -> its QNN EP options

    @property
    def npu(self) -> bool:
        return self.provider == Provider.NPU


@cache
def soc_tables() -> tuple[Mapping[str, str], Mapping[str, str]]:
    """(SOC_MODEL value -> catalog model, ro.board.platform codename -> catalog model), from the one catalog.

    The Kotlin selector gets the same two tables, generated from these by `qnndeploy scaffold`.
    """
    models, codenames = {}, {}
    for soc in socs.catalog():
        for name in (soc.model, *soc.aliases):
            models[upper(name)] = soc.model
        for c in soc.codenames:
            codenames[lower(c)] = soc.model
    return models, codenames


def identify(device: DeviceIdentity) -> SocIdentity:
    """The SoC model first, else the board platform codename through the catalog."""
    models, codenames = soc_tables()
    raw = trim(device.soc_model or "")
    if raw and lower(raw) != "unknown":  # Build.SOC_MODEL is "unknown" when the vendor did not set it
        via = "Build.SOC_MODEL" if device.sdk_int >= SOC_MODEL_SINCE_SDK else "ro.soc.model"
        return SocIdentity(models.get(upper(raw), upper(raw)), via)
    platform = lower(trim(device.board_platform or ""))
    if platform:
        return SocIdentity(codenames.get(platform), "ro.board.platform")
    return SocIdentity(None, None)


def adsp_library_path(skel_dir: str, current: str | None) -> str:
    """The Skel folder first, then the existing entries, then the vendor DSP folders; ';'-separated, no repeats."""
    entries = [skel_dir, *(current or "").split(";"), *VENDOR_DSP_FOLDERS]
    out: list[str] = []
    for e in entries:
        if trim(e) and e not in out:
            out.append(e)
    return ";".join(out)


def qnn_libraries(dsp_arch: str) -> QnnLibraries:
    """The library names for an HTP arch: v79 -> libQnnHtpV79Stub.so. One leading "v" is dropped if there is one
    (as Kotlin's removePrefix("v")), so any string gives the same names on both sides."""
    n = dsp_arch.removeprefix("v")
    return QnnLibraries(BACKEND_LIB, SYSTEM_LIB, f"libQnnHtpV{n}Stub.so", f"libQnnHtpV{n}Skel.so")


def bundled_backend(manifest: Manifest) -> str | None:
    """The bundle path of the libQnnHtp.so a bundle ships (runtime mode "bundled"); None for an external runtime."""
    return next((lib.path for lib in manifest.runtime.libs if manifest.runtime.bundled
                 and lib.path.rsplit("/", 1)[-1] == BACKEND_LIB), None)


def version_key(text: object) -> tuple[int, int, int] | None:
    """(X, Y, Z) of a well-formed "X.Y.Z" version, compared as numbers (2.9.0 < 2.49.0); None for anything else."""
    if not isinstance(text, str) or _VERSION.fullmatch(text) is None:
        return None
    x, y, z = (int(part) for part in text.split("."))
    return x, y, z


def runtime_too_old(runtime: str, required: str) -> bool:
    """Refuse the NPU only when both versions are known and well-formed and the runtime is older: an unknown or
    malformed version on either side refuses nothing (a failing NPU init still falls back, and is remembered)."""
    have, need = version_key(runtime), version_key(required)
    return have is not None and need is not None and have < need


@cache
def arch_min_qairt() -> dict[str, str]:
    """HTP arch ("v81") -> the oldest QAIRT release measured to compile for it on the host (socs.json "measured"):
    the on-device path refuses a runtime known to be older, since nothing shows it can. Only measured arches appear;
    the Kotlin selector gets the same table (Generated.kt)."""
    oldest: dict[str, str] = {}
    for soc in socs.catalog():
        for row in soc.measured:
            key = version_key(row.qairt)
            if row.arch is None or key is None:
                continue
            arch = str(HtpArch(row.arch))
            if arch not in oldest or key < version_key(oldest[arch]):  # type: ignore[operator]
                oldest[arch] = row.qairt
    return dict(sorted(oldest.items()))


def cpu_asked(manifest: Manifest, target: Target) -> tuple[str, str] | None:
    """(graph, reason) when the bundle asks for the CPU on this target: its accepted_on is "cpu" (bundle --accept-on
    cpu) and a graph's failed validation was accepted with a reason, the first such graph in the manifest's order.
    None otherwise: accepted_on alone, or any other value, asks nothing."""
    if target.accepted_on != Provider.CPU:
        return None
    return next(((g.name, target.accepted[g.name]) for g in manifest.graphs if g.name in target.accepted), None)


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _cpu(manifest: Manifest, identity: SocIdentity, why: Reason, adsp: str | None = None,
         runtime_version: str | None = None) -> Decision:
    """The CPU models to load, and every CPU file to put beside them: the models and their external data."""
    return Decision(provider=Provider.CPU, soc=identity.soc, identified_by=identity.identified_by, reason=why.text,
                    reason_key=why.key, paths={a.graph: a.path for a in manifest.cpu if a.format == FileFormat.ONNX},
                    files=[a.path for a in manifest.cpu], adsp_library_path=adsp, runtime_version=runtime_version)


def decide(manifest: Manifest, device: DeviceIdentity, *, load_errors: Mapping[str, str], lib_dir: str,
           adsp_before: str | None = None, adsp_error: str | None = None,
           npu_format: FileFormat = FileFormat.QNN_CONTEXT_BINARY,
           app_version: str = "", remembered: Remembered | None = None,
           runtime_version: str | None = None, platform: Platform | None = None,
           compiles_onnx: bool = True) -> Decision:
    """NPU only when the SoC matches a bundle target that does not ask for the CPU (cpu_asked) AND the QNN libraries
    load; otherwise CPU, always with a reason.

    load_errors: library file name -> the loader's message, for each library that failed to load (on a phone:
    what System.loadLibrary threw); a library not in it loaded. lib_dir: the folder holding the app's native
    libraries, where the Skel is. adsp_before: ADSP_LIBRARY_PATH before the app touched it. adsp_error: the message
    of the failure to set ADSP_LIBRARY_PATH (on a phone: what Os.setenv threw), None when it was set.
    runtime_version: the QAIRT version ("2.51.0") of the libQnnHtp.so that loaded, None when unknown; it matters,
    and is recorded, only once the libraries loaded. A runtime older than the manifest's qairt.min_runtime cannot
    load the context binaries ("Could not create context from binary"): CPU.
    The manifest is one that follows the schema (scaffold and `bundle verify` check it) or has a format or version
    this reader does not know (Manifest.parse gives only those).
    A SoC without a target takes the NPU only through the manifest's on_device section (_on_device); platform: what
    the QNN backend reports, used for its HTP arch when the SoC is not in the catalog; compiles_onnx: whether the
    app's engine can compile the ONNX on the phone (ONNX Runtime's QNN EP can; sherpa-onnx's engine runs context
    binaries only). `device` commands model the ONNX Runtime app.
    """
    identity = identify(device)
    if not manifest.supported:
        why = reason("format_unsupported", format=_json(manifest.format), version=_json(manifest.format_version),
                     expected_format=FORMAT, max_version=str(FORMAT_VERSION))
        return Decision(provider=Provider.CPU, soc=identity.soc, identified_by=identity.identified_by, reason=why.text,
                        reason_key=why.key)
    soc = identity.soc
    libraries = _Libraries(load_errors, lib_dir, adsp_before, adsp_error, app_version, remembered, runtime_version)
    if soc is None:
        if manifest.on_device is not None and platform is not None:
            return _on_device(manifest, manifest.on_device, identity, f"soc_model {platform.soc_model}",
                              platform.dsp_arch, platform.soc_model, libraries, compiles_onnx)
        if identity.identified_by is None:
            return _cpu(manifest, identity, reason("soc_unreported"))
        return _cpu(manifest, identity, reason("soc_not_in_catalog", platform=trim(device.board_platform or "")))

    # Target names are not trimmed: the schema allows none with whitespace, and the reason lists them as written.
    models, _ = soc_tables()
    target = next((t for t in manifest.targets if models.get(upper(t.soc), upper(t.soc)) == soc), None)
    if target is None:
        if manifest.on_device is None:
            return _cpu(manifest, identity, reason("soc_not_in_bundle", soc=soc, targets=_targets(manifest)))
        known = next((s for s in socs.catalog() if s.model == soc), None)
        if known is not None:
            return _on_device(manifest, manifest.on_device, identity, soc, known.dsp_arch, known.soc_id, libraries,
                              compiles_onnx)
        if platform is not None:
            return _on_device(manifest, manifest.on_device, identity, soc, platform.dsp_arch, platform.soc_model,
                              libraries, compiles_onnx)
        return _cpu(manifest, identity, reason("arch_unknown", soc=soc))
    # A graph that failed validation, shipped for the CPU on this SoC: decided before any library is touched.
    asked = cpu_asked(manifest, target)
    if asked is not None:
        return _cpu(manifest, identity, reason("validation_failed", graph=asked[0], soc=soc, reason=asked[1]))
    paths: dict[str, str] = {}
    cpu_graphs = manifest.cpu_only
    cpu = [a for a in manifest.cpu if a.graph in cpu_graphs]
    for g in manifest.graphs:
        if g.cpu_only:  # a split model's part that always runs on the CPU
            art = next((a for a in cpu if a.graph == g.name and a.format == FileFormat.ONNX), None)
            if art is None:
                return _cpu(manifest, identity, reason("graph_file_missing", soc=soc, format=FileFormat.ONNX,
                                                       graph=g.name))
            paths[g.name] = art.path
            continue
        art = next((a for a in target.artifacts if a.serves(g.name) and a.format == npu_format), None)
        if art is None:
            return _cpu(manifest, identity, reason("graph_file_missing", soc=soc, format=npu_format, graph=g.name))
        paths[g.name] = art.path
    arch = target.dsp_arch
    libs = qnn_libraries(arch)
    adsp = libraries.load(manifest, identity, soc, arch)
    if isinstance(adsp, Decision):
        return adsp
    required = manifest.qairt.min_runtime
    if runtime_version is not None and required is not None and runtime_too_old(runtime_version, required):
        return _cpu(manifest, identity, reason("runtime_too_old", runtime=runtime_version, required=required), adsp,
                    runtime_version)
    why = reason("npu", soc=soc, arch=arch)
    return Decision(provider=Provider.NPU, soc=soc, identified_by=identity.identified_by, reason=why.text,
                    reason_key=why.key, dsp_arch=arch, soc_id=target.soc_id, paths=paths,
                    files=[a.path for a in [*target.artifacts, *cpu]],
                    backend_lib=libs.backend, system_lib=libs.system, adsp_library_path=adsp,
                    runtime_version=runtime_version, cpu_graphs=cpu_graphs, npu_source=NpuSource.PREBUILT)


def _targets(manifest: Manifest) -> str:
    return ", ".join(t.soc for t in manifest.targets) or "none"


@dataclass(frozen=True)
class _Libraries:
    """The phone's side of loading the QNN libraries, the same for both NPU paths (decide's arguments)."""

    load_errors: Mapping[str, str]
    lib_dir: str
    adsp_before: str | None
    adsp_error: str | None
    app_version: str
    remembered: Remembered | None
    runtime_version: str | None

    def load(self, manifest: Manifest, identity: SocIdentity, soc: str, arch: str) -> Decision | str:
        """The CPU decision when the arch's libraries are not shipped, an NPU init failed before, ADSP_LIBRARY_PATH
        cannot be set or a library did not load; else the ADSP_LIBRARY_PATH value that was set."""
        libs = qnn_libraries(arch)
        if manifest.runtime.bundled:
            shipped = {lib.path.rsplit("/", 1)[-1] for lib in manifest.runtime.libs}
            missing = [n for n in libs if n not in shipped]
            if missing:
                return _cpu(manifest, identity, reason("runtime_libs_missing", libs=", ".join(missing), soc=soc,
                                                       arch=arch))
        if self.remembered is not None and (self.remembered.app_version, self.remembered.bundle_version) == (
                self.app_version, manifest.bundle_version):
            return _cpu(manifest, identity, reason("failed_before", message=self.remembered.message))
        # The Skel runs on the DSP, which finds it through ADSP_LIBRARY_PATH: set it before any QNN library loads.
        adsp = adsp_library_path(self.lib_dir, self.adsp_before)
        if self.adsp_error is not None:
            return _cpu(manifest, identity, reason("adsp_not_set", error=self.adsp_error))
        failed = [f"{name}: {self.load_errors[name]}" for name in (libs.system, libs.backend, libs.stub)
                  if name in self.load_errors]
        if failed:
            return _cpu(manifest, identity, reason("libs_not_loaded", failures="; ".join(failed)), adsp)
        return adsp


def _on_device(manifest: Manifest, on_device: OnDevice, identity: SocIdentity, soc: str, arch: str, soc_id: int,
               libraries: _Libraries, compiles_onnx: bool) -> Decision:
    """A SoC without a target, of HTP arch `arch`: the NPU from the ONNX the phone compiles, when the app's engine
    compiles ONNX, every graph's compile was validated for that arch and the libraries load; else the CPU. `soc`
    names the SoC in the reasons."""
    if not compiles_onnx:
        return _cpu(manifest, identity, reason("on_device_needs_ort", soc=soc, arch=arch, targets=_targets(manifest)))
    paths: dict[str, str] = {}
    files: list[str] = []
    options: dict[str, dict[str, str]] = {}
    for g in manifest.graphs:
        if g.cpu_only:
            continue
        entry = on_device.graph(g.name)
        if entry is None or arch not in entry.validated:
            validated = ", ".join(entry.validated) if entry is not None and entry.validated else "none"
            return _cpu(manifest, identity, reason("not_validated_on_device", soc=soc, arch=arch,
                                                   targets=_targets(manifest), validated=validated))
        pool = manifest.cpu if any(a.path == entry.path for a in manifest.cpu) else on_device.artifacts
        if not any(a.path == entry.path and a.format == FileFormat.ONNX for a in pool):
            return _cpu(manifest, identity, reason("graph_file_missing", soc=soc, format=FileFormat.ONNX,
                                                   graph=g.name))
        paths[g.name] = entry.path
        files += [a.path for a in pool if a.graph == g.name]
        options[g.name] = dict(entry.ep_options)
    cpu_graphs = manifest.cpu_only
    for a in manifest.cpu:
        if a.graph in cpu_graphs:
            files.append(a.path)
            if a.format == FileFormat.ONNX:
                paths[a.graph] = a.path
    adsp = libraries.load(manifest, identity, soc, arch)
    if isinstance(adsp, Decision):
        return adsp
    required, runtime = arch_min_qairt().get(arch), libraries.runtime_version
    if runtime is not None and required is not None and runtime_too_old(runtime, required):
        return _cpu(manifest, identity, reason("runtime_too_old_for_arch", runtime=runtime, required=required,
                                               arch=arch), adsp, runtime)
    libs = qnn_libraries(arch)
    why = reason("npu_on_device", soc=soc, arch=arch)
    return Decision(provider=Provider.NPU, soc=identity.soc, identified_by=identity.identified_by, reason=why.text,
                    reason_key=why.key, dsp_arch=arch, soc_id=soc_id, paths=paths, files=files,
                    backend_lib=libs.backend, system_lib=libs.system, adsp_library_path=adsp,
                    runtime_version=runtime, cpu_graphs=cpu_graphs, npu_source=NpuSource.ON_DEVICE,
                    compile_budget_s=on_device.budget_s, ep_options=options)

"""`package play`: a verified bundle as a Google Play AI pack whose device groups follow the bundle's SoCs.

One APK with every SoC's context binaries sends each phone every other SoC's files. An AI pack split by device group
sends each phone one group's: Play matches Build.SOC_MANUFACTURER / Build.SOC_MODEL against the group's
system-on-chip selectors (bundletool's device_targeting_config.proto; Play for On-device AI documentation).

What goes where:
- the pack (assets qnndeploy_npu#group_<g>/): the NPU files of the group's targets, and group.json naming the group
  (Play strips the #group_ suffix, so a phone could not tell otherwise). A group whose files pass Play's limit for
  one pack (a large model's parts) spreads them over more packs, <pack>_2 with folder qnndeploy_npu_2 and so on,
  each file whole in one; every pack has every group's folder, so each can say which group it is;
- the base module: manifest.json, the CPU models, and the QNN runtime libraries. The CPU model is every phone's
  fallback and must be there while a fast-follow or on-demand pack downloads (CPU models that would take the base
  past Play's 500 MB go to install-time asset packs <pack>_cpu, ... at the same asset paths: they still come with
  the app, and a phone reads install-time packs as its assets); the runtime libraries are native
  libraries, which AI packs may not carry (the app loads libQnnHtp, libQnnSystem and the Stub with the system
  loader, and the Skel travels with them in nativeLibraryDir, the folder ADSP_LIBRARY_PATH starts with);
- the default group ("other"): group.json only. Phones no group selects (other SoCs, Android 11 and older, where
  Play sees no SoC) download no NPU file and run the CPU model from the base. A bundle that compiles on the device
  (manifest "on_device") keeps those phones on the NPU: the ONNX models the phone compiles are the base's (the CPU
  models, or on_device's own artifacts, which go to the base too), and the runtime libraries of every arch the
  bundle ships are there already; the plan's "on_device" and the size report's row say so.
"""

from __future__ import annotations

import hashlib
import json
import string
import zlib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from xml.sax.saxutils import quoteattr

from qnndeploy.base import codegen, compat
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.base.fileio import (
    CHUNK,
    ByteProgress,
    Expected,
    check_apart,
    check_replaceable,
    check_writable,
    copy_verified,
    name_max,
    open_regular,
    staging_dir,
    write_json,
    writing,
)
from qnndeploy.base.htparch import HtpArch
from qnndeploy.base.names import APP_ASSETS, MANIFEST
from qnndeploy.base.socs import find
from qnndeploy.formats.manifest import FileFormat, Manifest, read_manifest, verified_bytes
from qnndeploy.formats.playplan import (
    CONFIG,
    CONFIG_NS,
    DEFAULT_GROUP,
    FOLDER,
    GROUP_FILE,
    NAME,
    PLAN,
    Delivery,
    PlanBase,
    PlanCpuPack,
    PlanFile,
    PlanGroup,
    PlanOnDevice,
    PlanPack,
    PlayPlan,
    group_file,
    group_name,
    selectors,
)
from qnndeploy.verification.checks import VerifyReport, require_ok, verify_folder

DELIVERIES = tuple(d.value for d in Delivery)  # the --delivery choices
DEFAULT_PACK = "qnndeploy_models"
MARKER = ".qnndeploy-play"  # in every output folder: what --force may replace
# Play's size limits (data/play_limits.json, with its source), in bytes of compressed download
_LIMITS = json.loads(resources.files("qnndeploy").joinpath("data/play_limits.json").read_text(encoding="utf-8"))
BASE_LIMIT = int(_LIMITS["limits"]["base_module"]["bytes"])
PACK_LIMIT = int(_LIMITS["limits"]["asset_pack"]["bytes"])  # an AI pack's
APP_LIMIT = int(_LIMITS["limits"]["modules_and_install_time_packs"]["bytes"])  # the base and install-time packs
# A device group may have 5 selectors; qnndeploy writes one per group, listing every SoC of the group (the
# system-on-chip elements of one selector are alternatives), so that limit is never reached.
DEFLATE_LEVEL = 6  # zlib's default, the level of APK and AAB entries: the estimate of what a phone downloads


@dataclass
class SizeRow:
    group: str
    socs: list[str]
    files: int
    bytes: int  # base + this group's pack files: what a phone of the group gets
    deflated: int
    on_device: bool = False  # the default group of a bundle that compiles on the device: its phones reach the NPU


@dataclass
class PlayPackage:
    path: Path
    pack: str
    delivery: Delivery
    plan: PlayPlan  # what play.json holds (plan.to_json() is the file)
    rows: list[SizeRow]  # one per group, then the default group
    one_apk_bytes: int
    one_apk_deflated: int
    lines: list[str] = field(default_factory=list)  # what to add to the app project
    license: str | None = None  # the model's licence, as the bundle says it (None: not given)



def check_request(out: Path, *, pack: str, delivery: str, force: bool, bundle: Path | None = None) -> None:
    """The checks that need no bundle's contents, before anything is read or written: the options, and an output
    that can be written (fileio.check_writable), may be replaced and is apart from the bundle (not in it, not
    holding it)."""
    if not NAME.fullmatch(pack):
        raise QnnDeployError(f"invalid AI pack name '{pack}': Play wants a letter first, then letters, digits or "
                             "underscores (e.g. qnndeploy_models)")
    limit = name_max(Path(out).parent)
    if len(pack) > limit:
        raise QnnDeployError(f"the AI pack name has {len(pack)} characters, over the file system's limit of "
                             f"{limit} for a folder name: give a shorter --pack")
    if delivery not in DELIVERIES:
        raise QnnDeployError(f"unknown delivery '{delivery}'; use one of {', '.join(DELIVERIES)}")
    check_writable(Path(out))
    check_apart(Path(out), [("bundle", bundle)])
    check_replaceable(Path(out), force, MARKER, "package play")


def package_play(bundle: Path, out: Path, *, pack: str = DEFAULT_PACK, delivery: str = Delivery.FAST_FOLLOW,
                 force: bool = False, report: VerifyReport | None = None,
                 progress: ByteProgress | None = None) -> PlayPackage:
    """Write the AI pack module, the device targeting config, the app's Gradle snippet and play.json for a bundle
    that passes `bundle verify`. progress: called with byte counts while files are hashed and deflated.

    What is published is what was verified: every bundle file is read (for the plan's sizes) and copied (into
    the pack) through O_NOFOLLOW opens below the bundle folder, and must have the sha256 and size the verified
    manifest lists, else the run stops ("changed since it was verified") and nothing is published."""
    bundle, out = Path(bundle), Path(out)
    check_request(out, pack=pack, delivery=delivery, force=force, bundle=bundle)
    when = Delivery(delivery)
    library = compat.gradle_library("ai_delivery")
    report = report if report is not None else verify_folder(bundle)
    require_ok(bundle, report, "packaging it")
    manifest = read_manifest(bundle)
    if not manifest.targets:
        raise QnnDeployError(f"{bundle} has no NPU target: an AI pack split by SoC needs at least one")
    sizes = _Sizes(bundle, manifest, progress)
    plan = _plan(bundle, manifest, pack, when, sizes)
    _check_limits(plan, out)
    groups, base = plan.groups, plan.base
    app = SizeRow(plan.default_group, [], len(plan.installed), sum(f.size for f in plan.installed),
                  base.deflated + sum(p.deflated for p in plan.cpu_packs), on_device=plan.on_device is not None)
    rows = [SizeRow(g.name, list(g.socs), app.files + len(g.files), app.bytes + g.bytes, app.deflated + g.deflated)
            for g in groups] + [app]  # every phone gets `app`, the default group's phones nothing more
    fields = {"pack": pack, "delivery": delivery, "bundle": manifest.bundle_version,
              "folder": FOLDER, "config": CONFIG, "default_group": plan.default_group,
              "asset_packs": ", ".join(f"':{name}'" for name in plan.modules),
              "where_notes": _where_notes(plan),
              "min_agp": compat.gradle_library("device_targeting_min_agp").version,
              "ai_delivery": library.version, "ai_delivery_source": library.source,
              "ai_delivery_read": library.read, "table": _readme_table(rows, plan.one_apk_deflated),
              "licences": _licences_text(manifest)}
    empty = out.is_dir() and not any(out.iterdir())  # as good as none: exchanged for the output, kept on failure
    with writing(out), staging_dir(out, force or empty, tidy=True) as tmp:
        (tmp / MARKER).write_text("written by qnndeploy package play; --force replaces this folder\n")
        for p in plan.packs:
            assets = tmp / p.name / "src" / "main" / "assets"
            for name, files in [*((g.name, g.files) for g in groups), (plan.default_group, ())]:
                folder = assets / f"{p.folder}#group_{name}"
                folder.mkdir(parents=True)
                (folder / GROUP_FILE).write_text(group_file(name))
                for f in files:
                    if f.pack != p.name:
                        continue
                    dest = folder / f.path
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    copy_verified(bundle / f.path, dest, expect=Expected(f.sha256, f.size), beneath=bundle,
                                  what="bundle file")
            (tmp / p.name / "build.gradle").write_text(_render("build.gradle", **{**fields, "pack": p.name,
                                                                                   "folder": p.folder}))
        for c in plan.cpu_packs:  # at the base's asset paths: a phone merges install-time packs into the assets
            for f in c.files:
                dest = tmp / c.name / "src" / "main" / "assets" / APP_ASSETS / f.path
                dest.parent.mkdir(parents=True, exist_ok=True)
                copy_verified(bundle / f.path, dest, expect=Expected(f.sha256, f.size), beneath=bundle,
                              what="bundle file")
            (tmp / c.name / "build.gradle").write_text(_render("cpu_pack.gradle", **{**fields, "pack": c.name}))
        for name, dest in (("play.gradle", tmp / "play.gradle"), ("README.md", tmp / "README.md")):
            dest.write_text(_render(name, **fields))
        (tmp / CONFIG).write_text(config_xml(plan))
        write_json(tmp / PLAN, plan.to_json())

    lines = [
        *(f'settings.gradle(.kts): include(":{name}") and project(":{name}").projectDir = file("{out / name}")'
          for name in plan.modules),
        f'app build.gradle(.kts): apply(from = "{out / "play.gradle"}")',
        "gradle.properties: android.experimental.enableDeviceTargetingConfigApi=true",
        f"glue: qnndeploy scaffold BUNDLE --play {out} --package <your.app> -o app/qnndeploy",
    ]
    return PlayPackage(path=out, pack=pack, delivery=when, plan=plan, rows=rows, license=manifest.source.license,
                       one_apk_bytes=plan.one_apk_bytes, one_apk_deflated=plan.one_apk_deflated,
                       lines=lines)


class _Sizes:
    """sha256, size and deflated size of bundle files, each read once, through O_NOFOLLOW opens below the bundle
    folder; each must be what the verified manifest lists. The manifest itself is read once, as bytes, and must
    parse to the manifest the plan is made from: the plan's manifest_sha256 is that of those bytes."""

    def __init__(self, bundle: Path, manifest: Manifest, progress: ByteProgress | None) -> None:
        self.bundle = bundle
        self.progress = progress
        self.listed = {e.path: (e.sha256, e.size) for _, e in manifest.files()}
        self._seen: dict[str, tuple[str, int, int]] = {}
        raw = verified_bytes(bundle, manifest)
        self._seen[MANIFEST] = (hashlib.sha256(raw).hexdigest(), len(raw), len(zlib.compress(raw, DEFLATE_LEVEL)))

    def entry(self, path: str) -> PlanFile:
        sha, size, _ = self._read(path)
        return PlanFile(path, size, sha)

    def deflated(self, path: str) -> int:
        return self._read(path)[2]

    def _read(self, path: str) -> tuple[str, int, int]:
        if path not in self._seen:
            digest, packer, size, packed = hashlib.sha256(), zlib.compressobj(DEFLATE_LEVEL), 0, 0
            with open_regular(self.bundle / path, what="bundle file", beneath=self.bundle) as f:
                while chunk := f.read(CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    packed += len(packer.compress(chunk))
                    if self.progress is not None:
                        self.progress(len(chunk))
            packed += len(packer.flush())
            if (digest.hexdigest(), size) != self.listed.get(path):
                raise QnnDeployError(f"{self.bundle / path} changed since it was verified (its sha256 or size is "
                                     "not the one the manifest lists); nothing was published from it")
            self._seen[path] = (digest.hexdigest(), size, packed)
        return self._seen[path]


def _plan(bundle: Path, manifest: Manifest, pack: str, delivery: Delivery, sizes: _Sizes) -> PlayPlan:
    """One device group per target, named after its SoC (a bundle lists each file once, so no two targets share
    files that one group could carry for both). A group's SoC is the catalog model, as the decision identifies a
    phone's SoC and matches a target named by an alias (SM8750P). Each group's files go, in the manifest's order,
    to the first pack they fit in (pack_of): one pack unless a group's pass Play's limit for one. The CPU models
    stay in the base module unless it would pass Play's limit for it; then they go to install-time asset packs."""
    groups: list[PlanGroup] = []
    packs = [PlanPack(pack, FOLDER)]
    for t in manifest.targets:
        paths = [a.path for a in t.artifacts]
        where = _pack_of([(p, sizes.deflated(p)) for p in paths])
        packs += [PlanPack(f"{pack}_{n + 1}", f"{FOLDER}_{n + 1}") for n in range(len(packs), max([0, *where]) + 1)]
        files = tuple(replace(sizes.entry(p), pack=packs[n].name) for p, n in zip(paths, where, strict=True))
        soc = find(t.soc).model
        groups.append(PlanGroup(group_name(t.soc), (soc,), t.dsp_arch, tuple(selectors([soc])), files,
                                sum(f.size for f in files), sum(sizes.deflated(p) for p in paths)))
    runtime = manifest.runtime
    base_paths = [MANIFEST, *(a.path for a in manifest.cpu), *(lib.path for lib in runtime.libs),
                  *(t.path for t in (manifest.licences.terms if manifest.licences else ()))]
    models = [a.path for a in manifest.cpu]
    on_device = manifest.on_device
    if on_device is not None:  # the models the phone compiles that are not CPU models: in the base with them
        models += [a.path for a in on_device.artifacts if a.path not in base_paths]
        base_paths += models[len(manifest.cpu):]
    every = base_paths + sorted({f.path for g in groups for f in g.files})
    cpu_packs: tuple[PlanCpuPack, ...] = ()
    if sum(sizes.deflated(p) for p in base_paths) > BASE_LIMIT:
        where = _pack_of([(p, sizes.deflated(p)) for p in models])
        cpu_packs = tuple(_cpu_pack(f"{pack}_cpu" + (f"_{n + 1}" if n else ""),
                                    [p for p, w in zip(models, where, strict=True) if w == n], sizes)
                          for n in range(max(where, default=-1) + 1))
        base_paths = [p for p in base_paths if p not in models]
    base = tuple(sizes.entry(p) for p in base_paths)
    return PlayPlan(
        manifest.name, manifest.version, sizes.entry(MANIFEST).sha256, tuple(packs), delivery, tuple(groups),
        PlanBase(base, sum(f.size for f in base), sum(sizes.deflated(p) for p in base_paths),
                 None if runtime.bundled else runtime.maven),
        sum(sizes.entry(p).size for p in every), sum(sizes.deflated(p) for p in every),
        None if on_device is None else _on_device_plan(manifest, sizes), DEFAULT_GROUP, cpu_packs)


def _cpu_pack(name: str, paths: list[str], sizes: _Sizes) -> PlanCpuPack:
    files = tuple(sizes.entry(p) for p in paths)
    return PlanCpuPack(name, files, sum(f.size for f in files), sum(sizes.deflated(p) for p in paths))


def _pack_of(files: list[tuple[str, int]]) -> list[int]:
    """The pack (0, 1, ...) of each (path, deflated bytes), first fit in order under Play's limit per pack. A file
    cannot be split across packs, so one over the limit is refused."""
    room: list[int] = []
    where = []
    for path, deflated in files:
        if deflated > PACK_LIMIT:
            raise QnnDeployError(f"{path} alone would download {size_text(deflated)} (deflated); Play allows "
                                 f"{size_text(PACK_LIMIT)} per pack and a file goes whole in one: split the model "
                                 "into more parts (prepare --generate ... --parts P) or quantize it")
        n = next((i for i, free in enumerate(room) if deflated <= free), len(room))
        if n == len(room):
            room.append(PACK_LIMIT)
        room[n] -= deflated
        where.append(n)
    return where


def _on_device_plan(manifest: Manifest, sizes: _Sizes) -> PlanOnDevice:
    """What a phone of no group compiles from the base: each graph's ONNX (and the external data beside it), and the
    HTP arches every graph was validated for (the phones of those arches that no group selects reach the NPU)."""
    assert manifest.on_device is not None
    models = [g.path for g in manifest.on_device.graphs]
    listed = {e.path: e for _, e in manifest.files()}
    data = [p for p, e in listed.items() if e.format == FileFormat.ONNX_EXTERNAL_DATA
            and any(e.serves(g.graph) and p.rsplit("/", 1)[0] == g.path.rsplit("/", 1)[0]
                    for g in manifest.on_device.graphs)]
    files = sorted({*models, *data})
    archs = sorted(set.intersection(*(set(g.validated) for g in manifest.on_device.graphs))
                   if manifest.on_device.graphs else set(), key=HtpArch.parse)
    return PlanOnDevice(tuple(files), tuple(archs), manifest.on_device.budget_s,
                        sum(sizes.entry(p).size for p in files), sum(sizes.deflated(p) for p in files))


def _check_limits(plan: PlayPlan, out: Path) -> None:
    limit = name_max(out.parent)
    longest = max(plan.modules, key=len)
    if len(longest) > limit:
        raise QnnDeployError(f"the pack {longest} has a name over the file system's limit of {limit} characters for "
                             "a folder name: give a shorter --pack")
    base = plan.base.deflated
    if base > BASE_LIMIT:  # without the CPU models: the runtime libraries, manifest and licences alone
        raise QnnDeployError(f"the base module would download {size_text(base)} (deflated) without the CPU models; "
                             f"Play allows {size_text(BASE_LIMIT)}")
    cpu = sum(p.deflated for p in plan.cpu_packs)
    npu = max((g.deflated for g in plan.groups), default=0) if plan.delivery == Delivery.INSTALL_TIME else 0
    total = base + cpu + npu
    if total > APP_LIMIT:
        what = ", ".join(f"{name} {size_text(n)}" for name, n in (("base", base), ("CPU models", cpu),
                                                                   ("install-time NPU files", npu)) if n)
        advice = ("deliver the NPU files after install (--delivery fast-follow)" if base + cpu <= APP_LIMIT else
                  "the CPU models, every phone's fallback, are too large for Play (a smaller CPU model, or one "
                  "delivered outside Play, is needed)")
        raise QnnDeployError(f"a phone would download {size_text(total)} with the app ({what}; deflated); Play "
                             f"allows {size_text(APP_LIMIT)} for the modules and install-time packs: {advice}")


def config_xml(plan: PlayPlan) -> str:
    """The device targeting config: one device-group per plan group, in the plan's order (Play's priority order),
    with one device-selector listing every SoC (system-on-chip elements of one selector are alternatives)."""
    out = ['<?xml version="1.0" encoding="utf-8"?>',
           "<!-- Written by qnndeploy package play: one device group per SoC target of the bundle. -->",
           f'<config:device-targeting-config xmlns:config="{CONFIG_NS}">']
    for g in plan.groups:
        out.append(f"    <config:device-group name={quoteattr(g.name)}>")
        out.append("        <config:device-selector>")
        out += [f"            <config:system-on-chip manufacturer={quoteattr(s.manufacturer)} "
                f"model={quoteattr(s.model)}/>" for s in g.selectors]
        out.append("        </config:device-selector>")
        out.append("    </config:device-group>")
    out.append("</config:device-targeting-config>")
    return "\n".join(out) + "\n"


def _where_notes(plan: PlayPlan) -> str:
    """The README's sentences on a plan of several AI packs or with CPU packs: what is where, and why."""
    text = ""
    if len(plan.packs) > 1:
        names = ", ".join(f"`{p.name}` (folder `{p.folder}`)" for p in plan.packs)
        text += (f"\n\nA device group's files pass Play's limit for one AI pack ({size_text(PACK_LIMIT)}), so they are "
                 f"spread over {len(plan.packs)} packs: {names}. Each file goes whole in one pack; every pack has "
                 "every group's folder. A phone gets its group's folder of each, and the glue waits for all of them.")
    if plan.cpu_packs:
        names = ", ".join(f"`{p.name}`" for p in plan.cpu_packs)
        text += (f"\n\nThe CPU models pass Play's limit for the base module ({size_text(BASE_LIMIT)}), so they "
                 f"travel in install-time asset packs ({names}) at the base's asset paths (`{APP_ASSETS}/...`): every "
                 "phone gets them with the app, and the app reads them as before (install-time packs are part of its "
                 "assets).")
    return text


def _licences_text(manifest: Manifest) -> str:
    """The README's licence line: each origin of the bundle's Qualcomm files with its terms files or unknown."""
    if manifest.licences is None:
        return "this bundle (format older than 6) records none: build it again with this qnndeploy."
    shown = "; ".join(codegen.line_comment(o.summary) for o in manifest.licences.origins) or "no Qualcomm file"
    return (f"manifest.json's `licences` says where each Qualcomm file came from: {shown}. The licence files travel "
            "in the app's base module, not in the pack (`qnndeploy scaffold --play` puts them in its assets under "
            "`qnndeploy/licences/`).")


def _render(name: str, **fields: str) -> str:
    """One of data/play/'s files with its $fields filled in (string.Template: Gradle and Markdown keep braces)."""
    text = resources.files("qnndeploy").joinpath(f"data/play/{name}").read_text(encoding="utf-8")
    return string.Template(text).substitute(fields)


def size_text(n: int) -> str:
    return next(f"{n / scale:,.1f} {unit}" for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "KB"), (1, "B"))
                if n >= scale or unit == "B")


ON_DEVICE_ROW = "other phones: on-device compile from the base ONNX"


def _readme_table(rows: list[SizeRow], one_apk_deflated: int) -> str:
    def socs(r: SizeRow) -> str:
        return ", ".join(r.socs) or (f"({ON_DEVICE_ROW})" if r.on_device else "(none: the CPU)")

    return "\n".join(f"| {r.group} | {socs(r)} | {r.files} | {size_text(r.deflated)} | "
                     f"{r.deflated / one_apk_deflated:.0%} |" for r in rows)

"""The Play delivery plan (play.json) that `package play` writes, and the two rules that read it on a phone.

play.json says which device group holds which bundle files and which SoCs each group is for. Two readers use it:
`qnndeploy scaffold --play` (the Kotlin glue gets it as an asset) and `device verify --play` (Python). Both ask the
same two questions, so each rule here has a twin in templates/glue/.../PlayPack.kt (tests/scaffold/test_kotlin.py
requires them to agree):

- play_group: the group Google Play delivers to a phone. Play compares Build.SOC_MANUFACTURER and Build.SOC_MODEL
  with each selector exactly (bundletool's DeviceTargetingConfigEvaluator: protobuf equality, so case and spaces
  count); the first group in the file's order that matches wins; a phone below API 31 has no SoC for Play, and a
  phone matching nothing gets the default group.
- expected_group: the group the on-device decision needs: the one holding the bundle target of the phone's SoC as
  the decision identified it (decision.identify: trimmed, upper-cased, aliases and codenames resolved).

The groups themselves follow one rule, here so that `package play` writes them and `qnndeploy reach` predicts them
from the same copy: one group per bundle target, named after its SoC (group_name), selecting every name phones
report for that SoC (selectors); bundle_groups gives a manifest's groups as play_group reads them.

When the two differ, the phone gets another SoC's files or none, and runs on the CPU although the bundle has its
NPU binaries: the mismatch `device verify --play` reports.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

from qnndeploy.base.errors import BadInput, QnnDeployError
from qnndeploy.base.fields import is_number
from qnndeploy.base.fileio import JSON, read_limited, sha256_file
from qnndeploy.base.socs import find, upper
from qnndeploy.formats import schemas
from qnndeploy.formats.manifest import Manifest

PLAN = "play.json"
PLAN_FORMAT = "qnndeploy-play"
PLAN_VERSION = 2  # 2: several AI packs (packs, each group file's pack) and install-time CPU packs (cpu_packs)
CONFIG = "device_targeting_config.xml"
CONFIG_NS = "http://schemas.android.com/apk/config"  # the XML's namespace (AGP's DeviceTargetingConfigParser)
FOLDER = "qnndeploy_npu"  # the first pack's assets folder (<folder>#group_<g>/ in the module, <folder>/ on a phone)
GROUP_FILE = "group.json"  # in every group's folder: which group a phone got, since Play strips the #group_ suffix
DEFAULT_GROUP = "other"  # what Play gives a phone that matches no group (bundle { deviceGroup { defaultGroup } })
SOC_TARGETING_SINCE_SDK = 31  # Play targets system-on-chip only on Android 12 (API 31) and newer
MANUFACTURERS = ("QTI", "Qualcomm")  # Build.SOC_MANUFACTURER spellings of Qualcomm phones; Play cannot tell which
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")  # AI pack and device group names (bundletool's GROUP_NAME_REGEX)
MAX_PLAN_BYTES = 16 << 20


class Delivery(StrEnum):
    """When Play delivers the AI pack (the plan's "delivery"): with the app, right after install, or when asked."""

    INSTALL_TIME = "install-time"
    FAST_FOLLOW = "fast-follow"
    ON_DEMAND = "on-demand"


class PlaySoc(NamedTuple):
    """A system-on-chip selector: Build.SOC_MANUFACTURER and Build.SOC_MODEL as Play compares them."""

    manufacturer: str
    model: str


class PlayGroup(NamedTuple):
    """A device group of the targeting config: its name and, per selector, the SoCs any of which selects a phone."""

    name: str
    selectors: list[list[PlaySoc]]


@dataclass(frozen=True)
class PlanPack:
    """An AI pack of the plan: its name (Play's and its Gradle module's) and its assets folder, <folder>#group_<g>/
    in the module and <folder>/ on phones. Each pack has its own folder, so install-time packs, which the phone
    merges into the app's assets, never hold one path twice."""

    name: str
    folder: str

    def to_json(self) -> JSON:
        return {"name": self.name, "folder": self.folder}


@dataclass(frozen=True)
class PlanFile:
    """A bundle file the plan puts in a group or the base module, with what the verified manifest lists for it;
    pack: the AI pack that carries it (None in the base module)."""

    path: str
    size: int
    sha256: str
    pack: str | None = None

    def to_json(self) -> JSON:
        return {"path": self.path, "size": self.size, "sha256": self.sha256,
                **({} if self.pack is None else {"pack": self.pack})}


@dataclass(frozen=True)
class PlanGroup:
    """A device group of the pack: its SoCs (catalog models), the selector Play matches, the NPU files it carries
    and their bytes (deflated: the estimate of what a phone downloads)."""

    name: str
    socs: tuple[str, ...]
    dsp_arch: str
    selectors: tuple[PlaySoc, ...]  # the system-on-chip elements of its one device-selector
    files: tuple[PlanFile, ...]
    bytes: int
    deflated: int

    def play_group(self) -> PlayGroup:
        """The group as play_group reads it: one selector, any of whose SoCs selects a phone."""
        return PlayGroup(self.name, [list(self.selectors)])

    def to_json(self) -> JSON:
        return {"name": self.name, "socs": list(self.socs), "dsp_arch": self.dsp_arch,
                "selectors": [{"manufacturer": s.manufacturer, "model": s.model} for s in self.selectors],
                "files": [f.to_json() for f in self.files], "bytes": self.bytes, "deflated": self.deflated}


@dataclass(frozen=True)
class PlanBase:
    """What the app's base module carries for every phone: manifest, CPU models, runtime libraries, licences."""

    files: tuple[PlanFile, ...]
    bytes: int
    deflated: int
    external_runtime: str | None  # the QNN runtime's Maven coordinate when the bundle does not carry it

    def to_json(self) -> JSON:
        return {"files": [f.to_json() for f in self.files], "bytes": self.bytes, "deflated": self.deflated,
                "external_runtime": self.external_runtime}


@dataclass(frozen=True)
class PlanCpuPack:
    """An install-time asset pack holding CPU models the base module cannot (Play's 500 MB for it). Its assets are at
    the base's own paths (qnndeploy/<path>) and a phone merges install-time packs into the app's assets, so the glue
    opens them as before (developer.android.com/guide/playcore/asset-delivery/integrate-java: install-time packs
    are read with AssetManager)."""

    name: str
    files: tuple[PlanFile, ...]
    bytes: int
    deflated: int

    def to_json(self) -> JSON:
        return {"name": self.name, "files": [f.to_json() for f in self.files], "bytes": self.bytes,
                "deflated": self.deflated}


@dataclass(frozen=True)
class PlanOnDevice:
    """A bundle that compiles on the device: the base files a phone of no group compiles, the HTP arches every graph
    was validated for, and the first compile's budget."""

    files: tuple[str, ...]
    archs: tuple[str, ...]
    budget_s: float
    bytes: int
    deflated: int

    def to_json(self) -> JSON:
        return {"files": list(self.files), "archs": list(self.archs), "budget_s": self.budget_s,
                "bytes": self.bytes, "deflated": self.deflated}


@dataclass(frozen=True)
class PlayPlan:
    """play.json, the whole file: the bundle it was made from (name, version and its manifest's sha256), the AI
    packs (one, or more when a group's files pass Play's limit for one), the groups in the targeting config's order,
    the base module, and one APK's bytes to compare with."""

    name: str
    version: str
    manifest_sha256: str
    packs: tuple[PlanPack, ...]
    delivery: Delivery
    groups: tuple[PlanGroup, ...]
    base: PlanBase
    one_apk_bytes: int
    one_apk_deflated: int
    on_device: PlanOnDevice | None = None  # None: phones of no group run on the CPU
    default_group: str = DEFAULT_GROUP
    cpu_packs: tuple[PlanCpuPack, ...] = ()  # CPU models the base module cannot hold, in install-time asset packs

    @property
    def pack(self) -> str:
        """The first pack's name: the --pack the plan was made with, the others' prefix."""
        return self.packs[0].name

    @property
    def modules(self) -> list[str]:
        """Every pack module the app's build includes: the AI packs, then the CPU packs."""
        return [p.name for p in self.packs] + [p.name for p in self.cpu_packs]

    @property
    def installed(self) -> tuple[PlanFile, ...]:
        """What every phone gets with the app: the base module's files and the CPU packs'."""
        return self.base.files + tuple(f for p in self.cpu_packs for f in p.files)

    def to_json(self) -> JSON:
        return {
            "format": PLAN_FORMAT, "format_version": PLAN_VERSION,
            "bundle": {"name": self.name, "version": self.version, "manifest_sha256": self.manifest_sha256},
            "packs": [p.to_json() for p in self.packs], "delivery": self.delivery.value,
            "default_group": self.default_group, "groups": [g.to_json() for g in self.groups],
            "base": self.base.to_json(), "cpu_packs": [p.to_json() for p in self.cpu_packs],
            "one_apk": {"bytes": self.one_apk_bytes, "deflated": self.one_apk_deflated},
            **({} if self.on_device is None else {"on_device": self.on_device.to_json()}),
        }

    @classmethod
    def parse(cls, data: object) -> PlayPlan:
        """As `package play` writes it (strict): BadInput, in one line, for anything else."""
        try:
            if not isinstance(data, dict) or data["format"] != PLAN_FORMAT or data["format_version"] != PLAN_VERSION:
                raise ValueError
            bundle, base, one_apk, on_device = data["bundle"], data["base"], data["one_apk"], data.get("on_device")
            plan = cls(
                _text(bundle["name"]), _text(bundle["version"]), _text(bundle["manifest_sha256"]),
                tuple(PlanPack(_text(p["name"]), _text(p["folder"])) for p in _list(data["packs"])),
                Delivery(data["delivery"]),
                tuple(PlanGroup(_text(g["name"]), tuple(_text(s) for s in _list(g["socs"])), _text(g["dsp_arch"]),
                                tuple(PlaySoc(_text(s["manufacturer"]), _text(s["model"]))
                                      for s in _list(g["selectors"])),
                                _files(g["files"], packed=True), _count(g["bytes"]), _count(g["deflated"]))
                      for g in _list(data["groups"])),
                PlanBase(_files(base["files"]), _count(base["bytes"]), _count(base["deflated"]),
                         None if base["external_runtime"] is None else _text(base["external_runtime"])),
                _count(one_apk["bytes"]), _count(one_apk["deflated"]),
                None if on_device is None else PlanOnDevice(
                    tuple(_text(f) for f in _list(on_device["files"])),
                    tuple(_text(a) for a in _list(on_device["archs"])), _number(on_device["budget_s"]),
                    _count(on_device["bytes"]), _count(on_device["deflated"])),
                _text(data["default_group"]),
                tuple(PlanCpuPack(_text(p["name"]), _files(p["files"]), _count(p["bytes"]), _count(p["deflated"]))
                      for p in _list(data["cpu_packs"])))
            names = {p.name for p in plan.packs}
            if not names or any(f.pack not in names for g in plan.groups for f in g.files):
                raise ValueError
            return plan
        except (ValueError, TypeError, KeyError):
            raise BadInput("not a Play plan (qnndeploy package play writes them)") from None


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError
    return value


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError
    return value


def _number(value: object) -> float:
    """A number as the file has it (an int stays an int, so the file is written again byte for byte)."""
    if not is_number(value):
        raise ValueError
    return value


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError
    return value


def _files(value: object, packed: bool = False) -> tuple[PlanFile, ...]:
    return tuple(PlanFile(_text(f["path"]), _count(f["size"]), _text(f["sha256"]),
                          _text(f["pack"]) if packed else None) for f in _list(value))


def schema() -> JSON:
    return schemas.load("play")


def group_file(group: str) -> str:
    """group.json's text for a group's folder: {"group": NAME}, what the Kotlin PlayPack reads back."""
    return json.dumps({"group": group}) + "\n"


def read_plan(path: Path) -> PlayPlan:
    """play.json of a `package play` output folder (or the file itself), checked against its schema."""
    path = Path(path)
    file = path / PLAN if path.is_dir() else path
    if not file.is_file():
        raise QnnDeployError(f"{path} is not a `qnndeploy package play` output (no {PLAN}): run qnndeploy package "
                             "play BUNDLE -o DIR first")
    try:
        data = json.loads(read_limited(file, MAX_PLAN_BYTES, "Play plan"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise QnnDeployError(f"{file} is not valid JSON ({e}): write it again with qnndeploy package play") from None
    errors = schemas.problems("play", data)
    if errors:
        raise QnnDeployError(f"{file} does not follow the Play plan format ({errors[0]}): write it again with "
                             "qnndeploy package play")
    return PlayPlan.parse(data)


def read_plan_of(folder: Path, bundle: Path) -> PlayPlan:
    """The plan of a `package play` output, refused unless it was made from this very bundle (its manifest)."""
    plan = read_plan(folder)
    if plan.manifest_sha256 != sha256_file(Path(bundle) / "manifest.json"):
        raise BadInput(f"{folder} was packaged from another bundle ({plan.name} {plan.version}, another manifest): "
                       f"run qnndeploy package play {bundle} -o {folder} again")
    return plan


def plan_groups(plan: PlayPlan) -> list[PlayGroup]:
    """The plan's groups in the config's order, each with its one selector."""
    return [g.play_group() for g in plan.groups]


def group_name(soc: str) -> str:
    """sm8750: a device group name (letters, digits, underscores, a letter first) that is not the default's."""
    name = "".join(c if c.isalnum() else "_" for c in soc.lower())
    return name if name[:1].isalpha() and name != DEFAULT_GROUP else f"soc_{name}"


def selectors(socs: list[str]) -> list[PlaySoc]:
    """Every (manufacturer, model) Play may see on a phone with one of these SoCs: both manufacturer spellings
    (Play cannot tell which a phone reports) times every name of the SoC, the catalog model and its aliases
    (SM8750, SM8750P, SM8750-AC), upper-case as phones report them (Play compares exactly)."""
    models: list[str] = []
    for soc in socs:
        for m in find(soc).names:
            if upper(m) not in models:
                models.append(upper(m))
    return [PlaySoc(man, m) for man in MANUFACTURERS for m in models]


def bundle_groups(manifest: Manifest) -> list[PlayGroup]:
    """The device groups `package play` writes for a bundle, in its order: one per target, named by group_name and
    selecting the target's catalog SoC by every name (selectors). Its targets must be catalog SoCs, as in a bundle
    that passes verify."""
    return [PlayGroup(group_name(t.soc), [selectors([find(t.soc).model])]) for t in manifest.targets]


def play_group(groups: Sequence[PlayGroup], manufacturer: str | None, model: str | None, sdk_int: int,
               default: str = DEFAULT_GROUP) -> str:
    """The group Play delivers to a phone reporting these Build.SOC_MANUFACTURER / Build.SOC_MODEL values.

    Exact comparison, no trimming or case folding, as bundletool does. A selector without system-on-chip elements
    selects every phone (its other properties, which qnndeploy never writes, are not evaluated here); one with them
    selects no phone below API 31 and none with an unset value."""
    known = sdk_int >= SOC_TARGETING_SINCE_SDK and manufacturer is not None and model is not None
    phone = PlaySoc(manufacturer or "", model or "")
    for group in groups:
        if any(not selector or (known and phone in selector) for selector in group.selectors):
            return group.name
    return default


def expected_group(plan: PlayPlan, soc: str | None) -> str:
    """The group holding the bundle target of `soc` (a catalog model, as decision.identify gives it); the default
    group when the bundle has no target for it, since such a phone runs on the CPU whatever Play delivers."""
    return next((g.name for g in plan.groups if soc is not None and soc in g.socs), plan.default_group)


def parse_config(text: str) -> list[PlayGroup]:
    """A device targeting config XML as the Android Gradle Plugin reads it: device-group elements in order, their
    device-selector elements, and each selector's system-on-chip elements (other properties are not read here)."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise QnnDeployError(f"the device targeting config is not well-formed XML ({e})") from None
    if root.tag != f"{{{CONFIG_NS}}}device-targeting-config":
        raise QnnDeployError(f"the device targeting config's root is {root.tag}, not device-targeting-config in "
                             f"the namespace {CONFIG_NS}")
    groups = []
    for group in root.iter(f"{{{CONFIG_NS}}}device-group"):
        selectors = [[PlaySoc(chip.get("manufacturer", ""), chip.get("model", ""))
                      for chip in selector.iter(f"{{{CONFIG_NS}}}system-on-chip")]
                     for selector in group.iter(f"{{{CONFIG_NS}}}device-selector")]
        groups.append(PlayGroup(group.get("name", ""), selectors))
    return groups


def read_config(folder: Path) -> list[PlayGroup]:
    path = Path(folder) / CONFIG
    try:
        return parse_config(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise QnnDeployError(f"cannot read {path} ({e.strerror or e}): write it again with qnndeploy package "
                             "play") from None

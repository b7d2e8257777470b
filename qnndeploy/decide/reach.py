"""Which phones a bundle reaches on the NPU, and why not the others: the on-device decision (decision.decide, the
twin of the Kotlin selector) asked for every chipset of Qualcomm's table (data/qualcomm_chipsets.json) and of the
SoC catalog, under every name a phone of that chip reports.

A phone on Android 12 (SDK 31) or newer reports Build.SOC_MODEL: the catalog model and its aliases, and the part
numbers of Qualcomm's table upper-cased (sm8750-ac is SM8750-AC). A phone on Android 11 or older reports no SoC
model, only ro.board.platform: the catalog's codenames. A chipset that neither source names by part number is asked
under its AI Hub name's part ("qualcomm-qcs8750" is QCS8750), said to be assumed. The decision is asked as an app
meets it on a first start: the QNN libraries load, no failure is remembered, the runtime's version and the QNN
backend's platform info are not known (the glue passes none), and the app's engine decides whether it compiles ONNX
on the phone (ort: yes, as the EPContext glue; sherpa-onnx: context binaries only).

Each row also says the runtime the path needs (the bundle's qairt.min_runtime for a prebuilt context binary, the
oldest QAIRT measured to compile for the arch for the on-device path) and the Play device group the phone would get
if the bundle were packaged with `package play` (playplan.bundle_groups, the rule `package play` writes).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any

from qnndeploy.base import socs
from qnndeploy.base.htparch import HtpArch
from qnndeploy.base.names import CONTEXT_BINARY, EPCONTEXT
from qnndeploy.decide.decision import SOC_MODEL_SINCE_SDK, DeviceIdentity, NpuSource, arch_min_qairt, decide
from qnndeploy.formats import playplan
from qnndeploy.formats.manifest import FileFormat, Manifest

LIB_DIR = "<app native library dir>"  # where the app's libraries are: a name only, the decision records it
UNKNOWN_WORLD = "unknown"  # a catalog SoC that Qualcomm's table does not list
WORLDS = ("Mobile", "Compute", "IoT", "Automotive", "XR", UNKNOWN_WORLD)
MANUFACTURER = playplan.MANUFACTURERS[0]  # Build.SOC_MANUFACTURER of a Qualcomm phone; Play's groups list both


class Route(StrEnum):
    """What the app runs on a phone: a prebuilt context binary, the ONNX compiled on the phone, or the CPU."""

    PREBUILT = "prebuilt"
    ON_DEVICE = "on-device"
    CPU = "cpu"


class Property(StrEnum):
    """The phone property that carries a spelling to the decision."""

    SOC_MODEL = "Build.SOC_MODEL"
    BOARD_PLATFORM = "ro.board.platform"


class Spelled(StrEnum):
    """Where a spelling comes from: the SoC catalog, Qualcomm's part-number aliases, or assumed from AI Hub's name."""

    CATALOG = "catalog"
    QUALCOMM = "qualcomm"
    ASSUMED = "assumed"


class Engine(StrEnum):
    """The app's engine, as `scaffold --engine` names it."""

    ORT = "ort"
    SHERPA_ONNX = "sherpa-onnx"

    @property
    def npu_format(self) -> FileFormat:
        """The NPU file it loads (scaffold checks every target has it)."""
        return FileFormat(EPCONTEXT if self == Engine.ORT else CONTEXT_BINARY)

    @property
    def compiles_onnx(self) -> bool:
        """Whether it compiles the ONNX on the phone: ONNX Runtime's QNN EP does, sherpa-onnx's engine does not."""
        return self == Engine.ORT


@dataclass(frozen=True)
class Chipset:
    """One chipset of Qualcomm's table (qai-hub-models' devices_and_chipsets.yaml, as data/qualcomm_chipsets.json
    keeps it)."""

    name: str  # AI Hub's: qualcomm-snapdragon-8-elite-for-galaxy
    aliases: tuple[str, ...]
    soc_model: int
    htp_version: int
    marketing_name: str
    world: str
    supports_fp16: bool

    @property
    def part_numbers(self) -> tuple[str, ...]:
        """The aliases that are part numbers (sm8750-ac), upper-cased as Build.SOC_MODEL reports them."""
        return tuple(a.upper() for a in self.aliases if not a.startswith("qualcomm-"))


@cache
def table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(resources.files("qnndeploy").joinpath("data/qualcomm_chipsets.json")
                                      .read_text(encoding="utf-8"))
    return data


@cache
def chipsets() -> tuple[Chipset, ...]:
    return tuple(Chipset(**{**c, "aliases": tuple(c["aliases"])}) for c in table()["chipsets"])


def catalog_soc(chipset: Chipset) -> socs.Soc | None:
    """The catalog SoC of one of Qualcomm's chipsets: by a part number (SM8750-AC) or by its AI Hub name."""
    parts = set(chipset.part_numbers)
    return next((s for s in socs.catalog() if parts & set(s.names) or chipset.name in s.aihub_chipsets), None)


@dataclass(frozen=True)
class ReachRow:
    """What the app decides on a phone of one chipset reporting one spelling."""

    chipset: str | None  # Qualcomm's name; None for a catalog SoC the table does not list
    soc: str | None  # the catalog model; None for a chipset the catalog does not know
    marketing_name: str | None
    world: str  # Qualcomm's; "unknown" for a catalog SoC the table does not list
    dsp_arch: str | None  # v79 (the catalog's, else Qualcomm's htp_version)
    spelling: str
    identified_by: Property  # the property that carries the spelling to the decision
    min_sdk: int | None  # the Android SDK level the property needs; None: any (Android 11 and older report only it)
    spelled: Spelled
    path: Route
    reason_key: str  # data/reasons.json "decide": the key the glue logs in its "decision {json}" line
    reason: str
    runtime: str | None  # the QAIRT runtime the path needs at least; None on the CPU or when unknown
    play_group: str  # the device group `package play` would give the phone

    @property
    def key(self) -> str:
        """The chipset this row belongs to: Qualcomm's name, else the catalog model."""
        return self.chipset or self.soc or self.spelling


@dataclass(frozen=True)
class WorldCount:
    """Per world: how many chipsets reach each path (each chipset counted once, by its best spelling)."""

    world: str
    prebuilt: int
    on_device: int
    cpu: int


@dataclass(frozen=True)
class Reach:
    bundle: str  # name and version
    engine: Engine
    min_runtime: str | None  # the bundle's qairt.min_runtime
    chipsets: int  # how many chipsets the rows are of
    rows: tuple[ReachRow, ...]
    summary: tuple[WorldCount, ...]

    def best(self) -> list[ReachRow]:
        """One row per chipset, in the rows' order: its best spelling's (prebuilt, else on-device, else the CPU)."""
        return _best(self.rows)


_RANK = {Route.PREBUILT: 0, Route.ON_DEVICE: 1, Route.CPU: 2}


def _best(rows: Iterable[ReachRow]) -> list[ReachRow]:
    best: dict[str, ReachRow] = {}
    for r in rows:
        if r.key not in best or _RANK[r.path] < _RANK[best[r.key].path]:
            best[r.key] = r
    return list(best.values())


@dataclass(frozen=True)
class _Chip:
    chipset: str | None
    soc: socs.Soc | None
    marketing_name: str | None
    world: str
    dsp_arch: str | None
    spellings: tuple[tuple[str, Property, Spelled], ...]


def _chips() -> list[_Chip]:
    """Qualcomm's chipsets in the table's order, then the catalog SoCs it does not list, each with its spellings."""
    out: list[_Chip] = []
    listed: set[str] = set()
    for c in chipsets():
        soc = catalog_soc(c)
        catalog = soc.names if soc else ()
        names = [(name, Property.SOC_MODEL, Spelled.CATALOG) for name in catalog]
        names += [(name, Property.SOC_MODEL, Spelled.QUALCOMM) for name in c.part_numbers if name not in catalog]
        if not names:
            names.append((c.name.removeprefix("qualcomm-").upper(), Property.SOC_MODEL, Spelled.ASSUMED))
        names += [(code, Property.BOARD_PLATFORM, Spelled.CATALOG) for code in (soc.codenames if soc else ())]
        if soc is not None:
            listed.add(soc.model)
        out.append(_Chip(c.name, soc, c.marketing_name, c.world, soc.dsp_arch if soc else str(HtpArch(c.htp_version)),
                         tuple(names)))
    for soc in socs.catalog():
        if soc.model not in listed:
            names = [(n, Property.SOC_MODEL, Spelled.CATALOG) for n in soc.names]
            names += [(code, Property.BOARD_PLATFORM, Spelled.CATALOG) for code in soc.codenames]
            out.append(_Chip(None, soc, soc.marketing_name, UNKNOWN_WORLD, soc.dsp_arch, tuple(names)))
    return out


def reach(manifest: Manifest, engine: Engine = Engine.ORT, worlds: Iterable[str] = ()) -> Reach:
    """Every chipset x spelling with what the app's decision gives there; `worlds`: only these (all when empty)."""
    wanted = {w.lower() for w in worlds}
    groups = playplan.bundle_groups(manifest)
    rows: list[ReachRow] = []
    for chip in _chips():
        if wanted and chip.world.lower() not in wanted:
            continue
        for spelling, prop, spelled in chip.spellings:
            rows.append(_row(manifest, engine, groups, chip, spelling, prop, spelled))
    return Reach(manifest.bundle_version, engine, manifest.qairt.min_runtime, len({r.key for r in rows}), tuple(rows),
                 summary(rows))


def phone(spelling: str, identified_by: Property) -> DeviceIdentity:
    """The phone a row stands for: Build.SOC_MODEL on the first Android that has it; ro.board.platform alone on the
    Android before it."""
    if identified_by == Property.SOC_MODEL:
        return DeviceIdentity(spelling, None, SOC_MODEL_SINCE_SDK)
    return DeviceIdentity(None, spelling, SOC_MODEL_SINCE_SDK - 1)


def _row(manifest: Manifest, engine: Engine, groups: list[playplan.PlayGroup], chip: _Chip, spelling: str,
         prop: Property, spelled: Spelled) -> ReachRow:
    device = phone(spelling, prop)
    d = decide(manifest, device, load_errors={}, lib_dir=LIB_DIR, npu_format=engine.npu_format,
               compiles_onnx=engine.compiles_onnx)
    if d.npu_source == NpuSource.PREBUILT:
        path, runtime = Route.PREBUILT, manifest.qairt.min_runtime
    elif d.npu_source == NpuSource.ON_DEVICE:
        path, runtime = Route.ON_DEVICE, arch_min_qairt().get(d.dsp_arch or "")
    else:
        path, runtime = Route.CPU, None
    group = playplan.play_group(groups, MANUFACTURER, device.soc_model, device.sdk_int)
    return ReachRow(chip.chipset, chip.soc.model if chip.soc else None, chip.marketing_name, chip.world,
                    chip.dsp_arch, spelling, prop, SOC_MODEL_SINCE_SDK if prop == Property.SOC_MODEL else None,
                    spelled, path, d.reason_key, d.reason, runtime, group)


def summary(rows: Iterable[ReachRow]) -> tuple[WorldCount, ...]:
    """Per world (WORLDS' order), the chipsets by their best path."""
    best = _best(rows)
    return tuple(WorldCount(w, *(sum(1 for r in best if r.world == w and r.path == p) for p in Route))
                 for w in WORLDS if any(r.world == w for r in best))

"""`reach`: which phones take the NPU with a bundle, and why not the others, for every chipset of Qualcomm's table
and of the SoC catalog under every name phones report.

A room of its own because it is its own command's library: it opens a bundle as `scaffold` and `package play` do
(a folder or archive that must pass `bundle verify`; not loaded on the host emulator, since the answer is the
manifest's) and asks no phone. The table itself is decide/reach.py, below the rooms, so that `report` shows the
same rows without importing this room.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from qnndeploy.base.errors import BadInput, CheckFailed
from qnndeploy.decide.reach import WORLDS, Engine, Reach, reach
from qnndeploy.formats.manifest import read_manifest
from qnndeploy.verification.checks import VerifyReport, refusal, verify_folder

DOING = "reaching from it"  # how a refusal names what reach would have done with a bundle that fails verify


def check_request(engine: str, worlds: Iterable[str]) -> None:
    """The options, checked before any bundle is read: an engine scaffold knows, worlds of Qualcomm's table."""
    engines = [e.value for e in Engine]
    if engine not in engines:
        raise BadInput(f"unknown engine '{engine}'; use one of {', '.join(engines)}")
    for world in worlds:
        if world.lower() not in {w.lower() for w in WORLDS}:
            raise BadInput(f"unknown world '{world}'; use one of {', '.join(WORLDS)}")


def reach_bundle(bundle: Path, engine: str = Engine.ORT, worlds: Iterable[str] = (),
                 report: VerifyReport | None = None) -> Reach:
    """The reach table of a bundle folder that passes `bundle verify` (checked here without the host emulator unless
    the caller gives its report); `worlds`: only those of Qualcomm's table ("unknown": the catalog's others)."""
    worlds = tuple(worlds)
    check_request(engine, worlds)
    report = report if report is not None else verify_folder(Path(bundle))
    if not report.ok:
        raise CheckFailed(refusal(Path(bundle), report, DOING))
    return reach(read_manifest(Path(bundle)), Engine(engine), worlds)

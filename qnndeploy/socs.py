"""The SoC catalog (data/socs.json): which QNN soc_model and HTP arch a phone's chip needs."""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from typing import Any

from qnndeploy.errors import QnnDeployError


@dataclass(frozen=True)
class QairtLimit:
    """What one QAIRT release (major.minor) does for a SoC, against the catalog: precisions it refuses, and the arch it
    writes into context binaries when that is not the catalog's."""

    qairt: str
    refuses: tuple[str, ...]
    binary_arch: int | None


@dataclass(frozen=True)
class Soc:
    model: str
    soc_id: int
    dsp_arch: str
    vtcm_mb: int
    fp16: bool
    marketing_name: str | None
    codenames: tuple[str, ...]
    kernel_soc_ids: tuple[int, ...]
    aliases: tuple[str, ...]
    note: str
    qairt_limits: tuple[QairtLimit, ...] = ()
    aihub_chipset: str | None = None  # the "chipset:" attribute of AI Hub's hosted devices with this SoC

    @property
    def arch_number(self) -> int:
        """73 for v73: the form QNN options and ELF headers use."""
        return int(self.dsp_arch[1:])

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@cache
def catalog() -> tuple[Soc, ...]:
    raw = json.loads(resources.files("qnndeploy").joinpath("data/socs.json").read_text())
    return tuple(
        Soc(**{**s, "codenames": tuple(s["codenames"]), "kernel_soc_ids": tuple(s["kernel_soc_ids"]),
               "aliases": tuple(s["aliases"]),
               "qairt_limits": tuple(QairtLimit(q["qairt"], tuple(q["refuses"]), q["binary_arch"])
                                     for q in s["qairt_limits"])})
        for s in raw["socs"]
    )


def find(name: str | int) -> Soc:
    """Look up by model, alias, QNN soc_id or ro.board.platform codename, ignoring case."""
    key = str(name).strip()
    if not key:
        raise QnnDeployError("no SoC named: give a model such as SM8750 (qnndeploy socs lists them)")
    for soc in catalog():
        if key.upper() in (soc.model, *soc.aliases) or key == str(soc.soc_id) or key.lower() in soc.codenames:
            return soc
    names = [s.model for s in catalog()] + [c for s in catalog() for c in s.codenames]
    close = difflib.get_close_matches(key.upper(), [n.upper() for n in names], n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(s.model for s in catalog())}"
    raise QnnDeployError(f"unknown SoC '{key}'{hint} (qnndeploy socs lists them)")


def _limit(soc: Soc, qairt: str) -> QairtLimit | None:
    family = ".".join(qairt.split(".")[:2])
    return next((q for q in soc.qairt_limits if q.qairt == family), None)


def refusal(soc: Soc, qairt: str, precision: str) -> str | None:
    """Why `precision` cannot be built for `soc` with this QAIRT, from the catalog, or None. Known before any compile,
    so check, compile and demo say it up front instead of blaming the model."""
    if precision == "fp16" and not soc.fp16:
        return f"{soc.model} ({soc.dsp_arch}) has no fp16 on its HTP"
    limit = _limit(soc, qairt)
    if limit and precision in limit.refuses:
        return (f"QAIRT {qairt} compiles no {precision} for {soc.model} (soc_model {soc.soc_id}); catalog note: "
                f"{soc.note}")
    return None


def arch_mismatch(soc: Soc, qairt: str) -> str | None:
    """When this QAIRT writes another arch into the SoC's context binaries than the catalog's: bundle verify will flag
    the bundle, so the binaries cannot be trusted for that SoC without a phone."""
    limit = _limit(soc, qairt)
    if limit and limit.binary_arch is not None and limit.binary_arch != soc.arch_number:
        return (f"QAIRT {qairt} writes arch {limit.binary_arch} into {soc.model} context binaries, the catalog says "
                f"{soc.dsp_arch}: bundle verify flags them; catalog note: {soc.note}")
    return None

"""The SoC catalog (data/socs.json): which QNN soc_model and HTP arch a phone's chip needs."""

from __future__ import annotations

import difflib
import json
import string
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from typing import Any

from qnndeploy.base.errors import BadInput
from qnndeploy.base.htparch import HtpArch

# A phone's SoC names are compared with ASCII rules only (the on-device decision and its Kotlin twin both do):
# Python's and the JVM's Unicode tables differ, so Unicode rules would let the twins disagree on odd properties.
SPACE = " \t\n\r\x0b\x0c"  # what both twins trim: ASCII whitespace
_UPPER = str.maketrans(string.ascii_lowercase, string.ascii_uppercase)
_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def trim(text: str) -> str:
    return text.strip(SPACE)


def upper(text: str) -> str:
    return text.translate(_UPPER)


def lower(text: str) -> str:
    return text.translate(_LOWER)


@dataclass(frozen=True)
class Measured:
    """What one QAIRT release's compiler did for a SoC's soc_model on the host: the soc_model and arch it wrote into
    the context binary (read back with the same release's libQnnSystem; None when it compiled nothing) and the
    precisions it refused."""

    qairt: str  # "2.51.0"
    soc_model: int | None
    arch: int | None
    marker_arch: int | None  # the arch of the "soc_type=...;arch=..." text inside the binary, which can differ
    refuses: tuple[str, ...]


@dataclass(frozen=True)
class Soc:
    model: str
    soc_id: int
    dsp_arch: str
    vtcm_mb: int | None  # None: no source says
    fp16: bool | None  # None: no source says whether the HTP runs fp16
    marketing_name: str | None
    codenames: tuple[str, ...]
    kernel_soc_ids: tuple[int, ...]
    aliases: tuple[str, ...]  # other ro.soc.model spellings of this chip (SM8750P, SM8750-AC)
    aihub_chipsets: tuple[str, ...]  # AI Hub's chipset names for it, current first (older releases' names after)
    aihub_hosted: bool | None  # whether AI Hub runs jobs on a device with it; None: AI Hub lists no such chipset
    confirmed_by: tuple[str, ...]  # keys of socs.json "sources" that agree on soc_id and dsp_arch
    note: str
    measured: tuple[Measured, ...] = ()

    @property
    def htp_arch(self) -> HtpArch:
        return HtpArch.parse(self.dsp_arch)

    @property
    def arch_number(self) -> int:
        """73 for v73: the form QNN options and ELF headers use."""
        return self.htp_arch.number

    @property
    def names(self) -> tuple[str, ...]:
        """Every ro.soc.model spelling of this chip, the model first."""
        return (self.model, *self.aliases)

    @property
    def aihub_chipset(self) -> str | None:
        """The chipset name current AI Hub releases use, None when AI Hub lists none."""
        return self.aihub_chipsets[0] if self.aihub_chipsets else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@cache
def sources() -> dict[str, dict[str, Any]]:
    """socs.json's sources by key: what each says, where it was read, and when."""
    found: dict[str, dict[str, Any]] = _raw()["sources"]
    return found


@cache
def _raw() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(resources.files("qnndeploy").joinpath("data/socs.json").read_text())
    return data


@cache
def catalog() -> tuple[Soc, ...]:
    tuples = ("codenames", "kernel_soc_ids", "aliases", "aihub_chipsets", "confirmed_by")
    return tuple(
        Soc(**{**s, **{k: tuple(s[k]) for k in tuples},
               "measured": tuple(Measured(m["qairt"], m["soc_model"], m["arch"], m["marker_arch"], tuple(m["refuses"]))
                                 for m in s["measured"])})
        for s in _raw()["socs"]
    )


# The SoC check measures op support on when none is given, and prepare compares its folding results on.
DEFAULT_SOC = "SM8750"


def find(name: str | int) -> Soc:
    """Look up by model, alias, QNN soc_id or ro.board.platform codename, ignoring case."""
    key = str(name).strip()
    if not key:
        raise BadInput("no SoC named: give a model such as SM8750 (qnndeploy socs lists them)")
    for soc in catalog():
        if key.upper() in (soc.model, *soc.aliases) or key == str(soc.soc_id) or key.lower() in soc.codenames:
            return soc
    names = [s.model for s in catalog()] + [c for s in catalog() for c in s.codenames]
    close = difflib.get_close_matches(key.upper(), [n.upper() for n in names], n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(s.model for s in catalog())}"
    raise BadInput(f"unknown SoC '{key}'{hint} (qnndeploy socs lists them)")


def _family(version: str) -> str:
    return ".".join(version.split(".")[:2])


def measured(soc: Soc, qairt: str) -> Measured | None:
    """The measurement of the release family of `qairt` (2.49.40 -> the 2.49 row), None when not measured."""
    return next((m for m in soc.measured if _family(m.qairt) == _family(qairt)), None)


def refusal(soc: Soc, qairt: str, precision: str) -> str | None:
    """Why `precision` cannot be built for `soc` with this QAIRT, from the catalog, or None. Known before any compile,
    so check, compile and demo say it up front instead of blaming the model."""
    if precision == "fp16" and soc.fp16 is False:
        return f"{soc.model} ({soc.dsp_arch}) has no fp16 on its HTP"
    seen = measured(soc, qairt)
    if seen and seen.soc_model is None:
        return (f"QAIRT {seen.qairt} compiles nothing for {soc.model} (soc_model {soc.soc_id}) on the host, neither "
                "fp16 nor w8a16 (measured: qnndeploy socs shows it)")
    if seen and precision in seen.refuses:
        return f"QAIRT {seen.qairt} compiles no {precision} for {soc.model} (soc_model {soc.soc_id}; measured)"
    return None


def arch_mismatch(soc: Soc, qairt: str) -> str | None:
    """When this QAIRT writes another arch into the SoC's context binaries than the catalog's: bundle verify will flag
    the bundle, so the binaries cannot be trusted for that SoC without a phone."""
    seen = measured(soc, qairt)
    if seen and seen.arch is not None and seen.arch != soc.arch_number:
        return (f"QAIRT {seen.qairt} writes arch {seen.arch} into {soc.model} context binaries (measured), the "
                f"catalog's sources say {soc.dsp_arch}: bundle verify flags them")
    return None

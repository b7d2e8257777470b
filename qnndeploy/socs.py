"""The SoC catalog (data/socs.json): which QNN soc_model and HTP arch a phone's chip needs."""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources

from qnndeploy.errors import QnnDeployError


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

    @property
    def arch_number(self) -> int:
        """73 for v73: the form QNN options and ELF headers use."""
        return int(self.dsp_arch[1:])

    def to_json(self) -> dict:
        return asdict(self)


@cache
def catalog() -> tuple[Soc, ...]:
    raw = json.loads(resources.files("qnndeploy").joinpath("data/socs.json").read_text())
    return tuple(
        Soc(**{**s, "codenames": tuple(s["codenames"]), "kernel_soc_ids": tuple(s["kernel_soc_ids"]),
               "aliases": tuple(s["aliases"])})
        for s in raw["socs"]
    )


def find(name: str | int) -> Soc:
    """Look up by model, alias, QNN soc_id or ro.board.platform codename, ignoring case."""
    key = str(name).strip()
    for soc in catalog():
        if key.upper() in (soc.model, *soc.aliases) or key == str(soc.soc_id) or key.lower() in soc.codenames:
            return soc
    names = [s.model for s in catalog()] + [c for s in catalog() for c in s.codenames]
    close = difflib.get_close_matches(key.upper(), [n.upper() for n in names], n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(s.model for s in catalog())}"
    raise QnnDeployError(f"unknown SoC '{key}'{hint} (qnndeploy socs lists them)")

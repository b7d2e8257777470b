"""AI Hub's published measurements, read from the installed qai-hub-models wheel (tests/reference-requirements.txt,
installed with --no-deps: only its files are read): each model's models/<id>/perf.yaml gives, per precision, device
and runtime, the inference time AI Hub measured on that device; devices_and_chipsets.yaml names each device's
chipset, and the catalog (base/socs.py, aihub_chipsets) the SoC it is. Read by benchmarks/estimate_vs_aihub.py and
tests/qnn/test_chip_factors.py."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import yaml

from qnndeploy.base import socs

DIST = "qai-hub-models"


@dataclass(frozen=True)
class Measured:
    model: str  # the perf.yaml model id (the folder's name)
    soc: str  # the catalog SoC of the device
    device: str  # AI Hub's device name
    matched: str  # how the device was matched to the SoC (device_socs)
    runtime: str  # onnx, qnn_context_binary, ...
    precision: str  # float, w8a16, w8a8, ...
    ms: float  # inference_time_milliseconds


def version() -> str | None:
    try:
        return distribution(DIST).version
    except PackageNotFoundError:
        return None


def package_dir() -> Path | None:
    """The installed wheel's qai_hub_models folder, None when the wheel is not installed."""
    try:
        found = Path(str(distribution(DIST).locate_file("qai_hub_models/devices_and_chipsets.yaml")))
    except PackageNotFoundError:
        return None
    return found.parent if found.is_file() else None


def device_socs(package: Path) -> dict[str, tuple[str, str]]:
    """AI Hub's device name -> (the catalog SoC of its chipset, how it was matched): "chipset" where the catalog
    names the device's chipset among the SoC's AI Hub chipsets, "soc_model N" where the catalog does not name it but
    its QNN soc_model is the SoC's (QCS8550 (Proxy), soc_model 43, is SM8550 to QNN)."""
    table = yaml.safe_load((package / "devices_and_chipsets.yaml").read_text(encoding="utf-8"))
    catalog = socs.catalog()
    by_chipset = {name: s.model for s in catalog for name in s.aihub_chipsets}
    by_id = {s.soc_id: s.model for s in catalog}
    found = {}
    for device, row in table["devices"].items():
        chipset = row.get("chipset", "")
        if chipset in by_chipset:
            found[device] = (by_chipset[chipset], "chipset")
        else:
            soc_model = (table["chipsets"].get(chipset) or {}).get("soc_model")
            if soc_model in by_id:
                found[device] = (by_id[soc_model], f"soc_model {soc_model}")
    return found


def measured(package: Path, model: str, precision: str = "float") -> list[Measured]:
    """Every passed measurement of one model at one precision, on devices the catalog knows. A model with several
    components (an encoder and a decoder) is skipped: its parts' times are not one graph's."""
    path = package / "models" / model / "perf.yaml"
    if not path.is_file():
        return []
    perf = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    components = (perf.get("precisions", {}).get(precision) or {}).get("components") or {}
    if len(components) != 1:
        return []
    metrics = next(iter(components.values())).get("performance_metrics") or {}
    devices = device_socs(package)
    found = []
    for device, runtimes in metrics.items():
        if device not in devices or not isinstance(runtimes, dict):
            continue
        soc, matched = devices[device]
        for runtime, row in runtimes.items():
            if not isinstance(row, dict) or row.get("job_status") != "Passed":
                continue
            ms = row.get("inference_time_milliseconds")
            if isinstance(ms, (int, float)) and ms > 0:
                found.append(Measured(model, soc, device, matched, runtime, precision, float(ms)))
    return found


def per_soc(rows: list[Measured], runtime: str) -> dict[str, Measured]:
    """One measurement per SoC for one runtime: a device matched by chipset before one matched by soc_model, then
    the first device by name."""
    best: dict[str, Measured] = {}
    for r in sorted((r for r in rows if r.runtime == runtime), key=lambda r: (r.matched != "chipset", r.device)):
        best.setdefault(r.soc, r)
    return best

"""A bundle's on-device validation record (records/<graph>-on-device-<arch>.json, bundle build --on-device-compile):
one graph compiled on the host for one arch's SoC as a phone's QNN EP will, and compared with its CPU model on the
host HTP emulator (qnn/ondevice.py runs it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from qnndeploy.base import socs
from qnndeploy.base.errors import BadInput
from qnndeploy.base.fields import number, objects, opt_text, required_flag, text
from qnndeploy.base.fileio import JSON
from qnndeploy.base.names import ON_DEVICE_RECORD
from qnndeploy.qnn import ondevice


@dataclass(frozen=True)
class OnDeviceRecord:
    graph: str
    arch: str
    soc: str
    soc_id: int
    qairt: str
    ep_options: Mapping[str, str]  # the QNN EP options besides the SoC's own
    inputs: JSON  # how its samples were made: validate's seeded random ones
    compile_s: float | None  # None: it did not compile
    passed: bool
    error: str | None
    outputs: tuple[JSON, ...]  # validate's OutputMetrics, as JSON
    task: JSON | None = None  # the task's verdict, which decides for its output

    @classmethod
    def of(cls, check: ondevice.ArchCheck, options: Mapping[str, str], qairt: str) -> OnDeviceRecord:
        """The record of one arch's check, compiled with `options` by QAIRT `qairt`."""
        return cls(check.graph, check.arch, check.soc, socs.find(check.soc).soc_id, qairt, dict(options),
                   {"kind": "random", "samples": ondevice.SAMPLES, "seed": ondevice.SEED}, check.compile_s,
                   check.passed, check.error, tuple(check.outputs), check.task)

    def to_json(self) -> JSON:
        return {"kind": ON_DEVICE_RECORD, "graph": self.graph, "arch": self.arch, "soc": self.soc,
                "soc_id": self.soc_id, "qairt": self.qairt, "ep_options": dict(self.ep_options),
                "inputs": self.inputs, "compile_s": self.compile_s, "passed": self.passed, "error": self.error,
                "outputs": list(self.outputs), **({"task": self.task} if self.task else {})}

    @classmethod
    def parse(cls, data: object) -> OnDeviceRecord:
        """As bundle build writes it (strict): BadInput, in one line, for anything else."""
        try:
            if not isinstance(data, dict) or data["kind"] != ON_DEVICE_RECORD or type(data["passed"]) is not bool:
                raise ValueError
            compile_s = data["compile_s"]
            return cls(str(data["graph"]), str(data["arch"]), str(data["soc"]), int(data["soc_id"]),
                       str(data["qairt"]), dict(data["ep_options"]), dict(data["inputs"]),
                       None if compile_s is None else float(compile_s), data["passed"], data["error"],
                       tuple(dict(o) for o in data["outputs"]), data.get("task"))
        except (ValueError, TypeError, KeyError):
            raise BadInput("not an on-device validation record (bundle build --on-device-compile writes them)") \
                from None

    @classmethod
    def lenient(cls, data: Mapping[str, Any]) -> OnDeviceRecord:
        """As the report reads old or broken records: graph, arch, SoC and the verdict required (BadInput naming the
        field), the rest empty or None when absent or of another type."""
        return cls(text(data, "graph"), text(data, "arch"), text(data, "soc"), 0, opt_text(data, "qairt") or "", {},
                   {}, number(data, "compile_s"), required_flag(data, "passed"), opt_text(data, "error"),
                   tuple(dict(o) for o in objects(data, "outputs")))

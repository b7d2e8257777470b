"""The device verify record (<bundle>_<serial>_<time>.json in device verify's record folder): one phone, the bundle's
decision there, how the files got there and each graph's run. The record's own fields are typed; its sections are
the JSON objects device/verify.py fills (the phone's, the push's, the runner's, each graph's run), kept as written,
as the bench record keeps its phone and bundle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qnndeploy.base.errors import BadInput
from qnndeploy.base.fields import obj, objects, opt_text, required_flag
from qnndeploy.base.fileio import JSON
from qnndeploy.base.names import DEVICE_RECORD

RECORD_VERSION = 1
OUTCOMES = ("passed", "ran", "not run", "failed")  # what the phone proved (device/verify.py VerifyOutcome)


@dataclass(frozen=True)
class DeviceRecord:
    ok: bool
    outcome: str  # one of OUTCOMES
    device: JSON  # serial, model, android_release, sdk
    soc: JSON  # model, identified_by, dsp_arch
    bundle: JSON  # name, version, qairt_version, qairt_build, path
    decision: JSON  # provider, npu_source, compile_budget_s, reason, expectation
    push: JSON  # remote_dir and what the push sent
    runner: JSON  # path, local, note, environment, timing, ort
    on_device: JSON | None  # the on-device compile's time, when the ONNX was compiled on the phone
    launch: JSON | None  # how the launch figures were measured, when a graph has them
    graphs: tuple[JSON, ...]  # each graph's run
    play: JSON | None  # device verify --play: the group Play delivers against the one expected
    qnndeploy: str
    created: str

    def to_json(self) -> JSON:
        return {"record": DEVICE_RECORD, "version": RECORD_VERSION, "ok": self.ok, "outcome": self.outcome,
                "device": self.device, "soc": self.soc, "bundle": self.bundle, "decision": self.decision,
                "push": self.push, "runner": self.runner, "on_device": self.on_device, "launch": self.launch,
                "graphs": list(self.graphs), "play": self.play, "tools": {"qnndeploy": self.qnndeploy},
                "created": self.created}

    @classmethod
    def parse(cls, data: object) -> DeviceRecord:
        """A device verify record as this qnndeploy writes it (strict): BadInput naming what is not."""
        if not isinstance(data, dict) or data.get("record") != DEVICE_RECORD:
            raise BadInput(f'not a device verify record (no "record": "{DEVICE_RECORD}")')

        def section(key: str, optional: bool = False) -> Any:
            value = data.get(key)
            if not isinstance(value, dict) and not (optional and value is None):
                raise BadInput(f"{key!r} is not an object")
            return value

        graphs = data.get("graphs")
        if type(data.get("ok")) is not bool or data.get("outcome") not in OUTCOMES:
            raise BadInput("'ok' is not true or false, or 'outcome' is none of " + ", ".join(OUTCOMES))
        if not isinstance(graphs, list) or not all(isinstance(g, dict) for g in graphs):
            raise BadInput("'graphs' is not a list of objects")
        return cls(data["ok"], data["outcome"], section("device"), section("soc"), section("bundle"),
                   section("decision"), section("push"), section("runner"), section("on_device", True),
                   section("launch", True), tuple(graphs), section("play", True),
                   str(section("tools").get("qnndeploy") or ""), str(data.get("created") or ""))

    @classmethod
    def read(cls, data: object) -> DeviceRecord:
        """Leniently, as the report reads old or broken records: a section that is absent or not an object is empty,
        as are the words missing. BadInput when it is not a device verify record, when 'ok' (what its verdict rests
        on) is not true or false, or 'graphs' is not a list of objects."""
        if not isinstance(data, dict) or data.get("record") != DEVICE_RECORD:
            raise BadInput(f'not a device verify record (no "record": "{DEVICE_RECORD}")')
        graphs = tuple(dict(g) for g in objects(data, "graphs"))
        return cls(required_flag(data, "ok"), opt_text(data, "outcome") or "", obj(data, "device"), obj(data, "soc"),
                   obj(data, "bundle"), obj(data, "decision"), obj(data, "push"), obj(data, "runner"),
                   obj(data, "on_device") or None, obj(data, "launch") or None, graphs, obj(data, "play") or None,
                   opt_text(obj(data, "tools"), "qnndeploy") or "", opt_text(data, "created") or "")

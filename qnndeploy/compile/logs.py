"""Read compiler logs for what a user must know: ops the HTP rejects, CPU partitions, quantization warnings.

The tools bury these in thousands of lines; the summary shows them with the log's path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class FindingKind(StrEnum):
    """What a line of a compile log says: a node the HTP refused, nodes left to the CPU, a quantizer's warning, an
    error."""

    UNSUPPORTED = "unsupported-op"
    CPU_PARTITION = "cpu-partition"
    QUANTIZATION = "quantization"
    ERROR = "error"


UNSUPPORTED, CPU_PARTITION, QUANTIZATION, ERROR = FindingKind

# onnxruntime-qnn: "Unsupported nodes in QNN EP: { name: bad0, type: Sinh }, { name: ..., type: ... },"
_ORT_UNSUPPORTED = re.compile(r"Unsupported nodes in QNN EP: (.*)")
_ORT_NODE = re.compile(r"\{ name: (.*?), type: (\w+) \}")
# onnxruntime-qnn: the HTP backend refused one node ("QNN.backendValidateOpConfig() failed for node `x` of type `Relu`
# with error code 3110"): seen for whole SoCs whose HTP lacks fp16.
_ORT_REJECTED = re.compile(r"backendValidateOpConfig\(\) failed for node `(.*?)` of type `(\w+)` with error code (\d+)")
_ORT_CPU = re.compile(r"Some nodes were not assigned to the preferred execution providers|"
                      r"assigned to the default CPU EP")
# qnn-onnx-converter: "... - ERROR - Node image_q: 'No translation registered for op type onnx_dynamicquantizelinear.'"
_QAIRT_NO_TRANSLATION = re.compile(r"Node (\S+): '?No translation registered for op type (?:onnx_)?(\w+)")
_QAIRT_LEVEL = re.compile(r" - (WARNING|ERROR) - (.*)")
# QNN command line tools: "     0.7ms [ ERROR ] message"
_QNN_TOOL_ERROR = re.compile(r"\[ ERROR \] (.*)")
# Python logging from onnxruntime.quantization ("WARNING:root:...") and converter quantizer warnings.
_PY_WARNING = re.compile(r"^WARNING:[\w.]+:(.*)")
_QUANT_WORDS = re.compile(r"quantiz|encoding|calibrat|bitwidth|bias", re.IGNORECASE)

MAX_PER_KIND = 8


@dataclass(frozen=True)
class LogFinding:
    kind: FindingKind
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


def parse(text: str, limit: int | None = MAX_PER_KIND) -> list[LogFinding]:
    """Findings in log order, without duplicates, at most `limit` per kind (plus a line counting the rest)."""
    found: list[LogFinding] = []
    for raw in text.splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", raw)
        if m := _ORT_UNSUPPORTED.search(line):
            found += [not_supported(n, op) for n, op in _ORT_NODE.findall(m.group(1))]
        elif m := _ORT_REJECTED.search(line):
            found.append(LogFinding(UNSUPPORTED, f"{m.group(1)} ({m.group(2)}) rejected by the HTP backend "
                                              f"(QNN error {m.group(3)})"))
        elif _ORT_CPU.search(line):
            found.append(LogFinding(CPU_PARTITION, "some nodes were assigned to the CPU, not the HTP"))
        elif m := _QAIRT_NO_TRANSLATION.search(line):
            found.append(LogFinding(UNSUPPORTED, f"{m.group(1)} ({m.group(2)}) has no QNN translation"))
        elif m := _QAIRT_LEVEL.search(line):
            level, msg = m.groups()
            if _QUANT_WORDS.search(msg):
                found.append(LogFinding(QUANTIZATION, msg.strip()))
            elif level == "ERROR":
                found.append(LogFinding(ERROR, msg.strip()))
        elif m := _QNN_TOOL_ERROR.search(line):
            found.append(LogFinding(ERROR, m.group(1).strip()))
        elif (m := _PY_WARNING.match(line)) and _QUANT_WORDS.search(m.group(1)):
            found.append(LogFinding(QUANTIZATION, m.group(1).strip()))
    return _trim(found, limit)


def not_supported(name: str, op_type: str) -> LogFinding:
    return LogFinding(UNSUPPORTED, f"{name} ({op_type}) is not supported by the QNN HTP")


def unsupported_error(findings: list[LogFinding]) -> str | None:
    """The one-line error of a compile stopped by nodes the HTP cannot run (pass the findings of an unlimited
    parse, to count them all), or None when the findings name no such node."""
    nodes = list(dict.fromkeys(f.message for f in findings if f.kind == UNSUPPORTED))
    if not nodes:
        return None
    more = f"; and {len(nodes) - 3} more" if len(nodes) > 3 else ""
    return (f"the HTP cannot run {len(nodes)} node(s): {'; '.join(nodes[:3])}{more}. CPU fallback is off, so the "
            f"compile stops: change these ops in the export (qnndeploy check lists them)")


def parse_file(path: Path, limit: int | None = MAX_PER_KIND) -> list[LogFinding]:
    try:
        return parse(path.read_text(errors="replace"), limit)
    except OSError:
        return []


def _trim(found: list[LogFinding], limit: int | None) -> list[LogFinding]:
    out: list[LogFinding] = []
    seen: set[LogFinding] = set()
    counts: dict[FindingKind, int] = {}
    for f in found:
        if f in seen:
            continue
        seen.add(f)
        counts[f.kind] = counts.get(f.kind, 0) + 1
        if limit is None or counts[f.kind] <= limit:
            out.append(f)
    for kind, n in counts.items():
        if limit is not None and n > limit:
            out.append(LogFinding(kind, f"... and {n - limit} more (see the log)"))
    return out

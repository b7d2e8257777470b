"""Nodes the HTP compiler refuses, named: read from its log when QNN refuses a node while composing the graph
("Failed to compose Qnn graph" alone names nothing), and predicted from the graph by the refusals measured here
(data/htp_refusals.json), each with the prepare rewrite that avoids it. Shared by check and compile."""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base.kinds import Precision
from qnndeploy.base.names import PREPARED_SUFFIX
from qnndeploy.model.fuse import find_gelus
from qnndeploy.model.onnxio import scalar_constant

if TYPE_CHECKING:
    import onnx

# onnxruntime-qnn's QnnModelWrapper, as logged (onnxruntime-qnn 2.5.0): "QNN.graphAddNode() failed for node `/Where`
# of type `ElementWiseSelect` with error code 6007"
_ADD_NODE = re.compile(r"graphAddNode\(\) failed for node `(.*?)` of type `(\w+)` with error code (\d+)")


@dataclass(frozen=True)
class Fact:
    """One refusal measured here (an entry of data/htp_refusals.json)."""
    id: str
    onnx_op: str
    qnn_op: str | None
    precision: Precision
    code: int | None
    pattern: str  # what in the graph is refused, in words
    why: str
    rewrite: tuple[str, ...]  # the prepare options that remove the pattern
    remedy: str  # what the rewrite makes of it, in words
    measured: str  # "measured here with onnxruntime-qnn X on DATE"
    also: tuple[tuple[Precision, str], ...] = ()  # other precisions measured to refuse it, each with its `measured`

    def at(self, precision: Precision) -> str | None:
        """How the refusal was measured at `precision` ("measured here with ..."), or None: not known to happen."""
        return self.measured if precision == self.precision else dict(self.also).get(precision)


@dataclass(frozen=True)
class Refused:
    """A node QNN refused while composing the graph, as the compile log names it."""
    node: str
    qnn_op: str
    code: int


@dataclass(frozen=True)
class Explained:
    """A refused node in words: what was refused and why (`problem`), and what to do (`remedy`); `fact` when it is
    a refusal measured here, whose `rewrite` prepare does."""
    problem: str
    remedy: str
    fact: Fact | None

    def __str__(self) -> str:
        return f"{self.problem}; {self.remedy}"


@cache
def facts() -> tuple[Fact, ...]:
    raw = json.loads(resources.files("qnndeploy").joinpath("data/htp_refusals.json").read_text(encoding="utf-8"))
    return tuple(Fact(r["id"], r["onnx_op"], r["qnn_op"], Precision(r["precision"]), r["code"], r["pattern"],
                      r["why"], tuple(r["rewrite"]), r["remedy"], r["measured"],
                      tuple((Precision(p), a["measured"]) for p, a in (r.get("also") or {}).items()))
                 for r in raw["refusals"])


def parse(log: str) -> list[Refused]:
    """The nodes a compile log says QNN refused while composing the graph, in log order, each once."""
    found = [Refused(m.group(1), m.group(2), int(m.group(3))) for m in _ADD_NODE.finditer(log)]
    return list(dict.fromkeys(found))


def inf_fill_wheres(graph: onnx.GraphProto) -> list[str]:
    """The Where nodes one of whose values is a constant -inf: torch's masked_fill(mask, float('-inf'))."""
    return [n.name for n in graph.node if n.op_type == "Where" and len(n.input) == 3
            and any(_is_minus_inf(scalar_constant(graph, i)) for i in n.input[1:])]


def gelu_erfs(graph: onnx.GraphProto) -> list[str]:
    return [n.name for _, _, nodes in find_gelus(graph) for n in nodes if n.op_type == "Erf"]


# how each fact's pattern is found in a graph, by the fact's id (a test holds every fact to have one)
DETECTORS: dict[str, Callable[[onnx.GraphProto], list[str]]] = {
    "where-inf-fill": inf_fill_wheres, "gelu-erf": gelu_erfs}


def predicted(graph: onnx.GraphProto, precision: Precision) -> list[tuple[Fact, list[str]]]:
    """The refusals measured here at `precision` that the graph holds, each with the names of its nodes."""
    found = [(fact, DETECTORS[fact.id](graph)) for fact in facts() if fact.at(precision)]
    return [(fact, nodes) for fact, nodes in found if nodes]


def explain(refused: Refused, graph: onnx.GraphProto, precision: Precision, model: Path, soc: str) -> Explained:
    """What to tell about a refused node of `model` (whose graph is `graph`, built for `soc`): its ONNX op and QNN
    op, the error code, and the prepare rewrite when it is a refusal measured here."""
    node = next((n for n in graph.node if n.name == refused.node), None)
    onnx_op = node.op_type if node is not None else "?"
    problem = f"node {refused.node} (ONNX {onnx_op} → QNN {refused.qnn_op}) refused, error {refused.code}"
    for fact in facts():
        if fact.at(precision) and fact.onnx_op == onnx_op and refused.node in DETECTORS[fact.id](graph):
            out = prepared_name(model)
            check = shlex.join(["qnndeploy", "check", str(out), "--soc", soc, "--precision", precision])
            return Explained(f"{problem}: {fact.pattern}: {fact.why} ({fact.at(precision)})",
                             f"rewrite it as {fact.remedy}: {prepare_line(model, fact.rewrite, out)}, then {check}",
                             fact)
    return Explained(f"{problem} when QNN composed the {precision} graph",
                     f"no rewrite is known here: re-export without this {onnx_op} (or build at another precision)",
                     None)


def prepared_name(model: Path) -> Path:
    """Where check's advice writes a prepared model: X.onnx -> X.npu.onnx beside it."""
    return model.with_name(model.name.removesuffix(".onnx") + PREPARED_SUFFIX + ".onnx")


def prepare_line(model: Path, options: tuple[str, ...], out: Path) -> str:
    return shlex.join(["qnndeploy", "prepare", str(model), *options, "-o", str(out)])


def _is_minus_inf(value: float | None) -> bool:
    return value is not None and math.isinf(value) and value < 0

"""OUT.generation.json (`prepare --generate`): a decoder LLM's parts, each a prompt and a decode graph, the cache
they share with the host loop, and the proof that the parts choose the source's tokens. compile, validate and
bundle build read it; a bundle carries its loop as the manifest's "generation" object (`Generation`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from qnndeploy import __version__
from qnndeploy.base.errors import BadInput
from qnndeploy.base.fileio import JSON, read_json, write_json
from qnndeploy.formats.manifest import Generation, GenerationKv, GenerationPart

PLAN_RECORD, PLAN_VERSION = "qnndeploy-generation", 1


def calib_beside(plan: Path) -> Path:
    """OUT.calib/ beside OUT.generation.json: the loop's inputs per graph, as compile --calib takes them."""
    return plan.with_name(plan.name.removesuffix(".generation.json") + ".calib")


class Role(StrEnum):
    """What a graph of a generation does: takes a prompt chunk, or one token."""

    PROMPT = "prompt"
    DECODE = "decode"


@dataclass(frozen=True)
class PlanGraph:
    role: Role
    graph: str  # the graph's name (its file's stem), as compile and the bundle name it
    file: str  # beside the plan
    sha256: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    weight_bytes: int


@dataclass(frozen=True)
class PlanPart:
    index: int  # 1-based, in running order
    layers: tuple[int, int]  # first and last layer, both included
    graphs: tuple[PlanGraph, ...]  # prompt, decode

    def graph(self, role: Role) -> PlanGraph:
        return next(g for g in self.graphs if g.role == role)

    @property
    def context_name(self) -> str:
        """The shared context binary both graphs compile into: the prompt graph's name without its role."""
        return self.graph(Role.PROMPT).graph.removesuffix(f"-{Role.PROMPT.value}")


@dataclass(frozen=True)
class Proof:
    """The parts run by the app's loop on the CPU against the source: greedy, from a seeded prompt."""

    prompt: int  # tokens of the prompt
    steps: int  # greedy steps compared
    same_tokens: bool
    max_logit_diff: float
    vocab: int
    seed: int


@dataclass(frozen=True)
class GenerationPlan:
    path: Path  # where it is (its graphs are beside it); not a field of the file
    source: str
    source_sha256: str
    prompt_tokens: int
    context: int
    layers: int
    kv_heads: int
    head_dim: int
    kv_dtype: str
    input_ids: str
    attention_mask: str
    position_ids: str
    logits: str
    kv: tuple[tuple[str, str, str, str], ...]  # per layer: key in, key out, value in, value out
    parts: tuple[PlanPart, ...]
    proof: Proof
    calibration: str = ""  # what the calibration samples beside the plan (OUT.calib/) were made from
    tokenizer: tuple[str, str] | None = None  # the tokens' text (prepare --tokenizer): its absolute path, sha256
    precision: str = "w8a16"  # the compile's the parts were balanced for (prepare --precision)
    seconds: float = 0.0
    qnndeploy: str = __version__
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def calib_folder(self) -> Path:
        return calib_beside(self.path)

    def prepare_words(self, *extra: str) -> list[str]:
        """The `qnndeploy prepare --generate` that makes this plan again, with `extra` options."""
        out = self.path.with_name(self.path.name.removesuffix(".generation.json") + ".onnx")
        return ["qnndeploy", "prepare", self.source, "-o", str(out), "--generate", "--parts", str(len(self.parts)),
                "--precision", self.precision, "--prompt-tokens", str(self.prompt_tokens), "--context-tokens",
                str(self.context), *(("--tokenizer", self.tokenizer[0]) if self.tokenizer else ()), *extra, "--force"]

    def graph_files(self) -> dict[str, Path]:
        """Every graph's name -> its file, in running order (part 1's prompt, part 1's decode, part 2's ...)."""
        return {g.graph: self.path.parent / g.file for p in self.parts for g in p.graphs}

    def shares(self) -> dict[str, tuple[str, str]]:
        """compile --share: each part's context name -> its prompt and decode graphs."""
        return {p.context_name: (p.graph(Role.PROMPT).graph, p.graph(Role.DECODE).graph) for p in self.parts}

    def to_json(self) -> JSON:
        return {
            "record": PLAN_RECORD, "version": PLAN_VERSION,
            "source": {"path": self.source, "sha256": self.source_sha256},
            "prompt_tokens": self.prompt_tokens, "context_tokens": self.context, "layers": self.layers,
            "inputs": {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                       "position_ids": self.position_ids},
            "logits": self.logits,
            "kv": [{"layer": i, "key": [k_in, k_out], "value": [v_in, v_out], "heads": self.kv_heads,
                    "head_dim": self.head_dim, "dtype": self.kv_dtype}
                   for i, (k_in, k_out, v_in, v_out) in enumerate(self.kv)],
            "parts": [{"index": p.index, "layers": list(p.layers),
                       "graphs": [{"role": g.role.value, "graph": g.graph, "file": g.file, "sha256": g.sha256,
                                   "inputs": list(g.inputs), "outputs": list(g.outputs),
                                   "weight_bytes": g.weight_bytes} for g in p.graphs]} for p in self.parts],
            "proof": {"prompt": self.proof.prompt, "steps": self.proof.steps, "same_tokens": self.proof.same_tokens,
                      "max_logit_diff": self.proof.max_logit_diff, "vocab": self.proof.vocab,
                      "seed": self.proof.seed},
            "calibration": self.calibration, "precision": self.precision,
            "tokenizer": None if self.tokenizer is None else {"path": self.tokenizer[0], "sha256": self.tokenizer[1]},
            "seconds": self.seconds, "tools": {"qnndeploy": self.qnndeploy},
            "created": self.created}

    def write(self) -> None:
        write_json(self.path, self.to_json())

    @classmethod
    def parse(cls, data: object, path: Path) -> GenerationPlan:
        """The plan at `path` from its JSON value (strict): BadInput, in one line, for anything else."""
        try:
            if not isinstance(data, dict) or data["record"] != PLAN_RECORD:
                raise ValueError
            kv = data["kv"]
            proof = data["proof"]
            parts = tuple(PlanPart(
                int(p["index"]), (int(p["layers"][0]), int(p["layers"][1])),
                tuple(PlanGraph(Role(g["role"]), str(g["graph"]), str(g["file"]), str(g["sha256"]),
                                      tuple(map(str, g["inputs"])), tuple(map(str, g["outputs"])),
                                      int(g["weight_bytes"])) for g in p["graphs"]))
                for p in data["parts"])
            if not parts or any({g.role for g in p.graphs} != set(Role) for p in parts):
                raise ValueError
            tokenizer = data.get("tokenizer")
            return cls(
                path, str(data["source"]["path"]), str(data["source"]["sha256"]), int(data["prompt_tokens"]),
                int(data["context_tokens"]), int(data["layers"]), int(kv[0]["heads"]), int(kv[0]["head_dim"]),
                str(kv[0]["dtype"]), str(data["inputs"]["input_ids"]), str(data["inputs"]["attention_mask"]),
                str(data["inputs"]["position_ids"]), str(data["logits"]),
                tuple((str(x["key"][0]), str(x["key"][1]), str(x["value"][0]), str(x["value"][1])) for x in kv),
                parts, Proof(int(proof["prompt"]), int(proof["steps"]), bool(proof["same_tokens"]),
                             float(proof["max_logit_diff"]), int(proof["vocab"]), int(proof["seed"])),
                str(data.get("calibration", "")),
                None if tokenizer is None else (str(tokenizer["path"]), str(tokenizer["sha256"])),
                str(data.get("precision", "w8a16")),
                float(data.get("seconds", 0.0)),
                str((data.get("tools") or {}).get("qnndeploy", "")), str(data.get("created", "")))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            raise BadInput(f"{path}: not a generation plan (qnndeploy prepare --generate writes one)") from None

    @classmethod
    def read(cls, path: Path) -> GenerationPlan:
        path = Path(path)
        return cls.parse(read_json(path, "generation plan", "qnndeploy prepare --generate writes one"), path)


def plans_of(sources: Mapping[str, Path]) -> dict[str, GenerationPlan]:
    """Each graph (name -> its source) that is a part of a generation plan beside it, unchanged: graph -> plan."""
    found: dict[str, GenerationPlan] = {}
    for folder in dict.fromkeys(p.parent for p in sources.values()):
        for path in sorted(folder.glob("*.generation.json")):
            try:
                plan = GenerationPlan.read(path)
            except BadInput:
                continue
            files = plan.graph_files()
            for graph, source in sources.items():
                if graph in files and files[graph].resolve() == source.resolve() and source.is_file():
                    found[graph] = plan
    return found


def to_manifest(plan: GenerationPlan, precision: str, uint8: Collection[str] = ()) -> Generation:
    """The manifest's "generation" object for a bundle of the plan's graphs built at `precision`; `uint8`: the
    cache tensors the NPU graphs keep in uint8 (compile --kv-bits 8)."""
    kv = tuple(GenerationKv(i, next(p.index for p in plan.parts if p.layers[0] <= i <= p.layers[1]),
                            (k_in, k_out), (v_in, v_out), plan.kv_heads, plan.head_dim, plan.kv_dtype,
                            "uint8" if {k_in, k_out, v_in, v_out} <= set(uint8) else None)
               for i, (k_in, k_out, v_in, v_out) in enumerate(plan.kv))
    return Generation("decoder", plan.prompt_tokens, plan.context, plan.proof.vocab, precision,
                      (("input_ids", plan.input_ids), ("attention_mask", plan.attention_mask),
                       ("position_ids", plan.position_ids)), plan.logits, kv,
                      tuple(GenerationPart(p.index, p.graph(Role.PROMPT).graph, p.graph(Role.DECODE).graph, p.layers)
                            for p in plan.parts))

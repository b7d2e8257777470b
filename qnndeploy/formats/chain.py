"""A split model's parts run one after another (`prepare --split-at/--split-size`): the inputs each part really
gets, and the chain's outputs to judge a split by.

A part of a split must be validated on what the parts before it make, not on random values: a tail fed uniform
values in [-1, 1) where the head gives values near 700 passes on the HTP and fails in the app. The samples are the
source model's (its inputs are the chain's), run through the parts on onnxruntime's CPU, which computes the
source model (prepare proved it before writing the parts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from qnndeploy.base.errors import BadInput
from qnndeploy.base.fileio import JSON, sha256_file
from qnndeploy.formats.records import SplitPart, SplitRecord
from qnndeploy.model import samples
from qnndeploy.model import split as cutting
from qnndeploy.model.media import Preprocess
from qnndeploy.model.onnxio import TensorInfo
from qnndeploy.model.samples import Ranges, Sample

CHAIN = "chain"  # the kind of a record's "inputs" when a part was fed what the parts before it make


@dataclass
class Chain:
    """The chain's samples and every tensor the CPU chain made from them, per sample (the samples included)."""

    split: SplitRecord
    inputs: list[Sample]  # the chain's own inputs (the source model's)
    values: list[Sample]
    used: JSON  # how the chain's own inputs were made (samples.for_inputs)

    def feeds(self, part: SplitPart) -> list[Sample]:
        """What `part` reads, as the parts before it made it on the CPU."""
        return [{n: v[n] for n in part.inputs} for v in self.values]

    def cpu(self, part: SplitPart) -> list[Sample]:
        """What `part` makes on the CPU from those feeds."""
        return [{n: v[n] for n in part.outputs} for v in self.values]

    def described(self, part: SplitPart) -> JSON:
        """The part's record of its inputs: made by the parts before it, from these samples."""
        before = [p.name for p in self.split.parts[:self.split.parts.index(part)]]
        return {"kind": CHAIN, "split": str(self.split.path.resolve()), "part": part.name, "after": before,
                "samples": self.used}


def source_inputs(split: SplitRecord, given: Ranges) -> tuple[list[TensorInfo], dict[str, tuple[int, int, str]]]:
    """The chain's own inputs, with each integer input's range (model.split.chain_inputs), its parts checked."""
    return cutting.chain_inputs(_checked(split), given)


def run_cpu(split: SplitRecord, graph: str, inputs: Path | None = None, count: int = 1, seed: int = 0,
            preprocess: str | Path | Preprocess | None = None, ranges: Ranges | None = None) -> Chain:
    """The chain's samples (as for_graph makes a graph's: `inputs` DIR/<graph>/ or DIR, else `count` random ones)
    run through every part on the CPU."""
    specs, int_ranges = source_inputs(split, ranges or {})
    try:
        feeds, used = samples.for_inputs(specs, int_ranges, graph, inputs, count, seed, preprocess)
    except BadInput as e:
        if inputs is None:
            raise
        raise e.reworded(f"{e} (a split model's part is validated on the model's own inputs, "
                         f"{', '.join(s.name for s in specs)}: the parts before it make what it reads)") from None
    return Chain(split, feeds, run(split, feeds, lambda part, f: samples.cpu_outputs(part.path, f)), used)


Runner = Callable[[SplitPart, list[Sample]], list[Sample]]  # one part's outputs for its feeds


def run(split: SplitRecord, feeds: list[Sample], runner: Runner) -> list[Sample]:
    """Every part in order, each fed what the chain's samples and the parts before it made: all the values."""
    return cutting.run_chain(split.parts, feeds, runner)


def outputs(split: SplitRecord) -> list[str]:
    """The source model's outputs: what the parts make that no later part reads."""
    cut = set(split.cut)
    return [o for p in split.parts for o in p.outputs if o not in cut]


def producer(split: SplitRecord, name: str) -> SplitPart:
    return next(p for p in split.parts if name in p.outputs)


def replay(given: JSON, graph: str, model: Path, sha256: str) -> tuple[Chain, SplitPart]:
    """The chain and part a record's "inputs" of kind CHAIN name, made again (diagnose replays validate's)."""
    split = SplitRecord.read(Path(str(given.get("split"))))
    part = split.part_of(model, sha256)
    if part is None:
        raise BadInput(f"{split.path} no longer names {model} as a part: split and compile again")
    made = given.get("samples")
    if not isinstance(made, dict):
        raise BadInput(f"the validation record of {model} does not say how its chain's samples were made: validate "
                       "again")
    if made.get("kind") == "files":
        folder = Path(str(made.get("folder")))
        if not folder.is_dir():
            raise BadInput(f"validate's samples {folder} are gone: pass them again with --inputs DIR (or --random N)")
        return run_cpu(split, graph, folder, preprocess=samples.recorded_preprocess(made)), part
    return run_cpu(split, graph, count=int(made.get("samples") or 1), seed=int(made.get("seed") or 0),
                   ranges=samples.recorded_ranges(made)), part


def _checked(split: SplitRecord) -> tuple[SplitPart, ...]:
    for part in split.parts:
        if not part.path.is_file():
            raise BadInput(f"the {part.name} part {part.path} of {split.path} is gone: validating a part needs the "
                           "parts before it")
        if sha256_file(part.path) != part.sha256:
            raise BadInput(f"{part.path} changed since it was split: split again")
    return split.parts

"""An encoder-decoder run as the app runs it, its greedy decode loop on the CPU (the source models on onnxruntime) and
on the host HTP emulator (the compiled contexts), sample by sample: the tokens, the first step where the two part, the
texts and their word error rate. validate --loop and bundle verify's binary run use it: the loop decides its graphs'
verdicts; their own tensor figures (the encoder on the samples, the decoder on the inputs the CPU loop gave it) stay
as evidence. An encoder or decoder cut into parts (prepare --split-size) runs as its parts chained, each part's
context loaded on the emulator, and each part's figures are measured on what the CPU chain fed it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from qnndeploy.base import socs
from qnndeploy.base.fileio import JSON
from qnndeploy.model import decode, tasks
from qnndeploy.model.decode import Decoded, Detokenizer, GraphCall, Loop
from qnndeploy.model.onnxio import model_inputs
from qnndeploy.model.samples import Sample, write_samples
from qnndeploy.qnn import htp

EVIDENCE_STEPS = 3  # decoder inputs per sample (the loop's first steps) its tensor figures are measured on


@dataclass
class LoopCheck:
    """One SoC's loops against the CPU's, sample by sample."""

    soc: str
    passed: bool
    error_rate: float  # words the NPU's texts differ from the CPU's, over the CPU's words
    same_tokens: int  # samples whose token sequences are identical
    samples: list[JSON] = field(default_factory=list)  # per sample: texts, tokens, the first parting step
    truth: dict[str, float] = field(default_factory=dict)  # each side's word error rate against given texts
    emulator_steps: int = 0

    def json(self) -> JSON:
        return {"soc": self.soc, "passed": self.passed, "error_rate": self.error_rate,
                "same_tokens": self.same_tokens, "samples": self.samples, "emulator_steps": self.emulator_steps,
                **({"against_texts": self.truth} if self.truth else {})}


@dataclass
class CpuRun:
    """The CPU's loops, once for every SoC: the encoder's samples, each loop, and each graph's evidence."""

    features: list[Sample]
    encoded: list[Sample]  # every tensor the encoder (its parts) made from them
    decoded: list[Decoded]
    used: JSON  # how the encoder's samples were made
    evidence: dict[str, tuple[list[Sample], list[Sample]]] = field(default_factory=dict)  # graph -> (what it read
    # in the CPU's loops: the samples, or the decoder's inputs at the loops' first steps; what it made of them)


def cache_shapes(loop: Loop, models: Mapping[str, Path]) -> dict[str, list[int]]:
    """Each cache input's [1, steps, dim], from the decoder graph (or part) that reads it."""
    shapes = {i.name: i.static_shape for g in loop.decoders for i in model_inputs(models[g]) if not i.dynamic}
    return {name: shapes[name] for name, _ in loop.cache}


def cpu_call(graphs: Sequence[str], models: Mapping[str, Path]) -> GraphCall:
    """The encoder or decoder (its parts chained) on onnxruntime's CPU."""
    return decode.chained(decode.steps(models, graphs, lambda g: _cpu(models[g])))


def npu_call(graphs: Sequence[str], models: Mapping[str, Path], contexts: Mapping[str, Path], soc: str, fp16: bool
             ) -> GraphCall:
    """The encoder or decoder (its parts chained) on the host HTP emulator, each context loaded once."""
    chip = socs.find(soc)
    return decode.chained(decode.steps(models, graphs, lambda g: htp.session(contexts[g], chip, fp16=fp16)))


def run_cpu(loop: Loop, models: Mapping[str, Path], features: list[Sample], used: JSON) -> CpuRun:
    encoders = decode.steps(models, loop.encoders, lambda g: _cpu(models[g]))
    decoders = decode.steps(models, loop.decoders, lambda g: _cpu(models[g]))
    decoder = decode.chained(decoders)
    encoded = [decode.chained(encoders)(f) for f in features]
    decoded = [decode.greedy(loop, e, decoder, cache_shapes(loop, models), EVIDENCE_STEPS) for e in encoded]
    stepped = [decoder(feeds) for d in decoded for feeds in d.feeds]  # every tensor of the loops' first steps
    evidence: dict[str, tuple[list[Sample], list[Sample]]] = {}
    for graphs, parts, values in ((loop.encoders, encoders, encoded), (loop.decoders, decoders, stepped)):
        for graph, part in zip(graphs, parts, strict=True):
            evidence[graph] = ([{n: v[n] for n in part.inputs} for v in values],
                               [{n: v[n] for n in part.outputs} for v in values])
    return CpuRun(features, encoded, decoded, used, evidence)


def record_inputs(loop: Loop, models: Mapping[str, Path], features: list[Sample], folder: Path) -> dict[str, int]:
    """What each graph of the loop reads in the CPU's greedy loops over `features` (the encoder's samples), written
    as it runs to `folder`/GRAPH/ (compile --calib's layout): calibration on the inputs the app's loop makes. One
    step's inputs are in memory at a time: a large decoder's caches are hundreds of MB a step. The count per graph."""
    written = dict.fromkeys(loop.graphs, 0)
    for graph in loop.graphs:
        (Path(folder) / graph).mkdir(parents=True)

    def recording(graph: str) -> GraphCall:
        call = _cpu(models[graph])

        def run(feeds: Sample) -> Sample:
            write_samples(Path(folder) / graph, [feeds], first=written[graph])
            written[graph] += 1
            return call(feeds)

        return run

    encoder = decode.chained(decode.steps(models, loop.encoders, recording))
    decoder = decode.chained(decode.steps(models, loop.decoders, recording))
    shapes = cache_shapes(loop, models)
    for sample in features:
        decode.greedy(loop, encoder(sample), decoder, shapes)
    return written


def run_npu(loop: Loop, encoded: list[Sample], decoder: GraphCall, shapes: Mapping[str, list[int]]
            ) -> list[Decoded]:
    """Each sample's loop on the emulator (`decoder`: npu_call's), from the encoder's emulated outputs."""
    return [decode.greedy(loop, e, decoder, shapes) for e in encoded]


def judge(loop: Loop, soc: str, cpu: CpuRun, npu: list[Decoded], limits: Mapping[str, float],
          references: list[str] | None = None) -> LoopCheck:
    """Texts and tokens of each sample, CPU against NPU; passes when the word error rate is within
    max_error_rate (default 0: the same text)."""
    words = Detokenizer(loop.tokenizer)
    texts = [(words.text(c.tokens), words.text(n.tokens)) for c, n in zip(cpu.decoded, npu, strict=True)]
    normal = [(" ".join(decode.words(c)), " ".join(decode.words(n))) for c, n in texts]
    rate = tasks.error_rate([c for c, _ in normal], [n for _, n in normal], words=True)
    per_sample: list[JSON] = []
    for i, (c, n) in enumerate(zip(cpu.decoded, npu, strict=True)):
        parting = next((k for k, (a, b) in enumerate(zip(c.tokens, n.tokens, strict=False)) if a != b),
                       None if c.tokens == n.tokens else min(len(c.tokens), len(n.tokens)))
        per_sample.append({"sample": i, "cpu": texts[i][0], "npu": texts[i][1], "tokens": len(c.tokens),
                           "parts_at": parting,
                           "cpu_margin_there": c.margins[parting] if parting is not None and parting < len(c.margins)
                           else None,
                           **({"text": references[i]} if references and i < len(references) else {})})
    truth: dict[str, float] = {}
    if references:
        given = [" ".join(decode.words(t)) for t in references[:len(texts)]]
        truth = {side: tasks.error_rate(given, [pair[k] for pair in normal][:len(given)], words=True)
                 for k, side in ((0, "cpu"), (1, "npu"))}
    most = tasks.limit(limits, "max_error_rate")
    same = sum(c.tokens == n.tokens for c, n in zip(cpu.decoded, npu, strict=True))
    return LoopCheck(soc, rate <= most, rate, same, per_sample, truth, sum(n.steps for n in npu))


def _cpu(model: Path) -> decode.GraphCall:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    return lambda feeds: dict(zip(names, session.run(None, {k: v for k, v in feeds.items() if k in wanted}),
                                  strict=True))

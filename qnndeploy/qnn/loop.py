"""An encoder-decoder run as the app runs it, its greedy decode loop on the CPU (the source models on onnxruntime) and
on the host HTP emulator (the compiled contexts), sample by sample: the tokens, the first step where the two part, the
texts and their word error rate. validate --loop and bundle verify's binary run use it: the loop decides both graphs'
verdicts; their own tensor figures (the encoder on the samples, the decoder on the inputs the CPU loop gave it) stay
as evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from qnndeploy.base import socs
from qnndeploy.base.fileio import JSON
from qnndeploy.model import decode, tasks
from qnndeploy.model.decode import Decoded, Detokenizer, Loop
from qnndeploy.model.onnxio import model_inputs
from qnndeploy.model.samples import Sample
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
    """The CPU's loops, once for every SoC: the encoder's samples, each loop, and the decoder's evidence inputs."""

    features: list[Sample]
    encoded: list[Sample]  # the encoder's outputs for them
    decoded: list[Decoded]
    used: JSON  # how the encoder's samples were made


def cache_shapes(loop: Loop, decoder: Path) -> dict[str, list[int]]:
    shapes = {i.name: i.static_shape for i in model_inputs(decoder) if not i.dynamic}
    return {name: shapes[name] for name, _ in loop.cache}


def run_cpu(loop: Loop, models: Mapping[str, Path], features: list[Sample], used: JSON) -> CpuRun:
    encoder = _cpu(models[loop.encoder])
    decoder = _cpu(models[loop.decoder])
    shapes = cache_shapes(loop, models[loop.decoder])
    encoded = [encoder(f) for f in features]
    return CpuRun(features, encoded, [decode.greedy(loop, e, decoder, shapes, EVIDENCE_STEPS) for e in encoded], used)


def decoder_evidence(cpu: CpuRun) -> list[Sample]:
    """The decoder inputs the CPU loops made at their first steps: real inputs of the decoder, for its figures."""
    return [feeds for d in cpu.decoded for feeds in d.feeds]


def run_npu(loop: Loop, encoded: list[Sample], decoder_context: Path, soc: str, fp16: bool, decoder_model: Path
            ) -> list[Decoded]:
    """Each sample's loop on the emulator, from the encoder's emulated outputs (its own validation ran it on the
    same samples), the decoder loaded once."""
    decoder = htp.session(decoder_context, socs.find(soc), fp16=fp16)
    shapes = cache_shapes(loop, decoder_model)
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

"""A decoder LLM's parts validated as the app runs them: the generation loop on the host HTP emulator beside the same
loop on onnxruntime's CPU, step by step.

The CPU side is the parts' ONNX graphs (prepare --generate proved them equal to the source model). Both loops take
the same seeded prompt; at every step the NPU is fed the CPU's token, so each step's choice is judged from the same
history: the share of steps whose top-1 token agrees, and the first step where they part (free-running, the two
would part there). At that step (or the last one) every part of the NPU is fed the CPU's own inputs (the same cache
on both sides) and each layer's new key and value entries are compared: the first layer beyond the precision's
cosine threshold is where the numbers go wrong; a quantized build's tensors that step drives well past the range
its calibration samples gave them are named (clamps.py): the HTP clamps them. Given token ids (`text=FILE`), both
sides' mean negative log-likelihood of them, teacher-forced, and its perplexity.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base import socs
from qnndeploy.base.errors import BadInput
from qnndeploy.base.fileio import JSON, sha256_file
from qnndeploy.base.kinds import Precision
from qnndeploy.formats.generation import GenerationPlan, Role
from qnndeploy.model import clamps, generation, metrics, samples
from qnndeploy.model.decode import Detokenizer, GraphCall
from qnndeploy.model.generation import DecoderLayout, Stepper
from qnndeploy.model.samples import Sample
from qnndeploy.qnn import htp

if TYPE_CHECKING:
    import numpy as np

DEFAULT_STEPS = 64
EVIDENCE = 4  # inputs per graph its own tensor figures are measured on (the loop's first calls)
# The share of steps whose NPU token must agree with the CPU's, each from the CPU's history: our defaults (no
# published standard), set from the tests' models; a lower one needs validate --reason.
MIN_AGREEMENT = {Precision.FP16: 0.95, Precision.W8A16: 0.9, "w4a16": 0.85}


def min_agreement(precision: str | None) -> float:
    return MIN_AGREEMENT.get(str(precision), MIN_AGREEMENT[Precision.FP16])


@dataclass(frozen=True)
class GenerationLoop:
    """--loop generation[:steps=N,prompt=FILE,text=FILE,min_agreement=X]: how the loop runs and is judged."""

    steps: int = DEFAULT_STEPS
    prompt: tuple[int, ...] | None = None  # None: the plan's seeded prompt (validate --seed)
    text: tuple[int, ...] | None = None  # token ids whose likelihood both sides measure
    min_agreement: float | None = None  # None: MIN_AGREEMENT of the precision


def parse(options: Mapping[str, str], what: str) -> GenerationLoop:
    steps = options.get("steps", str(DEFAULT_STEPS))
    if not steps.isdigit() or int(steps) < 1:
        raise BadInput(f"{what}: steps is a number of decode steps, 1 or more")
    least = options.get("min_agreement")
    try:
        floor = None if least is None else float(least)
    except ValueError:
        floor = math.nan
    if floor is not None and not 0 <= floor <= 1:
        raise BadInput(f"{what}: min_agreement is a share between 0 and 1")
    return GenerationLoop(int(steps), _ids(options.get("prompt"), what, "prompt"),
                          _ids(options.get("text"), what, "text"), floor)


def _ids(path: str | None, what: str, key: str) -> tuple[int, ...] | None:
    if path is None:
        return None
    try:
        text = Path(path).read_text()
        ids = tuple(int(t) for t in text.split())
    except (OSError, UnicodeDecodeError):
        raise BadInput(f"{what}: cannot read {key} file {path}") from None
    except ValueError:
        raise BadInput(f"{what}: {key}={path} holds token ids, whole numbers separated by spaces") from None
    if len(ids) < 2:
        raise BadInput(f"{what}: {key}={path} needs 2 token ids or more")
    return ids


def layout_of(plan: GenerationPlan) -> DecoderLayout:
    return DecoderLayout(plan.input_ids, plan.attention_mask, plan.position_ids, plan.logits,
                  tuple(generation.KvLayer(i, (k_in, k_out), (v_in, v_out))
                        for i, (k_in, k_out, v_in, v_out) in enumerate(plan.kv)),
                  plan.kv_heads, plan.head_dim, plan.kv_dtype)


def check_unchanged(plan: GenerationPlan) -> None:
    files = [(plan.path.parent / g.file, g.sha256) for p in plan.parts for g in p.graphs]
    for path, sha256 in [*files, *([(Path(plan.tokenizer[0]), plan.tokenizer[1])] if plan.tokenizer else [])]:
        if not path.is_file() or sha256_file(path) != sha256:
            raise BadInput(f"{path} changed since prepare --generate wrote {plan.path.name}: prepare again")


def prompt_of(plan: GenerationPlan, loop: GenerationLoop, seed: int) -> list[int]:
    return list(loop.prompt) if loop.prompt is not None else generation.seeded_prompt(plan.proof.vocab,
                                                                                      plan.prompt_tokens, seed)


def cpu_calls(plan: GenerationPlan, role: Role) -> list[GraphCall]:
    return [generation.cpu_call(plan.path.parent / p.graph(role).file, f"part {p.index}") for p in plan.parts]


def evidence(plan: GenerationPlan, loop: GenerationLoop, seed: int) -> dict[str, list[Sample]]:
    """Each graph's first inputs in the CPU's loop: real inputs of that graph, for its own tensor figures."""
    import numpy as np

    names = {seq: [p.graph(role).graph for p in plan.parts]
             for seq, role in ((plan.prompt_tokens, Role.PROMPT), (1, Role.DECODE))}
    wanted = {g.graph: g.inputs for p in plan.parts for g in p.graphs}
    found: dict[str, list[Sample]] = {g: [] for g in wanted}

    def watch(seq: int, part: int, values: Sample) -> None:
        graph = names[seq][part]
        if len(found[graph]) < EVIDENCE:
            found[graph].append({n: np.array(values[n]) for n in wanted[graph]})

    stepper = Stepper(layout_of(plan), plan.prompt_tokens, plan.context, cpu_calls(plan, Role.PROMPT),
                      cpu_calls(plan, Role.DECODE), watch=watch)
    prompt = prompt_of(plan, loop, seed)
    generation.greedy(stepper, prompt, min(EVIDENCE, stepper.room() - len(prompt)))
    return found


@dataclass
class LayerDiff:
    layer: int
    part: int
    key_cosine: float
    value_cosine: float
    key_rel_l2: float
    value_rel_l2: float


@dataclass
class GenerationCheck:
    """One SoC's generation loop against the CPU's."""

    soc: str
    passed: bool
    prompt: int
    steps: int
    agreement: float  # steps whose top-1 agrees, each from the CPU's history
    min_agreement: float
    parts_at: int | None  # the first step where the tokens part; None: never within the steps
    cpu_margin: float | None  # the CPU's top-1 minus top-2 logit there
    compared_at: int  # the step the layers were compared at
    layers: list[LayerDiff] = field(default_factory=list)
    first_layer: int | None = None  # the first layer whose new key or value entries are beyond the threshold
    min_cosine: float = 0.0
    # the last part's logits from those same inputs: their cosine and each side's top token; tokens that part with
    # every layer's cache within the threshold part after it (the last layer's MLP, the final norm, the lm_head)
    logits: JSON | None = None
    # where the tokens part in a quantized build: each part's tensors beyond their calibrated range (clamps.Clamp,
    # with "part"), in graph order; None: not looked for (not quantized, never parted, no calibration samples)
    clamped: list[JSON] | None = None
    fix: list[str] | None = None  # the command that would mend it (prepare again, calibrated on the app's tokens)
    likelihood: JSON | None = None  # text=FILE: each side's mean negative log-likelihood and perplexity
    tokens: JSON = field(default_factory=dict)  # the CPU's and the NPU's chosen tokens
    text: JSON | None = None  # their text, when the plan has a tokenizer

    def json(self) -> JSON:
        return {"kind": "generation", "soc": self.soc, "passed": self.passed, "prompt": self.prompt,
                "steps": self.steps, "agreement": self.agreement, "min_agreement": self.min_agreement,
                "parts_at": self.parts_at, "cpu_margin_there": self.cpu_margin, "compared_at": self.compared_at,
                "first_layer": self.first_layer, "min_cosine": self.min_cosine, "logits": self.logits,
                "clamped": self.clamped, "next": self.fix,
                "layers": [vars(d) for d in self.layers], "likelihood": self.likelihood, "tokens": self.tokens,
                "text": self.text}


def check(plan: GenerationPlan, soc: str, contexts: Mapping[str, Path], precision: Precision | str | None,
          loop: GenerationLoop, seed: int, calibration: Mapping[str, tuple[Path, str]]) -> GenerationCheck:
    """The loop on `soc`'s emulator (`contexts`: graph -> the EPContext model the emulator runs) against the CPU's;
    `calibration`: graph -> the samples folder its compile calibrated on and their fingerprint then."""
    chip = socs.find(soc)
    fp16 = precision == Precision.FP16
    npu = {role: [htp.session(contexts[p.graph(role).graph], chip, fp16=fp16) for p in plan.parts] for role in Role}
    return judge(plan, soc, npu, precision, loop, seed, calibration)


def judge(plan: GenerationPlan, soc: str, npu: Mapping[Role, list[GraphCall]], precision: Precision | str | None,
          loop: GenerationLoop, seed: int, calibration: Mapping[str, tuple[Path, str]]) -> GenerationCheck:
    """The loop over the NPU's part calls (each role's, in part order) against the same loop on the CPU."""
    import numpy as np

    lay = layout_of(plan)
    cpu = {role: cpu_calls(plan, role) for role in Role}
    captured: dict[int, Sample] = {}

    def capture(seq: int, part: int, values: Sample) -> None:
        captured[part] = {k: np.array(v) for k, v in values.items()}

    on_cpu = Stepper(lay, plan.prompt_tokens, plan.context, cpu[Role.PROMPT], cpu[Role.DECODE], watch=capture)
    on_npu = Stepper(lay, plan.prompt_tokens, plan.context, npu[Role.PROMPT], npu[Role.DECODE])
    prompt = prompt_of(plan, loop, seed)
    if len(prompt) + 1 > on_cpu.room():
        raise BadInput(f"the prompt ({len(prompt)} tokens) leaves no room in the context of {plan.context}")
    steps = min(loop.steps, on_cpu.room() - len(prompt))
    want_row, got_row = on_cpu.feed(prompt), on_npu.feed(prompt)
    want: list[int] = []
    got: list[int] = []
    parts_at = margin = None
    layers: list[LayerDiff] = []
    logits: JSON | None = None
    compared_at = 0
    parted: tuple[Role, dict[int, Sample]] | None = None  # the role and each part's CPU inputs where they part
    for step in range(steps):
        want.append(int(want_row.argmax()))
        got.append(int(got_row.argmax()))
        if parts_at is None and want[-1] != got[-1]:
            parts_at, compared_at = step, step
            top = np.sort(want_row.astype(np.float64))[-2:]
            margin = float(top[1] - top[0])
            first_call = step == 0 and len(prompt) > 1
            layers, logits = _layers(plan, captured, cpu, npu, first_call)
            parted = (Role.PROMPT if first_call else Role.DECODE, dict(captured))
        if step + 1 < steps:
            want_row, got_row = on_cpu.feed([want[-1]]), on_npu.feed([want[-1]])
    if parts_at is None:
        compared_at = steps - 1
        layers, logits = _layers(plan, captured, cpu, npu, steps == 1 and len(prompt) > 1)
    limits = metrics.thresholds_for(precision)
    floor = limits["min_cosine"]
    first = next((d.layer for d in layers if min(d.key_cosine, d.value_cosine) < floor), None)
    agreement = sum(a == b for a, b in zip(want, got, strict=True)) / len(want)
    least = loop.min_agreement if loop.min_agreement is not None else min_agreement(precision)
    likelihood = None if loop.text is None else {
        "tokens": len(loop.text),
        **{side: _nll(lay, plan, calls, loop.text) for side, calls in (("cpu", cpu), ("npu", npu))}}
    del on_cpu, cpu  # the CPU's sessions gone before the clamp check opens each part again
    clamped = None if parted is None or precision in (None, Precision.FP16) else _clamped(plan, *parted, calibration)
    words = Detokenizer(Path(plan.tokenizer[0])) if plan.tokenizer else None
    return GenerationCheck(soc, agreement >= least, len(prompt), len(want), agreement, least, parts_at, margin,
                           compared_at, layers, first, floor, logits, clamped,
                           plan.prepare_words("--calib-tokens", "FILE") if clamped else None, likelihood,
                           {"cpu": want, "npu": got},
                           None if words is None else {"cpu": words.text(want), "npu": words.text(got)})


def _clamped(plan: GenerationPlan, role: Role, feeds: Mapping[int, Sample],
             calibration: Mapping[str, tuple[Path, str]]) -> list[JSON] | None:
    """Each part's tensors that the parting step drives past their calibrated range, in part and graph order; None
    when a part's calibration samples are no longer the ones it was compiled with."""
    found: list[JSON] = []
    for k, part in enumerate(plan.parts):
        graph = part.graph(role)
        folder, digest = calibration.get(graph.graph) or (None, "")
        if folder is None or not folder.is_dir() or \
                samples.fingerprint(folder, [p.name for p in samples.sample_files(folder)]) != digest:
            return None
        found += [{"part": part.index, **c.json()}
                  for c in clamps.beyond_calibration(plan.path.parent / graph.file, feeds[k], folder)]
    return found


def _layers(plan: GenerationPlan, captured: Mapping[int, Sample], cpu: Mapping[Role, list[GraphCall]],
            npu: Mapping[Role, list[GraphCall]], prompt: bool) -> tuple[list[LayerDiff], JSON]:
    """Every part fed the CPU's inputs of this step on both sides: each layer's new key and value entries, and the
    last part's logits (its last row: the next token)."""
    import numpy as np

    role = Role.PROMPT if prompt else Role.DECODE
    found = []
    for k, part in enumerate(plan.parts):
        feeds = captured[k]
        a, b = cpu[role][k](feeds), npu[role][k](feeds)
        for layer in range(part.layers[0], part.layers[1] + 1):
            _, k_out, _, v_out = plan.kv[layer]
            ka, kb = (np.asarray(x[k_out], np.float64) for x in (a, b))
            va, vb = (np.asarray(x[v_out], np.float64) for x in (a, b))
            found.append(LayerDiff(layer, part.index, _cosine(ka, kb), _cosine(va, vb), _rel(ka, kb), _rel(va, vb)))
    la, lb = (np.asarray(x[plan.logits], np.float64).reshape(-1, plan.proof.vocab)[-1] for x in (a, b))
    return found, {"cosine": _cosine(la, lb), "cpu_top": int(la.argmax()), "npu_top": int(lb.argmax())}


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    import numpy as np

    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return 1.0 if na == nb == 0 else float(np.dot(a.ravel(), b.ravel()) / (na * nb or 1.0))


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    import numpy as np

    n = float(np.linalg.norm(a))
    return float(np.linalg.norm(a - b)) / n if n else float(np.linalg.norm(b))


def _nll(lay: DecoderLayout, plan: GenerationPlan, calls: Mapping[Role, Sequence[GraphCall]], text: Sequence[int]
         ) -> JSON:
    """Teacher-forced: each token's negative log-likelihood given those before it, one decode step at a time."""
    import numpy as np

    stepper = Stepper(lay, plan.prompt_tokens, plan.context, calls[Role.PROMPT], calls[Role.DECODE])
    todo = list(text[:stepper.room() + 1])
    total = 0.0
    for here, after in itertools.pairwise(todo):
        row = stepper.feed([here]).astype(np.float64)
        top = row.max()
        total += float(top + np.log(np.exp(row - top).sum()) - row[after])
    mean = total / max(1, len(todo) - 1)
    return {"mean_nll": mean, "perplexity": math.exp(min(mean, 700.0))}

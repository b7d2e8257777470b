"""Task-level verdicts: whether the app gets the same answer from the NPU as from the CPU (the label, the text, the
embedding's direction), judged on the output the app reads. Tensor metrics stay in the records as evidence; for the
task's output the task metric decides.

A tensor verdict fails answers the app never sees differ (a detector's near-tied scores, a classifier's SNR at 29 dB
with the same label) and passes what the app does see differ (a token flipped at a margin of 0.05). validate, diagnose,
bundle verify and device verify all judge through `judge`, so anything bundle builds, verify accepts.

A task is given as `KIND[:KEY=VALUE,...]` (`--task`), or found where the graph makes it plain: a one-row Softmax is a
classifier; an output over a vocabulary the model names in its metadata (PaddleOCR's `character`) is CTC text.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base.errors import BadInput
from qnndeploy.base.fields import is_number
from qnndeploy.base.fileio import JSON
from qnndeploy.model import onnxio
from qnndeploy.model.metrics import OPTIONAL_THRESHOLDS, OutputMetrics, Thresholds, judge_model

if TYPE_CHECKING:
    import numpy as np
    import onnx


class TaskKind(StrEnum):
    TENSOR = "tensor"  # no task: every output by the tensor metrics
    CLASSIFY = "classify"  # the label: top-1 agreement (fp16 ties excepted), top-5 overlap
    EMBED = "embed"  # the direction: each sample's cosine
    OCR = "ocr"  # CTC text, greedy: character error rate against the CPU's text
    ASR = "asr"  # CTC text, greedy: word error rate against the CPU's text
    DETECT = "detect"  # the detections above a score threshold, matched by IoU (and class)


FP16_STEP = 2.0 ** -10  # fp16's relative spacing: two CPU scores closer than this are a tie the NPU cannot order
KEYS = {"output", "tokens", "blank", "texts", "boxes", "scores", "classes", "threshold", "iou"}
DETECT_DEFAULTS = {"threshold": 0.5, "iou": 0.5}
BORDERLINE = 0.02  # a detection whose score is this close to the threshold may fall either side on the NPU
PADDLE_VOCAB = "character"  # PaddleOCR's metadata: the recognizer's characters, one per line


@dataclass(frozen=True)
class Task:
    kind: TaskKind
    output: str | None = None  # the output the app reads (None: tensor)
    why: str = ""  # how it was found: given, or what in the graph says so
    tokens: tuple[str, ...] = ()  # ocr, asr: the text of each class index
    blank: int = 0  # ocr, asr: CTC's blank index
    given: str | None = None  # --task as the user wrote it, for the records (tokens by file path)
    references: tuple[str, ...] = ()  # ocr, asr: the true text of each sample (texts=FILE), for the record
    roles: tuple[tuple[str, str], ...] = ()  # detect: (boxes|scores|classes, output name)
    limits: tuple[tuple[str, float], ...] = ()  # detect: threshold, iou

    @property
    def outputs(self) -> set[str]:
        """The outputs the task decides for."""
        return {name for _, name in self.roles} | ({self.output} if self.output else set())

    def json(self) -> JSON:
        return {"kind": self.kind.value, "output": self.output, "why": self.why,
                **({"given": self.given} if self.given else {}),
                **({"roles": dict(self.roles), **dict(self.limits)} if self.roles else {}),
                **({"blank": self.blank, "vocabulary": len(self.tokens)} if self.tokens else {})}


@dataclass
class TaskVerdict:
    task: Task
    passed: bool
    summary: str  # one line: what was compared and how it came out
    figures: dict[str, float] = field(default_factory=dict)  # top1_agreement, top5_overlap, min_cosine, error_rate
    examples: list[JSON] = field(default_factory=list)  # flips, differing texts (at most 10)

    def json(self) -> JSON:
        return {**self.task.json(), "passed": self.passed, "summary": self.summary, "figures": self.figures,
                "examples": self.examples}


def key_values(option: str, text: str, keys: Collection[str], form: str) -> tuple[str, dict[str, str]]:
    """`KIND[:KEY=VALUE,...]`, as --task and --loop take it: the kind and its options, each KEY one of `keys`
    (`form` says so in the error)."""
    kind, _, rest = text.partition(":")
    options: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in keys:
            raise BadInput(f"{option} {text}: {item!r} is not {form}")
        options[key] = value
    return kind.strip(), options


def text_lines(path: Path, option: str) -> list[str]:
    """A UTF-8 text file's lines (a tokens file, true texts); anything else is one line of bad input."""
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{option}={path}: cannot read it as UTF-8 text ({e})") from None


def parse(text: str, model: Path) -> Task:
    """--task KIND[:KEY=VALUE,...] for `model`: output=NAME (default: the one output that fits), tokens=FILE (ocr,
    asr: one token per line, or sherpa-onnx's `TOKEN ID` lines; default: the model's own vocabulary), blank=N,
    texts=FILE (the true text of each sample, one per line in the samples' order: each side's error rate against
    them is recorded; the verdict stays the NPU's text against the CPU's)."""
    kind_text, options = key_values("--task", text, KEYS, f"KEY=VALUE with KEY one of {', '.join(sorted(KEYS))}")
    try:
        kind = TaskKind(kind_text)
    except ValueError:
        raise BadInput(f"--task {text}: the kind is one of {', '.join(k.value for k in TaskKind)}") from None
    if kind == TaskKind.TENSOR:
        return Task(kind, why="given with --task", given=text)
    outputs = {i.name: i for i in onnxio.model_outputs(model)}
    if kind == TaskKind.DETECT:
        return _detect_task(text, options, outputs)
    name = options.get("output") or _only(kind, model, outputs)
    if name not in outputs:
        raise BadInput(f"--task {text}: {model.name} has no output {name!r} (it has {', '.join(outputs)})")
    tokens: tuple[str, ...] = ()
    blank = int(options.get("blank", "0")) if options.get("blank", "0").isdigit() else -1
    if kind in (TaskKind.OCR, TaskKind.ASR):
        last = (outputs[name].shape or ["?"])[-1]
        size = last if isinstance(last, int) else None
        tokens = (read_tokens(Path(options["tokens"]), size) if "tokens" in options else
                  _vocabulary(onnxio.load_model(model, weights=False), size))
        if not tokens:
            raise BadInput(f"--task {text}: {model.name} names no vocabulary: give its tokens file, "
                           f"--task {kind.value}:tokens=FILE")
        if not 0 <= blank < len(tokens):
            raise BadInput(f"--task {text}: blank={blank} is not a token index (0 to {len(tokens) - 1})")
    references = tuple(text_lines(Path(options["texts"]), "--task texts")) if "texts" in options else ()
    return Task(kind, name, "given with --task", tokens, blank, text, references)


def _detect_task(text: str, options: Mapping[str, str], outputs: Mapping[str, onnxio.TensorInfo]) -> Task:
    roles = tuple((role, options[role]) for role in ("boxes", "scores", "classes") if role in options)
    if {r for r, _ in roles} < {"boxes", "scores"}:
        raise BadInput(f"--task {text}: detect needs boxes=OUTPUT and scores=OUTPUT (and classes=OUTPUT when the "
                       "scores are not per class)")
    missing = [n for _, n in roles if n not in outputs]
    if missing:
        raise BadInput(f"--task {text}: no output {missing[0]!r} (the model has {', '.join(outputs)})")
    try:
        limits = tuple((k, float(options.get(k, v))) for k, v in DETECT_DEFAULTS.items())
    except ValueError:
        raise BadInput(f"--task {text}: threshold and iou are numbers, e.g. threshold=0.25,iou=0.5") from None
    if not all(0 <= v <= 1 for _, v in limits):
        raise BadInput(f"--task {text}: threshold and iou lie between 0 and 1")
    return Task(TaskKind.DETECT, dict(roles)["boxes"], "given with --task", given=text, roles=roles, limits=limits)


def recorded(given: object, model: Path) -> Task:
    """The task a validation record names (its --task), else the one the graph makes plain; also that one when the
    record's task reads a file that is not here (a tokens file on another machine)."""
    if isinstance(given, str) and given:
        try:
            return parse(given, model)
        except BadInput:
            pass
    return detect(model)


def detect(model: Path) -> Task:
    """The task the graph makes plain, else TENSOR: an output over the vocabulary the model's metadata names (CTC
    text: OCR); one output that is a one-row Softmax or LogSoftmax (a classifier's scores)."""
    proto = onnxio.load_model(model, weights=False)
    outputs = [onnxio.tensor_info(v) for v in proto.graph.output]
    for info in outputs:
        size = info.shape[-1] if info.shape else None
        tokens = _vocabulary(proto, size if isinstance(size, int) else None)
        if tokens and info.shape and len(info.shape) == 3:
            return Task(TaskKind.OCR, info.name, f"{info.name} spans the {len(tokens)} symbols the model's "
                        f"metadata '{PADDLE_VOCAB}' names (CTC text)", tokens)
    rows = _softmax_rows(proto.graph)
    scores = [o for o in outputs if o.name in rows]
    if len(scores) == 1:
        return Task(TaskKind.CLASSIFY, scores[0].name, f"{scores[0].name} is a Softmax over one row of classes")
    return Task(TaskKind.TENSOR, why="no task the graph makes plain: every output by its tensor metrics")


def judge(task: Task, model: Path, expected: Sequence[Mapping[str, np.ndarray]],
          actual: Sequence[Mapping[str, np.ndarray]], limits: Thresholds
          ) -> tuple[list[OutputMetrics], TaskVerdict | None, bool]:
    """Every output's tensor metrics, the task's verdict on its output, and whether the graph passes: the task
    decides for its output, the tensor rules for every other output. The one verdict of qnndeploy."""
    judged = judge_model(model, expected, actual, limits)
    if task.kind == TaskKind.TENSOR or task.output is None:
        return judged, None, all(m.passed for m in judged)
    others = all(m.passed for m in judged if m.name not in task.outputs)
    if task.kind == TaskKind.DETECT:
        verdict = _detections(task, expected, actual, limits)
        return judged, verdict, verdict.passed and others
    cpu = [e[task.output] for e in expected]
    htp = [a[task.output] for a in actual]
    if task.kind == TaskKind.CLASSIFY:
        verdict = _classify(task, cpu, htp, limits)
    elif task.kind == TaskKind.EMBED:
        verdict = _embed(task, cpu, htp, limits)
    else:
        verdict = _text(task, cpu, htp, limits)
    return judged, verdict, verdict.passed and others


def limit(limits: Mapping[str, float], key: str) -> float:
    """A task threshold (metrics.OPTIONAL_THRESHOLDS: every label the same, every text the same, unless loosened
    with a reason); an embedding is held to the precision's min_cosine."""
    return float(limits.get(key, OPTIONAL_THRESHOLDS[key]))


def _classify(task: Task, cpu: list[np.ndarray], htp: list[np.ndarray], limits: Mapping[str, float]) -> TaskVerdict:
    import numpy as np

    rows = total = ties = 0
    agree, overlap = 0.0, 0.0
    examples: list[JSON] = []
    for s, (c, h) in enumerate(zip(cpu, htp, strict=True)):
        c2, h2 = (np.asarray(a, np.float64).reshape(-1, np.asarray(a).shape[-1]) for a in (c, h))
        for r, (crow, hrow) in enumerate(zip(c2, h2, strict=True)):
            total += 1
            want, got = int(crow.argmax()), int(hrow.argmax())
            margin = float(crow[want] - crow[got])
            tie = margin <= FP16_STEP * max(abs(float(crow[want])), 1e-30)
            if want == got or tie:
                agree += 1
                ties += want != got
            elif len(examples) < 10:
                examples.append({"sample": s, "row": r, "cpu": want, "npu": got, "cpu_margin": margin})
            k = min(5, len(crow))
            overlap += len(set(np.argsort(-crow)[:k]) & set(np.argsort(-hrow)[:k])) / k
            rows += 1
    top1, top5 = agree / max(total, 1), overlap / max(rows, 1)
    least = limit(limits, "min_top1")
    summary = (f"top-1 label the same in {int(agree)} of {total} row(s) ({top1:.1%}, needs >= {least:.0%})"
               + (f", {ties} of them fp16 ties" if ties else "") + f"; top-5 overlap {top5:.1%}")
    return TaskVerdict(task, top1 >= least, summary, {"top1_agreement": top1, "top5_overlap": top5}, examples)


def _embed(task: Task, cpu: list[np.ndarray], htp: list[np.ndarray], limits: Mapping[str, float]) -> TaskVerdict:
    import numpy as np

    cosines = []
    for c, h in zip(cpu, htp, strict=True):
        a, b = np.asarray(c, np.float64).ravel(), np.asarray(h, np.float64).ravel()
        norm = float(np.linalg.norm(a) * np.linalg.norm(b))
        cosines.append(float(a @ b) / norm if norm > 0 and np.isfinite(norm) else (1.0 if not a.any() and
                                                                                     not b.any() else 0.0))
    least = min(cosines)
    needed = float(limits["min_cosine"])
    summary = f"each sample's embedding cosine: lowest {least:.6f} of {len(cosines)} (needs >= {needed:g})"
    figures = {"min_cosine": least, "mean_cosine": sum(cosines) / len(cosines)}
    return TaskVerdict(task, least >= needed, summary, figures)


def _text(task: Task, cpu: list[np.ndarray], htp: list[np.ndarray], limits: Mapping[str, float]) -> TaskVerdict:
    words = task.kind == TaskKind.ASR
    pairs = [p for c, h in zip(cpu, htp, strict=True)
             for p in zip(ctc_texts(c, task), ctc_texts(h, task), strict=True)]
    rate = error_rate([c for c, _ in pairs], [h for _, h in pairs], words)
    differ = sum(c != h for c, h in pairs)
    most = limit(limits, "max_error_rate")
    unit = "word" if words else "character"
    first = next(((c, h) for c, h in pairs if c != h), pairs[0] if pairs else ("", ""))
    summary = (f"{unit} error rate {rate:.2%} against the CPU's text (needs <= {most:.0%}); {differ} of {len(pairs)} "
               f"text(s) differ; " + (f"first: CPU {first[0]!r}, NPU {first[1]!r}" if differ else f"e.g. {first[0]!r}"))
    figures = {"error_rate": rate}
    if task.references:
        truth = list(task.references[:len(pairs)])
        figures["cpu_error_rate_vs_texts"] = error_rate(truth, [c for c, _ in pairs][:len(truth)], words)
        figures["npu_error_rate_vs_texts"] = error_rate(truth, [h for _, h in pairs][:len(truth)], words)
        summary += (f"; against the given texts: CPU {figures['cpu_error_rate_vs_texts']:.2%}, "
                    f"NPU {figures['npu_error_rate_vs_texts']:.2%}")
    examples: list[JSON] = [{"sample": i, "cpu": c, "npu": h, **({"text": task.references[i]}
                             if i < len(task.references) else {})} for i, (c, h) in enumerate(pairs[:10])]
    return TaskVerdict(task, rate <= most, summary, figures, examples)


def error_rate(reference: Sequence[str], hypothesis: Sequence[str], words: bool) -> float:
    """Word (or character) edits over the reference's length, summed over the texts; 0 for two empty sets."""
    errors = length = 0
    for want, got in zip(reference, hypothesis, strict=True):
        a, b = (t.split() if words else list(t) for t in (want, got))
        errors += edit_distance(a, b)
        length += len(a)
    return errors / length if length else float(errors > 0)


def _detections(task: Task, expected: Sequence[Mapping[str, np.ndarray]],
                actual: Sequence[Mapping[str, np.ndarray]], thresholds: Mapping[str, float]) -> TaskVerdict:
    """Each sample's detections above the threshold, CPU against NPU, paired greedily by IoU (the same class when
    classes are given). The unpaired ones, over all, are the error rate (max_error_rate, default 0: every detection
    the same); one whose score is within BORDERLINE of the threshold is not counted."""
    roles, limits = dict(task.roles), dict(task.limits)
    threshold, least_iou = limits["threshold"], limits["iou"]
    paired = missed = extra = borderline = 0
    ious: list[float] = []
    examples: list[JSON] = []
    for s, (e, a) in enumerate(zip(expected, actual, strict=True)):
        cpu, npu = (_kept(side, roles, threshold) for side in (e, a))
        pairs = _pair(cpu, npu, least_iou)
        paired += len(pairs)
        ious += [iou for _, _, iou in pairs]
        for side, found, others in (("cpu", cpu, {i for i, _, _ in pairs}), ("npu", npu, {j for _, j, _ in pairs})):
            for k, (_, score, label) in enumerate(found):
                if k in others:
                    continue
                if abs(score - threshold) <= BORDERLINE:
                    borderline += 1
                    continue
                missed += side == "cpu"
                extra += side == "npu"
                if len(examples) < 10:
                    examples.append({"sample": s, "only_on": side, "score": score, "class": label})
    share = (missed + extra) / max(1, 2 * paired + missed + extra)
    summary = (f"{paired} detection(s) above {threshold:g} the same (IoU >= {least_iou:g}, mean "
               f"{(sum(ious) / len(ious)) if ious else 1.0:.3f}); {missed} only on the CPU, {extra} only on the NPU"
               + (f"; {borderline} within {BORDERLINE:g} of the threshold not counted" if borderline else ""))
    figures = {"paired": float(paired), "only_cpu": float(missed), "only_npu": float(extra),
               "mean_iou": (sum(ious) / len(ious)) if ious else 1.0, "error_rate": share}
    passed = share <= limit(thresholds, "max_error_rate")
    return TaskVerdict(task, passed, summary, figures, examples)


Detection = tuple["np.ndarray", float, int]  # box (x1, y1, x2, y2), score, class (-1: none)


def _kept(outputs: Mapping[str, np.ndarray], roles: Mapping[str, str], threshold: float) -> list[Detection]:
    import numpy as np

    boxes = np.asarray(outputs[roles["boxes"]], np.float64).reshape(-1, 4)
    scores = np.asarray(outputs[roles["scores"]], np.float64).reshape(len(boxes), -1)
    labels = (np.asarray(outputs[roles["classes"]]).reshape(-1).astype(int) if "classes" in roles
              else scores.argmax(axis=1) if scores.shape[1] > 1 else np.full(len(boxes), -1))
    best = scores.max(axis=1)
    return [(boxes[i], float(best[i]), int(labels[i])) for i in np.flatnonzero(best >= threshold)]


def _pair(cpu: list[Detection], npu: list[Detection], least: float) -> list[tuple[int, int, float]]:
    """Greedy pairs (cpu index, npu index, IoU), the highest IoU first, same class only."""
    found = sorted(((_iou(c[0], n[0]), i, j) for i, c in enumerate(cpu) for j, n in enumerate(npu) if c[2] == n[2]),
                   reverse=True)
    used_c: set[int] = set()
    used_n: set[int] = set()
    pairs = []
    for iou, i, j in found:
        if iou >= least and i not in used_c and j not in used_n:
            used_c.add(i)
            used_n.add(j)
            pairs.append((i, j, iou))
    return pairs


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over union of two (x1, y1, x2, y2) boxes, corners in either order."""
    import numpy as np

    ax1, ax2, ay1, ay2 = min(a[0], a[2]), max(a[0], a[2]), min(a[1], a[3]), max(a[1], a[3])
    bx1, bx2, by1, by2 = min(b[0], b[2]), max(b[0], b[2]), min(b[1], b[3]), max(b[1], b[3])
    inter = max(0.0, min(ax2, bx2) - max(ax1, bx1)) * max(0.0, min(ay2, by2) - max(ay1, by1))
    union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter
    return float(inter / union) if union > 0 else float(np.array_equal(a, b))


def ctc_texts(output: np.ndarray, task: Task) -> list[str]:
    """Greedy CTC: each row's best class per step, repeats merged, blanks dropped, joined through the tokens (outer
    spaces dropped, as an app shows the text)."""
    import numpy as np

    steps = np.asarray(output)
    steps = steps.reshape(-1, *steps.shape[-2:]) if steps.ndim >= 2 else steps.reshape(1, 1, -1)
    texts = []
    for row in steps:
        best = row.argmax(axis=-1)
        kept = [int(t) for i, t in enumerate(best) if t != task.blank and (i == 0 or t != best[i - 1])]
        texts.append("".join(task.tokens[t] if t < len(task.tokens) else "?" for t in kept).strip())
    return texts


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two sequences (characters or words)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def read_tokens(path: Path, size: int | None) -> tuple[str, ...]:
    """A tokens file: one token per line (a PaddleOCR dictionary: index 0 is CTC's blank, added here when the file
    is one short of the output), or sherpa-onnx's `TOKEN ID` lines."""
    lines = text_lines(path, "--task tokens")
    pairs = [line.rpartition(" ") for line in lines]
    if lines and all(sep and idx.isdigit() for _, sep, idx in pairs):
        by_id = {int(idx): tok for tok, _, idx in pairs}
        return tuple(by_id.get(i, "") for i in range(max(by_id) + 1))
    return _fitted(lines, size)


def _vocabulary(model: onnx.ModelProto, size: int | None) -> tuple[str, ...]:
    meta = {p.key: p.value for p in model.metadata_props}
    text = meta.get(PADDLE_VOCAB)
    if not text or size is None:
        return ()
    chars = text.split("\n")
    fitted = _fitted(chars, size)
    # a CTC recognizer's output has room for the blank beyond its characters; a layout detector's class labels (which
    # PaddleOCR keeps under the same key) fill its class axis exactly, and are no vocabulary
    return fitted if len(fitted) == size and size > len(chars) else ()


def _fitted(chars: list[str], size: int | None) -> tuple[str, ...]:
    """PaddleOCR's layout: blank first, the dictionary, then a space when the output has room for one more."""
    if size is not None and size == len(chars) + 2:
        return ("", *chars, " ")
    if size is not None and size == len(chars) + 1:
        return ("", *chars)
    return tuple(chars)


def _softmax_rows(graph: onnx.GraphProto) -> set[str]:
    """Outputs made by Softmax or LogSoftmax over their last axis whose other dims are all 1: one row of scores."""
    producers = {o: n for n in graph.node for o in n.output}
    found = set()
    for value in graph.output:
        info = onnxio.tensor_info(value)
        node = producers.get(value.name)
        if (node is not None and node.op_type in ("Softmax", "LogSoftmax") and info.shape and not info.dynamic
                and math.prod(info.static_shape[:-1]) == 1 and info.static_shape[-1] > 1):
            axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
            if axis in (-1, len(info.shape) - 1):
                found.add(value.name)
    return found


def _only(kind: TaskKind, model: Path, outputs: Mapping[str, onnxio.TensorInfo]) -> str:
    if len(outputs) == 1:
        return next(iter(outputs))
    found = detect(model)
    if found.kind == kind and found.output is not None:
        return found.output
    raise BadInput(f"--task {kind.value}: {model.name} has {len(outputs)} outputs ({', '.join(outputs)}): say which "
                   f"the app reads, --task {kind.value}:output=NAME")


def rejudge(verdict: JSON, limits: Mapping[str, float]) -> str | None:
    """A recorded task verdict (TaskVerdict.json) judged again from its figures, never from its `passed`: None when
    they hold `limits` by judge's rules, else why not (bundle verify holds an on-device record to it)."""
    kind, figures = verdict.get("kind"), verdict.get("figures")
    rules = {TaskKind.CLASSIFY: ("top1_agreement", "min_top1", 1), TaskKind.EMBED: ("min_cosine", "min_cosine", 1),
             TaskKind.OCR: ("error_rate", "max_error_rate", -1), TaskKind.ASR: ("error_rate", "max_error_rate", -1),
             TaskKind.DETECT: ("error_rate", "max_error_rate", -1)}
    rule = rules.get(TaskKind(kind)) if kind in {k.value for k in TaskKind} else None
    if rule is None:
        return f"its task verdict is of no known kind ({kind!r})"
    figure, key, sign = rule
    value = figures.get(figure) if isinstance(figures, dict) else None
    if not is_number(value):
        return f"its {kind} verdict has no {figure}"
    needed = float(limits[key]) if key == "min_cosine" else limit(limits, key)
    if sign * (value - needed) >= 0:
        return None
    return f"{kind} {figure} {value:g} (needs {'>=' if sign > 0 else '<='} {needed:g})"


def decided(verdict: JSON | None) -> set[str]:
    """The outputs a recorded task verdict (TaskVerdict.json) decides for: their tensor figures are evidence."""
    if not verdict or verdict.get("kind", "tensor") == "tensor":
        return set()
    roles = verdict.get("roles")
    return ({str(verdict.get("output"))} | ({str(v) for v in roles.values()} if isinstance(roles, dict) else set()))

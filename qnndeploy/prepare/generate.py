"""`prepare --generate`: a decoder LLM as the static graphs the app runs on the HTP, in parts that load.

From one decoder with its KV cache (transformers/optimum layout) it writes, for each of P parts, a prompt graph (N
tokens at once) and a decode graph (one token), at a fixed context length, the cache and the mask explicit and only
the new cache entries out (model/generation.py says how the host keeps the cache). The layers are cut into parts
where the residual stream passes from one to the next; the embedding lands in the first part, the lm_head in the
last. Nothing is written unless the parts, run by the app's own loop on onnxruntime's CPU, choose the same tokens as
the source model over `steps` greedy steps from a seeded prompt, their logits within the tolerance.

The files: OUT-p1-prompt.onnx, OUT-p1-decode.onnx ... and OUT.generation.json, the plan compile, validate and
bundle build read (formats/generation.py).
"""

from __future__ import annotations

import gc
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base.errors import BadInput, CheckFailed
from qnndeploy.base.fileio import sha256_file, work_beside
from qnndeploy.base.kinds import Precision
from qnndeploy.formats.generation import GenerationPlan, PlanGraph, PlanPart, Proof, Role, calib_beside
from qnndeploy.model import generation, loadplan, split
from qnndeploy.model.decode import Detokenizer
from qnndeploy.model.generation import DecoderLayout
from qnndeploy.model.onnxio import TensorInfo, load_model, tensor_info
from qnndeploy.model.samples import Sample
from qnndeploy.prepare import PrepareOptions, prepare_model

if TYPE_CHECKING:
    import onnx

DEFAULT_PROMPT, DEFAULT_CONTEXT, DEFAULT_STEPS = 128, 1024, 256
LOGITS_TOLERANCE = 1e-3  # max abs diff of a logits row, float32 on both sides: the folding reorders sums


@dataclass(frozen=True)
class GenerateOptions:
    prompt_tokens: int = DEFAULT_PROMPT
    context: int = DEFAULT_CONTEXT
    parts: int = 1
    steps: int = DEFAULT_STEPS  # greedy steps of the proof (fewer when the context fills)
    tolerance: float = LOGITS_TOLERANCE
    seed: int = 0  # of the proof's prompt
    calib_tokens: Path | None = None  # token id sequences, one per line, that calibration samples are made from
    tokenizer: Path | None = None  # tokenizer.json: the tokens' text, which validate shows and the bundle carries
    precision: Precision = Precision.W8A16  # the compile's: the parts are balanced by what it stores
    force: bool = False


CALIB_PER_GRAPH = 24  # calibration samples written per graph (compile --calib DIR/GRAPH/; it asks for 20 or more)
CALIB_STEPS = 32  # greedy steps after each calibration sequence
CALIB_PROMPTS = 12  # seeded prompts the default calibration runs (two prompt chunks each)


def plan_path(out: Path) -> Path:
    """OUT.onnx -> OUT.generation.json"""
    s = split.stem(out)
    return s.with_name(f"{s.name}.generation.json")


def data_paths(out: Path, parts: int) -> list[Path]:
    """OUT.onnx -> [OUT-p1.data, ...]: each part's weights, which its prompt and decode graphs share."""
    s = split.stem(out)
    return [s.with_name(f"{s.name}-p{k}.data") for k in range(1, parts + 1)]


def graph_paths(out: Path, parts: int) -> list[tuple[Path, Path]]:
    """OUT.onnx -> [(OUT-p1-prompt.onnx, OUT-p1-decode.onnx), ...]"""
    s = split.stem(out)
    return [tuple(s.with_name(f"{s.name}-p{k}-{r.value}.onnx") for r in (Role.PROMPT, Role.DECODE))  # type: ignore[misc]
            for k in range(1, parts + 1)]


def prepare_generation(src: Path, out: Path, options: GenerateOptions = GenerateOptions()) -> GenerationPlan:
    """Write the parts' prompt and decode graphs and OUT.generation.json, proven on the CPU; the plan as written."""
    o = options
    start = time.monotonic()
    src, out = Path(src), Path(out)
    graph = load_model(src, weights=False).graph
    lay = generation.layout(graph, str(src))
    if not 1 < o.prompt_tokens < o.context:
        raise BadInput(f"--prompt-tokens {o.prompt_tokens}: give 2 or more, below --context-tokens ({o.context})")
    if not 1 <= o.parts <= lay.layers:
        raise BadInput(f"--parts {o.parts}: give 1 to {lay.layers} (the model's layers)")
    if o.steps < 1:
        raise BadInput(f"--steps {o.steps}: give 1 or more")
    if o.tokenizer is not None:
        Detokenizer(o.tokenizer)  # one line now, not after the proof, when it is not one
    paths = graph_paths(out, o.parts)
    record = plan_path(out)
    for p in [*(q for pair in paths for q in pair), *data_paths(out, o.parts), record, calib_beside(record)]:
        if p.exists() and not o.force:
            raise BadInput(f"{p} already exists; pass --force to replace it")
    with work_beside(record, "generate") as work:
        return _build(src, lay, o, _boundaries(graph, lay, o.parts, o.precision), out, work, start)


def _build(src: Path, lay: DecoderLayout, o: GenerateOptions, boundaries: list[int], out: Path, work: Path,
           start: float) -> GenerationPlan:
    paths, record, datas = graph_paths(out, o.parts), plan_path(out), data_paths(out, o.parts)
    staged: dict[Role, list[split.Part]] = {}
    for role, seq in ((Role.PROMPT, o.prompt_tokens), (Role.DECODE, 1)):
        static = work / f"{role.value}.onnx"
        sample = _sample(work / f"{role.value}-sample", lay, seq, o.context)
        prepare_model(src, static, PrepareOptions(shapes=generation.static_shapes(lay, seq, o.context),
                                                  int32_inputs=True, inputs_dir=sample, force=True))
        model = load_model(static)
        generation.new_entries_only(model.graph, lay, seq)
        rewired = work / f"{role.value}-new.onnx"
        split.save(model, rewired)
        starts = generation.layer_inputs(model.graph, lay)
        del model
        ends = [[starts[end - 1], *lay.kv_outputs(range(first, end))]
                for first, end in zip([0, *boundaries], boundaries, strict=False)]
        staged[role] = _cut(rewired, ends, [work / f"{role.value}-{k}.onnx" for k in range(1, o.parts + 1)])
    for k, data in enumerate(datas):  # before the proof, which then runs the files as they are shipped
        split.share_weights([Path(staged[role][k].path) for role in Role], work / data.name)
    calib = _Calibration(work / "calib", {o.prompt_tokens: [p.stem for p, _ in paths], 1: [d.stem for _, d in paths]},
                         {1: [p.inputs for p in staged[Role.DECODE]],
                          o.prompt_tokens: [p.inputs for p in staged[Role.PROMPT]]})
    proof = _prove(src, lay, o, [p.path for p in staged[Role.PROMPT]], [p.path for p in staged[Role.DECODE]],
                   calib)
    layers = list(zip([0, *boundaries], [*boundaries, lay.layers], strict=True))
    parts: list[PlanPart] = []
    for k, (first, end) in enumerate(layers):
        graphs = []
        (work / datas[k].name).replace(datas[k])
        for role, final in zip((Role.PROMPT, Role.DECODE), paths[k], strict=True):
            part = staged[role][k]
            final.with_name(final.name + ".data").unlink(missing_ok=True)  # an earlier prepare's own data file
            Path(part.path).replace(final)
            graphs.append(PlanGraph(role, final.stem, final.name, sha256_file(final),
                                          tuple(i.name for i in part.inputs), tuple(x.name for x in part.outputs),
                                          part.weight_bytes))
        parts.append(PlanPart(k + 1, (first, end - 1), tuple(graphs)))
    calib_out = calib_beside(record)
    if calib_out.exists():
        shutil.rmtree(calib_out)
    (work / "calib").replace(calib_out)
    plan = GenerationPlan(
        path=record, source=str(src.resolve()), source_sha256=sha256_file(src), prompt_tokens=o.prompt_tokens,
        context=o.context, layers=lay.layers, kv_heads=lay.kv_heads, head_dim=lay.head_dim, kv_dtype=lay.dtype,
        input_ids=lay.input_ids, attention_mask=lay.attention_mask, position_ids=lay.position_ids, logits=lay.logits,
        kv=tuple((kv.key[0], kv.key[1], kv.value[0], kv.value[1]) for kv in lay.kv), parts=tuple(parts), proof=proof,
        calibration=calib.described,
        tokenizer=None if o.tokenizer is None else (str(o.tokenizer.resolve()), sha256_file(o.tokenizer)),
        precision=o.precision.value,
        seconds=round(time.monotonic() - start, 2))
    plan.write()
    return plan


def _boundaries(graph: onnx.GraphProto, lay: DecoderLayout, parts: int, precision: Precision) -> list[int]:
    """The first layer of parts 2..P: the layers, the embedding in part 1 and the lm_head in part P, shared out by
    the bytes the compiler stores at `precision`, the largest part as small as it goes (check's plan)."""
    return [p.first for p in loadplan.decoder_bytes(graph, loadplan.stored(graph, precision), lay.logits)
            .split(parts)[1:]]


def _sample(folder: Path, lay: DecoderLayout, seq: int, context: int) -> Path:
    """A sample the prepared graph is proven on: real ids, positions and a mask of a half-full cache (random ids and
    masks could mask a whole row out)."""
    import numpy as np

    folder.mkdir()
    rng = np.random.default_rng(0)
    filled = (context - seq) // 2
    mask = np.zeros((1, context), np.int64)
    mask[0, context - seq - filled:] = 1
    np.save(folder / f"{lay.input_ids}.npy", rng.integers(0, 2, (1, seq)).astype(np.int64))
    np.save(folder / f"{lay.attention_mask}.npy", mask)
    np.save(folder / f"{lay.position_ids}.npy", np.arange(filled, filled + seq, dtype=np.int64)[None, :])
    dtype = np.float16 if lay.dtype == "float16" else np.float32
    for name in lay.kv_inputs():
        np.save(folder / f"{name}.npy",
                rng.standard_normal((1, lay.kv_heads, context - seq, lay.head_dim)).astype(dtype))
    return folder


def _cut(model: Path, ends: list[list[str]], paths: list[Path]) -> list[split.Part]:
    slim = load_model(model, weights=False)
    groups = generation.part_groups(slim.graph, ends)
    names = [str(k) for k in range(1, len(groups) + 1)]
    plans = split.plan_parts(slim.graph, groups, names, ["npu"] * len(groups))
    values, _ = split.cut_values(slim, plans)
    return split.write_parts(model, plans, paths, values)


class _Calibration:
    """Each graph's inputs as the app's loop makes them, a few per graph, written as compile --calib reads them
    (DIR/GRAPH/NNN.npz): the w8a16 and w4a16 activations are calibrated on what the loop really feeds."""

    def __init__(self, folder: Path, graphs: dict[int, list[str]], inputs: dict[int, list[list[TensorInfo]]]):
        self.folder, self.graphs, self.inputs = folder, graphs, inputs
        self.calls: dict[tuple[int, int], int] = {}
        self.every = dict.fromkeys(graphs, 1)  # a prompt chunk each time; decode steps spread (set by _prove)
        self.written: dict[str, int] = {}
        self.described = ""
        folder.mkdir()

    def __call__(self, seq: int, part: int, values: Sample) -> None:
        import numpy as np

        n = self.calls.get((seq, part), 0)
        self.calls[(seq, part)] = n + 1
        graph = self.graphs[seq][part]
        if n % self.every[seq] or self.written.get(graph, 0) >= CALIB_PER_GRAPH:
            return
        at = self.folder / graph
        at.mkdir(exist_ok=True)
        k = self.written.get(graph, 0)
        arrays = {i.name: np.array(values[i.name]) for i in self.inputs[seq][part]}
        np.savez(at / f"{k:03d}.npz", **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as bool
        self.written[graph] = k + 1


def _prove(src: Path, lay: DecoderLayout, o: GenerateOptions, prompt_parts: list[str], decode_parts: list[str],
           calib: _Calibration) -> Proof:
    """The parts in the app's loop against the source, greedy, token by token; the loop's inputs calibrate."""
    import numpy as np

    last = load_model(Path(prompt_parts[-1]), weights=False).graph
    logits = next(tensor_info(v) for v in last.output if v.name == lay.logits)
    vocab = (logits.shape or [""])[-1]
    if not isinstance(vocab, int):
        raise BadInput(f"{lay.logits} has no static vocabulary size after preparing: {logits.shape_text()}")
    ids = generation.seeded_prompt(vocab, o.prompt_tokens, o.seed)
    steps = min(o.steps, o.context - 1 - len(ids))
    # the source first, its session gone before the parts' open: one model's weights in memory at a time, not three
    source = generation.cpu_call(src, f"the source model {src.name}")
    want, want_rows = generation.source_greedy(source, lay, ids, steps, lay.dtype)
    del source
    gc.collect()
    prompt = [generation.cpu_call(Path(p), f"part {k}") for k, p in enumerate(prompt_parts, 1)]
    decode = [generation.cpu_call(Path(p), f"part {k}") for k, p in enumerate(decode_parts, 1)]
    stepper = generation.Stepper(lay, o.prompt_tokens, o.context, prompt, decode)
    got, got_rows = generation.greedy(stepper, ids, steps)
    worst = max(float(np.abs(a.astype(np.float64) - b).max()) for a, b in zip(want_rows, got_rows, strict=False))
    parting = next((k for k, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), None)
    if parting is not None or worst > o.tolerance:
        where = f"they choose different tokens from step {parting}" if parting is not None \
            else f"their logits differ by up to {worst:.3g} (tolerance {o.tolerance:g})"
        raise CheckFailed(f"the prepared parts, run as the app runs them, differ from {src.name}: {where}; "
                          "nothing written")
    if o.calib_tokens is None:
        lines = [generation.seeded_prompt(vocab, o.prompt_tokens, o.seed + 1 + k) for k in range(CALIB_PROMPTS)]
        calib.described = (f"the model's own greedy continuation ({CALIB_STEPS} steps) of {CALIB_PROMPTS} seeded "
                           f"random prompts of {len(lines[0])} tokens: no --calib-tokens given")
    else:
        lines = _token_lines(o.calib_tokens, vocab)
        calib.described = f"{len(lines)} token sequence(s) of {o.calib_tokens}, each then {CALIB_STEPS} greedy steps"
    calib.every[1] = CALIB_STEPS - 2  # each sequence's first and last decode step (CALIB_STEPS - 1 of them)
    for k, given in enumerate(lines):
        calib.calls.clear()
        ran = generation.Stepper(lay, o.prompt_tokens, o.context, prompt, decode, watch=calib)
        line = given[:max(1, o.context - 1 - CALIB_STEPS)]
        if k % 2:  # every other sequence ends at the context's last position: what is computed from positions
            ran.position = o.context - len(line) - CALIB_STEPS  # (rotary tables) gets its whole range: CL - 2
        generation.greedy(ran, line, CALIB_STEPS)
    return Proof(prompt=len(ids), steps=len(got), same_tokens=True, max_logit_diff=worst, vocab=vocab,
                 seed=o.seed)


def _token_lines(path: Path, vocab: int) -> list[list[int]]:
    """Token ids, whitespace-separated, a sequence per line; each id below the vocabulary size."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"--calib-tokens {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    lines = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            ids = [int(t) for t in line.split()]
        except ValueError:
            raise BadInput(f"--calib-tokens {path}:{n}: give token ids as whole numbers separated by spaces"
                           ) from None
        if any(not 0 <= t < vocab for t in ids):
            raise BadInput(f"--calib-tokens {path}:{n}: a token id outside 0..{vocab - 1} (the vocabulary)")
        lines.append(ids)
    if not lines:
        raise BadInput(f"--calib-tokens {path}: no token ids in it")
    return lines

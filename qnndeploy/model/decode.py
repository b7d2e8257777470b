"""An encoder-decoder's greedy decode loop, as the app runs it: the encoder once, then the decoder once per token with
its self-attention cache fed back, until the end token. Validating each graph alone judges the decoder on inputs the
loop never makes; only the loop says whether the app gets the same text.

The loop is data (`Loop`): which graph is the encoder and which the decoder, which decoder input takes the token, its
position and mask, which take the encoder's outputs, which cache each new key/value goes into, the prompt and the end
token. A graph too big for one HTP context is cut into parts (`prepare --split-size`): the loop then names them in
running order, and runs them chained by tensor name (model/split.py's chain) as one call. `whisper` reads it off a
Whisper exported the way sherpa-onnx's scripts/whisper/qnn/export_onnx.py exports it (I/O names `<model>-tokens`,
`<model>-self_k_<i>`, `cross_k_<i>`, ...; the token ids in the graphs' metadata). The graphs run through callables, so
the same loop runs on onnxruntime's CPU and the HTP emulator.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base.errors import BadInput
from qnndeploy.base.fileio import JSON, sha256_file
from qnndeploy.model.onnxio import load_model, model_inputs, model_outputs
from qnndeploy.model.samples import Sample
from qnndeploy.model.split import run_chain
from qnndeploy.model.tasks import key_values, text_lines

if TYPE_CHECKING:
    import numpy as np

GraphCall = Callable[[Sample], Sample]  # one graph call: inputs by name -> outputs by name
MAX_TOKENS = 200  # sherpa-onnx's Whisper stops there too


@dataclass(frozen=True)
class Loop:
    encoder: str  # graph names (the build's)
    decoder: str
    encoder_input: str
    token: str  # decoder input [1, 1] int32: this step's token
    position: str  # decoder input [1] int32: its place in the cache
    mask: str | None  # decoder input [cache] int32: 0 for the positions already filled, 1 for the rest
    logits: str  # decoder output [1, 1, vocab]
    cross: tuple[tuple[str, str], ...]  # (decoder input, encoder output it takes)
    cache: tuple[tuple[str, str], ...]  # (decoder input [1, steps, dim], output [1, 1, dim] written at position)
    prompt: tuple[int, ...]  # fed one by one before the first choice
    end: int
    max_tokens: int = MAX_TOKENS
    tokenizer: Path | None = None  # tokenizer.json or sherpa-onnx's tokens.txt: the text of the tokens
    why: str = ""
    texts: Path | None = None  # the true text of each sample, one per line: each side's word error rate
    # A split encoder or decoder (prepare --split-size): its parts' graphs in running order, chained by tensor name;
    # `encoder`/`decoder` then name the whole (the split's name). Empty: the graph `encoder`/`decoder` itself.
    encoder_parts: tuple[str, ...] = ()
    decoder_parts: tuple[str, ...] = ()

    @property
    def encoders(self) -> tuple[str, ...]:
        """The graphs that run as the encoder, in order."""
        return self.encoder_parts or (self.encoder,)

    @property
    def decoders(self) -> tuple[str, ...]:
        """The graphs that run as the decoder, in order."""
        return self.decoder_parts or (self.decoder,)

    @property
    def graphs(self) -> tuple[str, ...]:
        """Every graph the loop runs: the loop's verdict decides each of them."""
        return (*self.encoders, *self.decoders)

    def description(self) -> JSON:
        """The loop as data: what `--loop FILE.json` reads and a bundle's manifest carries (tokenizer aside)."""
        return {"encoder": self.encoder, "decoder": self.decoder, "encoder_input": self.encoder_input,
                "token": self.token, "position": self.position, "mask": self.mask, "logits": self.logits,
                "cross": dict(self.cross), "cache": dict(self.cache), "prompt": list(self.prompt), "end": self.end,
                "max_tokens": self.max_tokens,
                **({"encoder_parts": list(self.encoder_parts)} if self.encoder_parts else {}),
                **({"decoder_parts": list(self.decoder_parts)} if self.decoder_parts else {})}

    def json(self) -> JSON:
        """The record's form: the description, where it was read from, and the tokenizer file with its hash (what
        bundle build ships, refused when it changed since)."""
        tokenizer = None if self.tokenizer is None else {"path": str(self.tokenizer.resolve()),
                                                          "sha256": sha256_file(self.tokenizer)}
        return {**self.description(), "why": self.why, "tokenizer": tokenizer}


def described(data: JSON, tokenizer: Path | None = None, why: str = "") -> Loop:
    """A Loop from its description (Loop.description's form); KeyError, TypeError or ValueError when it is not one."""
    mask = data.get("mask")
    parts = {role: tuple(str(g) for g in data.get(f"{role}_parts") or ()) for role in ("encoder", "decoder")}
    if any(len(p) == 1 or len(set(p)) != len(p) for p in parts.values()):
        raise ValueError("a split graph's parts are two or more graphs, each named once")
    return Loop(str(data["encoder"]), str(data["decoder"]), str(data["encoder_input"]), str(data["token"]),
                str(data["position"]), None if mask is None else str(mask), str(data["logits"]),
                tuple((str(a), str(b)) for a, b in data["cross"].items()),
                tuple((str(a), str(b)) for a, b in data["cache"].items()),
                tuple(int(t) for t in data["prompt"]), int(data["end"]), int(data.get("max_tokens", MAX_TOKENS)),
                tokenizer, why, encoder_parts=parts["encoder"], decoder_parts=parts["decoder"])


@dataclass
class Decoded:
    tokens: list[int]  # the chosen tokens, the prompt and the end token left out
    steps: int  # decoder calls
    margins: list[float] = field(default_factory=list)  # each choice's top-1 minus top-2 logit
    feeds: list[Sample] = field(default_factory=list, repr=False)  # the decoder's inputs at each step (kept_feeds)


Splits = Mapping[str, Sequence[str]]  # a split's name -> its parts' graphs in running order (prepare --split-size)


def parse(text: str, models: Mapping[str, Path], splits: Splits | None = None) -> Loop:
    """--loop whisper[:tokenizer=FILE,texts=FILE,max_tokens=N] (the preset, its graphs found among `models`, graph
    -> ONNX path, a split's parts standing for the split) or --loop FILE.json (the Loop's fields, tokenizer relative
    to the file)."""
    kind, options = key_values("--loop", text, ("tokenizer", "max_tokens", "texts"),
                               "tokenizer=FILE, texts=FILE or max_tokens=N")
    if not options.get("max_tokens", "1").isdigit() or int(options.get("max_tokens", "1")) < 1:
        raise BadInput(f"--loop {text}: max_tokens is a number of tokens, 1 or more")
    tokenizer = Path(options["tokenizer"]) if "tokenizer" in options else None
    if kind == "whisper":
        loop = whisper(models, tokenizer, splits or {})
    elif kind.endswith(".json"):
        loop = _from_file(Path(kind), models)
    else:
        raise BadInput(f"--loop {text}: give whisper (sherpa-onnx's Whisper export) or a loop description FILE.json")
    if "max_tokens" in options or "texts" in options:
        loop = dataclasses.replace(loop, max_tokens=int(options.get("max_tokens", loop.max_tokens)),
                                   texts=Path(options["texts"]) if "texts" in options else loop.texts)
    for what, path in (("tokenizer", loop.tokenizer), ("texts", loop.texts)):
        if path is not None and not path.is_file():
            raise BadInput(f"--loop {text}: no {what} file {path}")
    return loop


def references(loop: Loop) -> list[str] | None:
    """The true texts, one per sample, when the loop names them."""
    return None if loop.texts is None else text_lines(loop.texts, "--loop texts")


def chain_io(models: Mapping[str, Path], graphs: Sequence[str]) -> tuple[list[str], list[str]]:
    """What graphs run one after another read from their caller (every input no graph before it makes), in order,
    and everything they make."""
    inputs: list[str] = []
    outputs: list[str] = []
    for graph in graphs:
        inputs += [i.name for i in model_inputs(models[graph]) if i.name not in outputs and i.name not in inputs]
        outputs += [o.name for o in model_outputs(models[graph])]
    return inputs, outputs


def _wholes(models: Mapping[str, Path], splits: Splits) -> dict[str, tuple[str, ...]]:
    """Each whole model among `models`: a split (all its parts there) by its name, any other graph by its own."""
    found = {name: tuple(parts) for name, parts in splits.items() if parts and all(p in models for p in parts)}
    taken = {p for parts in found.values() for p in parts}
    for graph in models:
        if graph in taken:
            continue
        if graph in found:
            raise BadInput(f"--loop whisper: graph {graph} has the name of the split {graph} (its parts "
                           f"{', '.join(found[graph])}): compile it under another name")
        found[graph] = (graph,)
    return found


def whisper(models: Mapping[str, Path], tokenizer: Path | None = None, splits: Splits | None = None) -> Loop:
    """The loop of a Whisper exported as sherpa-onnx's QNN script exports it: the decoder takes `<m>-tokens`,
    `<m>-self_k_<i>`/`<m>-self_v_<i>`, `<m>-cross_k_<i>`/`<m>-cross_v_<i>`, `<m>-offset`, `<m>-mask` and gives
    `<m>-logits`, `<m>-this_self_k_<i>`/`<m>-this_self_v_<i>`; the encoder takes `<m>-mel` and gives `cross_k_<i>`,
    `cross_v_<i>`; the metadata holds sot_sequence, no_timestamps and eot. An encoder or decoder cut into parts
    (`splits`: each split's name -> its parts' graphs in running order) is found as the parts chained: what they
    read from the loop and what they make, together."""
    wholes = _wholes(models, splits or {})
    io = {name: chain_io(models, parts) for name, parts in wholes.items()}
    decoder = next((n for n, (ins, _) in io.items() if any(i.endswith("-tokens") for i in ins)), None)
    if decoder is None:
        raise BadInput("--loop whisper: no graph takes <model>-tokens, as sherpa-onnx's Whisper decoder does")
    inputs, made = io[decoder]
    prefix = next(i for i in inputs if i.endswith("-tokens"))[: -len("-tokens")]
    encoder = next((n for n, (ins, _) in io.items() if f"{prefix}-mel" in ins), None)
    if encoder is None:
        raise BadInput(f"--loop whisper: no graph takes {prefix}-mel, as sherpa-onnx's Whisper encoder does")
    outputs = set(made)
    cache = tuple((i, f"{prefix}-this_{i[len(prefix) + 1:]}") for i in inputs if re.fullmatch(
        rf"{re.escape(prefix)}-self_[kv]_\d+", i))
    cross = tuple((i, i[len(prefix) + 1:]) for i in inputs if re.fullmatch(rf"{re.escape(prefix)}-cross_[kv]_\d+", i))
    missing = [o for _, o in cache if o not in outputs] + [f"{prefix}-logits"] * (f"{prefix}-logits" not in outputs)
    encoded = set(io[encoder][1])
    missing += [o for _, o in cross if o not in encoded]
    if missing or not cache or not cross:
        raise BadInput(f"--loop whisper: {decoder} and {encoder} lack {', '.join(missing) or 'the caches'} of "
                       "sherpa-onnx's Whisper export")
    meta: dict[str, str] = {}
    for graph in (*wholes[encoder], *wholes[decoder]):  # a part keeps its source's metadata (prepare's split)
        meta.update({p.key: p.value for p in load_model(models[graph], weights=False).metadata_props})
    try:
        prompt = (*(int(t) for t in meta["sot_sequence"].split(",")), int(meta["no_timestamps"]))
        end = int(meta["eot"])
    except (KeyError, ValueError):
        raise BadInput(f"--loop whisper: {decoder}'s metadata lacks sot_sequence, no_timestamps or eot (sherpa-onnx's "
                       "export writes them): describe the loop in a FILE.json") from None
    parts = {name: wholes[name] if len(wholes[name]) > 1 else () for name in (encoder, decoder)}
    found = f"{encoder} and {decoder}" + "".join(f" ({name}: {', '.join(p)})" for name, p in parts.items() if p)
    return Loop(encoder, decoder, f"{prefix}-mel", f"{prefix}-tokens", f"{prefix}-offset",
                f"{prefix}-mask" if f"{prefix}-mask" in inputs else None, f"{prefix}-logits", cross, cache, prompt,
                end, tokenizer=tokenizer, why=f"sherpa-onnx's Whisper export ({prefix}), found in {found}",
                encoder_parts=parts[encoder], decoder_parts=parts[decoder])


def _from_file(path: Path, models: Mapping[str, Path]) -> Loop:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        loop = described(data, path.parent / data["tokenizer"] if data.get("tokenizer") else None,
                         f"described in {path}")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"--loop {path}: cannot read it ({e})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise BadInput(f"--loop {path}: not a loop description ({type(e).__name__}: {e}); it holds encoder, decoder, "
                       "encoder_input, token, position, mask, logits, cross {input: output}, cache {input: output}, "
                       "prompt, end[, max_tokens, tokenizer, encoder_parts, decoder_parts]") from None
    for graph in loop.graphs:
        if graph not in models:
            raise BadInput(f"--loop {path}: no graph {graph} among {', '.join(sorted(models))}")
    return loop


@dataclass(frozen=True)
class ChainedGraph:
    """One graph of a chain as the loop calls it (model/split.py's Chained): its model, the tensors it reads and
    makes, and the call that runs it (onnxruntime's CPU, or the HTP emulator)."""

    path: Path
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    call: GraphCall


def steps(models: Mapping[str, Path], graphs: Sequence[str], make: Callable[[str], GraphCall]) -> list[ChainedGraph]:
    """The graphs (an encoder or a decoder, whole or its parts in order) as Steps, each run by make(graph)."""
    return [ChainedGraph(models[g], tuple(i.name for i in model_inputs(models[g])),
                 tuple(o.name for o in model_outputs(models[g])), make(g)) for g in graphs]


def chained(parts: Sequence[ChainedGraph]) -> GraphCall:
    """The graphs as one call: each fed what the caller gives and the graphs before it made (split.run_chain), every
    tensor returned, so the loop reads the logits and new cache entries of whichever part makes them."""
    def call(feeds: Sample) -> Sample:
        (values,) = run_chain(parts, [feeds], lambda part, batch: [part.call(f) for f in batch])
        return values

    return call


def greedy(loop: Loop, encoded: Sample, decoder: GraphCall, cache_shapes: Mapping[str, list[int]], keep_feeds: int = 0
           ) -> Decoded:
    """The app's loop after the encoder (`encoded`: its outputs): the decoder per position, the prompt's tokens
    first, then each argmax, until the end token, `max_tokens` positions or a full cache. `cache_shapes` gives each
    cache input's [1, steps, dim]; the first `keep_feeds` steps' decoder inputs are kept (copies)."""
    import numpy as np

    feeds: dict[str, np.ndarray] = {i: np.zeros(cache_shapes[i], np.float32) for i, _ in loop.cache}
    feeds.update({i: encoded[o] for i, o in loop.cross})
    length = cache_shapes[loop.cache[0][0]][1]
    steps = min(length, loop.max_tokens)
    decoded = Decoded([], 0)
    token, position, prompt = loop.prompt[0], 0, list(loop.prompt[1:])
    while position < steps:
        feeds[loop.token] = np.array([[token]], np.int32)
        feeds[loop.position] = np.array([position], np.int32)
        if loop.mask is not None:
            mask = np.ones(length, np.int32)
            mask[:position] = 0
            feeds[loop.mask] = mask
        if len(decoded.feeds) < keep_feeds:
            decoded.feeds.append({k: v.copy() for k, v in feeds.items()})
        out = decoder(feeds)
        for cached, new in loop.cache:
            feeds[cached][:, position] = out[new][:, 0]
        position += 1
        decoded.steps += 1
        if prompt:
            token = prompt.pop(0)
            continue
        scores = np.asarray(out[loop.logits], np.float64).reshape(-1, np.asarray(out[loop.logits]).shape[-1])[-1]
        top = np.argsort(-scores)[:2]
        token = int(top[0])
        decoded.margins.append(float(scores[top[0]] - scores[top[1]]))
        if token == loop.end:
            break
        decoded.tokens.append(token)
    return decoded


class Detokenizer:
    """The text of token ids: a tokenizer.json's byte-level BPE vocabulary (GPT-2's, Whisper's; special tokens left
    out), or sherpa-onnx's Whisper tokens.txt (`BASE64 ID` per line); without one, the ids themselves."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.pieces: dict[int, bytes] = {}
        if path is None:
            return
        try:
            text = Path(path).read_text(encoding="utf-8")
            if path.suffix == ".json":
                spec = json.loads(text)
                byte_of = {c: b for b, c in _bytes_to_unicode().items()}
                special = {int(t["id"]) for t in spec.get("added_tokens", [])}
                self.pieces = {int(i): bytes(byte_of.get(c, 63) for c in token)
                               for token, i in spec["model"]["vocab"].items() if int(i) not in special}
            else:
                for line in text.splitlines():
                    token, _, index = line.rpartition(" ")
                    self.pieces[int(index)] = base64.b64decode(token, validate=True)
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError, binascii.Error) as e:
            raise BadInput(f"tokenizer {path}: not a tokenizer.json or sherpa-onnx tokens.txt ({e})") from None

    def text(self, tokens: list[int]) -> str:
        if self.path is None:
            return " ".join(str(t) for t in tokens)
        return b"".join(self.pieces.get(t, b"") for t in tokens).decode("utf-8", errors="replace").strip()


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte (what byte-level BPE vocabularies are written in)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {b: chr(b) for b in kept}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def words(text: str) -> list[str]:
    """Lower case, punctuation dropped (apostrophes inside words kept): what a word error rate compares."""
    return re.sub(r"[^\w' ]+", " ", text.lower().replace("-", " ")).replace(" '", " ").split()

"""The decode loop as data, on a scripted decoder: the prompt fed token by token, each new key written into its cache
at the token's position, the mask, the end token; the tokenizers; where two loops part and what that costs in words."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from qnndeploy.base.errors import BadInput
from qnndeploy.model import decode
from qnndeploy.qnn import loop as loop_stage

LOOP = decode.Loop("enc", "dec", "mel", "tokens", "offset", "mask", "logits", (("cross", "out"),),
                   (("self_k", "this_k"),), prompt=(7, 8), end=0, max_tokens=10)


def scripted(answers: list[int], seen: list[dict]) -> decode.GraphCall:
    """A decoder that answers token `answers[position - 1]` after the prompt, and records what it was fed."""

    def run(feeds):
        seen.append({k: v.copy() for k, v in feeds.items()})
        position = int(feeds["offset"][0])
        logits = np.zeros((1, 1, 10), np.float32)
        logits[0, 0, answers[min(position, len(answers) - 1)]] = 5.0
        logits[0, 0, 9] = 4.0  # the runner-up, 1.0 below
        return {"logits": logits, "this_k": np.full((1, 1, 2), position + 1, np.float32)}

    return run


def test_the_loop_feeds_the_prompt_writes_each_key_at_its_position_and_stops_at_the_end_token() -> None:
    seen: list[dict] = []
    decoded = decode.greedy(LOOP, {"out": np.ones((1, 3, 2), np.float32)}, scripted([0, 3, 4, 0], seen),
                            {"self_k": [1, 6, 2]}, keep_feeds=2)
    assert decoded.tokens == [3, 4] and decoded.steps == 4 and decoded.margins == [1.0, 1.0, 1.0]
    assert [int(f["tokens"][0, 0]) for f in seen] == [7, 8, 3, 4]  # the prompt, then each choice
    assert seen[3]["mask"].tolist() == [0, 0, 0, 1, 1, 1]  # the three filled positions
    assert seen[3]["self_k"][0, :, 0].tolist() == [1, 2, 3, 0, 0, 0]  # each step's key at its position
    assert (seen[0]["cross"] == 1).all() and len(decoded.feeds) == 2


def test_a_full_cache_or_max_tokens_ends_the_loop() -> None:
    decoded = decode.greedy(LOOP, {"out": np.ones((1, 3, 2), np.float32)}, scripted([5], []), {"self_k": [1, 4, 2]})
    assert decoded.steps == 4 and decoded.tokens == [5, 5, 5]  # two prompt steps, then a choice after each


def test_two_loops_part_at_the_first_different_token_and_their_texts_are_compared_by_words(tmp_path: Path) -> None:
    (tmp_path / "tokens.txt").write_text("".join(f"{base64.b64encode(w.encode()).decode()} {i}\n"
                                                 for i, w in enumerate(["", " the", " cat", " sat", " bat"])))
    looped = decode.Loop(**{**LOOP.__dict__, "tokenizer": tmp_path / "tokens.txt"})
    cpu = loop_stage.CpuRun([{}], [{}], [decode.Decoded([1, 2, 3], 5, [2.0, 0.05, 1.0])], {"kind": "random"})
    npu = [decode.Decoded([1, 4, 3], 5)]
    check = loop_stage.judge(looped, "SM8650", cpu, npu, {}, ["The cat sat."])
    assert not check.passed and check.error_rate == pytest.approx(1 / 3) and check.same_tokens == 0
    (sample,) = check.samples
    assert (sample["cpu"], sample["npu"], sample["parts_at"], sample["cpu_margin_there"]) == (
        "the cat sat", "the bat sat", 1, 0.05)
    assert check.truth == {"cpu": 0.0, "npu": pytest.approx(1 / 3)}
    assert loop_stage.judge(looped, "SM8650", cpu, npu, {"max_error_rate": 0.5}).passed


def test_a_tokenizer_json_is_byte_level_bpe_with_its_special_tokens_left_out(tmp_path: Path) -> None:
    vocab = {"Hello": 0, "\u0120world": 1, "<|endoftext|>": 2}  # GPT-2 writes a leading space as U+0120
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}, "added_tokens": [
        {"id": 2, "content": "<|endoftext|>"}]}))
    assert decode.Detokenizer(tmp_path / "tokenizer.json").text([0, 1, 2]) == "Hello world"
    assert decode.Detokenizer(None).text([0, 1]) == "0 1"
    (tmp_path / "bad.txt").write_text("not base64! 3\n")
    with pytest.raises(BadInput, match=r"not a tokenizer\.json or sherpa-onnx tokens\.txt"):
        decode.Detokenizer(tmp_path / "bad.txt")


def test_a_loop_given_wrongly_is_one_line_of_bad_input(tmp_path: Path) -> None:
    for text, said in (("beam", "give whisper"), ("whisper:beam=4", "is not tokenizer=FILE"),
                       ("whisper:max_tokens=0", "1 or more"), (str(tmp_path / "none.json"), "cannot read it")):
        with pytest.raises(BadInput, match=said):
            decode.parse(text, {})
    (tmp_path / "loop.json").write_text('{"encoder": "enc"}')
    with pytest.raises(BadInput, match="not a loop description"):
        decode.parse(str(tmp_path / "loop.json"), {})


def test_a_split_decoders_parts_run_chained_as_one_call_in_the_loop() -> None:
    """Part 1 reads the token and the first cache and makes a hidden state and its new key; part 2 reads the hidden
    state (by name) and the second cache and makes the logits: the loop runs them in order at every step, each fed
    what the loop gives and what part 1 made, and writes each part's new key into its own cache."""
    looped = decode.Loop("enc", "dec", "mel", "tokens", "offset", None, "logits", (("cross", "out"),),
                         (("k0", "new_k0"), ("k1", "new_k1")), prompt=(7,), end=0, max_tokens=10,
                         decoder_parts=("dec-1", "dec-2"))
    calls: list[tuple[str, set[str]]] = []

    def first(feeds):
        calls.append(("dec-1", set(feeds)))
        token = int(feeds["tokens"][0, 0])
        return {"hidden": np.array([token], np.float32), "new_k0": np.full((1, 1, 1), token, np.float32)}

    def second(feeds):
        calls.append(("dec-2", set(feeds)))
        logits = np.zeros((1, 1, 10), np.float32)
        logits[0, 0, {7: 3, 3: 5}.get(int(feeds["hidden"][0]), 0)] = 1.0
        return {"logits": logits, "new_k1": np.full((1, 1, 1), 2 * feeds["hidden"][0], np.float32)}

    parts = [decode.ChainedGraph(Path("dec-1.onnx"), ("tokens", "k0", "offset"), ("hidden", "new_k0"), first),
             decode.ChainedGraph(Path("dec-2.onnx"), ("hidden", "k1", "cross"), ("logits", "new_k1"), second)]
    decoded = decode.greedy(looped, {"out": np.ones((1, 2, 1), np.float32)}, decode.chained(parts),
                            {"k0": [1, 5, 1], "k1": [1, 5, 1]}, keep_feeds=5)
    assert decoded.tokens == [3, 5] and decoded.steps == 3
    assert calls[:2] == [("dec-1", {"tokens", "k0", "offset"}), ("dec-2", {"hidden", "k1", "cross"})]
    last = decoded.feeds[2]
    assert last["k0"][0, :, 0].tolist() == [7, 3, 0, 0, 0] and last["k1"][0, :, 0].tolist() == [14, 6, 0, 0, 0]
    assert looped.graphs == ("enc", "dec-1", "dec-2")


def test_a_loop_description_names_a_split_graphs_parts_and_reads_back_the_same() -> None:
    looped = decode.Loop(**{**LOOP.__dict__, "decoder_parts": ("dec-1", "dec-2", "dec-3")})
    described = looped.description()
    assert described["decoder_parts"] == ["dec-1", "dec-2", "dec-3"] and "encoder_parts" not in described
    assert decode.described(described) == dataclasses.replace(looped, why="")
    assert "decoder_parts" not in LOOP.description()  # an unsplit loop is described as before
    for parts in (["dec-1"], ["dec-1", "dec-1"]):
        with pytest.raises(ValueError):
            decode.described({**described, "decoder_parts": parts})

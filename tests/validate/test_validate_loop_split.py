"""validate --loop over a Whisper large-v3-shaped model whose decoder (and, at w8a16, encoder) was cut into parts by
`prepare --split-size`: the loop runs the parts chained by tensor name, on the CPU and (each part's context) on the
host HTP emulator, for fp16 and for w8a16 calibrated by `compile --loop` on what the loop feeds each part; the
bundle carries the loop with its parts, and bundle verify runs it again. The model is tests/support/whisper.py's
large-shaped preset (large-v3's structure: 128 mels, cross K/V from the encoder, a tied embedding; small widths)
with seeded random weights, so its tokens mean nothing: the check is that the NPU's loop gives the CPU's tokens, and
that the CPU's loop over the parts gives the unsplit decoder's tokens. The speech is espeak-ng's
(tests/support/speech.py), as for tiny.en."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import jsonschema
import pytest

from qnndeploy import validate as stage
from qnndeploy.model.samples import write_samples
from qnndeploy.qnn import htp
from tests.support import speech, whisper
from tests.support.cli import run
from tests.support.host import require

pytestmark = [pytest.mark.slow, pytest.mark.needs_qnn]

SCHEMA = json.loads((Path(stage.__file__).parent.parent / "schemas" / "validation-record.schema.json").read_text())
FRAMES, CACHE, SEED, NAME = 200, 24, 0, "large-v3"
DIMS = whisper.LARGE_SHAPED
SPLIT_GB = 0.0025  # the fused decoder holds 4.5 MB of fp32 weights: three parts of at most 2.5 MB
ENCODER_SPLIT_GB = 0.0015  # the encoder 2.6 MB: two parts


def test_a_split_whisper_decoder_is_validated_by_its_decode_loop_and_bundled_with_its_parts(tmp_path: Path) -> None:
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    require(shutil.which("espeak-ng") is not None, "espeak-ng (Debian's package: the speech clips)")
    graphs = whisper.export_onnx(whisper.random_model(DIMS, SEED), tmp_path / "onnx", frames=FRAMES, cache=CACHE,
                                 name=NAME)
    (clip,) = speech.espeak_clips(tmp_path / "clips", speech.SENTENCES[1:2])
    mel = whisper.log_mel(speech.read_wav(clip.path)[0], frames=FRAMES, n_mels=DIMS.n_mels)
    (tmp_path / "mels").mkdir()
    write_samples(tmp_path / "mels", [{f"{NAME}-mel": mel}])

    # the user's path: check --precision w8a16 asks for prepare --fuse (exact GELU has no 8-bit form), then the split
    fused = {}
    for role, graph in graphs.items():
        fused[role] = tmp_path / "fused" / graph.name
        assert run("prepare", graph, "-o", fused[role], "--fuse").exit_code == 0
    splits = {}
    for role, size in (("decoder", SPLIT_GB), ("encoder", ENCODER_SPLIT_GB)):
        cut = run("prepare", fused[role], "-o", tmp_path / "parts" / f"{role}.onnx", "--split-size", str(size))
        assert cut.exit_code == 0, cut.output
        splits[role] = json.loads((tmp_path / "parts" / f"{role}.split.json").read_text())
    record = splits["decoder"]
    parts = [tmp_path / "parts" / p["path"] for p in record["parts"]]
    names = [p.stem for p in parts]
    assert len(parts) >= 2 and names == [f"decoder-{k}" for k in range(1, len(parts) + 1)]
    encoders = [tmp_path / "parts" / p["path"] for p in splits["encoder"]["parts"]]
    assert [p.stem for p in encoders] == ["encoder-1", "encoder-2"]

    io = whisper.Io(NAME, DIMS.n_text_layer)
    specials = whisper.Specials.of(DIMS)
    ours = whisper.greedy_decode(whisper.ort_runner(graphs["encoder"]), whisper.ort_runner(graphs["decoder"]), mel,
                                 specials, cache=CACHE, layers=DIMS.n_text_layer, state=DIMS.n_text_state, io=io)
    assert len(set(ours.tokens)) >= len(ours.tokens) // 2 and ours.steps == CACHE  # varied tokens, to the cache's end
    # fp16 with the encoder whole; w8a16 with the encoder in two parts too, every part calibrated on what the
    # loop feeds it on the CPU from the clip (compile --loop)
    for precision, encoder in (("fp16", [fused["encoder"]]), ("w8a16", encoders)):
        build = tmp_path / f"build-{precision}"
        calibrated = ("--calib", tmp_path / "mels", "--loop", "whisper") if precision == "w8a16" else ()
        compiled = run("compile", *encoder, *parts, "--soc", "SM8650", "-o", build, "--no-cache", "--precision",
                       precision, *calibrated)
        assert compiled.exit_code == 0, compiled.output
        if precision == "w8a16":  # the encoder's parts ran once on the clip, the decoder's at each of its steps
            assert "compiling: --loop whisper on the CPU (the calibration samples) started\n" in compiled.output
            made = {g.stem: json.loads((build / g.stem / "SM8650" / "compile.json").read_text())["options"][
                "calibration"] for g in [*encoder, *parts]}
            assert {g: c["samples"] for g, c in made.items()} == {
                **{g.stem: 1 for g in encoder}, **{g.stem: ours.steps for g in parts}}
            assert {(c["loop"], c["path"], c["files"]) for c in made.values()} == {
                ("whisper", str((tmp_path / "mels").resolve()), 1)}
        shown = run("validate", build, "--inputs", tmp_path / "mels", "--loop", "whisper")
        assert shown.exit_code == 0, shown.output
        looped = [p.stem for p in [*encoder, *parts]]
        assert f"decode loop on SM8650 (decides its {len(looped)} graphs)" in shown.output
        records = {g: json.loads((build / g / "SM8650" / "validation.json").read_text()) for g in looped}
        for graph, made in records.items():
            jsonschema.validate(made, SCHEMA)
            assert made["passed"] and made["inputs"]["kind"] == "loop"
            assert made["inputs"].get("part") == (None if graph == "encoder" else graph)
            assert made["loop"] == records[looped[0]]["loop"]
        check = records["decoder-1"]["loop"]
        assert check["described"]["decoder_parts"] == names and check["described"]["decoder"] == "decoder"
        assert check["described"].get("encoder_parts", []) == [p.stem for p in encoder if len(encoder) > 1]
        (sample,) = check["samples"]
        assert sample["cpu"] == sample["npu"] and sample["parts_at"] is None and check["same_tokens"] == 1
        # the parts chained on the CPU give what the unsplit decoder gives in the tests' own loop
        assert sample["cpu"] == " ".join(map(str, ours.tokens))
        # each part's own figures were measured on what the loop fed it: part 2 reads part 1's hidden state
        assert {i["name"] for i in records["decoder-1"]["outputs"]} == set(record["parts"][0]["outputs"])

    # a loop over some of a split's parts is refused before anything runs, naming the parts missing
    partial = run("validate", tmp_path / "build-w8a16", "--graph", "encoder-1", "--graph", "encoder-2", "--graph",
                  "decoder-1", "--loop", "whisper")
    assert partial.exit_code == 2 and f"decoder-1 of the {len(parts)} parts of" in partial.output

    # the printed next: line builds the bundle without --split: the loop names the parts and their order
    (line,) = [x for x in shown.output.splitlines() if x.startswith("next: ")]
    words = shlex.split(line.removeprefix("next: "))
    assert words[:3] == ["qnndeploy", "bundle", "build"] and "--split" not in words
    built = run("bundle", "build", "--from-build", tmp_path / "build-w8a16", "--name", "whisper-large-shaped",
                "--version", "1", "-o", tmp_path / "dist")
    assert built.exit_code == 0, built.output
    bundle = tmp_path / "dist" / "whisper-large-shaped-1"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["loop"]["decoder_parts"] == names
    assert manifest["loop"]["encoder_parts"] == ["encoder-1", "encoder-2"]
    assert {g["name"] for g in manifest["graphs"]} == {"encoder-1", "encoder-2", *names}
    verified = run("bundle", "verify", bundle)  # the loop again, its parts chained, on the record's own mel
    assert verified.exit_code == 0, verified.output
    assert f"{len(parts) + 2} context binaries loaded and run on the host HTP emulator" in verified.output
    assert "1 as the decode loop, 1 on the sample files of its validation record" in verified.output

    # sherpa-onnx's Whisper takes one encoder and one decoder: scaffold says so instead of writing glue that fails
    glue = run("scaffold", bundle, "--engine", "sherpa-onnx", "--package", "com.example.asr", "-o", tmp_path / "glue")
    assert glue.exit_code == 2 and "use --engine ort" in glue.output

    # parts in the wrong order leave the later part's inputs unfed: verify says the app could not run the decoder
    manifest["loop"]["decoder_parts"] = names[::-1]
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=1))
    refused = run("bundle", "verify", bundle, "--shallow")
    assert refused.exit_code == 1 and "loop feeds no value to decoder input(s)" in refused.output

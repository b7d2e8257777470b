"""Audio (.wav) and image (.png/.jpg) files into a graph's input tensor, through a declared preprocessing
(`Preprocess`: resize/normalize for images; raw PCM or a log-mel front end for audio): real signals show the
errors random input hides. samples.py uses it for folders of such files.

The mel filterbank is librosa's (`librosa.filters.mel`): `mel=slaney` (the default, also Whisper's) is the Slaney
mel scale (linear below 1 kHz, logarithmic above) with each triangle normalized to unit area in Hz; `mel=htk` is
the HTK scale 2595·log10(1 + f/700) with triangles peaking at 1 (Kaldi's and torchaudio's default).
"""

from __future__ import annotations

import json
import math
import struct
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnndeploy.base.errors import BadInput, first_line
from qnndeploy.base.fileio import JSON
from qnndeploy.model.onnxio import TensorInfo

if TYPE_CHECKING:
    import numpy as np

AUDIO_SUFFIXES = (".wav",)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
PILLOW_MISSING = "install Pillow to read images: pip install 'qnndeploy[images]'"

_FLOAT_FORMAT = 3  # WAVE_FORMAT_IEEE_FLOAT, which Python's wave module refuses
_EXTENSIBLE = 0xFFFE


MEDIA_SUFFIXES = AUDIO_SUFFIXES + IMAGE_SUFFIXES
DEFAULT_PREPROCESS = "(defaults)"  # a Preprocess's `given` when none was: fitted from the input's shape


PREPROCESS_SYNTAX = ("image[:resize=HxW,layout=nchw|nhwc,scale=1/255,mean=M[/M/M],std=S[/S/S],color=rgb|bgr|gray,"
                     "fit=stretch|crop], audio[:raw|logmel,rate=HZ,n_mels=N,win=SAMPLES,hop=SAMPLES,n_fft=N,fmin=HZ,"
                     "fmax=HZ,mel=slaney|htk,log=ln|log10,floor=F], or a .json file of the same keys with \"kind\"")


class MediaKind(StrEnum):
    IMAGE = "image"
    AUDIO = "audio"


class Layout(StrEnum):
    """Where an image input keeps its channels: before the rows (NCHW) or after the columns (NHWC)."""

    NCHW = "nchw"
    NHWC = "nhwc"


class Color(StrEnum):
    RGB = "rgb"
    BGR = "bgr"
    GRAY = "gray"


class ImageFit(StrEnum):
    """How a picture takes the input's size: resized to it exactly, or scaled to cover it and centre-cropped."""

    STRETCH = "stretch"
    CROP = "crop"


class FrontEnd(StrEnum):
    """What an audio input takes: the samples, or their log-mel spectrogram."""

    RAW = "raw"
    LOGMEL = "logmel"


class MelScale(StrEnum):
    SLANEY = "slaney"
    HTK = "htk"


class LogBase(StrEnum):
    LN = "ln"
    LOG10 = "log10"


@dataclass(frozen=True)
class Preprocess:
    """How audio or image files become an input, as declared (--preprocess); None fields take their value from
    the input's shape and dtype when fitted (_image_plan, _audio_plan)."""

    kind: MediaKind
    given: str  # the text or file it came from, for messages
    resize: tuple[int, int] | None = None  # image: (height, width)
    layout: Layout | None = None
    scale: float | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    color: Color | None = None
    fit: ImageFit = ImageFit.STRETCH
    front_end: FrontEnd = FrontEnd.RAW  # audio
    rate: int | None = None
    n_mels: int = 80
    win: int | None = None  # samples per frame: 25 ms at `rate` by default
    hop: int | None = None  # 10 ms
    n_fft: int | None = None  # the frame length
    fmin: float = 0.0
    fmax: float | None = None  # rate / 2
    mel: MelScale = MelScale.SLANEY
    log: LogBase = LogBase.LN
    floor: float = 1e-10
    declared: frozenset[str] = field(default_factory=frozenset)  # the keys the user gave


@dataclass(frozen=True)
class MelFrontEnd:
    """The log-mel front end with every setting fitted (_audio_plan fills what --preprocess left to the input):
    periodic-Hann windows of `win` samples every `hop`, an n_fft-point power spectrum, `n_mels` filters between
    fmin and fmax (None: rate / 2) on the `scale`, then `log` of max(energy, floor)."""

    rate: int
    n_mels: int
    win: int
    hop: int
    n_fft: int
    fmin: float = 0.0
    fmax: float | None = None
    scale: MelScale = MelScale.SLANEY
    log: LogBase = LogBase.LN
    floor: float = 1e-10


def _ratio(text: str) -> float:
    top, _, bottom = text.partition("/")
    value = float(top) / float(bottom) if bottom else float(top)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def _floats(text: str) -> tuple[float, ...]:
    values = tuple(float(v) for v in text.split("/"))
    if not all(math.isfinite(v) for v in values):
        raise ValueError(text)
    return values


def _size(text: str) -> tuple[int, int]:
    height, _, width = text.lower().partition("x")
    size = (int(height), int(width or height))
    if min(size) < 1:
        raise ValueError(text)
    return size


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _choice(kind: type[StrEnum]) -> Callable[[str], StrEnum]:
    def parse(text: str) -> StrEnum:
        return kind(text.lower())  # ValueError for any other: the caller says what is expected
    return parse


_KEYS: dict[str, dict[str, tuple[Callable[[str], Any], str]]] = {
    "image": {"resize": (_size, "HEIGHTxWIDTH, e.g. 224x224"), "layout": (_choice(Layout), "nchw or nhwc"),
              "scale": (_ratio, "a number or a fraction, e.g. 1/255"),
              "mean": (_floats, "one number or one per channel, '/'-separated"),
              "std": (_floats, "one number or one per channel, '/'-separated"),
              "color": (_choice(Color), "rgb, bgr or gray"),
              "fit": (_choice(ImageFit), "stretch or crop")},
    "audio": {"front_end": (_choice(FrontEnd), "raw or logmel"), "rate": (_positive_int, "Hz, e.g. 16000"),
              "n_mels": (_positive_int, "a count"), "win": (_positive_int, "samples"),
              "hop": (_positive_int, "samples"), "n_fft": (_positive_int, "samples"), "fmin": (_ratio, "Hz"),
              "fmax": (_ratio, "Hz"), "mel": (_choice(MelScale), "slaney or htk"),
              "log": (_choice(LogBase), "ln or log10"), "floor": (_ratio, "a positive number, e.g. 1e-10")},
}


def parse_preprocess(text: str | Path) -> Preprocess:
    """`image:resize=224x224,scale=1/255,...`, `audio:logmel,n_mels=80,rate=16000` or a .json file holding
    {"kind": "image" | "audio", KEY: VALUE...} (lists for mean/std/resize allowed): PREPROCESS_SYNTAX."""
    given = str(text)
    if given.lower().endswith(".json"):
        try:
            loaded = json.loads(Path(given).read_text())
        except (OSError, ValueError) as e:
            raise BadInput(f"--preprocess {given}: cannot read it as JSON ({first_line(e)})") from None
        if not isinstance(loaded, dict):
            raise BadInput(f"--preprocess {given}: a JSON object is needed, e.g. {{\"kind\": \"image\"}}")
        kind = str(loaded.pop("kind", ""))
        sep = {"resize": "x"}
        items = [(k, sep.get(k, "/").join(map(str, v)) if isinstance(v, list) else str(v)) for k, v in loaded.items()]
    else:
        kind, _, rest = given.partition(":")
        items = []
        for part in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = part.partition("=")
            items.append((key.strip(), value.strip()) if eq else ("front_end", key.strip()))
    kind = kind.strip().lower()
    if kind not in _KEYS:
        raise BadInput(f"--preprocess {given}: starts with image or audio ({PREPROCESS_SYNTAX})")
    values: dict[str, Any] = {}
    for key, value in items:
        if key == "front_end" and kind == "image":
            raise BadInput(f"--preprocess {given}: '{value}' is not KEY=VALUE ({PREPROCESS_SYNTAX})")
        if key not in _KEYS[kind]:
            known = ", ".join(k for k in _KEYS[kind] if k != "front_end")
            raise BadInput(f"--preprocess {given}: unknown {kind} key '{key}' (known: {known})")
        parse, expected = _KEYS[kind][key]
        try:
            values[key] = parse(value)
        except ValueError:
            raise BadInput(f"--preprocess {given}: {key}={value} is not {expected}") from None
    if values.get("floor", 1.0) <= 0:
        raise BadInput(f"--preprocess {given}: floor must be above 0 (the log of 0 is -inf)")
    return Preprocess(MediaKind(kind), given, **values, declared=frozenset(values))


def load_media(files: list[Path], specs: list[TensorInfo], prep: Preprocess | None, graph: str
               ) -> tuple[list[dict[str, np.ndarray]], JSON, list[str]]:
    """One sample per audio or image file for a one-input graph: (samples, the preprocessing as fitted to the
    input, notes on what was padded or cropped)."""
    kinds = {MediaKind.AUDIO if p.suffix.lower() in AUDIO_SUFFIXES else MediaKind.IMAGE for p in files}
    folder = files[0].parent
    if len(kinds) > 1:
        raise BadInput(f"{folder} holds both audio and image files: keep one kind per folder")
    (kind,) = kinds
    if len(specs) != 1:
        raise BadInput(f"{folder}: a {kind} file is one sample of a one-input graph; {graph} has inputs "
                       f"{', '.join(s.name for s in specs)}: give .npz samples (one array per input name)")
    (spec,) = specs
    prep = prep or Preprocess(kind, DEFAULT_PREPROCESS)
    if prep.kind != kind:
        raise BadInput(f"--preprocess {prep.given} is for {prep.kind}, but {folder} holds {kind} files")
    if spec.dynamic:
        raise BadInput(f"input '{spec.name}' has dynamic size {spec.shape_text()}: {kind} samples are "
                       "shaped to a fixed input size (qnndeploy prepare --shape fixes it)")
    convert, described = _image_plan(prep, spec) if kind == MediaKind.IMAGE else _audio_plan(prep, spec)
    notes: list[str] = []
    samples = []
    for path in files:
        array, note = convert(path)
        samples.append({spec.name: array})
        if note:
            notes.append(f"{path.name}: {note}")
    return samples, described, notes


Convert = Callable[[Path], tuple["np.ndarray", str | None]]  # one file -> (the input's array, a note or None)


def _image_plan(prep: Preprocess, spec: TensorInfo) -> tuple[Convert, JSON]:
    """Fit an image preprocessing to the input: layout from the 1- or 3-channel axis, size from the input,
    scale 1/255 and no mean/std for float inputs, raw 0-255 pixels for integer ones."""
    import numpy as np

    shape, name = spec.static_shape, spec.name
    if len(shape) not in (3, 4) or (len(shape) == 4 and shape[0] != 1):
        raise BadInput(f"input '{name}' is {spec.shape_text()}: an image input is [1, C, H, W] or "
                       "[1, H, W, C] with C 1 or 3")
    dims = shape[-3:]
    layout = prep.layout
    if layout is None:
        first, last = dims[0] in (1, 3), dims[2] in (1, 3)
        if first == last:
            raise BadInput(f"input '{name}' is {spec.shape_text()}: which axis holds the channels? give "
                           "layout=nchw or layout=nhwc in --preprocess")
        layout = Layout.NCHW if first else Layout.NHWC
    channels, height, width = (dims[0], dims[1], dims[2]) if layout == Layout.NCHW else (dims[2], dims[0], dims[1])
    if channels not in (1, 3):
        raise BadInput(f"input '{name}' is {spec.shape_text()} ({layout}): {channels} channels; an image has "
                       "1 (gray) or 3 (RGB)")
    if prep.resize is not None and prep.resize != (height, width):
        raise BadInput(f"--preprocess resize={prep.resize[0]}x{prep.resize[1]}, but input '{name}' takes "
                       f"{height}x{width} images")
    color = prep.color or (Color.GRAY if channels == 1 else Color.RGB)
    if (color == Color.GRAY) != (channels == 1):
        raise BadInput(f"--preprocess color={color}, but input '{name}' has {channels} channel(s)")
    dtype = np.dtype(spec.dtype)
    if dtype.kind in "iu":
        normalizing = sorted(prep.declared & {"scale", "mean", "std"})
        if normalizing:
            raise BadInput(f"input '{name}' is {dtype}: pixels are fed as they are (0-255); "
                           f"{', '.join(normalizing)} apply to float inputs")
        scale, mean, std = 1.0, (0.0,) * channels, (1.0,) * channels
    elif dtype.kind == "f":
        scale = 1 / 255 if prep.scale is None else prep.scale
        mean, std = prep.mean or (0.0,), prep.std or (1.0,)
        for key, values in (("mean", mean), ("std", std)):
            if len(values) not in (1, channels):
                raise BadInput(f"--preprocess {key}={'/'.join(map(str, values))}: give 1 or {channels} "
                               f"values for input '{name}'")
        if 0 in std:
            raise BadInput("--preprocess std: a standard deviation of 0 divides by zero")
        mean, std = mean * (channels // len(mean)), std * (channels // len(std))
    else:
        raise BadInput(f"input '{name}' is {spec.dtype}: images feed float or integer inputs")

    def convert(path: Path) -> tuple[np.ndarray, str | None]:
        pixels = read_image(path, height, width, color, prep.fit).astype(np.float64)
        values = (pixels * scale - np.array(mean)) / np.array(std)
        if layout == Layout.NCHW:
            values = values.transpose(2, 0, 1)
        if dtype.kind in "iu":
            values = np.clip(values, np.iinfo(dtype).min, np.iinfo(dtype).max)
        return np.ascontiguousarray(values.reshape(shape).astype(dtype)), None

    return convert, {"kind": "image", "given": prep.given, "resize": [height, width], "fit": prep.fit,
                     "layout": layout, "color": color, "scale": scale, "mean": list(mean), "std": list(std),
                     "resampling": "bilinear (Pillow)"}


def _audio_plan(prep: Preprocess, spec: TensorInfo) -> tuple[Convert, JSON]:
    """Fit an audio preprocessing to the input: raw samples along its one long axis, or log-mel frames on its
    last two axes ([..., frames, n_mels] or [..., n_mels, frames]); padded or cropped to the input's length."""
    import numpy as np

    shape, name, dtype = spec.static_shape, spec.name, np.dtype(spec.dtype)
    if dtype.kind != "f":
        raise BadInput(f"input '{name}' is {dtype}: audio feeds float inputs")
    described: JSON = {"kind": "audio", "given": prep.given, "front_end": prep.front_end,
                       "samples": "float in [-1, 1) (PCM divided by its full scale), channels averaged"}
    if prep.front_end == FrontEnd.RAW:
        long_axes = [i for i, d in enumerate(shape) if d > 1]
        if len(long_axes) > 1:
            raise BadInput(f"input '{name}' is {spec.shape_text()}: raw audio fills one axis; use "
                           "audio:logmel for feature inputs, or .npz samples")
        length = math.prod(shape)
        described.update(rate=prep.rate, length=length)

        def raw(path: Path) -> tuple[np.ndarray, str | None]:
            audio, _ = _audio(path, prep.rate)
            fitted, note = _pad_or_crop(audio, length, "samples", 0.0)
            return fitted.reshape(shape).astype(dtype), note

        return raw, described

    rate = prep.rate or 16000
    win = prep.win or round(0.025 * rate)
    hop = prep.hop or round(0.010 * rate)
    n_fft = prep.n_fft or win
    fmax = rate / 2 if prep.fmax is None else prep.fmax
    front = MelFrontEnd(rate, prep.n_mels, win, hop, n_fft, prep.fmin, fmax, prep.mel, prep.log, prep.floor)
    if n_fft < win:
        raise BadInput(f"--preprocess n_fft={n_fft} is shorter than the window ({win} samples)")
    if not 0 <= prep.fmin < fmax <= rate / 2:
        raise BadInput(f"--preprocess fmin={prep.fmin:g}, fmax={fmax:g}: need 0 <= fmin < fmax <= rate/2 "
                       f"({rate / 2:g})")
    if len(shape) < 2 or any(d != 1 for d in shape[:-2]) or prep.n_mels not in shape[-2:]:
        raise BadInput(f"input '{name}' is {spec.shape_text()}: log-mel features need [..., frames, n_mels] "
                       f"or [..., n_mels, frames] with n_mels={prep.n_mels}; give n_mels= in --preprocess")
    time_major = shape[-1] == prep.n_mels
    count = shape[-2] if time_major else shape[-1]
    silence = math.log10(prep.floor) if prep.log == LogBase.LOG10 else math.log(prep.floor)
    described.update(rate=rate, n_mels=prep.n_mels, win=win, hop=hop, n_fft=n_fft, window="periodic hann",
                     fmin=prep.fmin, fmax=fmax, mel=prep.mel, log=prep.log, floor=prep.floor, frames=count,
                     axes="frames, n_mels" if time_major else "n_mels, frames",
                     filterbank=("librosa.filters.mel: Slaney scale, unit-area triangles" if prep.mel == "slaney"
                                 else "HTK scale, triangles peaking at 1"))

    def logmel(path: Path) -> tuple[np.ndarray, str | None]:
        audio, _ = _audio(path, rate)
        feats = log_mel(audio, front)
        fitted, note = _pad_or_crop(feats, count, "frames", silence)
        return (fitted if time_major else fitted.T).reshape(shape).astype(dtype), note

    return logmel, described


def _audio(path: Path, rate: int | None) -> tuple[np.ndarray, int]:
    audio, found, _ = read_wav(path)
    if rate is not None and found != rate:
        raise BadInput(f"{path} is sampled at {found} Hz, the preprocessing expects {rate} Hz: resample it "
                       f"first (e.g. sox {path.name} -r {rate} out.wav)")
    if audio.size == 0:
        raise BadInput(f"{path} holds no audio samples")
    return audio, found


def _pad_or_crop(values: np.ndarray, length: int, unit: str, fill: float) -> tuple[np.ndarray, str | None]:
    """The first `length` entries along axis 0, padded with `fill` when shorter."""
    import numpy as np

    have = len(values)
    if have == length:
        return values, None
    if have > length:
        return values[:length], f"{have} {unit}, cropped to the first {length}"
    padding = [(0, length - have)] + [(0, 0)] * (values.ndim - 1)
    return np.pad(values, padding, constant_values=fill), f"{have} {unit}, padded to {length} with {fill:g}"


# --- decoding audio and images; the log-mel front end --------------------------------------------

def read_wav(path: Path) -> tuple[np.ndarray, int, str]:
    """(mono float32 samples in [-1, 1], sample rate, what the file was): PCM 8/16/24/32-bit or IEEE float 32/64,
    channels averaged into one."""
    import numpy as np

    path = Path(path)
    try:
        with wave.open(str(path), "rb") as w:
            channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
            raw = w.readframes(w.getnframes())
        samples = _pcm(raw, width)
        kind = f"{8 * width}-bit PCM"
    except wave.Error as e:
        if "unknown format" not in str(e):
            raise BadInput(f"cannot read {path} as a .wav file ({first_line(e)})") from None
        samples, channels, rate, width = _float_wav(path)
        kind = f"{8 * width}-bit float"
    except (OSError, EOFError, struct.error) as e:
        raise BadInput(f"cannot read {path} as a .wav file ({first_line(e)})") from None
    if channels < 1 or samples.size % channels:
        raise BadInput(f"{path}: {samples.size} samples do not split into {channels} channel(s)")
    mono = samples.reshape(-1, channels).mean(axis=1, dtype=np.float64)
    where = f"{kind}, {rate} Hz, " + ("mono" if channels == 1 else f"{channels} channels mixed to mono")
    return mono.astype(np.float32), rate, where


def _pcm(raw: bytes, width: int) -> np.ndarray:
    import numpy as np

    if width == 1:  # 8-bit PCM is unsigned
        return (np.frombuffer(raw, np.uint8).astype(np.float64) - 128) / 128
    if width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        values = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        return np.where(values >= 1 << 23, values - (1 << 24), values) / float(1 << 23)
    if width in (2, 4):
        return np.frombuffer(raw, f"<i{width}").astype(np.float64) / float(1 << (8 * width - 1))
    raise BadInput(f"{8 * width}-bit PCM is not read: use 16-bit, 24-bit, 32-bit PCM or float")


def _float_wav(path: Path) -> tuple[np.ndarray, int, int, int]:
    """An IEEE-float .wav, from its RIFF chunks: (samples, channels, rate, bytes per sample)."""
    import numpy as np

    data = path.read_bytes()
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise BadInput(f"cannot read {path} as a .wav file (no RIFF/WAVE header)")
    fmt, body, pos = None, None, 12
    while pos + 8 <= len(data):
        tag, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        chunk = data[pos + 8:pos + 8 + size]
        if tag == b"fmt ":
            fmt = chunk
        elif tag == b"data":
            body = chunk
        pos += 8 + size + (size & 1)
    if fmt is None or body is None or len(fmt) < 16:
        raise BadInput(f"cannot read {path} as a .wav file (no fmt or data chunk)")
    tag_, channels, rate, _, _, bits = struct.unpack("<HHIIHH", fmt[:16])
    if tag_ == _EXTENSIBLE and len(fmt) >= 26:
        tag_ = struct.unpack("<H", fmt[24:26])[0]
    if tag_ != _FLOAT_FORMAT or bits not in (32, 64):
        raise BadInput(f"{path}: wave format {tag_} with {bits}-bit samples is not read: use PCM or float")
    width = bits // 8
    usable = len(body) - len(body) % width
    return np.frombuffer(body[:usable], f"<f{width}").astype(np.float64), channels, rate, width


def frames(audio: np.ndarray, win: int, hop: int) -> np.ndarray:
    """[frames, win] windows every `hop` samples, no centering (too short a signal is zero-padded to one frame)."""
    import numpy as np

    if audio.size < win:
        audio = np.pad(audio, (0, win - audio.size))
    count = 1 + (audio.size - win) // hop
    return np.lib.stride_tricks.sliding_window_view(audio, win)[::hop][:count]


def hz_to_mel(hz: np.ndarray, scale: str) -> np.ndarray:
    import numpy as np

    hz = np.asarray(hz, np.float64)
    if scale == MelScale.HTK:
        return np.asarray(2595.0 * np.log10(1.0 + hz / 700.0))
    linear = hz / (200.0 / 3)  # Slaney: 3 mels per 200 Hz below 1 kHz, logarithmic above
    log_part = 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (math.log(6.4) / 27.0)
    return np.asarray(np.where(hz >= 1000.0, log_part, linear))


def mel_to_hz(mel: np.ndarray, scale: str) -> np.ndarray:
    import numpy as np

    mel = np.asarray(mel, np.float64)
    if scale == MelScale.HTK:
        return np.asarray(700.0 * (10.0 ** (mel / 2595.0) - 1.0))
    return np.asarray(np.where(mel >= 15.0, 1000.0 * np.exp((math.log(6.4) / 27.0) * (mel - 15.0)), mel * (200.0 / 3)))


def mel_filterbank(n_mels: int, n_fft: int, rate: int, fmin: float = 0.0, fmax: float | None = None,
                   scale: str = "slaney") -> np.ndarray:
    """[n_mels, n_fft // 2 + 1] triangular filters on the FFT bins, centres equally spaced in mel between fmin
    and fmax (librosa.filters.mel): slaney triangles have unit area in Hz, htk ones peak at 1."""
    import numpy as np

    fmax = rate / 2 if fmax is None else fmax
    bins = np.linspace(0, rate / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(np.array(fmin), scale), hz_to_mel(np.array(fmax), scale), n_mels + 2),
                      scale)
    widths = np.diff(edges)
    rising = (bins[None, :] - edges[:-2, None]) / widths[:-1, None]
    falling = (edges[2:, None] - bins[None, :]) / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    if scale == "slaney":
        weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return np.asarray(weights, np.float64)


def log_mel(audio: np.ndarray, front: MelFrontEnd) -> np.ndarray:
    """[frames, n_mels] log mel energies of `audio` (at front.rate): periodic-Hann windows of `win` samples every
    `hop`, zero-padded to n_fft, power spectrum, mel filterbank, then ln or log10 of max(energy, floor); float64."""
    import numpy as np

    f = front
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(f.win) / f.win)
    power = np.abs(np.fft.rfft(frames(np.asarray(audio, np.float64), f.win, f.hop) * window, n=f.n_fft, axis=1)) ** 2
    energies = np.maximum(power @ mel_filterbank(f.n_mels, f.n_fft, f.rate, f.fmin, f.fmax, f.scale).T, f.floor)
    return np.asarray(np.log10(energies) if f.log == LogBase.LOG10 else np.log(energies), np.float64)


def read_image(path: Path, height: int, width: int, color: str, fit: str) -> np.ndarray:
    """[height, width, channels] uint8 pixels: decoded by Pillow, converted to RGB (BGR: channels reversed) or
    gray, then bilinearly resized to exactly that size ("stretch") or scaled to cover it and centre-cropped
    ("crop")."""
    import numpy as np

    try:
        from PIL import Image, UnidentifiedImageError  # noqa: PLC0415 Pillow: optional and heavy, imported here
    except ImportError:
        raise BadInput(f"{path}: {PILLOW_MISSING}") from None
    try:
        with Image.open(path) as im:
            picture = im.convert("L" if color == Color.GRAY else "RGB")
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise BadInput(f"cannot read {path} as an image ({first_line(e)})") from None
    if fit == ImageFit.CROP:
        factor = max(height / picture.height, width / picture.width)
        h, w = max(height, round(picture.height * factor)), max(width, round(picture.width * factor))
        picture = picture.resize((w, h), Image.Resampling.BILINEAR)
        top, left = (h - height) // 2, (w - width) // 2
        picture = picture.crop((left, top, left + width, top + height))
    else:
        picture = picture.resize((width, height), Image.Resampling.BILINEAR)
    pixels = np.asarray(picture, np.uint8)
    pixels = pixels[:, :, None] if pixels.ndim == 2 else pixels
    return pixels[:, :, ::-1] if color == Color.BGR else pixels

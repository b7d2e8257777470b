"""Real English speech for the ASR tests, made on the machine: twelve short sentences of plain words spoken by
Debian's espeak-ng (a formant synthesizer, deterministic for a given version and voice), stored as 16 kHz mono
16-bit WAV beside their transcripts. Nothing is downloaded: the audio exists only where espeak-ng is installed
(`apt-get install espeak-ng`), and a missing espeak-ng is said so, not skipped in silence.

espeak-ng writes 22050 Hz; the clips are brought to the 16 kHz Whisper and most ASR models take by an exact
band-limited (FFT) resampling, so no other tool (sox) is needed.

    python3 -m tests.support.speech DIR      # writes DIR/clip00.wav ... DIR/clip11.wav and DIR/transcripts.json
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RATE = 16000
VOICE, WORDS_PER_MINUTE = "en-us", 140

# Short sentences of common words, no digits, names or homophone traps (grey/gray), so that a transcript is the
# only right spelling; each reads in 2 to 4 s at 140 words per minute.
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please close the door when you leave the room.",
    "She sells fresh bread at the market every morning.",
    "We will meet again after the summer holidays.",
    "The weather is cold and the sky is dark today.",
    "My brother plays the guitar in a small band.",
    "Turn left at the church and walk to the river.",
    "The children are reading books in the library.",
    "He forgot his keys on the kitchen table.",
    "Water boils faster on a high mountain.",
    "They painted the old house white last year.",
    "I would like a cup of tea with milk, please.",
]


@dataclass(frozen=True)
class Clip:
    name: str
    text: str
    path: Path


def espeak() -> str:
    """The espeak-ng executable, or a FileNotFoundError that says how to install it."""
    found = shutil.which("espeak-ng")
    if found is None:
        raise FileNotFoundError("espeak-ng is not installed: the speech clips are synthesized with it "
                                "(Debian/Ubuntu: apt-get install -y espeak-ng)")
    return found


def resample(samples: np.ndarray, rate: int, target: int = RATE) -> np.ndarray:
    """Band-limited resampling through the spectrum: exact for a finite clip, its content above the lower Nyquist
    frequency dropped. Clips are seconds long, so one FFT costs nothing."""
    if rate == target:
        return samples.astype(np.float32)
    n = len(samples)
    m = round(n * target / rate)
    spectrum = np.fft.rfft(samples.astype(np.float64))
    keep = min(len(spectrum), m // 2 + 1)
    return (np.fft.irfft(spectrum[:keep], m) * (m / n)).astype(np.float32)


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """A 16-bit PCM WAV as float32 samples in [-1, 1] (first channel) and its sample rate."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: {8 * w.getsampwidth()}-bit samples, only 16-bit PCM is read")
        channels, rate = w.getnchannels(), w.getframerate()
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return (data.reshape(-1, channels)[:, 0].astype(np.float32) / 32768.0), rate


def write_wav(path: Path, samples: np.ndarray, rate: int = RATE) -> None:
    """float32 samples as 16-bit mono PCM (clipped to [-1, 1])."""
    pcm = np.round(np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def synthesize(text: str, path: Path, voice: str = VOICE, wpm: int = WORDS_PER_MINUTE) -> Path:
    """`text` spoken by espeak-ng into `path`, 16 kHz mono 16-bit."""
    with tempfile.TemporaryDirectory(prefix="espeak-") as tmp:
        raw = Path(tmp) / "raw.wav"
        done = subprocess.run([espeak(), "-v", voice, "-s", str(wpm), "-w", str(raw), text],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0 or not raw.is_file():
            raise RuntimeError(f"espeak-ng failed on {text!r}: {done.stderr.strip()}")
        samples, rate = read_wav(raw)
    write_wav(path, resample(samples, rate))
    return path


def espeak_clips(folder: Path, sentences: list[str] | None = None) -> list[Clip]:
    """The clips (clipNN.wav) and transcripts.json in `folder`, synthesized unless a previous call left the same
    sentences there."""
    folder = Path(folder)
    sentences = SENTENCES if sentences is None else sentences
    clips = [Clip(f"clip{i:02d}", text, folder / f"clip{i:02d}.wav") for i, text in enumerate(sentences)]
    index = folder / "transcripts.json"
    wanted = {c.name: c.text for c in clips}
    if index.is_file() and json.loads(index.read_text()) == wanted and all(c.path.is_file() for c in clips):
        return clips
    espeak()  # say what is missing before making the folder
    folder.mkdir(parents=True, exist_ok=True)
    for clip in clips:
        synthesize(clip.text, clip.path)
    index.write_text(json.dumps(wanted, indent=1) + "\n")
    return clips


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python3 -m tests.support.speech DIR")
    try:
        clips = espeak_clips(Path(sys.argv[1]))
    except FileNotFoundError as e:
        sys.exit(str(e))
    for clip in clips:
        samples, rate = read_wav(clip.path)
        print(f"{clip.path}  {len(samples) / rate:.2f} s  {clip.text}")


if __name__ == "__main__":
    main()

"""A line chart as a PNG, written with numpy, zlib and struct only: diagnose's error curve must not pull in a
plotting library for one picture. Axes, one line with its points, a dashed threshold line and tick labels in a
built-in 3x5 digit font."""

from __future__ import annotations

import itertools
import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

RGB = tuple[int, int, int]
WHITE, BLACK, GREY, BLUE, RED = (255, 255, 255), (0, 0, 0), (220, 220, 220), (31, 119, 180), (214, 39, 40)

# 3x5 glyphs, one string of 15 pixels per character, row by row ('#' = ink).
_FONT = {
    "0": "####.##.##.####", "1": ".#.##..#..#.###", "2": "###..#####..###", "3": "###..####..####",
    "4": "#.##.####..#..#", "5": "####..###..####", "6": "####..####.####", "7": "###..#..#..#..#",
    "8": "####.#####.####", "9": "####.####..####", "-": "......###......", ".": ".............#.",
    "d": "..#..#####.####", "B": "##.#.###.#.###.",
}
_SCALE = 2  # each font pixel is 2x2


def png_bytes(pixels: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of a (height, width, 3) uint8 array: signature, IHDR, one zlib IDAT, IEND."""
    import numpy as np

    height, width, _ = pixels.shape
    raw = np.zeros((height, 1 + width * 3), np.uint8)  # each row: filter type 0, then its RGB bytes
    raw[:, 1:] = pixels.reshape(height, width * 3)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw.tobytes(), 9))
            + chunk(b"IEND", b""))


@dataclass(frozen=True, order=True)
class Point:
    """One point of the chart; a marked one is drawn in red (diagnose: a tensor below the threshold)."""

    x: float
    y: float
    marked: bool = False


def line_chart(points: Sequence[Point], path: Path, *, threshold: float | None = None, width: int = 640,
               height: int = 360, y_label: str = "dB") -> Path:
    """Write a chart of the points (sorted by x) to `path`: joined by a line, the marked ones in red, `threshold` as
    a dashed red line; integer tick labels on both axes."""
    import numpy as np

    xs, ys = [p.x for p in points], [p.y for p in points]
    img = np.full((height, width, 3), WHITE, np.uint8)
    left, right, top, bottom = 56, width - 16, 30, height - 32
    finite = [y for y in ys if math.isfinite(y)] + ([threshold] if threshold is not None else [])
    lo_y, hi_y = (min(finite), max(finite)) if finite else (0.0, 1.0)
    step_y = _nice_step(hi_y - lo_y)
    lo_y, hi_y = math.floor(lo_y / step_y) * step_y - step_y / 2, math.ceil(hi_y / step_y) * step_y + step_y / 2
    lo_x, hi_x = (min(xs), max(xs)) if xs else (0.0, 1.0)
    hi_x = hi_x if hi_x > lo_x else lo_x + 1

    def px(x: float) -> int:
        return round(left + (x - lo_x) / (hi_x - lo_x) * (right - left))

    def py(y: float) -> int:
        return round(bottom - (y - lo_y) / (hi_y - lo_y) * (bottom - top))

    y = math.ceil(lo_y / step_y) * step_y
    while y <= hi_y:  # grid and y ticks
        _line(img, left, py(y), right, py(y), GREY)
        _text(img, _label(y, step_y), left - 6, py(y), BLACK, align="right")
        y += step_y
    step_x = _nice_step(hi_x - lo_x)
    x = math.ceil(lo_x / step_x) * step_x
    while x <= hi_x:
        _line(img, px(x), bottom, px(x), bottom + 4, BLACK)
        _text(img, _label(x, step_x), px(x), bottom + 12, BLACK, align="center")
        x += step_x
    _text(img, y_label, left - 6, 12, BLACK, align="right")
    _line(img, left, top, left, bottom, BLACK)
    _line(img, left, bottom, right, bottom, BLACK)
    if threshold is not None:
        for start in range(left, right, 10):
            _line(img, start, py(threshold), min(start + 5, right), py(threshold), RED)
    drawn = sorted(p for p in points if math.isfinite(p.y))
    for a, b in itertools.pairwise(drawn):
        _line(img, px(a.x), py(a.y), px(b.x), py(b.y), BLUE, thick=2)
    for p in drawn:
        cx, cy = px(p.x), py(p.y)
        img[max(cy - 3, 0):cy + 4, max(cx - 3, 0):cx + 4] = RED if p.marked else BLUE
    path = Path(path)
    path.write_bytes(png_bytes(img))
    return path


def _nice_step(span: float, ticks: int = 6) -> float:
    """1, 2 or 5 times a power of ten, giving about `ticks` intervals over `span`."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _label(value: float, step: float) -> str:
    return f"{value:.0f}" if step >= 1 else f"{value:.{max(0, -math.floor(math.log10(step)))}f}"


def _line(img: np.ndarray, x0: int, y0: int, x1: int, y1: int, color: RGB, thick: int = 1) -> None:
    """A straight line, one dot per pixel step along its longer axis."""
    import numpy as np

    n = max(abs(x1 - x0), abs(y1 - y0), 1)
    xs = np.rint(np.linspace(x0, x1, n + 1)).astype(int)
    ys = np.rint(np.linspace(y0, y1, n + 1)).astype(int)
    h, w, _ = img.shape
    for dx in range(thick):
        for dy in range(thick):
            keep = (xs + dx >= 0) & (xs + dx < w) & (ys + dy >= 0) & (ys + dy < h)
            img[ys[keep] + dy, xs[keep] + dx] = color


def _text(img: np.ndarray, text: str, x: int, y: int, color: RGB, align: str = "left") -> None:
    """Draw `text` (digits, '-', '.', 'd', 'B') with its vertical middle at y; other characters are skipped."""
    glyph_w = 4 * _SCALE
    width = len(text) * glyph_w
    start = x - width if align == "right" else x - width // 2 if align == "center" else x
    h, w, _ = img.shape
    for i, ch in enumerate(text):
        glyph = _FONT.get(ch)
        if glyph is None:
            continue
        for j, ink in enumerate(glyph):
            if ink != "#":
                continue
            gx, gy = start + i * glyph_w + (j % 3) * _SCALE, y - 5 * _SCALE // 2 + (j // 3) * _SCALE
            if 0 <= gx < w - _SCALE and 0 <= gy < h - _SCALE:
                img[gy:gy + _SCALE, gx:gx + _SCALE] = color

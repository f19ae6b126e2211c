"""A labelled grid of images as a PNG (pillow; no plotting library needed)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from .._io import atomic_write


def save_image_grid(x, y, path, *, classes=None, per_class: int = 10, scale: int | None = None) -> Path:
    """:func:`image_grid` written as a PNG (atomically)."""
    canvas = image_grid(x, y, classes=classes, per_class=per_class, scale=scale)
    path = Path(path)
    with atomic_write(path) as tmp:
        canvas.save(tmp, format="PNG")
    return path


def image_grid(x, y, *, classes=None, per_class: int = 10, scale: int | None = None) -> Image.Image:
    """One row per class (its name written on the left), ``per_class`` images per row, tiles of at least 56 px
    separated by white borders. ``x`` is (n, C, H, W) in [0, 1]."""
    x, y = np.asarray(x), np.asarray(y) if y is not None else np.zeros(len(x), dtype=int)
    n_cls = int(y.max()) + 1 if len(y) else 1
    classes = classes or [str(c) for c in range(n_cls)]
    c, h, w = x.shape[1:]
    scale = scale or max(2, -(-56 // max(h, w)))  # tiles at least 56 px: 8x8 digits x7, 28x28 x2
    h2, w2, pad, label_w = h * scale, w * scale, 2, 70
    canvas = Image.new("RGB", (label_w + per_class * (w2 + pad), n_cls * (h2 + pad)), "white")
    draw = ImageDraw.Draw(canvas)
    for row in range(n_cls):
        top = row * (h2 + pad)
        draw.text((2, top + h2 // 2 - 5), str(classes[row])[:11], fill="black")
        for col, i in enumerate(np.flatnonzero(y == row)[:per_class]):
            img = (np.clip(x[i], 0, 1) * 255).round().astype(np.uint8).transpose(1, 2, 0)
            tile = Image.fromarray(img[:, :, 0] if c == 1 else img).convert("RGB").resize((w2, h2), Image.NEAREST)
            canvas.paste(tile, (label_w + col * (w2 + pad), top))
    return canvas

"""Scan and phone-photo artifacts: paper tone, creases, a small rotation/perspective, uneven light,
sensor noise, blur and JPEG compression.

The geometric part is one homography, applied to the page and to its label map alike, so answer
boxes measured on the warped label map stay true to the ink as it finally appears.
"""

from __future__ import annotations

import io
import random

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from gbtrain.schema import Box


def random_homography(rng: random.Random, width: int, height: int, max_rotation_deg: float = 1.5,
                      max_perspective: float = 0.012) -> np.ndarray:
    """A page -> photo homography: rotation about the centre plus a jitter of the four corners."""
    theta = np.deg2rad(rng.uniform(-max_rotation_deg, max_rotation_deg))
    cx, cy = width / 2, height / 2
    src = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=float)
    rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    dst = (src - [cx, cy]) @ rot.T + [cx, cy]
    dst += np.array([[rng.uniform(-1, 1) * max_perspective * width, rng.uniform(-1, 1) * max_perspective * height]
                     for _ in range(4)])
    return homography_from_points(src, dst)


def homography_from_points(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The 3x3 H with dst ~ H @ src for four point pairs."""
    rows, rhs = [], []
    for (x, y), (u, v) in zip(src, dst, strict=True):
        rows.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        rows.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        rhs += [u, v]
    h = np.linalg.solve(np.array(rows, dtype=float), np.array(rhs, dtype=float))
    return np.append(h, 1.0).reshape(3, 3)


def warp(img: Image.Image, h: np.ndarray, fill, resample=Image.BICUBIC) -> Image.Image:
    """Apply H to an image (PIL wants the inverse map, output -> input)."""
    inv = np.linalg.inv(h)
    inv /= inv[2, 2]
    return img.transform(img.size, Image.PERSPECTIVE, tuple(inv.flatten()[:8]), resample=resample, fillcolor=fill)


def warp_box(h: np.ndarray, box: Box) -> Box:
    """Enclosing box of a box's four corners after H."""
    pts = np.array([[box.x1, box.y1, 1], [box.x2, box.y1, 1], [box.x2, box.y2, 1], [box.x1, box.y2, 1]], float)
    out = pts @ h.T
    out = out[:, :2] / out[:, 2:3]
    return Box(float(out[:, 0].min()), float(out[:, 1].min()), float(out[:, 0].max()), float(out[:, 1].max()))


def label_boxes(labels: Image.Image, n_labels: int) -> dict[int, Box]:
    """Tight box of every label value 1..n in a label map (pixel edges: x2/y2 are exclusive)."""
    arr = np.asarray(labels)
    out: dict[int, Box] = {}
    ys, xs = np.nonzero(arr)
    if ys.size == 0:
        return out
    vals = arr[ys, xs]
    for k in range(1, n_labels + 1):
        sel = vals == k
        if sel.any():
            kx, ky = xs[sel], ys[sel]
            out[k] = Box(float(kx.min()), float(ky.min()), float(kx.max() + 1), float(ky.max() + 1))
    return out


def paper(size: tuple[int, int], rng: random.Random) -> Image.Image:
    """An off-white sheet with faint fibre texture."""
    tone = np.array([rng.randint(236, 252), rng.randint(234, 250), rng.randint(226, 245)], dtype=np.float32)
    nrng = np.random.default_rng(rng.getrandbits(32))
    small = nrng.normal(0, 3, (size[1] // 8 + 1, size[0] // 8 + 1)).astype(np.float32)
    tex = np.asarray(Image.fromarray(small).resize(size, Image.BILINEAR))
    return Image.fromarray(np.clip(tone[None, None, :] + tex[..., None], 0, 255).astype(np.uint8))


def print_on_paper(clean: Image.Image, rng: random.Random) -> Image.Image:
    """Multiply the clean render onto paper, so white areas take the paper's tone."""
    base = np.asarray(paper(clean.size, rng), dtype=np.float32)
    ink = np.asarray(clean, dtype=np.float32) / 255.0
    return Image.fromarray((base * ink).astype(np.uint8))


def crease(img: Image.Image, rng: random.Random) -> Image.Image:
    """A fold line: a thin dark line with a light band beside it."""
    w, h = img.size
    over = Image.new("L", img.size, 0)
    d = ImageDraw.Draw(over)
    if rng.random() < 0.5:
        y0, y1 = rng.uniform(0.2, 0.8) * h, rng.uniform(0.2, 0.8) * h
        d.line([(0, y0), (w, y1)], fill=70, width=2)
        d.line([(0, y0 + 5), (w, y1 + 5)], fill=30, width=8)
    else:
        x0, x1 = rng.uniform(0.3, 0.7) * w, rng.uniform(0.3, 0.7) * w
        d.line([(x0, 0), (x1, h)], fill=70, width=2)
        d.line([(x0 + 5, 0), (x1 + 5, h)], fill=30, width=8)
    over = over.filter(ImageFilter.GaussianBlur(2))
    arr = np.asarray(img, dtype=np.float32)
    shade = 1.0 - np.asarray(over, dtype=np.float32)[..., None] / 255.0 * 0.35
    return Image.fromarray(np.clip(arr * shade, 0, 255).astype(np.uint8))


def light_and_noise(img: Image.Image, rng: random.Random) -> Image.Image:
    """Uneven light (a smooth gradient and a vignette), then sensor noise."""
    w, h = img.size
    nrng = np.random.default_rng(rng.getrandbits(32))
    yy, xx = np.mgrid[0:h:8, 0:w:8].astype(np.float32)
    ang = rng.uniform(0, 2 * np.pi)
    grad = ((xx / w - 0.5) * np.cos(ang) + (yy / h - 0.5) * np.sin(ang)) * rng.uniform(0.08, 0.3)
    vign = ((xx / w - 0.5) ** 2 + (yy / h - 0.5) ** 2) * rng.uniform(0.0, 0.35)
    gain_small = (1.0 - grad - vign).astype(np.float32)
    gain = np.asarray(Image.fromarray(gain_small).resize((w, h), Image.BILINEAR))[..., None]
    arr = np.asarray(img, dtype=np.float32) * gain
    arr += nrng.normal(0, rng.uniform(2, 7), arr.shape[:2])[..., None].astype(np.float32)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def jpeg(img: Image.Image, rng: random.Random, quality: tuple[int, int] = (62, 90)) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=rng.randint(*quality))
    return buf.getvalue()


def scan(clean: Image.Image, labels: Image.Image, rng: random.Random) -> tuple[Image.Image, Image.Image, np.ndarray]:
    """Clean render -> (photographed page, warped label map, the homography used)."""
    img = print_on_paper(clean, rng)
    if rng.random() < 0.35:
        img = crease(img, rng)
    h = random_homography(rng, *img.size)
    bg = tuple(rng.randint(70, 140) for _ in range(3))
    img = warp(img, h, fill=bg)
    warped_labels = warp(labels, h, fill=0, resample=Image.NEAREST)
    img = light_and_noise(img, rng)
    if rng.random() < 0.3:
        img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 0.8)))
    return img, warped_labels, h

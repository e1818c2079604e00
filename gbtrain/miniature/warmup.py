"""A vision warm-up for a model made from random weights: what a real VLM's pre-training gives its vision tower.

A tiny Qwen2.5-VL trained from scratch on grading conversations does not learn to read: the gradient that
reaches its vision tower through the language model is too weak, and the tower stays at chance
(docs/demo.md). So the tower and merger are first trained with a direct visual objective on freshly drawn
handwriting (never the grading task, never the same image twice): which character each image token covers (the
generator labels every glyph's ink, so each token has a target, paper included), and where each token sits in
the image (0-1 row and column). The last is what a box needs: Qwen2.5-VL's tower has no absolute position
embedding, and its language model sees positions only through rotary phases, from which a small model trained
from scratch does not learn to write coordinates; a token that carries its own place lets attention over the ink
tokens read where an answer is as it reads what it says. The heads are dropped afterwards; the warmed tower is
then frozen during SFT.
"""

from __future__ import annotations

import math
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
from PIL import Image

from gbtrain.data.synth.generate import CHARSETS
from gbtrain.families import family_of_config
from gbtrain.progress import Eta
from gbtrain.schema import Box

HANDWRITING_CHARSET = CHARSETS["legible"]  # numbers, angles, choice letters, ticks


@dataclass(frozen=True)
class WarmupOptions:
    # Measured (docs/miniatures.md#a-tiny-model-that-can-see-the-vision-warm-up): a 128-wide, 3-block tower reads
    # 90% of held-out crops of this charset exactly after 2,000 steps; the plain miniature's 64x2 tower stays near
    # chance (13% of ink tokens).
    steps: int = 2000
    batch: int = 64
    lr: float = 1e-3  # 2e-3 sometimes left letters at chance for 1,000 steps; 3e-3 did no better on this charset
    # Crop size in image tokens (columns, rows): the pixels are these times the model family's token side (4x2
    # tokens: 112x56 px for Qwen2.5-VL, 128x64 for Qwen3-VL), so the processor never resizes a crop. Small crops
    # hold more ink per second than 224x112 px ones (600 steps: 35% of ink tokens read against 13.5%).
    crop_tokens: tuple[int, int] = (4, 2)
    glyph_px: tuple[int, int] = (28, 40)  # handwriting size: the legible demo's digits at its 324-token budget
    max_chars: int = 2
    charset: str = HANDWRITING_CHARSET
    position_weight: float = 5.0  # squared error of the 0-1 place against the characters' cross-entropy
    # Share of the steps before the place is trained. From the start it crowds out the characters (a 64-wide tower
    # read no held-out letter crop after 600 steps); learnt second, 97% were read against 99.5% without it (both
    # measured with the earlier max-pooled objective; 0.6 is what the 90% run of this charset used).
    position_from: float = 0.6
    seed: int = 0

    def __post_init__(self):
        if self.steps < 0 or self.batch < 1 or not self.charset or min(self.crop_tokens) < 1:
            raise ValueError("warm-up steps >= 0, batch >= 1, a non-empty charset and crops of at least one image "
                             "token are required")

    def crop_px(self, side: int) -> tuple[int, int]:
        """(width, height) in pixels of a crop for a model whose image token is `side` px."""
        return self.crop_tokens[0] * side, self.crop_tokens[1] * side


# The crops and glyph sizes each synthetic profile's warm-up draws: what the model later sees of its pages'
# handwriting. Measured ink heights at the demos' 324-token budget: legible pages' digits 28-40 px; the marks
# profile's single marks 13-33 px on a page (L2, L3) but 31-77 px in a question crop (L1), which a 4x2-token crop
# of 28-40 px glyphs never showed; its taller 4x3-token crops of 20-72 px glyphs read 4x more L1 answers
# (docs/demo.md#how-the-default-demo-was-sized).
PROFILE_GEOMETRY = {"legible": {"crop_tokens": (4, 2), "glyph_px": (28, 40)},
                    "marks": {"crop_tokens": (4, 3), "glyph_px": (20, 72)}}


def warmup_for_profile(profile: str, steps: int, seed: int = 0) -> WarmupOptions:
    """The warm-up that teaches a tower to read `profile`'s handwriting (its characters, at its sizes)."""
    if profile not in CHARSETS:
        raise ValueError(f"no handwriting profile {profile!r}; one of {', '.join(CHARSETS)}")
    return WarmupOptions(steps=steps, seed=seed, charset=CHARSETS[profile], **PROFILE_GEOMETRY[profile])


@dataclass
class Crop:
    image: Image.Image
    text: str
    classes: np.ndarray  # uint8 per pixel: 0 paper, i + 1 ink of the charset's i-th character
    box: Box  # tight box of the ink, in pixels

    @property
    def ink(self) -> np.ndarray:
        return self.classes > 0


def handwriting_crop(rng: random.Random, opts: WarmupOptions, side: int) -> Crop:
    """A paper-coloured crop (for image tokens of `side` px) with 1..max_chars characters of the synthetic
    handwriting at a random place and size, written glyph by glyph so that each pixel of ink knows its character."""
    from gbtrain.data.synth.render import HandStyle, write_hand

    w, h = opts.crop_px(side)
    while True:
        text = "".join(rng.choice(opts.charset) for _ in range(rng.randint(1, opts.max_chars)))
        style = HandStyle.random(rng, 1.0)
        style.size = rng.randint(*opts.glyph_px)
        image = Image.new("RGB", (w, h), (rng.randint(232, 255),) * 3)
        labels = Image.new("L", (w, h), 0)
        x, baseline = rng.uniform(4, w * 0.6), rng.uniform(style.size, h - style.size * 0.35)
        for ch in text:
            x = write_hand(image, labels, ch, x, baseline, style, opts.charset.index(ch) + 1, rng)
        classes = np.array(labels)
        ink = classes > 0
        if x > w - 4 or not ink.any():
            continue
        ys, xs = np.nonzero(ink)
        if ys.min() < 1 or ys.max() > h - 2:
            continue
        box = Box(float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))
        return Crop(image, text, classes, box)


def _token_places(rows: int, cols: int) -> np.ndarray:
    """Each merged token's centre as (row, column) fractions of the image, in the merger's raster order."""
    r, c = np.meshgrid((np.arange(rows) + 0.5) / rows, (np.arange(cols) + 0.5) / cols, indexing="ij")
    return np.stack([r, c], -1).reshape(-1, 2)


def _token_classes(classes: np.ndarray, n_classes: int, side: int) -> np.ndarray:
    """Each merged token's character (side x side px, in the raster order the merger emits them): the one with most
    ink in the cell, or 0 (paper) where a cell holds no more than a trace of ink."""
    h, w = classes.shape
    cells = classes.reshape(h // side, side, w // side, side).transpose(0, 2, 1, 3).reshape(-1, side * side)
    counts = np.stack([(cells == c).sum(1) for c in range(1, n_classes + 1)], 1)
    return np.where(counts.max(1) > 8, counts.argmax(1) + 1, 0)


class _Batches:
    """Fresh crops, preprocessed by the model's own image processor (its budget keeps the crops' native size)."""

    def __init__(self, opts: WarmupOptions, seed: int, image_processor, side: int):
        self.processor, self.opts, self.rng, self.side = image_processor, opts, random.Random(seed), side

    def next(self, n: int):
        import torch

        crops = [handwriting_crop(self.rng, self.opts, self.side) for _ in range(n)]
        enc = self.processor(images=[c.image for c in crops], return_tensors="pt")
        classes = np.concatenate([_token_classes(c.classes, len(self.opts.charset), self.side) for c in crops])
        cols, rows = self.opts.crop_tokens
        places = torch.tensor(np.concatenate([_token_places(rows, cols)] * n), dtype=torch.float32)
        return enc["pixel_values"], enc["image_grid_thw"], torch.tensor(classes), places


def warm_up_vision(model, opts: WarmupOptions, image_processor, log=print) -> dict:
    """Train `model`'s vision tower and merger in place on crops prepared by `image_processor` (gbtrain.train.modeling.
    load_processor's, with a budget of at least the crop's area); return held-out figures (per crop: its characters
    exactly the set read off its tokens; per token: the character, among ink tokens, and ink or paper; the place
    error) and the time taken, for the model folder's record."""
    import torch
    import torch.nn.functional as F

    side = family_of_config(model.config).patch_factor  # pixels per image token side
    torch.manual_seed(opts.seed)
    visual = model.model.visual
    width = model.config.text_config.hidden_size
    class_head, place_head = torch.nn.Linear(width, len(opts.charset) + 1), torch.nn.Linear(width, 2)
    params = [*visual.parameters(), *class_head.parameters(), *place_head.parameters()]
    optimizer = torch.optim.AdamW(params, lr=opts.lr, weight_decay=0.01)
    warmup = max(1, opts.steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * s / max(1, opts.steps))))

    def forward(pixels, grid):
        """Character logits of every feature the language model receives (the merger's tokens, and Qwen3-VL's
        DeepStack features, which enter its first layers), and the place read off the merger's tokens."""
        out = visual(pixels, grid_thw=grid)
        features = [out.pooler_output, *(getattr(out, "deepstack_features", None) or [])]
        return [class_head(f) for f in features], place_head(out.pooler_output)

    def class_loss(logits, classes):
        # paper tokens outnumber ink ones several times over: ink tokens are averaged on their own as well
        ink = classes > 0
        return F.cross_entropy(logits, classes) + F.cross_entropy(logits[ink], classes[ink])

    # another stream than training's: unseen crops
    held_out_crops = _Batches(opts, opts.seed + 10_000, image_processor, side)
    held_out = [held_out_crops.next(50) for _ in range(4)]
    tokens_per_crop = opts.crop_tokens[0] * opts.crop_tokens[1]

    def evaluate() -> dict:
        visual.eval()
        exact = crops = ink_right = ink_tokens = paper_right = tokens = 0
        place_error = 0.0
        with torch.no_grad():
            for pixels, grid, classes, places in held_out:
                logits, place = forward(pixels, grid)
                predicted, ink = logits[0].argmax(-1), classes > 0
                for p, c in zip(predicted.split(tokens_per_crop), classes.split(tokens_per_crop), strict=True):
                    exact += set(p[p > 0].tolist()) == set(c[c > 0].tolist())
                crops += len(predicted) // tokens_per_crop
                ink_right += (predicted[ink] == classes[ink]).sum().item()
                ink_tokens += ink.sum().item()
                paper_right += ((predicted > 0) == ink).sum().item()
                tokens += len(classes)
                place_error += (place - places).abs().sum().item()
        visual.train()
        placed = opts.position_from < 1  # an untrained place head's error says nothing
        return {"chars_exact": round(exact / crops, 4), "ink_token_chars": round(ink_right / ink_tokens, 4),
                "ink_token_accuracy": round(paper_right / tokens, 4),
                "place_mean_abs_error": round(place_error / (2 * tokens), 4) if placed else None}

    batches, start, eta = _Batches(opts, opts.seed, image_processor, side), time.time(), Eta(opts.steps)
    visual.train()
    # drawing a batch takes as long as learning from it; PIL and torch both release the GIL, so the next batch is
    # drawn in a thread while this one trains
    with ThreadPoolExecutor(1) as drawer:
        coming = drawer.submit(batches.next, opts.batch)
        for step in range(opts.steps):
            pixels, grid, classes, places = coming.result()
            if step + 1 < opts.steps:
                coming = drawer.submit(batches.next, opts.batch)
            logits, place = forward(pixels, grid)
            loss = sum(class_loss(each, classes) for each in logits) / len(logits)
            if step >= opts.position_from * opts.steps:
                loss = loss + opts.position_weight * F.mse_loss(place, places)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            schedule.step()
            if (step + 1) % 50 == 0 or step + 1 == opts.steps:
                log(f"vision warm-up {eta.line(step + 1, f'loss {loss.item():.4f}')}")
    visual.eval()
    result = {"options": asdict(opts), "crop_px": list(opts.crop_px(side)), "held_out": evaluate(),
              "seconds": round(time.time() - start, 1)}
    log(f"vision warm-up done: {result['held_out']} in {result['seconds']} s")
    return result

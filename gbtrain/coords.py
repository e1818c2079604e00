"""Coordinates: the Qwen-VL resize rule and every box convention, in one place.

Annotations hold boxes in original-image pixels. A model reads and writes boxes in its own
convention; the builder (targets), the evaluator (L2 regions, parsing) and the scorer all convert
through ``to_model`` / ``from_model`` with the same ``PixelBudget``, so training and test agree.

Conventions (names usable in configs and on the command line):
    qwen25         absolute pixels in the smart-resized image (Qwen2.5-VL), [x1, y1, x2, y2] ints
    abs            absolute pixels in the original image, ints
    rel1000        0-1000 [x1, y1, x2, y2] ints (Qwen3-VL, InternVL, GLM, Gemma)
    rel1000-yxyx   0-1000 [y1, x1, y2, x2] ints (Gemini)
    rel1           0-1 [x1, y1, x2, y2], 4 decimals (Kimi, DeepSeek)
    rel1-cxcywh    0-1 [cx, cy, w, h], 4 decimals (GPT)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from PIL import Image

from gbtrain.families import DEFAULT_FAMILY, FAMILIES
from gbtrain.schema import Box

MAX_ASPECT_RATIO = 200
CONVENTIONS = ("qwen25", "abs", "rel1000", "rel1000-yxyx", "rel1", "rel1-cxcywh")
_REL1_DECIMALS = 4


@dataclass(frozen=True)
class PixelBudget:
    """The min/max pixel setting that builder, trainer and evaluator share (one config value).

    Defaults are the GradingBench reference runs: min 224*224, max 2200*28*28 (about 1.7 Mpx). `factor` is the
    model family's image side per LLM token (gbtrain.families: 28 for Qwen2.5-VL, 32 for Qwen3-VL); the
    builder, trainer and evaluator check it against the model they are given.
    """

    min_pixels: int = field(default=224 * 224, metadata={"help": "smaller images are scaled up",
                                                         "bounds": (1, 10**9)})
    max_pixels: int = field(default=2200 * 28 * 28, metadata={"help": "larger images are scaled down (smart_resize)",
                                                              "bounds": (1, 10**9)})
    factor: int = field(default=DEFAULT_FAMILY.patch_factor, metadata={
        "help": "image side per LLM token in px: the model family's (28 Qwen2.5-VL, 32 Qwen3-VL)", "bounds": (1, 1024)})

    def __post_init__(self):
        if not (0 < self.min_pixels <= self.max_pixels):
            raise ValueError(f"need 0 < min_pixels <= max_pixels, got {self.min_pixels}, {self.max_pixels}")
        factors = sorted({f.patch_factor for f in FAMILIES})
        if self.factor not in factors:
            raise ValueError(f"vision.factor={self.factor!r}: the supported model families use {factors}")

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) of the image as the model sees it."""
        h, w = smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)
        return w, h

    def image_tokens(self, width: int, height: int) -> int:
        """LLM tokens one image costs (one per factor x factor merged patch)."""
        w, h = self.resized(width, height)
        return (w // self.factor) * (h // self.factor)

    def check_family(self, family, model: str) -> None:
        """Refuse a budget cut for another family's tokens (its token counts and qwen25 boxes would be wrong)."""
        if self.factor != family.patch_factor:
            raise ValueError(f"vision.factor={self.factor} but {model} is {family.name}, whose image tokens are "
                             f"{family.patch_factor} px: set vision.factor={family.patch_factor}")

    def resize(self, image):
        """A PIL image at the size the model sees (for endpoints that cannot be told the budget)."""
        size = self.resized(*image.size)
        return image if size == image.size else image.resize(size, Image.Resampling.BICUBIC)

    def processor_size(self) -> dict[str, int]:
        """The `size` of the transformers Qwen2-VL image processor (gbtrain.train.modeling.load_processor sets it)."""
        return {"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels}

    def mm_processor_kwargs(self) -> dict[str, int]:
        """vLLM `mm_processor_kwargs`."""
        return {"min_pixels": self.min_pixels, "max_pixels": self.max_pixels}


def aspect_problem(width: int, height: int) -> str | None:
    """Why an image of this size cannot be shown to the model (smart_resize's limit, as the processors'), or None."""
    aspect = max(width, height) / min(width, height)
    if aspect <= MAX_ASPECT_RATIO:
        return None
    return (f"the image is {width}x{height}, an aspect ratio of {aspect:.0f}: Qwen-VL processors take at most "
            f"{MAX_ASPECT_RATIO} (crop or pad it)")


def smart_resize(height: int, width: int, factor: int = DEFAULT_FAMILY.patch_factor, min_pixels: int = 56 * 56,
                 max_pixels: int = 14 * 14 * 4 * 1280) -> tuple[int, int]:
    """(height, width), both multiples of `factor`, pixel count within [min, max], aspect kept.

    The exact rule of the Qwen2-VL image processor that Qwen2.5-VL and Qwen3-VL share (with their own factor);
    tests check it against each family's processor.
    """
    if min(height, width) <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    aspect = aspect_problem(width, height)
    if aspect:
        raise ValueError(aspect)
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _check(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown coordinate convention {convention!r}; choose one of {', '.join(CONVENTIONS)}")


def _scale(convention: str, width: int, height: int, budget: PixelBudget) -> tuple[float, float]:
    """Model units per original pixel, along x and y."""
    if convention == "qwen25":
        rw, rh = budget.resized(width, height)
        return rw / width, rh / height
    if convention == "abs":
        return 1.0, 1.0
    if convention.startswith("rel1000"):
        return 1000.0 / width, 1000.0 / height
    return 1.0 / width, 1.0 / height


def to_model(box: Box, width: int, height: int, convention: str, budget: PixelBudget = PixelBudget()) -> list:
    """Original-pixel box -> the list a model of `convention` reads and writes."""
    _check(convention)
    sx, sy = _scale(convention, width, height, budget)
    x1, y1, x2, y2 = box.x1 * sx, box.y1 * sy, box.x2 * sx, box.y2 * sy
    if convention.startswith("rel1") and not convention.startswith("rel1000"):
        r = _REL1_DECIMALS
        if convention == "rel1-cxcywh":
            return [round((x1 + x2) / 2, r), round((y1 + y2) / 2, r), round(x2 - x1, r), round(y2 - y1, r)]
        return [round(x1, r), round(y1, r), round(x2, r), round(y2, r)]
    vals = [round(x1), round(y1), round(x2), round(y2)]
    if convention == "rel1000-yxyx":
        return [vals[1], vals[0], vals[3], vals[2]]
    return vals


def from_model(values: list[float], width: int, height: int, convention: str,
               budget: PixelBudget = PixelBudget()) -> Box:
    """A model's 4-number box -> original-pixel Box (x1 <= x2, y1 <= y2; not clipped)."""
    _check(convention)
    if len(values) != 4:
        raise ValueError(f"a box needs 4 numbers, got {values!r}")
    a, b, c, d = (float(v) for v in values)
    if convention == "rel1000-yxyx":
        a, b, c, d = b, a, d, c
    elif convention == "rel1-cxcywh":
        a, b, c, d = a - c / 2, b - d / 2, a + c / 2, b + d / 2
    sx, sy = _scale(convention, width, height, budget)
    x1, y1, x2, y2 = a / sx, b / sy, c / sx, d / sy
    return Box(min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2))


def model_unit_size(width: int, height: int, convention: str,
                    budget: PixelBudget = PixelBudget()) -> tuple[float, float]:
    """Original pixels per model unit along x and y: the rounding error bound of a round trip."""
    _check(convention)
    sx, sy = _scale(convention, width, height, budget)
    if convention.startswith("rel1") and not convention.startswith("rel1000"):
        return 10.0 ** -_REL1_DECIMALS / sx, 10.0 ** -_REL1_DECIMALS / sy
    return 1.0 / sx, 1.0 / sy


DEFAULT_L2_MARGIN = 0.02  # of the page's longer side, around the answers of an L2 record without a question mark


# Which convention a model family was trained with (GradingBench format note). Keys are matched
# against a config.json `model_type` or a model name, lowercased, first match wins. The families gbtrain trains
# (gbtrain.families) say their own; the rest are models it evaluates.
_FAMILY_CONVENTIONS = (
    *((t, f.native_coords) for f in FAMILIES for t in f.model_types),
    ("qwen2.5-vl", "qwen25"), ("qwen2-vl", "qwen25"), ("qwen3", "rel1000"), ("internvl", "rel1000"),
    ("glm", "rel1000"), ("gemma", "rel1000"),
    ("gemini", "rel1000-yxyx"), ("claude", "abs"), ("kimi", "rel1"), ("deepseek", "rel1"),
    ("gpt", "rel1-cxcywh"),
)


def convention_for_model(model_type_or_name: str) -> str | None:
    """Default convention for a model family (None when unknown: the caller must ask for --coords)."""
    key = model_type_or_name.lower()
    return next((conv for family, conv in _FAMILY_CONVENTIONS if family in key), None)

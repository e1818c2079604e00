"""Boxes and labels drawn on a page, for people to look at: the preview of a dataset, the evaluator's overlays and
the grades of new pages all draw through `draw_shapes`, in one palette."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image, ImageDraw

from gbtrain.data.fonts import draw_text
from gbtrain.schema import CONTEXT, RIGHT, WRONG

# What a colour means on every drawing: a verdict (right, wrong, any other), a question region, an item a teacher
# should look at, and, on the evaluator's overlays, the ground truth against the model's prediction.
COLORS = {RIGHT: (0, 150, 0), WRONG: (210, 0, 0), CONTEXT: (40, 90, 220)}
OTHER_COLOR = (220, 130, 0)  # half_right, unanswered, unknown, or no judgment
REVIEW_COLOR = (150, 40, 200)
GROUND_TRUTH_COLOR = COLORS[RIGHT]
PREDICTION_COLOR = COLORS[WRONG]
LINK_COLOR = (0, 0, 230)
TEXT_CHARS = 40  # a label's text longer than this is cut


def verdict_color(label: str) -> tuple[int, int, int]:
    """The colour of a verdict label (right, wrong, a question region; anything else OTHER_COLOR)."""
    return COLORS.get(label, OTHER_COLOR)


def cut(text: str) -> str:
    """`text` at most TEXT_CHARS long, an ellipsis marking a cut."""
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS - 1] + "…"


@dataclass(frozen=True)
class Shape:
    """One outlined region: a box [x1, y1, x2, y2] or a polygon of (x, y) points, a label above its top-left corner,
    one below its bottom (or, with `inside`, just under its top edge)."""

    outline: Sequence
    color: tuple[int, int, int]
    width: int = 3
    above: str | None = None
    below: str | None = None
    inside: str | None = None


def _bounds(outline: Sequence) -> tuple[float, float, float, float]:
    if outline and isinstance(outline[0], list | tuple):
        xs, ys = [p[0] for p in outline], [p[1] for p in outline]
        return min(xs), min(ys), max(xs), max(ys)
    x1, y1, x2, y2 = outline
    return x1, y1, x2, y2


def draw_shapes(image: Image.Image, shapes: Sequence[Shape],
                links: Sequence[tuple[tuple[float, float], tuple[float, float]]] = ()) -> Image.Image:
    """A copy of `image` in RGB with each shape outlined and labelled (text sized to the page), and each link a line
    between two points."""
    img = image.convert("RGB")
    draw = ImageDraw.Draw(img)
    size = max(12, img.width // 70)
    for s in shapes:
        if s.outline and isinstance(s.outline[0], list | tuple):
            draw.polygon([tuple(p) for p in s.outline], outline=s.color, width=s.width)
        else:
            draw.rectangle(list(s.outline), outline=s.color, width=s.width)
        x1, y1, _, y2 = _bounds(s.outline)
        if s.inside is not None:
            draw_text(draw, x1 + 3, y1 + size + 2, s.inside, size, s.color)
        if s.above is not None:
            draw_text(draw, x1, max(size, y1 - 3), s.above, size, s.color)
        if s.below is not None:
            draw_text(draw, x1, y2 + size + 2, s.below, size, s.color)
    for start, end in links:
        draw.line([start, end], fill=LINK_COLOR, width=2)
    return img

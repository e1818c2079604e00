"""What every tool reader produces: pages with labelled regions in original pixels and their attributes as text.

The readers only translate a tool's file format; the mapping to GradingBench (which label is an answer, which
attribute is the transcription) happens once, in gbtrain.data.converters.build, for all tools alike.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from gbtrain import files

Points = list[tuple[float, float]]
_UPLOAD_PREFIX = re.compile(r"^[0-9a-f]{8}-")  # Label Studio stores uploads as <8 hex>-<original name>
# Label Studio's COCO / YOLO exports copy each image as images/<first 8 hex of the MD5 of its URL>__<file name>
# (label-studio-sdk, label_studio_tools/core/utils/io.py, _build_cache_path)
_EXPORT_PREFIX = re.compile(r"^[0-9a-f]{8}__")


@dataclass
class SourceItem:
    """One exported region. `points` is None when its shape cannot be a box; `problem` then says why."""

    where: str  # names the region in messages, e.g. "task 12, region 'Dx_aB91ISN'"
    label: str
    points: Points | None
    attributes: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    region_id: str | None = None  # the tool's own id of the region (Label Studio's), where it has one


@dataclass
class SourcePage:
    """One exported image with its regions; `problems` are page-level (no annotation, no image named)."""

    file: str  # the export file, named in every message
    where: str  # names the page, e.g. "task 12" or "image 'p1.jpg'"
    image_ref: str  # the image as the export names it (path, URL, upload name)
    size: tuple[int, int] | None  # (width, height) the export says, when it says
    items: list[SourceItem] = field(default_factory=list)
    attributes: dict[str, str] = field(default_factory=dict)  # page-level fields (task data, CVAT tags, ...)
    image_data: bytes | None = None  # an image embedded in the export (labelme imageData)
    image_dirs: tuple[Path, ...] = ()  # folders the export's own paths are relative to, searched first
    subset: str | None = None  # CVAT project exports: images/<subset>/<name>, which tells apart pages of one name
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # choices the reader made, reported


def read_json(path: Path):
    """A JSON export (gbtrain.files.read_json); unreadable or malformed is one ValueError naming the file."""
    try:
        return files.read_json(path)
    except ValueError as e:  # also bytes not UTF-8, nesting or digits past Python's limits, a BOM read past
        raise ValueError(f"{path}: not a JSON file ({str(e)[:200]})") from None


def text(value) -> str | None:
    """An attribute value as text: strings as they are, numbers and booleans spelled out, anything else None."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float | str):
        return str(value)
    return None


def scalar_attributes(d: dict, skip: set[str]) -> dict[str, str]:
    """The keys of `d` outside `skip` whose values are text or numbers (extra keys some tools keep)."""
    out = {k: text(v) for k, v in d.items() if k not in skip}
    return {k: v for k, v in out.items() if v is not None}


def finite_points(values, from_text: bool = False) -> Points | None:
    """[(x, y), ...] from pairs of numbers, or None when any value is not a finite number. In JSON a coordinate is a
    number (`true` or `"6.25"` is not one); `from_text`: XML attributes, where numbers are written as text."""
    def number(v) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float | str) or (isinstance(v, str) and not from_text):
            raise TypeError(v)
        return float(v)

    try:
        pts = [(number(x), number(y)) for x, y in values]
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer of hundreds of digits
        return None
    return pts if pts and all(math.isfinite(v) for p in pts for v in p) else None


def rectangle(x1: float, y1: float, x2: float, y2: float) -> Points:
    """A box as the four-corner polygon GradingBench stores, whatever corners the tool gave."""
    xa, xb = sorted((x1, x2))
    ya, yb = sorted((y1, y2))
    return [(xa, ya), (xb, ya), (xb, yb), (xa, yb)]


def rotated_rectangle(x: float, y: float, w: float, h: float, degrees: float, about_center: bool) -> Points:
    """The corners of a w x h box at (x, y) turned clockwise on screen (y points down) about its top-left corner
    (Label Studio) or its centre (CVAT)."""
    a = math.radians(degrees)
    cos, sin = math.cos(a), math.sin(a)
    px, py = (x + w / 2, y + h / 2) if about_center else (x, y)
    corners = [(x, y), (x + w, y), (x + w, y + h), (x, y + h)]
    return [(px + (cx - px) * cos - (cy - py) * sin, py + (cx - px) * sin + (cy - py) * cos) for cx, cy in corners]


def image_names(ref: str) -> list[str]:
    """Names to look for an exported image under: its relative path, its file name, and the file name without
    Label Studio's prefixes (its COCO export's `<8 hex>__`, then the upload's `<8 hex>-`). URLs and Label Studio's
    /data/local-files/?d=PATH are reduced to their path."""
    parts = urlsplit(ref.replace("\\", "/"))
    local = parse_qs(parts.query).get("d")  # already unquoted
    path = (local[0] if local else unquote(parts.path)).lstrip("/")
    base = path.rsplit("/", 1)[-1]
    exported = _EXPORT_PREFIX.sub("", base)
    names = [path, base, exported, _UPLOAD_PREFIX.sub("", exported)]
    return [n for i, n in enumerate(names) if n and n not in names[:i]]

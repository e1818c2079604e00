"""labelme JSON files: one per image, a folder of them (every *.json in it, sorted) or a single file; X-AnyLabeling
writes the same format.

A file names its image by `imagePath` (relative to the JSON file; `imageData` may embed it, base64: then it is used
whenever imagePath is no image, as in labelme's tutorial file whose imagePath names the JSON itself) and holds
`shapes`: `label`, `points` in pixels, `shape_type` ("rectangle": two opposite corners in labelme, the four corners
from the top-left clockwise in X-AnyLabeling 2.2+; "polygon"; files from before shape_type are polygons),
`description`, `group_id`, `flags` ({name: bool}) and any extra keys the tool keeps (X-AnyLabeling: `score`,
`difficult`, `attributes` {name: value}, `kie_linking`). A shape's attributes: `description`, `group_id`, `flags`
(the names of the flags set, comma-joined), the text or number values of its `attributes` object and its extra
text or number keys. The file's extra text or number keys and its set `flags` are page attributes. Circles, lines,
points, masks and X-AnyLabeling's rotated boxes cannot be boxes and are listed.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from gbtrain.data.converters.sources import (
    Points,
    SourceItem,
    SourcePage,
    finite_points,
    read_json,
    rectangle,
    scalar_attributes,
    text,
)

_FILE_KEYS = {"version", "flags", "shapes", "imagePath", "imageData", "imageHeight", "imageWidth"}
_SHAPE_KEYS = {"label", "points", "shape_type", "flags", "description", "group_id", "mask", "attributes"}


def read(path: Path) -> list[SourcePage]:
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"{path}: no labelme *.json files in this folder")
    return [_page(f) for f in files]


def _flags(flags) -> str:
    return ",".join(k for k, v in flags.items() if v is True) if isinstance(flags, dict) else ""


def _page(path: Path) -> SourcePage:
    doc = read_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("shapes"), list) or "imagePath" not in doc:
        raise ValueError(f"{path}: not a labelme file (it needs 'shapes' and 'imagePath')")
    ref = str(doc.get("imagePath") or "")
    size = finite_points([(doc.get("imageWidth"), doc.get("imageHeight"))])
    page = SourcePage(str(path), f"image {ref!r}", ref, (int(size[0][0]), int(size[0][1])) if size else None,
                      attributes=scalar_attributes(doc, _FILE_KEYS), image_dirs=(path.parent,))
    page.attributes["flags"] = _flags(doc.get("flags"))
    if doc.get("imageData"):
        try:
            page.image_data = base64.b64decode(doc["imageData"], validate=True)
        except (binascii.Error, TypeError):
            page.problems.append("imageData is not base64")
    page.items = [_item(page, s, i) for i, s in enumerate(doc["shapes"])]
    return page


def _item(page: SourcePage, shape, index: int) -> SourceItem:
    shape = shape if isinstance(shape, dict) else {}
    where = f"{page.where}, shape #{index}"
    attributes = scalar_attributes(shape, _SHAPE_KEYS)
    if isinstance(shape.get("attributes"), dict):  # X-AnyLabeling's per-shape attributes
        attributes |= scalar_attributes(shape["attributes"], set())
    attributes |= {"description": text(shape.get("description")) or "", "flags": _flags(shape.get("flags"))}
    if shape.get("group_id") is not None:
        attributes["group_id"] = text(shape["group_id"]) or ""
    kind = shape.get("shape_type") or "polygon"
    pts = finite_points(shape.get("points") or [])
    if kind == "rectangle" and pts and len(pts) in (2, 4):
        points = _rectangle(pts)
    elif kind == "polygon" and pts and len(pts) >= 3:
        points = pts
    else:
        points = None
    problem = None if points else (f"unreadable {kind} points" if kind in ("rectangle", "polygon") else
                                   f"shape {kind!r} cannot be a box: draw a rectangle or polygon")
    return SourceItem(where, text(shape.get("label")) or "", points, attributes, problem)


def _rectangle(pts: Points) -> Points | None:
    """A rectangle from two opposite corners (labelme) or its four corners in any order (X-AnyLabeling writes
    [xmin, ymin], [xmax, ymin], [xmax, ymax], [xmin, ymax]); four points that are not the corners of one upright
    box are None (unreadable)."""
    xs, ys = [x for x, _ in pts], [y for _, y in pts]
    box = rectangle(min(xs), min(ys), max(xs), max(ys))
    return box if len(pts) == 2 or set(pts) == set(box) else None

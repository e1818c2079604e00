"""COCO object-detection JSON (`images`, `annotations`, `categories`).

A region is an annotation: its label the category's `name`, its shape the polygon `segmentation` when it has one
(several polygons: their enclosing box), else `bbox` = [x, y, width, height] in pixels (turned about its centre
by attributes.rotation, as CVAT and Datumaro write rotated boxes). A mask (an RLE `segmentation` object, as CVAT
and Datumaro export masks) and a crowd region (`iscrowd` 1) are not one answer area: they are listed, as CVAT
masks and Label Studio brushes are, never taken as their bbox. Its attributes are the `attributes` object
(Datumaro / CVAT's extension) and any other text or number key (e.g. COCO-Text's `utf8_string`). Extra text or
number keys of an image entry are page attributes.
"""

from __future__ import annotations

from pathlib import Path

from gbtrain.data.converters.sources import (
    SourceItem,
    SourcePage,
    finite_points,
    read_json,
    rectangle,
    rotated_rectangle,
    scalar_attributes,
)

_ANNOTATION_KEYS = {"id", "image_id", "category_id", "segmentation", "area", "bbox", "iscrowd", "attributes"}
_IMAGE_KEYS = {"id", "width", "height", "file_name", "license", "flickr_url", "coco_url", "date_captured"}


def read(path: Path) -> list[SourcePage]:
    doc = read_json(path)
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), list) for k in ("images", "annotations")):
        raise ValueError(f"{path}: not a COCO JSON file (it needs 'images' and 'annotations' lists)")
    categories = {c.get("id"): str(c.get("name", "")) for c in doc.get("categories") or [] if isinstance(c, dict)}
    pages = {}
    for image in doc["images"]:
        if not isinstance(image, dict) or "id" not in image:
            raise ValueError(f"{path}: an image entry without an id: {image!s:.80}")
        if image["id"] in pages:  # its annotations could belong to either page
            raise ValueError(f"{path}: two images have id {image['id']!r} ({pages[image['id']].image_ref!r} and "
                             f"{image.get('file_name')!r}): give each image its own id")
        pages[image["id"]] = _page(path, image)
    for i, ann in enumerate(doc["annotations"]):
        page = pages.get(ann.get("image_id")) if isinstance(ann, dict) else None
        if page is None:
            raise ValueError(f"{path}: annotation {i} names no image of the file (image_id "
                             f"{ann.get('image_id') if isinstance(ann, dict) else ann!r})")
        page.items.append(_item(page, ann, i, categories))
    return list(pages.values())


def _page(path: Path, image: dict) -> SourcePage:
    name = str(image.get("file_name", ""))
    size = finite_points([(image.get("width"), image.get("height"))])
    return SourcePage(str(path), f"image {name!r}", name, (int(size[0][0]), int(size[0][1])) if size else None,
                      attributes=scalar_attributes(image, _IMAGE_KEYS))


def _item(page: SourcePage, ann: dict, index: int, categories: dict) -> SourceItem:
    where = f"{page.where}, annotation {ann.get('id', f'#{index}')}"
    attributes = scalar_attributes(ann.get("attributes") if isinstance(ann.get("attributes"), dict) else {}, set())
    attributes |= scalar_attributes(ann, _ANNOTATION_KEYS)
    label = categories.get(ann.get("category_id"))
    if label is None:
        return SourceItem(where, "", None, attributes, f"category_id {ann.get('category_id')!r} is not in categories")
    segmentation = ann.get("segmentation")
    if isinstance(segmentation, dict) or ann.get("iscrowd") == 1:
        what = "an RLE mask segmentation" if isinstance(segmentation, dict) else "a crowd region (iscrowd 1)"
        return SourceItem(where, label, None, attributes, f"{what} cannot be a box: draw a polygon or box")
    if segmentation:
        points = _polygon(segmentation)
        return SourceItem(where, label, points, attributes, None if points else "unreadable polygon segmentation")
    points = _bbox(ann.get("bbox"), attributes.get("rotation"))
    return SourceItem(where, label, points, attributes, None if points else "no polygon segmentation and no bbox")


def _polygon(segmentation):
    """The polygon of a segmentation list (several: their enclosing box); None when it is not a list of polygons."""
    if not isinstance(segmentation, list):
        return None
    polygons = [finite_points(zip(s[::2], s[1::2], strict=True)) if isinstance(s, list) and len(s) % 2 == 0
                else None for s in segmentation]
    if any(p is None or len(p) < 3 for p in polygons):
        return None
    if len(polygons) == 1:
        return polygons[0]
    every = [pt for p in polygons for pt in p]
    return rectangle(min(x for x, _ in every), min(y for _, y in every), max(x for x, _ in every),
                     max(y for _, y in every))


def _bbox(bbox, rotation: str | None):
    """`rotation` is an attribute (text); the box's values are JSON numbers."""
    values = finite_points([bbox[:2], bbox[2:]]) if isinstance(bbox, list) and len(bbox) == 4 else None
    turn = finite_points([(rotation or 0, 0)], from_text=True)
    if values is None or turn is None:
        return None
    (x, y), (w, h) = values
    ((angle, _),) = turn
    return rotated_rectangle(x, y, w, h, angle, about_center=True) if angle else rectangle(x, y, x + w, y + h)

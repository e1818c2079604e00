"""CVAT's "CVAT for images 1.1" XML export (annotations.xml).

Each <image name width height> holds shapes; <box xtl ytl xbr ybr [rotation]> and <polygon points="x,y;x,y;...">
are regions (pixels; a box's rotation turns it clockwise about its centre), their <attribute name=...> children
their attributes. The <attribute> children of the image's <tag> elements are page attributes, and the tags'
labels together are the page attribute "tag". A project export names each image's subset (<image subset="Train">)
and keeps its file as images/<subset>/<name>: pages of one name in two subsets are told apart by it. Polylines,
points, ellipses, cuboids, masks and skeletons cannot be boxes and are listed. The video format (<track>) is
refused.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from gbtrain.data.converters.sources import SourceItem, SourcePage, finite_points, rectangle, rotated_rectangle

_SHAPES = ("box", "polygon", "polyline", "points", "ellipse", "cuboid", "mask", "skeleton")


def read(path: Path) -> list[SourcePage]:
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise ValueError(f"{path}: not an XML file ({e})") from None
    if root.tag != "annotations":
        raise ValueError(f"{path}: not a CVAT XML export (the root element is <{root.tag}>, not <annotations>)")
    if root.find("track") is not None:
        raise ValueError(f"{path}: a 'CVAT for video' export (it has <track> elements): export the task as "
                         f"'CVAT for images 1.1'")
    return [_page(path, image) for image in root.iter("image")]


def _attributes(element: ET.Element) -> dict[str, str]:
    return {a.get("name", ""): (a.text or "") for a in element.findall("attribute")}


def _page(path: Path, image: ET.Element) -> SourcePage:
    name, subset = image.get("name", ""), image.get("subset")
    size = finite_points([(image.get("width"), image.get("height"))], from_text=True)
    where = f"image {name!r}" + (f" of subset {subset!r}" if subset else "")
    page = SourcePage(str(path), where, name, (int(size[0][0]), int(size[0][1])) if size else None, subset=subset)
    tags = image.findall("tag")
    for tag in tags:
        page.attributes.update(_attributes(tag))
    if tags:
        page.attributes["tag"] = ",".join(t.get("label", "") for t in tags)
    for i, shape in enumerate(s for s in image if s.tag in _SHAPES):
        points, problem = _points(shape)
        page.items.append(SourceItem(f"{where}, {shape.tag} #{i}", shape.get("label", ""), points,
                                     _attributes(shape), problem))
    return page


def _points(shape: ET.Element):
    """(points, None) for a box or polygon, (None, why) otherwise."""
    if shape.tag == "box":
        corners = finite_points([(shape.get("xtl"), shape.get("ytl")), (shape.get("xbr"), shape.get("ybr")),
                                 (shape.get("rotation") or 0, 0)], from_text=True)
        if corners is None:
            return None, "unreadable box coordinates"
        (x1, y1), (x2, y2), (angle, _) = corners
        if angle:
            return rotated_rectangle(x1, y1, x2 - x1, y2 - y1, angle, about_center=True), None
        return rectangle(x1, y1, x2, y2), None
    if shape.tag == "polygon":
        pts = finite_points((p.split(",") for p in (shape.get("points") or "").split(";") if p), from_text=True)
        return (pts, None) if pts and len(pts) >= 3 else (None, "unreadable polygon points")
    return None, f"shape {shape.tag!r} cannot be a box: draw a box or polygon"

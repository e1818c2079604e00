"""A page as a GradingBench folder stores it: its image under images/L3 (and the same file under images/L2), each
question's L1 crop under images/L1, and how much page an L1 crop takes around its question. The synthetic
generator, the converters and the review import all write pages through here."""

from __future__ import annotations

import io
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from gbtrain.schema import Box, Mark, Record
from gbtrain.text import safe_name
from gbtrain.vocabulary import L1, L2, L3

L1_MARGIN = 0.04  # crop margin around a question, as a fraction of the page width


def l1_crop(region: Box, width: int, height: int) -> Box:
    """The L1 crop of a question region on a `width` x `height` page: the region and L1_MARGIN of the page width
    around it, inside the page."""
    return region.expand(L1_MARGIN * width, width, height)


Crop = tuple[int, int, int, int]  # an L1 crop's (x, y, width, height) on its page


L1_JPEG_QUALITY = 92  # an L1 crop's encoding


def crop_jpeg(image: Image.Image, crop: Crop) -> bytes:
    """An L1 crop of a page image, (x, y, width, height) in its pixels, encoded as every writer of pages stores it."""
    x, y, w, h = crop
    buf = io.BytesIO()
    image.crop((x, y, x + w, y + h)).convert("RGB").save(buf, format="JPEG", quality=L1_JPEG_QUALITY)
    return buf.getvalue()


def question_of_mark(mark_id: str) -> str:
    """The question an answer mark's id names: its part before the first "-" (`3-2` is question 3's)."""
    return mark_id.split("-", 1)[0]


def question_records(page: Record, regions: dict[str, list[Mark]] | None = None,
                     skip: set[str] = frozenset()) -> tuple[list[Record], list[tuple[Record, Crop]]]:
    """The L2 and L1 records of an L3 page's questions, in reading order (by the top, then left, of each question's
    answers and regions): L2 `{page}_{k}`, the page with the question's answer marks and its question regions
    (`regions`: question -> context marks; without them the SFT builder derives one from the answers); L1
    `{page}_q{question}`, the crop around them with the answers moved onto it. Questions in `skip` get no record,
    and the others' L2 numbers do not shift. The converters and the review import make a page's levels here."""
    regions = regions or {}
    questions: dict[str, list[Mark]] = {}
    for mark in page.marks:
        if not mark.is_context:
            questions.setdefault(question_of_mark(mark.mark_id), []).append(mark)

    def top_left(item: tuple[str, list[Mark]]) -> tuple[float, float]:
        b = Box.enclosing([*(mk.box for mk in item[1]), *(r.box for r in regions.get(item[0], []))])
        return b.y1, b.x1

    l2, l1 = [], []
    for k, (qid, marks) in enumerate(sorted(questions.items(), key=top_left)):
        if qid in skip:
            continue
        context = regions.get(qid, [])
        l2.append(Record(f"{page.record_id}_{k}", L2, page.subject, page.image, page.width, page.height,
                         [*marks, *context]))
        l1.append(_crop(page, qid, marks, [r.box for r in context]))
    return l2, l1


def _crop(page: Record, qid: str, marks: list[Mark], regions: list[Box]) -> tuple[Record, Crop]:
    """The L1 record of one question and its crop on the page: around the question's regions and answers (margin
    as the synthetic generator's), with the answer marks moved onto it."""
    crop = l1_crop(Box.enclosing([*regions, *(mk.box for mk in marks)]), page.width, page.height)
    cx, cy = round(crop.x1), round(crop.y1)
    cw, ch = round(crop.x2) - cx, round(crop.y2) - cy
    name = f"{page.record_id}_q{safe_name(qid)}"
    record = Record(name, L1, page.subject, f"{safe_name(page.subject)}/{name}.jpg", cw, ch,
                    [mk.moved(cx, cy, 2) for mk in marks], page=page.page_id)
    return record, (cx, cy, cw, ch)


@dataclass
class PageOutput:
    page_id: str
    subject: str
    jpeg: bytes
    l3: Record
    l2: list[Record]
    l1: list[tuple[Record, bytes]]


def write_page(out: Path, page: PageOutput) -> None:
    """Write one page's images (L3 page, L2 alias, L1 crops) into a dataset folder: the synthetic generator and
    the converters write pages the same way."""
    l3_path = out / "images" / L3 / page.l3.image
    l3_path.parent.mkdir(parents=True, exist_ok=True)
    l3_path.write_bytes(page.jpeg)
    l2_path = out / "images" / L2 / page.l3.image
    l2_path.parent.mkdir(parents=True, exist_ok=True)
    l2_path.unlink(missing_ok=True)
    try:  # the L2 page is the L3 page: link rather than store it twice
        os.link(l3_path, l2_path)
    except OSError:
        shutil.copyfile(l3_path, l2_path)
    for rec, data in page.l1:
        p = out / "images" / L1 / rec.image
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

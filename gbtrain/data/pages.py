"""A page as a GradingBench folder stores it: its image under images/L3 (and the same file under images/L2), each
question's L1 crop under images/L1, and how much page an L1 crop takes around its question. The synthetic
generator, the converters and the review import all write pages through here."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from gbtrain.schema import Box, Record
from gbtrain.vocabulary import L1, L2, L3

L1_MARGIN = 0.04  # crop margin around a question, as a fraction of the page width


def l1_crop(region: Box, width: int, height: int) -> Box:
    """The L1 crop of a question region on a `width` x `height` page: the region and L1_MARGIN of the page width
    around it, inside the page."""
    return region.expand(L1_MARGIN * width, width, height)


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

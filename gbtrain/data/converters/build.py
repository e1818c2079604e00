"""From exported pages to GradingBench records: the mapping applied, every region checked, L2/L1 derived.

Nothing is dropped silently: a region or page that cannot be mapped becomes an `Unmapped` entry naming the export
file and the item (unknown label, unsupported shape, no verdict / id / transcription, an answer outside its
question's region, a missing or unreadable image, ...). The caller decides: strict stops on the first, lenient
leaves them out and lists them. A page that loses a region that is (or may be) an answer would teach that region
as blank: it is a `PartialPage`, left out of L3 with the L2/L1 records of the questions it touches unless the
caller keeps it.

Levels, as the synthetic generator writes them (gbtrain.data.synth.generate): L3 is the page with every answer mark;
L2 is one record per question, `{page}_{k}` in reading order, with the question's answer marks and its question
regions as context marks (without regions the SFT builder derives one from the answers); L1 is one crop per
question, `{page}_q{question}`, around its regions and answers with the generator's margin.
"""

from __future__ import annotations

import dataclasses
import io
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageOps

from gbtrain.data.annotations import (
    BOX_TOLERANCE_FRACTION,
    POINT_NUMBERS,
    POINT_TEXTS,
    blank_answer_problem,
    points_problem,
)
from gbtrain.data.converters.mapping import LABEL_FIELD, ConvertMapping
from gbtrain.data.converters.sources import SourceItem, SourcePage, image_names
from gbtrain.data.pages import question_of_mark, question_records
from gbtrain.files import IMAGE_SUFFIXES
from gbtrain.schema import (
    CONTENT_FORMAT_ALIASES,
    CONTEXT,
    QUESTION_TYPE_ALIASES,
    STAGE_ALIASES,
    SUBJECTS,
    UNNUMBERED,
    Box,
    Mark,
    Record,
)
from gbtrain.text import safe_name
from gbtrain.values import label_of, points_from_text
from gbtrain.vocabulary import L3

_ORIENTATION = 0x0112  # EXIF tag
_SWAPS_SIDES = {5, 6, 7, 8}  # EXIF orientations that turn the image by 90 degrees


@dataclass(frozen=True)
class Unmapped:
    """An exported item (or page) that is not converted, and why."""

    file: str
    item: str
    message: str

    def __str__(self) -> str:
        return f"{self.file} [{self.item}]: {self.message}"


class _Unmappable(ValueError):
    pass


@dataclass
class PageImage:
    """A page's image file (or embedded bytes) and how it is written: as it is, or re-encoded upright / without
    its EXIF orientation (the reader and the models take pixels as stored)."""

    source: Path | bytes
    format: str
    orientation: int
    upright: bool  # the export's coordinates are in the EXIF-turned frame

    @property
    def suffix(self) -> str:
        return ".jpg" if self.format in ("JPEG", "MPO") else ".png"

    def load(self) -> Image.Image:
        im = Image.open(self.source if isinstance(self.source, Path) else io.BytesIO(self.source))
        im.load()
        return ImageOps.exif_transpose(im) if self.upright else im

    def page_bytes(self, image: Image.Image) -> bytes:
        """The file as written: its own bytes when nothing changes, else `image` re-encoded (JPEG q95 or PNG)."""
        if self.orientation == 1 and self.format in ("JPEG", "MPO", "PNG"):
            return self.source.read_bytes() if isinstance(self.source, Path) else self.source
        jpeg = self.suffix == ".jpg"
        kept = ("L", "RGB") if jpeg else ("1", "L", "LA", "I", "P", "RGB", "RGBA")  # modes the format stores
        buf = io.BytesIO()
        (image if image.mode in kept else image.convert("RGB")).save(buf, format="JPEG" if jpeg else "PNG",
                                                                     **({"quality": 95} if jpeg else {}))
        return buf.getvalue()


@dataclass(frozen=True)
class PartialPage:
    """A page that lost answer regions (each listed as Unmapped), and the questions whose records would miss them."""

    file: str
    item: str
    page_id: str
    lost_answers: int
    questions: list[str]
    kept: bool  # written as it is (--keep-partial-pages); else out of L3, its questions out of L2/L1
    every: bool = False  # it lost every answer region: never kept (it would train as a page with no answers)

    def __str__(self) -> str:
        what = "kept as it is" if self.kept else "left out of L3" + (
            f", question(s) {', '.join(self.questions)} out of L2/L1" if self.questions else "") + (
            " (every answer region lost: never kept, even with --keep-partial-pages)" if self.every else "")
        return f"{self.file} [{self.item}] (page {self.page_id}): {self.lost_answers} answer region(s) lost: {what}"


@dataclass
class PagePlan:
    page_id: str
    image: PageImage
    l3: Record  # its image path is the page's file (the L2 records share it)
    l2: list[Record]
    l1: list[tuple[Record, tuple[int, int, int, int]]]  # crop record and its (x, y, width, height) on the page
    in_l3: bool = True  # False: a partial page, its L3 record left out


@dataclass
class Plan:
    pages_in: int = 0
    pages: list[PagePlan] = field(default_factory=list)
    unmapped: list[Unmapped] = field(default_factory=list)
    ignored: Counter = field(default_factory=Counter)  # label -> regions left out by ignore_labels
    unknown_values: Counter = field(default_factory=Counter)  # (field, value) -> regions, written as Other / None
    partial: list[PartialPage] = field(default_factory=list)
    cut_at_edge: int = 0  # regions that overshot the image within the reader's tolerance, cut at its edge
    notes: list[str] = field(default_factory=list)

    @property
    def l3_pages(self) -> list[PagePlan]:
        return [p for p in self.pages if p.in_l3]


class ImageFinder:
    """Finds an exported page's image: under the export's own folders and IMAGES by its path, else by its file
    name anywhere below IMAGES (one match only), else its embedded bytes. A file is taken only when it lies inside
    IMAGES or the export's own folder once every `..` and symbolic link is resolved: an export cannot make the
    converter read (and copy into the dataset) a file from anywhere else."""

    def __init__(self, root: Path):
        self.root = root
        self._index: dict[str, list[Path]] | None = None

    def _confined(self, path: Path, page: SourcePage) -> Path:
        real = path.resolve()
        allowed = [d.resolve() for d in (*page.image_dirs, self.root)]
        if not any(real.is_relative_to(folder) for folder in allowed):
            raise _Unmappable(f"image {page.image_ref!r} is {real}, outside the images folder "
                              f"{', '.join(map(str, dict.fromkeys(allowed)))}: copy the image there or set --images")
        return path

    def _by_name(self, name: str) -> list[Path]:
        if self._index is None:
            self._index = {}
            for p in sorted(self.root.rglob("*")) if self.root.is_dir() else []:
                if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file():
                    self._index.setdefault(p.name, []).append(p)
        return self._index.get(name, [])

    def find(self, page: SourcePage) -> Path | bytes:
        names = image_names(page.image_ref)
        for folder in (*page.image_dirs, self.root):
            for name in names:
                if (folder / name).is_file():
                    return self._confined(folder / name, page)
        for name in names[1:] or names:  # file names only (the first name is the path, when it has folders)
            found = self._by_name(name)
            if len(found) > 1 and page.subset:  # a CVAT project export: images/<subset>/<name>
                found = [p for p in found if page.subset in p.relative_to(self.root).parts[:-1]] or found
            if len(found) > 1:
                raise _Unmappable(f"image name {name!r} matches {len(found)} files under {self.root}: "
                                  f"{', '.join(str(p) for p in found[:3])}")
            if found:
                return self._confined(found[0], page)
        if page.image_data:
            return page.image_data
        raise _Unmappable(f"image file not found: {page.image_ref!r} (looked for {', '.join(names)} under "
                          f"{self.root}; set --images)")


def _probe(source: Path | bytes) -> tuple[str, tuple[int, int], int]:
    """(format, stored size, EXIF orientation) of an image that decodes whole; else unmappable."""
    name = source if isinstance(source, Path) else "the embedded imageData"
    try:
        with Image.open(source if isinstance(source, Path) else io.BytesIO(source)) as im:
            im.load()  # a truncated or corrupt file fails here, not half-way through writing
            return im.format, im.size, im.getexif().get(_ORIENTATION, 1)
    except (OSError, SyntaxError, Image.DecompressionBombError) as e:
        raise _Unmappable(f"cannot read image {name}: {e}") from None


def _open_image(page: SourcePage, finder: ImageFinder, notes: list[str]) -> tuple[PageImage, tuple[int, int]]:
    """The page's image and its size in the export's frame; a size the export contradicts is unmappable. A file
    that is no image gives way to the image the export embeds (labelme's tutorial file names itself as imagePath)."""
    source = finder.find(page)
    try:
        fmt, (w, h), orientation = _probe(source)
    except _Unmappable as e:
        if not (isinstance(source, Path) and page.image_data):
            raise
        notes.append(f"{page.file} [{page.where}]: {e}: used the embedded imageData")
        source = page.image_data
        fmt, (w, h), orientation = _probe(source)
    name = source if isinstance(source, Path) else "the embedded imageData"
    turned = (h, w) if orientation in _SWAPS_SIDES else (w, h)
    if page.size in (None, turned):
        return PageImage(source, fmt, orientation, upright=orientation != 1), turned
    if page.size == (w, h):  # annotated on the stored pixels, the EXIF turn not applied
        return PageImage(source, fmt, orientation, upright=False), (w, h)
    hint = f" (EXIF orientation {orientation})" if orientation != 1 else ""
    raise _Unmappable(f"image {name} is {w}x{h}{hint}, the export says {page.size[0]}x{page.size[1]}")


def _value(name: str | None, item: SourceItem, page: SourcePage | None = None) -> str | None:
    """A field's text on the region (then on the page, when given); None when absent or blank."""
    if name is None:
        return None
    value = item.label if name == LABEL_FIELD else item.attributes.get(name)
    if (value is None or not value.strip()) and page is not None:
        value = page.attributes.get(name)
    return value.strip() if value is not None and value.strip() else None


def _normalised(raw: str | None, aliases: dict[str, str], key: str, default, plan: Plan):
    if raw is None:
        return default
    value = aliases.get(raw)
    if value is None:
        plan.unknown_values[(key, raw)] += 1
        return default
    return value


def _check_box(points: list[tuple[float, float]], width: int, height: int) -> tuple[list[tuple[float, float]], bool]:
    """Points rounded to 0.01 px and cut at the image's edge, and whether any was cut. Tools keep a region dragged a
    little past the edge (Label Studio stores x + width = 101.6%); within the reader's tolerance it is cut at the
    edge, so that the records made from it (an L1 crop is cut at the page's edge too) read back. An empty box, one
    farther out, or one with nothing left inside the image is unmappable."""
    points = [(round(x, 2), round(y, 2)) for x, y in points]
    b = Box.enclosing(points)
    shown = [round(v, 1) for v in b.as_list()]
    if b.width <= 0 or b.height <= 0:
        raise _Unmappable(f"empty box {shown}")
    tol_x, tol_y = BOX_TOLERANCE_FRACTION * width, BOX_TOLERANCE_FRACTION * height
    if b.x1 < -tol_x or b.y1 < -tol_y or b.x2 > width + tol_x or b.y2 > height + tol_y:
        raise _Unmappable(f"box {shown} lies outside the {width}x{height} image")
    cut = [(min(max(x, 0), width), min(max(y, 0), height)) for x, y in points]
    inside = Box.enclosing(cut)
    if inside.width <= 0 or inside.height <= 0:
        raise _Unmappable(f"box {shown} lies past the edge of the {width}x{height} image")
    return cut, cut != points


def _verdict(raw: str | None, m: ConvertMapping) -> str:
    if raw is None:
        raise _Unmappable(f"no verdict (field {m.fields.verdict!r})")
    label = label_of(raw, m.verdicts)
    if label is None or label == CONTEXT:
        raise _Unmappable(f"verdict {raw!r} is not right / wrong / half_right / unanswered / unknown or an alias "
                          f"(add it under verdicts: in the mapping)")
    return label


def _answer(item: SourceItem, page: SourcePage, size: tuple[int, int], m: ConvertMapping, plan: Plan) -> Mark:
    """An answer region as a mark; raises _Unmappable naming what is missing."""
    points, cut = _check_box(item.points, *size)
    label = _verdict(_value(m.fields.verdict, item), m)
    mark_id = _value(m.fields.id, item) if m.fields.id else ""  # no id field: numbered by position (_numbered)
    if mark_id is None:
        raise _Unmappable(f"no question id (field {m.fields.id!r}; an export whose pages print no question numbers: "
                          f"set fields.id: null in the mapping to number the answers by position)")
    if m.unnamed_ids and re.fullmatch(m.unnamed_ids, mark_id):  # a placeholder never becomes a question id
        raise _Unmappable(f"no question id: {mark_id!r} is a placeholder (unnamed_ids {m.unnamed_ids!r}): give the "
                          f"answer the id of the question it answers")
    hand = _value(m.fields.hand, item)
    blank = blank_answer_problem(hand, label)
    if blank:
        raise _Unmappable(f"answer {mark_id}: no transcription (field {m.fields.hand!r}); {blank}")
    plan.cut_at_edge += cut
    return Mark(points=points, label=label, raw_label=label, mark_id=mark_id, hand=hand or "",
                **_points(item, mark_id, m),
                std=_value(m.fields.std, item),
                question_type=_normalised(_value(m.fields.question_type, item, page), QUESTION_TYPE_ALIASES,
                                          "question_type", "Other", plan),
                content_format=_normalised(_value(m.fields.content_format, item, page), CONTENT_FORMAT_ALIASES,
                                           "content_format", "Other", plan),
                stage=_stage(item, page, m, plan))


def _number(text: str, where: str) -> float:
    """A points value as the tool wrote it (tools store attributes as text): `7` stays an int, `7.5` a float."""
    try:
        return points_from_text(text)
    except ValueError as e:
        raise _Unmappable(f"{where} {text!r} is {e}") from None


def _points(item: SourceItem, mark_id: str, m: ConvertMapping) -> dict:
    """An answer's points fields (those the mapping names), checked as the reader checks them, so that a bad value
    is this item's problem before anything is written, not a failed read-back after."""
    got: dict = {key: _value(getattr(m.fields, key), item) for key in (*POINT_NUMBERS, *POINT_TEXTS)}
    for key in POINT_NUMBERS:
        if got[key] is not None:
            got[key] = _number(got[key], f"answer {mark_id}: {key} (field {getattr(m.fields, key)!r})")
    problem = points_problem(*(got[key] for key in POINT_NUMBERS))
    if problem:
        raise _Unmappable(f"answer {mark_id}: {problem} (fields.full_score, fields.score in the mapping)")
    return got


def _stage(item: SourceItem, page: SourcePage, m: ConvertMapping, plan: Plan) -> str | None:
    return _normalised(_value(m.fields.stage, item, page) or m.stage, STAGE_ALIASES, "stage", None, plan)


def _subject(page: SourcePage, m: ConvertMapping) -> str:
    raw = (page.attributes.get(m.fields.subject or "") or "").strip() or m.subject
    if not raw:
        raise _Unmappable("no subject: set subject: in the mapping, or fields.subject to the page attribute holding it")
    return next((s for s in SUBJECTS if s.lower() == raw.lower()), raw)


@dataclass
class _Region:
    item: SourceItem
    points: list[tuple[float, float]]
    qid: str | None
    stage: str | None

    @property
    def box(self) -> Box:
        return Box.enclosing(self.points)

    def holds(self, box: Box) -> bool:
        cx, cy = box.center
        b = self.box
        return b.x1 <= cx <= b.x2 and b.y1 <= cy <= b.y2


def _numbered(answers: list[tuple[SourceItem, Mark]], regions: list[_Region]) -> list[tuple[SourceItem, Mark]]:
    """Answers of an export without question ids (the mapping's fields.id is null), numbered by position
    (schema.UNNUMBERED): on a page with question regions, each answer takes its region's question (its id, else `#k`
    for the k-th region in reading order), `-j` added for the j-th of several answers in one region; without
    regions, each answer is a question of its own, `#k` in reading order. An answer in no region keeps no id and is
    listed as lying in none. A made name never equals a region's own id or another made name (a region `3` with two
    answers beside a region `3-2`: `3-1`, `3-2~2`), so two answers never merge into one question."""
    def reading(box: Box) -> tuple[float, float]:
        return box.y1, box.x1

    taken = {r.qid for r in regions if r.qid}

    def unique(name: str) -> str:
        made, n = name, 1
        while made in taken:
            n += 1
            made = f"{name}~{n}"
        taken.add(made)
        return made

    in_order = sorted(regions, key=lambda r: reading(r.box))
    for k, r in enumerate(in_order, start=1):
        r.qid = r.qid or unique(f"{UNNUMBERED}{k}")
    ordered = sorted(range(len(answers)), key=lambda i: reading(answers[i][1].box))
    if not regions:
        names = {i: f"{UNNUMBERED}{k}" for k, i in enumerate(ordered, start=1)}
    else:
        owner = {i: next((r.qid for r in in_order if r.holds(answers[i][1].box)), None) for i in ordered}
        names = {}
        for qid in dict.fromkeys(q for q in owner.values() if q is not None):
            mine = [i for i in ordered if owner[i] == qid]
            names |= {i: qid if len(mine) == 1 else unique(f"{qid}-{j}") for j, i in enumerate(mine, start=1)}
    return [(item, dataclasses.replace(mark, mark_id=names.get(i, f"{UNNUMBERED}?")))
            for i, (item, mark) in enumerate(answers)]


@dataclass
class _Lost:
    """A region that is (or may be) an answer, left out: its question by its id, where it lies."""

    question: str | None
    box: Box | None


class PagePlanner:
    """Plans one page after another, recording what cannot be mapped in the shared Plan."""

    def __init__(self, mapping: ConvertMapping, finder: ImageFinder, plan: Plan, keep_partial: bool = False):
        self.m, self.finder, self.plan, self.keep_partial = mapping, finder, plan, keep_partial
        self.page_ids: set[str] = set()

    def _unmapped(self, page: SourcePage, where: str, message: str) -> None:
        self.plan.unmapped.append(Unmapped(page.file, where, message))

    def add(self, page: SourcePage) -> None:
        self.plan.pages_in += 1
        self.plan.notes += page.notes
        try:
            if page.problems:
                raise _Unmappable("; ".join(page.problems))
            image, size = _open_image(page, self.finder, self.plan.notes)
            subject = _subject(page, self.m)
        except _Unmappable as e:
            self._unmapped(page, page.where, f"page left out: {e}")
            return
        lost: list[_Lost] = []
        answers, regions = self._regions(page, size, lost)
        if not self.m.fields.id:
            answers = _numbered(answers, regions)
        regions = self._named(page, answers, regions)
        answers = self._placed(page, answers, regions, lost)
        touched = self._touched(lost, answers, regions) if lost else set()
        # a page that lost every answer would be written as a page with none: never kept, whatever the flag says
        keep = self.keep_partial and bool(answers)
        plan = self._records(page, image, size, subject, answers, regions, set() if keep else touched)
        if lost:
            self.plan.partial.append(PartialPage(page.file, page.where, plan.page_id, len(lost), sorted(touched),
                                                 keep, every=not answers))
        plan.in_l3 = not lost or keep
        if plan.in_l3 or plan.l2:
            self.plan.pages.append(plan)

    def _touched(self, lost: list[_Lost], answers: list[Mark], regions: list[_Region]) -> set[str]:
        """The questions whose records would miss a lost answer: the one its id names and those whose regions hold
        it; every question of the page when neither can be told."""
        touched = set()
        for item in lost:
            found = {r.qid for r in regions if item.box is not None and r.holds(item.box)}
            found |= {item.question} - {None}
            if not found:
                return {question_of_mark(mk.mark_id) for mk in answers} | {r.qid for r in regions}
            touched |= found
        return touched

    def _regions(self, page: SourcePage, size: tuple[int, int],
                 lost: list[_Lost]) -> tuple[list[tuple[SourceItem, Mark]], list[_Region]]:
        answers, regions = [], []
        for item in page.items:
            try:
                kind = self._kind(item)
                if kind == "ignore":
                    self.plan.ignored[item.label] += 1
                elif kind == "answer":
                    answers.append((item, _answer(item, page, size, self.m, self.plan)))
                else:
                    points, cut = _check_box(item.points, *size)
                    qid = _value(self.m.fields.question_id, item)
                    if qid and question_of_mark(qid) != qid:
                        raise _Unmappable(f"question region id {qid!r} names a sub-question (an id is split at its "
                                          f"first '-': question-sub): give the region its question's id "
                                          f"{question_of_mark(qid)!r}")
                    regions.append(_Region(item, points, qid, _stage(item, page, self.m, self.plan)))
                    self.plan.cut_at_edge += cut
            except _Unmappable as e:
                self._unmapped(page, item.where, str(e))
                if item.label not in self.m.question_labels:  # an answer, or a label the mapping does not name
                    mark_id = _value(self.m.fields.id, item)
                    lost.append(_Lost(question_of_mark(mark_id) if mark_id else None,
                                      Box.enclosing(item.points) if item.points else None))
        return answers, regions

    def _kind(self, item: SourceItem) -> str:
        m = self.m
        kind = ("answer" if item.label in m.answer_labels else "question" if item.label in m.question_labels
                else "ignore" if item.label in m.ignore_labels else None)
        if kind is None:  # a region the reader found no label for says why (a COCO category_id not in categories)
            raise _Unmappable(f"unknown label {item.label!r} (not in answer_labels, question_labels or "
                              f"ignore_labels of the mapping)" if item.label else item.problem or
                              "a region without a label")
        if kind != "ignore" and item.points is None:
            raise _Unmappable(item.problem or "no shape")
        return kind

    def _named(self, page: SourcePage, answers: list[tuple[SourceItem, Mark]],
               regions: list[_Region]) -> list[_Region]:
        """The question regions with a question id: their own, else the one the answers inside them share."""
        named = []
        for r in regions:
            inside = sorted({question_of_mark(mk.mark_id) for _, mk in answers if r.holds(mk.box)})
            if r.qid is None and len(inside) == 1:
                r.qid = inside[0]
            if r.qid is not None:
                named.append(r)
                continue
            self._unmapped(page, r.item.where, f"question region without a question id (field "
                           f"{self.m.fields.question_id!r}) and " + (
                               f"with answers of questions {', '.join(inside)}" if inside else "without answers"))
        return named

    def _placed(self, page: SourcePage, answers: list[tuple[SourceItem, Mark]], regions: list[_Region],
                lost: list[_Lost]) -> list[Mark]:
        """The answers that lie in a region of their own question (every answer, on a page without regions)."""
        if not regions:
            return [mk for _, mk in answers]
        kept = []
        for item, mark in answers:
            if any(r.qid == question_of_mark(mark.mark_id) and r.holds(mark.box) for r in regions):
                kept.append(mark)
                continue
            others = sorted({r.qid for r in regions if r.holds(mark.box)})
            own = question_of_mark(mark.mark_id)
            self._unmapped(page, item.where, f"answer {mark.mark_id} lies in " + (
                f"the region of question {', '.join(others)}, not of question {own}" if others
                else "no question region"))
            lost.append(_Lost(question_of_mark(mark.mark_id), mark.box))
        return kept

    def _page_id(self, page: SourcePage) -> str:
        """The page's id: its image's file name made safe (gbtrain.text.safe_name: any script's letters and digits
        stay), numbered when another page has it."""
        stem = (image_names(page.image_ref) or ["page"])[-1].rsplit(".", 1)[0] or "page"
        page_id, n = safe_name(stem), 1
        while page_id in self.page_ids:
            n += 1
            page_id = f"{safe_name(stem)}-{n}"
        if n > 1:
            self.plan.notes.append(f"{page.file} [{page.where}]: page id {safe_name(stem)} taken, written as {page_id}")
        self.page_ids.add(page_id)
        return page_id

    def _records(self, page: SourcePage, image: PageImage, size: tuple[int, int], subject: str, answers: list[Mark],
                 regions: list[_Region], dropped: set[str]) -> PagePlan:
        """The page's records; the questions in `dropped` (those a lost answer touches) get no L2/L1 record."""
        page_id = self._page_id(page)
        w, h = size
        rel = f"{safe_name(subject)}/{page_id}{image.suffix}"
        l3 = Record(page_id, L3, subject, rel, w, h, answers)
        asked = {question_of_mark(mark.mark_id) for mark in answers}
        context: dict[str, list[Mark]] = {}
        for r in regions:
            if r.qid in asked:
                context.setdefault(r.qid, []).append(Mark(points=r.points, label=CONTEXT, raw_label=CONTEXT,
                                                          mark_id=r.qid, question_id=r.qid, stage=r.stage))
            else:
                self.plan.notes.append(f"{page.file} [{r.item.where}]: question {r.qid} has no answer marks: not in "
                                       f"L2/L1")
        l2, l1 = question_records(l3, context, dropped)  # a dropped question's L2 number is not given to another
        return PagePlan(page_id, image, l3, l2, l1)



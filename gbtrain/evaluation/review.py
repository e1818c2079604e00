"""The review loop: teachers check the model's grades in the tool they already use, and what they change comes back
as a re-grade rate and as training data.

`export_review` writes into OUT/review/ of a grade_pages folder OUT:

    review.csv               one row per item: the model's grade, and empty columns for the teacher
    labelstudio_tasks.json   one Label Studio task per page, the model's items as predictions to correct
    labelstudio_config.xml   the labeling config of the Label Studio project those tasks go into
    images/<page>.png|.jpg   the pages as they were graded (upright; a PDF page rendered), which the tasks show

`import_review` reads the reviewed review.csv, or Label Studio's JSON export of those tasks, and writes into DIR:

    review_report.json, .md  the re-grade rate (reviewed-and-changed / reviewed items), what changed, the size of
                             the point changes, the stated reasons, per question type, and what was not reviewed
    images/, annotations/L3.json, manifest/
                             the reviewed pages as the teachers left them: a GradingBench folder (as the synthetic
                             generator and the converters write it) that data_builders/build_sft.py builds from

Every page carries a review id (a hash of its name and of the model's items): a sheet or export of another graded
folder, or of a page graded again since, is refused instead of being compared with items it was not made from.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote
from xml.sax.saxutils import quoteattr

from PIL import Image

from gbtrain.config import option, overlapping
from gbtrain.data.annotations import load_level, points_from_text, points_problem, write_level, write_manifest
from gbtrain.data.converters.labelstudio import read_task, submitted
from gbtrain.data.converters.sources import rectangle
from gbtrain.data.synth.generate import PageOutput, write_page
from gbtrain.evaluation.grading import (
    IMAGE_SUFFIXES,
    RESULTS,
    Page,
    load_page,
    read_page_file,
    table_value,
)
from gbtrain.evaluation.run import RUN_RECORD, claim_output_folder
from gbtrain.files import read_json, write_atomic
from gbtrain.schema import (
    CONTEXT,
    LABEL_ALIASES,
    LABELS,
    QUESTION_TYPE_ALIASES,
    QUESTION_TYPES,
    RIGHT,
    UNKNOWN,
    WRONG,
    Box,
    Mark,
    Record,
)
from gbtrain.text import csv_cell, markdown_text, safe_name
from gbtrain.vocabulary import L3

ACTIONS = ("export", "import")
REVIEW = "review"  # OUT/review of the graded folder
SHEET, TASKS, CONFIG, IMAGES = "review.csv", "labelstudio_tasks.json", "labelstudio_config.xml", "images"
EXPORT_RECORD = "review_run.json"  # in OUT/review: what made its images (claim_output_folder)
IMPORT_RECORD = "review_run.json"  # in the import's folder
REPORT = "review_report"  # .json and .md in the import's folder
WRITTEN = ("images", "annotations", "manifest")  # what an import replaces in its folder
# Label Studio serves files under LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT as /data/local-files/?d=<path under it>
# (https://labelstud.io/guide/storage.html#Local-storage): with the graded folder as that root, this names the images
DEFAULT_IMAGE_URL = f"/data/local-files/?d={REVIEW}/{IMAGES}/"
VERDICTS = tuple(label for label in LABELS if label != CONTEXT)  # right, wrong, half_right, unanswered, unknown
REGION_PREFIX = "item-"  # a prediction's region id: item-<n>, n the item's number on its page (as in grades.csv)
CHANGES = ("verdict", "points", "box", "transcription", "added", "deleted")
YES, NO = ("yes", "y", "true", "1", "x"), ("no", "n", "false", "0")
NO_TYPE = "(not given)"


@dataclass
class ReviewRun:
    """Everything one `eval/review.py` call needs; each field is one of its flags (gbtrain.cli)."""

    action: str = option(help="export: write GRADED/review (sheet, Label Studio tasks and config, page images); "
                              "import: read --reviewed, write --out",
                         choices=ACTIONS, positional=True)
    graded: str = option(help="a grade_pages output folder (its --out)")
    reviewed: str | None = option(None, "import: the reviewed review.csv, or Label Studio's JSON export of the tasks")
    out: str | None = option(None, "import: the folder written (the report, and the reviewed pages as a "
                                   "GradingBench folder)")
    image_url: str = option(DEFAULT_IMAGE_URL, "export: the tasks name each page image as this + its file name "
                                               "(default: Label Studio's local files, with the graded folder as "
                                               "LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT)")
    box_iou: float = option(0.5, "import: a teacher's box matches the model's (and has not moved) at this IoU or "
                                 "more")
    subject: str = option("Other", "import: the subject written into the reviewed pages' annotations")


# --------------------------------------------------------------------------------- the graded folder
@dataclass
class GradedPage:
    """A graded page as the review sees it: its page file, its review id and its image's file name in review/."""

    record: dict
    review_id: str
    image: str

    @property
    def name(self) -> str:
        return self.record["page"]

    @property
    def shown(self) -> list[dict]:
        """The items a Label Studio task shows: those with a box of some area."""
        return [it for it in self.record["items"] if _area(it["box"])]


def _area(box: list[float] | None) -> bool:
    return box is not None and Box(*box).area > 0


def review_id(record: dict) -> str:
    """What ties a review to the grades it was made from: the page's name and the model's items."""
    content = json.dumps([record["page"], record["items"]], sort_keys=True, ensure_ascii=False)
    return "r" + hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()[:16]  # "r": text in a sheet


def read_graded(graded: Path) -> tuple[dict, list[GradedPage]]:
    """The grade_pages record of the folder and its graded pages in page order (pages graded with an error, which
    hold no items, are not reviewed)."""
    if not graded.is_dir():
        raise FileNotFoundError(f"graded folder not found: {graded}")
    try:
        run = read_json(graded / RUN_RECORD)
    except (OSError, ValueError):
        run = None
    if not isinstance(run, dict) or run.get("tool") != "grade_pages":
        raise ValueError(f"--graded {graded}: not a grade_pages folder (no readable {RUN_RECORD} of grade_pages): "
                         f"pass the --out of eval/grade_pages.py")
    records = sorted((read_page_file(p) for p in (graded / RESULTS).glob("*.json")), key=lambda r: r["page"])
    pages = []
    for record in records:
        if record["status"] == "error":
            continue
        name = safe_name(record["page"])  # as the page file's name; an image keeps its suffix unless made safe
        pages.append(GradedPage(record, review_id(record), name if name.lower().endswith(IMAGE_SUFFIXES) else
                                name + ".png"))
    if not pages:
        raise ValueError(f"--graded {graded}: no graded page to review (run eval/grade_pages.py first)")
    return run, pages


def _page_image(run: dict, page: GradedPage) -> bytes:
    """The page as it was graded: an image file's own bytes when nothing turned it, else the upright image (a photo
    turned by its EXIF orientation, a PDF page rendered at the run's --pdf-dpi) encoded as its name says."""
    rec = page.record
    index = rec["pdf_page"] - 1 if rec.get("pdf_page") else None
    source = Page(Path(run["pages"]) / rec["source"], rec["source"], index)
    loaded = load_page(source, run["pdf_dpi"])
    if (loaded.width, loaded.height) != (rec["width"], rec["height"]):
        raise ValueError(f"page {page.name}: it is {loaded.width}x{loaded.height} now, {rec['width']}x{rec['height']} "
                         f"when graded: grade it again (eval/grade_pages.py --overwrite), then export")
    kind = "PNG" if page.image.lower().endswith(".png") else "JPEG"
    if source.index is None:
        with Image.open(source.source) as im:
            if im.format == kind and im.getexif().get(0x0112, 1) == 1:
                return source.source.read_bytes()
    buf = io.BytesIO()
    loaded.image.save(buf, format=kind, **({"quality": 95} if kind == "JPEG" else {}))
    return buf.getvalue()


# --------------------------------------------------------------------------------- export
SHEET_COLUMNS = ("page", "item", "question_id", "question_type", "x1", "y1", "x2", "y2", "text", "answer",
                 "model_correctness", "model_score", "full_score", "reviewed", "correctness", "score", "reason",
                 "review_id")
TEACHER_COLUMNS = ("reviewed", "correctness", "score", "reason")


def model_verdict(item: dict) -> str:
    """The model's judgment as a verdict label: right, wrong, or unknown when it gave none."""
    return {True: RIGHT, False: WRONG}.get(item["correctness"], UNKNOWN)


def model_points(item: dict) -> float | None:
    """The model's score where it is a grade: for a question with a full score, and not flagged (grading's
    item_score); a review compares the teacher's points with these."""
    return item.get("score") if item.get("full_score") is not None and not item.get("score_problem") else None


def sheet_rows(pages: list[GradedPage]) -> list[dict]:
    rows = []
    for page in pages:
        for it in page.record["items"]:
            box = it["box"] or [None] * 4
            rows.append({"page": page.name, "item": it["index"] + 1, "question_id": it["question_id"],
                         "question_type": it.get("question_type"), **dict(zip(("x1", "y1", "x2", "y2"), box,
                                                                                strict=True)),
                         "text": it["text"], "answer": it["answer"],
                         "model_correctness": "" if it["correctness"] is None else model_verdict(it),
                         "model_score": it.get("score"), "full_score": it.get("full_score"),
                         "review_id": page.review_id})
    return rows


def labeling_config() -> str:
    """The Label Studio labeling config of a review project: the verdict as the box's label, the transcription,
    question id and reference as text, the points as numbers, the question type, and the teacher's reason. Read by
    gbtrain.data.converters with configs/convert/review.yaml, its export is also an ordinary conversion source."""
    labels = "\n".join(f"    <Label value={quoteattr(v)} background={quoteattr(c)}/>" for v, c in zip(
        VERDICTS, ("#2a9d8f", "#e63946", "#f4a261", "#8d99ae", "#6c757d"), strict=True))
    types = "\n".join(f"    <Choice value={quoteattr(t)}/>" for t in QUESTION_TYPES)
    region = 'toName="image" perRegion="true"'
    return f"""<View>
  <Header value="$page"/>
  <Image name="image" value="$image" zoom="true"/>
  <RectangleLabels name="verdict" toName="image">
{labels}
  </RectangleLabels>
  <TextArea name="qid" {region} editable="true" maxSubmissions="1" placeholder="question id"/>
  <TextArea name="hand" {region} editable="true" maxSubmissions="1" placeholder="transcription"/>
  <TextArea name="std" {region} editable="true" maxSubmissions="1" placeholder="reference answer"/>
  <Number name="score" {region} min="0" step="0.5"/>
  <Number name="full_score" {region} min="0" step="0.5"/>
  <Choices name="type" {region}>
{types}
  </Choices>
  <TextArea name="reason" {region} editable="true" maxSubmissions="1" placeholder="why you changed it"/>
</View>
"""


def _results(page: GradedPage, item: dict) -> list[dict]:
    """One item as Label Studio's results of one region: its box as a rectangle in percent of the image size with
    the verdict as its label, then each per-region control's value under the same region id (the shape of
    pre-annotations in https://labelstud.io/guide/predictions.html; a TextArea's value is `text`, a Number's
    `number`, a Choices' `choices`)."""
    w, h = page.record["width"], page.record["height"]
    x1, y1, x2, y2 = item["box"]
    geometry = {"x": 100 * x1 / w, "y": 100 * y1 / h, "width": 100 * (x2 - x1) / w, "height": 100 * (y2 - y1) / h,
                "rotation": 0}
    common = {"id": f"{REGION_PREFIX}{item['index'] + 1}", "to_name": "image", "original_width": w,
              "original_height": h, "image_rotation": 0}
    controls = [("qid", "textarea", item["question_id"] or f"item{item['index'] + 1}"),
                ("hand", "textarea", item["text"] or None), ("std", "textarea", item.get("reference")),
                ("score", "number", model_points(item)),
                ("full_score", "number", item.get("full_score")), ("type", "choices", item.get("question_type"))]
    results = [{**common, "type": "rectanglelabels", "from_name": "verdict",
                "value": {**geometry, "rectanglelabels": [model_verdict(item)]}}]
    for name, kind, value in controls:
        if value is not None:  # Label Studio writes no result for a control left empty
            key = {"textarea": "text", "number": "number", "choices": "choices"}[kind]
            results.append({**common, "type": kind, "from_name": name,
                            "value": {**geometry, key: value if kind == "number" else [value]}})
    return results


def export_review(run: ReviewRun) -> dict:
    """Write OUT/review/ of the graded folder (the module's docstring); returns counts for the command's line."""
    graded = Path(run.graded)
    record, pages = read_graded(graded)
    folder = graded / REVIEW
    claim_output_folder(folder, {"tool": "review_export", "graded": str(graded.resolve())}, overwrite=True,
                        work=(IMAGES,), record=EXPORT_RECORD, discard=True)
    for page in pages:
        path = folder / IMAGES / page.image
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_page_image(record, page))
    rows = sheet_rows(pages)
    buf = io.StringIO()
    w = csv.DictWriter(buf, SHEET_COLUMNS)
    w.writeheader()
    w.writerows({k: csv_cell(table_value(row.get(k))) for k in SHEET_COLUMNS} for row in rows)
    write_atomic(folder / SHEET, buf.getvalue())
    model = Path(record["model"]).name or record["model"]
    tasks = [{"data": {"image": run.image_url + quote(page.image), "page": page.name, "review_id": page.review_id},
              "predictions": [{"model_version": model, "result": [r for it in page.shown for r in _results(page, it)]}]}
             for page in pages]
    write_atomic(folder / TASKS, json.dumps(tasks, ensure_ascii=False, indent=1) + "\n")
    write_atomic(folder / CONFIG, labeling_config())
    return {"folder": str(folder), "pages": len(pages), "items": len(rows),
            "not_shown": sum(len(p.record["items"]) - len(p.shown) for p in pages)}


# --------------------------------------------------------------------------------- what the teacher left
@dataclass
class Graded:
    """An item as the teacher left it."""

    box: list[float] | None
    verdict: str
    score: float | None
    full_score: float | None
    text: str
    question_id: str | None
    question_type: str | None
    reference: str | None = None


@dataclass
class Reviewed:
    """One reviewed item: the model's (None: a region the teacher added) and the teacher's (None: one deleted)."""

    page: str
    model: dict | None
    teacher: Graded | None
    reason: str | None = None
    changes: list[str] = field(default_factory=list)

    @property
    def question_type(self) -> str:
        given = (self.teacher.question_type if self.teacher else None) or (self.model or {}).get("question_type")
        return given or NO_TYPE


@dataclass
class Review:
    """What an import read: the reviewed items, the items nobody reviewed, and the pages reviewed whole."""

    source: str  # "csv" or "labelstudio"
    items: list[Reviewed] = field(default_factory=list)
    unreviewed: int = 0
    not_shown: int = 0  # items without a box: a Label Studio task cannot show them
    pages: dict[str, GradedPage] = field(default_factory=dict)  # reviewed whole: written as annotations
    unreviewed_pages: int = 0


def _number(text: str | None, where: str, what: str) -> float | None:
    """A number of points as a teacher writes it (`2.5`, `2,5`); None when empty."""
    if text is None or not text.strip():
        return None
    cleaned = text.strip()
    if cleaned.count(",") == 1 and "." not in cleaned:
        cleaned = cleaned.replace(",", ".")
    try:
        value = float(points_from_text(cleaned))
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"{where}: {what} {text.strip()!r:.40} is not a number of points: write a number, or leave "
                         f"it empty")
    return int(value) if value.is_integer() else value


def _verdict(text: str, where: str) -> str:
    value = text.strip()
    label = {"true": RIGHT, "false": WRONG}.get(value.lower()) or LABEL_ALIASES.get(value) or \
        LABEL_ALIASES.get(value.lower())
    if label not in VERDICTS:
        raise ValueError(f"{where}: correctness {value!r:.40} is not a verdict: write one of {', '.join(VERDICTS)} "
                         f"(or true / false), or leave it empty")
    return label


def _question_type(text: str | None, where: str) -> str | None:
    if text is None or not text.strip():
        return None
    value = QUESTION_TYPE_ALIASES.get(text.strip())
    if value is None:
        raise ValueError(f"{where}: question type {text.strip()!r:.40} is not one of {', '.join(QUESTION_TYPES)}")
    return value


def _by_id(pages: list[GradedPage], graded: Path, where: str, given: str | None) -> GradedPage:
    found = next((p for p in pages if p.review_id == given), None)
    if found is None:
        raise ValueError(f"{where}: review id {given!r:.40} names no page of {graded} (made from another graded "
                         f"folder, or the page was graded again since): import what eval/review.py export wrote "
                         f"from this folder, or export again")
    return found


def _sheet_dialect(text: str, path: Path) -> str:
    head = text.split("\n", 1)[0]
    for delimiter in (",", ";", "\t"):  # a spreadsheet saved in a locale whose list separator is not a comma
        if all(c in next(csv.reader([head], delimiter=delimiter)) for c in ("item", "review_id", *TEACHER_COLUMNS)):
            return delimiter
    raise ValueError(f"--reviewed {path}: not a review sheet (its header lacks item, review_id, "
                     f"{', '.join(TEACHER_COLUMNS)}): pass the review.csv that eval/review.py export wrote, or a "
                     f"Label Studio JSON export")


def read_sheet(path: Path, pages: list[GradedPage], graded: Path) -> Review:
    """The reviewed sheet: a row is reviewed when its `reviewed` column says yes or a teacher's column is filled; an
    empty correctness or score keeps the model's. A page is reviewed whole when each of its items is."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"--reviewed {path}: not UTF-8 text: save the sheet as CSV UTF-8") from None
    rows = list(csv.DictReader(io.StringIO(text), delimiter=_sheet_dialect(text, path)))
    review = Review("csv")
    seen: dict[tuple[str, int], int] = {}
    done: Counter = Counter()
    for n, row in enumerate(rows, start=2):  # the header is line 1
        where = f"{path} line {n}"
        page = _by_id(pages, graded, where, row.get("review_id"))
        items = page.record["items"]
        number = (row.get("item") or "").strip()
        item = items[int(number) - 1] if number.isdigit() and 1 <= int(number) <= len(items) else None
        if item is None:
            raise ValueError(f"{where}: item {row.get('item')!r:.20} is not an item of page {page.name} (1-"
                             f"{len(items)}): keep the sheet's page, item and review_id columns as exported")
        where = f"{where} (page {page.name}, item {item['index'] + 1})"
        key = (page.review_id, item["index"])
        if key in seen:
            raise ValueError(f"{where}: the item is on line {seen[key]} too: keep one row per item")
        seen[key] = n
        said = (row.get("reviewed") or "").strip().lower()
        if said and said not in YES + NO:
            raise ValueError(f"{where}: reviewed {said!r:.20} is neither yes nor no: write yes, or leave it empty")
        filled = any((row.get(c) or "").strip() for c in ("correctness", "score", "reason"))
        if said in NO or not (said in YES or filled):
            review.unreviewed += 1
            continue
        done[page.review_id] += 1
        full = _number(row.get("full_score"), where, "full_score")
        score = _number(row.get("score"), where, "score")
        verdict = _verdict(row["correctness"], where) if (row.get("correctness") or "").strip() else \
            model_verdict(item)
        teacher = Graded(item["box"], verdict, model_points(item) if score is None else score, full, item["text"],
                         item["question_id"], _question_type(row.get("question_type"), where) or
                         item.get("question_type"), item.get("reference"))
        problem = points_problem(full, teacher.score, None) if teacher.score is not None else None
        if problem:
            raise ValueError(f"{where}: {problem} (the full_score column)")
        review.items.append(Reviewed(page.name, item, teacher, (row.get("reason") or "").strip() or None))
    review.unreviewed += sum(len(p.record["items"]) for p in pages) - len(seen)
    review.pages = {p.name: p for p in pages if p.record["items"] and done[p.review_id] == len(p.record["items"])}
    review.unreviewed_pages = sum(done[p.review_id] < len(p.record["items"]) for p in pages)
    return review


def read_labelstudio(path: Path, pages: list[GradedPage], graded: Path, box_iou: float) -> Review:
    """The Label Studio JSON export of the review tasks. A task without a submitted annotation (none, or all
    cancelled) is unreviewed; in a reviewed one each region is matched to the model's item by its region id (the
    prediction's region, kept), else by the best box IoU of at least box_iou; a region left over was added, an item
    left over was deleted."""
    try:
        doc = read_json(path)
    except ValueError as e:
        raise ValueError(f"--reviewed {path}: not a JSON file ({str(e)[:200]})") from None
    tasks = [doc] if isinstance(doc, dict) and "data" in doc else doc
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise ValueError(f"--reviewed {path}: not a Label Studio JSON export (a list of tasks): export the project "
                         f"with Label Studio's \"JSON\" format")
    review = Review("labelstudio")
    seen: dict[str, str] = {}
    for i, task in enumerate(tasks):
        where = f"{path} task {task.get('id', f'#{i}')}"
        data = task.get("data") if isinstance(task.get("data"), dict) else {}
        page = _by_id(pages, graded, where, data.get("review_id"))
        if page.review_id in seen:
            raise ValueError(f"{where}: page {page.name} is task {seen[page.review_id]} too: export one project, "
                             f"with each page imported once")
        seen[page.review_id] = str(task.get("id", f"#{i}"))
        review.not_shown += len(page.record["items"]) - len(page.shown)
        if not submitted(task):
            review.unreviewed += len(page.shown)
            continue
        review.items += _matched(page, _regions(path, task, i, page), box_iou)
        review.pages[page.name] = page
    review.unreviewed += sum(len(p.shown) for p in pages if p.review_id not in seen)
    review.not_shown += sum(len(p.record["items"]) - len(p.shown) for p in pages if p.review_id not in seen)
    review.unreviewed_pages = len(pages) - len(review.pages)
    return review


def _regions(path: Path, task: dict, index: int, page: GradedPage) -> list[tuple[str | None, Graded, str | None]]:
    """The regions of a task's submitted annotation as (region id, the teacher's item, reason)."""
    source = read_task(path, task, index, "image")
    regions = []
    for item in source.items:
        where = f"{path} {item.where}"
        if item.points is None:
            raise ValueError(f"{where}: {item.problem}: fix it in Label Studio and export again")
        verdict = LABEL_ALIASES.get(item.label)
        if verdict not in VERDICTS:
            raise ValueError(f"{where}: label {item.label!r:.40} is not a verdict ({', '.join(VERDICTS)}): set up the "
                             f"project with {REVIEW}/{CONFIG}")
        w, h = page.record["width"], page.record["height"]
        box = Box.enclosing(item.points).clip(w, h)
        a = item.attributes
        full, score = _number(a.get("full_score"), where, "full_score"), _number(a.get("score"), where, "score")
        problem = points_problem(full, score, None) if score is not None else None  # no score: right / wrong only
        if problem:
            raise ValueError(f"{where}: {problem}: set it in Label Studio and export again")
        text = a.get("hand", "")
        graded = Graded([round(v, 1) for v in box.as_list()] if box.area > 0 else None, verdict, score, full, text,
                        (a.get("qid") or "").strip() or None, _question_type(a.get("type"), where),
                        (a.get("std") or "").strip() or None)
        regions.append((item.region_id, graded, (a.get("reason") or "").strip() or None))
    return regions


def _matched(page: GradedPage, regions: list[tuple[str | None, Graded, str | None]], box_iou: float) -> list[Reviewed]:
    items = {f"{REGION_PREFIX}{it['index'] + 1}": it for it in page.shown}
    pairs: list[Reviewed] = []
    left = []
    for rid, teacher, reason in regions:
        model = items.pop(rid, None) if rid is not None else None
        if model is not None:
            pairs.append(Reviewed(page.name, model, teacher, reason))
        else:
            left.append((teacher, reason))
    scored = sorted(((Box(*t.box).iou(Box(*m["box"])), k, rid) for k, (t, _) in enumerate(left) if t.box
                     for rid, m in items.items()), reverse=True)
    taken: set[int] = set()
    for iou, k, rid in scored:
        if iou >= box_iou and k not in taken and rid in items:
            taken.add(k)
            pairs.append(Reviewed(page.name, items.pop(rid), left[k][0], left[k][1]))
    pairs += [Reviewed(page.name, None, t, reason) for k, (t, reason) in enumerate(left) if k not in taken]
    pairs += [Reviewed(page.name, m, None) for m in items.values()]
    return pairs


# --------------------------------------------------------------------------------- what changed
def changes(r: Reviewed, box_iou: float) -> list[str]:
    """What the teacher changed of one item (CHANGES; none: the model's grade stands)."""
    if r.model is None:
        return ["added"]
    if r.teacher is None:
        return ["deleted"]
    m, t = r.model, r.teacher
    kinds = []
    if t.verdict != model_verdict(m):
        kinds.append("verdict")
    if t.score != model_points(m):
        kinds.append("points")
    if m["box"] is not None and (t.box is None or Box(*t.box).iou(Box(*m["box"])) < box_iou):
        kinds.append("box")
    if " ".join(t.text.split()) != " ".join(m["text"].split()):
        kinds.append("transcription")
    return kinds


def _rate(changed: int, reviewed: int) -> float | None:
    return round(changed / reviewed, 6) if reviewed else None


def report(review: Review, graded: Path, reviewed_file: Path, box_iou: float) -> dict:
    """The re-grade rate = reviewed items the teacher changed / reviewed items, overall and per question type (an
    item nobody reviewed counts in neither), what changed, the size of the point changes and the reasons given."""
    for r in review.items:
        r.changes = changes(r, box_iou)
    changed = [r for r in review.items if r.changes]
    sizes = [abs(r.teacher.score - model_points(r.model)) for r in changed if "points" in r.changes
             and r.teacher.score is not None and model_points(r.model) is not None]
    types: dict[str, list[Reviewed]] = {}
    for r in review.items:
        types.setdefault(r.question_type, []).append(r)
    return {
        "graded": str(graded), "reviewed_file": str(reviewed_file), "source": review.source, "box_iou": box_iou,
        "reviewed": len(review.items), "changed": len(changed), "regrade_rate": _rate(len(changed), len(review.items)),
        "unreviewed": review.unreviewed, "not_shown": review.not_shown,
        "pages": {"reviewed": len(review.pages), "unreviewed": review.unreviewed_pages},
        "changes": {kind: sum(kind in r.changes for r in changed) for kind in CHANGES},
        "points_changes": {"count": len(sizes), "mean_abs": round(statistics.fmean(sizes), 6) if sizes else None,
                           "max_abs": max(sizes) if sizes else None},
        "reasons": dict(Counter(r.reason for r in changed if r.reason).most_common()),
        "changed_without_reason": sum(not r.reason for r in changed),
        "by_question_type": {t: {"reviewed": len(rs), "changed": sum(bool(r.changes) for r in rs),
                                 "regrade_rate": _rate(sum(bool(r.changes) for r in rs), len(rs))}
                             for t, rs in sorted(types.items())},
        "changed_items": [{"page": r.page, "item": None if r.model is None else r.model["index"] + 1,
                           "question_id": (r.teacher.question_id if r.teacher else None) or (r.model or {}).get(
                               "question_id"),
                           "changes": r.changes, "model": _model_view(r.model), "teacher": _teacher_view(r.teacher),
                           "reason": r.reason} for r in changed],
    }


def _model_view(m: dict | None) -> dict | None:
    return None if m is None else {"verdict": model_verdict(m), "score": model_points(m), "box": m["box"],
                                   "text": m["text"]}


def _teacher_view(t: Graded | None) -> dict | None:
    return None if t is None else {"verdict": t.verdict, "score": t.score, "box": t.box, "text": t.text}


def report_markdown(rep: dict) -> str:
    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{100 * v:.1f}%"

    lines = ["# Review of the model's grades", "",
             f"Graded folder: `{markdown_text(rep['graded'])}`; review: `{markdown_text(rep['reviewed_file'])}` "
             f"({rep['source']}).", "",
             f"**Re-grade rate: {pct(rep['regrade_rate'])}** ({rep['changed']} of {rep['reviewed']} reviewed items "
             f"changed by the teacher; {rep['unreviewed']} items not reviewed and not counted"
             + (f"; {rep['not_shown']} items without a box not shown" if rep["not_shown"] else "") + ").", "",
             "| question type | reviewed | changed | re-grade rate |", "|---|---|---|---|"]
    lines += [f"| {markdown_text(t)} | {v['reviewed']} | {v['changed']} | {pct(v['regrade_rate'])} |"
              for t, v in rep["by_question_type"].items()]
    pc = rep["points_changes"]
    lines += ["", "| what changed | items |", "|---|---|"]
    lines += [f"| {kind} | {n} |" for kind, n in rep["changes"].items()]
    lines += ["", f"Point changes: {pc['count']}" + (f", mean absolute change {pc['mean_abs']:g}, largest "
                                                      f"{pc['max_abs']:g}" if pc["count"] else "") + ".", ""]
    if rep["reasons"]:
        lines += ["| reason given | items |", "|---|---|"]
        lines += [f"| {markdown_text(reason)} | {n} |" for reason, n in rep["reasons"].items()]
        lines.append("")
    lines.append(f"Changed without a reason: {rep['changed_without_reason']}. Pages reviewed: "
                 f"{rep['pages']['reviewed']}, not reviewed: {rep['pages']['unreviewed']}.")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------- the reviewed pages as data
def page_marks(items: list[Reviewed]) -> list[Mark]:
    """A reviewed page's answer marks: each item as the teacher left it (deleted ones and those without a box left
    out; in points where the teacher's score is given), its id the question id made unique on the page (a question
    given twice becomes `3`, `3-2`)."""
    marks, used, added = [], Counter(), 0
    for r in items:
        t = r.teacher
        if t is None or t.box is None:
            continue
        added += r.model is None
        base = t.question_id or (f"item{r.model['index'] + 1}" if r.model else f"added{added}")
        used[base] += 1
        mark_id = base if used[base] == 1 else f"{base}-{used[base]}"
        points = {"full_score": t.full_score, "score": t.score} if None not in (t.score, t.full_score) else {}
        marks.append(Mark(points=rectangle(*t.box), label=t.verdict, raw_label=t.verdict, mark_id=mark_id,
                          hand=t.text, std=t.reference, question_type=t.question_type or "Other",
                          rubric=(r.model or {}).get("rubric") if points else None, **points))
    return marks


def write_pages(review: Review, images: Path, out: Path, subject: str) -> dict[str, int]:
    """The pages reviewed whole as a GradingBench folder (L3), written as the generator writes pages and read back
    by the strict reader; returns the records and marks written."""
    by_page: dict[str, list[Reviewed]] = {}
    for r in review.items:
        by_page.setdefault(r.page, []).append(r)
    records = []
    for name, page in review.pages.items():
        marks = page_marks(by_page.get(name, []))
        record_id = safe_name(name)  # as the page file's name: unique in the graded folder
        record = Record(record_id, L3, subject, f"{safe_name(subject)}/{page.image}", page.record["width"],
                        page.record["height"], marks)
        write_page(out, PageOutput(record_id, subject, (images / page.image).read_bytes(), record, [], []))
        records.append(record)
    write_level(out, L3, records)
    write_manifest(out, {L3: records})
    loaded = load_level(out, L3)
    return {"records": len(loaded.records), "marks": sum(len(r.marks) for r in loaded.records)}


def check_import(run: ReviewRun) -> tuple[Path, Path, Path]:
    if not run.reviewed or not run.out:
        raise ValueError("import needs --reviewed (the reviewed review.csv or Label Studio's JSON export) and --out "
                         "(the folder to write)")
    if not (0 < run.box_iou <= 1):  # NaN too
        raise ValueError(f"--box-iou {run.box_iou}: choose a value in (0, 1]")
    if not run.subject.strip():
        raise ValueError("--subject: name the pages' subject (e.g. Mathematics)")
    graded, reviewed, out = Path(run.graded), Path(run.reviewed), Path(run.out)
    if not reviewed.is_file():
        raise FileNotFoundError(f"reviewed file not found: {reviewed}")
    problems = overlapping("--out", out, {"--graded": graded})
    if out.resolve() in reviewed.resolve().parents:  # an import replaces what --out holds
        problems.append(f"--reviewed {reviewed} lies inside --out {out}")
    if problems:
        raise ValueError(f"{problems[0]}: choose another --out")
    return graded, reviewed, out


def import_review(run: ReviewRun) -> dict:
    """Read the review, write the report and the reviewed pages into --out; returns the report."""
    graded, reviewed, out = check_import(run)
    _, pages = read_graded(graded)
    images = graded / REVIEW / IMAGES
    if reviewed.suffix.lower() in (".csv", ".tsv", ".txt"):
        review = read_sheet(reviewed, pages, graded)
    else:
        review = read_labelstudio(reviewed, pages, graded, run.box_iou)
    if not review.items and not review.pages:
        raise ValueError(f"--reviewed {reviewed}: nothing in it is reviewed: in the sheet, write yes under reviewed "
                         f"or fill a teacher's column; in Label Studio, submit the tasks, then export the project as "
                         f"JSON")
    missing = [p.image for p in review.pages.values() if not (images / p.image).is_file()]
    if missing:
        raise FileNotFoundError(f"{images / missing[0]}: the page image the review showed is gone: run eval/review.py "
                                f"export --graded {graded} again (it changes no review id)")
    rep = report(review, graded, reviewed, run.box_iou)
    claim_output_folder(out, {"tool": "review_import"}, overwrite=True, work=WRITTEN, record=IMPORT_RECORD,
                        discard=True)
    # (claimed with discard: an earlier import's pages are gone, not left to be taken for this one's)
    written = write_pages(review, images, out, run.subject.strip()) if review.pages else {"records": 0, "marks": 0}
    rep["written"] = {"folder": str(out), **written}
    write_atomic(out / f"{REPORT}.json", json.dumps(rep, ensure_ascii=False, indent=1) + "\n")
    write_atomic(out / f"{REPORT}.md", report_markdown(rep))
    return rep


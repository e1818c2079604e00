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

import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from gbtrain.config import option
from gbtrain.data.converters.labelstudio import TEACHER_RULES
from gbtrain.files import read_json
from gbtrain.grading.grades import RESULTS, read_page_file
from gbtrain.grading.pages import Page, load_page
from gbtrain.outputs import RUN_RECORD
from gbtrain.schema import (
    RIGHT,
    UNANSWERED,
    UNKNOWN,
    WRONG,
    Box,
)
from gbtrain.text import brief, safe_name

ACTIONS = ("export", "import")
REVIEW = "review"  # OUT/review of the graded folder
SHEET, TASKS, CONFIG, IMAGES = "review.csv", "labelstudio_tasks.json", "labelstudio_config.xml", "images"
REPORT = "review_report"  # .json and .md in the import's folder
WRITTEN = ("images", "annotations", "manifest")  # what an import replaces in its folder
# Label Studio serves files under LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT as /data/local-files/?d=<path under it>
# (https://labelstud.io/guide/storage.html#Local-storage): with the graded folder as that root, this names the images
DEFAULT_IMAGE_URL = f"/data/local-files/?d={REVIEW}/{IMAGES}/"
REGION_PREFIX = "item-"  # a prediction's region id: item-<n>, n the item's number on its page (as in grades.csv)
MISSING_PREFIX = "missing-"  # a keyed question found on no page of the document: missing-<k>, placed to be moved
MISSING = "missing"  # the sheet's model_correctness of such a question's row (its item number is empty)
CHANGES = ("verdict", "points", "box", "transcription", "question_id", "added", "deleted")
YES, NO = ("yes", "y", "true", "1", "x"), ("no", "n", "false", "0")
NO_TYPE = "(not given)"
# page images the review writes with their own suffix (and bytes, when upright); any other page (a PDF's, a .webp or
# .tif scan) is written as PNG, which Label Studio and a GradingBench folder show as they are
SHOWN_AS_IS = (".jpg", ".jpeg", ".png")


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
    teachers: str = option("ground-truth", "import, a Label Studio task two teachers annotated: whose grade counts: "
                                           "ground-truth (the annotation marked ground truth, else the first "
                                           "submitted), first, last, or agreement (the first's, and a page where "
                                           "they differ is not written as data); the other's points are score_2 and "
                                           "every difference is listed in the report", choices=TEACHER_RULES)


@dataclass
class GradedPage:
    """A graded page as the review sees it: its page file, its review id and its image's file name in review/."""

    record: dict
    review_id: str
    image: str
    missing: list[dict] = field(default_factory=list)  # keyed questions its document lacks, to look for here

    @property
    def name(self) -> str:
        return self.record["page"]

    @property
    def shown(self) -> list[dict]:
        """The items a Label Studio task shows: those with a box of some area."""
        return [it for it in self.record["items"] if _area(it["box"])]


def missing_item(page: GradedPage, k: int) -> dict:
    """The k-th (0-based) keyed question the page's document lacks, as the review compares a teacher's grade with it:
    the model's "item" of no box, no answer (unanswered) and, for a question graded in points, 0 points (what
    grade_pages counted)."""
    q = page.missing[k]
    return {"index": None, "missing": k + 1, "question_id": q["question_id"], "box": None, "text": "", "answer": "",
            "correctness": None, "score": 0 if q["full_score"] is not None else None, "score_problem": None,
            "full_score": q["full_score"], "reference": q["reference"], "question_type": q["question_type"]}


def placeholder_box(k: int) -> dict[str, float]:
    """Where a Label Studio task puts the k-th (0-based) missing question's region, in percent of the page: a small
    box in the top-left corner, one under the other, for the teacher to move onto the answer (or delete). The import
    knows one left there."""
    return {"x": 1.0, "y": 1.0 + 3.5 * (k % 25), "width": 12.0, "height": 3.0, "rotation": 0}


def _area(box: list[float] | None) -> bool:
    return box is not None and Box(*box).area > 0


def review_id(record: dict, missing: list[dict] | None = None) -> str:
    """What ties a review to the grades it was made from: the page's name, the model's items and the keyed
    questions it is asked to look for (none: the id it had before documents)."""
    content = json.dumps([record["page"], record["items"], *([missing] if missing else [])], sort_keys=True,
                         ensure_ascii=False)
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
    missing: dict[str, list[dict]] = {}
    for q in _summary(graded).get("missing_questions") or []:  # a folder graded before documents has none
        missing.setdefault(q["page"], []).append(q)
    pages = []
    for record in records:
        if record["status"] == "error":
            continue
        name = safe_name(record["page"])  # as the page file's name; an image keeps its suffix unless made safe
        pages.append(GradedPage(record, review_id(record, missing.get(record["page"], [])),
                                name if name.lower().endswith(SHOWN_AS_IS) else name + ".png",
                                missing.get(record["page"], [])))
    if not pages:
        raise ValueError(f"--graded {graded}: no graded page to review (run eval/grade_pages.py first)")
    return run, pages


def _summary(graded: Path) -> dict:
    try:
        summary = read_json(graded / "summary.json")
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def page_image(run: dict, page: GradedPage) -> bytes:
    """The page as it was graded: an image file's own bytes when nothing turned it, else the upright image (a photo
    turned by its EXIF orientation, a PDF page rendered at the run's --pdf-dpi) encoded as its name says."""
    rec = page.record
    index = rec["pdf_page"] - 1 if rec.get("pdf_page") else None
    root = Path(os.path.normpath(os.path.abspath(run["pages"])))
    path = Path(os.path.normpath(root / str(rec["source"])))  # `..` and an absolute source taken apart
    if root not in path.parents:
        raise ValueError(f"page {page.name}: its source {brief(str(rec['source']))} is no file under the pages folder "
                         f"{run['pages']} (the page file was edited): grade the page again (eval/grade_pages.py "
                         f"--overwrite), then export")
    source = Page(path, rec["source"], index)
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


def shown_question_id(item: dict) -> str:
    """The question id a task shows for a model's item: its own, or `item<n>` (n its number on the page) where the
    model gave none, so that the teacher has a field to fill; the import reads `item<n>` back as none."""
    return item["question_id"] or f"item{item['index'] + 1}"


def model_verdict(item: dict) -> str:
    """The model's judgment as a verdict label: unanswered where it transcribed nothing and did not judge the answer
    right (the prompt asks for "" for a blank answer, and a blank answer's verdict is unanswered: a task the model
    got right is submitted unchanged), else right, wrong, or unknown when it gave none."""
    if not (item.get("text") or "").strip() and item["correctness"] is not True:
        return UNANSWERED
    return {True: RIGHT, False: WRONG}.get(item["correctness"], UNKNOWN)


def model_points(item: dict) -> float | None:
    """The model's score where it is a grade: for a question with a full score, and not flagged (grading's
    item_score); a review compares the teacher's points with these."""
    return item.get("score") if item.get("full_score") is not None and not item.get("score_problem") else None


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
    score_2: float | None = None  # a second teacher's points
    arbitration: str | None = None  # how the two teachers' scores were settled


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
    foreign_tasks: int = 0  # Label Studio tasks the export did not make (a storage sync's), not annotated: skipped
    teachers: dict = field(default_factory=dict)  # the two-teacher rule, tasks with two, whose grade counted
    disagreements: list[dict] = field(default_factory=list)  # where two teachers' annotations of a task differ
    placeholders_left: dict[str, list[str]] = field(default_factory=dict)  # page -> missing questions whose region
    # a submitted task left where the export put it: not reviewed, and the page is not training data

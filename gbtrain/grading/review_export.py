"""The review's export: a sheet, Label Studio tasks and their labeling config, and the page images, written into
GRADED/review/ for teachers to correct (eval/review.py export)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path
from urllib.parse import quote
from xml.sax.saxutils import quoteattr

from gbtrain.files import read_json, table_value, write_atomic
from gbtrain.grading.review import (
    CONFIG,
    IMAGES,
    MISSING,
    MISSING_PREFIX,
    REGION_PREFIX,
    REVIEW,
    SHEET,
    TASKS,
    GradedPage,
    ReviewRun,
    model_points,
    model_verdict,
    page_image,
    placeholder_box,
    read_graded,
    shown_question_id,
)
from gbtrain.outputs import REVIEW_RECORD, claim_output_folder
from gbtrain.schema import (
    QUESTION_TYPES,
    UNKNOWN,
    VERDICTS,
)
from gbtrain.text import csv_cell

SHEET_COLUMNS = ("page", "item", "question_id", "question_type", "x1", "y1", "x2", "y2", "text", "answer",
                 "model_correctness", "model_score", "full_score", "reviewed", "correctness", "score", "score_2",
                 "arbitration", "reason", "review_id")
# the columns a teacher fills (the model's are edited in place: question_id, question_type, x1..y2, text)
TEACHER_COLUMNS = ("reviewed", "correctness", "score", "score_2", "arbitration", "reason")


def sheet_rows(pages: list[GradedPage]) -> list[dict]:
    """One row per item, then one per keyed question the page's document lacks (`model_correctness` missing, no
    item number or box: the teacher gives its box and grade, or marks it reviewed where the student left no
    answer)."""
    rows = []
    for page in pages:
        for it in page.record["items"]:
            box = it["box"] or [None] * 4
            rows.append({"page": page.name, "item": it["index"] + 1, "question_id": it["question_id"],
                         "question_type": it.get("question_type"), **dict(zip(("x1", "y1", "x2", "y2"), box,
                                                                                strict=True)),
                         "text": it["text"], "answer": it["answer"],
                         "model_correctness": model_verdict(it) if it["correctness"] is not None or not (
                             it["text"] or "").strip() else "",
                         "model_score": it.get("score"), "full_score": it.get("full_score"),
                         "review_id": page.review_id})
        rows += [{"page": page.name, "item": None, "question_id": q["question_id"],
                  "question_type": q["question_type"], "text": "", "answer": "", "model_correctness": MISSING,
                  "full_score": q["full_score"], "review_id": page.review_id} for q in page.missing]
    return rows


def labeling_config() -> str:
    """The Label Studio labeling config of a review project: the verdict as the box's label, the transcription,
    question id and reference as text, the points as numbers, the question type, and the teacher's reason. Read by
    gbtrain.data.converters with configs/convert/review.yaml, its export is also an ordinary conversion source."""
    labels = "\n".join(f"    <Label value={quoteattr(v)} background={quoteattr(c)}/>" for v, c in zip(
        VERDICTS, ("#2a9d8f", "#e63946", "#f4a261", "#8d99ae", "#6c757d"), strict=True))
    types = "\n".join(f"      <Choice value={quoteattr(t)}/>" for t in QUESTION_TYPES)
    region = 'toName="image" perRegion="true"'
    return f"""<View>
  <Header value="$page"/>
  <Image name="image" value="$image" zoom="true"/>
  <RectangleLabels name="verdict" toName="image">
{labels}
  </RectangleLabels>
  <View visibleWhen="region-selected">
    <Header value="Question id"/>
    <TextArea name="qid" {region} editable="true" maxSubmissions="1" placeholder="question id"/>
    <Header value="Transcription (what the student wrote)"/>
    <TextArea name="hand" {region} editable="true" maxSubmissions="1" placeholder="transcription"/>
    <Header value="Reference answer"/>
    <TextArea name="std" {region} editable="true" maxSubmissions="1" placeholder="reference answer"/>
    <Header value="Score: the points this answer earns"/>
    <Number name="score" {region} min="0" step="0.5"/>
    <Header value="Full score: the question's points (from the answer key)"/>
    <Number name="full_score" {region} min="0" step="0.5"/>
    <Header value="Question type"/>
    <Choices name="type" {region}>
{types}
    </Choices>
    <Header value="Why you changed it"/>
    <TextArea name="reason" {region} editable="true" maxSubmissions="1" placeholder="why you changed it"/>
    <Header value="Arbitration: how two teachers' scores were settled"/>
    <TextArea name="arbitration" {region} editable="true" maxSubmissions="1" placeholder="arbitration"/>
  </View>
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
    controls = [("qid", "textarea", shown_question_id(item)),
                ("hand", "textarea", item["text"] or None), ("std", "textarea", item.get("reference")),
                ("score", "number", model_points(item)),
                ("full_score", "number", item.get("full_score")), ("type", "choices", item.get("question_type"))]
    return _region(page, f"{REGION_PREFIX}{item['index'] + 1}", geometry, model_verdict(item), controls)


def _placeholder(page: GradedPage, k: int) -> list[dict]:
    """The k-th (0-based) keyed question the page's document lacks, as a region labelled unknown in the page's
    corner (review.placeholder_box) with its question id, reference, full score and type: the teacher moves it onto
    the answer and grades it, labels it unanswered where the answer is blank, or deletes it."""
    q = page.missing[k]
    controls = [("qid", "textarea", q["question_id"]), ("std", "textarea", q["reference"]),
                ("full_score", "number", q["full_score"]), ("type", "choices", q["question_type"])]
    return _region(page, f"{MISSING_PREFIX}{k + 1}", placeholder_box(k), UNKNOWN, controls)


def _region(page: GradedPage, region_id: str, geometry: dict, label: str, controls: list) -> list[dict]:
    w, h = page.record["width"], page.record["height"]
    common = {"id": region_id, "to_name": "image", "original_width": w, "original_height": h, "image_rotation": 0}
    results = [{**common, "type": "rectanglelabels", "from_name": "verdict",
                "value": {**geometry, "rectanglelabels": [label]}}]
    for name, kind, value in controls:
        if value is not None:  # Label Studio writes no result for a control left empty
            key = {"textarea": "text", "number": "number", "choices": "choices"}[kind]
            results.append({**common, "type": kind, "from_name": name,
                            "value": {**geometry, key: value if kind == "number" else [value]}})
    return results


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_sheet_untouched(folder: Path) -> None:
    """Refuse to export over a review.csv that differs from the one the last export wrote (its hash in
    REVIEW_RECORD): it holds a teacher's corrections, which a new blank sheet would lose."""
    sheet = folder / SHEET
    if not sheet.is_file():
        return
    try:
        recorded = read_json(folder / REVIEW_RECORD).get("sheet_sha256")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if recorded != _sha256(sheet):
        raise ValueError(f"{sheet} was edited since it was exported (a teacher's corrections, which a new sheet would "
                         f"lose): import it first (eval/review.py import --reviewed {sheet}), then move it out of "
                         f"{folder} to export again")


def export_review(run: ReviewRun) -> dict:
    """Write OUT/review/ of the graded folder (the module's docstring); returns counts for the command's line."""
    graded = Path(run.graded)
    record, pages = read_graded(graded)
    folder = graded / REVIEW
    check_sheet_untouched(folder)
    identity = {"tool": "review_export", "graded": str(graded.resolve())}
    claim_output_folder(folder, identity, overwrite=True, work=(IMAGES,), record=REVIEW_RECORD, discard=True)
    for page in pages:
        path = folder / IMAGES / page.image
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(page_image(record, page))
    rows = sheet_rows(pages)
    buf = io.StringIO()
    w = csv.DictWriter(buf, SHEET_COLUMNS)
    w.writeheader()
    w.writerows({k: csv_cell(table_value(row.get(k))) for k in SHEET_COLUMNS} for row in rows)
    write_atomic(folder / SHEET, buf.getvalue())
    # the sheet's hash as written: a rerun knows a sheet a teacher has since filled, and keeps it
    write_atomic(folder / REVIEW_RECORD, json.dumps(identity | {"sheet_sha256": _sha256(folder / SHEET)}, indent=1)
                 + "\n")
    model = Path(record["model"]).name or record["model"]
    tasks = [{"data": {"image": run.image_url + quote(page.image), "page": page.name, "review_id": page.review_id},
              "predictions": [{"model_version": model, "result": [
                  *(r for it in page.shown for r in _results(page, it)),
                  *(r for k in range(len(page.missing)) for r in _placeholder(page, k))]}]}
             for page in pages]
    write_atomic(folder / TASKS, json.dumps(tasks, ensure_ascii=False, indent=1) + "\n")
    write_atomic(folder / CONFIG, labeling_config())
    return {"folder": str(folder), "pages": len(pages), "items": len(rows) - sum(len(p.missing) for p in pages),
            "missing": sum(len(p.missing) for p in pages),
            "not_shown": sum(len(p.record["items"]) - len(p.shown) for p in pages)}

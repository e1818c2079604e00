"""The tables of a graded folder: grades.csv (one row per item), totals.csv (one per page), questions.csv (one per
keyed question of a page), documents.csv (one per PDF or image file), students.csv (one per student, when pages are
given students) and summary.json, rewritten from the page files at the end of every run."""

from __future__ import annotations

import json
from pathlib import Path

from gbtrain.files import write_atomic, write_table
from gbtrain.grading.grades import page_file, read_page_file
from gbtrain.grading.pages import Page

GRADE_COLUMNS = ("page", "item", "question_id", "text", "answer", "correctness", "score", "full_score", "x1", "y1",
                 "x2", "y2", "confidence", "box_confidence", "review", "status")
COUNTS = ("items", "right", "wrong", "unjudged", "unparsable", "points", "full_points", "review", "missing",
          "duplicate", "by_reference", "unkeyed")
TOTAL_COLUMNS = ("page", "document", "student", "status", *COUNTS)
QUESTION_COLUMNS = ("page", "document", "student", "question_id", "status", "item", "items", "points", "full_score",
                    "review")
GROUP_COLUMNS = ("pages", *COUNTS)  # per document (a PDF or an image file) and per student


def _sum(rows: list[dict], key: str):
    """A column's total; None where no row has the figure (points: none of the pages has a keyed full score)."""
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(sum(values), 6) if values else None


def group_totals(per_page: list[dict], by: str) -> dict[str, dict]:
    """The pages' counts summed per `by` (document or student), in first-seen order."""
    groups: dict[str, list[dict]] = {}
    for row in per_page:
        groups.setdefault(row[by], []).append(row)
    return {name: {"pages": len(rows), **{k: _sum(rows, k) for k in COUNTS}} for name, rows in groups.items()}


def write_tables(out: Path, pages: list[Page], unreadable: list[dict], identity: dict,
                 threshold: dict | None = None, students: dict[str, str] | None = None) -> dict:
    """grades.csv (an item a row), totals.csv (a page a row), questions.csv (a keyed question of a page a row:
    found, missing or duplicate), documents.csv (a PDF or image file a row), students.csv (with `students`: a
    page's source file -> its student) and summary.json over every graded page of the folder (this run's and
    earlier runs'), in page order; returns the summary. `threshold`: the review threshold in force and where it
    came from (review_threshold)."""
    records = [read_page_file(page_file(out, p)) for p in pages if page_file(out, p).is_file()]
    # an item's score, full score and confidences are absent on pages graded before points or confidences
    write_table(out / "grades.csv", GRADE_COLUMNS, [
        {"page": r["page"], "item": it["index"] + 1, "question_id": it["question_id"] or "", "text": it["text"],
         "answer": it["answer"], "correctness": "" if it["correctness"] is None else str(it["correctness"]).lower(),
         **{k: it.get(k) for k in ("score", "full_score", "confidence", "box_confidence")},
         **dict(zip(("x1", "y1", "x2", "y2"), it["box"] or [None] * 4, strict=True)),
         "review": str(bool(it.get("review"))).lower(), "status": r["status"]} for r in records for it in r["items"]])
    place = {r["page"]: {"document": r["source"], "student": (students or {}).get(r["source"])} for r in records}
    # pages graded before points have no points totals, those before thresholds no review count, those before
    # question ids no question counts
    per_page = [{"page": r["page"], **place[r["page"]], "status": r["status"], "points": None, "full_points": None,
                 "review": 0, "missing": 0, "duplicate": 0, "by_reference": 0, "unkeyed": 0, **r["totals"]}
                for r in records]
    write_table(out / "totals.csv", TOTAL_COLUMNS, per_page)
    write_table(out / "questions.csv", QUESTION_COLUMNS, [{"page": r["page"], **place[r["page"]], **q}
                                                         for r in records for q in r.get("questions") or []])
    per_document = group_totals(per_page, "document")
    write_table(out / "documents.csv", ("document", *GROUP_COLUMNS), [{"document": k, **v}
                                                                     for k, v in per_document.items()])
    per_student = group_totals(per_page, "student") if students else None
    if per_student is not None:
        write_table(out / "students.csv", ("student", *GROUP_COLUMNS), [{"student": k, **v}
                                                                       for k, v in per_student.items()])
    else:  # an earlier run's, made with students this run was not given: it would not match the other tables
        (out / "students.csv").unlink(missing_ok=True)
    items = [it for r in records for it in r["items"]]
    summary = {"run": identity, "pages": len(records), **{k: _sum(per_page, k) for k in COUNTS},
               "review_threshold": threshold, "without_confidence": sum(it.get("confidence") is None for it in items),
               "errors": sum(t["status"] == "error" for t in per_page), "unreadable": unreadable,
               "per_document": per_document, "per_student": per_student, "per_page": per_page}
    write_atomic(out / "summary.json", json.dumps(summary, ensure_ascii=False, indent=1) + "\n")
    return summary

"""The tables of a graded folder: grades.csv (one row per item), totals.csv (one per page) and summary.json,
rewritten from the page files at the end of every run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from gbtrain.files import write_atomic
from gbtrain.grading.grades import page_file, read_page_file
from gbtrain.grading.pages import Page
from gbtrain.text import csv_cell

GRADE_COLUMNS = ("page", "item", "question_id", "text", "answer", "correctness", "score", "full_score", "x1", "y1",
                 "x2", "y2", "confidence", "box_confidence", "review", "status")
TOTAL_COLUMNS = ("page", "status", "items", "right", "wrong", "unjudged", "unparsable", "points", "full_points",
                 "review")


def write_tables(out: Path, pages: list[Page], unreadable: list[dict], identity: dict,
                 threshold: dict | None = None) -> dict:
    """grades.csv, totals.csv and summary.json over every graded page of the folder (this run's and earlier
    runs'), in page order; returns the summary. `threshold`: the review threshold in force and where it came
    from (review_threshold)."""
    records = [read_page_file(page_file(out, p)) for p in pages if page_file(out, p).is_file()]
    # errors="backslashreplace": a lone surrogate (in a reply, or a file name's undecodable bytes) is written as its
    # escape, as write_atomic writes the page files
    with open(out / "grades.csv", "w", encoding="utf-8", errors="backslashreplace", newline="") as f:
        w = csv.writer(f)
        w.writerow(GRADE_COLUMNS)
        for r in records:
            for it in r["items"]:
                box = it["box"] or ["", "", "", ""]
                # none on pages graded before points, or before confidences
                points = [table_value(it.get(k)) for k in ("score", "full_score")]
                confidences = [table_value(it.get(k)) for k in ("confidence", "box_confidence")]
                w.writerow(map(csv_cell, [r["page"], it["index"] + 1, it["question_id"] or "", it["text"], it["answer"],
                                          "" if it["correctness"] is None else str(it["correctness"]).lower(),
                                          *points, *box, *confidences, str(bool(it.get("review"))).lower(),
                                          r["status"]]))
    # pages graded before points have no points totals, those before thresholds no review count
    per_page = [{"page": r["page"], "status": r["status"], "points": None, "full_points": None, "review": 0,
                 **r["totals"]} for r in records]
    with open(out / "totals.csv", "w", encoding="utf-8", errors="backslashreplace", newline="") as f:
        w = csv.DictWriter(f, TOTAL_COLUMNS)
        w.writeheader()
        w.writerows({k: csv_cell(table_value(v)) for k, v in row.items()} for row in per_page)
    in_points = [t for t in per_page if t["full_points"] is not None]
    items = [it for r in records for it in r["items"]]
    summary = {"run": identity, "pages": len(records),
               **{k: sum(t[k] for t in per_page) for k in ("items", "right", "wrong", "unjudged", "unparsable",
                                                           "review")},
               "review_threshold": threshold, "without_confidence": sum(it.get("confidence") is None for it in items),
               **{k: round(sum(t[k] for t in in_points), 6) if in_points else None for k in ("points", "full_points")},
               "errors": sum(t["status"] == "error" for t in per_page), "unreadable": unreadable,
               "per_page": per_page}
    write_atomic(out / "summary.json", json.dumps(summary, ensure_ascii=False, indent=1) + "\n")
    return summary


def table_value(value):
    """A table cell of a value that may be absent (None: an empty cell), a whole number of points without `.0`."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return "" if value is None else value

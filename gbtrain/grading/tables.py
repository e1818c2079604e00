"""The tables of a graded folder: grades.csv (one row per item), totals.csv (one per page), questions.csv (one per
keyed question of a document), documents.csv (one per document: a PDF or image file, or a student's pages),
students.csv (one per student, when pages are given students) and summary.json, rewritten from the page files at
the end of every run."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from gbtrain.files import write_atomic, write_table
from gbtrain.grading.answer_key import AnswerKey, KeyQuestion
from gbtrain.grading.documents import assign_document, documents_of
from gbtrain.grading.grades import page_file, read_page_file
from gbtrain.grading.pages import Page

GRADE_COLUMNS = ("page", "item", "question_id", "printed_id", "text", "answer", "correctness", "score", "full_score",
                 "x1", "y1", "x2", "y2", "confidence", "box_confidence", "review", "duplicate_of", "status")
COUNTS = ("items", "right", "wrong", "unjudged", "unparsable", "points", "full_points", "review", "missing",
          "duplicate", "by_reference", "by_position", "unkeyed")
TOTAL_COLUMNS = ("page", "file", "document", "student", "status", *COUNTS)
QUESTION_COLUMNS = ("document", "student", "question_id", "status", "page", "item", "items", "points", "full_score",
                    "review")
GROUP_COLUMNS = ("pages", *COUNTS)  # per document and per student


def _sum(rows: list[dict], key: str):
    """A column's total; None where no row has the figure (points: none of the pages has a keyed full score)."""
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(sum(values), 6) if values else None


def _page_row(record: dict, student: str | None, questions: list[dict]) -> dict:
    """A page's row of totals.csv: what it holds by itself (grades.page_totals) and the keyed questions kept on it
    (their points, out of their full scores); missing questions belong to its document."""
    held = [q for q in questions if q["page"] == record["page"] and q["full_score"] is not None]
    items = record["items"]
    # pages graded before question ids have no question counts
    return {"page": record["page"], "file": record["source"], "document": record["document"], "student": student,
            "status": record["status"], "by_reference": 0, "by_position": 0, "unkeyed": 0, **record["totals"],
            "points": _sum(held, "points") if held else None, "full_points": _sum(held, "full_score") if held else None,
            "review": sum(bool(it.get("review")) for it in items), "missing": None,
            "duplicate": sum(bool(it.get("duplicate_of")) for it in items)}


def _document_row(records: list[dict], page_rows: list[dict], questions: list[dict], keyed: bool) -> dict:
    """A document's row: its pages' counts summed, and with a key, every keyed question once (points over every
    full score; missing and duplicate questions; review: items for review and missing questions)."""
    row = {"pages": len(records), **{k: _sum(page_rows, k) for k in COUNTS}}
    if keyed:
        scored = [q for q in questions if q["full_score"] is not None]
        row |= {"points": _sum(scored, "points") if scored else None,
                "full_points": _sum(scored, "full_score") if scored else None,
                "missing": sum(q["status"] == "missing" for q in questions),
                "duplicate": sum(q["status"] == "duplicate" for q in questions),
                "review": sum(bool(it.get("review")) for r in records for it in r["items"])
                + sum(q["status"] == "missing" for q in questions)}
    return row


def _missing(q: KeyQuestion, records: list[dict]) -> dict:
    """A keyed question found on no page of its document, and the page a teacher is asked to look for it on: the
    page the key states, where the document has it, else the document's first (pages graded with an error aside)."""
    shown = [r for r in records if r["status"] != "error"] or records  # a page graded with an error is not reviewed
    page = next((r for r in shown if q.page is not None and r["document_page"] == q.page), shown[0])
    return {"document": page["document"], "question_id": q.qid, "page": page["page"], "full_score": q.full_score,
            "reference": q.answer, "question_type": q.question_type}


def write_tables(out: Path, pages: list[Page], unreadable: list[dict], identity: dict,
                 threshold: dict | None = None, students: dict[str, str] | None = None,
                 key: AnswerKey | None = None) -> dict:
    """grades.csv (an item a row), totals.csv (a page a row), questions.csv (a keyed question of a document a row:
    found, missing or duplicate, and on which page), documents.csv (a document a row: a PDF or image file, or a
    student's pages; grading.documents), students.csv (with `students`: a page's source file -> its student) and
    summary.json over every graded page of the folder (this run's and earlier runs'), in page order; returns the
    summary. `threshold`: the review threshold in force and where it came from (review_threshold); `key`: the
    answer key, counted once per document."""
    places = documents_of(pages, students)
    records = [read_page_file(page_file(out, p)) for p in pages if page_file(out, p).is_file()]
    by_document: dict[str, list[dict]] = {}
    for r in records:  # grouped as this run groups them (an earlier run may have been given other students)
        r["document"], r["document_page"] = places[r["page"]]
        by_document.setdefault(r["document"], []).append(r)
    questions = {d: assign_document(rs, key) if key else [] for d, rs in by_document.items()}
    student_of = {d: (students or {}).get(rs[0]["source"]) for d, rs in by_document.items()}
    # an item's score, full score and confidences are absent on pages graded before points or confidences
    write_table(out / "grades.csv", GRADE_COLUMNS, [
        {"page": r["page"], "item": it["index"] + 1, "question_id": it["question_id"] or "",
         "printed_id": it.get("printed_id"), "text": it["text"], "answer": it["answer"],
         "correctness": "" if it["correctness"] is None else str(it["correctness"]).lower(),
         **{k: it.get(k) for k in ("score", "full_score", "confidence", "box_confidence", "duplicate_of")},
         **dict(zip(("x1", "y1", "x2", "y2"), it["box"] or [None] * 4, strict=True)),
         "review": str(bool(it.get("review"))).lower(), "status": r["status"]} for r in records for it in r["items"]])
    per_page = [_page_row(r, student_of[r["document"]], questions[r["document"]]) for r in records]
    write_table(out / "totals.csv", TOTAL_COLUMNS, per_page)
    write_table(out / "questions.csv", QUESTION_COLUMNS, [{"document": d, "student": student_of[d], **q}
                                                         for d, rows in questions.items() for q in rows])
    rows_of: dict[str, list[dict]] = {}
    for row in per_page:
        rows_of.setdefault(row["document"], []).append(row)
    per_document = {d: _document_row(rs, rows_of[d], questions[d], key is not None) for d, rs in by_document.items()}
    write_table(out / "documents.csv", ("document", *GROUP_COLUMNS), [{"document": k, **v}
                                                                     for k, v in per_document.items()])
    per_student = ({student_of[d]: row for d, row in per_document.items()} if students else None)  # one document each
    if per_student is not None:
        write_table(out / "students.csv", ("student", *GROUP_COLUMNS), [{"student": k, **v}
                                                                       for k, v in per_student.items()])
    else:  # an earlier run's, made with students this run was not given: it would not match the other tables
        (out / "students.csv").unlink(missing_ok=True)
    keyed = {q.qid: q for q in key or []}
    missing = [_missing(keyed[row["question_id"]], by_document[d]) for d, rows in questions.items() for row in rows
               if row["status"] == "missing"]
    items = [it for r in records for it in r["items"]]
    unkeyed = Counter(it.get("printed_id") or "(none)" for it in items if key and not it.get("matched_by"))
    summary = {"run": identity, "pages": len(records), **{k: _sum(list(per_document.values()), k) for k in COUNTS},
               "review_threshold": threshold, "without_confidence": sum(it.get("confidence") is None for it in items),
               "errors": sum(t["status"] == "error" for t in per_page), "unreadable": unreadable,
               "unkeyed_ids": dict(unkeyed.most_common()), "missing_questions": missing,
               "per_document": per_document, "per_student": per_student,
               "per_page": per_page}
    write_atomic(out / "summary.json", json.dumps(summary, ensure_ascii=False, indent=1) + "\n")
    return summary

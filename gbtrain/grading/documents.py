"""An exam is a document, not a page: its pages are graded one by one, and its answer key is counted once over all
of them. A document is a PDF or an image file, or, where pages are given students (--students, --student-pattern),
all of one student's pages. Each keyed question is found on whichever page holds an item for it; several items for
one question are resolved to one (the key's page first, then an item named by its id over one matched by its answer
alone, then the more confident judgment, then reading order) and the others kept for review; a question found on no
page is missing."""

from __future__ import annotations

from gbtrain.grading.answer_key import AnswerKey
from gbtrain.grading.pages import Page


def documents_of(pages: list[Page], students: dict[str, str] | None) -> dict[str, tuple[str, int]]:
    """Each page's document and its number there (1 the first), by page name: the student's pages, where pages
    are given students, else its file's, in path order (a PDF's in its own order)."""
    places: dict[str, tuple[str, int]] = {}
    counts: dict[str, int] = {}
    for page in pages:
        document = students[page.rel] if students else page.rel
        counts[document] = counts.get(document, 0) + 1
        places[page.name] = (document, counts[document])
    return places


def _rank(item: dict, number: int, stated: int | None) -> tuple:
    """How an item for a question is ranked against the others for it (lowest first): on the page the key states,
    named by id, its judgment's confidence (none last), reading order."""
    confidence = item.get("confidence")
    return (stated is not None and number != stated, item.get("matched_by") != "id",
            -confidence if confidence is not None else 1.0, number, item["index"])


def assign_document(records: list[dict], key: AnswerKey) -> list[dict]:
    """Every question of the key over a document's graded page files (`records`, in page order), each once: found
    (one item), duplicate (several: one kept by _rank, the others flagged `duplicate_of` "<page> #<item>" and for
    review, and left out of the points) or missing (no item on any page: 0 points, for review). Items are flagged
    in place. A row: question_id, status, page and item of the kept item, items, points (a question with a full
    score: the kept item's usable score, else 0), full_score, review."""
    rows = []
    for q in key:
        mine = [(it, r) for r in records for it in r["items"] if it.get("matched_by") and it["question_id"] == q.qid]
        mine.sort(key=lambda pair: _rank(pair[0], pair[1].get("document_page", 1), q.page))
        kept, page = mine[0] if mine else (None, None)
        for extra, _ in mine[1:]:
            extra["duplicate_of"], extra["review"] = f"{page['page']} #{kept['index'] + 1}", True
        points = None
        if q.full_score is not None:
            usable = kept is not None and kept.get("score") is not None and not kept.get("score_problem")
            points = kept["score"] if usable else 0
        rows.append({"question_id": q.qid, "status": "missing" if not mine else "duplicate" if len(mine) > 1 else
                     "found", "page": page["page"] if page else None, "item": kept["index"] + 1 if kept else None,
                     "items": len(mine), "points": points, "full_score": q.full_score, "review": len(mine) != 1})
    return rows

"""A page's reply read into graded items (boxes in page pixels, points, confidences, review marks), its totals,
and the page file that marks it done."""

from __future__ import annotations

from pathlib import Path

from gbtrain.coords import PixelBudget
from gbtrain.files import read_json
from gbtrain.grading.answer_key import AnswerKey, question_of
from gbtrain.grading.pages import LoadedPage, Page, PageSize
from gbtrain.metric import confidence
from gbtrain.metric.parsing import normalize_items, parse_points, parse_response
from gbtrain.metric.scoring import ScoreOptions, item_boxes
from gbtrain.metric.selective import (
    needs_review,
)
from gbtrain.vocabulary import ANSWER_BASED, ANSWER_FREE, L3

RESULTS = "pages"  # OUT/pages: one file per graded page (see is_graded)
OUT_OF_RANGE = "outside 0..full_score"  # a model's score kept on its item but not counted in the page's points


def item_score(raw, full: float | None) -> tuple[float | None, str | None]:
    """A model's score as points (parsing.parse_points) and what is wrong with it: not a number, not finite, or
    outside 0..full (kept, flagged, and left out of the page's points); (None, None) when it gave none."""
    if raw is None:
        return None, None
    value, why = parse_points(raw)
    if value is not None and full is not None and not 0 <= value <= full:
        why = OUT_OF_RANGE
    return value, why


def read_reply(reply: str, width: int, height: int, coords: str, budget: PixelBudget,
               key: AnswerKey | None = None, logprobs: list | None = None,
               threshold: float | None = None) -> tuple[list[dict], str | None]:
    """The items of a page's reply with their boxes in page pixels (clipped to the page; None without a valid
    box), their points (item_score; the full score and type are the key's for the item's question), their
    judgment's and box's confidences (from the reply's `logprobs`, as the evaluator's; None without them) and
    whether each goes to a teacher under `threshold` (never without one), and why the reply did not parse cleanly
    (parsing's reason; None when it did)."""
    parsed = parse_response(reply)
    opts = ScoreOptions(L3, ANSWER_BASED if key else ANSWER_FREE, coords, budget)
    questions = {q.qid: q for q in key or []}
    normalized = normalize_items(parsed.items)
    confidence.annotate(normalized, reply, logprobs)
    items = []
    for ib in item_boxes(normalized, PageSize(width, height), opts):
        it = ib.item
        box = None if ib.box is None else [round(v, 1) for v in ib.box.as_list()]
        qid, matched_by = question_of(it, key)
        question = questions.get(qid)
        full = question.full_score if question else None
        score, problem = item_score(it.score, full)
        items.append({"index": it.index, "question_id": qid, "matched_by": matched_by, "box": box,
                      "model_boxes": it.boxes, "text": it.text, "answer": it.answer, "correctness": it.correctness,
                      "score": score, "score_problem": problem,
                      "full_score": full, "rubric": question.rubric if question else None,
                      "reference": question.answer if question else None,
                      "question_type": question.question_type if question else None,
                      "confidence": _rounded(it.confidence), "box_confidence": _rounded(it.box_confidence),
                      "review": threshold is not None and needs_review(it.confidence, threshold)})
    return items, parsed.reason


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def assign_questions(items: list[dict], key: AnswerKey | None) -> list[dict]:
    """Every question of the answer key on the page, each once: found (its first item in reading order kept),
    duplicate (several items name it: the first kept, the others flagged `duplicate_of` and for review, and left out
    of the points) or missing (no item: 0 points, for review). Items are flagged in place; [] without a key."""
    rows = []
    for q in key or []:
        mine = [it for it in items if it["question_id"] == q.qid]
        for extra in mine[1:]:
            extra["duplicate_of"], extra["review"] = mine[0]["index"] + 1, True
        kept = mine[0] if mine else None
        points = None
        if q.full_score is not None:
            usable = kept is not None and kept["score"] is not None and not kept["score_problem"]
            points = kept["score"] if usable else 0
        rows.append({"question_id": q.qid, "status": "missing" if not mine else "duplicate" if len(mine) > 1 else
                     "found", "item": kept["index"] + 1 if kept else None, "items": len(mine), "points": points,
                     "full_score": q.full_score, "review": len(mine) != 1})
    return rows


def page_totals(items: list[dict], status: str, questions: list[dict] | None = None) -> dict:
    """A page's counts: items, judged right, judged wrong, not judged (no boolean judgment), whether the reply was
    unparsable (not read cleanly; the items before a cut are still counted), the items and questions for review;
    with an answer key (`questions`, assign_questions), its questions missing and given twice, the items matched to a
    question by their answer alone (no id) or to none, and its points: every keyed question with a full score, once
    (a missing one, or a flagged score, counts 0), out of all their full scores (None, None without such questions)."""
    questions = questions or []
    judged = [it["correctness"] for it in items]
    scored = [q for q in questions if q["full_score"] is not None]
    keyed = {q["question_id"] for q in questions}
    return {"items": len(items), "right": judged.count(True), "wrong": judged.count(False),
            "unjudged": sum(j is None for j in judged), "unparsable": int(status not in ("ok", "error")),
            "points": round(sum(q["points"] for q in scored), 6) if scored else None,
            "full_points": round(sum(q["full_score"] for q in scored), 6) if scored else None,
            "review": sum(bool(it.get("review")) for it in items) + sum(q["status"] == "missing" for q in questions),
            "missing": sum(q["status"] == "missing" for q in questions),
            "duplicate": sum(q["status"] == "duplicate" for q in questions),
            "by_reference": sum(it.get("matched_by") == "reference" for it in items),
            "unkeyed": sum(it["question_id"] not in keyed for it in items) if questions else 0}


def page_record(page: LoadedPage, reply: dict, coords: str, budget: PixelBudget, key: AnswerKey | None,
                threshold: float | None = None) -> dict:
    """A graded page as OUT/pages/<page>.json holds it. `reply` is an Evaluator.send_batch row: the model's text
    (with its tokens' logprobs where the backend gave them), or an error (prompt too long for the context, an
    endpoint's refusal) with no text; status "error" then. `threshold`: the review threshold in force, if any."""
    items, reason = read_reply(reply["response"], page.width, page.height, coords, budget, key, reply.get("logprobs"),
                               threshold)
    status = "error" if reply.get("error") else reason or "ok"
    questions = assign_questions(items, key)
    p = page.page
    return {"page": p.name, "source": p.rel, "pdf_page": None if p.index is None else p.index + 1, "pdf_dpi": page.dpi,
            "width": page.width, "height": page.height, "mode": ANSWER_BASED if key else ANSWER_FREE,
            "status": status, "error": reply.get("error"), "totals": page_totals(items, status, questions),
            "questions": questions,
            "review_threshold": threshold, "items": items, "response": str(reply["response"])}


def page_file(out: Path, page: Page) -> Path:
    return out / RESULTS / f"{page.stem}.json"


PAGE_FIELDS = ("page", "status", "totals", "items")  # what the tables read from a page file


def read_page_file(path: Path) -> dict:
    """A page file this tool wrote (the tables and the review loop read them); anything else is a ValueError."""
    try:
        record = read_json(path, errors="replace")
    except ValueError:
        record = None
    if not isinstance(record, dict) or not all(k in record for k in PAGE_FIELDS):
        raise ValueError(f"{path}: not a page file eval/grade_pages.py wrote (damaged, or another program's): grade "
                         f"the pages again (grade_pages --overwrite), or choose another --out")
    return record


def is_graded(out: Path, page: Page) -> bool:
    """Whether a rerun skips the page: it has a page file, and no error (a prompt that did not fit the context, an
    endpoint's refusal) that another --max-model-len or a later try may mend."""
    path = page_file(out, page)
    return path.is_file() and read_page_file(path)["status"] != "error"

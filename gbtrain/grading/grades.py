"""A page's reply read into graded items (boxes in page pixels, questions, points, confidences, review marks), what
the page holds by itself, and the page file that marks it done (its document's totals: grading.documents)."""

from __future__ import annotations

from pathlib import Path

from gbtrain.coords import PixelBudget
from gbtrain.files import read_json
from gbtrain.grading.answer_key import (
    AnswerKey,
    ReferenceTries,
    asked_ids,
    by_position,
    key_ids,
    question_of,
)
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
               threshold: float | None = None, asked: AnswerKey | None = None) -> tuple[list[dict], str | None]:
    """The items of a page's reply with their boxes in page pixels (clipped to the page; None without a valid
    box), their question (answer_key.question_of: an id names any question of `key`, an answer alone only one of
    `asked`, the questions the page was asked for, by default the whole key), their points (item_score; the full
    score and type are the key's for the item's question), their judgment's and box's confidences (from the reply's
    `logprobs`, as the evaluator's; None without them) and whether each goes to a teacher under `threshold` (never
    without one), and why the reply did not parse cleanly (parsing's reason; None when it did)."""
    parsed = parse_response(reply)
    opts = ScoreOptions(L3, ANSWER_BASED if key else ANSWER_FREE, coords, budget)
    questions = {q.qid: q for q in key or []}
    normalized = normalize_items(parsed.items)
    confidence.annotate(normalized, reply, logprobs)
    boxed = list(item_boxes(normalized, PageSize(width, height), opts))
    ids, tries = key_ids(key), ReferenceTries()
    found, untried = [], set()  # untried: items past the page's MAX_REFERENCE_TRIES, never compared with a reference
    for k, ib in enumerate(boxed):
        skipped = tries.skipped
        found.append(question_of(ib.item, key, asked, ids, tries))
        if tries.skipped > skipped:
            untried.add(k)
    found = by_position(found, key if asked is None else asked)
    items = []
    for k, (ib, (qid, matched_by)) in enumerate(zip(boxed, found, strict=True)):
        it = ib.item
        box = None if ib.box is None else [round(v, 1) for v in ib.box.as_list()]
        question = questions.get(qid) if matched_by else None
        full = question.full_score if question else None
        score, problem = item_score(it.score, full)
        items.append({"index": it.index, "question_id": qid, "printed_id": it.question_id, "matched_by": matched_by,
                      "box": box, "model_boxes": it.boxes, "text": it.text, "answer": it.answer,
                      "correctness": it.correctness, "score": score, "score_problem": problem,
                      "full_score": full, "rubric": question.rubric if question else None,
                      "reference": question.answer if question else None,
                      "question_type": question.question_type if question else None,
                      "confidence": _rounded(it.confidence), "box_confidence": _rounded(it.box_confidence),
                      "review": threshold is not None and needs_review(it.confidence, threshold),
                      "reference_untried": k in untried})
    return items, parsed.reason


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def page_totals(items: list[dict], status: str, keyed: bool) -> dict:
    """What a page holds by itself: items, judged right, judged wrong, not judged (no boolean judgment), whether the
    reply was unparsable (not read cleanly; the items before a cut are still counted), the items for review under
    the threshold; with an answer key (`keyed`), the items matched to a question by their answer alone (no id) and
    those matched to none. Points, missing and duplicate questions belong to the document (grading.documents)."""
    judged = [it["correctness"] for it in items]
    return {"items": len(items), "right": judged.count(True), "wrong": judged.count(False),
            "unjudged": sum(j is None for j in judged), "unparsable": int(status not in ("ok", "error")),
            "review": sum(bool(it.get("review")) for it in items),
            "by_reference": sum(it.get("matched_by") == "reference" for it in items),
            "by_position": sum(it.get("matched_by") == "position" for it in items),
            "unkeyed": sum(not it.get("matched_by") for it in items) if keyed else 0}


def page_record(page: LoadedPage, reply: dict, coords: str, budget: PixelBudget, key: AnswerKey | None,
                threshold: float | None = None, place: tuple[str, int] | None = None,
                asked: AnswerKey | None = None) -> dict:
    """A graded page as OUT/pages/<page>.json holds it. `reply` is an Evaluator.send_batch row: the model's text
    (with its tokens' logprobs where the backend gave them), or an error (prompt too long for the context, an
    endpoint's refusal) with no text; status "error" then. `threshold`: the review threshold in force, if any;
    `place`: the page's document and its number there (1 the first); `asked`: the key's questions its prompt
    listed (answer_key.page_questions), recorded by id where the key places questions on pages."""
    items, reason = read_reply(reply["response"], page.width, page.height, coords, budget, key, reply.get("logprobs"),
                               threshold, asked)
    status = "error" if reply.get("error") else reason or "ok"
    p = page.page
    document, number = place or (p.rel, 1 if p.index is None else p.index + 1)
    return {"page": p.name, "source": p.rel, "pdf_page": None if p.index is None else p.index + 1, "pdf_dpi": page.dpi,
            "document": document, "document_page": number,
            "asked": asked_ids(key, number),
            "width": page.width, "height": page.height, "mode": ANSWER_BASED if key else ANSWER_FREE,
            "status": status, "error": reply.get("error"), "totals": page_totals(items, status, key is not None),
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


def is_graded(out: Path, page: Page, asked: list[str] | None = None) -> bool:
    """Whether a rerun skips the page: it has a page file, no error (a prompt that did not fit the context, an
    endpoint's refusal) that another --max-model-len or a later try may mend, and it was asked for the questions
    `asked` (a key that places questions on pages asks each page for its own: pages grouped otherwise since are
    asked again)."""
    path = page_file(out, page)
    if not path.is_file():
        return False
    record = read_page_file(path)
    return record["status"] != "error" and record.get("asked") == asked

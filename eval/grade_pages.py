"""Grade new, unannotated exam pages with a checkpoint: whole-page (L3) grading, as the evaluator asks L3 records.

    python eval/grade_pages.py --model CKPT --pages DIR --out OUT [--answer-key KEY.yaml|KEY.json]
        [--backend vllm|hf|openai] [--coords ...] [--min-pixels N --max-pixels N] [--pdf-dpi 200]
        [--review-threshold T | --target-accuracy A | --review-budget B]

Every image (JPEG, PNG, WebP, BMP, TIFF) under DIR (recursively) and every page of every PDF is graded: answer-free
by default, answer-based with an answer key (a mapping question id -> reference answer, or -> {answer, full_score,
rubric, question_type, page} for a question graded in points: the model is then asked for its score, and the tables
total the points). The key belongs to the document (a PDF or an image file, or all of a student's pages with
--students / --student-pattern): each keyed question is counted once per document, on whichever page the model finds
it (its `page`, where the key gives one, is asked for it and preferred); ids are read as pages print them (`Q5`,
`第五题`, `5.`, `(5)`, `5(2)`). Writes OUT/pages/<page>.json (items in page pixels: box, transcription,
answer, judgment, points; the raw reply and its parse status), OUT/overlays/<page>.png, OUT/grades.csv (one row per
item), OUT/totals.csv (one row per page: what it holds), OUT/questions.csv (one row per keyed question of a
document), OUT/documents.csv, OUT/students.csv and OUT/summary.json. A rerun skips the pages already graded; one
with other settings is refused (--overwrite regrades). An unreadable page (a truncated JPEG, a damaged PDF) is
skipped with a warning and listed in summary.json; a page whose prompt does not fit --max-model-len or that an
endpoint refuses is written with status "error". The next run tries both again.

Each item carries the confidences of its judgment and box (from the reply's token logprobs). With a review
threshold (--review-threshold, or by default the one eval/select_checkpoint.py chose on validation and recorded in
the checkpoint; --target-accuracy / --review-budget choose anew from that recorded validation table), the items
whose judgment confidence is below it, or that have none, are marked `review` for a teacher.
"""

from __future__ import annotations

import sys

from gbtrain.cli import parse_options, user_errors
from gbtrain.grading.grade import GradeRun, grade_pages
from gbtrain.text import brief


def main() -> None:
    run = parse_options(GradeRun, __doc__)
    with user_errors("grade_pages"):
        summary = grade_pages(run)
    for bad in summary["unreadable"]:
        print(f"grade_pages: warning: {bad['error']} (skipped; the next run tries it again)", file=sys.stderr)
    threshold = summary["review_threshold"]
    if threshold and summary["without_confidence"]:
        print(f"grade_pages: warning: {summary['without_confidence']} of {summary['items']} items have no judgment "
              f"confidence (the backend gave no logprobs, or the item has no judgment): all are marked for review",
              file=sys.stderr)
    print(f"graded {summary['graded_now']} pages now, {summary['pages']} in all: {summary['items']} items, "
          f"{summary['right']} judged right, {summary['wrong']} wrong, {summary['unjudged']} not judged; "
          f"{summary['unparsable']} unparsable replies, {summary['errors']} errors, "
          f"{len(summary['unreadable'])} unreadable pages skipped")
    if threshold:
        print(f"review: {summary['review']} of {summary['items']} items (judgment confidence below "
              f"{threshold['threshold']:.2f}, from {threshold['source']})")
    if run.answer_key:
        print(f"answer key, once per document ({len(summary['per_document'])}): {summary['missing']} questions found "
              f"on no page of their document (0 points, for review), {summary['duplicate']} answered more than once "
              f"(one kept, the others for review), {summary['by_reference']} items matched to a question by their "
              f"answer alone (no question id), {summary['by_position'] or 0} by position (the key's #k), "
              f"{summary['unkeyed']} matched to none")
        if summary["unkeyed_ids"]:
            shown = ", ".join(f"{brief(qid, 40)} x{n}" for qid, n in list(summary["unkeyed_ids"].items())[:10])
            print(f"answer key: ids no keyed question has: {shown}"
                  + (f" and {len(summary['unkeyed_ids']) - 10} more (summary.json)" if len(summary["unkeyed_ids"]) > 10
                     else ""))
    tables = ["grades.csv", "totals.csv", "questions.csv", "documents.csv",
              *(["students.csv"] if summary["per_student"] is not None else [])]
    print(f"tables: {', '.join(f'{run.out}/{t}' for t in tables)}; per page: {run.out}/pages, {run.out}/overlays")


if __name__ == "__main__":
    main()

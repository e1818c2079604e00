"""What the teachers changed: per item, per question type and in all (the re-grade rate), as review_report.json
and .md."""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

from gbtrain.grading.review import CHANGES, Graded, Review, Reviewed, model_points, model_verdict
from gbtrain.metric.points import points_errors, verdict_errors
from gbtrain.schema import (
    RIGHT,
    Box,
)
from gbtrain.text import markdown_code, markdown_text


def changes(r: Reviewed, box_iou: float) -> list[str]:
    """What the teacher changed of one item (CHANGES; none: the model's grade stands). A keyed question the model
    found on no page (review.missing_item) is added where the teacher gives it a box, and stands otherwise (the
    teacher found no answer to it there)."""
    if r.model is None:
        return ["added"]
    if r.model.get("missing"):
        return ["added"] if r.teacher is not None and r.teacher.box is not None else []
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
    if (t.question_id or None) != (m.get("question_id") or None):
        kinds.append("question_id")
    return kinds


def direction(items: list[Reviewed]) -> dict:
    """The model's errors the teachers found, by whom they hurt (gbtrain.metric.points): verdicts and points that
    cost students marks, and those that gave marks, over the items both graded."""
    both = [r for r in items if r.model is not None and r.teacher is not None]
    verdicts = [(r.teacher.verdict == RIGHT, model_verdict(r.model) == RIGHT) for r in both
                if r.teacher.verdict is not None]
    scored = [(r.teacher.score, model_points(r.model)) for r in both
              if r.teacher.score is not None and model_points(r.model) is not None]
    return {"verdicts": verdict_errors(verdicts), "points": points_errors(scored)}


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
        "unreviewed": review.unreviewed, "not_shown": review.not_shown, "foreign_tasks": review.foreign_tasks,
        "pages": {"reviewed": len(review.pages), "unreviewed": review.unreviewed_pages},
        "changes": {kind: sum(kind in r.changes for r in changed) for kind in CHANGES},
        "errors": direction(review.items),
        "points_changes": {"count": len(sizes), "mean_abs": round(statistics.fmean(sizes), 6) if sizes else None,
                           "max_abs": max(sizes) if sizes else None},
        "teachers": {"rule": review.teachers.get("rule"), "tasks_with_two": review.teachers.get("tasks_with_two", 0),
                     "counted": dict(review.teachers.get("counted") or {})} if review.teachers else None,
        "disagreements": review.disagreements,
        "reasons": dict(Counter(r.reason for r in changed if r.reason).most_common()),
        "changed_without_reason": sum(not r.reason for r in changed),
        "by_question_type": {t: {"reviewed": len(rs), "changed": sum(bool(r.changes) for r in rs),
                                 "regrade_rate": _rate(sum(bool(r.changes) for r in rs), len(rs)),
                                 "errors": direction(rs)} for t, rs in sorted(types.items())},
        "changed_items": [{"page": r.page, "item": None if r.model is None or r.model["index"] is None else
                           r.model["index"] + 1,
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


_RULES = {"ground-truth": "the annotation marked ground truth, else the first submitted",
          "first": "the first submitted", "last": "the last submitted",
          "agreement": "the first submitted; a page where they differ is not written as data"}


def _grade_text(g: dict | None) -> str:
    if g is None:
        return "no region"
    return markdown_text(f"{g['verdict']}" + (f", {g['score']:g} points" if g["score"] is not None else "")
                         + (f", \"{g['text']}\"" if g["text"] else ""))


def _points_text(p: dict) -> str:
    return (f"{p['costs_marks']['points']:g} in {p['costs_marks']['n']} / "
            f"{p['gives_marks']['points']:g} in {p['gives_marks']['n']}")


def report_markdown(rep: dict) -> str:
    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{100 * v:.1f}%"

    lines = ["# Review of the model's grades", "",
             f"Graded folder: {markdown_code(rep['graded'])}; review: {markdown_code(rep['reviewed_file'])} "
             f"({rep['source']}).", "",
             f"**Re-grade rate: {pct(rep['regrade_rate'])}** ({rep['changed']} of {rep['reviewed']} reviewed items "
             f"changed by the teacher; {rep['unreviewed']} items not reviewed and not counted"
             + (f"; {rep['not_shown']} items without a box not shown" if rep["not_shown"] else "") + ")."
             + (f" {rep['foreign_tasks']} tasks the export did not make (a storage sync's, not annotated) were "
                f"skipped." if rep.get("foreign_tasks") else ""), "",
             "Verdicts and points the teachers corrected, by whom the model's error hurt: *costs* marks a student "
             "earned (the teacher's right judged wrong, points below the teacher's), *gives* marks the teacher did "
             "not.", "",
             "| question type | reviewed | changed | re-grade rate | verdicts: costs / gives | points: costs / gives |",
             "|---|---|---|---|---|---|"]
    rows = [*rep["by_question_type"].items(), ("all", {**rep, "errors": rep["errors"]})]
    lines += [f"| {markdown_text(t)} | {v['reviewed']} | {v['changed']} | {pct(v['regrade_rate'])} | "
              f"{v['errors']['verdicts']['costs_marks']} / {v['errors']['verdicts']['gives_marks']} | "
              f"{_points_text(v['errors']['points'])} |" for t, v in rows]
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
    teachers = rep.get("teachers")
    if teachers:
        counted = ", ".join(f"{markdown_text(who)} {n}" for who, n in teachers["counted"].items()) or "none"
        lines += ["", f"Whose grade counts: rule `{teachers['rule']}` ({_RULES[teachers['rule']]}); tasks annotated by "
                      f"two teachers: {teachers['tasks_with_two']}; tasks counted per teacher: {counted}."]
    if rep.get("disagreements"):
        lines += ["", f"Where the two teachers differ ({len(rep['disagreements'])}; the other teacher's points are "
                      f"kept as score_2):", "", "| page | question | differs in | counted | other |",
                  "|---|---|---|---|---|"]
        lines += [f"| {markdown_text(d['page'])} | {markdown_text(str(d['question_id'] or d['region']))} | "
                  f"{', '.join(d['differs'])} | {markdown_text(d['counted'])}: {_grade_text(d['counted_grade'])} | "
                  f"{markdown_text(d['other'])}: {_grade_text(d['other_grade'])} |" for d in rep["disagreements"]]
    left_out = rep.get("written", {}).get("left_out") or []
    if left_out:
        lines += ["", f"Reviewed pages left out of the training data ({len(left_out)}): fix them in the review and "
                      f"import again.", "", "| page | why |", "|---|---|"]
        lines += [f"| {markdown_text(p['page'])} | {markdown_text(p['why'])} |" for p in left_out]
    return "\n".join(lines) + "\n"

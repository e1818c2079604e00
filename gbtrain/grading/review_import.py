"""The review's import: the teachers' sheet or Label Studio export read back against the graded items, and the
reviewed pages written as a GradingBench folder (eval/review.py import)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections import Counter
from pathlib import Path

from PIL import Image

from gbtrain.data.annotations import (
    BOX_TOLERANCE_FRACTION,
    blank_answer_problem,
    load_dataset,
    points_problem,
    write_level,
    write_manifest,
)
from gbtrain.data.converters.labelstudio import (
    counted_annotation,
    read_task,
    read_tasks,
    submitted,
    teacher_of,
)
from gbtrain.data.converters.sources import rectangle
from gbtrain.data.pages import Crop, PageOutput, crop_jpeg, question_records, write_page
from gbtrain.files import write_atomic
from gbtrain.grading.review import (
    CONFIG,
    IMAGES,
    MISSING,
    MISSING_PREFIX,
    NO,
    REGION_PREFIX,
    REPORT,
    REVIEW,
    TASKS,
    WRITTEN,
    YES,
    Graded,
    GradedPage,
    Review,
    Reviewed,
    ReviewRun,
    missing_item,
    model_points,
    model_verdict,
    placeholder_box,
    read_graded,
    shown_question_id,
)
from gbtrain.grading.review_export import TEACHER_COLUMNS
from gbtrain.grading.review_report import report, report_markdown
from gbtrain.outputs import REVIEW_RECORD, claim_output_folder, overlapping
from gbtrain.schema import (
    QUESTION_TYPE_ALIASES,
    QUESTION_TYPES,
    UNKNOWN,
    VERDICTS,
    Box,
    Mark,
    Record,
)
from gbtrain.text import brief, csv_cell, safe_name
from gbtrain.values import points_from_text, verdict_of
from gbtrain.vocabulary import L1, L2, L3


def _number(text: str | None, where: str, what: str) -> float | None:
    """A number (of points, or a box's pixels) as a teacher writes it (`2.5`, `2,5`); None when empty."""
    if text is None or not text.strip():
        return None
    try:
        value = float(points_from_text(text))
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        kind = "a pixel position" if what in BOX_COLUMNS else "a number of points"
        raise ValueError(f"{where}: {what} {brief(text.strip(), 40)} is not {kind}: write a number, or leave it empty")
    return int(value) if value.is_integer() else value


def _verdict(text: str, where: str) -> str:
    value = text.strip()
    label = verdict_of(value)
    if label is None:
        raise ValueError(f"{where}: correctness {brief(value, 40)} is not a verdict: write one of "
                         f"{', '.join(VERDICTS)} (or true / false), or leave it empty")
    return label


def _question_type(text: str | None, where: str) -> str | None:
    if text is None or not text.strip():
        return None
    value = QUESTION_TYPE_ALIASES.get(text.strip())
    if value is None:
        raise ValueError(f"{where}: question type {brief(text.strip(), 40)} is not one of {', '.join(QUESTION_TYPES)}")
    return value


def _by_id(pages: list[GradedPage], graded: Path, where: str, given: str | None) -> GradedPage:
    found = next((p for p in pages if p.review_id == given), None)
    if found is None:
        raise ValueError(f"{where}: review id {brief(given, 40)} names no page of {graded} (made from another graded "
                         f"folder, or the page was graded again since): import what eval/review.py export wrote "
                         f"from this folder, or export again")
    return found


def _sheet_dialect(text: str, path: Path) -> str:
    head = text.split("\n", 1)[0]
    for delimiter in (",", ";", "\t"):  # a spreadsheet saved in a locale whose list separator is not a comma
        if all(c in next(csv.reader([head], delimiter=delimiter)) for c in ("item", "review_id", *TEACHER_COLUMNS)):
            return delimiter
    if all(column in head for column in ("annotation_id", "annotator", "lead_time")):  # Label Studio's CSV columns
        raise ValueError(f"--reviewed {path}: a Label Studio CSV export, which keeps no region's own values: export "
                         f"the project as Label Studio's \"JSON\" and import that")
    raise ValueError(f"--reviewed {path}: not a review sheet (its header lacks item, review_id, "
                     f"{', '.join(TEACHER_COLUMNS)}): pass the review.csv that eval/review.py export wrote, or a "
                     f"Label Studio JSON export")


BOX_COLUMNS = ("x1", "y1", "x2", "y2")


def _cell_text(value: str | None) -> str:
    """A text cell as the teacher left it: the `'` the export put before a formula-like text taken off again."""
    text = value or ""
    return text[1:] if text[:1] == "'" and csv_cell(text[1:]) == text else text


def sheet_box(row: dict, page: GradedPage, where: str) -> list[float] | None:
    """The box columns: four numbers in page pixels (a box slightly past the page edge clipped to it), or none
    when all four are empty; anything else names the row."""
    cells = [(row.get(c) or "").strip() for c in BOX_COLUMNS]
    if not any(cells):
        return None
    if not all(cells):
        raise ValueError(f"{where}: give all four of x1, y1, x2, y2 (in page pixels), or none")
    box = [_number(c, where, name) for c, name in zip(cells, BOX_COLUMNS, strict=True)]
    width, height = page.record["width"], page.record["height"]
    slack = BOX_TOLERANCE_FRACTION * max(width, height)
    if not (box[0] < box[2] and box[1] < box[3] and -slack <= box[0] and -slack <= box[1]
            and box[2] <= width + slack and box[3] <= height + slack):
        raise ValueError(f"{where}: box {box} is not a box on the {width}x{height} page (x1 < x2, y1 < y2, in page "
                         f"pixels): correct it, or restore the exported one")
    return [min(max(box[0], 0), width), min(max(box[1], 0), height), min(max(box[2], 0), width),
            min(max(box[3], 0), height)]


def sheet_edits(row: dict, item: dict, page: GradedPage, where: str) -> list[str]:
    """Which of the model's columns the teacher changed in place: question_id, text, the box, the full score."""
    changed = []
    if _number(row.get("full_score"), where, "full_score") != item.get("full_score"):
        changed.append("full_score")
    if _cell_text(row.get("question_id")).strip() != (item["question_id"] or ""):
        changed.append("question_id")
    if _cell_text(row.get("text")) != item["text"]:
        changed.append("text")
    box = sheet_box(row, page, where)
    if (box is None) != (item["box"] is None) or (box is not None and any(
            abs(a - b) > 0.05 for a, b in zip(box, item["box"], strict=True))):
        changed.append("box")
    return changed


def key_full_score(item: dict, full: float | None, where: str) -> None:
    """A teacher may give a full score where the answer key gave none, never change the key's: the key decides a
    question's points, for every student."""
    key_full = item.get("full_score")
    if key_full is not None and full != key_full:
        raise ValueError(f"{where}: full_score {full} is not the answer key's {key_full:g}: the key decides a "
                         f"question's points (change the key and grade again), so leave it as exported")


def sheet_grade(row: dict, item: dict, page: GradedPage, where: str, edits: list[str]) -> Graded:
    """The item as the teacher left it in the sheet: their verdict and points (the model's where empty), the
    question id, transcription and box as edited (`edits`: sheet_edits of the row), a second teacher's points and
    the arbitration note. The full score is the answer key's: a sheet that changes it is refused (a teacher may give
    one where the key had none)."""
    full = _number(row.get("full_score"), where, "full_score")
    key_full_score(item, full, where)
    score = _number(row.get("score"), where, "score")
    verdict = _verdict(row["correctness"], where) if (row.get("correctness") or "").strip() else model_verdict(item)
    box = sheet_box(row, page, where) if "box" in edits else item["box"]
    teacher = Graded(box, verdict, model_points(item) if score is None else score, full, _cell_text(row.get("text")),
                     _cell_text(row.get("question_id")).strip() or None,
                     _question_type(row.get("question_type"), where) or item.get("question_type"),
                     item.get("reference"), _number(row.get("score_2"), where, "score_2"),
                     (row.get("arbitration") or "").strip() or None)
    if teacher.score_2 is not None and teacher.score is None:
        raise ValueError(f"{where}: score_2 (a second teacher's points) without score: fill score too")
    # (a full score without points: an item accepted whose model's score was no grade; it keeps no points)
    problem = points_problem(full, teacher.score, teacher.score_2) if teacher.score is not None else \
        points_problem(full, 0, None) if full is not None else None
    if problem:
        raise ValueError(f"{where}: {problem} (the full_score column)")
    return teacher


def read_sheet(path: Path, pages: list[GradedPage], graded: Path) -> Review:
    """The reviewed sheet: a row is reviewed when its `reviewed` column says yes, a teacher's column is filled or a
    model's column (question_id, text, box) was edited; `reviewed` saying no beside a correction is an error naming
    the row. An empty correctness or score keeps the model's. A page is reviewed whole when each of its items is."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"--reviewed {path}: not UTF-8 text: save the sheet as CSV UTF-8") from None
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise ValueError(f"--reviewed {path} line {line}: a NUL character, which no spreadsheet writes (a damaged "
                         f"file?): save the sheet again as CSV UTF-8")
    reader = csv.DictReader(io.StringIO(text), delimiter=_sheet_dialect(text, path))
    try:
        rows = list(reader)
    except csv.Error as e:  # a cell past the csv module's field limit, an unclosed quote in strict dialects
        raise ValueError(f"--reviewed {path} after line {reader.line_num}: not a CSV row ({e}): save the sheet "
                         f"again as CSV UTF-8") from None
    review = Review("csv")
    seen: dict[tuple[str, int], int] = {}
    done: Counter = Counter()
    for n, row in enumerate(rows, start=2):  # the header is line 1
        where = f"{path} line {n}"
        page = _by_id(pages, graded, where, row.get("review_id"))
        items = page.record["items"]
        number = (row.get("item") or "").strip()
        item = items[int(number) - 1] if number.isdigit() and 1 <= int(number) <= len(items) else None
        if item is None and not number:
            item = _missing_row(row, page, where)
        if item is None:
            raise ValueError(f"{where}: item {brief(row.get('item'), 20)} is not an item of page {page.name} (1-"
                             f"{len(items)}): keep the sheet's page, item and review_id columns as exported")
        where = f"{where} (page {page.name}, " + (f"item {item['index'] + 1})" if item["index"] is not None else
                                                  f"missing question {item['question_id']})")
        key = (page.review_id, item["index"] if item["index"] is not None else f"missing{item['missing']}")
        if key in seen:
            raise ValueError(f"{where}: the item is on line {seen[key]} too: keep one row per item")
        seen[key] = n
        said = (row.get("reviewed") or "").strip().lower()
        if said and said not in YES + NO:
            raise ValueError(f"{where}: reviewed {brief(said, 20)} is neither yes nor no: write yes, or leave it empty")
        edits = sheet_edits(row, item, page, where) if item["index"] is not None else [
            *(["text"] if (row.get("text") or "").strip() else []),
            *(["box"] if any((row.get(c) or "").strip() for c in BOX_COLUMNS) else [])]
        corrected = [c for c in TEACHER_COLUMNS[1:] if (row.get(c) or "").strip()] + edits
        if said in NO and corrected:
            raise ValueError(f"{where}: reviewed says {brief(said, 10)} but the row holds a correction "
                             f"({', '.join(corrected)}): write yes to keep it, or clear it")
        if said in NO or not (said in YES or corrected):
            review.unreviewed += 1
            continue
        done[page.review_id] += 1
        if item["index"] is None and edits and not (row.get("correctness") or "").strip():
            raise ValueError(f"{where}: a box or transcription for a question the model did not find, without its "
                             f"correctness: write right, wrong, half_right or unanswered under correctness")
        teacher = sheet_grade(row, item, page, where, edits)
        review.items.append(Reviewed(page.name, item, teacher, (row.get("reason") or "").strip() or None))
    rows_of = {p.review_id: len(p.record["items"]) + len(p.missing) for p in pages}
    review.unreviewed += sum(rows_of.values()) - len(seen)
    review.pages = {p.name: p for p in pages if rows_of[p.review_id] and done[p.review_id] == rows_of[p.review_id]}
    review.unreviewed_pages = sum(done[p.review_id] < rows_of[p.review_id] for p in pages)
    return review


def _missing_row(row: dict, page: GradedPage, where: str) -> dict | None:
    """The keyed question a row without an item number stands for (the export's rows of questions the model found
    on no page of the document), by its question id as exported; None when the row is no such row."""
    if (row.get("model_correctness") or "").strip() != MISSING:
        return None
    qid = _cell_text(row.get("question_id")).strip()
    k = next((k for k, q in enumerate(page.missing) if q["question_id"] == qid), None)
    if k is None:
        raise ValueError(f"{where}: question {brief(qid, 40)} is not one the page {page.name} was asked to look for: "
                         f"keep a missing question's question_id as exported")
    return missing_item(page, k)


def read_labelstudio(path: Path, pages: list[GradedPage], graded: Path, box_iou: float,
                     rule: str = "ground-truth") -> Review:
    """The Label Studio JSON export of the review tasks. A task without a submitted annotation (none, or all
    cancelled) is unreviewed; in a reviewed one each region is matched to the model's item by its region id (the
    prediction's region, kept), else by the best box IoU of at least box_iou; a region left over was added, an item
    left over was deleted."""
    review = Review("labelstudio", teachers={"rule": rule, "tasks_with_two": 0, "counted": Counter()})
    seen: dict[str, str] = {}
    for i, task in enumerate(read_tasks(path)):
        where = f"{path} task {task.get('id', f'#{i}')}"
        data = task.get("data") if isinstance(task.get("data"), dict) else {}
        if "review_id" not in data:  # a task Label Studio made itself (a storage sync adds one per image file)
            if submitted(task):
                raise ValueError(f"{where}: an annotated task that eval/review.py export did not make (no review_id "
                                 f"in its data; a storage sync adds one per image): annotate the exported tasks "
                                 f"(import {REVIEW}/{TASKS} into the project), not the synced images")
            review.foreign_tasks += 1
            continue
        page = _by_id(pages, graded, where, data.get("review_id"))
        if page.review_id in seen:
            raise ValueError(f"{where}: page {page.name} is task {seen[page.review_id]} too: export one project, "
                             f"with each page imported once")
        seen[page.review_id] = str(task.get("id", f"#{i}"))
        review.not_shown += len(page.record["items"]) - len(page.shown)
        if not submitted(task):
            review.unreviewed += len(page.shown) + len(page.missing)
            continue
        matched = _matched(page, _regions(path, task, i, page, rule, box_iou, review), box_iou)
        left = [r for r in matched if r.model is not None and r.model.get("missing") and r.teacher is not None
                and _left_as_exported(r.teacher, page, r.model["missing"] - 1)]
        if left:  # a submitted task says nothing of those questions: the page may lack their answers
            review.placeholders_left[page.name] = [r.model["question_id"] for r in left]
            review.unreviewed += len(left)
        review.items += [r for r in matched if r not in left]
        review.pages[page.name] = page
    review.unreviewed += sum(len(p.shown) + len(p.missing) for p in pages if p.review_id not in seen)
    review.not_shown += sum(len(p.record["items"]) - len(p.shown) for p in pages if p.review_id not in seen)
    review.unreviewed_pages = len(pages) - len(review.pages)
    return review


def _graded(item, page: GradedPage, where: str) -> tuple[Graded, str | None]:
    """One region of a teacher's annotation as the teacher left it, and their reason; what cannot be a grade (no
    shape, a label that is no verdict, points outside the full score, a blank answer not labelled unanswered) is an
    error naming it. A missing question's region left where the export put it is taken as it is (not reviewed)."""
    if item.points is None:
        raise ValueError(f"{where}: {item.problem}: fix it in Label Studio and export again")
    verdict = verdict_of(item.label)
    if verdict is None:
        raise ValueError(f"{where}: label {brief(item.label, 40)} is not a verdict ({', '.join(VERDICTS)}): set up the "
                         f"project with {REVIEW}/{CONFIG}")
    w, h = page.record["width"], page.record["height"]
    box = Box.enclosing(item.points).clip(w, h)
    a = item.attributes
    full, score = _number(a.get("full_score"), where, "full_score"), _number(a.get("score"), where, "score")
    problem = points_problem(full, score, None) if score is not None else None  # no score: right / wrong only
    if problem:
        raise ValueError(f"{where}: {problem}: set it in Label Studio and export again")
    text = a.get("hand", "")
    graded = Graded([round(v, 1) for v in box.as_list()] if box.area > 0 else None, verdict, score, full, text,
                    (a.get("qid") or "").strip() or None, _question_type(a.get("type"), where),
                    (a.get("std") or "").strip() or None, None, (a.get("arbitration") or "").strip() or None)
    return graded, (a.get("reason") or "").strip() or None


def _placeholder_left(region_id: str | None, graded: Graded, page: GradedPage) -> bool:
    """Whether a region is a missing question's placeholder that nobody touched (_left_as_exported)."""
    rid = region_id or ""
    number = rid[len(MISSING_PREFIX):]
    return rid.startswith(MISSING_PREFIX) and number.isdigit() and 1 <= int(number) <= len(page.missing) and \
        _left_as_exported(graded, page, int(number) - 1)


def _regions(path: Path, task: dict, index: int, page: GradedPage, rule: str, box_iou: float,
             review: Review) -> list[tuple[str | None, Graded, str | None]]:
    """The regions of the task's counted annotation (labelstudio.counted_annotation under `rule`) as (region id,
    the teacher's item, reason). Where a second teacher annotated the task too, each of their regions is paired
    with the counted one of its id, else of the best box IoU of at least `box_iou`: its points become score_2, and
    every difference (verdict, points, transcription, question id, box, a region only one of them has) is listed
    in review.disagreements, never dropped and never refused."""
    where = f"{path} task {task.get('id', f'#{index}')}"
    done = submitted(task)
    if len(done) > 2:
        raise ValueError(f"{where}: {len(done)} submitted annotations: the review keeps two teachers (score and "
                         f"score_2, settled in arbitration): cancel the others in Label Studio and export again")
    counted, other = counted_annotation(task, rule)
    if rule == "ground-truth" and other is not None and all(a.get("ground_truth") for a in done):
        raise ValueError(f"{where}: both annotations are marked ground truth: unmark one in Label Studio, or pass "
                         f"--teachers first, last or agreement")
    regions = [(item.region_id, *_graded(item, page, f"{path} {item.where}"))
               for item in read_task(path, task, index, "image", counted).items]
    review.teachers.setdefault("counted", Counter())[teacher_of(counted)] += 1
    if other is None:
        return regions
    review.teachers["tasks_with_two"] = review.teachers.get("tasks_with_two", 0) + 1
    names = (teacher_of(counted), teacher_of(other))
    seconds = [(item.region_id, *_graded(item, page, f"{path} {item.where} (the other teacher's)"))
               for item in read_task(path, task, index, "image", other).items]
    seconds = [s for s in seconds if not _placeholder_left(s[0], s[1], page)]
    paired = _pair(regions, seconds, box_iou)
    out = []
    for k, (rid, first, reason) in enumerate(regions):
        j = paired.get(k)
        if j is None:
            if not _placeholder_left(rid, first, page):
                _disagree(review, page, rid, first, None, names, ["only the counted teacher's"])
            out.append((rid, first, reason))
            continue
        second = seconds[j][1]
        differs = [what for what, a, b in (
            ("verdict", first.verdict, second.verdict), ("points", first.score, second.score),
            ("transcription", " ".join(first.text.split()), " ".join(second.text.split())),
            ("question_id", first.question_id, second.question_id)) if a != b]
        if (first.box is None) != (second.box is None) or (
                first.box and second.box and Box(*first.box).iou(Box(*second.box)) < box_iou):
            differs.append("box")
        if differs:
            _disagree(review, page, rid, first, second, names, differs)
        if second.score is not None and first.score is not None:
            problem = points_problem(first.full_score, first.score, second.score)
            if problem:
                raise ValueError(f"{where}, region {rid!r}: {problem} (the other teacher's score)")
            first = dataclasses.replace(first, score_2=second.score)
        out.append((rid, first, reason))
    taken = set(paired.values())
    for j, (rid, second, _) in enumerate(seconds):
        if j not in taken:
            _disagree(review, page, rid, None, second, names, ["only the other teacher's"])
    return out


def _pair(regions: list, seconds: list, box_iou: float) -> dict[int, int]:
    """Each counted region's index -> the other teacher's region it is: the one of its id, else the one of the best
    box IoU of at least `box_iou` (both added the same missed answer, each with a region id of their own)."""
    paired: dict[int, int] = {}
    free = set(range(len(seconds)))
    for k, (rid, _, _) in enumerate(regions):
        j = next((j for j in sorted(free) if seconds[j][0] == rid), None)
        if j is not None:
            paired[k] = j
            free.discard(j)
    by_iou = sorted(((Box(*regions[k][1].box).iou(Box(*seconds[j][1].box)), k, j) for k in range(len(regions))
                     if k not in paired and regions[k][1].box for j in free if seconds[j][1].box), reverse=True)
    for iou, k, j in by_iou:
        if iou >= box_iou and k not in paired and j in free:
            paired[k] = j
            free.discard(j)
    return paired


def _disagree(review: Review, page: GradedPage, region: str | None, first: Graded | None, second: Graded | None,
              names: tuple[str, str], differs: list[str]) -> None:
    """One difference between two teachers' annotations of a page, kept whole for the report."""
    def view(g: Graded | None) -> dict | None:
        return None if g is None else {"verdict": g.verdict, "score": g.score, "text": g.text,
                                       "question_id": g.question_id, "box": g.box}

    review.disagreements.append({"page": page.name, "region": region, "question_id": (first or second).question_id,
                                 "differs": differs, "counted": names[0], "other": names[1],
                                 "counted_grade": view(first), "other_grade": view(second)})


def _left_as_exported(teacher: Graded, page: GradedPage, k: int) -> bool:
    """Whether a missing question's region (review.placeholder_box) is where the export put it, still unknown and
    with no transcription: nobody looked for that question on the page."""
    if teacher.verdict != UNKNOWN or teacher.text.strip() or teacher.box is None:
        return False
    w, h = page.record["width"], page.record["height"]
    g = placeholder_box(k)
    exported = [g["x"] * w / 100, g["y"] * h / 100, (g["x"] + g["width"]) * w / 100,
                (g["y"] + g["height"]) * h / 100]
    return all(abs(a - b) <= 1 for a, b in zip(teacher.box, exported, strict=True))


def _matched(page: GradedPage, regions: list[tuple[str | None, Graded, str | None]], box_iou: float) -> list[Reviewed]:
    """The task's regions paired with the model's items: by region id (the prediction's, kept), else by the best
    box IoU; a keyed question the model missed (review.missing_item) pairs with its placeholder region only."""
    items = {f"{REGION_PREFIX}{it['index'] + 1}": it for it in page.shown}
    items |= {f"{MISSING_PREFIX}{k + 1}": missing_item(page, k) for k in range(len(page.missing))}
    pairs: list[Reviewed] = []
    left = []
    for rid, teacher, reason in regions:
        model = items.pop(rid, None) if rid is not None else None
        if model is not None:
            pairs.append(Reviewed(page.name, model, teacher, reason))
        else:
            left.append((teacher, reason))
    scored = sorted(((Box(*t.box).iou(Box(*m["box"])), k, rid) for k, (t, _) in enumerate(left) if t.box
                     for rid, m in items.items() if m["box"] is not None), reverse=True)
    taken: set[int] = set()
    for iou, k, rid in scored:
        if iou >= box_iou and k not in taken and rid in items:
            taken.add(k)
            pairs.append(Reviewed(page.name, items.pop(rid), left[k][0], left[k][1]))
    pairs += [Reviewed(page.name, None, t, reason) for k, (t, reason) in enumerate(left) if k not in taken]
    pairs += [Reviewed(page.name, m, None) for m in items.values()]
    for r in pairs:
        if r.model is not None and r.teacher is not None:
            if not r.model["question_id"] and r.teacher.question_id == shown_question_id(r.model):
                r.teacher = dataclasses.replace(r.teacher, question_id=None)  # the export's placeholder, kept
            key_full_score(r.model, r.teacher.full_score, f"page {page.name}, " + (
                f"item {r.model['index'] + 1}" if r.model["index"] is not None else
                f"missing question {r.model['question_id']}"))
    return pairs


def page_marks(items: list[Reviewed]) -> tuple[list[Mark], str | None]:
    """A reviewed page's answer marks: each item as the teacher left it (deleted ones left out; in points where the
    teacher's score is given; a question the model missed and the teacher found nowhere, too), its id the question
    id; an item of the model's without a box (cleared), or with a box of no area, keeps its page out of the data,
    named; and why the page cannot be training
    data as it stands (None when it can). Items given one question id are one group, as in GradingBench (an answer
    in two boxes), so they must agree on their points; an item with no question id (the model named none, and the
    teacher gave none) has none to train on: the export's placeholders (`item<n>`) never become a question id; a
    box with no transcription whose verdict is not unanswered (a teacher drew it and typed nothing) would teach a
    blank answer: its grade counts in the report, its page is not data until it is transcribed."""
    marks = []
    for r in items:
        t = r.teacher
        if t is None:  # deleted by the teacher
            continue
        if t.box is None and r.model and r.model["index"] is None:  # a question the model missed, found on no page
            continue
        where = (f"item {r.model['index'] + 1}" if r.model and r.model["index"] is not None else
                 f"question {r.model['question_id']}" if r.model else "a region the teacher added")
        if t.box is None or t.box[2] <= t.box[0] or t.box[3] <= t.box[1]:
            what = "no box (cleared, or never drawn)" if t.box is None else f"a box of no area {t.box}"
            return [], (f"{where} (question {t.question_id or 'not named'}) has {what}: draw its box around the "
                        f"answer, or delete the item")
        if not t.question_id:
            return [], f"{where} has no question id: give it one in the review (the question it answers)"
        blank = blank_answer_problem(t.text, t.verdict)  # the converters' rule: a box the teacher did not transcribe
        if blank:
            return [], (f"{where} (question {t.question_id}) has a box but no transcription ({blank}): type what the "
                        f"student wrote, or give it the verdict unanswered")
        points = {"full_score": t.full_score, "score": t.score, "score_2": t.score_2,
                  "arbitration": t.arbitration} if None not in (t.score, t.full_score) else {}
        marks.append(Mark(points=rectangle(*t.box), label=t.verdict, raw_label=t.verdict, mark_id=t.question_id,
                          hand=t.text, std=t.reference, question_type=t.question_type or "Other",
                          rubric=(r.model or {}).get("rubric") if points else None, **points))
    for qid in {m.mark_id for m in marks}:
        same = [m for m in marks if m.mark_id == qid]
        for attr in ("score", "full_score", "score_2"):
            if len({getattr(m, attr) for m in same}) > 1:
                return [], (f"question {brief(qid, 40)} is given {len(same)} boxes with different {attr}s: one "
                            f"question is one group (its boxes share their points); delete the extra box, or give the "
                            f"other its own question id")
    return marks, None


def _crops(image: bytes, crops: list[tuple[Record, Crop]]) -> list[tuple[Record, bytes]]:
    """Each L1 record with its crop of the page image, as JPEG (as the converters write crops)."""
    with Image.open(io.BytesIO(image)) as page:
        page.load()
        return [(record, crop_jpeg(page, crop)) for record, crop in crops]


def write_pages(review: Review, images: Path, out: Path, subject: str) -> dict:
    """The pages reviewed whole as a GradingBench folder, every level the SFT builder reads: L3 (the page), L2 (one
    record per question) and L1 (its crop), made as the converters make them (data.pages.question_records), written
    as the generator writes pages and read back by the strict reader; returns the records (L3 pages) and marks
    written, the records per level, and the pages left out (page_marks: a page whose marks cannot be training data
    as they stand), each with why."""
    by_page: dict[str, list[Reviewed]] = {}
    for r in review.items:
        by_page.setdefault(r.page, []).append(r)
    levels: dict[str, list[Record]] = {L1: [], L2: [], L3: []}
    left_out = []
    for name, page in review.pages.items():
        marks, problem = page_marks(by_page.get(name, []))
        disputed = sorted({str(d["question_id"] or d["region"]) for d in review.disagreements if d["page"] == name})
        if not problem and disputed and review.teachers.get("rule") == "agreement":
            problem = (f"the two teachers differ on question(s) {', '.join(disputed)} (listed in the report): settle "
                       f"them in Label Studio (or import with another --teachers rule)")
        if not problem and name in review.placeholders_left:
            problem = (f"question(s) {', '.join(review.placeholders_left[name])} found on no page by the model were "
                       f"left where the export put them: move each onto its answer and grade it, or delete it "
                       f"where the page holds none")
        if problem:
            left_out.append({"page": name, "why": problem})
            continue
        record_id = safe_name(name)  # as the page file's name: unique in the graded folder
        record = Record(record_id, L3, subject, f"{safe_name(subject)}/{page.image}", page.record["width"],
                        page.record["height"], marks)
        l2, l1 = question_records(record)
        image = (images / page.image).read_bytes()
        write_page(out, PageOutput(record_id, subject, image, record, l2, _crops(image, l1)))
        levels[L3].append(record)
        levels[L2] += l2
        levels[L1] += [r for r, _ in l1]
    levels = {level: records for level, records in levels.items() if records}
    for level, records in levels.items():
        write_level(out, level, records)
    write_manifest(out, levels)
    loaded = load_dataset(out) if levels else {}
    pages = loaded[L3].records if L3 in loaded else []
    return {"records": len(pages), "marks": sum(len(r.marks) for r in pages),
            "levels": {level: len(ld.records) for level, ld in loaded.items()}, "left_out": left_out}


def check_import(run: ReviewRun) -> tuple[Path, Path, Path]:
    if not run.reviewed or not run.out:
        raise ValueError("import needs --reviewed (the reviewed review.csv or Label Studio's JSON export) and --out "
                         "(the folder to write)")
    if not (0 < run.box_iou <= 1):  # NaN too
        raise ValueError(f"--box-iou {run.box_iou}: choose a value in (0, 1]")
    if not run.subject.strip():
        raise ValueError("--subject: name the pages' subject (e.g. Mathematics)")
    graded, reviewed, out = Path(run.graded), Path(run.reviewed), Path(run.out)
    if reviewed.is_dir():
        raise ValueError(f"--reviewed {reviewed} is a folder: pass the reviewed review.csv, or Label Studio's JSON "
                         f"export of the tasks")
    if not reviewed.is_file():
        raise FileNotFoundError(f"reviewed file not found: {reviewed}")
    problems = overlapping("--out", out, {"--graded": graded})
    ours = {*WRITTEN, REVIEW_RECORD, f"{REPORT}.json", f"{REPORT}.md"}
    foreign = sorted(p.name for p in out.iterdir() if p.name not in ours) if out.is_dir() else []
    if foreign:
        problems.append(f"--out {out} holds {foreign[0]} ({len(foreign)} entries) that an import did not write")
    if out.resolve() in reviewed.resolve().parents:  # an import replaces what --out holds
        problems.append(f"--reviewed {reviewed} lies inside --out {out}")
    if problems:
        raise ValueError(f"{problems[0]}: choose another --out")
    return graded, reviewed, out


def import_review(run: ReviewRun) -> dict:
    """Read the review, write the report and the reviewed pages into --out; returns the report."""
    graded, reviewed, out = check_import(run)
    _, pages = read_graded(graded)
    images = graded / REVIEW / IMAGES
    if reviewed.suffix.lower() in (".csv", ".tsv", ".txt"):
        review = read_sheet(reviewed, pages, graded)
    else:
        review = read_labelstudio(reviewed, pages, graded, run.box_iou, run.teachers)
    if not review.items and not review.pages:
        raise ValueError(f"--reviewed {reviewed}: nothing in it is reviewed: in the sheet, write yes under reviewed "
                         f"or fill a teacher's column; in Label Studio, submit the tasks, then export the project as "
                         f"JSON")
    missing = [p.image for p in review.pages.values() if not (images / p.image).is_file()]
    if missing:
        raise FileNotFoundError(f"{images / missing[0]}: the page image the review showed is gone: run eval/review.py "
                                f"export --graded {graded} again (it changes no review id)")
    rep = report(review, graded, reviewed, run.box_iou)
    claim_output_folder(out, {"tool": "review_import"}, overwrite=True, work=WRITTEN, record=REVIEW_RECORD,
                        discard=True)
    # (claimed with discard: an earlier import's pages are gone, not left to be taken for this one's)
    written = write_pages(review, images, out, run.subject.strip()) if review.pages else {
        "records": 0, "marks": 0, "levels": {}, "left_out": []}
    rep["written"] = {"folder": str(out), **written}
    write_atomic(out / f"{REPORT}.json", json.dumps(rep, ensure_ascii=False, indent=1) + "\n")
    write_atomic(out / f"{REPORT}.md", report_markdown(rep))
    return rep

"""The review's import: the teachers' sheet or Label Studio export read back against the graded items, and the
reviewed pages written as a GradingBench folder (eval/review.py import)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from pathlib import Path

from gbtrain.data.annotations import load_level, points_problem, write_level, write_manifest
from gbtrain.data.converters.labelstudio import read_task, submitted
from gbtrain.data.converters.sources import rectangle
from gbtrain.data.pages import PageOutput, write_page
from gbtrain.files import read_json, write_atomic
from gbtrain.grading.review import (
    CONFIG,
    IMAGES,
    NO,
    REGION_PREFIX,
    REPORT,
    REVIEW,
    WRITTEN,
    YES,
    Graded,
    GradedPage,
    Review,
    Reviewed,
    ReviewRun,
    model_points,
    model_verdict,
    read_graded,
)
from gbtrain.grading.review_export import TEACHER_COLUMNS
from gbtrain.grading.review_report import report, report_markdown
from gbtrain.outputs import REVIEW_RECORD, claim_output_folder, overlapping
from gbtrain.schema import (
    QUESTION_TYPE_ALIASES,
    QUESTION_TYPES,
    VERDICTS,
    Box,
    Mark,
    Record,
)
from gbtrain.text import safe_name
from gbtrain.values import points_from_text, verdict_of
from gbtrain.vocabulary import L3


def _number(text: str | None, where: str, what: str) -> float | None:
    """A number of points as a teacher writes it (`2.5`, `2,5`); None when empty."""
    if text is None or not text.strip():
        return None
    try:
        value = float(points_from_text(text))
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"{where}: {what} {text.strip()!r:.40} is not a number of points: write a number, or leave "
                         f"it empty")
    return int(value) if value.is_integer() else value


def _verdict(text: str, where: str) -> str:
    value = text.strip()
    label = verdict_of(value)
    if label is None:
        raise ValueError(f"{where}: correctness {value!r:.40} is not a verdict: write one of {', '.join(VERDICTS)} "
                         f"(or true / false), or leave it empty")
    return label


def _question_type(text: str | None, where: str) -> str | None:
    if text is None or not text.strip():
        return None
    value = QUESTION_TYPE_ALIASES.get(text.strip())
    if value is None:
        raise ValueError(f"{where}: question type {text.strip()!r:.40} is not one of {', '.join(QUESTION_TYPES)}")
    return value


def _by_id(pages: list[GradedPage], graded: Path, where: str, given: str | None) -> GradedPage:
    found = next((p for p in pages if p.review_id == given), None)
    if found is None:
        raise ValueError(f"{where}: review id {given!r:.40} names no page of {graded} (made from another graded "
                         f"folder, or the page was graded again since): import what eval/review.py export wrote "
                         f"from this folder, or export again")
    return found


def _sheet_dialect(text: str, path: Path) -> str:
    head = text.split("\n", 1)[0]
    for delimiter in (",", ";", "\t"):  # a spreadsheet saved in a locale whose list separator is not a comma
        if all(c in next(csv.reader([head], delimiter=delimiter)) for c in ("item", "review_id", *TEACHER_COLUMNS)):
            return delimiter
    raise ValueError(f"--reviewed {path}: not a review sheet (its header lacks item, review_id, "
                     f"{', '.join(TEACHER_COLUMNS)}): pass the review.csv that eval/review.py export wrote, or a "
                     f"Label Studio JSON export")


def read_sheet(path: Path, pages: list[GradedPage], graded: Path) -> Review:
    """The reviewed sheet: a row is reviewed when its `reviewed` column says yes or a teacher's column is filled; an
    empty correctness or score keeps the model's. A page is reviewed whole when each of its items is."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"--reviewed {path}: not UTF-8 text: save the sheet as CSV UTF-8") from None
    rows = list(csv.DictReader(io.StringIO(text), delimiter=_sheet_dialect(text, path)))
    review = Review("csv")
    seen: dict[tuple[str, int], int] = {}
    done: Counter = Counter()
    for n, row in enumerate(rows, start=2):  # the header is line 1
        where = f"{path} line {n}"
        page = _by_id(pages, graded, where, row.get("review_id"))
        items = page.record["items"]
        number = (row.get("item") or "").strip()
        item = items[int(number) - 1] if number.isdigit() and 1 <= int(number) <= len(items) else None
        if item is None:
            raise ValueError(f"{where}: item {row.get('item')!r:.20} is not an item of page {page.name} (1-"
                             f"{len(items)}): keep the sheet's page, item and review_id columns as exported")
        where = f"{where} (page {page.name}, item {item['index'] + 1})"
        key = (page.review_id, item["index"])
        if key in seen:
            raise ValueError(f"{where}: the item is on line {seen[key]} too: keep one row per item")
        seen[key] = n
        said = (row.get("reviewed") or "").strip().lower()
        if said and said not in YES + NO:
            raise ValueError(f"{where}: reviewed {said!r:.20} is neither yes nor no: write yes, or leave it empty")
        filled = any((row.get(c) or "").strip() for c in ("correctness", "score", "reason"))
        if said in NO or not (said in YES or filled):
            review.unreviewed += 1
            continue
        done[page.review_id] += 1
        full = _number(row.get("full_score"), where, "full_score")
        score = _number(row.get("score"), where, "score")
        verdict = _verdict(row["correctness"], where) if (row.get("correctness") or "").strip() else \
            model_verdict(item)
        teacher = Graded(item["box"], verdict, model_points(item) if score is None else score, full, item["text"],
                         item["question_id"], _question_type(row.get("question_type"), where) or
                         item.get("question_type"), item.get("reference"))
        problem = points_problem(full, teacher.score, None) if teacher.score is not None else None
        if problem:
            raise ValueError(f"{where}: {problem} (the full_score column)")
        review.items.append(Reviewed(page.name, item, teacher, (row.get("reason") or "").strip() or None))
    review.unreviewed += sum(len(p.record["items"]) for p in pages) - len(seen)
    review.pages = {p.name: p for p in pages if p.record["items"] and done[p.review_id] == len(p.record["items"])}
    review.unreviewed_pages = sum(done[p.review_id] < len(p.record["items"]) for p in pages)
    return review


def read_labelstudio(path: Path, pages: list[GradedPage], graded: Path, box_iou: float) -> Review:
    """The Label Studio JSON export of the review tasks. A task without a submitted annotation (none, or all
    cancelled) is unreviewed; in a reviewed one each region is matched to the model's item by its region id (the
    prediction's region, kept), else by the best box IoU of at least box_iou; a region left over was added, an item
    left over was deleted."""
    try:
        doc = read_json(path)
    except ValueError as e:
        raise ValueError(f"--reviewed {path}: not a JSON file ({str(e)[:200]})") from None
    tasks = [doc] if isinstance(doc, dict) and "data" in doc else doc
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise ValueError(f"--reviewed {path}: not a Label Studio JSON export (a list of tasks): export the project "
                         f"with Label Studio's \"JSON\" format")
    review = Review("labelstudio")
    seen: dict[str, str] = {}
    for i, task in enumerate(tasks):
        where = f"{path} task {task.get('id', f'#{i}')}"
        data = task.get("data") if isinstance(task.get("data"), dict) else {}
        page = _by_id(pages, graded, where, data.get("review_id"))
        if page.review_id in seen:
            raise ValueError(f"{where}: page {page.name} is task {seen[page.review_id]} too: export one project, "
                             f"with each page imported once")
        seen[page.review_id] = str(task.get("id", f"#{i}"))
        review.not_shown += len(page.record["items"]) - len(page.shown)
        if not submitted(task):
            review.unreviewed += len(page.shown)
            continue
        review.items += _matched(page, _regions(path, task, i, page), box_iou)
        review.pages[page.name] = page
    review.unreviewed += sum(len(p.shown) for p in pages if p.review_id not in seen)
    review.not_shown += sum(len(p.record["items"]) - len(p.shown) for p in pages if p.review_id not in seen)
    review.unreviewed_pages = len(pages) - len(review.pages)
    return review


def _regions(path: Path, task: dict, index: int, page: GradedPage) -> list[tuple[str | None, Graded, str | None]]:
    """The regions of a task's submitted annotation as (region id, the teacher's item, reason)."""
    source = read_task(path, task, index, "image")
    regions = []
    for item in source.items:
        where = f"{path} {item.where}"
        if item.points is None:
            raise ValueError(f"{where}: {item.problem}: fix it in Label Studio and export again")
        verdict = verdict_of(item.label)
        if verdict is None:
            raise ValueError(f"{where}: label {item.label!r:.40} is not a verdict ({', '.join(VERDICTS)}): set up the "
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
                        (a.get("std") or "").strip() or None)
        regions.append((item.region_id, graded, (a.get("reason") or "").strip() or None))
    return regions


def _matched(page: GradedPage, regions: list[tuple[str | None, Graded, str | None]], box_iou: float) -> list[Reviewed]:
    items = {f"{REGION_PREFIX}{it['index'] + 1}": it for it in page.shown}
    pairs: list[Reviewed] = []
    left = []
    for rid, teacher, reason in regions:
        model = items.pop(rid, None) if rid is not None else None
        if model is not None:
            pairs.append(Reviewed(page.name, model, teacher, reason))
        else:
            left.append((teacher, reason))
    scored = sorted(((Box(*t.box).iou(Box(*m["box"])), k, rid) for k, (t, _) in enumerate(left) if t.box
                     for rid, m in items.items()), reverse=True)
    taken: set[int] = set()
    for iou, k, rid in scored:
        if iou >= box_iou and k not in taken and rid in items:
            taken.add(k)
            pairs.append(Reviewed(page.name, items.pop(rid), left[k][0], left[k][1]))
    pairs += [Reviewed(page.name, None, t, reason) for k, (t, reason) in enumerate(left) if k not in taken]
    pairs += [Reviewed(page.name, m, None) for m in items.values()]
    return pairs


def page_marks(items: list[Reviewed]) -> list[Mark]:
    """A reviewed page's answer marks: each item as the teacher left it (deleted ones and those without a box left
    out; in points where the teacher's score is given), its id the question id made unique on the page (a question
    given twice becomes `3`, `3-2`)."""
    marks, used, added = [], Counter(), 0
    for r in items:
        t = r.teacher
        if t is None or t.box is None:
            continue
        added += r.model is None
        base = t.question_id or (f"item{r.model['index'] + 1}" if r.model else f"added{added}")
        used[base] += 1
        mark_id = base if used[base] == 1 else f"{base}-{used[base]}"
        points = {"full_score": t.full_score, "score": t.score} if None not in (t.score, t.full_score) else {}
        marks.append(Mark(points=rectangle(*t.box), label=t.verdict, raw_label=t.verdict, mark_id=mark_id,
                          hand=t.text, std=t.reference, question_type=t.question_type or "Other",
                          rubric=(r.model or {}).get("rubric") if points else None, **points))
    return marks


def write_pages(review: Review, images: Path, out: Path, subject: str) -> dict[str, int]:
    """The pages reviewed whole as a GradingBench folder (L3), written as the generator writes pages and read back
    by the strict reader; returns the records and marks written."""
    by_page: dict[str, list[Reviewed]] = {}
    for r in review.items:
        by_page.setdefault(r.page, []).append(r)
    records = []
    for name, page in review.pages.items():
        marks = page_marks(by_page.get(name, []))
        record_id = safe_name(name)  # as the page file's name: unique in the graded folder
        record = Record(record_id, L3, subject, f"{safe_name(subject)}/{page.image}", page.record["width"],
                        page.record["height"], marks)
        write_page(out, PageOutput(record_id, subject, (images / page.image).read_bytes(), record, [], []))
        records.append(record)
    write_level(out, L3, records)
    write_manifest(out, {L3: records})
    loaded = load_level(out, L3)
    return {"records": len(loaded.records), "marks": sum(len(r.marks) for r in loaded.records)}


def check_import(run: ReviewRun) -> tuple[Path, Path, Path]:
    if not run.reviewed or not run.out:
        raise ValueError("import needs --reviewed (the reviewed review.csv or Label Studio's JSON export) and --out "
                         "(the folder to write)")
    if not (0 < run.box_iou <= 1):  # NaN too
        raise ValueError(f"--box-iou {run.box_iou}: choose a value in (0, 1]")
    if not run.subject.strip():
        raise ValueError("--subject: name the pages' subject (e.g. Mathematics)")
    graded, reviewed, out = Path(run.graded), Path(run.reviewed), Path(run.out)
    if not reviewed.is_file():
        raise FileNotFoundError(f"reviewed file not found: {reviewed}")
    problems = overlapping("--out", out, {"--graded": graded})
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
        review = read_labelstudio(reviewed, pages, graded, run.box_iou)
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
    written = write_pages(review, images, out, run.subject.strip()) if review.pages else {"records": 0, "marks": 0}
    rep["written"] = {"folder": str(out), **written}
    write_atomic(out / f"{REPORT}.json", json.dumps(rep, ensure_ascii=False, indent=1) + "\n")
    write_atomic(out / f"{REPORT}.md", report_markdown(rep))
    return rep

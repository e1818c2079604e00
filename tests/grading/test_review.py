"""The review loop (gbtrain.grading.review*, eval/review.py): a graded folder written by grade_pages itself (its
backend answering with canned replies, no model), exported as a sheet and as Label Studio tasks, reviewed as a
teacher does it, imported back into a re-grade rate and into pages that the real builder and converter read."""

import copy
import csv
import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from PIL import Image

from gbtrain.coords import to_model
from gbtrain.data.annotations import load_level
from gbtrain.grading import grade as grade_run
from gbtrain.grading.grade import GradeRun, grade_pages
from gbtrain.grading.review import ReviewRun
from gbtrain.grading.review_export import export_review
from gbtrain.grading.review_import import import_review
from gbtrain.schema import Box

ROOT = Path(__file__).resolve().parents[2]
KEY = ('1: {answer: "12", full_score: 2}\n'
       '2: {answer: x = 3, full_score: 4, rubric: "2 for the method", question_type: 填空}\n'
       '3: "7"\n')
# per item: question, where on the page (fractions), judgment, points
ITEMS = (("1", (0.1, 0.1, 0.4, 0.2), True, 2), ("2", (0.1, 0.4, 0.6, 0.55), False, 1), ("3", (0.5, 0.7, 0.9, 0.85),
                                                                                          True, None))


class CannedBackend:
    """Answers every page with `items` (ITEMS) in the model's (qwen25) convention."""

    name, model = "openai", "canned"

    def __init__(self, budget, items=ITEMS):
        self.budget, self.items = budget, items

    def chat(self, conversations, sampling):
        replies = []
        for conv in conversations:
            w, h = conv[0]["content"][0]["image"].size
            items = []
            for qid, (x1, y1, x2, y2), right, score in self.items:
                box = to_model(Box(x1 * w, y1 * h, x2 * w, y2 * h), w, h, "qwen25", self.budget)
                items.append({"bbox_2d": box, "question": qid, "text": f"answer {qid}", "answer": "x",
                              "correctness": right, **({"score": score} if score is not None else {})})
            replies.append(json.dumps(items))
        return replies

    def close(self):
        pass


def grade(tmp_path: Path, budget, monkeypatch, items=ITEMS) -> Path:
    """A grade_pages folder of three pages (PNG, JPEG, a PDF page), graded with the answer key KEY."""
    pages = tmp_path / "pages"
    pages.mkdir()
    Image.new("RGB", (400, 560), "white").save(pages / "a.png")
    Image.new("RGB", (420, 600), "white").save(pages / "b.jpg")
    Image.new("RGB", (300, 420), "white").save(pages / "c.pdf", resolution=100)
    key = tmp_path / "key.yaml"
    key.write_text(KEY, encoding="utf-8")
    monkeypatch.setattr(grade_run, "open_backend", lambda run, plan: (CannedBackend(budget, items), None))
    out = tmp_path / "graded"
    grade_pages(GradeRun("canned", str(pages), str(out), answer_key=str(key), backend="openai", coords="qwen25",
                         min_pixels=budget.min_pixels, max_pixels=budget.max_pixels, pdf_dpi=100), progress=False)
    return out


@pytest.fixture
def graded(tmp_path, budget, monkeypatch) -> Path:
    return grade(tmp_path, budget, monkeypatch)


def _import(graded: Path, reviewed: Path, out: Path, **options) -> dict:
    return import_review(ReviewRun("import", str(graded), str(reviewed), str(out), **options))


def teacher_export(tasks: list[dict], edit) -> list[dict]:
    """Label Studio's JSON export of the imported tasks after a teacher's work, as Label Studio writes it: each task
    with its id, data, predictions (with ids), and `annotations`: the teacher opened the task, which starts the
    annotation from the prediction's results (their region ids kept, origin "prediction"), changed what `edit` changes
    (edit(task number, results) returns the new results, or None: task not reviewed) and submitted it."""
    exported = []
    for n, task in enumerate(tasks):
        prediction = task["predictions"][0]
        results = [dict(r, origin="prediction") for r in copy.deepcopy(prediction["result"])]
        results = edit(n, results)
        exported.append({
            "id": 40 + n, "data": task["data"], "project": 3, "file_upload": None,
            "predictions": [{"id": 70 + n, "model_version": prediction["model_version"], "result": prediction["result"],
                             "score": None}],
            "annotations": [] if results is None else [{
                "id": 90 + n, "completed_by": 1, "result": results, "was_cancelled": False, "ground_truth": False,
                "lead_time": 42.0, "prediction": {"id": 70 + n}, "parent_prediction": 70 + n}]})
    return exported


def _set(results: list[dict], region: str, kind: str, value) -> None:
    """Change a region's control (or its label) as the teacher does in the region's panel."""
    key = {"rectanglelabels": "rectanglelabels", "number": "number", "textarea": "text", "choices": "choices"}[kind]
    shape = next(r for r in results if r["id"] == region)
    found = next((r for r in results if r["id"] == region and r["type"] == kind
                  and (kind == "rectanglelabels" or r["from_name"] == value[0])), None)
    if found is None:  # a control the prediction left empty
        found = {k: shape[k] for k in ("id", "to_name", "original_width", "original_height", "image_rotation")}
        found |= {"type": kind, "from_name": value[0], "origin": "manual",
                  "value": {k: shape["value"][k] for k in ("x", "y", "width", "height", "rotation")}}
        results.append(found)
    found["value"][key] = value[1] if kind == "number" else [value[1]]
    found["origin"] = "prediction-changed"


def test_label_studio_round_trip_reports_the_regrade_rate_and_builds(graded, tmp_path):
    done = export_review(ReviewRun("export", str(graded)))
    review = graded / "review"
    assert done["pages"] == 3 and done["items"] == 9 and done["not_shown"] == 0
    tasks = json.loads((review / "labelstudio_tasks.json").read_text(encoding="utf-8"))
    assert len(tasks) == 3 and all(set(t) == {"data", "predictions"} for t in tasks)

    # the predictions are shaped as Label Studio imports pre-annotations (https://labelstud.io/guide/predictions.html,
    # "JSON format for pre-annotations"): per region, a rectanglelabels result in percent of the original size and
    # the per-region controls under the same id
    page = json.loads((graded / "pages" / "a.png.json").read_text(encoding="utf-8"))
    first = tasks[0]
    assert first["data"]["page"] == "a.png"
    url = urlsplit(first["data"]["image"])
    assert url.path == "/data/local-files/" and parse_qs(url.query)["d"] == ["review/images/a.png"]
    assert (review / "images" / "a.png").read_bytes() == (tmp_path / "pages" / "a.png").read_bytes()
    with Image.open(review / "images" / "c.pdf-p1.png") as im:  # the PDF page, rendered as it was graded
        assert im.size == (300, 420)
    shapes = [r for r in first["predictions"][0]["result"] if r["type"] == "rectanglelabels"]
    assert [s["id"] for s in shapes] == ["item-1", "item-2", "item-3"]
    assert [s["value"]["rectanglelabels"] for s in shapes] == [["right"], ["wrong"], ["right"]]
    x1, y1, x2, y2 = page["items"][1]["box"]
    value = shapes[1]["value"]
    assert (shapes[1]["original_width"], shapes[1]["original_height"]) == (400, 560)
    assert value["x"] == pytest.approx(100 * x1 / 400) and value["width"] == pytest.approx(100 * (x2 - x1) / 400)
    assert value["y"] == pytest.approx(100 * y1 / 560) and value["height"] == pytest.approx(100 * (y2 - y1) / 560)
    controls = {(r["id"], r["from_name"]): r["value"] for r in first["predictions"][0]["result"]
                if r["type"] != "rectanglelabels"}
    assert controls[("item-2", "hand")]["text"] == ["answer 2"] and controls[("item-2", "score")]["number"] == 1
    assert controls[("item-2", "full_score")]["number"] == 4 and controls[("item-2", "type")]["choices"] == [
        "Fill-in-the-blank"]
    assert ("item-3", "score") not in controls and ("item-3", "full_score") not in controls  # right/wrong only
    config = (review / "labelstudio_config.xml").read_text(encoding="utf-8")
    for control in ('<Number name="score"', '<TextArea name="hand"', '<RectangleLabels name="verdict"',
                    '<TextArea name="reason"', '<Image name="image" value="$image"'):
        assert control in config

    def edit(n, results):
        if n == 0:  # item 1 was right with 2 of 2 points: wrong, 0 points
            _set(results, "item-1", "rectanglelabels", ("verdict", "wrong"))
            _set(results, "item-1", "number", ("score", 0))
            _set(results, "item-1", "textarea", ("reason", "sign error"))
        elif n == 1:  # item 2: 3 of 4 points, not 1
            _set(results, "item-2", "number", ("score", 3))
            _set(results, "item-2", "textarea", ("reason", "method earns partial credit"))
        else:
            return None  # page c is not reviewed
        return results

    reviewed = tmp_path / "export.json"
    reviewed.write_text(json.dumps(teacher_export(tasks, edit)), encoding="utf-8")
    out = tmp_path / "imported"
    rep = _import(graded, reviewed, out)
    assert rep["reviewed"] == 6 and rep["changed"] == 2 and rep["regrade_rate"] == pytest.approx(2 / 6)
    assert rep["unreviewed"] == 3 and rep["pages"] == {"reviewed": 2, "unreviewed": 1}
    assert rep["changes"] == {"verdict": 1, "points": 2, "box": 0, "transcription": 0, "question_id": 0, "added": 0,
                              "deleted": 0}
    assert rep["points_changes"] == {"count": 2, "mean_abs": 2, "max_abs": 2}
    assert rep["reasons"] == {"sign error": 1, "method earns partial credit": 1}
    # item 1 (right, 2 of 2 -> wrong, 0) gave the student marks; item 2 (1 of 4 -> 3 of 4) cost the student 2 points
    none = {"n": 0, "points": 0}
    fill = {"verdicts": {"costs_marks": 0, "gives_marks": 0},
            "points": {"costs_marks": {"n": 1, "points": 2}, "gives_marks": none}}
    other = {"verdicts": {"costs_marks": 0, "gives_marks": 1},
             "points": {"costs_marks": none, "gives_marks": {"n": 1, "points": 2}}}
    assert rep["by_question_type"]["Fill-in-the-blank"] == {"reviewed": 2, "changed": 1, "regrade_rate": 0.5,
                                                            "errors": fill}
    assert rep["by_question_type"]["(not given)"] == {"reviewed": 4, "changed": 1, "regrade_rate": 0.25,
                                                      "errors": other}
    assert rep["errors"] == {"verdicts": {"costs_marks": 0, "gives_marks": 1},
                             "points": {"costs_marks": {"n": 1, "points": 2}, "gives_marks": {"n": 1, "points": 2}}}
    assert "| all | 6 | 2 | 33.3% | 0 / 1 | 2 in 1 / 2 in 1 |" in (out / "review_report.md").read_text(encoding="utf-8")
    assert "**Re-grade rate: 33.3%** (2 of 6 reviewed items" in (out / "review_report.md").read_text(encoding="utf-8")
    assert json.loads((out / "review_report.json").read_text(encoding="utf-8"))["regrade_rate"] == rep["regrade_rate"]

    # the reviewed pages, as the teacher left them, are a GradingBench folder
    records = {r.record_id: r for r in load_level(out, "L3").records}
    assert sorted(records) == ["a.png", "b.jpg"]
    a = {g.group_id: g for g in records["a.png"].groups}
    assert a["1"].label == "wrong" and a["1"].score == 0 and a["1"].full_score == 2 and a["1"].std == "12"
    assert a["2"].rubric == "2 for the method" and a["2"].question_type == "Fill-in-the-blank"
    assert a["3"].label == "right" and a["3"].full_score is None
    assert {g.group_id: g.score for g in records["b.jpg"].groups} == {"1": 2, "2": 3, "3": None}

    # which the real builder builds: the teacher's grades are the targets
    from datasets import load_from_disk

    from gbtrain.data.build_config import BuildConfig, MixConfig
    from gbtrain.data.sft_dataset import build_sft_dataset

    # every level the builder reads, made as the converters make them: a record per question (L2) and its crop (L1)
    assert rep["written"]["levels"] == {"L1": 6, "L2": 6, "L3": 2}
    crops = {r.record_id: r for r in load_level(out, "L1").records}
    assert sorted(crops) == [f"{p}_q{q}" for p in ("a.png", "b.jpg") for q in (1, 2, 3)]
    assert crops["a.png_q1"].page_id == records["a.png"].page_id and crops["a.png_q1"].groups[0].label == "wrong"
    sft = tmp_path / "sft"
    shares = {"L1": 0.5, "L2": 0.5 - 1 / 6, "L3": 1 / 6}
    stats = build_sft_dataset(BuildConfig(data=str(out), out=str(sft), target_count=12, validation_share=0,
                                          test_share=0, mix=MixConfig(levels=shares, three_turn=0)), progress=False)
    assert stats["by"]["level"] == {"L1": 6, "L2": 4, "L3": 2}
    rows = [r for r in load_from_disk(str(sft))["train"] if r["record_id"] == "a.png"]
    target = json.loads(rows[0]["messages"][-1]["content"])
    assert [(it["correctness"], it.get("score")) for it in target] == [(False, 0), (False, 1), (True, None)]

    # and the converter reads the same export with the shipped mapping (all levels; the task not reviewed is left out)
    from gbtrain.data.converters import convert, load_mapping

    converted = convert(reviewed, load_mapping(ROOT / "configs" / "convert" / "review.yaml", ["subject=Mathematics"]),
                        tmp_path / "converted", images=review / "images", lenient=True, progress=False)
    assert converted["records"] == {"L1": 6, "L2": 6, "L3": 2}
    assert [u["item"] for u in converted["unmapped"]] == ["task 42"]


def test_moved_added_deleted_regions_and_cancelled_tasks(graded, tmp_path):
    export_review(ReviewRun("export", str(graded)))
    tasks = json.loads((graded / "review" / "labelstudio_tasks.json").read_text(encoding="utf-8"))

    def edit(n, results):
        if n != 0:
            return results  # accepted as predicted
        for r in results:  # item 1 redrawn by hand (a new region id), a little larger: matched by IoU
            if r["id"] == "item-1":
                r["id"] = "Dx_aB91ISN"
                if r["type"] == "rectanglelabels":
                    r["value"]["width"] += 2
        # item 2 deleted; item 3 moved to another place (its id kept); a region added
        results = [r for r in results if r["id"] != "item-2"]
        for r in results:
            if r["id"] == "item-3":
                r["value"]["y"] = 2.0
        added = copy.deepcopy([r for r in results if r["id"] == "item-3"])
        for r in added:
            r["id"], r["value"]["x"], r["value"]["y"] = "t5sp3TyXPo", 2.0, 90.0
        return results + added

    exported = teacher_export(tasks, edit)
    exported[2]["annotations"][0]["was_cancelled"] = True  # skipped: not reviewed
    reviewed = tmp_path / "export.json"
    reviewed.write_text(json.dumps(exported), encoding="utf-8")
    rep = _import(graded, reviewed, tmp_path / "imported")
    assert rep["changes"] == {"verdict": 0, "points": 0, "box": 1, "transcription": 0, "question_id": 0, "added": 1,
                              "deleted": 1}
    assert rep["reviewed"] == 7 and rep["changed"] == 3 and rep["unreviewed"] == 3
    added = next(c for c in rep["changed_items"] if c["changes"] == ["added"])
    assert added["item"] is None and added["teacher"]["box"][1] == pytest.approx(0.9 * 560, abs=1)
    marks = {r.record_id: len(r.marks) for r in load_level(tmp_path / "imported", "L3").records}
    assert marks == {"a.png": 3, "b.jpg": 3}  # 3 - 1 deleted + 1 added; c.pdf-p1 skipped


def test_csv_round_trip(graded, tmp_path):
    export_review(ReviewRun("export", str(graded)))
    sheet = graded / "review" / "review.csv"
    with open(sheet, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["page"], r["item"], r["model_correctness"], r["model_score"], r["full_score"]) for r in rows[:3]] == [
        ("a.png", "1", "right", "2", "2"), ("a.png", "2", "wrong", "1", "4"), ("a.png", "3", "right", "", "")]
    assert all(r[c] == "" for r in rows for c in ("reviewed", "correctness", "score", "reason"))
    for r in rows:
        if r["page"] == "a.png":  # every item of page a looked at; two changed
            r["reviewed"] = "yes"
        if (r["page"], r["item"]) == ("a.png", "1"):
            r["correctness"], r["reason"] = "wrong", "sign error"
        if (r["page"], r["item"]) == ("a.png", "2"):
            r["score"] = "3,5"  # as a spreadsheet in a comma-decimal locale writes it
        if (r["page"], r["item"]) == ("b.jpg", "1"):  # a teacher's column filled: reviewed, as the model had it
            r["correctness"] = "right"
    reviewed = tmp_path / "reviewed.csv"
    with open(reviewed, "w", encoding="utf-8-sig", newline="") as f:  # Excel's "CSV UTF-8", semicolons
        w = csv.DictWriter(f, list(rows[0]), delimiter=";")
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "imported"
    rep = _import(graded, reviewed, out)
    assert rep["reviewed"] == 4 and rep["changed"] == 2 and rep["regrade_rate"] == 0.5 and rep["unreviewed"] == 5
    assert rep["changes"]["verdict"] == 1 and rep["changes"]["points"] == 1
    assert rep["points_changes"] == {"count": 1, "mean_abs": 2.5, "max_abs": 2.5}
    assert rep["pages"] == {"reviewed": 1, "unreviewed": 2}  # b was reviewed in part: not written
    (record,) = load_level(out, "L3").records
    assert [(g.group_id, g.label, g.score) for g in record.groups] == [("1", "wrong", 2), ("2", "wrong", 3.5),
                                                                      ("3", "right", None)]

    for bad, message in ((("a.png", "2", "score", "a lot"), r"line 3 \(page a\.png, item 2\): score 'a lot' is not a "
                                                             r"number of points"),
                         (("a.png", "2", "score", "5"), r"score 5 is outside 0\.\.4"),
                         (("a.png", "1", "correctness", "maybe"), r"correctness 'maybe' is not a verdict"),
                         (("a.png", "1", "review_id", "r00"), r"review id 'r00' names no page of .*export again")):
        changed = [dict(r) for r in rows]
        next(r for r in changed if (r["page"], r["item"]) == bad[:2])[bad[2]] = bad[3]
        with open(reviewed, "w", encoding="utf-8", newline="") as f:
            w = csv.DictWriter(f, list(rows[0]))
            w.writeheader()
            w.writerows(changed)
        with pytest.raises(ValueError, match=message):
            _import(graded, reviewed, out)


class BlankBackend(CannedBackend):
    """Page a: question 1 answered, question 3 left blank (the model writes "" and judges it wrong); every other
    page: question 1, and an answer the model gave no question id."""

    def chat(self, conversations, sampling):
        replies = []
        for conv in conversations:
            w, h = conv[0]["content"][0]["image"].size
            blank = (w, h) == (400, 560)  # page a
            second = {"question": "3", "text": "", "answer": "7"} if blank else {"text": "x = 4", "answer": "8"}
            items = [{"question": "1", "text": "12", "answer": "12", "correctness": True, "score": 2,
                      "bbox_2d": to_model(Box(0.1 * w, 0.1 * h, 0.4 * w, 0.2 * h), w, h, "qwen25", self.budget)},
                     {**second, "correctness": False,
                      "bbox_2d": to_model(Box(0.1 * w, 0.5 * h, 0.4 * w, 0.6 * h), w, h, "qwen25", self.budget)}]
            replies.append(json.dumps(items))
        return replies


@pytest.mark.parametrize("tool", ["labelstudio", "sheet"])
def test_a_review_accepted_as_the_model_left_it_imports_and_placeholders_never_train(tmp_path, budget, monkeypatch,
                                                                                      tool):
    """Every task submitted unchanged (every sheet row marked reviewed): a blank answer the model left blank imports
    as unanswered, unchanged; a page whose answer has no question id (the model named none, the teacher gave none)
    is reviewed and counted, but left out of the training data, named with why, rather than trained on `item2`.
    Page b's document lacks question 3: the sheet's row for it marked reviewed says the student left no answer
    there; the Label Studio region for it left where the export put it is counted as not reviewed."""
    monkeypatch.setattr(grade_run, "open_backend", lambda run, plan: (BlankBackend(budget), None))
    pages = tmp_path / "pages"
    pages.mkdir()
    Image.new("RGB", (400, 560), "white").save(pages / "a.png")
    Image.new("RGB", (420, 600), "white").save(pages / "b.jpg")
    key = tmp_path / "key.yaml"
    key.write_text('1: {answer: "12", full_score: 2}\n3: "7"\n', encoding="utf-8")
    graded = tmp_path / "graded"
    grade_pages(GradeRun("canned", str(pages), str(graded), answer_key=str(key), backend="openai", coords="qwen25",
                         min_pixels=budget.min_pixels, max_pixels=budget.max_pixels), progress=False)
    export_review(ReviewRun("export", str(graded)))
    review = graded / "review"
    if tool == "labelstudio":
        tasks = json.loads((review / "labelstudio_tasks.json").read_text(encoding="utf-8"))
        labels = [[(r["id"], r["value"]["rectanglelabels"]) for r in t["predictions"][0]["result"]
                   if r["type"] == "rectanglelabels"] for t in tasks]
        assert labels == [[("item-1", ["right"]), ("item-2", ["unanswered"])],
                          [("item-1", ["right"]), ("item-2", ["wrong"]), ("missing-1", ["unknown"])]]
        reviewed = tmp_path / "export.json"
        reviewed.write_text(json.dumps(teacher_export(tasks, lambda n, results: results)), encoding="utf-8")
    else:
        with open(review / "review.csv", encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        assert [(r["item"], r["question_id"], r["model_correctness"]) for r in rows] == [
            ("1", "1", "right"), ("2", "3", "unanswered"), ("1", "1", "right"), ("2", "", "wrong"),
            ("", "3", "missing")]
        for r in rows:
            r["reviewed"] = "yes"
        reviewed = tmp_path / "reviewed.csv"
        _write_sheet(reviewed, rows)
    out = tmp_path / "imported"
    rep = _import(graded, reviewed, out)
    assert (rep["reviewed"], rep["unreviewed"]) == ((4, 1) if tool == "labelstudio" else (5, 0))
    assert rep["changed"] == 0 and rep["regrade_rate"] == 0
    assert rep["written"]["left_out"] == [{"page": "b.jpg", "why": "item 2 has no question id: give it one in the "
                                                                   "review (the question it answers)"}]
    (record,) = load_level(out, "L3").records
    assert record.record_id == "a.png"
    assert [(g.group_id, g.label, g.hand) for g in record.groups] == [("1", "right", "12"), ("3", "unanswered", "")]
    assert "| b.jpg | item 2 has no question id" in (out / "review_report.md").read_text(encoding="utf-8")
    if tool == "labelstudio":  # the converter reads the same export by the same rules: no placeholder becomes an id
        from gbtrain.data.converters import convert, load_mapping

        converted = convert(reviewed, load_mapping(ROOT / "configs" / "convert" / "review.yaml"), tmp_path / "conv",
                            images=review / "images", lenient=True, progress=False)
        assert [(u["item"].split(", ")[1], u["message"][:40]) for u in converted["unmapped"]] == [
            ("region 'item-2'", "no question id: 'item2' is a placeholder"),
            ("region 'missing-1'", "answer 3: no transcription (field 'hand'")]
        assert {r.record_id for r in load_level(tmp_path / "conv", "L3").records} == {"a"}


def test_label_studio_second_teacher_storage_sync_and_other_formats(graded, tmp_path):
    """A task two teachers annotated keeps the second's points (score_2) and the arbitration; tasks a storage sync
    added (no review id) are skipped and counted, or refused when annotated; a JSON-MIN export is named. The labeling
    config names every per-region field."""
    export_review(ReviewRun("export", str(graded)))
    review = graded / "review"
    config = (review / "labelstudio_config.xml").read_text(encoding="utf-8")
    assert '<Header value="Score: the points this answer earns"/>' in config
    assert '<Header value="Full score: the question\'s points (from the answer key)"/>' in config
    assert '<TextArea name="arbitration"' in config
    tasks = json.loads((review / "labelstudio_tasks.json").read_text(encoding="utf-8"))

    def first(n, results):
        if n != 0:
            return None
        _set(results, "item-1", "number", ("score", 1))
        _set(results, "item-1", "textarea", ("arbitration", "third teacher: 1"))
        return results

    exported = teacher_export(tasks, first)
    second = copy.deepcopy(exported[0]["annotations"][0])
    _set(second["result"], "item-1", "number", ("score", 2))
    exported[0]["annotations"].append(second | {"id": 991, "completed_by": 2})
    # the images storage synced: one task per image file, no review id, nothing annotated
    exported += [{"id": 500 + k, "data": {"image": f"/data/local-files/?d=review/images/{name}"}, "annotations": [],
                  "predictions": [], "project": 3} for k, name in enumerate(("a.png", "b.jpg"))]
    reviewed = tmp_path / "export.json"
    reviewed.write_text(json.dumps(exported), encoding="utf-8")
    rep = _import(graded, reviewed, tmp_path / "imported")
    assert rep["foreign_tasks"] == 2 and "2 tasks the export did not make" in (
        tmp_path / "imported" / "review_report.md").read_text(encoding="utf-8")
    (record,) = load_level(tmp_path / "imported", "L3").records
    one = next(g for g in record.groups if g.group_id == "1")
    assert (one.score, one.score_2, one.arbitration) == (1, 2, "third teacher: 1")

    exported[0]["annotations"].append(second | {"id": 992, "completed_by": 3})
    reviewed.write_text(json.dumps(exported), encoding="utf-8")
    with pytest.raises(ValueError, match=r"task 40: 3 submitted annotations: the review keeps two teachers"):
        _import(graded, reviewed, tmp_path / "again")
    exported[0]["annotations"] = exported[0]["annotations"][:1]
    exported[-1]["annotations"] = [{"id": 5, "result": [], "was_cancelled": False}]
    reviewed.write_text(json.dumps(exported), encoding="utf-8")
    with pytest.raises(ValueError, match=r"task 501: an annotated task that eval/review.py export did not make \(no "
                                         r"review_id"):
        _import(graded, reviewed, tmp_path / "again")
    # JSON-MIN, as label-studio-sdk's converter writes it: one flat row per annotated task
    reviewed.write_text(json.dumps([{"image": tasks[0]["data"]["image"], "page": "a.png", "review_id": "x", "id": 40,
                                     "verdict": [{"x": 10, "y": 10, "width": 5, "height": 5,
                                                  "rectanglelabels": ["right"]}],
                                     "annotator": 1, "annotation_id": 90, "created_at": "2026-12-06T10:00:00Z",
                                     "updated_at": "2026-12-06T10:00:00Z", "lead_time": 4.2}]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"no task has 'annotations': export with Label Studio's \"JSON\" format "
                                         r"\(not JSON-MIN or CSV\)"):
        _import(graded, reviewed, tmp_path / "again")


def test_two_teachers_a_stated_rule_counts_and_every_difference_is_listed(graded, tmp_path):
    """Page a, annotated by two teachers (as Label Studio exports it: each annotation with its id, completed_by and
    created_at). Ann (first) marks item 1 wrong with 0 points; Bo (second) accepts it, gives item 2 3 points where
    Ann kept the model's 1, and writes a reason; both add the same answer the model missed, each with a region id
    of their own. Whose grade counts is the rule's, whatever order the export lists them in; the other's points
    are score_2; every difference is listed with both grades; the same missed answer is one added item."""
    export_review(ReviewRun("export", str(graded)))
    tasks = json.loads((graded / "review" / "labelstudio_tasks.json").read_text(encoding="utf-8"))[:1]
    added = [r for r in tasks[0]["predictions"][0]["result"] if r["id"] == "item-3"]

    def teacher(n, results, who):
        results = [dict(r, origin="prediction") for r in results]
        if who == "ann":
            _set(results, "item-1", "rectanglelabels", ("verdict", "wrong"))
            _set(results, "item-1", "number", ("score", 0))
        else:
            _set(results, "item-2", "number", ("score", 3))
            _set(results, "item-2", "textarea", ("reason", "method earns partial credit"))
        for r in copy.deepcopy(added):  # the same missed answer, low on the page
            r["id"] = "ann-new" if who == "ann" else "bo-new"
            r["value"]["y"] = 90.0 if who == "ann" else 90.2
            results.append(r)
        return results

    exported = teacher_export(tasks, lambda n, results: teacher(n, results, "ann"))
    ann = exported[0]["annotations"][0] | {"id": 90, "completed_by": {"id": 1, "email": "ann@school.example"},
                                           "created_at": "2026-12-07T09:00:00.000000Z"}
    bo = copy.deepcopy(ann) | {"id": 95, "completed_by": {"id": 2, "email": "bo@school.example"},
                               "created_at": "2026-12-07T10:30:00.000000Z",
                               "result": teacher(0, copy.deepcopy(tasks[0]["predictions"][0]["result"]), "bo")}
    reviewed = tmp_path / "export.json"
    results = {}
    for order in ("ann-first", "bo-first"):
        exported[0]["annotations"] = [ann, bo] if order == "ann-first" else [bo, ann]
        reviewed.write_text(json.dumps(exported), encoding="utf-8")
        for rule in ("first", "last", "agreement"):
            results[order, rule] = _import(graded, reviewed, tmp_path / f"{order}-{rule}", teachers=rule)
    for rule in ("first", "last", "agreement"):
        a, b = results["ann-first", rule], results["bo-first", rule]
        assert (a["changed"], a["changes"], a["disagreements"]) == (b["changed"], b["changes"], b["disagreements"])
    first, last = results["ann-first", "first"], results["ann-first", "last"]
    assert first["teachers"] == {"rule": "first", "tasks_with_two": 1, "counted": {"ann@school.example": 1}}
    assert last["teachers"]["counted"] == {"bo@school.example": 1}
    # Ann counted: item 1 (verdict, points) and the added answer; Bo counted: item 2's points and the added answer
    assert (first["changes"]["verdict"], first["changes"]["points"], first["changes"]["added"]) == (1, 1, 1)
    assert (last["changes"]["verdict"], last["changes"]["points"], last["changes"]["added"]) == (0, 1, 1)
    assert [(d["question_id"], d["differs"], d["counted"], d["counted_grade"]["score"], d["other_grade"]["score"])
            for d in first["disagreements"]] == [("1", ["verdict", "points"], "ann@school.example", 0, 2),
                                                 ("2", ["points"], "ann@school.example", 1, 3)]
    records = {r.record_id: r for r in load_level(tmp_path / "ann-first-first", "L3").records}
    groups = {g.group_id: g for g in records["a.png"].groups}
    assert (groups["1"].score, groups["1"].score_2, groups["2"].score, groups["2"].score_2) == (0, 2, 1, 3)
    assert len(groups["3"].marks) == 2  # the model's question 3 and the answer both teachers added to it
    md = (tmp_path / "ann-first-first" / "review_report.md").read_text(encoding="utf-8")
    assert "Whose grade counts: rule `first` (the first submitted); tasks annotated by two teachers: 1" in md
    assert "| a.png | 1 | verdict, points | ann@school.example: wrong, 0 points" in md
    agreement = results["ann-first", "agreement"]
    assert agreement["written"]["left_out"] == [{"page": "a.png", "why": "the two teachers differ on question(s) 1, "
                                                 "2 (listed in the report): settle them in Label Studio (or import "
                                                 "with another --teachers rule)"}]


def test_a_label_studio_csv_export_is_named(graded, tmp_path):
    """The header of Label Studio's CSV export (label-studio-sdk's converter: the task's data columns, each
    control's column, then the columns it always writes)."""
    export_review(ReviewRun("export", str(graded)))
    reviewed = tmp_path / "project-3-at-2026-12-07-10-41-5f1a2b3c.csv"
    reviewed.write_text("image,page,review_id,id,verdict,hand,score,annotator,annotation_id,created_at,updated_at,"
                        "lead_time\n/data/local-files/?d=review/images/a.png,a.png,r0,40,\"[]\",,,1,90,"
                        "2026-12-07T10:41:00Z,2026-12-07T10:41:00Z,42.0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"a Label Studio CSV export, which keeps no region's own values: export the "
                                         r"project as Label Studio's \"JSON\""):
        _import(graded, reviewed, tmp_path / "imported")


def _write_sheet(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_every_correction_in_the_sheet_is_kept(graded, tmp_path):
    """A teacher edits the exported sheet in place: a transcription, a question id, a box, points with a second
    teacher's and the arbitration. Exporting again refuses to overwrite it; the import keeps every edit."""
    export_review(ReviewRun("export", str(graded)))
    export_review(ReviewRun("export", str(graded)))  # an untouched sheet is exported again as it was
    sheet = graded / "review" / "review.csv"
    with open(sheet, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    row = {(r["page"], r["item"]): r for r in rows}
    for r in rows:
        if r["page"] == "a.png":
            r["reviewed"] = "yes"
    row["a.png", "1"].update(text="answer 1, corrected", score="1", score_2="2", arbitration="third teacher: 1")
    row["a.png", "3"]["question_id"] = "3b"
    moved = [float(row["a.png", "2"][c]) for c in ("x1", "y1", "x2", "y2")]
    row["a.png", "2"].update(x1=str(moved[0] + 150), x2=str(moved[2] + 150))  # another place: the box changed
    row["b.jpg", "1"]["text"] = "=SUM(A1)"  # a formula-like transcription: the sheet keeps it as text
    row["b.jpg", "1"]["reviewed"] = "yes"
    _write_sheet(sheet, rows)
    edited = sheet.read_bytes()
    with pytest.raises(ValueError, match=r"review\.csv was edited since it was exported .*: import it first"):
        export_review(ReviewRun("export", str(graded)))
    assert sheet.read_bytes() == edited
    out = tmp_path / "imported"
    rep = _import(graded, sheet, out)
    assert rep["changes"]["transcription"] == 2 and rep["changes"]["question_id"] == 1 and rep["changes"]["box"] == 1
    assert rep["changes"]["points"] == 1
    (record,) = load_level(out, "L3").records
    groups = {g.group_id: g for g in record.groups}
    assert sorted(groups) == ["1", "2", "3b"]
    assert (groups["1"].hand, groups["1"].score, groups["1"].score_2, groups["1"].arbitration) == (
        "answer 1, corrected", 1, 2, "third teacher: 1")
    assert (groups["2"].box.x1, groups["2"].box.x2) == (pytest.approx(moved[0] + 150, abs=0.1),
                                                        pytest.approx(moved[2] + 150, abs=0.1))
    changed = {(c["page"], c["item"]): c for c in rep["changed_items"]}
    assert changed["b.jpg", 1]["teacher"]["text"] == "=SUM(A1)"


@pytest.mark.parametrize(("edit", "message"), [
    ({"reviewed": "no", "correctness": "wrong"},
     r"line 2 \(page a\.png, item 1\): reviewed says 'no' but the row holds a correction \(correctness\): write yes "
     r"to keep it, or clear it"),
    ({"reviewed": "no", "text": "edited"}, r"reviewed says 'no' but the row holds a correction \(text\)"),
    ({"full_score": "5"}, r"full_score 5 is not the answer key's 2: the key decides a question's points"),
    ({"row": 2, "score_2": "1"}, r"item 3\): score_2 \(a second teacher's points\) without score: fill score too"),
    ({"x1": ""}, r"give all four of x1, y1, x2, y2 \(in page pixels\), or none"),
    ({"x2": "-5"}, r"box \[.*\] is not a box on the 400x560 page"),
])
def test_a_sheet_correction_that_cannot_be_kept_names_its_row(graded, tmp_path, edit, message):
    export_review(ReviewRun("export", str(graded)))
    with open(graded / "review" / "review.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    edit = dict(edit)
    rows[edit.pop("row", 0)].update(edit)
    reviewed = tmp_path / "reviewed.csv"
    _write_sheet(reviewed, rows)
    with pytest.raises(ValueError, match=message):
        _import(graded, reviewed, tmp_path / "imported")


def test_a_box_the_teacher_did_not_transcribe_counts_but_is_no_data(graded, tmp_path):
    """Item 1's transcription emptied and page a otherwise accepted: the teacher's change counts in the rate, and
    page a is left out of the data (the converters' rule for a blank answer: it would teach a blank), named with
    why, rather than the whole import refused."""
    export_review(ReviewRun("export", str(graded)))
    with open(graded / "review" / "review.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["reviewed"] = "yes" if r["page"] == "a.png" else ""
    rows[0]["text"] = ""
    reviewed = tmp_path / "reviewed.csv"
    _write_sheet(reviewed, rows)
    rep = _import(graded, reviewed, tmp_path / "imported")
    assert rep["changes"]["transcription"] == 1 and rep["reviewed"] == 3
    assert rep["written"]["left_out"] == [{"page": "a.png", "why": "item 1 (question 1) has a box but no transcription "
                                           "(an answer left blank has the verdict unanswered): type what the student "
                                           "wrote, or give it the verdict unanswered"}]


def test_scores_that_are_no_grade_are_not_taken_as_the_teachers(tmp_path, budget, monkeypatch):
    """A score out of range (7 of 2 points) and one for a question without a full score (question 3) are flagged or
    not points: Label Studio is not offered them, and a teacher who accepts the item gives it no points."""
    graded = grade(tmp_path, budget, monkeypatch, items=(("1", (0.1, 0.1, 0.4, 0.2), True, 7),
                                                         ("3", (0.5, 0.7, 0.9, 0.85), True, 1)))
    export_review(ReviewRun("export", str(graded)))
    tasks = json.loads((graded / "review" / "labelstudio_tasks.json").read_text(encoding="utf-8"))
    assert not [r for r in tasks[0]["predictions"][0]["result"] if r["from_name"] == "score"]
    sheet = graded / "review" / "review.csv"
    with open(sheet, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["reviewed"] = "yes"
    reviewed = tmp_path / "reviewed.csv"
    with open(reviewed, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    rep = _import(graded, reviewed, tmp_path / "imported")
    # 6 items and, on each page, question 2 (its row of a question the model did not find, confirmed unanswered)
    assert rep["reviewed"] == 9 and rep["changed"] == 0 and rep["regrade_rate"] == 0
    records = load_level(tmp_path / "imported", "L3").records
    assert len(records) == 3 and all(g.score is None and g.full_score is None for r in records for g in r.groups)


@pytest.mark.parametrize("tool", ["labelstudio", "sheet"])
def test_a_question_the_model_found_on_no_page_reaches_the_teacher(tmp_path, budget, monkeypatch, tool):
    """The model answers questions 1 and 3 of a three-question key: question 2 is missing on every page, so every
    page's review has a region (Label Studio, in the page's corner) and a row (the sheet) for it. On page a the
    teacher finds it and grades it (added, trained on as question 2); on b says the page holds none (deletes the
    region, or marks the row reviewed); on c leaves it as exported (not reviewed: c is not training data)."""
    graded = grade(tmp_path, budget, monkeypatch, items=(("1", (0.1, 0.1, 0.4, 0.2), True, 2),
                                                         ("3", (0.5, 0.7, 0.9, 0.85), True, None)))
    done = export_review(ReviewRun("export", str(graded)))
    assert (done["items"], done["missing"]) == (6, 3)
    review = graded / "review"
    found = (40.0, 300.0, 200.0, 340.0)  # where the teacher finds question 2 on page a (400 x 560)
    if tool == "labelstudio":
        tasks = json.loads((review / "labelstudio_tasks.json").read_text(encoding="utf-8"))
        placeholder = [r for r in tasks[0]["predictions"][0]["result"] if r["id"] == "missing-1"]
        assert {r["from_name"]: r["value"].get("text", r["value"].get("number")) for r in placeholder} == {
            "verdict": None, "qid": ["2"], "std": ["x = 3"], "full_score": 4, "type": None}

        def edit(n, results):
            if n == 0:
                for r in results:
                    if r["id"] == "missing-1":
                        r["value"] |= {"x": 10.0, "y": 300 / 5.6, "width": 40.0, "height": 40 / 5.6}
                _set(results, "missing-1", "rectanglelabels", ("verdict", "wrong"))
                _set(results, "missing-1", "textarea", ("hand", "x = 4"))
                _set(results, "missing-1", "number", ("score", 1))
            elif n == 1:
                results = [r for r in results if r["id"] != "missing-1"]
            return results

        reviewed = tmp_path / "export.json"
        reviewed.write_text(json.dumps(teacher_export(tasks, edit)), encoding="utf-8")
    else:
        with open(review / "review.csv", encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        assert [(r["page"], r["item"], r["question_id"], r["model_correctness"], r["full_score"]) for r in rows
                if r["model_correctness"] == "missing"] == [(p, "", "2", "missing", "4")
                                                          for p in ("a.png", "b.jpg", "c.pdf-p1")]
        for r in rows:
            if r["page"] != "c.pdf-p1" or r["item"]:
                r["reviewed"] = "yes"
            if (r["page"], r["model_correctness"]) == ("a.png", "missing"):
                r.update(dict(zip(("x1", "y1", "x2", "y2"), map(str, found), strict=True)), correctness="wrong",
                         text="x = 4", score="1")
        reviewed = tmp_path / "reviewed.csv"
        _write_sheet(reviewed, rows)
    out = tmp_path / "imported"
    rep = _import(graded, reviewed, out)
    assert rep["changes"]["added"] == 1 and rep["changed"] == 1 and rep["unreviewed"] == 1
    assert rep["errors"]["points"]["costs_marks"] == {"n": 1, "points": 1}  # the model's 0 for a 1-point answer
    records = {r.record_id: r for r in load_level(out, "L3").records}
    assert sorted(records) == ["a.png", "b.jpg"]
    added = {g.group_id: g for g in records["a.png"].groups}["2"]
    assert (added.label, added.hand, added.score, added.full_score) == ("wrong", "x = 4", 1, 4)
    assert [b for b in (added.box.x1, added.box.y1, added.box.x2, added.box.y2)] == pytest.approx(found, abs=0.5)
    assert sorted(g.group_id for g in records["b.jpg"].groups) == ["1", "3"]
    if tool == "labelstudio":
        assert rep["written"]["left_out"][0]["page"] == "c.pdf-p1" and "left where the export put them" in rep[
            "written"]["left_out"][0]["why"]
    else:
        assert rep["pages"] == {"reviewed": 2, "unreviewed": 1}


def test_command_line_and_refusals(graded, tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, str(ROOT / "eval" / "review.py"), *map(str, args)], capture_output=True,
                              text=True, timeout=120, cwd=ROOT)

    proc = cli("export", "--graded", graded)
    assert proc.returncode == 0 and "review of 3 pages, 9 items" in proc.stdout, proc.stderr
    for args, message in (
            (("import", "--graded", graded, "--reviewed", graded / "review" / "review.csv", "--out", tmp_path / "o"),
             "nothing in it is reviewed"),  # the sheet as exported
            (("import", "--graded", graded), "import needs --reviewed"),
            (("import", "--graded", graded, "--reviewed", tmp_path / "none.json", "--out", tmp_path / "o"),
             "reviewed file not found"),
            (("import", "--graded", graded, "--reviewed", graded / "review" / "review.csv", "--out", graded / "x"),
             "lies inside --graded"),
            (("export", "--graded", tmp_path), "not a grade_pages folder")):
        proc = cli(*args)
        assert proc.returncode == 2 and proc.stderr.startswith("review: ") and message in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr

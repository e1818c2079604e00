"""Selective grading (docs/metric.md#selective-grading): the threshold a target accuracy or a review budget asks for,
its flags, the report's table and plot, and the threshold select_checkpoint chooses on validation being the one
grade_pages applies (a scripted backend whose replies carry logprobs: the evaluation, selection and grading are
the real ones)."""

import csv
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

from gbtrain.coords import to_model
from gbtrain.data.annotations import image_root, write_level
from gbtrain.data.drawing import REVIEW_COLOR
from gbtrain.evaluation import run, selection
from gbtrain.evaluation.reports import selective_plot, selective_table
from gbtrain.evaluation.selection import SelectRun, check_select_run, select_checkpoint
from gbtrain.grading import grade
from gbtrain.grading.grade import GradeRun, grade_pages
from gbtrain.grading.threshold import review_threshold
from gbtrain.inference.logprobs import Reply
from gbtrain.metric.selective import (
    Candidate,
    SelectiveFlags,
    calibration,
    choose_threshold,
    coverage_table,
)
from gbtrain.outputs import SELECTIVE_RECORD
from gbtrain.schema import Box, Mark, Record
from gbtrain.train.checkpoints import CheckpointRecord, write_checkpoint_record

# (judgment confidence, judged right) of six groups, each labelled right, sorted by confidence. Accuracy of the
# groups at or above t: t <= 0.45: 4/6; 0.46-0.64: 3/5; 0.65-0.72: 3/4; 0.73-0.83: 2/3; 0.84-0.95: 1 (2, then 1)
GROUPS = ((0.95, True), (0.88, True), (0.83, False), (0.72, True), (0.64, False), (0.45, True))


def _table(groups=GROUPS, unmatched: int = 0) -> dict:
    outcomes = [SimpleNamespace(localized=True, accurate=right, confidence=c) for c, right in groups]
    outcomes += [SimpleNamespace(localized=False, accurate=False, confidence=None)] * unmatched
    return coverage_table(outcomes)


def test_a_target_accuracy_takes_the_lowest_threshold_that_reaches_it():
    assert choose_threshold(_table(), {"target_accuracy": 0.75}) == {
        "threshold": 0.65, "coverage": pytest.approx(4 / 6, abs=1e-6), "accuracy": 0.75,
        "review_share": pytest.approx(2 / 6, abs=1e-6)}
    assert choose_threshold(_table(), {"target_accuracy": 0.7})["threshold"] == 0.65  # 4/6, then 3/5 below 0.65
    assert choose_threshold(_table(), {"target_accuracy": 0.6})["threshold"] == 0.0  # 4/6 at 0 already
    assert choose_threshold(_table(), {"target_accuracy": 1.0})["threshold"] == 0.84
    wrong_on_top = _table(((0.9, False), (0.5, True)))  # accuracy 0 from 0.51 up: 1 is never reached
    with pytest.raises(ValueError, match=r"--target-accuracy 1.0: no threshold reaches it on these groups \(the most "
                                         r"accurate: 0.500 at threshold 0.00, coverage 1.000\): lower the target"):
        choose_threshold(wrong_on_top, {"target_accuracy": 1.0})


def test_a_review_budget_sends_the_least_confident_up_to_it():
    """Budget 0.5 of six groups: three to review at best (t = 0.73 to 0.83 send 0.72, 0.64, 0.45), the lowest
    such threshold; budget 0.2: one group (0.45, at t = 0.46); budget 0: none (t = 0)."""
    assert choose_threshold(_table(), {"review_budget": 0.5}) == {
        "threshold": 0.73, "coverage": 0.5, "accuracy": pytest.approx(2 / 3, abs=1e-6), "review_share": 0.5}
    assert choose_threshold(_table(), {"review_budget": 0.2})["threshold"] == 0.46
    assert choose_threshold(_table(), {"review_budget": 0.0})["threshold"] == 0.0
    # two groups no item was matched to go to review at any threshold: a budget below 2/8 cannot be kept
    assert choose_threshold(_table(unmatched=2), {"review_budget": 0.25})["threshold"] == 0.0
    with pytest.raises(ValueError, match=r"--review-budget 0.2: even threshold 0 sends 0.250 of these groups to a "
                                         r"teacher .*: raise the budget"):
        choose_threshold(_table(unmatched=2), {"review_budget": 0.2})
    with pytest.raises(ValueError, match="no threshold can be chosen: no confidences: every group goes to review"):
        choose_threshold(_table(groups=(), unmatched=2), {"review_budget": 0.5})


@pytest.mark.parametrize(("flags", "message"), [
    ({"target_accuracy": 0.9, "review_budget": 0.1}, "--target-accuracy and --review-budget: give one"),
    ({"target_accuracy": 95}, "--target-accuracy 95: give a share above 0 and at most 1"),
    ({"target_accuracy": math.nan}, "--target-accuracy nan: give a share"),
    ({"review_budget": 1.0}, r"--review-budget 1.0: give a share from 0 up to \(not including\) 1"),
    ({"max_error": 0.05, "review_budget": 0.1}, "--review-budget and --max-error: give one"),
    ({"max_error": 0.0}, "--max-error 0.0: give a share above 0 and below 1"),
    ({"max_error": 0.05, "delta": 1.5}, "--delta 1.5: give a chance above 0 and below 1"),
    ({"certify": "points"}, "--certify points: give --max-error too"),
    ({"delta": 0.1}, "--delta 0.1: give --max-error too"),
    ({"target_accuracy": 0.9, "delta": 0.05}, "--delta 0.05: give --max-error too"),
    ({"max_error": 0.05, "certify": "marks"}, "--certify 'marks': choose one of items, points"),
])
def test_bad_selective_flags_are_one_line_naming_the_flag(flags, message):
    with pytest.raises(ValueError, match=message):
        SelectiveFlags(**flags).selective_rule()


def test_selection_asks_for_an_l3_setting_before_anything_is_read(tmp_path):
    sel = SelectRun(run=str(tmp_path), data=str(tmp_path), out=str(tmp_path / "o"), settings="L1-af,L2-ab",
                    backend="hf", target_accuracy=0.9)
    with pytest.raises(ValueError, match="--target-accuracy: --settings L1-af,L2-ab has no L3 setting"):
        check_select_run(sel)


def test_the_report_shows_the_table_and_plots_the_curve(tmp_path):
    settings = {"L3-af": {"selective": _table()}, "L3-ab": {"selective": {"rows": None, "undefined": "no conf"}}}
    lines = selective_table(settings)
    assert "| L3-af | 100.0 / 66.7 | 83.3 / 60.0 | 66.7 / 75.0 | 50.0 / 66.7 | 16.7 / 100.0 | 16.7 / 100.0 | " \
           "0.0 / – |" in lines
    assert "| L3-ab | – | – | – | – | – | – | – |" in lines and lines[-1] == "L3-ab: no conf."
    assert selective_table({"L3-af": {}}) == []  # a report from before confidences
    assert selective_plot({"L3-af": _table()["rows"]}, tmp_path / "s.png").stat().st_size > 0


# --------------------------------------------------------------------------------- chosen on validation, applied
PAGE = (400, 560)
COLORS = ("red", "green", "blue")  # one page each, two groups each: how the scripted backend knows the page
BOXES = (Box(40, 60, 200, 160), Box(40, 300, 200, 400))


def _mark(box: Box, mid: str) -> Mark:
    return Mark(points=[(box.x1, box.y1), (box.x2, box.y2)], label="right", raw_label="right", mark_id=mid,
                hand="42", std="42")


def _data(folder: Path) -> Path:
    """Three L3 pages of two answers each, in the GradingBench layout."""
    records = []
    for i, color in enumerate(COLORS):
        image = f"Mathematics/p{i}.png"
        path = image_root(folder, "L3") / image
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", PAGE, color).save(path)
        records.append(Record(f"p{i}", "L3", "Mathematics", image, *PAGE, [_mark(b, str(k + 1))
                                                                         for k, b in enumerate(BOXES)]))
    write_level(folder, "L3", records)
    return folder


class ConfidentBackend:
    """Answers page i with its two groups, judged and as confident as GROUPS[2i], GROUPS[2i + 1] say: one token
    per character, logprob 0 except over each judgment's value (log of its confidence)."""

    name, model = "hf", "scripted"

    def __init__(self, budget):
        self.budget = budget

    def chat(self, conversations, sampling):
        return [self._reply(conv[0]["content"][0]["image"]) for conv in conversations]

    def _reply(self, image: Image.Image) -> Reply:
        page = COLORS.index(next(c for c in COLORS if Image.new("RGB", (1, 1), c).getpixel((0, 0))
                                 == image.getpixel((0, 0))))
        items = [{"bbox_2d": to_model(box, *image.size, "qwen25", self.budget), "text": "42", "answer": "42",
                  "correctness": GROUPS[2 * page + k][1]} for k, box in enumerate(BOXES)]
        text = json.dumps(items)
        logprobs = [0.0] * len(text)
        pos = 0
        for k, it in enumerate(items):
            value = json.dumps(it["correctness"])
            start = text.index(value, text.index('"correctness"', pos))
            logprobs[start:start + len(value)] = [math.log(GROUPS[2 * page + k][0])] * len(value)
            pos = start + len(value)
        return Reply(text, [[i, lp] for i, lp in enumerate(logprobs)])

    def tokenizer(self):
        return None

    def close(self):
        pass


class PlainBackend(ConfidentBackend):
    """An endpoint that gives no logprobs: one item per page, the page's middle half, judged right."""

    def _reply(self, image: Image.Image) -> str:
        w, h = image.size
        box = to_model(Box(w / 4, h / 4, 3 * w / 4, 3 * h / 4), w, h, "qwen25", self.budget)
        return json.dumps([{"bbox_2d": box, "text": "x", "answer": "x", "correctness": True}])


def _training_run(folder: Path, budget) -> Path:
    """A training output_dir with one full checkpoint (its weights are never read: the backend is scripted)."""
    from gbtrain.train.checkpoints import mark_complete

    checkpoint = folder / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text("{}")
    (checkpoint / "model.safetensors").write_bytes(b"w")
    write_checkpoint_record(checkpoint, CheckpointRecord("qwen25", budget, 0.02))
    mark_complete(checkpoint, None, 2)
    (folder / "gbtrain_run.json").write_text(json.dumps({"model": "base", "dataset": None}))
    return folder


@pytest.mark.parametrize("rule", [{"target_accuracy": 0.75}, {"review_budget": 0.5}])
def test_the_threshold_chosen_on_validation_is_the_one_grade_pages_applies(tmp_path, budget, monkeypatch, rule):
    backend = ConfidentBackend(budget)
    monkeypatch.setattr(run, "open_backend", lambda r, plan: (backend, None))
    monkeypatch.setattr(grade, "open_backend", lambda r, plan: (backend, None))
    data, best = _data(tmp_path / "data"), tmp_path / "best"
    summary = select_checkpoint(SelectRun(run=str(_training_run(tmp_path / "run", budget)), data=str(data),
                                          out=str(tmp_path / "select"), settings="L3-af", split="all", backend="hf",
                                          copy_best=str(best), **rule), progress=False)
    chosen = summary["selective"]["settings"]["L3-af"]
    expected = {"target_accuracy": 0.65, "review_budget": 0.73}[next(iter(rule))]  # the hand-computed ones above
    assert chosen["threshold"] == expected and chosen["problem"] is None
    report = json.loads((tmp_path / "select" / "checkpoint-2" / "report.json").read_text())
    assert chosen["threshold"] == choose_threshold(report["settings"]["L3-af"]["selective"], rule)["threshold"]
    recorded = json.loads((best / SELECTIVE_RECORD).read_text())
    assert recorded["settings"]["L3-af"]["threshold"] == expected and recorded["rule"] == rule
    assert "Review threshold" in (tmp_path / "select" / "selection.md").read_text()

    # grade_pages on the same pages with the copied checkpoint: the recorded threshold, by default
    pages, out = image_root(data, "L3"), tmp_path / "graded"
    graded = grade_pages(GradeRun(str(best), str(pages), str(out), backend="hf"), progress=False)
    assert graded["review_threshold"]["threshold"] == expected
    assert graded["review_threshold"]["source"] == str((best / SELECTIVE_RECORD).resolve())
    files = [json.loads(p.read_text()) for p in (out / "pages").glob("*.json")]
    assert len(files) == 3 and all(page["review_threshold"] == expected for page in files)
    marked = sorted((round(it["confidence"], 4), it["review"]) for page in files for it in page["items"])
    assert marked == sorted((c, c < expected) for c, _ in GROUPS)
    assert graded["review"] == sum(c < expected for c, _ in GROUPS) and graded["without_confidence"] == 0
    assert json.loads((out / "run.json").read_text())["review_threshold"] == expected
    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["review"] for r in rows] == [str(float(r["confidence"]) < expected).lower() for r in rows]
    assert sorted(r["review"] for r in rows) == sorted(str(c < expected).lower() for c, _ in GROUPS)
    # the same rule given to grade_pages chooses the same threshold from the recorded validation table
    again = review_threshold(GradeRun(str(best), str(pages), str(tmp_path / "o2"), backend="hf", **rule))
    assert again["threshold"] == expected

    # another threshold on the same folder: refused in one line, naming the difference and the way out
    with pytest.raises(ValueError, match=rf"review_threshold: {expected} there, 0.9 now.*--overwrite"):
        grade_pages(GradeRun(str(best), str(pages), str(out), backend="hf", review_threshold=0.9), progress=False)


def test_a_threshold_without_logprobs_sends_every_item_to_review(tmp_path, budget, monkeypatch):
    pages = tmp_path / "pages"
    pages.mkdir()
    Image.new("RGB", (400, 560), "white").save(pages / "a.png")
    monkeypatch.setattr(grade, "open_backend", lambda r, plan: (PlainBackend(budget), None))
    summary = grade_pages(GradeRun("recorded", str(pages), str(tmp_path / "out"), backend="openai", coords="qwen25",
                                   min_pixels=budget.min_pixels, max_pixels=budget.max_pixels, review_threshold=0.5),
                          progress=False)
    assert summary["review"] == summary["items"] == summary["without_confidence"] == 1
    assert summary["review_threshold"] == {"threshold": 0.5, "source": "--review-threshold"}
    with Image.open(tmp_path / "out" / "overlays" / "a.png.png") as im:
        assert REVIEW_COLOR in {im.getpixel((x, 140)) for x in range(90, 110)}


def test_a_threshold_that_cannot_apply_is_one_line_naming_the_way_out(tmp_path):
    model = tmp_path / "ckpt"
    model.mkdir()
    pages = tmp_path / "pages"
    with pytest.raises(ValueError, match=r"--target-accuracy: --model .* holds no selective_threshold.json .*: record "
                                         r"one, or give --review-threshold"):
        review_threshold(GradeRun(str(model), str(pages), "o", target_accuracy=0.9))
    with pytest.raises(ValueError, match="--review-threshold and --target-accuracy: give one"):
        review_threshold(GradeRun(str(model), str(pages), "o", target_accuracy=0.9, review_threshold=0.5))
    with pytest.raises(ValueError, match=r"--review-threshold 1\.5: give a judgment confidence from 0 to 1"):
        review_threshold(GradeRun(str(model), str(pages), "o", review_threshold=1.5))
    assert review_threshold(GradeRun(str(model), str(pages), "o")) is None  # nothing recorded: no threshold
    (model / SELECTIVE_RECORD).write_text(json.dumps({"rule": {"target_accuracy": 0.9}, "evaluation": "e",
                                                      "settings": {"L3-ab": {"threshold": 0.5, "table": _table()}}}))
    with pytest.raises(ValueError, match=r"no threshold for L3-af \(it has L3-ab\), the setting answer-free pages are "
                                         r"graded in: rerun select_checkpoint with L3-af in --settings"):
        review_threshold(GradeRun(str(model), str(pages), "o"))
    (model / SELECTIVE_RECORD).write_text("[]")
    with pytest.raises(ValueError, match="not a threshold record of select_checkpoint: delete it"):
        review_threshold(GradeRun(str(model), str(pages), "o"))
    assert selection.SELECTIVE_RECORD == SELECTIVE_RECORD


def test_calibration_is_the_ece_of_the_confidence_bins():
    """Bins [0.9, 1.0]: confidences 0.95, 0.95 with one right: |0.5 - 0.95|; [0.6, 0.7): 0.65 right: |1 - 0.65|.
    ECE = 2/3 x 0.45 + 1/3 x 0.35 = 0.41667; an unmatched group counts in no bin."""
    outcomes = [SimpleNamespace(localized=True, accurate=ok, confidence=c) for c, ok in
                ((0.95, True), (0.95, False), (0.65, True))]
    outcomes.append(SimpleNamespace(localized=False, accurate=False, confidence=None))
    cal = calibration(outcomes)
    assert cal["ece"] == pytest.approx(2 / 3 * 0.45 + 1 / 3 * 0.35, abs=1e-6)
    bins = {b["low"]: b for b in cal["bins"] if b["n"]}
    assert bins[0.9] == {"low": 0.9, "high": 1.0, "n": 2, "confidence": 0.95, "accuracy": 0.5}
    assert calibration([SimpleNamespace(localized=True, accurate=True, confidence=1.0)])["bins"][-1]["n"] == 1
    assert calibration(outcomes[3:])["ece"] is None


@pytest.mark.parametrize(("entry", "problem"), [
    ({"threshold": float("nan")}, "threshold nan is not a share from 0 to 1"),
    ({"threshold": -1}, "threshold -1 is not a share from 0 to 1"),
    ({"threshold": 5}, "threshold 5 is not a share from 0 to 1"),
    ({"threshold": "0.5"}, "threshold '0.5' is not a share from 0 to 1"),
    ({"threshold": True}, "threshold True is not a share from 0 to 1"),
    ({"threshold": 0.5, "table": None}, "its coverage-accuracy table is missing or damaged"),
    ({"threshold": 0.5, "table": {"rows": [{"threshold": 2, "coverage": 1}]}},
     "its coverage-accuracy table is missing or damaged"),
    ({"threshold": None, "problem": None}, "no threshold, and no problem saying why"),
])
def test_a_threshold_record_is_checked_when_read(tmp_path, entry, problem):
    """A selective_threshold.json edited by hand (NaN, -1, 5, text) must not send every item, or none, to review."""
    model = tmp_path / "ckpt"
    model.mkdir()
    good = {"threshold": 0.5, "coverage": 0.5, "accuracy": 1.0, "review_share": 0.5, "table": _table()}
    (model / SELECTIVE_RECORD).write_text(json.dumps(
        {"rule": {"target_accuracy": 0.9}, "evaluation": "e", "settings": {"L3-af": good | entry}}))
    with pytest.raises(ValueError, match=rf"selective_threshold\.json: L3-af: {re.escape(problem)}: delete the file"):
        review_threshold(GradeRun(str(model), str(tmp_path / "pages"), "o"))


def _row_at(table: dict, threshold: float, **cells) -> dict:
    """`table` with its row at `threshold` changed to `cells`, as a hand edit leaves it."""
    rows = [dict(r, **cells) if r["threshold"] == threshold else r for r in table["rows"]]
    return {**table, "rows": rows}


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda t, e: {"table": _row_at(t, 0.3, accepted=10**12, errors=0)}, "its coverage-accuracy table is missing or "
                                                                          "damaged"),
    (lambda t, e: {"table": _row_at(t, 0.3, accepted="5")}, "its coverage-accuracy table is missing or damaged"),
    (lambda t, e: {"table": _row_at(t, 0.3, errors=99)}, "its coverage-accuracy table is missing or damaged"),
    (lambda t, e: {"table": _row_at(t, 0.3, accuracy=0.99)}, "its coverage-accuracy table is missing or damaged"),
    (lambda t, e: {"coverage": 0.9}, "its threshold 0.65 and figures are not those of its own table's row"),
    (lambda t, e: {"threshold": 0.655}, "its threshold 0.655 and figures are not those of its own table's row"),
])
def test_a_threshold_record_means_what_its_table_says(tmp_path, edit, problem):
    """Counts that are no counts (10^12, text, more errors than items), an accuracy its counts do not give, and a
    chosen threshold or coverage that its own table contradicts: refused when read, naming the file."""
    model = tmp_path / "ckpt"
    model.mkdir()
    table = _table()
    good = {**choose_threshold(table, {"target_accuracy": 0.75}), "table": table}
    assert review_threshold_entry_ok(good)
    (model / SELECTIVE_RECORD).write_text(json.dumps(
        {"rule": {"target_accuracy": 0.75}, "evaluation": "e", "settings": {"L3-af": good | edit(table, good)}}))
    with pytest.raises(ValueError, match=rf"selective_threshold\.json: L3-af: {re.escape(problem)}"):
        review_threshold(GradeRun(str(model), str(tmp_path / "pages"), "o"))


def review_threshold_entry_ok(entry: dict) -> bool:
    from gbtrain.grading.threshold import entry_problem

    return entry_problem(entry) is None


def _certifiable() -> dict:
    """100 pages of 5 items, 4 right at 0.99 and 1 wrong at 0.6 (tests/metric/test_certify.py: 10% is certified at
    0.61 with one checkpoint compared)."""
    pages = {f"p{i:02d}": [Candidate(0.99, False)] * 4 + [Candidate(0.6, True)] for i in range(100)}
    return coverage_table([SimpleNamespace(localized=True, accurate=not c.error, confidence=c.confidence)
                           for items in pages.values() for c in items], pages)


def test_grade_pages_chooses_a_certified_threshold_from_the_recorded_table(tmp_path):
    """grade_pages certifies anew from the recorded table at --delta divided among the checkpoints select_checkpoint
    compared on it (recorded as `candidates`), or applies the recorded certified threshold as it is."""
    model = tmp_path / "ckpt"
    model.mkdir()
    table = _certifiable()
    (model / SELECTIVE_RECORD).write_text(json.dumps(
        {"rule": {"target_accuracy": 0.9}, "evaluation": "e", "candidates": 3, "settings": {"L3-af": {
            "threshold": 0.0, "coverage": 1.0, "accuracy": 0.8, "review_share": 0.0, "table": table}}}))
    chosen = review_threshold(GradeRun(str(model), str(tmp_path / "pages"), "o", max_error=0.1))
    assert (chosen["threshold"], chosen["rule"]) == (0.61, {"max_error": 0.1, "delta": 0.05, "certify": "items"})
    assert (chosen["candidates"], chosen["tested_delta"], chosen["errors"]) == (3, pytest.approx(0.05 / 3), 0)
    # recorded by select_checkpoint with --max-error: grade_pages applies it with its figures, as recorded
    rule = {"max_error": 0.1, "delta": 0.05, "certify": "items"}
    certified = {**choose_threshold(table, rule), "problem": None, "table": table}
    (model / SELECTIVE_RECORD).write_text(json.dumps(
        {"rule": rule, "evaluation": "e", "candidates": 1, "settings": {"L3-af": certified}}))
    applied = review_threshold(GradeRun(str(model), str(tmp_path / "pages"), "o"))
    assert (applied["threshold"], applied["p_value"], applied["accepted"]) == (0.61, certified["p_value"], 400)
    # a table recorded before certified thresholds counted pages: evaluate again
    old = {**table, "pages": None}
    del old["pages"]
    (model / SELECTIVE_RECORD).write_text(json.dumps(
        {"rule": {"target_accuracy": 0.9}, "evaluation": "e", "settings": {"L3-af": {
            "threshold": 0.0, "coverage": 1.0, "accuracy": 0.8, "review_share": 0.0, "table": old}}}))
    with pytest.raises(ValueError, match=r"selective_threshold.json, L3-af: --max-error: this coverage table has no "
                                         r"per-page counts .*: evaluate the validation split again"):
        review_threshold(GradeRun(str(model), str(tmp_path / "pages"), "o", max_error=0.1))
    for bad in (0, "3", True):
        (model / SELECTIVE_RECORD).write_text(json.dumps({"rule": rule, "evaluation": "e", "candidates": bad,
                                                          "settings": {"L3-af": certified}}))
        with pytest.raises(ValueError, match="not a threshold record of select_checkpoint: delete it"):
            review_threshold(GradeRun(str(model), str(tmp_path / "pages"), "o"))


def test_a_students_pages_are_one_unit_where_the_build_names_students(tmp_path, monkeypatch):
    """certification_units: the training build's split_group names each page's student; without one, None."""
    build = SimpleNamespace(split_group=r"^([^/]+)/")
    monkeypatch.setattr(selection, "finished_build", lambda dataset: build)
    records = [Record(f"r{i}", "L3", "Mathematics", f"{who}/p{i}.png", 10, 10, []) for i, who in
               enumerate(("anna", "anna", "ben"))]
    assert selection.certification_units(records, str(tmp_path)) == (
        {"p0": "anna", "p1": "anna", "p2": "ben"}, "split_group ^([^/]+)/")
    assert selection.certification_units(records, None) is None
    build.split_group = None
    assert selection.certification_units(records, str(tmp_path)) is None
    build.split_group = r"^(class\d)/"
    with pytest.raises(ValueError, match=r"record r0: its image 'anna/p0.png' does not match split_group"):
        selection.certification_units(records, str(tmp_path))


def test_select_checkpoint_certifies_over_pages_and_says_why_not(tmp_path, budget, monkeypatch):
    """--max-error on three validation pages: the report's table holds each page's counts, and three pages are too
    few to certify anything: the record says so, with the checkpoints compared, and selection.md names the rule."""
    backend = ConfidentBackend(budget)
    monkeypatch.setattr(run, "open_backend", lambda r, plan: (backend, None))
    summary = select_checkpoint(SelectRun(run=str(_training_run(tmp_path / "run", budget)),
                                          data=str(_data(tmp_path / "data")), out=str(tmp_path / "select"),
                                          settings="L3-af", split="all", backend="hf", max_error=0.2), progress=False)
    chosen = summary["selective"]["settings"]["L3-af"]
    assert chosen["threshold"] is None
    assert re.search(r"--max-error 0.2 at --delta 0.05: no threshold is certified on these 3 pages .*evaluate more "
                     r"validation pages", chosen["problem"])
    assert summary["selective"]["candidates"] == 1
    report = json.loads((tmp_path / "select" / "checkpoint-2" / "report.json").read_text())
    pages = report["settings"]["L3-af"]["selective"]["pages"]
    assert sorted(pages) == ["p0", "p1", "p2"] and all(p["items"] == 2 for p in pages.values())
    assert "Review threshold (certified error of items 20.0% at delta 5.0%)" in \
        (tmp_path / "select" / "selection.md").read_text()

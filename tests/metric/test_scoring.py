import json

import pytest

from gbtrain.coords import CONVENTIONS, PixelBudget, to_model
from gbtrain.data.annotations import load_dataset
from gbtrain.data.conversations import answer_items
from gbtrain.metric.points import PointsOptions
from gbtrain.metric.scoring import (
    Predictions,
    PredictionsError,
    ScoreOptions,
    cer,
    read_predictions,
    reasoning_accuracy,
    recognition_rate,
    score,
    write_report,
)
from gbtrain.schema import Box, Mark, Record

W, H = 1000, 800


def mark(box, mid, label="right", hand="42", std="42", **kw):
    x1, y1, x2, y2 = box
    return Mark(points=[(x1, y1), (x2, y1), (x2, y2), (x1, y2)], label=label, raw_label=label, mark_id=mid,
                hand=hand, std=std, **kw)


def page(rid="p1", marks=None, level="L3"):
    marks = marks if marks is not None else [mark((100, 100, 200, 150), "1-1"),
                                              mark((100, 400, 300, 460), "1-2", "wrong", "7", "8")]
    return Record(rid, level, "Mathematics", f"Mathematics/{rid}.jpg", W, H, marks)


def item(box, text="42", answer="42", correctness=True):
    return {"bbox_2d": list(box), "text": text, "answer": answer, "correctness": correctness}


def run(records, responses, mode="answer-free", coords="abs", **kw):
    preds = Predictions({k: (v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
                         for k, v in responses.items()})
    return score(records, preds, ScoreOptions(records[0].level, mode, coords, **kw))


def outcome(report, gid):
    return next(g for g in report["groups"] if g["group_id"] == gid)


PERFECT = [item((100, 100, 200, 150)), item((100, 400, 300, 460), "7", "8", False)]


def test_perfect_predictions():
    r = run([page()], {"p1": PERFECT})
    assert (r["accuracy"], r["localized"], r["recognized"], r["reasoned"]) == (1, 1, 1, 1)
    assert r["map_20_50"] == 100 and r["fn"] == 0 and r["fp"] == 0
    assert r["correct"] == 2 and r["n_groups"] == 2


def test_each_gate_fails_alone():
    cases = {
        "far": [item((700, 700, 800, 780)), PERFECT[1]],
        "cer": [item((100, 100, 200, 150), text="13"), PERFECT[1]],
        "answer": [item((100, 100, 200, 150), answer="45"), PERFECT[1]],  # 7% off 42: beyond the default 5%
        "judgment": [item((100, 100, 200, 150), correctness=False), PERFECT[1]],
    }
    expected = {"far": (0, 0, 0, 0), "cer": (1, 0, 0, 0), "answer": (1, 1, 0, 0), "judgment": (1, 1, 1, 0)}
    for name, items in cases.items():
        g = outcome(run([page()], {"p1": items}), "1-1")
        assert (g["localized"], g["recognized"], g["reasoned"], g["accurate"]) == tuple(map(bool, expected[name])), name


def test_answer_based_ignores_the_answer():
    items = [item((100, 100, 200, 150), answer="nonsense"), PERFECT[1]]
    assert run([page()], {"p1": items}, mode="answer-based")["accuracy"] == 1
    assert run([page()], {"p1": items}, mode="answer-free")["accuracy"] == 0.5


def test_fn_fp_and_string_judgments():
    items = [item((100, 100, 200, 150), correctness="false"), item((100, 400, 300, 460), "7", "8", "true")]
    r = run([page()], {"p1": items})
    assert (r["fn"], r["fp"], r["accuracy"]) == (1, 1, 0)
    by_type = run([page(marks=[mark((100, 100, 200, 150), "1", question_type="Fill-in-the-blank"),
                               mark((100, 400, 300, 460), "2", "wrong", "7", "8", question_type="True-False")])],
                  {"p1": items})["breakdown"]["question_type"]
    assert {t: (b["costs_marks"], b["gives_marks"]) for t, b in by_type.items()} == {
        "Fill-in-the-blank": (1, 0), "True-False": (0, 1)}  # the teacher's right judged wrong costs marks
    bad = [item((100, 100, 200, 150), correctness="maybe"), PERFECT[1]]
    g = outcome(run([page()], {"p1": bad}), "1-1")
    assert g["reasoned"] and not g["accurate"] and g["judged"] is None


def test_cer_rules():
    assert cer("", "abc") == 1.0
    assert cer("", "") == 0.0
    assert cer("x", "") == 1.0
    assert cer("ＡＢ １", "ab1") == 0.0
    assert cer("abcd", "abc") == pytest.approx(1 / 3)
    assert cer("a much longer wrong answer", "ab") > 1
    rec = page(marks=[mark((100, 100, 200, 150), "1", hand="", std="x")])
    assert run([rec], {"p1": [item((100, 100, 200, 150), text="", answer="x")]})["accuracy"] == 1
    assert run([rec], {"p1": [item((100, 100, 200, 150), text="x", answer="x")]})["recognized"] == 0


def test_multi_box_items_and_groups():
    rec = page(marks=[mark((100, 100, 150, 150), "2", hand="a"), mark((300, 100, 350, 150), "2", hand="b")])
    items = [{"bbox_2d": [[100, 100, 150, 150], [300, 100, 350, 150]], "text": "ab", "answer": "42",
              "correctness": True}]
    r = run([rec], {"p1": items})
    assert r["accuracy"] == 1 and r["map_20_50"] == 100


def test_two_items_near_one_group_take_it_once():
    items = [item((100, 100, 200, 150)), item((102, 102, 202, 152)), PERFECT[1]]
    r = run([page()], {"p1": items})
    assert r["accuracy"] == 1
    assert r["ap_by_iou"]["0.50"] == pytest.approx((2 / 3) * 1)  # P = 2/3 (one extra item), R = 1


def test_radius_boundary():
    # group 1-1: 100x50 box, diagonal ~111.8; an item of the same size moved right by d
    diag = (100 ** 2 + 50 ** 2) ** 0.5
    inside = [item((100 + diag - 0.01, 100, 200 + diag - 0.01, 150))]
    outside = [item((100 + diag + 0.5, 100, 200 + diag + 0.5, 150))]
    rec = page(marks=[mark((100, 100, 200, 150), "1")])
    assert run([rec], {"p1": inside})["localized"] == 1
    assert run([rec], {"p1": outside})["localized"] == 0
    assert run([rec], {"p1": outside}, match_radius=2.0)["localized"] == 1


def test_no_reference_is_unverifiable():
    rec = page(marks=[mark((100, 100, 200, 150), "1", std="答案暂无")])
    r = run([rec], {"p1": [item((100, 100, 200, 150), answer="anything")]})
    assert r["accuracy"] == 1 and r["unverifiable"] == 1


def test_other_labels_count_as_wrong_or_are_excluded():
    rec = page(marks=[mark((100, 100, 200, 150), "1", "half_right"), mark((100, 400, 300, 460), "2")])
    items = [item((100, 100, 200, 150), correctness=False), item((100, 400, 300, 460))]
    r = run([rec], {"p1": items}, mode="answer-based")
    assert r["accuracy"] == 1 and r["labels"] == {"half_right": 1, "right": 1}
    r = run([rec], {"p1": items}, mode="answer-based", exclude_other=True)
    assert r["n_groups"] == 1 and r["excluded_other_labels"] == 1


def test_l2_extra_predictions_do_not_count_against():
    rec = page("p1_0", level="L2", marks=[mark((100, 100, 200, 150), "1"),
                                          mark((0, 0, 400, 200), "1", "question", "", None)])
    items = [item((100, 100, 200, 150)), item((100, 600, 300, 650), "zz")]
    r = run([rec], {"p1_0": items})
    assert r["accuracy"] == 1 and r["n_groups"] == 1


@pytest.mark.parametrize("coords", CONVENTIONS)
def test_coordinate_conventions(coords):
    budget = PixelBudget(28 * 28 * 4, 28 * 28 * 500)
    rec = page()
    items = [dict(it, bbox_2d=to_model(Box(*it["bbox_2d"]), W, H, coords, budget)) for it in PERFECT]
    r = run([rec], {"p1": items}, coords=coords, budget=budget)
    assert r["accuracy"] == 1 and r["map_20_50"] == 100


def test_no_boxes_and_invalid_boxes():
    items = [{"text": "42", "answer": "42", "correctness": True}, item((5000, 5000, 6000, 6000)), PERFECT[1]]
    r = run([page()], {"p1": items})
    assert r["coverage"]["no_valid_box"] == 2 and r["accuracy"] == 0.5


def test_coverage_missing_unexpected_unparsable():
    recs = [page("a"), page("b"), page("c")]
    r = run(recs, {"a": PERFECT, "b": "I see nothing to grade", "zzz": PERFECT})
    cov = r["coverage"]
    assert (cov["missing"], cov["unparsable"], cov["unexpected"]) == (1, 1, 1)
    assert cov["ids"] == {"missing": ["c"], "unparsable": ["b"], "unexpected": ["zzz"], "duplicate": []}
    assert r["n_groups"] == 6 and r["accuracy"] == pytest.approx(2 / 6, abs=1e-6)


def test_duplicates_in_prediction_file(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": "a", "response": "x"}\n{"id": "a", "response": "y"}\n')
    with pytest.raises(PredictionsError, match="duplicated id"):
        read_predictions(p)
    preds = read_predictions(p, allow_duplicates=True)
    assert preds.responses == {"a": "y"} and preds.duplicates == ["a"]
    (tmp_path / "bad.jsonl").write_text('{"id": "a"}\nnot json\n')
    with pytest.raises(PredictionsError, match=r"bad\.jsonl:2"):
        read_predictions(tmp_path / "bad.jsonl")


def test_breakdown_from_the_data():
    marks = [mark((100, 100, 200, 150), "1", question_type="Other", content_format="Chart-based", stage="Elementary"),
             mark((100, 400, 300, 460), "2", question_type="Multiple-choice")]
    r = run([page(marks=marks)], {"p1": [item((100, 100, 200, 150))]})
    b = r["breakdown"]
    none = {"costs_marks": 0, "gives_marks": 0}  # the one judged group was judged as the teacher did
    unmatched = dict.fromkeys(("text_f1", "text_anls", "answer_f1", "answer_anls"), 0.0)
    perfect = dict.fromkeys(unmatched, 1.0)
    assert b["question_type"] == {"Multiple-choice": {"n": 1, "correct": 0, "accuracy": 0.0, **unmatched, **none},
                                  "Other": {"n": 1, "correct": 1, "accuracy": 1.0, **perfect, **none}}
    assert b["stage"] == {"Elementary": {"n": 1, "correct": 1, "accuracy": 1.0, **perfect, **none},
                          "Unknown": {"n": 1, "correct": 0, "accuracy": 0.0, **unmatched, **none}}
    assert b["subject"]["Mathematics"]["n"] == 2


def test_deterministic_bytes(tmp_path):
    for name in ("a.json", "b.json"):
        write_report(run([page()], {"p1": PERFECT[:1]}), tmp_path / name)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert len(json.loads((tmp_path / "a.json").read_text())["scorer_sha256"]) == 64


def test_points_over_every_group_with_a_full_score():
    """The scorer's points report: a score comes from the item matched to its group; a group whose item gives no
    score is missing (and takes a worst score); a scored item that matched no group, or a group without points, is
    unexpected; --exclude-other does not drop half-right groups from it."""
    marks = [mark((100, 100, 200, 150), "1", full_score=10, score=10),
             mark((100, 400, 300, 460), "2", "half_right", full_score=10, score=4, score_2=5),
             mark((600, 100, 700, 150), "3", full_score=5, score=3),
             mark((600, 400, 700, 460), "4")]  # right/wrong only
    items = [dict(item((100, 100, 200, 150)), score=9), dict(item((100, 400, 300, 460)), score="7"),
             item((600, 100, 700, 150)), dict(item((600, 400, 700, 460)), score=1),
             dict(item((900, 700, 990, 790)), score=2)]  # far from every group
    p = run([page(marks=marks)], {"p1": items}, exclude_other=True)["points"]
    assert p["n"] == 3 and p["coverage"]["ids"]["missing"] == [["p1", "3"]]
    assert p["coverage"]["ids"]["unexpected"] == [["p1", "4"], ["p1", "item 4"]]
    m = p["model"]  # errors -1, +3 and, for the missing 3 of 5 (band 1), the worst score 0: -3
    assert (m["mae"], m["mean_signed_error"], m["max_error"]) == (round(7 / 3, 6), round(-1 / 3, 6), 3.0)
    assert m["confusion_matrix"]["counts"] == [[0, 1, 0], [1, 0, 0], [0, 0, 1]]
    assert p["second_teacher"]["teacher_2"]["n"] == 1 and p["second_teacher"]["teacher_2"]["mae"] == 1.0
    one_band = page(marks=[mark((100, 100, 200, 150), "1", full_score=10, score=10)])
    k = run([one_band], {"p1": [dict(item((100, 100, 200, 150)), score=10)]})["points"]["model"]["kappa"]
    assert k["value"] is None and "one band (>=85%)" in k["undefined"]
    assert run([page()], {"p1": PERFECT})["points"] is None  # no points in the annotations


def test_points_options_are_checked_and_recorded():
    rep = run([page()], {"p1": PERFECT}, points_options=PointsOptions((0.5,), 0.25))
    assert rep["settings"]["points_options"] == {"bands": (0.5,), "large_error": 0.25}
    with pytest.raises(ValueError, match=r"--point-bands 0\.9,0\.5: give increasing shares"):
        PointsOptions.parse("0.9,0.5", 0.5)


def test_diagnostics():
    rec = page()
    assert recognition_rate([rec], {("p1", "1-1"): "42", ("p1", "1-2"): "9"}) == 0.5
    assert reasoning_accuracy([rec], {("p1", "1-1"): "true", ("p1", "1-2"): "true"}) == 0.5


def test_perfect_predictions_in_every_setting(synth_dir):
    """Property: GT boxes, texts, answers and labels score accuracy 1.0 and mAP 100 everywhere."""
    budget = PixelBudget()
    loaded = load_dataset(synth_dir)
    for level, ld in loaded.items():
        for coords in CONVENTIONS:
            responses = {r.record_id: json.dumps(answer_items(r, coords, budget), ensure_ascii=False)
                         for r in ld.records}
            for mode in ("answer-free", "answer-based"):
                rep = score(ld.records, Predictions(responses), ScoreOptions(level, mode, coords))
                assert rep["accuracy"] == 1.0 and rep["map_20_50"] == 100, (level, coords, mode)


def test_answers_are_judged_by_their_type_within_the_tolerance():
    """104 is not 100 by default (no tolerance), and is with --answer-tolerance 0.05; a Multiple-choice reference
    reads choice letters; a text the rule cannot decide fails under the rule judge, counted as undecided."""
    marks = [mark((100, 100, 200, 150), "n", hand="104", std="100"),
             mark((100, 400, 300, 460), "c", hand="B", std="B", question_type="Multiple-choice"),
             mark((500, 100, 700, 150), "t", hand="lion", std="the lion")]
    items = [item((100, 100, 200, 150), "104", "104"), item((100, 400, 300, 460), "B", "(b)"),
             item((500, 100, 700, 150), "lion", "a big cat")]
    r = run([page(marks=marks)], {"p1": items})
    assert [outcome(r, gid)["reasoned"] for gid in "nct"] == [False, True, False]
    assert [outcome(r, gid)["answer_type"] for gid in "nct"] == ["number", "choice", "text"]
    assert [outcome(r, gid)["answer_by"] for gid in "nct"] == ["rule", "rule", "undecided"]
    assert r["answer_gate"] == {"by_rule": 2, "by_judge": 0, "undecided": 1, "no_reference": 0,
                                "types": {"choice": 1, "number": 1, "text": 1}}
    tolerant = run([page(marks=marks)], {"p1": items}, answer_tolerance=0.05)
    assert outcome(tolerant, "n")["reasoned"] and tolerant["settings"]["answer_tolerance"] == 0.05
    with pytest.raises(ValueError, match=r"--answer-tolerance nan: give a relative difference"):
        ScoreOptions("L3", "answer-free", "abs", answer_tolerance=float("nan"))


def test_soft_scores_of_transcriptions_and_answers():
    """Token F1 and ANLS per group and their means, by hand: group 1 reads "42" for "42" and answers "41" for "42"
    (F1 0; edit distance 1 of 2: similarity exactly 0.5, which DocVQA's script keeps: ANLS 0.5); group 2 reads "13"
    for "7" (F1 0; edit distance 2 of 2: ANLS 0) and answers "8" for "8" (1, 1)."""
    items = [item((100, 100, 200, 150), "42", "41"), item((100, 400, 300, 460), "13", "8", False)]
    r = run([page()], {"p1": items})
    g1, g2 = outcome(r, "1-1"), outcome(r, "1-2")
    assert (g1["text_f1"], g1["text_anls"], g1["answer_f1"], g1["answer_anls"]) == (1.0, 1.0, 0.0, 0.5)
    assert (g2["text_f1"], g2["text_anls"], g2["answer_f1"], g2["answer_anls"]) == (0.0, 0.0, 1.0, 1.0)
    assert r["soft_scores"] == {"text_f1": 0.5, "text_anls": 0.5, "answer_f1": 0.5, "answer_anls": 0.75}
    assert g1["box"] == [100, 100, 200, 150] and g1["iou"] == 1.0


def test_ignore_missing_scores_the_answered_records_only():
    """A missing reply (p2) and an unparsable one (p3) fail their groups by default; --ignore-missing leaves them out
    of every figure, and the coverage still counts them. An empty list is an answer (nothing found): it counts."""
    pages = [page("p1"), page("p2"), page("p3"), page("p4")]
    replies = {"p1": PERFECT, "p3": "I cannot read this page.", "p4": []}
    counted = run(pages, replies)
    assert counted["accuracy"] == 0.25 and counted["n_groups"] == 8 and counted["coverage"]["missing"] == 1
    answered = run(pages, replies, ignore_missing=True)
    assert answered["accuracy"] == 0.5 and answered["n_groups"] == 4 and answered["n_records"] == 2
    assert answered["coverage"]["missing"] == 1 and answered["coverage"]["unparsable"] == 1
    assert answered["map_20_50"] == 50
    assert answered["settings"]["ignore_missing"] is True


def test_the_self_check_passes_and_fails_when_a_metric_is_not_perfect(monkeypatch):
    from gbtrain.metric import scoring, text_scores

    assert scoring.self_check() == []
    monkeypatch.setattr(text_scores, "token_f1", lambda prediction, reference: 0.5)
    assert "answer-free: soft text_f1 0.5, not 1" in scoring.self_check()


def test_the_fingerprint_covers_every_module_that_runs_in_scoring():
    """Issue 49: scorer_sha256 hashes SCORER_MODULES and nothing else; a scoring run (both modes, points, logprobs,
    every gate) runs code of no other gbtrain module, and docs/metric.md lists each."""
    import hashlib
    import sys
    from pathlib import Path

    import gbtrain
    from gbtrain.metric.scoring import SCORER_MODULES, scorer_sha256

    package = Path(gbtrain.__file__).resolve().parent
    h = hashlib.sha256()
    for name in SCORER_MODULES:
        h.update(name.encode() + b"\0" + (package / name).read_bytes())
    assert scorer_sha256() == h.hexdigest() and "metric/agreement.py" not in SCORER_MODULES
    ran = set()

    def trace(frame, event, _arg):
        path = Path(frame.f_code.co_filename).resolve()
        if event == "call" and package in path.parents:
            ran.add(path.relative_to(package).as_posix())

    marks = [mark((100, 100, 200, 150), "1", full_score=4, score=3),
             mark((100, 400, 300, 460), "2", "wrong", "7", "8", question_type="Multiple-choice")]
    scored = [item((100, 100, 200, 150)) | {"score": "3,5"}, item((100, 400, 300, 460), "7", "B", False)]
    sys.setprofile(trace)
    try:
        for mode in ("answer-free", "answer-based"):
            run([page(marks=marks), page("p2")], {"p1": scored, "p2": "not json"}, mode=mode)
    finally:
        sys.setprofile(None)
    assert ran and ran <= set(SCORER_MODULES), sorted(ran - set(SCORER_MODULES))
    doc = (package.parent / "docs" / "metric.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in doc for name in SCORER_MODULES)


class YesJudge:
    """A judge that finds every answer equivalent (the interface of gbtrain.metric.judges: a name, judge_many and
    stats), standing for an LLM judge without a model."""

    name = "yes"

    def judge_many(self, pairs):
        return [True] * len(pairs)

    def stats(self, pairs):
        return {"asked": len(pairs), "yes": len(pairs), "no": 0, "unclear": 0, "unclear_examples": []}


def test_an_llm_judge_is_asked_what_the_rule_cannot_decide_or_with_no_rule_first_everything():
    """The paper's scorer asked its judge every answer (--no-rule-first); by default the typed rule decides the
    number (45 is not 42 within 5%: failed, the judge not asked) and the judge the text it cannot tell."""
    marks = [mark((100, 100, 200, 150), "n", hand="42", std="42"),
             mark((500, 100, 700, 150), "t", hand="lion", std="the lion")]
    items = [item((100, 100, 200, 150), "42", "45"), item((500, 100, 700, 150), "lion", "a big cat")]
    preds = Predictions({"p1": json.dumps(items)})
    first = score([page(marks=marks)], preds, ScoreOptions("L3", "answer-free", "abs"), YesJudge())
    assert [(outcome(first, g)["answer_by"], outcome(first, g)["reasoned"]) for g in "nt"] == [
        ("rule", False), ("yes", True)]
    assert first["judge_replies"]["asked"] == 1 and first["answer_gate"]["by_judge"] == 1
    paper = score([page(marks=marks)], preds, ScoreOptions("L3", "answer-free", "abs", rule_first=False), YesJudge())
    assert [(outcome(paper, g)["answer_by"], outcome(paper, g)["reasoned"]) for g in "nt"] == [
        ("yes", True), ("yes", True)]


def test_the_answer_soft_scores_are_over_the_groups_with_a_reference():
    """Group 1 (reference 42) answered exactly: 1; group 2 has no reference answer and no item matched it: it is in
    the transcriptions' means (0) and not in the answers'."""
    marks = [mark((100, 100, 200, 150), "1"), mark((100, 400, 300, 460), "2", std=None)]
    r = run([page(marks=marks)], {"p1": [item((100, 100, 200, 150))]})
    assert r["soft_scores"] == {"text_f1": 0.5, "text_anls": 0.5, "answer_f1": 1.0, "answer_anls": 1.0}

"""Points against teachers' points (gbtrain.metric.points) and the stand-alone agreement tool (eval/agreement.py):
every figure equals its hand computation on a small fixture, kappa is undefined (never 0) where it is 0/0, and ids
that do not match are refused with one line, or counted and listed, with no submission's name in the report."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gbtrain.metric.agreement import AgreementRun, agreement_file
from gbtrain.metric.parsing import NOT_A_NUMBER, NOT_FINITE, parse_points
from gbtrain.metric.points import PointsOptions, Reference, kappa, points_report

ROOT = Path(__file__).resolve().parents[2]
FIB, PS = "Fill-in-the-blank", "Problem-Solving"

# (key, full, teacher, type, second teacher); the model's scores below. Bands of the full score: <60%, 60-85%, >=85%.
REFS = [Reference(("s1", "a"), 10, 10, FIB, 9),  # model 9: -1, bands 2 -> 2
        Reference(("s1", "b"), 10, 4, FIB),  # model 1, then 7 (a duplicate: the last counts): +3, bands 0 -> 1
        Reference(("s2", "c"), 4, 2, FIB),  # model 2: exact, bands 0 -> 0
        Reference(("s2", "d"), 10, 8, PS),  # missing: the worst score, 0 (teacher above half): -8, bands 1 -> 0
        Reference(("s3", "e"), 5, 5, PS, 5),  # model 7 > full: out of range, counted as 5: 0, bands 2 -> 2
        Reference(("s3", "f"), 10, 1, PS)]  # model "abc": out of range, worst score 10: +9, bands 0 -> 2
GIVEN = [(("s1", "a"), 9), (("s1", "b"), 1), (("s1", "b"), "7"), (("s2", "c"), 2.0), (("s3", "e"), 7),
         (("s3", "f"), "abc"), (("s9", "z"), 3)]


def test_figures_equal_the_hand_computed_ones():
    report = points_report(REFS, GIVEN, PointsOptions())
    m = report["model"]
    # errors -1, 3, 0, -8, 0, 9 over full scores 10, 10, 4, 10, 5, 10
    assert (m["n"], m["mae"], m["normalized_mae"], m["mean_signed_error"], m["max_error"]) == \
        (6, 3.5, 0.35, 0.5, 9.0)
    assert m["large_errors"] == 2  # -8 and +9 are above half their full score; +3 of 10 is not
    # below the teacher (costs the student marks): -1 and -8; above (gives marks): +3 and +9
    assert (m["costs_marks"], m["gives_marks"]) == ({"n": 2, "points": 9}, {"n": 2, "points": 12})
    assert (m["exact_points"], m["exact_band"]) == (round(2 / 6, 6), 0.5)
    assert m["confusion_matrix"]["counts"] == [[1, 1, 1], [1, 0, 0], [0, 0, 2]]
    assert m["confusion_matrix"]["bands"] == ["<60%", "60-85%", ">=85%"]
    # po = 3/6, pe = (3*2 + 1*1 + 2*3)/36 = 13/36: kappa = (1/2 - 13/36) / (1 - 13/36) = 5/23
    assert m["kappa"] == {"value": round(5 / 23, 6), "undefined": None}
    # disagreement observed / expected: linear (2/6) / (18/36), quadratic (1.5/6) / (15.5/36)
    assert m["weighted_kappa"]["linear"]["value"] == round(1 / 3, 6)
    assert m["weighted_kappa"]["quadratic"]["value"] == round(13 / 31, 6)
    cov = report["coverage"]
    assert (cov["missing"], cov["unexpected"], cov["duplicate"], cov["out_of_range"]) == (1, 1, 1, 2)
    assert cov["ids"]["missing"] == [["s2", "d"]] and cov["ids"]["unexpected"] == [["s9", "z"]]
    assert cov["ids"]["duplicate"] == [["s1", "b"]]
    assert cov["ids"]["out_of_range"] == [{"id": ["s3", "e"], "score": "7", "why": "above the full score 5"},
                                          {"id": ["s3", "f"], "score": '"abc"', "why": NOT_A_NUMBER}]
    by_type = report["by_question_type"]
    assert by_type[FIB] == {"n": 3, "mae": round(4 / 3, 6), "normalized_mae": round(0.4 / 3, 6),
                            "mean_signed_error": round(2 / 3, 6), "max_error": 3.0, "large_errors": 0,
                            "costs_marks": {"n": 1, "points": 1}, "gives_marks": {"n": 1, "points": 3}}
    assert by_type[PS] == {"n": 3, "mae": round(17 / 3, 6), "normalized_mae": round(1.7 / 3, 6),
                           "mean_signed_error": round(1 / 3, 6), "max_error": 9.0, "large_errors": 2,
                           "costs_marks": {"n": 1, "points": 8}, "gives_marks": {"n": 1, "points": 9}}
    assert report["rules"]["large_error"] == "an error above 50% of the full score"


def test_the_second_teacher_is_reported_beside_and_a_one_band_kappa_is_undefined():
    second = points_report(REFS, GIVEN, PointsOptions())["second_teacher"]
    t = second["teacher_2"]  # a: 10 -> 9, e: 5 -> 5; every question in the top band on both sides
    assert (t["n"], t["mae"], t["mean_signed_error"], t["exact_points"], t["exact_band"]) == (2, 0.5, -0.5, 0.5, 1.0)
    assert t["kappa"]["value"] is None and "one band (>=85%)" in t["kappa"]["undefined"]
    assert all(t["weighted_kappa"][w]["value"] is None for w in ("linear", "quadratic"))
    assert second["model_on_these"]["n"] == 2 and second["model_on_these"]["mae"] == 0.5  # a: -1, e: 0


def test_kappa_against_hand_computed_values_and_its_undefined_cases():
    names = ["low", "mid", "high"]
    assert kappa([[2, 0, 0], [0, 2, 0], [0, 0, 2]], None, names)["value"] == 1.0
    assert kappa([[0, 0, 2], [0, 0, 0], [2, 0, 0]], None, names)["value"] == -1.0  # po 0, pe 0.5
    assert kappa([[0, 0, 4], [0, 0, 0], [0, 0, 0]], "linear", names) == {"value": 0.0, "undefined": None}
    assert kappa([[0, 0, 0], [0, 3, 0], [0, 0, 0]], "quadratic", names)["undefined"].startswith(
        "every question is in one band (mid)")
    assert kappa([[0] * 3] * 3, None, names) == {"value": None, "undefined": "no questions to compare"}


def test_bands_and_thresholds_are_options_stated_in_the_report():
    opts = PointsOptions.parse("0.5", 0.25)
    report = points_report(REFS[:1], [(("s1", "a"), 7)], opts)
    assert report["rules"]["bands"] == ["<50%", ">=50%"] and report["model"]["large_errors"] == 1
    assert opts.band(5, 10) == 1 and opts.band(4.99, 10) == 0
    for bands, large in (("0.85,0.6", 0.5), ("0,0.5", 0.5), ("1.5", 0.5), ("x", 0.5), ("0.6", 0.0), ("0.6", 2.0)):
        with pytest.raises(ValueError, match=r"^--(point-bands|large-error) .*: give "):
            PointsOptions.parse(bands, large)


@pytest.mark.parametrize(("value", "parsed"), [(7, (7.0, None)), ("7.5", (7.5, None)), ("7/10", (None, NOT_A_NUMBER)),
                                               (True, (None, NOT_A_NUMBER)), ([7], (None, NOT_A_NUMBER)),
                                               ("NaN", (None, NOT_FINITE)), (10 ** 400, (None, NOT_FINITE))])
def test_a_models_score_is_read_as_points_or_why_not(value, parsed):
    assert parse_points(value) == parsed


def test_a_missing_score_never_reads_as_agreement():
    """A question the model left unscored takes an end of 0..full in another band than the teacher's score."""
    refs = [Reference(("s", "q0"), 10, 0), Reference(("s", "q1"), 10, 10), Reference(("s", "q2"), 10, 5)]
    m = points_report(refs, [], PointsOptions())["model"]
    assert (m["exact_points"], m["exact_band"], m["mae"], m["large_errors"]) == (0.0, 0.0, round(25 / 3, 6), 2)


# ------------------------------------------------------------------------------------------------ eval/agreement.py
def jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


NAMES = {"s1": "Alice Zhang", "s2": "王小明", "s3": "Bob O'Neil"}


def teacher_rows() -> list[dict]:
    return [{"submission": NAMES[r.key[0]], "question": r.key[1], "score": r.score, "full_score": r.full_score,
             "question_type": r.question_type, **({"score_2": r.score_2} if r.score_2 is not None else {})}
            for r in REFS]


def model_rows() -> list[dict]:
    return [{"submission": NAMES.get(k[0], "Carol Stranger"), "question": k[1], "score": v} for k, v in GIVEN]


def agreement(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "eval/agreement.py"), "--teacher", str(tmp_path / "t.jsonl"),
                           "--model", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "out/report.json"), *flags],
                          capture_output=True, text=True, cwd=tmp_path)


def test_the_tool_refuses_mismatched_ids_in_one_line(tmp_path):
    jsonl(tmp_path / "t.jsonl", teacher_rows())
    jsonl(tmp_path / "m.jsonl", model_rows())
    done = agreement(tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("agreement: ")
    assert "t.jsonl" in line and "m.jsonl" in line and "--allow-missing" in line
    assert "1 of the 6 question(s)" in line and "submission '王小明' question 'd'" in line
    assert "1 score(s) of" in line and "'Carol Stranger'" in line
    assert not (tmp_path / "out").exists()


def test_the_tools_report_has_the_figures_and_no_submission_names(tmp_path):
    jsonl(tmp_path / "t.jsonl", teacher_rows())
    jsonl(tmp_path / "m.jsonl", model_rows())
    done = agreement(tmp_path, "--allow-missing")
    assert done.returncode == 2 and "scored more than once" in done.stderr and "--allow-duplicates" in done.stderr
    done = agreement(tmp_path, "--allow-missing", "--allow-duplicates")
    assert done.returncode == 0, done.stderr
    assert "6 questions of 3 submissions" in done.stdout and "kappa 0.217" in done.stdout
    text = (tmp_path / "out/report.json").read_text(encoding="utf-8")
    assert not any(name in text for name in [*NAMES.values(), "Carol Stranger", "Alice", "Zhang"])
    report = json.loads(text)
    expected = points_report(REFS, GIVEN, PointsOptions())
    assert report["points"]["model"] == json.loads(json.dumps(expected["model"]))
    assert report["points"]["coverage"]["ids"]["unexpected"] == [["s4", "z"]]  # numbered after the teachers' three
    assert report["submissions"] == 3 and sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [
        "m.jsonl", "report.json", "t.jsonl"]


@pytest.mark.parametrize(("rows", "message"), [
    ([{"submission": "x", "question": "1", "score": 3}], r"t\.jsonl:1: a line needs 'submission', 'question', "
                                                         r"'score', 'full_score'"),
    ([{"submission": "x", "question": "1", "score": 11, "full_score": 10}], r"t\.jsonl:1: score 11 is outside 0\.\.10"),
    ([{"submission": "x", "question": "1", "score": 1, "full_score": 0}], r"t\.jsonl:1: full_score 0 must be above 0"),
    ([{"submission": "x", "question": "1", "score": "1", "full_score": 2}], r"\"score\" must be a finite number"),
    ([{"submission": "x", "question": "1", "score": 1, "full_score": 2, "fullscore": 2}],
     r"unknown key 'fullscore' \(did you mean 'full_score'\?\)"),
    ([{"submission": "x", "question": "1", "score": 1, "full_score": 2}] * 2, r"t\.jsonl:2: .*graded twice"),
    ([{"submission": None, "question": "1", "score": 1, "full_score": 2}], r"\"submission\" must be a non-empty id"),
    ([], r"t\.jsonl: no teacher scores"),
])
def test_bad_teacher_lines_are_one_line_naming_file_and_line(tmp_path, rows, message):
    jsonl(tmp_path / "t.jsonl", rows)
    jsonl(tmp_path / "m.jsonl", [{"submission": "x", "question": "1", "score": 1}])
    run = AgreementRun(teacher=str(tmp_path / "t.jsonl"), model=str(tmp_path / "m.jsonl"),
                       out=str(tmp_path / "r.json"))
    with pytest.raises(ValueError, match=message):
        agreement_file(run)
    assert not (tmp_path / "r.json").exists()


def test_errors_are_split_by_whom_they_hurt():
    """Hand-computed: a verdict or points below the teacher's cost the student marks; above, they give marks."""
    from gbtrain.metric.points import points_errors, verdict_errors

    assert verdict_errors([(True, False), (True, False), (False, True), (True, True), (False, False)]) == {
        "costs_marks": 2, "gives_marks": 1}
    assert points_errors([(4, 1), (2, 2), (0, 1.5), (3, 2.5)]) == {"costs_marks": {"n": 2, "points": 3.5},
                                                                  "gives_marks": {"n": 1, "points": 1.5}}
    assert points_errors([]) == {"costs_marks": {"n": 0, "points": 0}, "gives_marks": {"n": 0, "points": 0}}

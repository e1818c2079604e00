"""Certified review thresholds (docs/metric.md#selective-grading): the guarantee under pages that cluster, by
simulation; the cases the item-level binomial failed; what the scorer counts (items matched to no group, a wrong
question, points); and a cross-check against MAPIE's Learn then Test, which no one here wrote."""

import importlib.util
import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from mapie.risk_control import FWERFixedSequenceTesting, control_fwer
from mapie.risk_control.methods import compute_hoeffding_bentkus_p_value, get_r_hat_plus

from gbtrain.metric.scoring import Predictions, ScoreOptions, score
from gbtrain.metric.selective import (
    STARTS,
    THRESHOLDS,
    Candidate,
    betting_p_value,
    certified_threshold,
    choose_threshold,
    coverage_table,
    graph_walk,
    merge_units,
    page_entry,
    start_indices,
    unit_losses,
)
from gbtrain.schema import Mark, Record
from gbtrain.vocabulary import ANSWER_BASED, L3

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_certify", ROOT / "scripts" / "bench_certify.py")
bench = sys.modules.setdefault("bench_certify", importlib.util.module_from_spec(_spec))  # its dataclass needs it there
_spec.loader.exec_module(bench)


MU_57, MU_80 = 0.543, 2.606  # bench.offset_for(0.57) and (0.8): models 57% and 80% accurate


def _table(pages: dict[str, list[Candidate]]) -> dict:
    """A coverage table of these pages alone (its rows, which only the chosen threshold's figures read, empty)."""
    return {"rows": [{"threshold": t, "coverage": 0.0, "accuracy": None} for t in THRESHOLDS], "undefined": None,
            "unit": "page", "pages": {page: page_entry(items) for page, items in pages.items()}}


def _clustered_null(rng, draws, pages, items, max_error, concentration):
    """Pages whose error rate is drawn around max_error (Beta, mean max_error: a page effect) and whose confidences
    carry a page effect of their own, independent of the errors: the error among the items any threshold accepts
    is exactly max_error, so every certification is a wrong one."""
    rate = rng.beta(max_error * concentration, (1 - max_error) * concentration, (draws, pages, 1))
    errors = rng.random((draws, pages, items)) < rate
    z = 1.5 + rng.standard_normal((draws, pages, 1)) + 1.5 * rng.standard_normal((draws, pages, items))
    return 1 / (1 + np.exp(-z)), errors


@pytest.mark.parametrize(("draws", "pages", "items", "concentration", "max_error"), [
    (2000, 15, 20, 5, 0.1),  # the item-level binomial certified 11-27% of such draws
    (1000, 150, 10, 2, 0.1),
    (1000, 200, 10, 2, 0.2),
])
def test_a_true_error_of_max_error_is_certified_in_at_most_delta_of_draws(draws, pages, items, concentration,
                                                                          max_error):
    """Measured (delta 0.05): 0 of 2,000, 5 and 13 of 1,000 (the betting test is conservative at the boundary).
    The bound is delta plus 3 Monte-Carlo standard errors of a 5% rate over the draws."""
    rng = np.random.default_rng(pages)
    confidences, errors = _clustered_null(rng, draws, pages, items, max_error, concentration)
    losses, _ = bench.losses_of(confidences, errors, max_error)
    certified = sum(j is not None for j in bench.certified_positions(losses, max_error, 0.05))
    assert certified / draws <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / draws)


def test_the_certified_threshold_holds_its_error_when_confidences_are_informative():
    """Informative confidences with page effects (scripts/bench_certify.py's model, 57% accuracy): the threshold
    certified for 20% must have a true error (on a large draw) of at most 20% in all but delta of the draws."""
    rng = np.random.default_rng(7)
    mu = MU_57
    confidences, errors = bench.draw_pages(rng, 1, 4000, 100, mu)
    position, wrong = bench.grid_positions(confidences.ravel()), errors.ravel()
    true_error = np.array([wrong[position <= j].mean() if (position <= j).any() else 0.0 for j in range(101)])
    confidences, errors = bench.draw_pages(rng, 300, 200, 10, mu)
    losses, _ = bench.losses_of(confidences, errors, 0.2)
    certified = [j for j in bench.certified_positions(losses, 0.2, 0.05) if j is not None]
    assert len(certified) > 200  # it certifies, mostly
    assert np.mean([true_error[j] > 0.2 for j in certified]) <= 0.05


def test_the_old_failures_now_certify():
    """The item-level walk stopped at the first sparse top bin: a perfect model on 1,000 groups (100 pages of 10)
    with confidences over 0.5-1 certified nothing; now it accepts every item at 10% and at 5%. At 57% accuracy,
    with informative confidences, 0 of 50 draws certified 20% on 150-1,500 groups; now 1,500 (150 pages of 10)
    accept about 55% on average (scripts/bench_certify.py, 2026-12-07; the best possible is 64%), and 150 groups
    (15 pages) are too few to certify anything with the page as the unit, which the error says."""
    rng = np.random.default_rng(3)
    confidences = rng.uniform(0.5, 1.0, (20, 100, 10))
    for max_error in (0.1, 0.05):
        losses, shares = bench.losses_of(confidences, np.zeros(confidences.shape, bool), max_error)
        assert bench.certified_shares(losses, shares, max_error, 0.05).min() == 1.0

    mu = MU_57
    confidences, errors = bench.draw_pages(rng, 50, 150, 10, mu)
    losses, shares = bench.losses_of(confidences, errors, 0.2)
    got = bench.certified_shares(losses, shares, 0.2, 0.05)
    assert got.mean() > 0.45 and (got > 0).mean() >= 0.9

    confidences, errors = bench.draw_pages(rng, 1, 15, 10, mu)
    pages = {f"p{i}": [Candidate(float(c), bool(e)) for c, e in zip(confidences[0, i], errors[0, i], strict=True)]
             for i in range(15)}
    table = _table(pages)
    with pytest.raises(ValueError, match=r"--max-error 0.2 at --delta 0.05: no threshold is certified on these 15 "
                                         r"pages \(.*at least 21 pages are needed\): allow a larger error"):
        certified_threshold(table, 0.2, 0.05)


def test_the_library_counts_what_the_simulation_counts():
    """One draw through page_entry and unit_losses (what reports hold) gives the vectorised losses (in the order of
    the names' hashes)."""
    rng = np.random.default_rng(1)
    confidences, errors = bench.draw_pages(rng, 1, 12, 9, MU_80)
    pages = {f"p{i:02d}": [Candidate(float(c), bool(e)) for c, e in zip(confidences[0, i], errors[0, i], strict=True)]
             for i in range(12)}
    table = json.loads(json.dumps(_table(pages)))  # as report.json holds it
    losses, _ = bench.losses_of(confidences, errors, 0.1)
    ours = unit_losses(table["pages"], 0.1)
    assert np.allclose(sorted(map(tuple, ours)), sorted(map(tuple, losses[0])), atol=1e-12)


def test_a_certified_choice_by_hand():
    """100 pages of 5 items: on each, 4 right at 0.99 and 1 wrong at 0.6. At 0.99 down to 0.61 a page's loss is
    0.1 + (0 - 0.1 x 4) / 5 = 0.02; from 0.60 down, 0.1 + (1 - 0.5) / 5 = 0.2 > 0.1. The walk from 0.99 certifies
    0.99 to 0.61 (the start at 0.8 joins it) and stops at 0.60, as the start at 0.5 does: t = 0.61, 400 items
    accepted, 0 errors. The same at 5% certifies nothing: a page's loss 0.05 - 0.04 = 0.01 is won at most
    1 + 1.04 x 0.04 times per page, 1.0417^100 = 60 < 1 / 0.01."""
    pages = {f"p{i:02d}": [Candidate(0.99, False)] * 4 + [Candidate(0.6, True)] for i in range(100)}
    outcomes = [type("O", (), {"localized": True, "accurate": not c.error, "confidence": c.confidence})()
                for items in pages.values() for c in items]
    table = coverage_table(outcomes, pages)
    assert table["pages"]["p00"] == {"items": 5, "points": 0.0, "accepted": [[0.99, 4, 0, 0.0, 0.0],
                                                                             [0.6, 0, 1, 0.0, 0.0]]}
    chosen = choose_threshold(table, {"max_error": 0.1, "delta": 0.05, "certify": "items"})
    assert (chosen["threshold"], chosen["accepted"], chosen["errors"], chosen["units"]) == (0.61, 400, 0, 100)
    assert chosen["coverage"] == pytest.approx(0.8) and chosen["p_value"] < 0.05 / len(STARTS)
    assert (chosen["candidates"], chosen["tested_delta"]) == (1, 0.05)
    # compared among 4 checkpoints: delta / 4 for each, recorded
    four = choose_threshold(table, {"max_error": 0.1, "delta": 0.05}, candidates=4)
    assert (four["candidates"], four["tested_delta"]) == (4, 0.0125)
    with pytest.raises(ValueError, match=r"--max-error 0.05 at --delta 0.05: no threshold is certified on these 100 "
                                         r"pages"):
        choose_threshold(table, {"max_error": 0.05, "delta": 0.05})
    with pytest.raises(ValueError, match=r"--max-error: this coverage table has no per-page counts .*: evaluate the "
                                         r"validation split again"):
        choose_threshold({"rows": table["rows"], "undefined": None}, {"max_error": 0.1, "delta": 0.05})
    damaged = {**table, "pages": {"p00": {"items": 5, "points": 0, "accepted": [[0.99, "4", 0, 0, 0]]}}}
    with pytest.raises(ValueError, match="per-page counts are damaged: evaluate the validation split again"):
        choose_threshold(damaged, {"max_error": 0.1, "delta": 0.05})


def test_pages_of_one_student_are_one_unit():
    """Merged by student, two pages of 5 become one unit of 10: what is drawn independently."""
    pages = {"a1": [Candidate(0.9, False)] * 5, "a2": [Candidate(0.9, True)] + [Candidate(None, False)] * 4,
             "b1": [Candidate(0.7, True, 2.0, 2.0)]}
    merged = merge_units(_table(pages), {"a1": "anna", "a2": "anna", "b1": "ben"}, "split_group s")
    assert merged["unit"] == "split_group s"
    assert merged["pages"] == {"anna": {"items": 10, "points": 0.0, "accepted": [[0.9, 5, 1, 0.0, 0.0]]},
                               "ben": {"items": 1, "points": 2.0, "accepted": [[0.7, 0, 1, 2.0, 2.0]]}}
    with pytest.raises(ValueError, match="page b1: not among the evaluated records"):
        merge_units(_table(pages), {"a1": "anna", "a2": "anna"}, "split_group s")


def test_the_betting_p_value_by_hand():
    """Two units with losses 0 and 0 against alpha 0.5, bets sized for level 0.05: sigma^2 starts at 1/4, so
    lambda_1 = min(sqrt(2 log 20 / (2 x 0.25)), 0.99 / 0.5) = 1.98 (capped): K_1 = 1 + 1.98 x 0.5 = 1.99; the
    running mean is then 1/6, sigma_1^2 = (1/4 + 1/36) / 2 = 5/36, lambda_2 capped again: K_2 = 1.99^2; p =
    1 / 1.99^2. A loss of 1 first: K_1 = 1 - 1.98 x 0.5 = 0.01, and the running maximum is the start's 1: p = 1."""
    assert betting_p_value(np.zeros((2, 1)), 0.5, 0.05)[0] == pytest.approx(1 / 1.99 ** 2, rel=1e-12)
    assert betting_p_value(np.array([[1.0], [0.0]]), 0.5, 0.05)[0] == 1.0


def test_the_graph_walk_passes_a_level_on():
    """Starts at positions 0 and 3, delta 0.1: 0.05 each. p = 0.04 at 0..2 (rejected from the first start), 0.08
    at 3: the second start alone cannot (0.08 > 0.05), but the first walk's 0.05 reaches it: 0.1 rejects it; then
    p = 0.2 at 4 stops the walk."""
    p = np.array([0.04, 0.04, 0.04, 0.08, 0.2])
    assert graph_walk(p, 0.1, [0, 3]).tolist() == [True, True, True, True, False]
    assert graph_walk(p, 0.1, [3]).tolist() == [False, False, False, True, False]  # one start, all of delta
    assert graph_walk(np.array([0.06, 0.01]), 0.1, [0, 1]).tolist() == [False, True]


# --------------------------------------------------------------------------------- against MAPIE


def _independent_items(rng, n, max_error):
    """n independent items (each its own page) of an 80% model with informative confidences."""
    confidences, errors = bench.draw_pages(rng, 1, n, 1, MU_80)
    losses, _ = bench.losses_of(confidences, errors, max_error)
    return losses[0]


def test_hoeffding_bentkus_agrees_with_mapie():
    """The comparison baseline of docs/metric.md (scripts/bench_certify.py --p-value hoeffding-bentkus) is
    MAPIE's compute_hoeffding_bentkus_p_value to 1e-9 at every threshold, on independent items."""
    rng = np.random.default_rng(5)
    for n, max_error in ((50, 0.1), (400, 0.05), (1500, 0.2)):
        losses = _independent_items(rng, n, max_error)
        r_hat = losses.mean(axis=0)
        ours = bench.hoeffding_bentkus(r_hat, n, max_error)
        theirs = compute_hoeffding_bentkus_p_value(r_hat, n, max_error)[:, 0]
        assert np.max(np.abs(ours - theirs)) < 1e-9


def test_the_search_agrees_with_mapie_where_the_procedures_are_the_same():
    """One start: graph_walk is MAPIE's fixed-sequence testing, the same thresholds accepted. Several equally spaced
    starts: MAPIE's multi-start fixed sequence tests each walk at delta / starts; graph_walk adds a walk's level to
    the next one's when it reaches it, so it accepts all that MAPIE does, and more only where a pooled level was
    needed."""
    rng = np.random.default_rng(11)
    differ = 0
    for trial in range(30):
        max_error = (0.05, 0.1, 0.2)[trial % 3]
        losses = _independent_items(rng, int(rng.integers(100, 1500)), max_error)
        p = bench.hoeffding_bentkus(losses.mean(axis=0), len(losses), max_error)
        theirs = control_fwer(p, 0.05, "fixed_sequence")
        assert np.flatnonzero(graph_walk(p, 0.05, [0])).tolist() == theirs.tolist()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = set(control_fwer(p, 0.05, FWERFixedSequenceTesting(n_starts=4)).tolist())
        ours = set(np.flatnonzero(graph_walk(p, 0.05, [0, 25, 50, 75])).tolist())
        assert theirs <= ours
        extra = sorted(ours - theirs)
        differ += bool(extra)
        assert all(p[j] > 0.05 / 4 for j in extra[:1])  # the first extra one needed more than one start's level
    assert differ < 30


def test_the_betting_capital_agrees_with_mapies_wsr_bound():
    """MAPIE's RCPS upper bound with Waudby-Smith-Ramdas betting (get_r_hat_plus, bound "wsr") bets the same
    predictable plug-in, capped at 1 (our truncation 1 - alpha), and reaches alpha exactly when the capital passes
    1 / delta. It sums the running maxima of two halves of the sample, so the units are followed by as many at
    alpha (a bet on them gains and loses nothing): the decisions must agree on every case."""
    rng = np.random.default_rng(2)
    rejected = 0
    for _ in range(200):
        n, alpha, delta = int(rng.integers(5, 80)), float(rng.uniform(0.05, 0.4)), float(rng.choice([0.01, 0.05]))
        losses = rng.beta(1, 1 / (alpha * rng.uniform(0.3, 1.5)), n)
        padded = np.concatenate([losses, np.full(n, alpha)]).reshape(-1, 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, bound = get_r_hat_plus(padded, np.array([alpha]), "rcps", "wsr", delta, 0.25)
        ours = betting_p_value(padded, alpha, delta, truncation=1 - alpha)[0] < delta
        assert ours == (bound[0] == alpha)
        rejected += ours
    assert 20 < rejected < 180


# --------------------------------------------------------------------------------- what the scorer counts
def _mark(x: int, mid: str, label: str = "right", full: float | None = None, score: float | None = None) -> Mark:
    extra = {} if full is None else {"full_score": full, "score": score}
    return Mark(points=[(x, 100), (x + 100, 200)], label=label, raw_label=label, mark_id=mid, hand="7", std="7",
                **extra)


def test_the_scorer_counts_made_up_items_wrong_questions_and_points():
    """A page of two groups (full scores 4 and 2, the teacher gave 4 and 0) and a reply of three items: question 1
    right and named right, awarding 4; question 2 judged right (the teacher says wrong) awarding 2; and a made-up
    box far from both, awarding 3 (within the page's largest full score, 4): 3 items, 4 + 2 + 3 = 9 points, 2
    errors, 0 + 2 + 3 = 5 points wrongly awarded. Then the same reply naming question 1's item "5": a wrong
    question is an error even where the judgment is right."""
    record = Record("r1", L3, "Mathematics", "Mathematics/p1.png", 1000, 1000,
                    [_mark(100, "1", "right", 4, 4), _mark(400, "2", "wrong", 2, 0)])
    items = [{"question_id": "1", "bbox_2d": [100, 100, 200, 200], "text": "7", "answer": "7", "correctness": True,
              "score": 4},
             {"question_id": "2", "bbox_2d": [400, 100, 500, 200], "text": "7", "answer": "7", "correctness": True,
              "score": 2},
             {"question_id": "9", "bbox_2d": [700, 700, 800, 800], "text": "x", "answer": "x", "correctness": True,
              "score": 3}]
    opts = ScoreOptions(L3, ANSWER_BASED, "abs")
    page = score([record], Predictions({"r1": json.dumps(items)}), opts)["selective"]
    # no logprobs: no confidences, so the table is undefined; the page's counts are what certification needs
    assert page["rows"] is None
    text = json.dumps(items)
    logprobs = [[i, 0.0] for i in range(len(text))]  # every value as sure as can be: confidence 1
    report = score([record], Predictions({"r1": text}, logprobs={"r1": logprobs}), opts)
    assert report["selective"]["pages"] == {"p1": {"items": 3, "points": 9.0, "accepted": [[1.0, 1, 2, 9.0, 5.0]]}}
    items[0]["question_id"] = "5"
    text = json.dumps(items)
    report = score([record], Predictions({"r1": text}, logprobs={"r1": [[i, 0.0] for i in range(len(text))]}), opts)
    assert report["selective"]["pages"]["p1"]["accepted"] == [[1.0, 0, 3, 9.0, 5.0]]


def test_start_positions_are_thresholds_of_the_grid():
    assert [THRESHOLDS[100 - j] for j in start_indices()] == list(STARTS)
    assert page_entry([Candidate(0.999, False), Candidate(0.07, True), Candidate(None, True)]) == {
        "items": 3, "points": 0.0, "accepted": [[0.99, 1, 0, 0.0, 0.0], [0.07, 0, 1, 0.0, 0.0]]}


def test_points_are_certified_against_the_accepted_full_scores():
    """100 pages of two questions of 5 points: one at 0.99 graded exactly, one at 0.6 awarding 5 points the teacher
    did not. Per page at 0.99 to 0.61: 0.1 + (0 - 0.1 x 5) / 10 = 0.05; from 0.6: 0.1 + (5 - 0.1 x 10) / 10 = 0.5.
    10% of the points is certified at 0.61; a page graded right/wrong only has no points and is left out."""
    pages = {f"p{i:02d}": [Candidate(0.99, False, 5.0, 0.0), Candidate(0.6, True, 5.0, 5.0)] for i in range(100)}
    pages["plain"] = [Candidate(0.99, False)]
    chosen = certified_threshold(_table(pages), 0.1, 0.05, "points")
    assert (chosen["threshold"], chosen["units"], chosen["certify"]) == (0.61, 100, "points")
    assert (chosen["points_accepted"], chosen["points_error"], chosen["points_error_share"]) == (500.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="--certify points: no page of this evaluation has points"):
        certified_threshold(_table({"plain": [Candidate(0.99, False)]}), 0.1, 0.05, "points")

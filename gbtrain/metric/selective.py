"""Selective grading's coverage-accuracy table (docs/metric.md#selective-grading): how accurate the judgments a
confidence threshold leaves to the model are, against the share it sends to a teacher; the threshold a target
accuracy, a review budget or a certified error bound asks for, chosen on validation and applied by
eval/grade_pages.py; and how well the confidences are calibrated (ECE, the reliability table)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gbtrain.config import option

THRESHOLDS = tuple(i / 100 for i in range(101))
NO_CONFIDENCES = "no confidences: every group goes to review"


class Graded(Protocol):
    localized: bool
    accurate: bool
    confidence: float | None


def coverage_table(outcomes: Sequence[Graded], pages: dict[str, Sequence[Candidate]] | None = None) -> dict:
    """At each threshold t = 0, 0.01, ..., 1: `coverage`, the share of the groups graded automatically (matched by
    an item whose judgment confidence is >= t; the others, unmatched ones included, go to review), and `accuracy`,
    the share of those that pass every gate (null when none is left). With `pages` (each page's Candidates: its
    groups and the model's items matched to none), `pages` holds each page's page_entry, what a certified
    threshold is computed from."""
    if not any(o.confidence is not None for o in outcomes):
        return {"rows": None, "undefined": NO_CONFIDENCES}
    n = len(outcomes)
    rows = []
    for t in THRESHOLDS:
        auto = [o for o in outcomes if o.localized and o.confidence is not None and o.confidence >= t]
        right = sum(o.accurate for o in auto)
        rows.append({"threshold": t, "coverage": round(len(auto) / n, 6),
                     "accuracy": round(right / len(auto), 6) if auto else None, "accepted": len(auto),
                     "errors": len(auto) - right})
    if pages is None:
        return {"rows": rows, "undefined": None}
    return {"rows": rows, "undefined": None, "unit": "page",
            "pages": {page: page_entry(items) for page, items in sorted(pages.items())}}


CALIBRATION_BINS = 10


def calibration(outcomes: Sequence[Graded]) -> dict:
    """How well the judgment confidences of the matched groups predict that a group passes every gate: per
    confidence bin (tenths; 1.0 in the last), its groups, mean confidence and accuracy, and the expected calibration
    error ECE = sum over bins of (groups / all) x |accuracy - mean confidence| (0: calibrated)."""
    rated = [o for o in outcomes if o.localized and o.confidence is not None]
    if not rated:
        return {"ece": None, "bins": None, "undefined": NO_CONFIDENCES}
    bins: list[list[Graded]] = [[] for _ in range(CALIBRATION_BINS)]
    for o in rated:
        bins[min(int(o.confidence * CALIBRATION_BINS), CALIBRATION_BINS - 1)].append(o)
    rows = [{"low": i / CALIBRATION_BINS, "high": (i + 1) / CALIBRATION_BINS, "n": len(b),
             "confidence": round(sum(o.confidence for o in b) / len(b), 6) if b else None,
             "accuracy": round(sum(o.accurate for o in b) / len(b), 6) if b else None} for i, b in enumerate(bins)]
    ece = sum(r["n"] / len(rated) * abs(r["accuracy"] - r["confidence"]) for r in rows if r["n"])
    return {"ece": round(ece, 6), "bins": rows, "undefined": None}


# --------------------------------------------------------------------------------- choosing a threshold
TARGET_FLAG, BUDGET_FLAG, CERTIFIED_FLAG = "--target-accuracy", "--review-budget", "--max-error"
CERTIFY = ("items", "points")


DEFAULT_DELTA = 0.05  # --delta when --max-error is given without it


@dataclass(kw_only=True)
class SelectiveFlags:
    """The flags that choose a selective-grading threshold from a validation coverage-accuracy table, defined once:
    eval/select_checkpoint.py chooses it and records it with the best checkpoint, eval/grade_pages.py applies it."""

    target_accuracy: float | None = option(None, "selective grading: the lowest confidence threshold whose validation "
                                                 "accuracy of the items graded automatically reaches this share (0-1)",
                                           group="selective")
    review_budget: float | None = option(None, "selective grading: the share (0-1) of the validation items that may go "
                                               "to a teacher; the least confident go, up to it", group="selective")
    max_error: float | None = option(None, "selective grading, certified: the lowest threshold whose error among "
                                           "the items graded automatically (made-up ones too) is at most this share "
                                           "(0-1) with probability >= 1 - --delta (Learn then Test over the "
                                           "validation pages)", group="selective")
    delta: float | None = option(None, "with --max-error: the chance the bound may fail (0-1; default 0.05)",
                                 group="selective")
    certify: str = option("items", "with --max-error: what the error counts: items (wrong judgments among the items "
                                   "accepted) or points (points wrongly awarded, against the accepted items' full "
                                   "scores)", choices=CERTIFY, group="selective")

    def selective_rule(self) -> dict | None:
        """{"target_accuracy": a} or {"review_budget": b} as asked, or None; a share outside its range, or both, is
        a ValueError naming the flag."""
        given = [flag for flag, value in ((TARGET_FLAG, self.target_accuracy), (BUDGET_FLAG, self.review_budget),
                                          (CERTIFIED_FLAG, self.max_error)) if value is not None]
        if len(given) > 1:
            raise ValueError(f"{' and '.join(given)}: give one (a target accuracy, a review budget, or a certified "
                             f"error bound)")
        if self.certify not in CERTIFY:
            raise ValueError(f"--certify {self.certify!r}: choose one of {', '.join(CERTIFY)}")
        if self.certify != "items" and self.max_error is None:
            raise ValueError(f"--certify {self.certify}: give {CERTIFIED_FLAG} too (the error it bounds)")
        if self.delta is not None and self.max_error is None:  # it would be taken and do nothing
            raise ValueError(f"--delta {self.delta}: give {CERTIFIED_FLAG} too (the bound whose chance of failing it "
                             f"is)")
        if self.max_error is not None:
            delta = DEFAULT_DELTA if self.delta is None else self.delta
            if not 0 < self.max_error < 1:  # NaN too
                raise ValueError(f"{CERTIFIED_FLAG} {self.max_error}: give a share above 0 and below 1, e.g. 0.05")
            if not 0 < delta < 1:
                raise ValueError(f"--delta {delta}: give a chance above 0 and below 1, e.g. 0.05")
            return {"max_error": self.max_error, "delta": delta, "certify": self.certify}
        if self.target_accuracy is not None:
            if not 0 < self.target_accuracy <= 1:  # NaN too
                raise ValueError(f"{TARGET_FLAG} {self.target_accuracy}: give a share above 0 and at most 1, e.g. "
                                 f"0.95")
            return {"target_accuracy": self.target_accuracy}
        if self.review_budget is not None:
            if not 0 <= self.review_budget < 1:
                raise ValueError(f"{BUDGET_FLAG} {self.review_budget}: give a share from 0 up to (not including) 1, "
                                 f"e.g. 0.2")
            return {"review_budget": self.review_budget}
        return None


def rule_flag(rule: dict) -> str:
    """The flag that gave a selective rule, as messages name it."""
    return TARGET_FLAG if "target_accuracy" in rule else CERTIFIED_FLAG if "max_error" in rule else BUDGET_FLAG


def choose_threshold(table: dict, rule: dict, candidates: int = 1) -> dict:
    """The threshold of a coverage table (coverage_table) that `rule` asks for, with the table's figures there:
    {"threshold", "coverage", "accuracy", "review_share"} (review_share = 1 - coverage).

    target_accuracy a: the lowest threshold whose accuracy is >= a, so the most groups are graded automatically
    while the rest stays at a. review_budget b: the highest review share that is <= b (the least confident groups
    go to a teacher, up to b), at the lowest threshold that gives it, so that new pages see no threshold higher
    than validation needed. max_error: certified_threshold, over `candidates` checkpoints compared on this
    evaluation. No threshold that meets the rule is a ValueError saying what the table does reach."""
    rows = table.get("rows")
    if not rows:
        raise ValueError(f"no threshold can be chosen: {table.get('undefined') or NO_CONFIDENCES}")
    if "max_error" in rule:
        return certified_threshold(table, rule["max_error"], rule["delta"], rule.get("certify", "items"), candidates)
    if "target_accuracy" in rule:
        target = rule["target_accuracy"]
        meeting = [r for r in rows if r["accuracy"] is not None and r["accuracy"] >= target]
        if not meeting:
            best = max((r for r in rows if r["accuracy"] is not None), key=lambda r: (r["accuracy"], r["coverage"]))
            raise ValueError(f"{TARGET_FLAG} {target}: no threshold reaches it on these groups (the most accurate: "
                             f"{best['accuracy']:.3f} at threshold {best['threshold']:.2f}, coverage "
                             f"{best['coverage']:.3f}): lower the target, or choose by {BUDGET_FLAG}")
        chosen = min(meeting, key=lambda r: r["threshold"])
    else:
        budget = rule["review_budget"]
        within = [r for r in rows if _review_share(r) <= budget]
        if not within:
            raise ValueError(f"{BUDGET_FLAG} {budget}: even threshold 0 sends {_review_share(rows[0]):.3f} of these "
                             f"groups to a teacher (those no item was matched to, or whose judgment has no "
                             f"confidence): raise the budget, or choose by {TARGET_FLAG}")
        chosen = min(within, key=lambda r: (-_review_share(r), r["threshold"]))
    return {"threshold": chosen["threshold"], "coverage": chosen["coverage"], "accuracy": chosen["accuracy"],
            "review_share": _review_share(chosen)}


# --------------------------------------------------------------------------------- certified thresholds
# Where the certified search's walks start (docs/metric.md#selective-grading), fixed before any data is seen: the
# strictest thresholds for the confidences logprobs give (most at 0.99 and up, many exactly 1), lower ones for models
# whose confidences spread. Each start gets an equal share of delta and a walk that certifies its way down to the
# next start adds its share to that walk's, so a start costs little where the walk from above reaches it; five
# certified the most of the start sets tried (scripts/bench_certify.py, docs/metric.md).
STARTS = (1.0, 0.99, 0.95, 0.8, 0.5)
TRUNCATION = 0.99  # of the bets, as a share of the largest one the losses allow (betting_p_value)
STALE = ("this coverage table has no per-page counts of the items it accepts (it was recorded before certified "
         "thresholds counted pages and items matched to no group): evaluate the validation split again")


@dataclass(frozen=True)
class Candidate:
    """One item a threshold may leave to the model on a page: its judgment confidence (None: it always goes to a
    teacher), whether accepting it is an error, and, where it is graded in points, its full score and the points it
    awards wrongly (both 0 otherwise)."""

    confidence: float | None
    error: bool
    full: float = 0.0
    points_error: float = 0.0


def grid_threshold(confidence: float) -> float:
    """The strictest threshold of THRESHOLDS that accepts `confidence` (t <= confidence, as coverage_table
    compares), so that any threshold's counts are sums over the grid."""
    k = min(max(int(confidence * 100), 0), 100)
    while k < 100 and THRESHOLDS[k + 1] <= confidence:
        k += 1
    while k > 0 and THRESHOLDS[k] > confidence:
        k -= 1
    return THRESHOLDS[k]


def page_entry(candidates: Sequence[Candidate]) -> dict:
    """One page's share of a coverage table, compactly: its `items`, its `points` (their full scores), and for
    each grid threshold at which items start to be accepted (strictest first) [t, right, wrong, full scores, points
    wrongly awarded] of those items: a threshold's counts are the sums over the entries with t >= it."""
    entering: dict[float, list] = {}
    for c in candidates:
        if c.confidence is not None:
            row = entering.setdefault(grid_threshold(c.confidence), [0, 0, 0.0, 0.0])
            row[1 if c.error else 0] += 1
            row[2] += c.full
            row[3] += c.points_error
    return {"items": len(candidates), "points": round(sum(c.full for c in candidates), 6),
            "accepted": _accepted_rows(entering)}


def _accepted_rows(entering: dict[float, list]) -> list[list]:
    """A page's `accepted`, from [right, wrong, full scores, points wrongly awarded] per grid threshold."""
    return [[t, r, w, round(f, 6), round(e, 6)] for t, (r, w, f, e) in sorted(entering.items(), reverse=True)]


def pages_intact(pages) -> bool:
    """Whether a table's `pages` are as page_entry writes them: a record edited by hand must neither stop the
    certification with a traceback nor certify on counts that are not counts."""
    def count(v) -> bool:  # at most 10^9: a page of more items or points is no page
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= 10**9

    return isinstance(pages, dict) and all(
        isinstance(e, dict) and count(e.get("items")) and count(e.get("points")) and isinstance(e.get("accepted"), list)
        and all(isinstance(a, list) and len(a) == 5 and all(count(v) for v in a) and a[0] <= 1 for a in e["accepted"])
        for e in pages.values())


def merge_units(table: dict, unit_of: dict[str, str], unit: str) -> dict:
    """`table` with its pages merged into the units they are drawn in (`unit_of`: page -> its student or exam,
    whose pages share a hand and a sitting and so are not independent); `unit` names them. A page it does not
    name is a ValueError."""
    pages = table.get("pages")
    if pages is None:
        return table
    merged: dict[str, dict] = {}
    for page, entry in pages.items():
        if page not in unit_of:
            raise ValueError(f"page {page}: not among the evaluated records, so its student or exam is unknown: "
                             f"evaluate the validation split again")
        into = merged.setdefault(unit_of[page], {"items": 0, "points": 0.0, "accepted": {}})
        into["items"] += entry["items"]
        into["points"] += entry["points"]
        for t, *counts in entry["accepted"]:
            row = into["accepted"].setdefault(t, [0, 0, 0.0, 0.0])
            row[:] = [a + b for a, b in zip(row, counts, strict=True)]
    return {**table, "unit": unit, "pages": {
        name: {"items": m["items"], "points": round(m["points"], 6), "accepted": _accepted_rows(m["accepted"])}
        for name, m in sorted(merged.items())}}


def _entering(pages: list[dict], column: int) -> np.ndarray:
    """units x thresholds (strictest first): the sum of one column of the items entering at each threshold."""
    out = np.zeros((len(pages), len(THRESHOLDS)))
    for u, entry in enumerate(pages):
        for row in entry["accepted"]:
            out[u, round((1 - row[0]) * 100)] += row[column]
    return out


def unit_losses(pages: dict, max_error: float, certify: str = "items") -> np.ndarray:
    """Y[u, j] in [0, 1] for each unit u (page, or student or exam) and threshold THRESHOLDS[100 - j] (strictest
    first): max_error + (errors - max_error x accepted) / the unit's items; in points, (points wrongly awarded -
    max_error x the accepted items' full scores) / the unit's points. Its mean over units is <= max_error exactly
    when the errors among the accepted items are at most max_error of them, each unit weighing the same. Units
    with nothing to count (no item; in points, no points) are left out. The rows are in the order the betting test
    takes them: by a hash of the unit's name, fixed and unrelated to its counts (names in their own order may follow
    the students' marks, and a test that meets the good pages first would certify too readily)."""
    size = "items" if certify == "items" else "points"
    kept = [pages[name] for name in sorted(pages, key=lambda name: hashlib.sha256(name.encode()).hexdigest())
            if pages[name][size] > 0]
    if certify == "items":
        wrong, accepted = _entering(kept, 2), _entering(kept, 1) + _entering(kept, 2)
    else:
        wrong, accepted = _entering(kept, 4), _entering(kept, 3)
    sizes = np.array([entry[size] for entry in kept], dtype=float).reshape(-1, 1)
    losses = max_error + (np.cumsum(wrong, axis=1) - max_error * np.cumsum(accepted, axis=1)) / sizes
    return np.clip(losses, 0.0, 1.0)


def betting_p_value(losses: np.ndarray, alpha: float, design_level: float, truncation: float = TRUNCATION
                    ) -> np.ndarray:
    """The betting p-value of "the mean of iid [0, 1] losses is at least alpha", along axis -2 (units, in a fixed
    order) for each column: a gambler stakes lambda_i x (alpha - Y_i) on each unit in turn, so the capital K_t =
    prod (1 + lambda_i (alpha - Y_i)) is a nonnegative supermartingale under the hypothesis and, by Ville's
    inequality, p = min(1, 1 / max_t K_t) is valid (Waudby-Smith & Ramdas 2024, the predictable plug-in bet):
    lambda_i = min(sqrt(2 log(1 / design_level) / (n sigma_{i-1}^2)), truncation / (1 - alpha)), sigma^2 the running
    variance about the running mean (from 1/4 and 1/2). It stakes more the less the losses vary, which is what
    Hoeffding-Bentkus, made for the worst [0, 1] variable, cannot: pages of many items vary little."""
    n = losses.shape[-2]
    seen = np.arange(1, n + 1).reshape(-1, 1)
    mean = (0.5 + np.cumsum(losses, axis=-2)) / (seen + 1)
    variance = (0.25 + np.cumsum((losses - mean) ** 2, axis=-2)) / (seen + 1)
    before = np.concatenate([np.full_like(variance[..., :1, :], 0.25), variance[..., :-1, :]], axis=-2)
    stake = np.minimum(np.sqrt(2 * math.log(1 / design_level) / (n * before)), truncation / (1 - alpha))
    capital = np.cumsum(np.log1p(stake * (alpha - losses)), axis=-2).max(axis=-2)
    return np.minimum(1.0, np.exp(-capital))


def start_indices() -> list[int]:
    """STARTS as positions in the chain of thresholds, strictest first."""
    return [round((1 - t) * 100) for t in STARTS]


def graph_walk(p_values: np.ndarray, delta: float, starts: Sequence[int]) -> np.ndarray:
    """Which hypotheses of a chain (thresholds, strictest first) are rejected at family-wise error delta: each
    start gets delta / len(starts); a rejected hypothesis hands its level on to the next one down the chain not yet
    rejected (Bretz et al. 2009's sequentially rejective graph, the fallback procedure): from each start a fixed
    sequence walks down until a p-value exceeds its level, and a walk that reaches another adds its level to it.
    Valid whatever the p-values' dependence; one start is plain fixed-sequence testing."""
    level = np.zeros(len(p_values))
    for s in starts:
        level[s] += delta / len(starts)
    rejected = np.zeros(len(p_values), dtype=bool)
    progress = True
    while progress:
        progress = False
        for j in np.flatnonzero(~rejected & (level > 0) & (p_values <= level)):
            if rejected[j] or p_values[j] > level[j]:
                continue
            rejected[j], progress = True, True
            later = np.flatnonzero(~rejected[j + 1:])
            if later.size:
                level[j + 1 + later[0]] += level[j]
            level[j] = 0.0
    return rejected


def threshold_p_values(losses: np.ndarray, max_error: float, delta: float) -> np.ndarray:
    """Each threshold's p-value of "the error among the accepted items exceeds max_error" from units x thresholds
    unit_losses (the units drawn independently): betting_p_value, its bets sized for the level a start is tested
    at (delta / len(STARTS))."""
    return betting_p_value(losses, max_error, delta / len(STARTS))


def certified_index(losses: np.ndarray, max_error: float, delta: float, p_values: np.ndarray | None = None
                    ) -> int | None:
    """The position (strictest first) of the lowest threshold certified at family-wise error delta from units x
    thresholds unit_losses (graph_walk from STARTS over threshold_p_values), or None."""
    p_values = threshold_p_values(losses, max_error, delta) if p_values is None else p_values
    rejected = graph_walk(p_values, delta, start_indices())
    return int(np.flatnonzero(rejected).max()) if rejected.any() else None


def certified_threshold(table: dict, max_error: float, delta: float, certify: str = "items",
                        candidates: int = 1) -> dict:
    """The lowest threshold certified to leave the model at most max_error of errors among the items it accepts
    (docs/metric.md#selective-grading), with family-wise error delta / candidates (a union bound over the
    checkpoints compared on the same evaluation, so that picking the best of them keeps delta): Learn then Test
    over the table's units (pages, or the students or exams they are merged into: what is drawn independently),
    each threshold's betting p-value of unit_losses, searched by graph_walk from STARTS. Every item a threshold
    accepts counts, items matched to no group (wrong whenever accepted) too. None certified is a ValueError saying
    what the data reach."""
    pages = table.get("pages")
    if pages is None:
        raise ValueError(f"{CERTIFIED_FLAG}: {STALE}")
    if not pages_intact(pages):
        raise ValueError(f"{CERTIFIED_FLAG}: this coverage table's per-page counts are damaged: evaluate the "
                         f"validation split again")
    losses = unit_losses(pages, max_error, certify)
    unit, n = table.get("unit", "page"), len(losses)
    if not n:
        raise ValueError(f"{CERTIFIED_FLAG} --certify {certify}: no {unit} of this evaluation has "
                         f"{'items' if certify == 'items' else 'points (full scores)'} to certify: "
                         + ("evaluate validation pages graded in points, or certify items" if certify == "points"
                            else "evaluate validation pages with answers"))
    level = delta / candidates
    p_values = threshold_p_values(losses, max_error, level)
    j = certified_index(losses, max_error, level, p_values)
    over = f" over {candidates} checkpoints" if candidates > 1 else ""
    if j is None:
        best = int(np.argmin(p_values))
        needed = math.ceil(math.log(len(STARTS) / level) / math.log1p(TRUNCATION * max_error / (1 - max_error)))
        raise ValueError(f"{CERTIFIED_FLAG} {max_error} at --delta {delta}{over}: no threshold is certified on these "
                         f"{n} {unit}s (the smallest p-value, {p_values[best]:.3g} at threshold "
                         f"{THRESHOLDS[100 - best]:.2f}, needs <= {level / len(STARTS):.3g}; even with no error at "
                         f"all, at least {needed} {unit}s are needed): allow a larger error, or evaluate more "
                         f"validation pages")
    t = THRESHOLDS[100 - j]
    row = next((r for r in table["rows"] if r["threshold"] == t), None)
    if row is None:
        raise ValueError(f"{CERTIFIED_FLAG}: this coverage table has no row at threshold {t:.2f}: evaluate the "
                         f"validation split again")
    entries = [e for entry in pages.values() for e in entry["accepted"] if e[0] >= t]
    accepted, wrong = sum(e[1] + e[2] for e in entries), sum(e[2] for e in entries)
    figures = {"accepted": accepted, "errors": wrong, "error_share": round(wrong / accepted, 6) if accepted else None}
    if certify == "points":
        full, off = sum(e[3] for e in entries), sum(e[4] for e in entries)
        figures |= {"points_accepted": round(full, 6), "points_error": round(off, 6),
                    "points_error_share": round(off / full, 6) if full else None}
    return {"threshold": t, "coverage": row["coverage"], "accuracy": row["accuracy"],
            "review_share": _review_share(row), **figures, "p_value": float(p_values[j]), "units": n, "unit": unit,
            "certify": certify, "max_error": max_error, "delta": delta, "candidates": candidates, "tested_delta": level,
            "starts": list(STARTS)}


def _review_share(row: dict) -> float:
    return round(1 - row["coverage"], 6)


def needs_review(confidence: float | None, threshold: float) -> bool:
    """Whether an item goes to a teacher under `threshold`: as coverage_table counts it, an item is graded
    automatically when its judgment confidence is >= the threshold, so one without a confidence goes."""
    return confidence is None or confidence < threshold

"""Selective grading's coverage-accuracy table (docs/metric.md#selective-grading): how accurate the judgments a
confidence threshold leaves to the model are, against the share it sends to a teacher; the threshold a target
accuracy, a review budget or a certified error bound asks for, chosen on validation and applied by
eval/grade_pages.py; and how well the confidences are calibrated (ECE, the reliability table)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gbtrain.config import option

THRESHOLDS = tuple(i / 100 for i in range(101))
NO_CONFIDENCES = "no confidences: every group goes to review"


class Graded(Protocol):
    localized: bool
    accurate: bool
    confidence: float | None


def coverage_table(outcomes: Sequence[Graded]) -> dict:
    """At each threshold t = 0, 0.01, ..., 1: `coverage`, the share of the groups graded automatically (matched by
    an item whose judgment confidence is >= t; the others, unmatched ones included, go to review), and `accuracy`,
    the share of those that pass every gate (null when none is left)."""
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
    return {"rows": rows, "undefined": None}


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
                                           "the items graded automatically is at most this share (0-1) with "
                                           "probability >= 1 - --delta (a binomial bound on the validation items)",
                                     group="selective")
    delta: float = option(0.05, "with --max-error: the chance the bound may fail (0-1)", group="selective")

    def selective_rule(self) -> dict | None:
        """{"target_accuracy": a} or {"review_budget": b} as asked, or None; a share outside its range, or both, is
        a ValueError naming the flag."""
        given = [flag for flag, value in ((TARGET_FLAG, self.target_accuracy), (BUDGET_FLAG, self.review_budget),
                                          (CERTIFIED_FLAG, self.max_error)) if value is not None]
        if len(given) > 1:
            raise ValueError(f"{' and '.join(given)}: give one (a target accuracy, a review budget, or a certified "
                             f"error bound)")
        if self.max_error is not None:
            if not 0 < self.max_error < 1:  # NaN too
                raise ValueError(f"{CERTIFIED_FLAG} {self.max_error}: give a share above 0 and below 1, e.g. 0.05")
            if not 0 < self.delta < 1:
                raise ValueError(f"--delta {self.delta}: give a chance above 0 and below 1, e.g. 0.05")
            return {"max_error": self.max_error, "delta": self.delta}
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


def choose_threshold(table: dict, rule: dict) -> dict:
    """The threshold of a coverage table (coverage_table) that `rule` asks for, with the table's figures there:
    {"threshold", "coverage", "accuracy", "review_share"} (review_share = 1 - coverage).

    target_accuracy a: the lowest threshold whose accuracy is >= a, so the most groups are graded automatically
    while the rest stays at a. review_budget b: the highest review share that is <= b (the least confident groups
    go to a teacher, up to b), at the lowest threshold that gives it, so that new pages see no threshold higher
    than validation needed. No threshold that meets the rule is a ValueError saying what the table does reach."""
    rows = table.get("rows")
    if not rows:
        raise ValueError(f"no threshold can be chosen: {table.get('undefined') or NO_CONFIDENCES}")
    if "max_error" in rule:
        return certified_threshold(rows, rule["max_error"], rule["delta"])
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


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (exact enough for any n a validation split has)."""
    if k >= n or p <= 0:
        return 1.0
    if p >= 1:
        return 0.0
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p)
            + (n - i) * math.log1p(-p) for i in range(k + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(v - top) for v in logs))


def error_upper_bound(errors: int, n: int, delta: float) -> float:
    """The Clopper-Pearson upper bound at confidence 1 - delta on an error rate seen as `errors` in `n`: the p with
    P(Binomial(n, p) <= errors) = delta (1 when n = 0 or every item erred)."""
    if n == 0 or errors >= n:
        return 1.0
    low, high = errors / n, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if binomial_cdf(errors, n, mid) > delta else (low, mid)
    return round(high, 6)


def certified_threshold(rows: list[dict], max_error: float, delta: float) -> dict:
    """The lowest threshold whose error among the automatically graded items is <= max_error with probability
    >= 1 - delta, by fixed-sequence testing (Learn then Test): from the strictest threshold down, each tests "the
    error exceeds max_error" with the exact binomial p-value P(Binomial(n, max_error) <= errors); the walk stops at
    the first threshold that cannot reject it, and the last one that did is chosen (a threshold that grades nothing
    automatically errs on nothing and goes on). Testing in a fixed order keeps the chance of any wrong rejection
    at delta, so the chosen threshold's bound holds whatever the walk saw. None rejected is a ValueError."""
    if any("accepted" not in r for r in rows):
        raise ValueError(f"{CERTIFIED_FLAG}: this coverage table has no counts of the items it accepts (it was "
                         f"recorded before certified thresholds): evaluate the validation split again")
    chosen = None
    for row in sorted(rows, key=lambda r: -r["threshold"]):
        n, k = row["accepted"], row["errors"]
        if n and binomial_cdf(k, n, max_error) > delta:
            break
        chosen = row if n else chosen
    if chosen is None:
        first = next((r for r in sorted(rows, key=lambda r: -r["threshold"]) if r["accepted"]), None)
        seen = (f"the strictest threshold that grades anything, {first['threshold']:.2f}, has {first['errors']} errors "
                f"in {first['accepted']} (bound {error_upper_bound(first['errors'], first['accepted'], delta):.3f})"
                if first else "no item is graded automatically at any threshold")
        raise ValueError(f"{CERTIFIED_FLAG} {max_error} at --delta {delta}: no threshold is certified on these "
                         f"groups ({seen}): allow a larger error, or evaluate more validation pages")
    return {"threshold": chosen["threshold"], "coverage": chosen["coverage"], "accuracy": chosen["accuracy"],
            "review_share": _review_share(chosen), "accepted": chosen["accepted"], "errors": chosen["errors"],
            "error_bound": error_upper_bound(chosen["errors"], chosen["accepted"], delta), "max_error": max_error,
            "delta": delta}


def _review_share(row: dict) -> float:
    return round(1 - row["coverage"], 6)


def needs_review(confidence: float | None, threshold: float) -> bool:
    """Whether an item goes to a teacher under `threshold`: as coverage_table counts it, an item is graded
    automatically when its judgment confidence is >= the threshold, so one without a confidence goes."""
    return confidence is None or confidence < threshold

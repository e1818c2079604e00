"""Selective grading's coverage-accuracy table (docs/metric.md#selective-grading): how accurate the judgments a
confidence threshold leaves to the model are, against the share it sends to a teacher; and the threshold a target
accuracy or a review budget asks for, chosen on validation and applied by eval/grade_pages.py."""

from __future__ import annotations

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
        rows.append({"threshold": t, "coverage": round(len(auto) / n, 6),
                     "accuracy": round(sum(o.accurate for o in auto) / len(auto), 6) if auto else None})
    return {"rows": rows, "undefined": None}


# --------------------------------------------------------------------------------- choosing a threshold
TARGET_FLAG, BUDGET_FLAG = "--target-accuracy", "--review-budget"


@dataclass(kw_only=True)
class SelectiveFlags:
    """The flags that choose a selective-grading threshold from a validation coverage-accuracy table, defined once:
    eval/select_checkpoint.py chooses it and records it with the best checkpoint, eval/grade_pages.py applies it."""

    target_accuracy: float | None = option(None, "selective grading: the lowest confidence threshold whose validation "
                                                 "accuracy of the items graded automatically reaches this share (0-1)",
                                           group="selective")
    review_budget: float | None = option(None, "selective grading: the share (0-1) of the validation items that may go "
                                               "to a teacher; the least confident go, up to it", group="selective")

    def selective_rule(self) -> dict | None:
        """{"target_accuracy": a} or {"review_budget": b} as asked, or None; a share outside its range, or both, is
        a ValueError naming the flag."""
        if self.target_accuracy is not None and self.review_budget is not None:
            raise ValueError(f"{TARGET_FLAG} and {BUDGET_FLAG}: give one (a target accuracy, or a review budget)")
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
    return TARGET_FLAG if "target_accuracy" in rule else BUDGET_FLAG


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


def _review_share(row: dict) -> float:
    return round(1 - row["coverage"], 6)


def needs_review(confidence: float | None, threshold: float) -> bool:
    """Whether an item goes to a teacher under `threshold`: as coverage_table counts it, an item is graded
    automatically when its judgment confidence is >= the threshold, so one without a confidence goes."""
    return confidence is None or confidence < threshold

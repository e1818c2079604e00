"""Selective grading's coverage-accuracy table (docs/metric.md#selective-grading): how accurate the judgments a
confidence threshold leaves to the model are, against the share it sends to a teacher."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

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

"""Points: a rater's scores against the teacher's, as a school audits automatic pre-grading (docs/metric.md#points).

Everything is computed over exactly the reference set, every question with a full score and a teacher's score: a
question without a usable model score (none, not a number, not finite) takes a worst score, the end of 0..full in
another band than the teacher's (the farther one when both are), so that it never reads as agreement; a score
outside 0..full counts at its nearest end; a model score for no reference question counts nowhere; each is listed.
Kappa is computed on bands of the full score fixed before evaluation, and is reported as undefined, with why, where
it is 0/0: never as 0.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from gbtrain.config import option
from gbtrain.metric.parsing import parse_points

_ROUND = 6
Key = tuple[str, str]  # (record, group) in the scorer; (submission, question) in eval/agreement.py
WEIGHTINGS = ("linear", "quadratic")
MAX_BANDS = 9  # edges of --point-bands: ten bands of the full score at most


@dataclass(frozen=True)
class PointsOptions:
    """What the report measures against, fixed before evaluation: the band edges as shares of the full score (0.6,
    0.85: <60%, 60-85%, >=85%) and the share of the full score above which an error is large."""

    bands: tuple[float, ...] = (0.6, 0.85)
    large_error: float = 0.5

    def __post_init__(self):
        edges = tuple(self.bands)
        if not edges or any(not (isinstance(e, int | float) and 0 < e <= 1) for e in edges) \
                or any(a >= b for a, b in pairwise(edges)):
            raise ValueError(f"--point-bands {','.join(f'{e:g}' for e in edges)}: give increasing shares of the full "
                             f"score in (0, 1], e.g. 0.6,0.85")
        if not (isinstance(self.large_error, int | float) and 0 < self.large_error <= 1):
            raise ValueError(f"--large-error {self.large_error!r}: give a share of the full score in (0, 1], e.g. 0.5")
        object.__setattr__(self, "bands", edges)

    @classmethod
    def parse(cls, bands: str, large_error: float) -> PointsOptions:
        """From the tools' flags: `--point-bands 0.6,0.85 --large-error 0.5`."""
        parts = bands.split(",")
        if len(parts) > MAX_BANDS:
            raise ValueError(f"--point-bands {bands[:40]}...: give at most {MAX_BANDS} edges (agreement is measured "
                             f"between bands), e.g. 0.6,0.85")
        try:
            edges = tuple(float(part) for part in parts)
        except ValueError:
            raise ValueError(f"--point-bands {bands!r}: give increasing shares of the full score, e.g. 0.6,0.85") \
                from None
        return cls(edges, large_error)

    @property
    def band_names(self) -> list[str]:
        pct = [f"{100 * e:g}" for e in self.bands]
        return [f"<{pct[0]}%", *(f"{a}-{b}%" for a, b in pairwise(pct)), f">={pct[-1]}%"]

    def band(self, points: float, full: float) -> int:
        return sum(points / full >= e for e in self.bands)


@dataclass(kw_only=True)
class PointsFlags:
    """The points flags of every tool that scores (eval/score.py, eval/run_eval.py), defined once."""

    point_bands: str = option("0.6,0.85", f"points: the kappa bands' edges as shares of the full score (bands: below "
                                          f"0.6, 0.6 to 0.85, from 0.85), at most {MAX_BANDS}", group="points")
    large_error: float = option(0.5, "points: an error above this share of the full score is large", group="points")

    def points_options(self) -> PointsOptions:
        return PointsOptions.parse(self.point_bands, self.large_error)


@dataclass(frozen=True)
class Reference:
    """One question graded in points by a teacher (and perhaps a second teacher)."""

    key: Key
    full_score: float
    score: float
    question_type: str = "Other"
    score_2: float | None = None


def _short(value) -> str:
    """A model's value as it may appear in a report: its JSON, cut (a hostile reply may write megabytes)."""
    return json.dumps(value, ensure_ascii=False)[:40]


def _rate(n: int, d: int) -> float | None:
    return round(n / d, _ROUND) if d else None


def verdict_errors(pairs: Iterable[tuple[bool, bool]]) -> dict:
    """The model's wrong verdicts by whom they hurt, over (teacher says right, model says right) pairs: those that
    cost the student marks (the teacher's right judged wrong: a false negative) and those that give marks the
    teacher did not (a false positive). A school weighs them differently."""
    pairs = list(pairs)
    return {"costs_marks": sum(t and not m for t, m in pairs), "gives_marks": sum(m and not t for t, m in pairs)}


def points_errors(pairs: Iterable[tuple[float, float]]) -> dict:
    """The same for points, over (teacher's points, model's points) pairs: how many questions, and how many points
    in all, the model took from the students (below the teacher) and gave them (above)."""
    pairs = list(pairs)
    lost, given = [t - m for t, m in pairs if m < t], [m - t for t, m in pairs if m > t]
    return {"costs_marks": {"n": len(lost), "points": round(sum(lost), _ROUND)},
            "gives_marks": {"n": len(given), "points": round(sum(given), _ROUND)}}


def errors(rows: list[tuple[float, float, float]], opts: PointsOptions) -> dict:
    """MAE in points and over the full score, mean signed error (rated minus reference: above 0, too generous),
    the largest error and the count of large ones, of (full score, reference points, rated points) rows."""
    errs = [(rated - ref, full) for full, ref, rated in rows]
    n = len(errs)
    return {
        "n": n,
        "mae": round(sum(abs(e) for e, _ in errs) / n, _ROUND) if n else None,
        "normalized_mae": round(sum(abs(e) / f for e, f in errs) / n, _ROUND) if n else None,
        "mean_signed_error": round(sum(e for e, _ in errs) / n, _ROUND) if n else None,
        "max_error": round(float(max(abs(e) for e, _ in errs)), _ROUND) if n else None,
        "large_errors": sum(abs(e) > opts.large_error * f for e, f in errs),
        **points_errors((ref, rated) for _, ref, rated in rows),
    }


def kappa(confusion: list[list[int]], weighting: str | None, names: list[str]) -> dict:
    """Cohen's kappa of a band confusion matrix (rows: reference, columns: rated), unweighted or with linear or
    quadratic disagreement weights: 1 - observed / chance-expected disagreement. Undefined (with why) where chance
    disagreement is 0, i.e. both sides put every question in one and the same band."""
    k, n = len(confusion), sum(map(sum, confusion))
    if n == 0:
        return {"value": None, "undefined": "no questions to compare"}
    if weighting is None:
        w = [[float(i != j) for j in range(k)] for i in range(k)]
    else:
        power = {"linear": 1, "quadratic": 2}[weighting]
        w = [[(abs(i - j) / (k - 1)) ** power for j in range(k)] for i in range(k)]
    rows = [sum(r) for r in confusion]
    cols = [sum(confusion[i][j] for i in range(k)) for j in range(k)]
    observed = sum(w[i][j] * confusion[i][j] for i in range(k) for j in range(k)) / n
    expected = sum(w[i][j] * rows[i] * cols[j] for i in range(k) for j in range(k)) / (n * n)
    if expected == 0:
        band = names[rows.index(n)]
        return {"value": None, "undefined": f"every question is in one band ({band}) on both sides: chance "
                                            f"agreement is complete, so kappa is 0/0"}
    return {"value": round(1 - observed / expected, _ROUND), "undefined": None}


def agreement(rows: list[tuple[float, float, float]], opts: PointsOptions) -> dict:
    """Every figure of one rater against the reference over (full score, reference, rated) rows: the errors, the
    band confusion matrix, kappa unweighted and weighted, and the direct agreement rates (same band, same points)."""
    names, k = opts.band_names, len(opts.bands) + 1
    confusion = [[0] * k for _ in range(k)]
    for full, ref, rated in rows:
        confusion[opts.band(ref, full)][opts.band(rated, full)] += 1
    n = len(rows)
    return {
        **errors(rows, opts),
        "exact_points": _rate(sum(math.isclose(ref, rated, abs_tol=1e-9) for _, ref, rated in rows), n),
        "exact_band": _rate(sum(confusion[i][i] for i in range(k)), n),
        "kappa": kappa(confusion, None, names),
        "weighted_kappa": {w: kappa(confusion, w, names) for w in WEIGHTINGS},
        "confusion_matrix": {"rows": "reference band", "columns": "rated band", "bands": names, "counts": confusion},
    }


def _worst(ref: Reference, opts: PointsOptions) -> float:
    """The score a question without a usable model score takes: an end of 0..full in another band than the
    teacher's score (0 is in the lowest band, the full score in the highest), the farther one when both are."""
    band = opts.band(ref.score, ref.full_score)
    if band in (0, len(opts.bands)):
        return float(ref.full_score) if band == 0 else 0.0
    return 0.0 if ref.score >= ref.full_score / 2 else float(ref.full_score)


def _listed(keys) -> list[list[str]]:
    return [list(key) for key in sorted(keys)]


def rated(references: list[Reference], given: list[tuple[Key, object]], opts: PointsOptions
          ) -> tuple[list[tuple[float, float, float]], list[dict]]:
    """(full score, teacher's points, the model's points as counted) of each reference in order, and the scores
    outside 0..full (listed with why): what every points figure is computed from, the MAE's interval too."""
    latest = dict(given)
    rows, out_of_range = [], []
    for ref in references:
        worst = _worst(ref, opts)
        if ref.key not in latest:
            points = worst
        else:
            value, why = parse_points(latest[ref.key])
            if value is not None and value < 0:
                why = "below 0"
            elif value is not None and value > ref.full_score:
                why = f"above the full score {ref.full_score:g}"
            if why:
                out_of_range.append({"id": list(ref.key), "score": _short(latest[ref.key]), "why": why})
            points = worst if value is None else min(max(value, 0.0), float(ref.full_score))
        rows.append((ref.full_score, ref.score, points))
    return rows, out_of_range


def points_report(references: list[Reference], given: list[tuple[Key, object]], opts: PointsOptions) -> dict:
    """The points report of the model's scores (`given`: (key, the raw value written), in order; a key given twice
    counts its last value, listed) against the teachers', over exactly the references."""
    by_key = {ref.key: ref for ref in references}
    if len(by_key) != len(references):  # a bug of the caller: the reader and eval/agreement.py refuse such input
        raise RuntimeError("points_report: two references with one key")
    seen = Counter(key for key, _ in given)
    latest = dict(given)
    rows, out_of_range = rated(references, given, opts)
    second, types = [], {}
    for ref, row in zip(references, rows, strict=True):
        types.setdefault(ref.question_type, []).append(row)
        if ref.score_2 is not None:
            second.append((row, (ref.full_score, ref.score, ref.score_2)))
    missing = [ref.key for ref in references if ref.key not in latest]
    unexpected = [key for key in latest if key not in by_key]
    duplicate = [key for key, n in seen.items() if n > 1]
    return {
        "n": len(references),
        "rules": {"reference_set": "every question with a full score and a teacher's score",
                  "no_usable_score": "missing, not a number or not finite: the end of 0..full in another band "
                                     "than the teacher's score, the farther one when both are (0 on a tie)",
                  "score_outside_0_to_full": "counted at the nearest end of 0..full (a grade cannot leave its "
                                             "range; it is listed)", "bands": opts.band_names,
                  "band_edges": list(opts.bands),
                  "large_error": f"an error above {100 * opts.large_error:g}% of the full score",
                  "kappa_weighting": "unweighted; weighted_kappa: linear |i-j|/(k-1), quadratic ((i-j)/(k-1))^2"},
        "coverage": {"missing": len(missing), "unexpected": len(unexpected), "duplicate": len(duplicate),
                     "out_of_range": len(out_of_range),
                     "ids": {"missing": _listed(missing), "unexpected": _listed(unexpected),
                             "duplicate": _listed(duplicate), "out_of_range": out_of_range}},
        "model": agreement(rows, opts),
        "by_question_type": {t: errors(r, opts) for t, r in sorted(types.items())},
        "second_teacher": None if not second else {
            "teacher_2": agreement([t for _, t in second], opts),
            "model_on_these": agreement([m for m, _ in second], opts),
        },
    }

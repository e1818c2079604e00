"""Intervals and paired gains (docs/metric.md#intervals-and-paired-gains): how far a metric moves when the evaluated
pages are drawn again, and whether a gain between two models outlives that.

The answer groups of one page are not independent (one reading of one page, one layout), so the unit resampled is the
page: an L1 crop or L2 region resamples with the page it was cut from. Each page is reduced to sums (groups passing
each gate, matched boxes at each IoU threshold, points errors) so that a resample is a weighted sum of pages: 1,000
resamples are a few matrix products. A paired gain resamples the same pages for both models; its p-value is the exact
McNemar test on the groups whose outcome the two models disagree on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gbtrain.config import option

METHOD = "percentile bootstrap over pages"
CONFIDENCE = 0.95
GATES = ("localized", "recognized", "reasoned", "accuracy")  # scoring steps 3-6: each reached through the one before
METRICS = (*GATES, "map_20_50", "mae")
_DIGITS = {"map_20_50": 4}  # mAP is reported in [0, 100] with 4 decimals, the rest with 6
Key = tuple[str, str]  # (record id, group id)


# Each resample holds a draw count per page: 20,000 of a setting's 4,000 pages are 640 MB of float64 (1e9 asked for 22
# GiB, and was refused by numpy only after the evaluation ran)
MAX_RESAMPLES = 20_000


@dataclass(frozen=True)
class IntervalOptions:
    """The bootstrap's resample count and seed (the same seed gives the same intervals)."""

    resamples: int = 1000
    seed: int = 0

    def __post_init__(self):
        if isinstance(self.resamples, bool) or not isinstance(self.resamples, int) or not (
                100 <= self.resamples <= MAX_RESAMPLES):
            raise ValueError(f"--bootstrap-resamples {self.resamples!r}: give 100 to {MAX_RESAMPLES:,} (a 95% interval "
                             f"reads its 2.5th and 97.5th percentiles; each resample holds a count per page), e.g. "
                             f"1000")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"--bootstrap-seed {self.seed!r}: give a whole number from 0")


@dataclass(kw_only=True)
class IntervalFlags:
    """The interval flags of every tool that scores or compares (eval/score.py, eval/run_eval.py, eval/compare.py),
    defined once."""

    bootstrap_resamples: int = option(1000, "intervals: how many times the pages are resampled for each interval",
                                      group="intervals", bounds=(100, MAX_RESAMPLES))
    bootstrap_seed: int = option(0, "intervals: the bootstrap's seed", group="intervals", bounds=(0, 2**32 - 1))

    def interval_options(self) -> IntervalOptions:
        return IntervalOptions(self.bootstrap_resamples, self.bootstrap_seed)


@dataclass
class PageOutcomes:
    """What one page adds to a setting's metrics: its counted groups (each with the number of gates it passed, 0-4,
    in order), its boxes (valid items, groups, then true positives at each IoU threshold of the mAP) and the
    absolute points error of each of its groups graded in points."""

    gates: dict[Key, int]
    boxes: list[int]
    errors: dict[Key, float]

    def to_json(self) -> dict:
        return {"gates": [[*k, v] for k, v in sorted(self.gates.items())], "boxes": list(self.boxes),
                "errors": [[*k, round(v, 6)] for k, v in sorted(self.errors.items())]}

    @classmethod
    def from_json(cls, raw: dict) -> PageOutcomes:
        return cls({(str(r), str(g)): int(v) for r, g, v in raw["gates"]}, [int(v) for v in raw["boxes"]],
                   {(str(r), str(g)): float(v) for r, g, v in raw["errors"]})


def gates_passed(*passed: bool) -> int:
    """How many gates, in order, a group passed before the first it failed."""
    return next((i for i, ok in enumerate(passed) if not ok), len(passed))


@dataclass(frozen=True)
class _Table:
    """A setting's pages as arrays, one row per page in a fixed order: counted groups and those passing each gate;
    valid items, groups and TP per IoU threshold; groups graded in points and their summed |error|."""

    gates: np.ndarray
    boxes: np.ndarray
    errors: np.ndarray

    @classmethod
    def of(cls, pages: dict[str, PageOutcomes], order: list[str]) -> _Table:
        gates = [[len(pages[p].gates), *(sum(v > i for v in pages[p].gates.values()) for i in range(len(GATES)))]
                 for p in order]
        errors = [[len(pages[p].errors), sum(pages[p].errors.values())] for p in order]
        return cls(np.array(gates, dtype=float).reshape(len(order), len(GATES) + 1),
                   np.array([pages[p].boxes for p in order], dtype=float).reshape(len(order), -1),
                   np.array(errors, dtype=float).reshape(len(order), 2))

    def values(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        """Every metric under each row of page weights (how often each page was drawn): NaN where the metric has
        nothing to measure (no groups, no groups graded in points). An all-ones row gives the scorer's values."""
        with np.errstate(divide="ignore", invalid="ignore"):
            g = weights @ self.gates
            out = {gate: g[:, i + 1] / g[:, 0] for i, gate in enumerate(GATES)}
            b = weights @ self.boxes
            items, groups, tp = b[:, :1], b[:, 1:2], b[:, 2:]
            precision = np.where(items > 0, tp / items, 0.0)  # no valid item: P = 0, as the scorer counts it
            out["map_20_50"] = 100 * np.mean(precision * tp / groups, axis=1)
            e = weights @ self.errors
            out["mae"] = e[:, 1] / e[:, 0]
        return out


def _weights(n_pages: int, opts: IntervalOptions) -> np.ndarray:
    """Each resample's draw count of each page: n pages drawn with replacement, `opts.resamples` times."""
    rng = np.random.default_rng(opts.seed)
    return rng.multinomial(n_pages, np.full(n_pages, 1 / n_pages), size=opts.resamples).astype(float)


def _percentiles(samples: np.ndarray, metric: str) -> list[float] | None:
    """The central 95% of the resamples where the metric is defined; None when it is defined in none."""
    kept = samples[~np.isnan(samples)]
    if not kept.size:
        return None
    tail = 100 * (1 - CONFIDENCE) / 2
    digits = _DIGITS.get(metric, 6)
    return [round(float(v), digits) + 0.0 for v in np.percentile(kept, [tail, 100 - tail])]  # + 0.0: no -0.0


def _too_few(n_pages: int) -> str | None:
    return None if n_pages >= 2 else f"{n_pages} page(s): a bootstrap over pages needs at least 2"


def _header(n_pages: int, opts: IntervalOptions) -> dict:
    return {"method": METHOD, "confidence": CONFIDENCE, "resamples": opts.resamples, "seed": opts.seed,
            "pages": n_pages, "undefined": _too_few(n_pages)}


def setting_values(pages: dict[str, PageOutcomes]) -> dict[str, float | None]:
    """Each metric of a setting as the scorer computes it, from its pages' outcomes (None where undefined): what a
    report's figures must be if they were not edited."""
    order = sorted(pages)
    values = _Table.of(pages, order).values(np.ones((1, len(order))))
    return {m: None if np.isnan(v[0]) else float(v[0]) for m, v in values.items()}


def setting_intervals(pages: dict[str, PageOutcomes], opts: IntervalOptions) -> dict:
    """A setting's 95% interval of each metric (`[low, high]`; `mae` null without points): the 2.5th and 97.5th
    percentiles of the metric over resampled sets of its pages. Fewer than 2 pages: every interval null, and why."""
    out = _header(len(pages), opts)
    if out["undefined"]:
        return out | dict.fromkeys(METRICS)
    order = sorted(pages)
    samples = _Table.of(pages, order).values(_weights(len(order), opts))
    return out | {m: _percentiles(samples[m], m) for m in METRICS}


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value of b and c discordant pairs (a binomial test of b against (b + c) / 2):
    min(1, 2 * sum_{k <= min(b, c)} C(b + c, k) / 2^(b + c)); 1 when no pair is discordant."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)  # exact integers, one rounding at the division


class PairingError(ValueError):
    """Two reports whose groups differ: their gains cannot be paired."""


def _first_difference(base: dict[Key, str], sft: dict[Key, str], what: str) -> str | None:
    """The first (record, group) that the two sides place differently (or only one has), named; None if none."""
    keys = sorted(k for k in base.keys() | sft.keys() if base.get(k) != sft.get(k))
    if not keys:
        return None
    record, group = keys[0]
    where = ("only in the base report" if keys[0] not in sft else "only in the fine-tuned report"
             if keys[0] not in base else f"on page {base[keys[0]]} vs {sft[keys[0]]}")
    return f"{what} record {record!r} group {group!r} is {where} ({len(keys)} such)"


def _placed(pages: dict[str, PageOutcomes], field: str) -> dict[Key, str]:
    return {key: page for page, p in pages.items() for key in getattr(p, field)}


def pairing_problem(base: dict[str, PageOutcomes], sft: dict[str, PageOutcomes]) -> str | None:
    """Why two settings' outcomes cannot be paired group by group (the first differing group or page), or None."""
    pages = sorted(base.keys() ^ sft.keys())
    if pages:
        return (f"page {pages[0]!r} is only in the {'base' if pages[0] in base else 'fine-tuned'} report "
                f"({len(pages)} such)")
    return (_first_difference(_placed(base, "gates"), _placed(sft, "gates"), "scored")
            or _first_difference(_placed(base, "errors"), _placed(sft, "errors"), "graded in points"))


def paired_gains(base: dict[str, PageOutcomes], sft: dict[str, PageOutcomes], opts: IntervalOptions) -> dict:
    """Each metric's gain (fine-tuned minus base) with its 95% paired interval, the same resampled pages for both
    models, and for each gate the exact McNemar p-value of the groups one model passes and the other fails.
    Raises PairingError when the two were not scored on the same groups."""
    problem = pairing_problem(base, sft)
    if problem:
        raise PairingError(problem)
    order = sorted(base)
    out = _header(len(order), opts)
    discordant = {gate: [0, 0] for gate in GATES}  # [groups only the base passes, only the fine-tuned passes]
    for key, page in _placed(base, "gates").items():
        b, s = base[page].gates[key], sft[page].gates[key]
        for i, gate in enumerate(GATES):
            if (b > i) != (s > i):
                discordant[gate][s > i] += 1
    out["discordant"] = {g: {"base_only": n[0], "sft_only": n[1]} for g, n in discordant.items()}
    out["p"] = {g: mcnemar_exact(*n) for g, n in discordant.items()}
    if out["undefined"]:
        return out | dict.fromkeys(METRICS)
    weights = _weights(len(order), opts)
    tb, ts = _Table.of(base, order), _Table.of(sft, order)
    vb, vs = tb.values(weights), ts.values(weights)
    return out | {m: _percentiles(vs[m] - vb[m], m) for m in METRICS}

"""What a certified review threshold leaves to the model (docs/metric.md#selective-grading): simulated validation
splits of PAGES pages x ITEMS items, the accepted share (the items graded automatically at the certified threshold,
mean over draws) at each --max-error, against the validation size and the model's accuracy.

    python scripts/bench_certify.py [--draws 200] [--items 10] [--seed 0] [--p-value betting|hoeffding-bentkus]

Each item is right with probability q = sigmoid(mu + u_page + 2.5 e) (e ~ N(0, 1) per item, u_page ~ N(0, 0.5)
per page: pages differ), its judgment confidence is q (informative and calibrated), and mu sets the mean accuracy.
`best` is the share an oracle that knows the distribution could accept at that error; `none` the share of draws
that certify nothing. `--p-value hoeffding-bentkus` puts Learn then Test's Hoeffding-Bentkus p-value in place of
the betting one (the comparison docs/metric.md gives; tests/metric/test_certify.py checks it against MAPIE's).
tests/metric/test_certify.py draws from the same model.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from gbtrain.cli import parse_options
from gbtrain.config import option
from gbtrain.metric.selective import STARTS, THRESHOLDS, certified_index, threshold_p_values

SIZES = (20, 50, 150, 500)
ACCURACIES = (0.57, 0.8, 0.95)
ERRORS = (0.05, 0.1, 0.2)
SPREAD, PAGE_SD = 2.5, 0.5


@dataclass
class BenchCertify:
    draws: int = option(200, "simulated validation splits per cell", bounds=(1, 100_000))
    items: int = option(10, "items per page", bounds=(1, 1_000))
    seed: int = option(0, "random seed", bounds=(0, 2**32 - 1))
    delta: float = option(0.05, "the chance a certified bound may fail")
    p_value: str = option("betting", "betting (what selective.certified_threshold uses) or hoeffding-bentkus",
                          choices=("betting", "hoeffding-bentkus"))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def offset_for(accuracy: float, rng: np.random.Generator, n: int = 200_000) -> float:
    """mu such that the mean of sigmoid(mu + u + SPREAD e) is `accuracy` (bisection on a fixed sample)."""
    z = rng.standard_normal(n) * PAGE_SD + SPREAD * rng.standard_normal(n)
    low, high = -20.0, 20.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if _sigmoid(mid + z).mean() < accuracy else (low, mid)
    return (low + high) / 2


def draw_pages(rng: np.random.Generator, draws: int, pages: int, items: int, mu: float
               ) -> tuple[np.ndarray, np.ndarray]:
    """(confidences, errors), each draws x pages x items, from the model above."""
    z = mu + PAGE_SD * rng.standard_normal((draws, pages, 1)) + SPREAD * rng.standard_normal((draws, pages, items))
    q = _sigmoid(z)
    return q, rng.random(q.shape) >= q


def grid_positions(confidences: np.ndarray) -> np.ndarray:
    """Each confidence's position in the chain of thresholds (strictest first) where it starts to be accepted:
    100 - 100 x selective.grid_threshold, vectorised."""
    k = np.clip(np.floor(confidences * 100), 0, 100).astype(int)
    k += (k < 100) & ((k + 1) / 100 <= confidences)
    k -= (k > 0) & (k / 100 > confidences)
    return 100 - k


def losses_of(confidences: np.ndarray, errors: np.ndarray, max_error: float) -> tuple[np.ndarray, np.ndarray]:
    """selective.unit_losses of each draw (draws x pages x thresholds, every page of the same size) and the
    accepted share of each draw at each threshold (draws x thresholds), vectorised."""
    draws, pages, items = confidences.shape
    shape, width = (draws, pages, len(THRESHOLDS)), len(THRESHOLDS)
    cell = (np.arange(draws * pages).reshape(draws, pages, 1) * width + grid_positions(confidences)).ravel()
    accepted = np.bincount(cell, minlength=draws * pages * width).reshape(shape)
    wrong = np.bincount(cell, weights=errors.ravel().astype(float), minlength=draws * pages * width).reshape(shape)
    accepted, wrong = np.cumsum(accepted, axis=2), np.cumsum(wrong, axis=2)
    losses = np.clip(max_error + (wrong - max_error * accepted) / items, 0.0, 1.0)
    return losses, accepted.sum(axis=1) / (pages * items)


def binomial_cdf(k: np.ndarray, n: int, p: float) -> np.ndarray:
    """P(Binomial(n, p) <= k) for each k, 0 < p < 1, from the probabilities summed in float64."""
    i = np.arange(n + 1)
    logfact = np.array([math.lgamma(v + 1) for v in range(n + 1)])
    cdf = np.minimum(np.cumsum(np.exp(logfact[n] - logfact - logfact[::-1] + i * math.log(p)
                                      + (n - i) * math.log1p(-p))), 1.0)
    return np.where(k < 0, 0.0, cdf[np.clip(k, 0, n).astype(int)])


def hoeffding_bentkus(r_hat: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """Learn then Test's Hoeffding-Bentkus p-value (Angelopoulos et al. 2021) of "the mean of n iid [0, 1] losses
    is at least alpha" seen their mean r_hat: min(exp(-n h1(min(r_hat, alpha), alpha)), e x P(Binomial(n, alpha)
    <= ceil(n r_hat))), h1(a, b) = a log(a / b) + (1 - a) log((1 - a) / (1 - b)); not capped at 1, as MAPIE's."""
    m = np.minimum(r_hat, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        h1 = np.where(m > 0, m * np.log(m / alpha), 0.0) + (1 - m) * np.log((1 - m) / (1 - alpha))
    return np.minimum(np.exp(-n * h1), math.e * binomial_cdf(np.ceil(n * r_hat), n, alpha))


def certified_positions(losses: np.ndarray, max_error: float, delta: float, p_value: str = "betting"
                        ) -> list[int | None]:
    """selective.certified_index of each draw (draws x units x thresholds losses), the p-values computed for many
    draws at once."""
    out = []
    for first in range(0, len(losses), 200):  # bounded memory: the betting p-value holds a few copies of a chunk
        chunk = losses[first:first + 200]
        p = threshold_p_values(chunk, max_error, delta) if p_value == "betting" else \
            hoeffding_bentkus(chunk.mean(axis=1), chunk.shape[1], max_error)
        out += [certified_index(d, max_error, delta, pd) for d, pd in zip(chunk, p, strict=True)]
    return out


def certified_shares(losses: np.ndarray, shares: np.ndarray, max_error: float, delta: float,
                     p_value: str = "betting") -> np.ndarray:
    """The accepted share at the certified threshold of each draw (0 where nothing is certified)."""
    positions = certified_positions(losses, max_error, delta, p_value)
    return np.array([0.0 if j is None else shares[d, j] for d, j in enumerate(positions)])


def oracle_share(rng: np.random.Generator, mu: float, max_error: float, n: int = 400_000) -> float:
    """The largest share of items whose error is at most max_error, the most confident first, on a large draw."""
    q, wrong = draw_pages(rng, 1, n // 100, 100, mu)
    order = np.argsort(-q.ravel())
    rate = np.cumsum(wrong.ravel()[order]) / np.arange(1, n + 1)
    ok = np.flatnonzero(rate <= max_error)
    return float((ok.max() + 1) / n) if ok.size else 0.0


def main() -> None:
    run = parse_options(BenchCertify, __doc__)
    rng = np.random.default_rng(run.seed)
    started = time.perf_counter()
    print(f"accepted share in % at the certified threshold, mean of {run.draws} draws (none: % of draws certifying "
          f"nothing), pages of {run.items} items, delta {run.delta}, {run.p_value} p-values, starts {STARTS}\n")
    print("| accuracy | max error | best | " + " | ".join(f"{p} pages" for p in SIZES) + " |")
    print("|---|---|---|" + "---|" * len(SIZES))
    for accuracy in ACCURACIES:
        mu = offset_for(accuracy, rng)
        for max_error in ERRORS:
            cells = []
            for pages in SIZES:
                confidences, errors = draw_pages(rng, run.draws, pages, run.items, mu)
                losses, shares = losses_of(confidences, errors, max_error)
                got = certified_shares(losses, shares, max_error, run.delta, run.p_value)
                cells.append(f"{100 * got.mean():.0f} (none {100 * (got == 0).mean():.0f})")
            print(f"| {100 * accuracy:.0f}% | {max_error:g} | {100 * oracle_share(rng, mu, max_error):.0f} | "
                  + " | ".join(cells) + " |")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()

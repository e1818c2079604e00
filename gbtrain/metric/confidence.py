"""Confidences of parsed items from the logprobs of the reply's tokens, and mAP ranked by them
(docs/metric.md#confidences): the scorer stays a pure function of the predictions file."""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Sequence

from gbtrain.metric.parsing import BOX_KEYS, CORRECT_KEYS, PredictedItem

NO_CONFIDENCES = "no confidences: one-point mAP only"
RECALL_POINTS = tuple(i / 100 for i in range(101))  # the 101-point interpolation (COCO's)


def _key(keys: tuple[str, ...]) -> re.Pattern:
    return re.compile(r"[\"']?\b(?:" + "|".join(keys) + r")\b[\"']?\s*:\s*")


_CORRECT_KEY, _BOX_KEY = _key(CORRECT_KEYS), _key(BOX_KEYS)


def _closing_brackets(text: str) -> dict[int, int]:
    """Each '[' of the text -> the position after its matching ']' (the text's end where it never closes), in one
    pass, so that finding every item's box costs the reply's length once, not once per item."""
    stack: list[int] = []
    close: dict[int, int] = {}
    for m in _BRACKET.finditer(text):
        if m.group() == "[":
            stack.append(m.start())
        elif stack:
            close[stack.pop()] = m.end()
    close.update(dict.fromkeys(stack, len(text)))
    return close


_BRACKET = re.compile(r"[\[\]]")
_BARE = re.compile(r"[^,}\]\s]+")


def _value_span(text: str, start: int, close: dict[int, int]) -> tuple[int, int]:
    """The characters of the value that begins at `start`: a list up to its matching bracket (`close`:
    _closing_brackets of the text), a quoted string's content (its quotes when empty), or a bare word or number."""
    if start >= len(text):
        return start, start
    if text[start] == "[":
        return start, close[start]
    if text[start] in "\"'":
        end = text.find(text[start], start + 1)
        end = len(text) if end < 0 else end
        return (start + 1, end) if end > start + 1 else (start, end + 1)
    m = _BARE.match(text, start)
    return (start, m.end()) if m else (start, start)


class TokenIndex:
    """A reply's tokens (offset, logprob), indexed once: the tokens a character span overlaps are found by binary
    search and their mean logprob read off prefix sums, so n items cost n log(tokens), not n x tokens."""

    def __init__(self, logprobs: Sequence[Sequence[float]], text_len: int):
        self.offsets = [off for off, _ in logprobs]
        self.sums = [0.0]
        for _, lp in logprobs:
            self.sums.append(self.sums[-1] + lp)
        self.text_len = text_len

    def confidence(self, span: tuple[int, int]) -> float | None:
        """exp(mean logprob) of the tokens whose characters overlap `span`; token i covers [offset_i,
        offset_i+1) (the last one up to the text's end), and a token at or past the text's end covers nothing."""
        a, b = span
        first = max(0, bisect.bisect_right(self.offsets, a) - 1)  # the last token starting at or before a
        while first < len(self.offsets) and self._end(first) <= a:  # zero-width tokens at a
            first += 1
        stop = bisect.bisect_left(self.offsets, min(b, self.text_len))  # tokens starting before b and the text's end
        if b <= a or stop <= first:
            return None
        return min(1.0, math.exp((self.sums[stop] - self.sums[first]) / (stop - first)))

    def _end(self, k: int) -> int:
        return self.offsets[k + 1] if k + 1 < len(self.offsets) else self.text_len


def _valid(logprobs) -> bool:
    """Logprobs as a reply's tokens: [offset, logprob] pairs, finite logprobs <= 0, offsets that never go back."""
    return isinstance(logprobs, list) and bool(logprobs) and all(
        isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(v, int | float) for v in p)
        and math.isfinite(p[1]) and p[1] <= 0 for p in logprobs) and all(
        a[0] <= b[0] for a, b in itertools.pairwise(logprobs))


def annotate(items: list[PredictedItem], response: str, logprobs) -> None:
    """Set each item's `confidence` (its judgment's value) and `box_confidence` (its box's value). The k-th of n
    items takes the k-th of the LAST n occurrences of a judgment (box) key in the reply (drafts and reasoning come
    first); fewer occurrences than items, or no valid logprobs, leave None. Linear in the reply's length and
    tokens, with a binary search per item."""
    if not items or not _valid(logprobs):
        return
    tokens, close = TokenIndex(logprobs, len(response)), _closing_brackets(response)
    for attr, pattern in (("confidence", _CORRECT_KEY), ("box_confidence", _BOX_KEY)):
        starts = [m.end() for m in pattern.finditer(response)]
        if len(starts) < len(items):
            continue
        for item, start in zip(items, starts[len(starts) - len(items):], strict=True):
            setattr(item, attr, tokens.confidence(_value_span(response, start, close)))


def interpolated_ap(hits: list[tuple[float, bool]], n_groups: int) -> float:
    """101-point interpolated AP: `hits` are (confidence, true positive) of every prediction, already in rank
    order; precision at recall r is the highest precision at any recall >= r (0 where none reaches r)."""
    if not n_groups or not hits:
        return 0.0
    tp, curve = 0, []
    for k, (_, hit) in enumerate(hits, start=1):
        tp += hit
        curve.append((tp / n_groups, tp / k))
    best, envelope = 0.0, []  # max precision at recall >= each curve point, from the end
    for rec, prec in reversed(curve):
        best = max(best, prec)
        envelope.append((rec, best))
    envelope.reverse()
    total = 0.0
    for r in RECALL_POINTS:
        total += next((p for rec, p in envelope if rec >= r - 1e-12), 0.0)
    return total / len(RECALL_POINTS)


def ranked_hits(ranked: list[tuple[float, int, int, list[float]]], threshold: float) -> list[tuple[float, bool]]:
    """Predictions (confidence, record index, item index, IoU with each of its record's groups) in rank order
    (descending confidence; ties by record, then item): each takes the unmatched group of its record with the
    highest IoU >= threshold (the first on a tie), else it is a false positive."""
    taken: set[tuple[int, int]] = set()
    hits = []
    for conf, rec, _, ious in sorted(ranked, key=lambda t: (-t[0], t[1], t[2])):
        free = [(iou, -j) for j, iou in enumerate(ious) if iou >= threshold and iou > 0 and (rec, j) not in taken]
        if free:
            taken.add((rec, -max(free)[1]))
        hits.append((conf, bool(free)))
    return hits

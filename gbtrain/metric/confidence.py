"""Confidences of parsed items from the logprobs of the reply's tokens, and mAP ranked by them
(docs/metric.md#confidences): the scorer stays a pure function of the predictions file."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from gbtrain.metric.parsing import BOX_KEYS, CORRECT_KEYS, PredictedItem

NO_CONFIDENCES = "no confidences: one-point mAP only"
RECALL_POINTS = tuple(i / 100 for i in range(101))  # the 101-point interpolation (COCO's)


def _key(keys: tuple[str, ...]) -> re.Pattern:
    return re.compile(r"[\"']?\b(?:" + "|".join(keys) + r")\b[\"']?\s*:\s*")


_CORRECT_KEY, _BOX_KEY = _key(CORRECT_KEYS), _key(BOX_KEYS)


def _value_span(text: str, start: int) -> tuple[int, int]:
    """The characters of the value that begins at `start`: a list up to its matching bracket, a quoted string's
    content (its quotes when empty), or a bare word or number."""
    if start >= len(text):
        return start, start
    if text[start] == "[":
        depth = 0
        for i in range(start, len(text)):
            depth += {"[": 1, "]": -1}.get(text[i], 0)
            if depth == 0:
                return start, i + 1
        return start, len(text)
    if text[start] in "\"'":
        end = text.find(text[start], start + 1)
        end = len(text) if end < 0 else end
        return (start + 1, end) if end > start + 1 else (start, end + 1)
    m = re.compile(r"[^,}\]\s]+").match(text, start)
    return (start, m.end()) if m else (start, start)


def span_confidence(logprobs: Sequence[Sequence[float]], text_len: int, span: tuple[int, int]) -> float | None:
    """exp(mean logprob) of the tokens whose characters overlap `span`; token i covers [offset_i, offset_i+1)."""
    a, b = span
    chosen = [lp for k, (off, lp) in enumerate(logprobs)
              if off < b and (logprobs[k + 1][0] if k + 1 < len(logprobs) else text_len) > a and off < text_len]
    if b <= a or not chosen:
        return None
    return min(1.0, math.exp(sum(chosen) / len(chosen)))


def _valid(logprobs) -> bool:
    return isinstance(logprobs, list) and bool(logprobs) and all(
        isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(v, int | float) for v in p)
        and math.isfinite(p[1]) and p[1] <= 0 for p in logprobs)


def annotate(items: list[PredictedItem], response: str, logprobs) -> None:
    """Set each item's `confidence` (its judgment's value) and `box_confidence` (its box's value). The k-th of n
    items takes the k-th of the LAST n occurrences of a judgment (box) key in the reply (drafts and reasoning come
    first); fewer occurrences than items, or no valid logprobs, leave None."""
    if not items or not _valid(logprobs):
        return
    for attr, pattern in (("confidence", _CORRECT_KEY), ("box_confidence", _BOX_KEY)):
        spans = [_value_span(response, m.end()) for m in pattern.finditer(response)]
        if len(spans) < len(items):
            continue
        for item, span in zip(items, spans[len(spans) - len(items):], strict=True):
            setattr(item, attr, span_confidence(logprobs, len(response), span))


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

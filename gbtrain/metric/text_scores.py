"""Soft text scores beside the CER gate: how close a reading is, where answers.py decides whether an answer is right.

Token F1 is SQuAD's, over CMRC 2018's tokens (every CJK character one token, whatever spaces the text holds); ANLS
is DocVQA's, on the text the CER gate compares (``normalize_text``, shared with it). Each follows its benchmark's
official script; tests/metric/test_text_scores.py checks both against reimplementations of those scripts and names
each deliberate difference. Deterministic, and a runaway answer cannot stall scoring (ANLS is capped; F1 is linear).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

from rapidfuzz.distance import Levenshtein

from gbtrain.metric.answers import CJK_CLASS, normalize_answer

ANLS_MAX_CELLS = 25_000_000  # len(a) * len(b) above this: ANLS is scored on the first ANLS_CAP_CHARS of each
ANLS_CAP_CHARS = 5_000

_CJK_OR_RUN = re.compile(f"[{CJK_CLASS}]|[^\\s{CJK_CLASS}]+")  # one CJK character, or a run of anything else
_ARTICLES = frozenset({"a", "an", "the"})


def normalize_text(s: str, space: str = "") -> str:
    """NFKC (fullwidth "２５" is "25"), lowercase, each whitespace run replaced by `space`: the one normalisation of
    the CER gate (space "", spacing ignored) and of ANLS (space " ", collapsed as DocVQA's script does)."""
    return space.join(unicodedata.normalize("NFKC", s or "").lower().split())


def _split_symbols(run: str) -> list[str]:
    """A run cut before and after each symbol (Unicode S*: + = < > × ÷ √ ° ^ $ ...), so that "x+1=3" counts as
    x, +, 1, =, 3, as "x + 1 = 3" does."""
    if run.isalnum():  # the common case, tested at C speed
        return [run]
    pieces, start = [], 0
    for i, ch in enumerate(run):
        if unicodedata.category(ch).startswith("S"):
            pieces += [run[start:i], ch]
            start = i + 1
    pieces.append(run[start:])
    return [p for p in pieces if p]


def f1_tokens(text: str) -> list[str]:
    """The tokens token F1 counts, the same rule for both sides: normalize_answer's text (NFKC, lowercase, answer
    prefix and punctuation removed, SQuAD's), then each CJK character (Han, kana, Hangul) a token as CMRC 2018's
    scorer cuts Chinese, each symbol a token, and every other run between spaces, CJK characters and symbols a word
    (a digit run is one word: "12"; "3.14" reads "314", as in SQuAD); English articles dropped. "5 个苹果" and
    "5个苹果" are both [5, 个, 苹, 果]."""
    tokens = [t for run in _CJK_OR_RUN.findall(normalize_answer(text)) for t in _split_symbols(run)]
    return [t for t in tokens if t not in _ARTICLES]  # "the北京": no word boundary there for normalize_answer


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD's token F1 over f1_tokens: the harmonic mean of the precision and recall of the shared tokens, counted as
    multisets (CMRC 2018 counts only the longest common contiguous run, where one misread character mid-answer halves
    the score). Both empty -> 1.0 (SQuAD v2's rule; v1.1 and CMRC give 0), one empty -> 0.0."""
    if prediction == reference:  # the common case of a right reading, and 1.0 by the definition
        return 1.0
    pred, ref = f1_tokens(prediction), f1_tokens(reference)
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def _similarity(pred: str, ref: str) -> float:
    if len(pred) * len(ref) > ANLS_MAX_CELLS:
        pred, ref = pred[:ANLS_CAP_CHARS], ref[:ANLS_CAP_CHARS]
    longest = max(len(pred), len(ref))
    return 1.0 - Levenshtein.distance(pred, ref) / longest if longest else 1.0


def anls(prediction: str, reference: str | list[str], threshold: float = 0.5) -> float:
    """DocVQA's ANLS: the best over the references of 1 - Levenshtein / the longer length, on normalize_text(s, " ")
    (the CER gate's NFKC and lowercase, whitespace collapsed), 0 below `threshold`, a similarity: exactly 0.5 is
    kept, as the official DocVQA/InfographicVQA script (and lmms-eval's copy of it) zeroes only `similarity <
    threshold` ("equal or bigger than 0.5" on the Robust Reading task page). Both empty -> 1.0. When
    len(prediction) * len(reference) > ANLS_MAX_CELLS, the score is that of the first ANLS_CAP_CHARS of each."""
    references = [reference] if isinstance(reference, str) else list(reference)
    if not references:
        raise ValueError("anls needs at least one reference")
    if prediction in references:  # the common case of a right reading, and 1.0 by the definition
        return 1.0
    pred = normalize_text(prediction, " ")
    best = max(_similarity(pred, normalize_text(ref, " ")) for ref in references)
    return best if best >= threshold else 0.0

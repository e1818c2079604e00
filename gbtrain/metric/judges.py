"""Answer-equivalence judges for the answer gate of answer-free scoring.

``RuleJudge`` (the default) needs no model: equal after normalisation, equal numbers, the same choice
letters, or the same truth value. ``LLMJudge`` asks a model through any text generator (a gbtrain
inference backend) with a fixed prompt; only a strict yes counts, and results are cached by
(answer, reference). ``JUDGES`` names them for `--judge`: a new judge is a class and one line there.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from gbtrain.inference.registry import judge_generator
from gbtrain.text import redact
from gbtrain.vocabulary import FALSE_WORDS, TRUE_WORDS, one_of

_TRAILING_PUNCT = "。．.，,；;：:！!？?、"


def normalize_text(s: str) -> str:
    """NFKC, every whitespace character removed, lowercase: the shared text normalisation."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", s or "")).lower()


_MAX_NUMBER_CHARS = 64  # longer "numbers" (or exponents over 3 digits) are not exam answers: exact
# arithmetic on 1e999999999 would run for hours


def _number(s: str) -> Fraction | None:
    """An integer, decimal, fraction (a/b), percentage or thousands-separated number; else None."""
    s = s.strip().rstrip(_TRAILING_PUNCT)
    if len(s) > _MAX_NUMBER_CHARS or re.search(r"[eE][+-]?\d{4}", s):
        return None
    pct = s.endswith("%")
    if pct:
        s = s[:-1]
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    try:
        if re.fullmatch(r"[+-]?\d+/\d+", s):
            num, den = s.split("/")
            if int(den) == 0:
                return None
            value = Fraction(int(num), int(den))
        elif re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", s):
            value = Fraction(s)
        else:
            return None
    except (ValueError, ZeroDivisionError):
        return None
    return value / 100 if pct else value


def _choices(s: str) -> frozenset[str] | None:
    """Choice letters: 'B', 'A C', 'A、C', '(B)', 'ab' -> their set; None when s is not only letters A-H."""
    letters = re.sub(r"[\s,，、()（）\[\]和]+", "", s.upper().replace("AND", " "))
    if letters and re.fullmatch(r"[A-H]+", letters) and len(set(letters)) == len(letters):
        return frozenset(letters)
    return None


def _truth(s: str) -> bool | None:
    if s in TRUE_WORDS:
        return True
    if s in FALSE_WORDS:
        return False
    return None


class RuleJudge:
    """Deterministic equivalence; no model."""

    name = "rule"

    def equivalent(self, answer: str, reference: str) -> bool:
        a, r = normalize_text(answer), normalize_text(reference)
        if not a:
            return False
        a_strip, r_strip = a.rstrip(_TRAILING_PUNCT), r.rstrip(_TRAILING_PUNCT)
        if a_strip == r_strip:
            return True
        na, nr = _number(a), _number(r)
        if na is not None and nr is not None:
            return abs(na - nr) <= abs(nr) * Fraction(1, 10**6) if nr != 0 else na == 0
        ca, cr = _choices(a_strip), _choices(r_strip)
        if ca is not None and cr is not None:
            return ca == cr
        ta, tr = _truth(a_strip), _truth(r_strip)
        return ta is not None and ta == tr

    def judge_many(self, pairs: list[tuple[str, str]]) -> list[bool]:
        return [self.equivalent(a, r) for a, r in pairs]

    def stats(self, pairs: list[tuple[str, str]]) -> dict:
        verdicts = self.judge_many(sorted(set(pairs)))
        return {"asked": len(verdicts), "yes": sum(verdicts), "no": len(verdicts) - sum(verdicts), "unclear": 0,
                "unclear_examples": []}


JUDGE_PROMPT = (
    "You check answers to exam questions. Are these two answers equivalent in meaning (the same value, "
    "choice or statement; a typo in a key word or pinyin instead of characters is NOT equivalent)?\n"
    "Answer A: {answer}\nAnswer B: {reference}\nReply with exactly one word: yes or no."
)


def parse_yes_no(reply: str) -> bool | None:
    """Strict: 'yes' -> True, 'no' -> False (any case, surrounding whitespace/period allowed, a closed
    <think> block ignored); anything else (a cut <think>, a sentence) -> None, which fails the gate and is
    counted as unclear in the report."""
    cleaned = re.sub(r"<think>.*?</think>", "", reply or "", flags=re.S).strip().strip(".。!").strip().lower()
    if cleaned in {"yes", "是"}:
        return True
    if cleaned in {"no", "否", "不是"}:
        return False
    return None


class LLMJudge:
    """A model as judge. `generate` maps a batch of prompts to replies (temperature 0)."""

    def __init__(self, generate: Callable[[list[str]], list[str]], name: str):
        self.generate = generate
        self.name = name
        self.cache: dict[tuple[str, str], bool | None] = {}
        self.replies: dict[tuple[str, str], str] = {}

    @classmethod
    def on_backend(cls, spec: str, memory=None) -> LLMJudge:
        """The model of a backend spec (`vllm:MODEL`, `openai:MODEL[@URL]`) as judge; `memory` sizes a vllm engine.
        Its engine starts at its first question, so an evaluator can release its own model first."""
        return cls(judge_generator(spec, memory), name=redact(spec))

    def judge_many(self, pairs: list[tuple[str, str]]) -> list[bool]:
        todo = sorted({p for p in pairs if p not in self.cache and p[0].strip()})
        if todo:
            replies = self.generate([JUDGE_PROMPT.format(answer=a, reference=r) for a, r in todo])
            for pair, reply in zip(todo, replies, strict=True):
                self.cache[pair] = parse_yes_no(reply)
                self.replies[pair] = reply
        return [bool(p[0].strip()) and self.cache[p] is True for p in pairs]

    def stats(self, pairs: list[tuple[str, str]]) -> dict:
        """How the judge answered these pairs: yes / no / unclear, with a few unclear replies to look at."""
        asked = sorted({p for p in pairs if p in self.cache})
        unclear = [p for p in asked if self.cache[p] is None]
        return {"asked": len(asked), "yes": sum(self.cache[p] is True for p in asked),
                "no": sum(self.cache[p] is False for p in asked), "unclear": len(unclear),
                "unclear_examples": [{"answer": a, "reference": r, "reply": self.replies[(a, r)]}
                                     for a, r in unclear[:5]]}


Judge = RuleJudge | LLMJudge


@dataclass(frozen=True)
class JudgeKind:
    usage: str  # how `--judge` names it: the kind alone, or KIND:MODEL for a judge that asks a model
    make: Callable[[str, object], Judge]  # (the whole spec, the engine memory of a vllm judge) -> the judge


# The registry: every kind `--judge` takes.
JUDGES: dict[str, JudgeKind] = {
    "rule": JudgeKind("rule", lambda spec, memory: RuleJudge()),
    "vllm": JudgeKind("vllm:MODEL", LLMJudge.on_backend),
    "openai": JudgeKind("openai:MODEL[@URL]", LLMJudge.on_backend),
}


def judge_usage() -> str:
    """How --judge names each registered judge (its help text and its error)."""
    return one_of(k.usage for k in JUDGES.values())


def judge_from_spec(spec: str, memory=None) -> Judge:
    """The judge a `--judge` spec names (see JUDGES); `memory` (a VLLMMemory) sizes a vllm judge's engine."""
    kind, colon, target = spec.partition(":")
    entry = JUDGES.get(kind)
    if entry is None or bool(colon) != (":" in entry.usage) or (colon and not target):
        raise ValueError(f"judge {spec!r} must be {judge_usage()}")
    return entry.make(spec, memory)

"""Answer-equivalence judges for the answer gate of answer-free scoring.

``RuleJudge`` (the default) needs no model: the rule of the reference's type (gbtrain.metric.answers: numbers
within a relative tolerance, choice letters, truth values, normalised text). ``LLMJudge`` asks a model through any
text generator (a gbtrain inference backend) with a fixed prompt; only a strict yes counts, and results are cached by
(answer, reference); the scorer asks it only what the rule cannot decide. ``JUDGES`` names them for `--judge`: a
new judge is a class and one line there.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from gbtrain.inference.registry import judge_generator
from gbtrain.metric import answers
from gbtrain.text import redact
from gbtrain.vocabulary import one_of


class RuleJudge:
    """Deterministic equivalence by the reference's type (gbtrain.metric.answers); two texts it cannot tell apart
    are not equivalent. No model."""

    name = "rule"

    def __init__(self, rel_tol: Fraction = answers.DEFAULT_REL_TOL):
        self.rel_tol = rel_tol

    def equivalent(self, answer: str, reference: str) -> bool:
        return answers.answers_equivalent(answer, reference, None, self.rel_tol) is True

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

from fractions import Fraction

import pytest

from gbtrain.metric.judges import LLMJudge, RuleJudge, parse_yes_no


@pytest.mark.parametrize(("answer", "reference", "same"), [
    ("高兴", "高兴", True),
    (" 高 兴。", "高兴", True),
    ("ＡＢＣ", "abc", True),
    ("1,000", "1000", True),
    ("50%", "0.5", True),
    ("1/2", "0.5", True),
    ("0.3333333", "1/3", False),  # no tolerance by default: 19 is not 20
    ("104", "100", False),
    ("1000000.5", "1000000", False),
    ("-4", "-4.0", True),
    ("0", "0.0", True),
    ("A、C", "CA", True),
    ("(B)", "B", True),
    ("A and C", "A,C", True),
    ("AB", "A", False),
    ("√", "对", True),
    ("T", "true", True),
    ("×", "正确", False),
    ("no", "错", True),
    ("", "", False),
    ("", "5", False),
    ("高心", "高兴", False),
    ("4个", "4", True),  # the value, where the reference has no unit
    ("4x", "4", False),  # not a unit: the rule cannot tell, so the rule judge does not pass it
    ("1/0", "1/0", True),  # equal text, though not a number
])
def test_rule_judge(answer, reference, same):
    assert RuleJudge().equivalent(answer, reference) is same


@pytest.mark.parametrize(("answer", "reference", "same"), [
    ("0.3333333", "1/3", True),  # relative difference 1e-7
    ("0.3333", "1/3", True),  # 1e-4
    ("104", "100", True),  # 4%
    ("106", "100", False),  # 6%
    ("3.14", "3.15", True),
])
def test_rule_judge_with_the_document_qa_tolerance(answer, reference, same):
    assert RuleJudge(Fraction(5, 100)).equivalent(answer, reference) is same


def test_rule_judge_tolerance():
    """--answer-tolerance 1e-6: what the rule judge did before numbers were read by type."""
    exact = RuleJudge(Fraction(1, 10**6))
    assert exact.equivalent("0.3333333", "1/3") and not exact.equivalent("0.3333", "1/3")
    assert not exact.equivalent("3.14", "3.15") and exact.equivalent("½", "0.5")


@pytest.mark.parametrize(("reply", "yes"), [("yes", True), ("Yes.", True), (" YES ", True), ("是", True),
                                            ("no", False), ("No.", False), ("yes, they are", None), ("", None),
                                            ("<think>hmm</think>yes", True), ("maybe", None),
                                            ("<think>Let me compare the two", None)])
def test_strict_yes_no(reply, yes):
    assert parse_yes_no(reply) is yes


def test_llm_judge_caches_and_batches():
    calls = []

    def generate(prompts):  # a deterministic generator: "yes" when both answers appear identical
        calls.append(len(prompts))
        return ["yes" if p.split("Answer A: ")[1].split("\n")[0] == p.split("Answer B: ")[1].split("\n")[0]
                else "no" for p in prompts]

    judge = LLMJudge(generate, "test")
    pairs = [("4", "4"), ("5", "4"), ("4", "4"), ("", "4")]
    assert judge.judge_many(pairs) == [True, False, True, False]
    assert calls == [2]  # one batch, duplicates and empty answers not sent
    assert judge.judge_many([("5", "4")]) == [False]
    assert calls == [2]  # cached


def test_unclear_judge_replies_fail_the_gate_and_are_counted():
    """A thinking model cut at a few tokens replies '<think>...': not a silent 'no' but an unclear reply."""
    judge = LLMJudge(lambda prompts: ["<think>Okay, the student wrote", "no"][:len(prompts)], "thinker")
    pairs = [("4", "4"), ("5", "4")]
    assert judge.judge_many(pairs) == [False, False]
    stats = judge.stats(pairs)
    assert (stats["asked"], stats["yes"], stats["no"], stats["unclear"]) == (2, 0, 1, 1)
    assert stats["unclear_examples"][0]["reply"].startswith("<think>")

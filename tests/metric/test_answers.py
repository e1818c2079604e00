"""gbtrain.metric.answers: every expected value below is worked out by hand (see the comments)."""

import random
import time
from fractions import Fraction

import pytest

from gbtrain.metric.answers import (
    ANSWER_TYPES,
    DEFAULT_REL_TOL,
    anls,
    answers_equivalent,
    extract_choices,
    infer_answer_type,
    normalize_answer,
    numbers_equal,
    parse_boolean,
    parse_number,
    token_f1,
)
from gbtrain.vocabulary import FALSE_WORDS, TRUE_WORDS

# --- numbers ---------------------------------------------------------------------------------------------------


def test_default_tolerance_is_five_percent():
    assert Fraction(5, 100) == DEFAULT_REL_TOL


@pytest.mark.parametrize(("answer", "reference", "rel_tol", "equal"), [
    ("104", "100", DEFAULT_REL_TOL, True),  # |4| <= 5% of 100 = 5
    ("104", "100", Fraction(1, 100), False),  # |4| > 1
    ("106", "100", DEFAULT_REL_TOL, False),  # |6| > 5
    ("95", "100", DEFAULT_REL_TOL, True),  # |-5| <= 5: the bound is inclusive
    ("0", "0.0", DEFAULT_REL_TOL, True),
    ("0.01", "0", DEFAULT_REL_TOL, False),  # a reference 0 is met only by 0
    ("-5", "-5.0", DEFAULT_REL_TOL, True),
    ("-5", "5", DEFAULT_REL_TOL, False),  # |-10| > 0.25
    ("−5", "-5", DEFAULT_REL_TOL, True),  # U+2212 minus sign
    ("-104", "-100", DEFAULT_REL_TOL, True),  # tolerance on |reference|
])
def test_numbers_equal(answer, reference, rel_tol, equal):
    assert numbers_equal(parse_number(answer), parse_number(reference), rel_tol) is equal


def test_negative_tolerance_is_refused():
    with pytest.raises(ValueError, match="rel_tol"):
        numbers_equal(Fraction(1), Fraction(1), Fraction(-1))


@pytest.mark.parametrize(("texts", "value"), [
    (["1/2", "0.5", "½", "50%", ".5", "50 %", "1 / 2", "Answer: 1/2。", "= 0.5"], Fraction(1, 2)),
    (["1½", "1 ½", "1.5", "1 1/2", "3/2", "150%"], Fraction(3, 2)),
    (["10^3", "1000", "1,000", "1 000", "1e3", "1.0×10^3", "1E3", "1x10^3", "10³", "1000.", "The answer is 1000."],
     Fraction(1000)),
    (["10^-3", "10^(-3)", "10⁻³", "1e-3", "0.001", "0.1%"], Fraction(1, 1000)),
    (["2^10", "1024", "1.024e3"], Fraction(1024)),
    (["１２", "12", "+12"], Fraction(12)),  # fullwidth digits fold to ASCII
    (["-3.25", "−3.25", "-13/4", "-3¼"], Fraction(-13, 4)),
    (["1,234,567.5", "1 234 567.5"], Fraction(2469135, 2)),
])
def test_parse_number_forms(texts, value):
    assert [parse_number(t) for t in texts] == [value] * len(texts)


@pytest.mark.parametrize("text", [
    "1,00",  # not a thousands group of 3
    "1,5",  # a decimal comma is ambiguous with thousands: refused
    "12,34,567",
    "1  000",  # two spaces
    "5 cm",  # units are not accepted
    "$5",
    "4个",
    "1/0",
    "0^-1",
    "1 3/2",  # not a mixed number
    "11⁄2 apples",
    "x",
    "",
    "five",
    "H₂O",
    "1e99999",  # exponent over 999
    "1e1000",
    "2^1000",
    "10^-1000",
    "1×10^1000",
    "9" * 65,  # over 64 characters
])
def test_not_numbers(text):
    assert parse_number(text) is None


def test_huge_exponents_are_refused_quickly():
    start = time.perf_counter()
    assert parse_number("1e99999") is None
    assert parse_number("9" * 30 + "^999") is not None  # the largest allowed power: still exact and fast
    assert parse_number("1" + "0" * 10**6) is None  # long text: refused before any arithmetic
    assert time.perf_counter() - start < 0.5


# --- choices ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "letters"), [
    ("B", "B"), ("(B)", "B"), ("b", "B"), ("（B）", "B"), ("B.", "B"), ("[C]", "C"),
    ("A, C", "AC"), ("A and C", "AC"), ("A、C", "AC"), ("A C", "AC"), ("C, A", "AC"), ("AC", "AC"), ("A/C", "AC"),
    ("答案是B", "B"), ("答案：B", "B"), ("the answer is (C)", "C"), ("Option B", "B"), ("Options A and C", "AC"),
    ("选B", "B"), ("Final answer: D", "D"),
])
def test_extract_choices(text, letters):
    assert extract_choices(text) == frozenset(letters)


@pytest.mark.parametrize("text", ["Bob", "bad", "ab", "AA", "A or B", "I", "Z", "", "Option", "5", "B is right"])
def test_not_choices(text):
    assert extract_choices(text) is None


@pytest.mark.parametrize(("answer", "reference", "same"), [
    ("A C", "C, A", True),
    ("C、A", "AC", True),
    ("B", "A B", False),  # a subset is not the answer
    ("A B C", "A B", False),
    ("Bob", "B", False),  # not a choice: wrong
    ("the answer is (b)", "B", True),
])
def test_choice_answers(answer, reference, same):
    assert infer_answer_type(reference) == "choice"
    assert answers_equivalent(answer, reference) is same


# --- booleans --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("word", ["yes", "Yes.", "TRUE", "true", "对", "正确", "√", "✔️", "T", "right", "correct"])
def test_true_words(word):
    assert parse_boolean(word) is True


@pytest.mark.parametrize("word", ["no", "No!", "false", "错", "错误", "×", "✗", "wrong", "n"])
def test_false_words(word):
    assert parse_boolean(word) is False


def test_boolean_words_are_the_vocabularys():
    """是 / 否 are not in gbtrain.vocabulary's lists, so they are not booleans here (the lists are the one
    definition, and scoring hashes them): 是 vs 否 is left to a judge, 是 vs 是 is equal text."""
    assert all(parse_boolean(w) is True for w in TRUE_WORDS)
    assert all(parse_boolean(w) is False for w in FALSE_WORDS)
    assert parse_boolean("是") is None and parse_boolean("否") is None
    assert infer_answer_type("是") == "text"
    assert answers_equivalent("是", "否") is None
    assert answers_equivalent("是", "是") is True


@pytest.mark.parametrize(("answer", "reference", "same"), [
    ("yes", "对", True), ("true", "正确", True), ("√", "yes", True), ("T", "true", True),
    ("no", "错", True), ("false", "×", True),
    ("no", "true", False), ("对", "错", False),
    ("maybe", "yes", False),  # not a boolean word: wrong
])
def test_boolean_answers(answer, reference, same):
    assert infer_answer_type(reference) == "boolean"
    assert answers_equivalent(answer, reference) is same


# --- normalisation ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "normal"), [
    ("The answer is Paris.", "paris"),
    ("paris", "paris"),
    ("an apple", "apple"),
    ("A cat and the hat", "cat and hat"),
    ("Hello, world!!", "hello world"),
    ("  many   spaces\there ", "many spaces here"),
    ("答案是北京", "北京"),
    ("答案：北京。", "北京"),
    ("答：北京", "北京"),
    ("Final answer: 42", "42"),
    ("answer is: yes", "yes"),
    ("ＦＵＬＬ width", "full width"),
    ("the answer isotope", "answer isotope"),  # "is" must be a whole word to be a prefix
    ("", ""),
])
def test_normalize_answer(text, normal):
    assert normalize_answer(text) == normal


# --- answers_equivalent ----------------------------------------------------------------------------------------


def test_answer_types():
    assert ANSWER_TYPES == ("number", "choice", "boolean", "text")
    assert [infer_answer_type(r) for r in ["3.5", "50%", "B", "A、C", "(B)", "yes", "对", "F", "T", "Paris"]] == [
        "number", "number", "choice", "choice", "choice", "boolean", "boolean", "choice", "boolean", "text"]


def test_text_answers():
    assert answers_equivalent("The answer is Paris.", "paris") is True
    assert answers_equivalent("an apple", "Apple") is True
    assert answers_equivalent("答案是北京", "北京") is True
    assert answers_equivalent("London", "Paris") is None  # a judge decides
    assert answers_equivalent("the capital of France", "Paris") is None


def test_empty_answer_is_false():
    for reference in ["Paris", "5", "B", "yes", ""]:
        assert answers_equivalent("", reference) is False
        assert answers_equivalent("  \n", reference) is False


def test_number_answers():
    assert answers_equivalent("1,000", "1e3") is True
    assert answers_equivalent("The answer is 104.", "100") is True
    assert answers_equivalent("104", "100", rel_tol=Fraction(1, 100)) is False
    assert answers_equivalent("five", "5") is False  # not a number: wrong
    assert answers_equivalent("5 cm", "5") is False


def test_given_type_overrides_inference():
    assert answers_equivalent("0", "0.0") is True  # inferred number
    assert answers_equivalent("0", "0.0", "text") is None  # as text: "0" vs "00"
    assert answers_equivalent("B", "b", "text") is True
    assert answers_equivalent("paris", "Paris", "number") is True  # the reference is no number: the text rule


def test_unknown_type_raises():
    with pytest.raises(ValueError, match="number, choice, boolean or text"):
        answers_equivalent("5", "5", "date")
    with pytest.raises(ValueError):
        answers_equivalent("", "5", "integer")  # checked before the empty answer


# --- token F1 --------------------------------------------------------------------------------------------------


def test_token_f1_worked_example():
    # normalised tokens: [cat, sat, on, mat] (both "the" removed) vs [cat, on, mat]; common = 3;
    # precision = 3/4, recall = 3/3 = 1; F1 = 2 * 3/4 * 1 / (3/4 + 1) = (3/2) / (7/4) = 6/7
    assert token_f1("the cat sat on the mat", "cat on mat") == pytest.approx(6 / 7)


def test_token_f1_counts_repeats_once_each():
    # [a-removed] "cat cat" vs "cat": common = min(2, 1) = 1; precision 1/2, recall 1; F1 = 1 / (3/2) = 2/3
    assert token_f1("cat cat", "cat") == pytest.approx(2 / 3)


def test_token_f1_cjk_per_character():
    # 北京是首都 -> [北, 京, 是, 首, 都], 北京 -> [北, 京]: common 2, precision 2/5, recall 1, F1 = (4/5)/(7/5) = 4/7
    assert token_f1("北京是首都", "北京") == pytest.approx(4 / 7)
    assert token_f1("答案是北京。", "北京") == 1.0
    assert token_f1("上海", "北京") == 0.0


def test_token_f1_edges():
    assert token_f1("", "") == 1.0
    assert token_f1("the", "a") == 1.0  # both empty after normalisation
    assert token_f1("", "cat") == 0.0
    assert token_f1("cat", "") == 0.0
    assert token_f1("Paris!", "paris") == 1.0
    assert token_f1("dog", "cat") == 0.0


# --- ANLS ----------------------------------------------------------------------------------------------------------


def test_anls_worked_example():
    # Levenshtein 3, longer length 7: NL = 3/7 < 0.5, so ANLS = 1 - 3/7 = 4/7
    assert anls("kitten", "sitting") == pytest.approx(4 / 7)


def test_anls_threshold():
    # abcd -> abxy: 2 substitutions, NL = 2/4 = 0.5, not < 0.5: 0
    assert anls("abcd", "abxy") == 0.0
    # abcd -> abcx: NL = 1/4: 3/4
    assert anls("abcd", "abcx") == pytest.approx(3 / 4)
    assert anls("abcd", "abxy", threshold=0.6) == pytest.approx(1 / 2)


def test_anls_takes_the_best_reference():
    # kitten -> kitchen: t->c, +h: 2 edits over 7: 5/7, better than sitting's 4/7
    assert anls("kitten", ["sitting", "kitchen"]) == pytest.approx(5 / 7)
    assert anls("kitten", ["zzzzzz", "kitten"]) == 1.0
    with pytest.raises(ValueError):
        anls("kitten", [])


def test_anls_ignores_case_and_whitespace():
    assert anls("  Hello   World ", "hello world") == 1.0
    assert anls("HELLO\tworld", "hello world") == 1.0


def test_anls_empty():
    assert anls("", "") == 1.0
    assert anls("  ", "") == 1.0
    assert anls("", "abc") == 0.0
    assert anls("abc", "") == 0.0


def test_anls_long_inputs_are_capped_and_fast():
    a, b = "ab" * 50_000, "ba" * 50_000  # 100,000 characters each: 10^10 cells, over the 25,000,000 cap
    start = time.perf_counter()
    score = anls(a, b)
    assert time.perf_counter() - start < 1.0
    # scored on the first 5,000 characters: "abab...ab" vs "baba...ba" is 2 edits (drop the first a, append one)
    assert score == pytest.approx(1 - 2 / 5000)
    rng = random.Random(1)
    c, d = ("".join(rng.choice("abcdefghij") for _ in range(100_000)) for _ in range(2))
    start = time.perf_counter()
    assert anls(c, d) == 0.0  # unrelated random texts: NL far above 0.5
    assert time.perf_counter() - start < 1.0

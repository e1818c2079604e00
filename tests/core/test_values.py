"""One reader per typed value (gbtrain.values): every tool that reads a label word or points reads it the same way."""

from __future__ import annotations

import pytest

from gbtrain.grading.answer_key import load_answer_key
from gbtrain.grading.review_import import _number, _verdict
from gbtrain.metric.parsing import NOT_A_NUMBER, NOT_FINITE, parse_points
from gbtrain.schema import CONTEXT, HALF_RIGHT, RIGHT, UNKNOWN, WRONG
from gbtrain.values import label_of, points_from_text, question_id_key, question_id_parts, verdict_of


@pytest.mark.parametrize(("text", "value"), [
    ("7", 7), (" 7.5 ", 7.5), ("+3", 3), (".5", 0.5), ("1e1", 10.0), ("2,5", 2.5), ("2,25", 2.25), ("-1", -1),
    ("１２", 12), ("３，５", 3.5),  # fullwidth digits and comma, as a Chinese input method types them
])
def test_points_are_read_one_way(text: str, value: float):
    got = points_from_text(text)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(("text", "why"), [
    ("1,000", "not a number"),  # a thousands separator, not a decimal comma: refused rather than read as 1
    ("1,2,3", "not a number"), ("1.5,5", "not a number"), ("1_000", "not a number"), ("7/10", "not a number"),
    ("B", "not a number"), ("", "not a number"), ("nan", "not a finite number"), ("-inf", "not a finite number"),
    ("1e400", "not a finite number"), ("9" * 401, "not a finite number"), ("9" * 5000, "not a finite number"),
])
def test_what_is_not_points_is_named(text: str, why: str):
    with pytest.raises(ValueError, match=f"^{why}$"):
        points_from_text(text)


@pytest.mark.parametrize(("word", "label"), [
    ("right", RIGHT), ("Right", RIGHT), (" WRONG ", WRONG), ("ｒｉｇｈｔ", RIGHT), ("true", RIGHT), ("False", WRONG),
    ("对", RIGHT), ("半对", HALF_RIGHT), ("other", UNKNOWN), ("Question", CONTEXT), ("correct", None),
])
def test_label_words_are_read_case_insensitively(word: str, label: str | None):
    assert label_of(word) == label
    assert verdict_of(word) == (None if label == CONTEXT else label)


def test_the_users_words_come_first():
    assert verdict_of("Correct", {"correct": RIGHT}) == RIGHT
    assert verdict_of("x", {"x": WRONG}) == WRONG


def test_every_reader_of_points_agrees(tmp_path):
    """A teacher's sheet, an answer key's full score and a model's reply read "2,5" and "1,000" alike."""
    assert _number("2,5", "review.csv row 2", "score") == 2.5
    assert parse_points("2,5") == (2.5, None)
    key = tmp_path / "key.yaml"
    key.write_text("'1': {answer: A, full_score: '2,5'}\n", encoding="utf-8")
    assert load_answer_key(key)[0].full_score == 2.5
    with pytest.raises(ValueError, match="not a number of points"):
        _number("1,000", "review.csv row 2", "score")
    assert parse_points("1,000") == (None, NOT_A_NUMBER)
    assert parse_points("9" * 401) == (None, NOT_FINITE)
    key.write_text("'1': {answer: A, full_score: '1,000'}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="full_score '1,000' is not a number"):
        load_answer_key(key)


def test_every_reader_of_verdicts_agrees():
    assert _verdict("Right", "review.csv row 2") == RIGHT
    assert _verdict("TRUE", "review.csv row 2") == RIGHT
    with pytest.raises(ValueError, match="is not a verdict"):
        _verdict("question", "review.csv row 2")


@pytest.mark.parametrize(("printed", "key"), [
    ("5", "5"), ("Q5", "5"), ("q 5", "5"), ("Question 5", "5"), ("No. 5", "5"), ("5.", "5"), ("5、", "5"),
    ("(5)", "5"), ("（5）", "5"), ("5)", "5"), ("05", "5"), ("⑤", "5"), ("５", "5"), ("第5题", "5"), ("第五题", "5"),
    ("五、", "5"), ("十一", "11"), ("第二十三题", "23"), ("一百零五", "105"), ("5-2", "5-2"), ("5(2)", "5-2"),
    ("5.2", "5-2"), ("５－２", "5-2"), ("第3题(2)", "3-2"), ("第3题第2问", "3-2"), ("3(a)", "3-a"), ("3A", "3-a"),
    ("(1)②", "1-2"),
    # not a printed number: compared as written (folded, case-insensitively)
    ("#5", "#5"),  # schema.UNNUMBERED: the fifth question by position on a page that prints no numbers
    ("essay", "essay"), ("B", "b"), ("12cm", "12cm"), ("x = 5", "x = 5"), ("题5", "题5"), ("", ""),
])
def test_question_ids_are_read_as_pages_print_them(printed: str, key: str):
    assert question_id_key(printed) == key


def test_an_id_past_the_length_of_a_printed_number_is_compared_as_written():
    assert question_id_parts("1-" * 30) is None and question_id_key("Q" * 41) == "q" * 41


def test_a_key_that_names_one_question_twice_as_pages_print_it_is_refused(tmp_path):
    key = tmp_path / "key.yaml"
    key.write_text("5: B\nQ5: C\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"questions '5' and 'Q5' are one question as a page prints it \(both read as "
                                         r"'5'\): keep one, or number them apart"):
        load_answer_key(key)

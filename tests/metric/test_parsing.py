"""The malformed-output corpus: every case asserts the exact items recovered or the exact reason."""

import json

import pytest

from gbtrain.metric.parsing import (
    EMPTY,
    MALFORMED,
    NO_JSON,
    NOT_ITEMS,
    TRUNCATED,
    coerce_correctness,
    normalize_items,
    parse_boxes,
    parse_response,
)

A = {"bbox_2d": [10, 20, 110, 60], "text": "高兴", "answer": "高兴", "correctness": True}
B = {"bbox_2d": [10, 80, 200, 120], "text": 'a {b} [c] "q"', "answer": "x]", "correctness": False}
ITEMS = [A, B]


def as_json(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def as_python(value) -> str:
    return repr(value)


def with_trailing_commas(items) -> str:
    objs = [as_json(it)[:-1] + ",}" for it in items]
    return "[" + ", ".join(objs) + ",]"


# ---------------------------------------------------------------- 1. truncation at every character
def truncation_cases():
    s = as_json(ITEMS)
    end_a = len(as_json([A])) - 1  # just after A's closing brace
    cases = []
    for k in range(1, len(s) + 1):
        cut = s[:k]
        if k == len(s):
            cases.append((cut, ITEMS, None))
        elif k >= len(s) - 1:  # B closed, list not
            cases.append((cut, ITEMS, TRUNCATED))
        elif k >= end_a:
            cases.append((cut, [A], TRUNCATED))
        else:
            cases.append((cut, [], TRUNCATED))
    return cases


@pytest.mark.parametrize(("text", "items", "reason"), truncation_cases())
def test_truncated_output_keeps_complete_items(text, items, reason):
    r = parse_response(text)
    assert (r.items, r.reason) == (items, reason)


# ---------------------------------------------------------------- 2. wrappers x surroundings x syntax
SYNTAX = {"json": as_json, "python": as_python, "trailing_commas": None}
SHAPES = {
    "list": (lambda: ITEMS, ITEMS),
    "results": (lambda: {"results": ITEMS}, ITEMS),
    "items": (lambda: {"items": ITEMS}, ITEMS),
    "single": (lambda: A, [A]),
}
SURROUND = {
    "bare": "{}",
    "fence_json": "```json\n{}\n```",
    "fence_plain": "```\n{}\n```",
    "prose": "Here is my grading of the page [see below]:\n{}\nHope this helps!",
    "think": "<think>The student wrote {{x}} and [y]; let me check.</think>\n{}",
    "close_think_only": "reasoning about [1, 2] first </think>{}",
    "think_and_fence": "<think>[draft]</think>\n```json\n{}\n```\n",
}


def wrapper_cases():
    cases = []
    for syn_name, dump in SYNTAX.items():
        for shape_name, (make, expected) in SHAPES.items():
            for sur_name, template in SURROUND.items():
                value = make()
                if dump is None:
                    if shape_name != "list":
                        continue
                    body = with_trailing_commas(value)
                else:
                    body = dump(value)
                cases.append(pytest.param(template.replace("{}", body, 1) if "{}" in template else template,
                                          expected, id=f"{syn_name}-{shape_name}-{sur_name}"))
    return cases


@pytest.mark.parametrize(("text", "items"), wrapper_cases())
def test_wrappers_and_surroundings(text, items):
    r = parse_response(text)
    assert r.items == items
    assert r.reason is None


# ---------------------------------------------------------------- 3. hand-written edge cases
EDGE = [
    ("", [], EMPTY),
    ("   \n", [], EMPTY),
    (None, [], EMPTY),
    ("<think>only thinking, never closed [1,2]", [], EMPTY),
    ("<think>all</think>", [], EMPTY),
    ("I cannot find any handwriting.", [], NO_JSON),
    ("The page has [1, 2, 3] numbers.", [], NOT_ITEMS),
    ("[]", [], None),
    ("```json\n[]\n```", [], None),
    ("{}", [], None),
    ('[{"a": 1}, {bad json}, {"b": 2}]', [{"a": 1}, {"b": 2}], MALFORMED),
    ("[{'text': 'it\\'s', 'correctness': None}]", [{"text": "it's", "correctness": None}], None),
    ('[{"text": "don\'t"}]', [{"text": "don't"}], None),
    ('{"results": [{"a": 1}, {"b": ', [{"a": 1}], TRUNCATED),
    ('{"bbox_2d": [1, 2', [], TRUNCATED),
    ('[[{"a": 1}, {"b": 2}]]', [{"a": 1}, {"b": 2}], None),
    ('{"grading": {"note": "x"}, "items": [{"a": 1}]}', [{"a": 1}], None),
    ('text before {"a": "}"} and after', [{"a": "}"}], None),
    ('```json\n[{"a": 1}]\n```\nand the final answer:\n```json\n[{"b": 2}]\n```', [{"b": 2}], None),
    ('```json\n[{"a": 1}, {"b": 2', [{"a": 1}], TRUNCATED),
    ('[{"a": "\\"quoted\\" [x]"}]', [{"a": '"quoted" [x]'}], None),
    ('[{"a": 1}]]]', [{"a": 1}], None),
    ('[{"a": true, "b": false, "c": null}]', [{"a": True, "b": False, "c": None}], None),
    ("[{'a': True, 'b': False, 'c': None,},]", [{"a": True, "b": False, "c": None}], None),
    ('<reasoning>[{"x": 1}]</reasoning>[{"y": 2}]', [{"y": 2}], None),
    ('Answer: {"answer": "B"}', [{"answer": "B"}], None),
    ('[{"text": "中文，全角（括号）"}]', [{"text": "中文，全角（括号）"}], None),
    ('[1, {"a": 1}]', [{"a": 1}], None),
]


@pytest.mark.parametrize(("text", "items", "reason"), EDGE)
def test_edge_cases(text, items, reason):
    r = parse_response(text)
    assert (r.items, r.reason) == (items, reason)


def test_corpus_is_large():
    n = len(truncation_cases()) + len(wrapper_cases()) + len(EDGE)
    assert n >= 200, n


@pytest.mark.parametrize(("value", "boxes"), [
    ([1, 2, 3, 4], [[1, 2, 3, 4]]),
    ("[1, 2, 3, 4]", [[1, 2, 3, 4]]),
    (["1", "2.5", "3", "4"], [[1, 2.5, 3, 4]]),
    ([[1, 2, 3, 4], [5, 6, 7, 8]], [[1, 2, 3, 4], [5, 6, 7, 8]]),
    ([[[1, 2, 3, 4]]], [[1, 2, 3, 4]]),
    ([[1, 2], [5, 2], [5, 9], [1, 9]], [[1, 2, 5, 9]]),
    ("(1, 2, 3, 4)", [[1, 2, 3, 4]]),
    ("box: 1, 2, 3, 4", [[1, 2, 3, 4]]),
    ("x1=1 y1=2 x2=3 y2=4", []),  # more than four numbers in the text: ambiguous, refused
    ([1, 2, 3], []),
    ([1, "a", 3, 4], []),
    ([1, 2, float("nan"), 4], []),
    (None, []),
    ("", []),
    ([True, 2, 3, 4], []),
    ([[1, 2, 3, 4], "junk", [5, 6, 7, 8]], [[1, 2, 3, 4], [5, 6, 7, 8]]),
])
def test_parse_boxes(value, boxes):
    assert parse_boxes(value) == boxes


@pytest.mark.parametrize(("raw", "value"), [
    (True, True), (False, False), ("true", True), ("False", False), (" 对 ", True), ("错", False),
    ("正确", True), ("错误", False), ("right", True), ("wrong", False), ("√", True), ("×", False),
    (1, True), (0, False), ("1", True), ("0", False), ("maybe", None), (None, None), (2, None), ("", None),
])
def test_coerce_correctness(raw, value):
    assert coerce_correctness(raw) is value


def test_normalize_items_aliases():
    items = normalize_items([{"bbox": "[1,2,3,4]", "transcription": ["a", "b"], "answer": 5, "correct": "false"},
                             {"text": None}])
    assert items[0].boxes == [[1, 2, 3, 4]] and items[0].text == "ab" and items[0].answer == "5"
    assert items[0].correctness is False
    assert items[1].boxes == [] and items[1].text == "" and items[1].correctness is None


HOSTILE = [  # (response, reason): nothing here may hang, recurse without bound or raise
    ("[" * 8000, "too_deep"),
    ("[" * 2000 + "]" * 2000, "too_deep"),
    ('{"a": ' * 500 + "1" + "}" * 500, "too_deep"),
    ("[" * 2_000_000, "too_large"),
    ("a" * 2_000_000, "too_large"),
    ("<think>" * 50_000 + '[{"text": "1"}]', "empty"),
    ("see [1] and [2] " * 20_000, "not_items"),
    ('[{"bbox_2d": [' + "9" * 401 + ', 1, 2, 3], "text": "1", "correctness": true}]', None),
    ('[{"bbox_2d": [' + "9" * 5000 + ', 1, 2, 3], "text": "1"}]', "not_items"),
    ('[{"bbox_2d": [1, 2, 3, 4], "text": "1", "answer": "1e999999999", "correctness": true}]', None),
    ('[{"bbox_2d": "' + "[" * 3000 + '", "text": "1"}]', None),
    ('"[' * 100_000, "too_deep"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("response", "reason"), HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_output_is_unparsable_with_a_reason_not_a_crash(response, reason):
    result = parse_response(response)
    assert result.reason == reason
    for item in normalize_items(result.items):
        assert all(len(b) == 4 for b in item.boxes)
        if "9" * 401 in response:
            assert item.boxes == []  # a 401-digit coordinate is no number, so the item has no box


@pytest.mark.timeout(60)
def test_the_rule_judge_refuses_absurd_numbers_quickly():
    from gbtrain.metric.judges import RuleJudge

    judge = RuleJudge()
    assert not judge.equivalent("1e999999999", "1")
    assert not judge.equivalent("1" * 5000, "1")
    assert judge.equivalent("1.5e3", "1500")


def test_predictions_with_broken_bytes_and_deep_lines(tmp_path):
    from gbtrain.metric.scoring import PredictionsError, read_predictions

    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"id": "a", "response": "[{\\"text\\": \\"\xff\xfe\\"}]"}\n')
    assert "\ufffd" in read_predictions(path).responses["a"]
    path.write_text('{"id": "b", "response": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(PredictionsError, match=r"p\.jsonl:1: malformed JSON line"):
        read_predictions(path)


@pytest.mark.parametrize(("item", "named"), [
    ({"question_id": "3-2"}, "3-2"), ({"question": 3}, "3"), ({"qid": 3.0}, "3"), ({"id": " 7 "}, "7"),
    ({"question_id": True}, None), ({"question_id": ""}, None), ({"question_id": [1]}, None), ({}, None),
])
def test_the_question_an_item_names(item, named):
    from gbtrain.metric.parsing import normalize_items

    assert normalize_items([{"bbox_2d": [0, 0, 1, 1], **item}])[0].question_id == named

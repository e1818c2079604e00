"""Item confidences from the reply's token logprobs, and mAP ranked by them (docs/metric.md#confidences)."""

import json
import math
from types import SimpleNamespace

import pytest

from gbtrain.inference.logprobs import token_offsets
from gbtrain.metric.confidence import NO_CONFIDENCES, TokenIndex, annotate, interpolated_ap
from gbtrain.metric.parsing import PredictedItem, normalize_items, parse_response
from gbtrain.metric.scoring import ScoreOptions, read_predictions, score
from gbtrain.metric.selective import coverage_table
from gbtrain.schema import Mark, Record

A, B, C = (100, 100, 200, 150), (100, 400, 300, 460), (100, 100, 200, 150)


def mark(box, mid):
    x1, y1, x2, y2 = box
    return Mark(points=[(x1, y1), (x2, y1), (x2, y2), (x1, y2)], label="right", raw_label="right", mark_id=mid,
                hand="42", std="42")


def item(box, correctness=True):
    return {"bbox_2d": list(box), "text": "42", "answer": "42", "correctness": correctness}


def line(rid: str, items: list[dict], confs: list[tuple[float, float]]) -> dict:
    """A predictions line whose reply has one token per character, logprob 0 except over each item's box value
    and judgment value, where it is log(that confidence)."""
    text = json.dumps(items)
    lps = [0.0] * len(text)
    pos = 0
    for it, (box_conf, judge_conf) in zip(items, confs, strict=True):
        for value, conf in ((json.dumps(it["bbox_2d"]), box_conf), (json.dumps(it["correctness"]), judge_conf)):
            start = text.index(value, pos)
            lps[start:start + len(value)] = [math.log(conf)] * len(value)
            pos = start + len(value)
    return {"id": rid, "response": text, "logprobs": [[i, lp] for i, lp in enumerate(lps)]}


def test_ranked_map_equals_the_hand_computed_value(tmp_path):
    """Three groups (A, B on p1; C on p2), four boxes ranked by confidence:
    0.9 = A (IoU 1), 0.8 far from everything (FP), 0.7 = C (IoU 1), 0.6 on B with IoU 3840/12000 = 0.32.
    t = 0.20, 0.25, 0.30: TP FP TP TP -> (R, P) = (1/3, 1), (1/3, 1/2), (2/3, 2/3), (1, 3/4); the interpolated
    precision is 1 for r <= 1/3 (r = 0.00..0.33: 34 points) and 3/4 above (67 points): AP = (34 + 50.25) / 101.
    t = 0.35 .. 0.50: TP FP TP FP -> precision 1 for 34 points, 2/3 for r = 0.34..0.66 (33 points), 0 above:
    AP = (34 + 22) / 101. mAP = 100 x (3 x 84.25 + 4 x 56) / 101 / 7 = 67.4328. The one-point figure differs:
    P x R = 3/4 x 1, then 2/4 x 2/3: 51.19."""
    records = [Record("p1", "L3", "Mathematics", "p1.jpg", 1000, 800, [mark(A, "1"), mark(B, "2")]),
               Record("p2", "L3", "Mathematics", "p2.jpg", 1000, 800, [mark(C, "1")])]
    path = tmp_path / "p.jsonl"
    lines = [line("p1", [item(A), item((600, 600, 700, 700)), item((100, 400, 164, 460))],
                  [(0.9, 0.5), (0.8, 0.5), (0.6, 0.25)]),
             line("p2", [item(C)], [(0.7, 0.95)])]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = score(records, read_predictions(path), ScoreOptions("L3", "answer-free", "abs"))
    ranked = report["map_ranked"]
    assert ranked["undefined"] is None
    assert ranked["ap_by_iou"]["0.30"] == pytest.approx(84.25 / 101, abs=1e-6)
    assert ranked["ap_by_iou"]["0.35"] == pytest.approx(56 / 101, abs=1e-6)
    assert ranked["value"] == pytest.approx(100 * (3 * 84.25 + 4 * 56) / 101 / 7, abs=1e-3)
    assert report["map_20_50"] == pytest.approx(100 * (3 * 3 / 4 + 4 * (1 / 2) * (2 / 3)) / 7, abs=1e-3)  # 51.19
    confs = {(g["record_id"], g["group_id"]): g["confidence"] for g in report["groups"]}
    assert confs[("p1", "1")] == pytest.approx(0.5) and confs[("p2", "1")] == pytest.approx(0.95)
    rows = {r["threshold"]: r for r in report["selective"]["rows"]}  # judgments 0.5, 0.25, 0.95, all right
    assert (rows[0.5]["coverage"], rows[0.5]["accuracy"]) == (pytest.approx(2 / 3, abs=1e-6), 1.0)

    path.write_text("".join(json.dumps({"id": x["id"], "response": x["response"]}) + "\n" for x in lines))
    old = score(records, read_predictions(path), ScoreOptions("L3", "answer-free", "abs"))  # a file from before
    assert old["map_ranked"] == {"value": None, "ap_by_iou": None, "undefined": NO_CONFIDENCES}
    assert old["map_20_50"] == report["map_20_50"]


def test_interpolated_ap_of_a_perfect_and_an_empty_ranking():
    assert interpolated_ap([(0.9, True), (0.5, True)], 2) == 1.0
    assert interpolated_ap([(0.9, False)], 2) == 0.0 and interpolated_ap([], 2) == 0.0


def test_confidences_are_read_from_the_last_items_and_stay_in_0_1():
    """A draft in a think block comes first: the final items' values are the last occurrences of each key."""
    final = [item(A, True), item(B, "错")]
    text = '<think>{"bbox_2d": [1, 2, 3, 4], "correctness": false}</think>' + json.dumps(final, ensure_ascii=False)
    lps = [[i, -0.1] for i in range(len(text))]
    start = text.index('"错"') + 1  # the value's content, without its quotes
    lps[start] = [start, -2.0]
    items = normalize_items(parse_response(text).items)
    annotate(items, text, lps)
    assert items[1].confidence == pytest.approx(math.exp(-2.0))
    assert items[0].confidence == pytest.approx(math.exp(-0.1)) == items[1].box_confidence
    assert all(0 <= c <= 1 for it in items for c in (it.confidence, it.box_confidence))
    # a token spanning several characters counts once; one that only touches the span's end does not
    assert TokenIndex([[0, -1.0], [5, -3.0], [9, -5.0]], 12).confidence((2, 9)) == pytest.approx(math.exp(-2.0))
    bare = normalize_items(parse_response(text).items)
    annotate(bare, text, None)  # no logprobs: no confidence
    assert bare[0].confidence is None and bare[0].box_confidence is None


def test_token_offsets_are_where_each_token_starts_in_the_decoded_text():
    pieces = {1: "ab", 2: "c", 3: "de"}

    class Chars:  # a tokenizer whose tokens are 1- or 2-character pieces
        def decode(self, ids, skip_special_tokens=True):
            return "".join(pieces[i] for i in ids)

    assert token_offsets(Chars(), [1, 2, 3, 2]) == [0, 2, 3, 5]


def test_coverage_accuracy_table_by_hand():
    """Four groups (localized, accurate, judgment confidence): t = 0 grades the three matched ones (2 of 3 right,
    coverage 3/4); t = 0.5 the two above it (1 of 2); t = 0.61 one (right); t = 0.95 none (accuracy null)."""
    groups = [SimpleNamespace(localized=loc, accurate=acc, confidence=c)
              for loc, acc, c in ((True, True, 0.9), (True, False, 0.6), (True, True, 0.3), (False, False, None))]
    rows = {r["threshold"]: (r["coverage"], r["accuracy"]) for r in coverage_table(groups)["rows"]}
    assert rows[0.0] == (0.75, pytest.approx(2 / 3, abs=1e-6)) and rows[0.5] == (0.5, 0.5)
    assert rows[0.61] == (0.25, 1.0) and rows[0.95] == (0.0, None) and len(rows) == 101
    assert coverage_table(groups[3:])["undefined"] == "no confidences: every group goes to review"


def test_a_reply_travels_to_another_process_whole():
    """Three-turn conversations carry earlier replies to the data-parallel ranks' processes (pickled): a Reply that
    could not be unpickled ended such a rank, and the run."""
    import pickle

    from gbtrain.inference.logprobs import Reply

    back = pickle.loads(pickle.dumps(Reply('[{"correctness": true}]', [[0, -0.5], [2, -0.25]])))
    assert isinstance(back, Reply) and back == '[{"correctness": true}]' and back.logprobs == [[0, -0.5], [2, -0.25]]


def test_the_token_index_takes_the_same_tokens_as_a_scan_of_every_token():
    """TokenIndex (a binary search per span) against the definition read token by token, on random replies with
    zero-width tokens, spans past the end and empty spans."""
    import random

    def scan(logprobs, text_len, span):
        a, b = span
        chosen = [lp for k, (off, lp) in enumerate(logprobs)
                  if off < b and (logprobs[k + 1][0] if k + 1 < len(logprobs) else text_len) > a and off < text_len]
        return None if b <= a or not chosen else min(1.0, math.exp(sum(chosen) / len(chosen)))

    rng = random.Random(0)
    for _ in range(2000):
        n = rng.randint(1, 12)
        offsets = sorted(rng.randint(0, 30) for _ in range(n))
        logprobs = [[off, -rng.random() * 3] for off in offsets]
        text_len = rng.randint(max(offsets), 35)
        index = TokenIndex(logprobs, text_len)
        for _ in range(5):
            a = rng.randint(0, 36)
            span = (a, a + rng.randint(-2, 10))
            got, want = index.confidence(span), scan(logprobs, text_len, span)
            assert (got is None) == (want is None) and (got is None or got == pytest.approx(want)), (logprobs, span)


def test_a_reply_of_thousands_of_items_is_annotated():
    """8,000 items of one-character tokens each, every item its own confidences (a scan of every token per item
    took 40 s for 1,000 items; the bad-input corpus runs such a reply under a time limit)."""
    item = '{"bbox_2d": [1, 2, 3, 4], "text": "7", "answer": "7", "correctness": true}'
    text = "[" + ", ".join([item] * 8000) + "]"
    items = [PredictedItem(i, [[1, 2, 3, 4]], "7", "7", True, {}) for i in range(8000)]
    annotate(items, text, [[i, -0.1 * (i % 7 == 0)] for i in range(len(text))])
    assert all(0 < it.confidence <= 1 and 0 < it.box_confidence <= 1 for it in items)
    # "true" is four one-character tokens, one of which has logprob -0.1 for every item whose span holds a multiple of 7
    assert {round(it.confidence, 6) for it in items} <= {1.0, round(math.exp(-0.1 / 4), 6)}

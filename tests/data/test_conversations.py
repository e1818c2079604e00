import json

import pytest

from gbtrain.coords import CONVENTIONS, from_model, model_unit_size
from gbtrain.data.annotations import load_dataset
from gbtrain.data.conversations import answer_items, build_conversation, group_answer, regions_to_grade
from gbtrain.schema import Box, Group, Mark, Record


@pytest.fixture(scope="module")
def loaded(synth_dir):
    return load_dataset(synth_dir)


@pytest.mark.parametrize("coords", CONVENTIONS)
def test_target_boxes_map_back_to_the_annotation(loaded, coords, budget):
    for level in ("L1", "L2", "L3"):
        for r in loaded[level].records[:15]:
            items = answer_items(r, coords, budget)
            assert len(items) == len(r.groups)
            ux, uy = model_unit_size(r.width, r.height, coords, budget)
            for item, g in zip(items, r.groups, strict=True):
                back = from_model(item["bbox_2d"], r.width, r.height, coords, budget)
                want = g.box.clip(r.width, r.height)
                for a, b, u in zip(back.as_list(), want.as_list(), (ux, uy, ux, uy), strict=True):
                    assert abs(a - b) <= u  # within one model unit (one resized pixel for qwen25)


def test_single_and_three_turn_agree(loaded, budget):
    r = loaded["L3"].records[0]
    one = build_conversation(r, "answer-free", False, "qwen25", budget)
    three = build_conversation(r, "answer-free", True, "qwen25", budget)
    assert [m["role"] for m in one.messages] == ["user", "assistant"]
    assert [m["role"] for m in three.messages] == ["user", "assistant"] * 3
    final = json.loads(one.messages[1]["content"])
    t1, t2, t3 = (json.loads(three.messages[i]["content"]) for i in (1, 3, 5))
    merged = [{**a, **b, **c} for a, b, c in zip(t1, t2, t3, strict=True)]
    assert merged == final
    assert one.sample_id.endswith("-af-t1") and three.sample_id.endswith("-af-t3")


def test_every_target_names_its_question_as_the_key_and_references_do(loaded, budget):
    """Each item of a target, single-turn and three-turn's first turn, starts with its question id: the group id the
    references block (and an answer key) names it by, which grade_pages matches an item to its question by."""
    r = next(r for r in loaded["L3"].records if len(r.groups) > 1)
    one = build_conversation(r, "answer-based", False, "qwen25", budget)
    three = build_conversation(r, "answer-based", True, "qwen25", budget)
    for content in (one.messages[1]["content"], three.messages[1]["content"]):
        items = json.loads(content)
        assert [it["question_id"] for it in items] == [g.group_id for g in r.groups]
        assert all(next(iter(it)) == "question_id" for it in items)
    assert all(f"{g.group_id}: " in one.messages[0]["content"] for g in r.groups)  # the references block
    assert '"question_id"' in one.messages[0]["content"] and '"question_id"' in three.messages[0]["content"]


def test_answer_based_lists_references(loaded, budget):
    r = next(r for r in loaded["L1"].records if r.groups)
    conv = build_conversation(r, "answer-based", False, "qwen25", budget)
    for g in r.groups:
        assert f"{g.group_id}: " in conv.messages[0]["content"]


def test_l2_region_from_question_marks(loaded, budget):
    r = loaded["L2"].records[0]
    conv = build_conversation(r, "answer-free", False, "rel1000", budget)
    assert "region [" in conv.messages[0]["content"]
    assert regions_to_grade(r, 0.02) == [b.clip(r.width, r.height) for b in r.context_regions]


def _mark(box, mid, label="right", hand="1", std="1"):
    return Mark(points=[box[:2], box[2:]], label=label, raw_label=label, mark_id=mid, hand=hand, std=std)


def test_l2_region_derived_without_question_marks():
    r = Record("x_0", "L2", "Mathematics", "Mathematics/x.jpg", 1000, 1000,
               [_mark((100, 100, 200, 150), "1-1"), _mark((100, 300, 250, 350), "1-2")])
    (region,) = regions_to_grade(r, margin=0.02)
    assert region == Box(80, 80, 270, 370)
    with pytest.raises(ValueError, match="no question region"):
        regions_to_grade(Record("y", "L2", "M", "M/y.jpg", 10, 10, []), 0.02)


def test_group_answer_rules():
    assert group_answer(Group("1", [_mark((0, 0, 1, 1), "1", "wrong", "3", "4")])) == "4"
    assert group_answer(Group("1", [_mark((0, 0, 1, 1), "1", "right", "ok", "答案暂无")])) == "ok"
    assert group_answer(Group("1", [_mark((0, 0, 1, 1), "1", "wrong", "bad", None)])) == ""


def _without_points(record: Record) -> Record:
    """`record` graded right/wrong only, as GradingBench grades (the synthetic pages carry points)."""
    from dataclasses import replace

    return replace(record, marks=[replace(m, full_score=None, score=None, rubric=None) for m in record.marks])


def _graded_in_points(record: Record, group_id: str, full, score, rubric=None) -> Record:
    """`record` with the marks of one group graded in points (the others right/wrong only)."""
    from dataclasses import replace

    marks = [replace(m, full_score=full, score=score, rubric=rubric) if m.mark_id == group_id and not m.is_context
             else m for m in record.marks]
    return replace(record, marks=marks)


@pytest.mark.parametrize("mode", ["answer-free", "answer-based"])
def test_points_reach_the_prompt_and_the_target_only_where_annotated(loaded, budget, mode):
    plain = _without_points(next(r for r in loaded["L3"].records if len(r.groups) >= 2))
    gid = plain.groups[1].group_id
    graded = _graded_in_points(plain, gid, 4, 2.5, rubric="two steps, 2 points each")
    before, after = (build_conversation(r, mode, False, "qwen25", budget) for r in (plain, graded))
    items_before, items_after = (json.loads(c.messages[1]["content"]) for c in (before, after))
    assert [{k: v for k, v in i.items() if k != "score"} for i in items_after] == items_before
    assert [i.get("score") for i in items_after] == [2.5 if g.group_id == gid else None for g in plain.groups]
    prompt = after.messages[0]["content"]
    assert f"Full scores:\n{gid}: 4 points (rubric: two steps, 2 points each)\n" in prompt
    assert '"correctness": true, "score": 1}]' in prompt
    assert "score" not in before.messages[0]["content"] and "score" not in before.messages[1]["content"]
    # the three-turn comparison turn carries the points; its merge equals the one-turn target
    three = build_conversation(graded, mode, True, "qwen25", budget)
    assert "Full scores:" in three.messages[4]["content"] and "Full scores:" not in three.messages[0]["content"]
    t1, t2, t3 = (json.loads(three.messages[i]["content"]) for i in (1, 3, 5))
    assert [{**a, **b, **c} for a, b, c in zip(t1, t2, t3, strict=True)] == items_after


def test_a_right_wrong_only_build_is_unchanged_by_points(loaded, budget):
    """Every synthetic record, its points taken away, gives the prompts of the right/wrong-only wording."""
    from gbtrain import prompts
    from gbtrain.data.conversations import prompt_inputs

    for level in ("L1", "L2", "L3"):
        for r in map(_without_points, loaded[level].records[:10]):
            for mode in ("answer-free", "answer-based"):
                conv = build_conversation(r, mode, False, "qwen25", budget)
                regions, refs = prompt_inputs(r, mode, "qwen25", budget, 0.02)
                assert conv.messages[0]["content"] == prompts.single_turn(level, mode, "qwen25", regions, refs)
                assert all("score" not in i for i in json.loads(conv.messages[1]["content"]))

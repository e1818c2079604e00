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

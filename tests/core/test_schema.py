import math

import pytest

from gbtrain.schema import Box, Group, Mark, Record


def mark(box, label="right", mid="1", hand="", std=None, **kw):
    x1, y1, x2, y2 = box
    return Mark(points=[(x1, y1), (x2, y2)], label=label, raw_label=label, mark_id=mid, hand=hand, std=std, **kw)


def test_box_geometry():
    b = Box(0, 0, 4, 3)
    assert b.center == (2, 1.5) and b.diagonal == 5 and b.area == 12
    assert b.iou(Box(2, 0, 6, 3)) == pytest.approx(6 / 18)
    assert b.iou(Box(5, 5, 6, 6)) == 0
    assert Box(-5, -5, 20, 2).clip(10, 10) == Box(0, 0, 10, 2)
    assert Box.enclosing([(3, 4), (1, 9), (2, 2)]) == Box(1, 2, 3, 9)
    assert not Box(0, math.nan, 1, 1).is_finite()


def test_group_reading_order_and_label():
    # Two marks of one group given bottom-first: text and references are joined top-down.
    g = Group("3-1", [mark((0, 50, 10, 60), "wrong", "3-1", "b", "B"), mark((0, 0, 10, 10), "right", "3-1", "a", "A")])
    assert g.hand == "ab"
    assert g.std == "A；B"
    assert g.label == "wrong" and not g.is_right
    assert g.box == Box(0, 0, 10, 60)


def test_group_without_reference():
    g = Group("1", [mark((0, 0, 1, 1), std="答案暂无"), mark((0, 2, 1, 3), std=None)])
    assert g.std is None


def test_record_groups_skip_context_and_sort():
    r = Record("r", "L2", "Mathematics", "Mathematics/p.jpg", 100, 100, [
        mark((0, 50, 10, 60), mid="2"), mark((0, 0, 10, 10), mid="1"),
        mark((0, 0, 100, 70), label="question", mid="1"),
    ])
    assert [g.group_id for g in r.groups] == ["1", "2"]
    assert r.context_regions == [Box(0, 0, 100, 70)]
    assert r.page_id == "p"

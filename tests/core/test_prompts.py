import pytest

from gbtrain import prompts
from gbtrain.coords import CONVENTIONS


@pytest.mark.parametrize("coords", CONVENTIONS)
def test_every_convention_has_a_box_rule(coords):
    text = prompts.single_turn("L3", "answer-free", coords)
    assert "Boxes are" in text


def test_modes_differ_in_references():
    af = prompts.single_turn("L1", "answer-free", "qwen25")
    ab = prompts.single_turn("L1", "answer-based", "qwen25", references=[("3-1", "85"), ("3-2", None)])
    assert "Reference answers" not in af and "Solve each question yourself" in af
    assert "3-1: 85" in ab and "3-2: (no reference answer)" in ab


def test_l2_names_the_region_only_there():
    l2 = prompts.single_turn("L2", "answer-free", "rel1000", regions=[[10, 20, 300, 400]])
    assert "[10, 20, 300, 400]" in l2 and "ignore everything else" in l2
    assert "region" not in prompts.single_turn("L3", "answer-free", "rel1000")
    assert "[1, 2, 3, 4]" in prompts.turn_locate("L2", "qwen25", [[1, 2, 3, 4]])


def test_bad_mode():
    with pytest.raises(ValueError, match="unknown mode"):
        prompts.single_turn("L1", "graded", "qwen25")


def test_fingerprint_is_stable_and_short():
    assert prompts.prompt_fingerprint() == prompts.prompt_fingerprint()
    assert len(prompts.prompt_fingerprint()) == 12

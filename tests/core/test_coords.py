import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gbtrain.coords import (
    CONVENTIONS,
    PixelBudget,
    convention_for_model,
    from_model,
    model_unit_size,
    smart_resize,
    to_model,
)
from gbtrain.families import FAMILIES
from gbtrain.schema import Box


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_smart_resize_matches_the_real_processor(family):
    """Our rule must give exactly the grid the family's image processor produces (14 px patches for Qwen2.5-VL,
    16 px for Qwen3-VL, merged 2x2)."""
    import numpy as np
    from PIL import Image
    from transformers import Qwen2VLImageProcessor

    patch = family.patch_factor // 2
    rng = random.Random(0)
    for min_px, max_px in [(56 * 56, 28 * 28 * 64), (224 * 224, 2200 * 28 * 28), (28 * 28 * 4, 28 * 28 * 256)]:
        budget = PixelBudget(min_px, max_px, family.patch_factor)
        proc = Qwen2VLImageProcessor(size=budget.processor_size(), patch_size=patch, merge_size=2)
        for _ in range(25):
            w, h = rng.randint(20, 2600), rng.randint(20, 2600)
            img = Image.fromarray(np.zeros((h, w, 3), dtype=np.uint8))
            _, gh, gw = proc(images=[img], return_tensors="pt")["image_grid_thw"][0].tolist()
            rw, rh = budget.resized(w, h)
            assert (gh * patch, gw * patch) == (rh, rw), (w, h, min_px, max_px)
            assert budget.image_tokens(w, h) == gh * gw // 4


def test_smart_resize_limits():
    h, w = smart_resize(4000, 3000, 28, 224 * 224, 1000 * 28 * 28)
    assert h % 28 == 0 and w % 28 == 0 and h * w <= 1000 * 28 * 28
    h, w = smart_resize(30, 40, 28, 224 * 224, 10**7)
    assert h * w >= 224 * 224
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 3000)


def test_known_values():
    b = Box(100, 50, 300, 150)
    assert to_model(b, 1000, 500, "abs") == [100, 50, 300, 150]
    assert to_model(b, 1000, 500, "rel1000") == [100, 100, 300, 300]
    assert to_model(b, 1000, 500, "rel1000-yxyx") == [100, 100, 300, 300]  # square here: see the test below
    assert to_model(b, 1000, 500, "rel1") == [0.1, 0.1, 0.3, 0.3]
    assert to_model(b, 1000, 500, "rel1-cxcywh") == [0.2, 0.2, 0.2, 0.2]
    budget = PixelBudget(28 * 28, 28 * 28 * 100)
    rw, rh = budget.resized(1000, 500)
    assert to_model(b, 1000, 500, "qwen25", budget) == [round(100 * rw / 1000), round(50 * rh / 500),
                                                        round(300 * rw / 1000), round(150 * rh / 500)]


def test_yxyx_swaps_axes():
    assert to_model(Box(10, 200, 30, 400), 1000, 1000, "rel1000-yxyx") == [200, 10, 400, 30]
    assert from_model([200, 10, 400, 30], 1000, 1000, "rel1000-yxyx") == Box(10, 200, 30, 400)


def test_unknown_convention():
    with pytest.raises(ValueError, match="unknown coordinate convention 'xyxy'"):
        to_model(Box(0, 0, 1, 1), 10, 10, "xyxy")


@settings(max_examples=300, deadline=None)
@given(
    conv=st.sampled_from(CONVENTIONS),
    w=st.integers(50, 4000), h=st.integers(50, 4000),
    fx=st.tuples(st.floats(0, 1), st.floats(0, 1)), fy=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_round_trip_within_one_model_unit(conv, w, h, fx, fy):
    if max(w, h) / min(w, h) > 200:
        return
    budget = PixelBudget(56 * 56, 1280 * 28 * 28)
    box = Box(min(fx) * w, min(fy) * h, max(fx) * w, max(fy) * h)
    back = from_model(to_model(box, w, h, conv, budget), w, h, conv, budget)
    ux, uy = model_unit_size(w, h, conv, budget)
    for got, want, unit in zip(back.as_list(), box.as_list(), (ux, uy, ux, uy), strict=True):
        assert abs(got - want) <= unit * 1.01 + 1e-9


@settings(max_examples=200, deadline=None)
@given(conv=st.sampled_from(CONVENTIONS), w=st.integers(50, 3000), h=st.integers(50, 3000), data=st.data())
def test_model_boxes_are_stable(conv, w, h, data):
    """A box already on the model's grid converts back to exactly the same numbers."""
    if max(w, h) / min(w, h) > 200:
        return
    vals = to_model(Box(w * 0.1, h * 0.2, w * 0.7, h * 0.9), w, h, conv)
    assert to_model(from_model(vals, w, h, conv), w, h, conv) == vals


def test_convention_for_model():
    assert convention_for_model("qwen2_5_vl") == "qwen25"
    assert convention_for_model("qwen3_vl") == convention_for_model("qwen3_vl_moe") == "rel1000"
    assert convention_for_model("Qwen/Qwen3-VL-8B-Instruct") == "rel1000"
    assert convention_for_model("gemini-2.5-pro") == "rel1000-yxyx"
    assert convention_for_model("gpt-4o") == "rel1-cxcywh"
    assert convention_for_model("llava") is None


def test_budget_validation():
    with pytest.raises(ValueError):
        PixelBudget(100, 10)
    with pytest.raises(ValueError, match=r"vision\.factor=30"):
        PixelBudget(factor=30)


def test_budget_refuses_another_familys_token_size():
    from gbtrain.families import QWEN3_VL

    PixelBudget(factor=32).check_family(QWEN3_VL, "m")
    with pytest.raises(ValueError, match=r"set vision\.factor=32"):
        PixelBudget().check_family(QWEN3_VL, "Qwen/Qwen3-VL-8B-Instruct")


def test_a_checkpoint_record_keeps_the_factor_and_old_records_read_as_qwen25(tmp_path):
    import json

    from gbtrain.train.checkpoints import (
        CHECKPOINT_RECORD,
        CheckpointRecord,
        read_checkpoint_record,
        write_checkpoint_record,
    )

    record = CheckpointRecord("rel1000", PixelBudget(3136, 50176, 32))
    write_checkpoint_record(tmp_path, record)
    assert read_checkpoint_record(tmp_path) == record
    old = {"coords": "qwen25", "min_pixels": 3136, "max_pixels": 50176}
    (tmp_path / CHECKPOINT_RECORD).write_text(json.dumps(old))
    assert read_checkpoint_record(tmp_path).budget == PixelBudget(3136, 50176, 28)

"""The vision warm-up: its crops and its per-token targets in the merger's order."""

from __future__ import annotations

import random

import numpy as np
import pytest

from gbtrain.data.synth.generate import CHARSETS
from gbtrain.families import FAMILIES, QWEN2_5_VL
from gbtrain.miniature.warmup import (
    PROFILE_GEOMETRY,
    WarmupOptions,
    _token_classes,
    _token_places,
    handwriting_crop,
    warmup_for_profile,
)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_crops_hold_their_text_inside_the_image(family):
    opts = WarmupOptions(charset="AB7", max_chars=2)
    rng = random.Random(0)
    width, height = opts.crop_px(family.patch_factor)
    assert (width, height) == (4 * family.patch_factor, 2 * family.patch_factor)  # 4x2 image tokens
    for _ in range(20):
        crop = handwriting_crop(rng, opts, family.patch_factor)
        assert crop.image.size == (width, height)
        assert 1 <= len(crop.text) <= 2 and set(crop.text) <= set("AB7")
        assert 0 <= crop.box.x1 < crop.box.x2 <= width and 0 <= crop.box.y1 < crop.box.y2 <= height
        ys, xs = np.nonzero(crop.ink)
        assert (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1) == tuple(crop.box.as_list())
        # each glyph's ink is labelled with its character, the ink of every character is there, and nothing else
        drawn = {"AB7"[c - 1] for c in np.unique(crop.classes[crop.ink]).tolist()}
        assert drawn == set(crop.text)
        # the ink is drawn where the label map says: darker than the paper around it
        pixels = np.asarray(crop.image.convert("L"), dtype=float)
        assert pixels[crop.ink].mean() < pixels[~crop.ink].mean() - 60


def test_token_targets_follow_the_mergers_raster_order(tiny_model_dir, budget):
    """A character's ink in one 28x28 cell labels the token the vision tower emits for that cell, and that token's
    place is the cell's centre: checked against the real processor and tower by painting one cell and seeing which
    output moves."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from gbtrain.coords import PixelBudget
    from gbtrain.train.modeling import load_processor

    side = QWEN2_5_VL.patch_factor
    w, h, row, col = 5 * side, 3 * side, 1, 3
    classes = np.zeros((h, w), np.uint8)
    classes[row * side + 4:row * side + 24, col * side + 4:col * side + 24] = 3
    classes[0:2, 0:2] = 5  # a trace of ink (4 px) is paper
    marked = _token_classes(classes, n_classes=6, side=side)
    assert marked.tolist() == [3 if i == row * 5 + col else 0 for i in range(15)]
    ink = classes == 3
    places = _token_places(3, 5)
    assert places[row * 5 + col] == pytest.approx([(row + 0.5) / 3, (col + 0.5) / 5])

    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    processor = load_processor(str(tiny_model_dir), PixelBudget(3136, w * h))
    blank = np.full((h, w, 3), 255, np.uint8)
    painted = blank.copy()
    painted[ink] = 0
    enc = processor.image_processor(images=[Image.fromarray(blank), Image.fromarray(painted)], return_tensors="pt")
    assert enc["image_grid_thw"].tolist() == [[1, 6, 10]] * 2
    with torch.no_grad():
        # the last block attends over the whole image, so look at the first block's output through the merger
        visual = model.model.visual
        patches = visual.patch_embed(enc["pixel_values"])
        tokens = visual.merger(patches).reshape(2, 15, -1)
    moved = (tokens[0] - tokens[1]).norm(dim=-1)
    assert int(moved.argmax()) == int(np.argmax(marked))


def test_each_profile_warms_up_on_its_own_characters_and_sizes():
    """Every reading profile has a warm-up; the marks profile's crops are taller and its glyphs span the larger sizes
    its question crops show, so that a large single mark fits inside a crop."""
    assert PROFILE_GEOMETRY.keys() == CHARSETS.keys()
    for profile, charset in CHARSETS.items():
        opts = warmup_for_profile(profile, steps=7, seed=3)
        assert (opts.charset, opts.steps, opts.seed) == (charset, 7, 3)
    marks = warmup_for_profile("marks", steps=1)
    assert marks.crop_tokens == (4, 3) and marks.glyph_px == (20, 72)
    rng = random.Random(1)
    crops = [handwriting_crop(rng, marks, QWEN2_5_VL.patch_factor) for _ in range(30)]
    heights = [c.box.y2 - c.box.y1 for c in crops]
    assert max(heights) > 40 and all(c.image.size == (112, 84) for c in crops)
    with pytest.raises(ValueError, match="no handwriting profile 'gradingbench'"):
        warmup_for_profile("gradingbench", steps=1)


def test_options_are_checked():
    with pytest.raises(ValueError, match="at least one image token"):
        WarmupOptions(crop_tokens=(4, 0))
    with pytest.raises(ValueError, match="charset"):
        WarmupOptions(charset="")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_make_tiny_model_warms_the_vision_tower_only_and_records_it(tmp_path, family):
    """The path `make_tiny_model.py --vision-warmup-steps` runs, for each family: the tower and merger change, the
    language model does not, the folder stays loadable, and gbtrain_warmup.json says how it was made (crops of the
    family's own token side) and how well it scored."""
    import json

    from safetensors.torch import load_file

    from gbtrain.miniature.tiny_model import make_tiny_model

    def weights(folder):
        return {k: v for f in sorted(folder.glob("model-*.safetensors")) for k, v in load_file(f).items()}

    plain = weights(make_tiny_model(tmp_path / "plain", family=family.name))
    opts = WarmupOptions(steps=3, batch=2, position_from=0.0)
    warmed_dir = make_tiny_model(tmp_path / "warmed", vision_warmup=opts, family=family.name)
    warmed = weights(warmed_dir)
    assert plain.keys() == warmed.keys()
    changed = {k for k in plain if not (plain[k] == warmed[k]).all()}
    tower = "model.visual." if family.name == "qwen3_vl" else "visual."  # the hub's tensor names
    assert changed and all(k.startswith(tower) for k in changed)
    assert any(k.startswith(tower + "merger.") for k in changed) and any(".blocks." in k for k in changed)
    # Qwen3-VL's DeepStack features feed the language model too: their mergers are warmed with the rest
    assert any(k.startswith(tower + "deepstack_merger_list.") for k in changed) == (family.name == "qwen3_vl")
    record = json.loads((warmed_dir / "gbtrain_warmup.json").read_text())
    assert record["options"]["steps"] == 3 and record["options"]["charset"] == opts.charset
    assert record["crop_px"] == [4 * family.patch_factor, 2 * family.patch_factor]
    assert set(record["held_out"]) == {"chars_exact", "ink_token_chars", "ink_token_accuracy", "place_mean_abs_error"}
    assert record["held_out"]["place_mean_abs_error"] is not None

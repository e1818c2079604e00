import math

import pytest

from gbtrain.evaluation.probes import image_reliance


def test_image_reliance_compares_real_and_blank_images(tiny_model_dir, sft_dir):
    out = image_reliance(tiny_model_dir, sft_dir, split="train", limit=3)
    assert out["samples"] == 3 and out["tokens"] > 0
    assert math.isfinite(out["loss_real_images"]) and math.isfinite(out["loss_blank_images"])
    # the random tiny model reads its image tokens, so white pages change its predictions
    assert out["loss_real_images"] != out["loss_blank_images"]
    assert out["gap"] == pytest.approx(out["loss_blank_images"] - out["loss_real_images"], abs=2e-4)


def test_image_reliance_names_a_missing_split(tiny_model_dir, sft_dir):
    with pytest.raises(ValueError, match="has no 'dev' split"):
        image_reliance(tiny_model_dir, sft_dir, split="dev", limit=3)

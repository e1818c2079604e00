"""The model-family seam: which family a model is, and what the rest of gbtrain reads from it."""

from __future__ import annotations

import json

import pytest

from gbtrain.families import FAMILIES, QWEN2_5_VL, QWEN3_VL, family_named, family_of_config, family_of_model


def test_every_model_type_names_one_family():
    types = [t for f in FAMILIES for t in f.model_types]
    assert len(types) == len(set(types))
    assert family_named("qwen2_vl") is QWEN2_5_VL and family_named("qwen3_vl_moe") is QWEN3_VL
    assert family_named("qwen3_vl") is QWEN3_VL
    with pytest.raises(ValueError, match="'llava' is not supported"):
        family_named("llava")


def test_family_of_a_folder_comes_from_its_config(tiny_model_dir, tiny_qwen3vl_dir, tmp_path):
    assert family_of_model(tiny_model_dir) is QWEN2_5_VL
    assert family_of_model(tiny_qwen3vl_dir) is QWEN3_VL
    other = tmp_path / "llava"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "llava"}))
    assert family_of_model(other) is None
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{")
    with pytest.raises(ValueError, match=r"broken/config\.json: not a model config"):
        family_of_model(broken)


@pytest.mark.parametrize(("name", "family"), [
    ("Qwen/Qwen2.5-VL-7B-Instruct", QWEN2_5_VL), ("Qwen/Qwen2-VL-2B-Instruct", QWEN2_5_VL),
    ("Qwen/Qwen3-VL-8B-Instruct", QWEN3_VL), ("Qwen/Qwen3-VL-30B-A3B-Instruct", QWEN3_VL),
    ("Qwen/Qwen3-32B", None), ("gpt-4o", None)])
def test_family_of_a_hub_id_comes_from_its_name(name, family):
    assert family_of_model(name) is family


def test_family_of_a_loaded_config(tiny_qwen3vl_dir):
    from transformers import AutoConfig

    assert family_of_config(AutoConfig.from_pretrained(tiny_qwen3vl_dir)) is QWEN3_VL


def test_the_builder_counts_tokens_in_the_models_own_size(synth_dir, tiny_qwen3vl_dir, tmp_path):
    """A Qwen3-VL build must say vision.factor=32: with Qwen2.5-VL's 28 its image token counts (and qwen25 boxes)
    would be those of another model."""
    from gbtrain.coords import PixelBudget
    from gbtrain.data.build_config import BuildConfig
    from gbtrain.data.sft_dataset import build_sft_dataset, dataset_pixel_budget

    cfg = BuildConfig(data=str(synth_dir), out=str(tmp_path / "sft"), target_count=20, tokenizer=str(tiny_qwen3vl_dir),
                      vision=PixelBudget(3136, 200_704), test_share=0.0, validation_share=0.1)
    with pytest.raises(ValueError, match=r"set vision\.factor=32"):
        build_sft_dataset(cfg, progress=False)
    cfg.vision = PixelBudget(3136, 200_704, 32)
    build_sft_dataset(cfg, progress=False)
    assert dataset_pixel_budget(tmp_path / "sft") == cfg.vision


def test_a_processor_of_another_token_size_is_refused(tiny_qwen3vl_dir):
    from gbtrain.coords import PixelBudget
    from gbtrain.train.modeling import load_processor

    with pytest.raises(ValueError, match=r"32 px tokens, but vision\.factor=28"):
        load_processor(str(tiny_qwen3vl_dir), PixelBudget())
    processor = load_processor(str(tiny_qwen3vl_dir), PixelBudget(3136, 50176, 32))
    assert processor.image_processor.size.longest_edge == 50176

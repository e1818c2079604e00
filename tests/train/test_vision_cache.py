"""The frozen-vision feature cache: the same loss and gradients as encoding every time, each image encoded once."""

import pytest
import torch
from conftest import budget_for
from PIL import Image, ImageDraw

from gbtrain.train.collator import GradingCollator
from gbtrain.train.config import FreezeSettings, TrainConfig
from gbtrain.train.modeling import check_options, load_processor, setup_model
from gbtrain.train.vision_cache import install_vision_cache


def frozen_vision_model(model_dir, merger_frozen: bool = True):
    cfg = TrainConfig(model=str(model_dir), dataset="d", output_dir="o", finetune="full",
                      freeze=FreezeSettings(vision_tower=True, merger=merger_frozen))
    return setup_model(cfg).train()


def page(text: str, size=(300, 200)) -> Image.Image:
    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).text((40, 60), text, fill="black")
    return image


def batch(model_dir, *images):
    samples = [{"messages": [{"role": "user", "content": "Grade the page."},
                             {"role": "assistant", "content": f'[{{"bbox_2d": [1, 2, 3, {i}], "text": "A"}}]'}],
                "images": [image]} for i, image in enumerate(images)]
    collator = GradingCollator(load_processor(model_dir, budget_for(model_dir)), 4096, packing=False)
    return collator(samples)


def loss_and_grads(model, inputs):
    model.zero_grad(set_to_none=True)
    loss = model(**inputs).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_cached_features_train_as_encoded_ones(family_model_dir):
    """Misses, hits and a batch mixing both give the loss and gradients of the plain model (Qwen3-VL's DeepStack
    features included); an image repeated within a batch is encoded once."""
    model = frozen_vision_model(family_model_dir)
    first = batch(family_model_dir, page("A B"), page("C D"))
    mixed = batch(family_model_dir, page("C D"), page("true", (200, 300)), page("true", (200, 300)))
    expected = [loss_and_grads(model, inputs) for inputs in (first, mixed)]

    cache = install_vision_cache(model, budget_mib=64)
    for inputs, (loss, grads) in [(first, expected[0]), (first, expected[0]), (mixed, expected[1])]:
        got_loss, got_grads = loss_and_grads(model, inputs)
        assert torch.allclose(got_loss, loss, atol=1e-5)
        assert got_grads.keys() == grads.keys() and grads
        assert all(torch.allclose(got_grads[n], grads[n], atol=1e-5) for n in grads)
    assert all(".visual." not in n for n in grads)  # nothing on the vision side trains
    summary = cache.summary()
    # first batch: 2 misses, then 2 hits; mixed: "C D" a hit, the tall page a miss, encoded once for both copies
    assert (summary["vision_cache_images"], summary["vision_cache_misses"], summary["vision_cache_hits"]) == (3, 3, 4)


def test_a_full_budget_encodes_again_and_stays_right(tiny_model_dir):
    model = frozen_vision_model(tiny_model_dir)
    inputs = batch(tiny_model_dir, page("A"), page("B"))
    loss, _ = loss_and_grads(model, inputs)
    cache = install_vision_cache(model, budget_mib=0)  # nothing fits: each image is encoded each time
    for _ in range(2):
        assert torch.allclose(loss_and_grads(model, inputs)[0], loss, atol=1e-5)
    assert cache.summary() == {"vision_cache_images": 0, "vision_cache_used_mib": 0.0, "vision_cache_hits": 0,
                               "vision_cache_misses": 4}


def test_a_trainable_vision_side_is_refused(tiny_model_dir):
    with pytest.raises(ValueError, match=r"needs freeze.vision_tower=true and freeze.merger=true .* vision parameters "
                                         r"train, e.g. .*merger"):
        install_vision_cache(frozen_vision_model(tiny_model_dir, merger_frozen=False), budget_mib=64)
    with pytest.raises(ValueError, match="vision_cache_mib=64 reuses features of a frozen vision side"):
        check_options(TrainConfig(model=str(tiny_model_dir), dataset="d", output_dir="o", vision_cache_mib=64))


def test_zero3_is_refused(tiny_model_dir):
    """Under ZeRO-3 every rank must run the tower's gathers in every step, which a cache hit would skip."""
    from transformers.integrations import HfDeepSpeedConfig
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    model = frozen_vision_model(tiny_model_dir)
    zero3 = HfDeepSpeedConfig({"zero_optimization": {"stage": 3}, "train_batch_size": 1})  # in force while it lives
    try:
        with pytest.raises(ValueError, match="vision_cache_mib=64 under ZeRO-3"):
            install_vision_cache(model, budget_mib=64)
    finally:
        unset_hf_deepspeed_config()
    assert zero3.is_zero3()

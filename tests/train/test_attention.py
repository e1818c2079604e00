"""Packed-row attention paths: flex with a document mask, and flash-attn varlen arguments from the collator."""

import pytest
import torch
from PIL import Image

from gbtrain.train.attention import PACKED_FLEX, SEQ_LENS_KEY, precompute_varlen_kwargs
from gbtrain.train.collator import IGNORE_INDEX, GradingCollator, RopeIndex, pop_real_tokens
from gbtrain.train.config import TrainConfig
from gbtrain.train.modeling import load_model, load_processor


def sample(text: str, w: int, h: int, shade: int) -> dict:
    return {"messages": [{"role": "user", "content": "Grade the page."},
                         {"role": "assistant", "content": f'[{{"bbox_2d": [10, 20, 300, 95], "text": "{text}"}}]'}],
            "images": [Image.new("RGB", (w, h), (shade, shade, shade))]}


EXAMPLES = [sample("12", 300, 200, 250), sample("teaches", 420, 280, 120), sample("太平", 200, 500, 30)]


def load(tiny_model_dir, attn: str):
    cfg = TrainConfig(model=str(tiny_model_dir), dataset="d", output_dir="o", attn_implementation=attn)
    return load_model(cfg).eval()


@pytest.fixture(scope="module")
def processor(tiny_model_dir, budget):
    return load_processor(tiny_model_dir, budget)


def one_by_one(model, processor, examples):
    """Per-sample logits and the token-weighted mean loss, each sample alone in a padding-free batch."""
    single = GradingCollator(processor, 4096)
    logits, total, count = [], 0.0, 0
    for ex in examples:
        b = single([ex])
        k = int((b["labels"][:, 1:] != IGNORE_INDEX).sum())
        out = model(**b)
        logits.append(out.logits[0])
        total, count = total + out.loss.item() * k, count + k
    return torch.cat(logits), total / count


def test_flex_packed_equals_one_by_one_and_skips_blocks(tiny_model_dir, processor, monkeypatch):
    """Forward only: PyTorch's flex attention has no backward on CPU (the GPU benchmark runs the backward). The
    samples alone go through sdpa, the reference kernel (the same weights): flex compiles one kernel per shape, so
    running them through flex too would add three compilations (about 50 s on CI's CPUs) and prove less."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    model = load(tiny_model_dir, "flex_attention")
    assert model.config.get_text_config()._attn_implementation == PACKED_FLEX
    assert model.config.vision_config._attn_implementation == "sdpa"
    masks = []
    kernel = ALL_ATTENTION_FUNCTIONS[PACKED_FLEX]

    def recording(module, q, k, v, attention_mask, **kw):
        masks.append(attention_mask)
        return kernel(module, q, k, v, attention_mask, **kw)

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, PACKED_FLEX, recording)
    packed = GradingCollator(processor, 4096, packing=True, rope_index=RopeIndex(model.config))(EXAMPLES)
    pop_real_tokens(packed)
    with torch.no_grad():
        out = model(**packed)
        masks_of_pack = list(masks)
        alone, loss = one_by_one(load(tiny_model_dir, "sdpa"), processor, EXAMPLES)
    assert torch.allclose(out.logits[0], alone, atol=2e-5)
    assert out.loss.item() == pytest.approx(loss, rel=1e-5)
    # one BlockMask per forward, shared by the layers; with 128-token blocks, the blocks between the three
    # samples are skipped (dense causal would compute every block at or below the diagonal)
    mask = masks_of_pack[0]
    layers = model.config.get_text_config().num_hidden_layers
    assert all(m is mask for m in masks_of_pack) and len(masks_of_pack) == layers
    n_blocks = -(-packed["input_ids"].shape[1] // 128)
    computed = int(mask.kv_num_blocks.sum() + (mask.full_kv_num_blocks.sum() if mask.full_kv_num_blocks is not None
                                                else 0))
    assert computed < n_blocks * (n_blocks + 1) // 2


def test_varlen_arguments_come_from_the_collator(tiny_model_dir, processor, monkeypatch):
    """The flash-attn varlen arguments every layer receives equal what transformers would derive from the
    position ids, made once per forward from the collator's lengths; the vision tower does not see them."""
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    model = load(tiny_model_dir, "sdpa")
    precompute_varlen_kwargs(model)
    seen = []
    kernel = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def recording(module, q, k, v, attention_mask, **kw):
        seen.append((type(module).__name__, {key: kw.get(key) for key in ("cu_seq_lens_q", "max_length_q")},
                     SEQ_LENS_KEY in kw))
        return kernel(module, q, k, v, attention_mask, **kw)

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, "sdpa", recording)
    rope = RopeIndex(model.config)
    packed = GradingCollator(processor, 4096, packing=True, rope_index=rope, seq_lens=True)(EXAMPLES)
    plain = GradingCollator(processor, 4096, packing=True, rope_index=rope)(EXAMPLES)
    pop_real_tokens(packed), pop_real_tokens(plain)
    assert packed[SEQ_LENS_KEY] == [len(GradingCollator(processor, 4096).encode_all([e])[0]) for e in EXAMPLES]
    with torch.no_grad():
        with_lengths = model(**packed).logits
        seen_with = list(seen)
        without = model(**plain).logits
    assert torch.equal(with_lengths, without)
    (cu, _), (longest, _) = prepare_fa_kwargs_from_position_ids(packed["position_ids"][0])
    text = [kw for name, kw, _ in seen_with if "Vision" not in name]
    vision = [(kw, leaked) for name, kw, leaked in seen_with if "Vision" in name]
    assert len(text) == model.config.get_text_config().num_hidden_layers
    for kw in text:
        assert torch.equal(kw["cu_seq_lens_q"], cu) and kw["max_length_q"] == int(longest)
    assert vision and all(kw["cu_seq_lens_q"] is None and not leaked for kw, leaked in vision)

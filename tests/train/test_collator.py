import pytest
import torch
from conftest import FAMILY_MODELS, budget_for
from PIL import Image

from gbtrain.train.collator import (
    IGNORE_INDEX,
    REAL_TOKENS_KEY,
    ConversationEncoder,
    GradingCollator,
    RopeIndex,
    plan_packs,
)


@pytest.fixture(scope="module", params=list(FAMILY_MODELS))
def model_dir(request):
    """Every test here runs for each model family's tiny model."""
    return request.getfixturevalue(FAMILY_MODELS[request.param])


@pytest.fixture(scope="module")
def processor(model_dir):
    from gbtrain.train.modeling import load_processor

    return load_processor(model_dir, budget_for(model_dir))


@pytest.fixture(scope="module")
def model64(model_dir):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float64).train()


def image(w=300, h=200, shade=200):
    return Image.new("RGB", (w, h), (shade, shade, shade))


SINGLE = [{"role": "user", "content": "Grade the page."},
          {"role": "assistant", "content": '[{"bbox_2d": [1, 2, 3, 4], "text": "高兴", "correctness": true}]'}]
THREE = [{"role": "user", "content": "Locate."}, {"role": "assistant", "content": '[{"text": "4"}]'},
         {"role": "user", "content": "Solve."}, {"role": "assistant", "content": '[{"answer": "5"}]'},
         {"role": "user", "content": "Compare."}, {"role": "assistant", "content": '[{"correctness": false}]'}]


def label_spans(tokenizer, ids, labels):
    spans, cur = [], []
    for t, lab in zip(ids.tolist(), labels.tolist(), strict=True):
        if lab != IGNORE_INDEX:
            assert lab == t
            cur.append(t)
        elif cur:
            spans.append(tokenizer.decode(cur))
            cur = []
    if cur:
        spans.append(tokenizer.decode(cur))
    return spans


@pytest.mark.parametrize("messages", [SINGLE, THREE], ids=["single", "three-turn"])
def test_assistant_only_labels(processor, messages):
    s = ConversationEncoder(processor).encode(messages, [image()])
    tok = processor.tokenizer
    expected = [m["content"] + "<|im_end|>" for m in messages if m["role"] == "assistant"]
    assert label_spans(tok, s.input_ids, s.labels) == expected
    # every image token, the system and user turns and each assistant header are masked
    image_id = tok.convert_tokens_to_ids("<|image_pad|>")
    assert (s.labels[s.input_ids == image_id] == IGNORE_INDEX).all()
    header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    ids = s.input_ids.tolist()
    starts = [i for i in range(len(ids)) if ids[i:i + len(header)] == header]
    assert len(starts) == len(expected)
    for i in starts:
        assert (s.labels[i:i + len(header)] == IGNORE_INDEX).all()
    # the newline after the last <|im_end|> is not trained
    assert s.labels[-1] == IGNORE_INDEX and tok.decode(ids[-1:]) == "\n"


def test_padded_batch(processor):
    col = GradingCollator(processor, max_length=4096)
    batch = col([{"messages": SINGLE, "images": [image()]}, {"messages": THREE, "images": [image(500, 300)]}])
    n = batch["attention_mask"].sum(1)
    assert batch["input_ids"].shape[0] == 2 and int(n.max()) == batch["input_ids"].shape[1]
    assert (batch["labels"][batch["attention_mask"] == 0] == IGNORE_INDEX).all()
    grid = batch["image_grid_thw"]
    assert grid.shape == (2, 3) and batch["pixel_values"].shape[0] == int(grid.prod(1).sum())


def test_packed_equals_one_by_one(processor, model64):
    """Loss and gradients of one packed row equal those of the samples run one by one. Model in float64;
    transformers computes the loss in float32, hence 1e-6 relative on the loss; 1e-6 absolute on every
    gradient entry (gradients here are of order 0.1-1)."""
    examples = [{"messages": SINGLE, "images": [image(300, 200, 250)]},
                {"messages": THREE, "images": [image(420, 280, 120)]},
                {"messages": SINGLE, "images": [image(200, 500, 30)]}]
    packed = GradingCollator(processor, 4096, packing=True, rope_index=RopeIndex(model64.config))(examples)
    assert packed.pop(REAL_TOKENS_KEY) == packed["input_ids"].shape[1]
    assert packed["input_ids"].shape[0] == 1 and packed["position_ids"].shape[:2] == (4, 1)
    assert "attention_mask" not in packed
    model64.zero_grad()
    loss = model64(**packed, use_cache=False).loss
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model64.named_parameters() if p.grad is not None}
    model64.zero_grad()
    single = GradingCollator(processor, 4096)
    total, count = 0.0, 0
    for ex in examples:
        b = single([ex])
        k = int((b["labels"][:, 1:] != IGNORE_INDEX).sum())
        out = model64(**b, use_cache=False)
        (out.loss * k).backward()
        total += out.loss.item() * k
        count += k
    assert loss.item() == pytest.approx(total / count, rel=1e-6)
    assert grads.keys() == {n for n, p in model64.named_parameters() if p.grad is not None}
    for n, p in model64.named_parameters():
        if p.grad is not None:
            assert torch.allclose(grads[n], p.grad / count, atol=1e-6, rtol=0), n


def test_a_padded_pack_trains_as_the_unpadded_one(processor, model64):
    """Padding a packed row up to a fixed multiple (one compiled shape) changes no loss or gradient: the padding is
    a sample of its own, with no labels, attending to itself only. The real-token count leaves it out."""
    examples = [{"messages": SINGLE, "images": [image(300, 200, 250)]},
                {"messages": THREE, "images": [image(200, 500, 30)]}]
    rope = RopeIndex(model64.config)
    plain = GradingCollator(processor, 4096, packing=True, rope_index=rope)(examples)
    padded = GradingCollator(processor, 4096, packing=True, rope_index=rope, pad_to_multiple_of=1024)(examples)
    real = plain["input_ids"].shape[1]
    assert plain[REAL_TOKENS_KEY] == padded[REAL_TOKENS_KEY] == real
    assert padded["input_ids"].shape[1] == 1024 * -(-real // 1024) > real
    assert (padded["labels"][0, real:] == IGNORE_INDEX).all()
    assert padded["position_ids"][:, 0, real].eq(0).all()  # the padding starts a sample of its own

    def loss_and_grads(batch):
        model64.zero_grad()
        loss = model64(**{k: v for k, v in batch.items() if k != REAL_TOKENS_KEY}, use_cache=False).loss
        loss.backward()
        return loss.item(), {n: p.grad.clone() for n, p in model64.named_parameters() if p.grad is not None}

    (loss, grads), (padded_loss, padded_grads) = loss_and_grads(plain), loss_and_grads(padded)
    assert padded_loss == pytest.approx(loss, rel=1e-9)
    assert padded_grads.keys() == grads.keys()
    assert all(torch.allclose(padded_grads[n], grads[n], atol=1e-9, rtol=0) for n in grads)


def test_overlong_sample_is_refused(processor):
    with pytest.raises(ValueError, match="max_length"):
        GradingCollator(processor, max_length=50)([{"messages": SINGLE, "images": [image()], "sample_id": "s1"}])


def test_plan_packs():
    lengths = [700, 400, 3900, 650, 3100, 500, 800, 2000]
    packs = plan_packs(lengths, 4096, seed=1)
    assert sorted(i for p in packs for i in p) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in p) <= 4096 for p in packs)
    assert plan_packs([5000], 4096) == [[0]]  # a sample over the budget gets a pack of its own

"""Learnability: the vision path of a miniature must learn to see, and the recipe must teach its language model
to read from it. A regression here means a model that can only learn the answer format (issue 17): the
demo's gains would be a layout prior, not grading."""

from __future__ import annotations

import json
import random

import pytest

from gbtrain.families import QWEN2_5_VL
from gbtrain.miniature.warmup import WarmupOptions, handwriting_crop

# One handwritten character on a 4x2-token crop; the tower is the plain miniature's (64 wide, 2 blocks).
TOY = WarmupOptions(steps=400, batch=32, charset="ABCD", max_chars=1, position_from=1.0)
SIDE = QWEN2_5_VL.patch_factor
WIDTH, HEIGHT = TOY.crop_px(SIDE)
QUESTION = "Which letter is written?"


def toy_reading_set(out, tokenizer_dir, n_train: int, n_validation: int, seed: int = 5):
    """A 'which letter' SFT set in the builder's layout (DatasetDict + build_config.yaml), crops drawn afresh."""
    from datasets import Dataset, DatasetDict

    from gbtrain.config import to_yaml
    from gbtrain.coords import PixelBudget
    from gbtrain.data.build_config import BuildConfig

    rng = random.Random(seed)
    (out / "images").mkdir(parents=True)
    rows = {"train": [], "validation": [], "test": []}
    for split, n in (("train", n_train), ("validation", n_validation)):
        for i in range(n):
            crop = handwriting_crop(rng, TOY, SIDE)
            path = out / "images" / f"{split}-{i}.png"
            crop.image.save(path)
            rows[split].append({"sample_id": f"{split}-{i}", "images": [str(path.resolve())], "num_tokens": 0,
                                "image_width": WIDTH, "image_height": HEIGHT,
                                "messages": [{"role": "user", "content": QUESTION},
                                             {"role": "assistant", "content": crop.text}]})
    template = Dataset.from_list(rows["train"])
    DatasetDict({s: Dataset.from_list(r) if r else template.select([]) for s, r in rows.items()}).save_to_disk(
        str(out), num_shards={s: 1 for s in rows})
    budget = PixelBudget(3136, WIDTH * HEIGHT)
    build = BuildConfig(data="toy", out=str(out), coords="rel1000", vision=budget, tokenizer=str(tokenizer_dir))
    (out / "build_config.yaml").write_text(to_yaml(build))
    return rows, budget


@pytest.mark.slow
def test_a_warmed_up_miniature_learns_to_read_through_the_recipe(tmp_path):
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from gbtrain.evaluation.probes import image_reliance
    from gbtrain.miniature.tiny_model import make_tiny_model
    from gbtrain.train.config import FreezeSettings, LearningRates, TrainConfig
    from gbtrain.train.modeling import load_processor
    from gbtrain.train.trainer import train

    base = make_tiny_model(tmp_path / "base", vision_warmup=TOY)
    seen = json.loads((base / "gbtrain_warmup.json").read_text())["held_out"]
    assert seen["ink_token_chars"] >= 0.5, seen  # the tower learned to tell the letters apart

    rows, budget = toy_reading_set(tmp_path / "toy", base, n_train=600, n_validation=64)
    out = tmp_path / "sft"
    train(TrainConfig(model=str(base), dataset=str(tmp_path / "toy"), output_dir=str(out), finetune="full",
                      freeze=FreezeSettings(vision_tower=True, merger=True), lr=LearningRates(llm=1e-3),
                      max_steps=200, pack_tokens=512, max_length=512, gradient_accumulation_steps=1,
                      gradient_checkpointing=False, eval_steps=10_000, save_steps=10_000, report_to=[],
                      warmup_ratio=0.05, dataloader_num_workers=0))
    model = AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32).eval()
    processor = load_processor(str(out), budget)
    prompt = processor.apply_chat_template([{"role": "user", "content": [{"type": "image"},
                                                                         {"type": "text", "text": QUESTION}]}],
                                           add_generation_prompt=True)
    right = 0
    for row in rows["validation"]:
        inputs = processor(text=[prompt], images=[Image.open(row["images"][0])], return_tensors="pt")
        with torch.no_grad():
            answer = model.generate(**inputs, max_new_tokens=4, do_sample=False)[0, inputs["input_ids"].shape[1]:]
        right += processor.tokenizer.decode(answer, skip_special_tokens=True).strip() == row["messages"][1]["content"]
    reliance = image_reliance(out, tmp_path / "toy", limit=64)
    assert right / len(rows["validation"]) >= 0.6, right  # chance: 25%
    assert reliance["gap"] >= 0.4, reliance  # blank images cost this much loss per token

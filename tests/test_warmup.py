"""The vision warm-up: its crops, its per-token targets in the merger's order, and (slow) that a warmed tiny model
learns to read and locate handwriting through the real recipe, where one from random weights does not."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gbtrain.warmup import MERGED_PATCH, WarmupOptions, _token_ink, _token_places, handwriting_crop

ROOT = Path(__file__).resolve().parents[1]


def test_crops_hold_their_text_inside_the_image():
    opts = WarmupOptions(charset="AB7", max_chars=2)
    rng = random.Random(0)
    for _ in range(20):
        crop = handwriting_crop(rng, opts)
        assert crop.image.size == (opts.width, opts.height)
        assert 1 <= len(crop.text) <= 2 and set(crop.text) <= set("AB7")
        assert 0 <= crop.box.x1 < crop.box.x2 <= opts.width and 0 <= crop.box.y1 < crop.box.y2 <= opts.height
        ys, xs = np.nonzero(crop.ink)
        assert (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1) == tuple(crop.box.as_list())
        # the ink is drawn where the label map says: darker than the paper around it
        pixels = np.asarray(crop.image.convert("L"), dtype=float)
        assert pixels[crop.ink].mean() < pixels[~crop.ink].mean() - 60


def test_token_targets_follow_the_mergers_raster_order(tiny_model_dir, budget):
    """Ink in one 28x28 cell marks the token the vision tower emits for that cell, and that token's place is the
    cell's centre: checked against the real processor and tower by painting one cell and seeing which output moves."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from gbtrain.coords import PixelBudget
    from gbtrain.modeling import load_processor

    w, h, row, col = 5 * MERGED_PATCH, 3 * MERGED_PATCH, 1, 3
    ink = np.zeros((h, w), bool)
    ink[row * 28 + 4:row * 28 + 24, col * 28 + 4:col * 28 + 24] = True
    marked = _token_ink(ink)
    assert marked.sum() == 1 and int(np.argmax(marked)) == row * 5 + col
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


def test_options_are_checked():
    with pytest.raises(ValueError, match="multiples of 28"):
        WarmupOptions(width=100)
    with pytest.raises(ValueError, match="charset"):
        WarmupOptions(charset="")


def _read_toy(model_dir: Path, data_dir: Path, limit: int) -> dict:
    """Greedy replies on the toy validation crops: exact transcriptions and boxes with IoU > 0.5 (rel1000)."""
    import torch
    from transformers import AutoModelForImageTextToText

    from gbtrain.backends import message
    from gbtrain.modeling import load_processor
    from gbtrain.schema import Box
    from gbtrain.sft_dataset import dataset_pixel_budget, load_sft_dataset

    processor = load_processor(str(model_dir), dataset_pixel_budget(data_dir))
    processor.tokenizer.padding_side = "left"
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows = load_sft_dataset(data_dir)["validation"].select(range(limit))
    exact = located = 0
    for start in range(0, limit, 25):
        batch = [rows[i] for i in range(start, min(start + 25, limit))]
        inputs = processor.apply_chat_template(
            [[message(r["messages"][0]["content"], r["images"][0].convert("RGB"))] for r in batch],
            add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=40, do_sample=False, repetition_penalty=1.0)
        replies = processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        for row, reply in zip(batch, replies, strict=True):
            truth = json.loads(row["messages"][1]["content"])[0]
            try:
                said = json.loads(reply)[0]
                exact += said["text"] == truth["text"]
                located += Box(*said["bbox_2d"]).iou(Box(*truth["bbox_2d"])) > 0.5
            except (ValueError, KeyError, IndexError, TypeError):
                pass
    return {"text_exact": exact / limit, "box_iou_over_0.5": located / limit}


@pytest.mark.slow
def test_a_warmed_tiny_model_learns_to_read_through_the_recipe(tmp_path):
    """The learnability regression test: warm up a tiny model's vision on letters, train its language model on the
    toy reading task through `accelerate launch recipes/sft_qwen.py` (vision frozen), and require that it reads
    held-out crops it never saw and that its loss depends on the pixels. A vision path that stops learning (a
    warm-up, collator, freezing or image-feature regression) fails here."""
    from toy_reading import write_toy_reading_set

    from gbtrain.probes import image_reliance
    from gbtrain.tiny_model import make_tiny_model

    opts = WarmupOptions(steps=1200, charset="ABCD", max_chars=1, glyph_px=(40, 60))
    model = make_tiny_model(tmp_path / "base", hidden=256, layers=4, vision_warmup=opts)
    warmed = json.loads((model / "gbtrain_warmup.json").read_text())
    print("warm-up", warmed["held_out"], warmed["seconds"], "s")
    assert warmed["held_out"]["chars_exact"] >= 0.8 and warmed["held_out"]["ink_token_accuracy"] >= 0.98

    data = write_toy_reading_set(tmp_path / "toy", str(model), opts, train=2000, validation=100)
    out = tmp_path / "sft"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--cpu",
           str(ROOT / "recipes" / "sft_qwen.py"), "--config", str(ROOT / "configs" / "sft" / "tiny_cpu.yaml"),
           f"model={model}", f"dataset={data}", f"output_dir={out}", "max_steps=300", "pack_tokens=2048",
           "max_length=1024", "freeze.vision_tower=true", "freeze.merger=true", "lr.llm=5e-4", "eval_steps=1000",
           "save_steps=300", "report_to=[]"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]

    read = _read_toy(out, data, limit=100)
    reliance = image_reliance(str(out), str(data), "validation", 32, 8)
    print("toy reading", read, "image reliance", reliance)
    assert read["text_exact"] >= 0.8, read  # chance is 0.25; a model that does not look answers one letter
    assert reliance["gap"] >= 0.3, reliance

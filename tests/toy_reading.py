"""A toy reading task for the learnability test: one handwritten string per crop, found and transcribed.

Written in the layout data_builders/build_sft.py writes (a DatasetDict on disk with images/, build_config.yaml
written last), so that the real recipe trains on it and image_reliance.py probes it unchanged. The crops come
from gbtrain.warmup's generator with another seed than the warm-up's, so the language model is tested on
images the vision tower never saw.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from gbtrain.coords import PixelBudget, to_model
from gbtrain.warmup import WarmupOptions, handwriting_crop

PROMPT = ("This image shows one short handwritten answer.\nFind it and transcribe it exactly.\n"
          "Boxes are [x1, y1, x2, y2] scaled to 0-1000.\n"
          'Reply with a JSON list: [{"bbox_2d": [...], "text": "..."}]')


def write_toy_reading_set(out: Path, tokenizer: str, opts: WarmupOptions, train: int, validation: int,
                          seed: int = 12_345) -> Path:
    """Crops drawn as gbtrain.warmup draws them, with target `[{"bbox_2d": rel1000 ink box, "text": ...}]`."""
    from datasets import Dataset, DatasetDict

    from gbtrain.sft_dataset import LengthCounter

    images = out / "images"
    images.mkdir(parents=True)
    budget = PixelBudget(3136, opts.width * opts.height)
    rng = random.Random(seed)
    rows: dict[str, list[dict]] = {"train": [], "validation": []}
    for split, n in (("train", train), ("validation", validation)):
        for _ in range(n):
            i = sum(len(r) for r in rows.values())
            crop = handwriting_crop(rng, opts)
            path = images / f"toy{i:05d}.png"
            crop.image.save(path)
            target = [{"bbox_2d": to_model(crop.box, opts.width, opts.height, "rel1000", budget), "text": crop.text}]
            rows[split].append({
                "sample_id": f"toy{i:05d}", "page_id": f"toy{i:05d}", "record_id": f"toy{i:05d}", "level": "L1",
                "mode": "answer-free", "turns": 1, "subject": "Toy", "stage": "Unknown", "num_tokens": 0,
                "image_width": opts.width, "image_height": opts.height, "images": [str(path)],
                "messages": [{"role": "user", "content": PROMPT},
                             {"role": "assistant", "content": json.dumps(target)}],
                "split": split})
    counter = LengthCounter(tokenizer, budget)
    for split_rows in rows.values():
        lengths = counter.count([r["messages"] for r in split_rows], [(opts.width, opts.height)] * len(split_rows))
        for row, length in zip(split_rows, lengths, strict=True):
            row["num_tokens"] = length
    built = {name: Dataset.from_list(r) for name, r in rows.items()}
    DatasetDict({**built, "test": built["train"].select([])}).save_to_disk(str(out))
    (out / "build_config.yaml").write_text(
        f"data: toy-reading\ncoords: rel1000\nvision:\n  min_pixels: {budget.min_pixels}\n  max_pixels: "
        f"{budget.max_pixels}\nmax_length: 1024\ntokenizer: {tokenizer}\nout_resolved: {out.resolve()}\n")
    return out

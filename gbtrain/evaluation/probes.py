"""Is a model looking at the image? Teacher-forced loss with the real images vs. blank ones.

A model that learned only text-side priors (the answer format, typical box positions, the usual
verdict) has the same loss on blank pages; the gap is the part of its skill that comes from pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image

from gbtrain.config import below_minimum, option, require_model
from gbtrain.data.sft_dataset import dataset_pixel_budget, load_sft_dataset
from gbtrain.train.collator import IGNORE_INDEX, GradingCollator
from gbtrain.train.modeling import load_processor


@dataclass
class RelianceRun:
    """Everything one `scripts/image_reliance.py` call needs; each field is one of its flags (gbtrain.cli)."""

    model: str = option(help="the model measured (hub id or folder)")
    data: str = option(help="a folder written by data_builders/build_sft.py")
    split: str = option("validation", "the split whose first --limit conversations are measured")
    limit: int = option(32, "conversations measured", bounds=(1, 10**6))
    batch_size: int = option(8, "conversations per forward pass", bounds=(1, 4096))


def _summed_loss(model, batch: dict) -> tuple[float, int]:
    """Summed next-token loss over the assistant tokens of a padded batch, and their count."""
    batch = {k: v.to(model.device) for k, v in batch.items()}
    labels = batch.pop("labels")
    with torch.no_grad():
        logits = model(**batch).logits[:, :-1].float()
    target = labels[:, 1:]
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=IGNORE_INDEX,
                                             reduction="sum")
    return float(loss), int((target != IGNORE_INDEX).sum())


def image_reliance(model_dir: str | Path, dataset_dir: str | Path, split: str = "validation",
                   limit: int = 32, batch_size: int = 8) -> dict:
    """Token-weighted mean loss of `model_dir` on the first `limit` conversations of `split`, with their
    images and with white images of the same sizes (so the prompt and image token counts are unchanged)."""
    from transformers import AutoModelForImageTextToText

    bad = below_minimum({"--limit": (limit, 1), "--batch-size": (batch_size, 1)}, sep=" ")
    if bad:  # no samples would divide by zero tokens; a zero batch size never advances
        raise ValueError("; ".join(bad))
    require_model(str(model_dir))
    splits = load_sft_dataset(dataset_dir)
    if split not in splits:
        raise ValueError(f"{dataset_dir} has no {split!r} split (it has {', '.join(splits)})")
    rows = splits[split]
    if len(rows) == 0:
        raise ValueError(f"{dataset_dir}: the {split!r} split is empty")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForImageTextToText.from_pretrained(str(model_dir), dtype="auto").to(device).eval()
    budget = dataset_pixel_budget(dataset_dir)  # the targets' boxes were computed for it (a finished build)
    processor = load_processor(str(model_dir), budget)
    collator = GradingCollator(processor, max_length=1 << 30)
    real = blank = 0.0
    tokens = 0
    n = min(limit, len(rows))
    for start in range(0, n, batch_size):
        batch = [rows[i] for i in range(start, min(start + batch_size, n))]
        whites = [{**row, "images": [Image.new("RGB", im.size, "white") for im in row["images"]]} for row in batch]
        loss, count = _summed_loss(model, collator(batch))
        real += loss
        tokens += count
        blank += _summed_loss(model, collator(whites))[0]
    return {"model": str(model_dir), "split": split, "samples": n, "tokens": tokens,
            "loss_real_images": round(real / tokens, 6), "loss_blank_images": round(blank / tokens, 6),
            "gap": round((blank - real) / tokens, 6)}

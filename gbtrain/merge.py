"""Merge LoRA adapters into the base weights (recipes/merge_lora.py)."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from gbtrain.coords import CHECKPOINT_COORDS_FILE


def merge_lora(base: str, adapter: str, out: str, dtype: str = "auto") -> Path:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor, GenerationConfig

    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    model = AutoModelForImageTextToText.from_pretrained(base, dtype=torch_dtype)
    model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # a base without generation_config.json keeps the model's
        model.generation_config = GenerationConfig.from_pretrained(base)
    model.save_pretrained(out_dir)
    source = adapter if (Path(adapter) / "processor_config.json").exists() else base
    processor = AutoProcessor.from_pretrained(source)
    processor.save_pretrained(out_dir)
    recorded = Path(adapter) / CHECKPOINT_COORDS_FILE
    if recorded.is_file():
        shutil.copyfile(recorded, out_dir / CHECKPOINT_COORDS_FILE)
    return out_dir

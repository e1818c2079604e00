"""Merge LoRA adapters into the base weights (recipes/merge_lora.py)."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from gbtrain.coords import CHECKPOINT_RECORD, read_checkpoint_record


def merge_lora(base: str, adapter: str, out: str, dtype: str = "auto") -> Path:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor, GenerationConfig

    from gbtrain.modeling import load_processor

    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    model = AutoModelForImageTextToText.from_pretrained(base, dtype=torch_dtype)
    model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # a base without generation_config.json keeps the model's
        model.generation_config = GenerationConfig.from_pretrained(base)
    model.save_pretrained(out_dir)
    source = adapter if (Path(adapter) / "processor_config.json").exists() else base
    record = read_checkpoint_record(adapter)
    processor = load_processor(source, record[1]) if record else AutoProcessor.from_pretrained(source)
    processor.save_pretrained(out_dir)
    if record:
        shutil.copyfile(Path(adapter) / CHECKPOINT_RECORD, out_dir / CHECKPOINT_RECORD)
    return out_dir

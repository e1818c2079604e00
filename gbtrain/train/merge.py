"""Merge LoRA adapters into the base weights (recipes/merge_lora.py)."""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from gbtrain.config import option, require_model
from gbtrain.outputs import overlapping
from gbtrain.train.checkpoints import CHECKPOINT_RECORD, read_checkpoint_record

DTYPES = ("auto", "bfloat16", "float16", "float32")


@dataclass
class MergeRun:
    """Everything one `recipes/merge_lora.py` call needs; each field is one of its flags (gbtrain.cli.add_options)."""

    base: str = option(help="base model (hub id or folder) the adapter was trained on")
    adapter: str = option(help="adapter folder (recipes/sft_qwen.py output_dir)")
    out: str = option(help="folder for the merged checkpoint")
    dtype: str = option("auto", "dtype the base is loaded and the merge saved in (auto: the base's own)",
                        choices=DTYPES)
    allow_other_base: bool = option(False, "merge although --base is not the base recorded in the adapter (same "
                                           "weights, other name)")


def check_base(base: str, adapter: str) -> None:
    """The adapter's recorded base must be `base`: merged onto other weights of the same shape, it would load and
    answer, silently wrong. The same folder, the same hub id, or a folder named like the hub id all count."""
    config = Path(adapter) / "adapter_config.json"
    if not config.is_file():
        raise FileNotFoundError(f"no adapter_config.json in {adapter}: not a LoRA adapter folder")
    try:
        trained_on = json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path") or ""
    except (ValueError, AttributeError) as e:
        raise ValueError(f"{config} is not an adapter config ({e}): save the adapter again") from None
    if not isinstance(trained_on, str):
        raise ValueError(f"{config}: base_model_name_or_path must be a model name or folder, got {trained_on!r}")

    def same(a: str, b: str) -> bool:
        if a == b or (Path(a).is_dir() and Path(b).is_dir() and Path(a).resolve() == Path(b).resolve()):
            return True
        return Path(a.rstrip("/")).name == Path(b.rstrip("/")).name != ""

    if trained_on and not same(trained_on, base):
        raise ValueError(f"{adapter} was trained on {trained_on}, not {base}: pass that base (or "
                         f"--allow-other-base if it holds the same weights under another name)")


def check_adapter_weights(adapter: Path) -> None:
    """A truncated or damaged adapter file is named before the base model loads (PEFT's error names neither)."""
    from safetensors import SafetensorError, safe_open

    weights = adapter / "adapter_model.safetensors"
    if not weights.is_file():
        return
    try:
        with safe_open(str(weights), "pt"):
            pass
    except SafetensorError as e:
        raise ValueError(f"{weights} cannot be read ({e}): the file is damaged or truncated; save the adapter "
                         f"again, or merge one of the run's checkpoint-N folders") from None


def merge_lora(base: str, adapter: str, out: str, dtype: str = "auto", allow_other_base: bool = False) -> Path:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor, GenerationConfig

    from gbtrain.train.modeling import load_processor

    if not allow_other_base:
        check_base(base, adapter)
    require_model(base, "--base")
    if not any((Path(adapter) / f).is_file() for f in ("adapter_model.safetensors", "adapter_model.bin")):
        raise FileNotFoundError(f"no adapter weights (adapter_model.safetensors) in {adapter}: point --adapter at a "
                                f"run that saved its adapter")
    check_adapter_weights(Path(adapter))
    overlap = overlapping("--out", out, {"--base": base, "--adapter": adapter})
    if overlap:  # save_pretrained deletes the shards of an earlier save it finds in its folder
        raise ValueError(f"{'; '.join(overlap)}: choose another --out")
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
    processor = load_processor(source, record.budget) if record else AutoProcessor.from_pretrained(source)
    processor.save_pretrained(out_dir)
    if record:
        shutil.copyfile(Path(adapter) / CHECKPOINT_RECORD, out_dir / CHECKPOINT_RECORD)
    return out_dir

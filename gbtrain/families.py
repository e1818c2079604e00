"""Model families: what gbtrain must know about a VLM family, in one place, asked by every other module.

A family says how images become tokens (the resize factor: patch size x spatial merge), which box convention
its pre-training used, which transformers classes hold its mRoPE index and its backbone, and where its vision
tower and merger sit among the parameters (for freezing, LoRA, learning-rate groups and the ZeRO-3 guard).
Adding a family is one entry in FAMILIES plus a tiny hub-shaped model (gbtrain.miniature.tiny_model) for its tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelFamily:
    name: str
    model_types: tuple[str, ...]  # config.json `model_type` values (the first: what miniature.tiny_model writes)
    patch_factor: int  # image side per LLM token, in px: vision patch x spatial merge; smart_resize rounds to it
    native_coords: str  # the box convention (gbtrain.coords) its pre-training taught
    backbone_classes: tuple[str, ...]  # transformers classes of the inner model (mRoPE index, vision-tower hook)
    # Parameter-name markers: anything under `visual.` is the vision side; these parts of it are the merger
    # (projection into the LLM), trained at the merger's rate and kept out of a vision freeze with freeze.merger=false.
    merger_markers: tuple[str, ...]


QWEN2_5_VL = ModelFamily(
    name="qwen2_5_vl", model_types=("qwen2_5_vl", "qwen2_vl"), patch_factor=28, native_coords="qwen25",
    backbone_classes=("Qwen2_5_VLModel", "Qwen2VLModel"), merger_markers=("visual.merger.",))
# Qwen3-VL: 16 px patches merged 2x2, boxes in 0-1000 of the image, and DeepStack mergers that feed vision
# features into the first LLM layers (projections into the LLM, like the merger).
QWEN3_VL = ModelFamily(
    name="qwen3_vl", model_types=("qwen3_vl", "qwen3_vl_moe"), patch_factor=32, native_coords="rel1000",
    backbone_classes=("Qwen3VLModel", "Qwen3VLMoeModel"),
    merger_markers=("visual.merger.", "visual.deepstack_merger_list."))
FAMILIES = (QWEN2_5_VL, QWEN3_VL)
DEFAULT_FAMILY = QWEN2_5_VL


def family_named(name: str) -> ModelFamily:
    """The family of a `name` or config.json `model_type`."""
    for family in FAMILIES:
        if name == family.name or name in family.model_types:
            return family
    known = ", ".join(t for f in FAMILIES for t in f.model_types)
    raise ValueError(f"model family {name!r} is not supported (supported model types: {known})")


def family_of_config(config) -> ModelFamily:
    """The family of a transformers config (or a model's `config`)."""
    return family_named(str(getattr(config, "model_type", "")))


def model_type_of(model: str | Path) -> str | None:
    """config.json `model_type` of a model folder (None for a hub id or a folder without one: no download here)."""
    path = Path(model) / "config.json"
    if not path.is_file():
        return None
    try:
        model_type = json.loads(path.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError) as e:
        raise ValueError(f"{path}: not a model config ({e})") from None
    return str(model_type) if model_type else None


def family_of_model(model: str | Path) -> ModelFamily | None:
    """The family of a model folder or hub id, from its config.json when it has one, else from its name
    (Qwen/Qwen3-VL-8B-Instruct); None when neither tells (another model family, or a bare tokenizer folder)."""
    model_type = model_type_of(model)
    if model_type is not None:
        return next((f for f in FAMILIES if model_type in f.model_types), None)
    key = str(model).lower().replace("_", "-").replace(".", "-")
    names = {QWEN3_VL: ("qwen3-vl",), QWEN2_5_VL: ("qwen2-5-vl", "qwen2-vl")}
    return next((f for f, marks in names.items() if any(m in key for m in marks)), None)

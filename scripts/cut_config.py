"""A layer-cut copy of an architecture's config.json: the real widths and heads with fewer decoder layers and vision
blocks (and, for CPU profiling, optionally a small vocabulary with the special tokens renumbered into it), so a check
or a profile of the 7B shapes fits a short device call or a CPU.

    python scripts/cut_config.py --model-config configs/bench/qwen25vl_7b --out runs/cut-7b --layers 1 --vocab 4096
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gbtrain.cli import parse_options, user_errors
from gbtrain.config import option

SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "vision_start_token_id", "vision_end_token_id",
               "vision_token_id", "image_token_id", "video_token_id")


def cut_config(model_config: str, layers: int, vision_depth: int, into: Path, vocab: int | None = None) -> Path:
    """Write the cut config.json into `into` (created) and return it."""
    config = json.loads((Path(model_config) / "config.json").read_text(encoding="utf-8"))
    text = config.get("text_config", config)
    holders = list({id(config): config, id(text): text}.values())
    for holder in holders:
        if "num_hidden_layers" in holder:
            holder["num_hidden_layers"] = min(holder["num_hidden_layers"], layers)
            holder["max_window_layers"] = min(holder.get("max_window_layers", layers), layers)
    vision = config["vision_config"]
    vision["depth"] = min(vision["depth"], vision_depth)
    if "fullatt_block_indexes" in vision:  # Qwen2.5-VL: window attention but in these blocks; keep the last one full
        vision["fullatt_block_indexes"] = [vision["depth"] - 1]
    if "deepstack_visual_indexes" in vision:  # Qwen3-VL: DeepStack mergers read these blocks
        vision["deepstack_visual_indexes"] = [i for i in vision["deepstack_visual_indexes"] if i < vision["depth"]]
    if vocab is not None:  # the special tokens keep their order, as the last ids of the smaller vocabulary
        ids = sorted({h[k] for h in holders for k in SPECIAL_IDS if isinstance(h.get(k), int)})
        renumber = {old: vocab - len(ids) + i for i, old in enumerate(ids)}
        for holder in holders:
            holder["vocab_size"] = vocab
            for key in SPECIAL_IDS:
                if isinstance(holder.get(key), int):
                    holder[key] = renumber[holder[key]]
    into.mkdir(parents=True, exist_ok=True)
    (into / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return into


@dataclass
class CutConfig:
    """The cut's options; each field is one of its flags (gbtrain.cli)."""

    model_config: str | None = option(None, "folder with the architecture's config.json")
    out: str | None = option(None, "folder to write the cut config.json into")
    layers: int = option(2, "decoder layers kept")
    vision_depth: int = option(4, "vision blocks kept (the last one full attention)")
    vocab: int | None = option(None, "a smaller vocabulary (special tokens renumbered as its last ids); none: kept")


def main() -> None:
    args = parse_options(CutConfig, __doc__)
    with user_errors("cut_config"):
        if not (args.model_config and args.out):
            raise ValueError("--model-config and --out are required")
        if not (1 <= args.layers <= 512 and 1 <= args.vision_depth <= 512):
            raise ValueError("--layers and --vision-depth must be 1-512")
        if args.vocab is not None and not (64 <= args.vocab <= 10**6):
            raise ValueError(f"--vocab={args.vocab}: give 64 to 1000000")
        if (Path(args.out) / "config.json").exists():
            raise ValueError(f"{args.out}/config.json exists: choose another --out")
        print(cut_config(args.model_config, args.layers, args.vision_depth, Path(args.out), args.vocab) / "config.json")


if __name__ == "__main__":
    main()

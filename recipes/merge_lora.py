"""Merge a LoRA adapter into its base model: a plain checkpoint that transformers and vLLM load.

    python recipes/merge_lora.py --base Qwen/Qwen2.5-VL-7B-Instruct --adapter runs/sft-7b-lora --out runs/merged

The processor, tokenizer and chat template come from the adapter folder (the recipe saves them there),
falling back to the base; the generation config comes from the base.
"""

from __future__ import annotations

import argparse

from gbtrain.cli import HelpFormatter, user_errors
from gbtrain.merge import merge_lora


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("--base", required=True, help="base model (hub id or folder) the adapter was trained on")
    ap.add_argument("--adapter", required=True, help="adapter folder (recipes/sft_qwen.py output_dir)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float16", "float32"))
    ap.add_argument("--allow-other-base", action="store_true",
                    help="merge although --base is not the base recorded in the adapter (same weights, other name)")
    args = ap.parse_args()
    with user_errors("merge_lora"):
        out = merge_lora(args.base, args.adapter, args.out, args.dtype, args.allow_other_base)
    print(f"merged checkpoint written to {out}")


if __name__ == "__main__":
    main()

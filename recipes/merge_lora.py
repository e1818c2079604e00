"""Merge a LoRA adapter into its base model: a plain checkpoint that transformers and vLLM load.

    python recipes/merge_lora.py --base Qwen/Qwen2.5-VL-7B-Instruct --adapter runs/sft-7b-lora --out runs/merged

The processor, tokenizer and chat template come from the adapter folder (the recipe saves them there),
falling back to the base; the generation config comes from the base.
"""

from __future__ import annotations

from gbtrain.cli import parse_options, user_errors
from gbtrain.train.merge import MergeRun, merge_lora


def main() -> None:
    args = parse_options(MergeRun, __doc__)
    with user_errors("merge_lora"):
        out = merge_lora(args.base, args.adapter, args.out, args.dtype, args.allow_other_base)
    print(f"merged checkpoint written to {out}")


if __name__ == "__main__":
    main()

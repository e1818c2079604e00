"""Supervised fine-tuning of a Qwen2.5-VL-class model on gbtrain conversations (TRL + PEFT).

Tested launch commands (CPU, tiny model; see tests/train/test_training.py):
    accelerate launch recipes/sft_qwen.py --config configs/sft/tiny_cpu.yaml model=M dataset=D output_dir=O
    accelerate launch --config_file configs/accelerate/cpu_ddp2.yaml recipes/sft_qwen.py --config ...
    accelerate launch --config_file configs/accelerate/cpu_zero3_2.yaml recipes/sft_qwen.py --config ...
GPU (one / eight GPUs / two nodes; configs/accelerate/*.yaml):
    accelerate launch --config_file configs/accelerate/single_gpu.yaml recipes/sft_qwen.py \
        --config configs/sft/qwen25vl_7b_lora.yaml
    accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml recipes/sft_qwen.py \
        --config configs/sft/qwen25vl_7b_full.yaml
Any config key can follow as key=value (nested: lora.r=32); --resume continues from the last checkpoint.
"""

from __future__ import annotations

import argparse
import json

from gbtrain.cli import HelpFormatter, user_errors
from gbtrain.config import keys_epilog, load_config
from gbtrain.train.config import TrainConfig
from gbtrain.train.trainer import train


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter, epilog=keys_epilog(TrainConfig))
    ap.add_argument("--config", required=True, help="recipe YAML (configs/sft/*.yaml)")
    ap.add_argument("--resume", action="store_true", help="continue from the last checkpoint in output_dir")
    ap.add_argument("overrides", nargs="*", help="key=value config overrides")
    args = ap.parse_intermixed_args()  # key=value may come before, between or after the flags
    overrides = list(args.overrides) + (["resume=true"] if args.resume else [])
    with user_errors("sft_qwen"):  # bad options, data, model or output folder: one line, exit 2
        summary = train(load_config(TrainConfig, args.config, overrides))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

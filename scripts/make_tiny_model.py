"""Build the tiny, locally made Qwen2.5-VL (or Qwen3-VL) used by the tests and the demo (no hub access).

    python scripts/make_tiny_model.py --out runs/tiny-qwen25vl [--hidden 128 --layers 2]
    python scripts/make_tiny_model.py --out runs/tiny-qwen3vl --family qwen3_vl
    python scripts/make_tiny_model.py --out runs/tiny-reader --vision-hidden 128 --vision-depth 3 \
        --vision-warmup-steps 2000

It is shaped like the hub's Qwen/Qwen2.5-VL-7B-Instruct (or Qwen/Qwen3-VL-8B-Instruct): same files and keys,
the hub's processor budget and sampling defaults included, so the pixel budget of training and evaluation
comes from gbtrain's configs, as it must for a real checkpoint.
"""

from __future__ import annotations

from gbtrain.cli import parse_options, user_errors
from gbtrain.miniature.tiny_model import TinyModelRun, make_tiny_model
from gbtrain.miniature.warmup import warmup_for_profile


def main() -> None:
    with user_errors("make_tiny_model"):
        run = parse_options(TinyModelRun, __doc__)
        warmup = (warmup_for_profile(run.vision_profile, run.vision_warmup_steps, run.seed)
                  if run.vision_warmup_steps else None)
        path = make_tiny_model(run.out, seed=run.seed, hidden=run.hidden, layers=run.layers,
                               vision_hidden=run.vision_hidden, vision_depth=run.vision_depth, vision_warmup=warmup,
                               family=run.family)
    print(f"tiny {run.family} model written to {path}")


if __name__ == "__main__":
    main()

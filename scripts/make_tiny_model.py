"""Build the tiny, locally made Qwen2.5-VL used by the tests and the demo (no hub access).

    python scripts/make_tiny_model.py --out runs/tiny-qwen25vl [--hidden 128 --layers 2]

It is shaped like the hub's Qwen/Qwen2.5-VL-7B-Instruct (same files and keys, the hub's processor
budget and sampling defaults included), so the pixel budget of training and evaluation comes from
gbtrain's configs, as it must for a real checkpoint.
"""

from __future__ import annotations

import argparse

from gbtrain.cli import HelpFormatter, user_errors
from gbtrain.tiny_model import make_tiny_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=128, help="text hidden size (head_dim is 64)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vision-hidden", type=int, default=64, help="vision tower width (head_dim is 32)")
    ap.add_argument("--vision-depth", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with user_errors("make_tiny_model"):
        if min(args.hidden // 64, args.layers, args.vision_hidden // 32, args.vision_depth) < 1:
            raise ValueError("--hidden >= 64, --vision-hidden >= 32, --layers and --vision-depth >= 1")
        path = make_tiny_model(args.out, seed=args.seed, hidden=args.hidden, layers=args.layers,
                               vision_hidden=args.vision_hidden, vision_depth=args.vision_depth)
    print(f"tiny Qwen2.5-VL written to {path}")


if __name__ == "__main__":
    main()

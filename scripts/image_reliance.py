"""How much of a model's skill comes from the pixels: its loss on built SFT conversations with their
images and with blank ones (gbtrain.probes).

    python scripts/image_reliance.py --model runs/sft-model --data runs/sft [--split validation --limit 32]
"""

from __future__ import annotations

import argparse
import json

from gbtrain.cli import HelpFormatter, user_errors
from gbtrain.probes import image_reliance


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True, help="a folder written by data_builders/build_sft.py")
    ap.add_argument("--split", default="validation")
    ap.add_argument("--limit", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    with user_errors("image_reliance"):
        result = image_reliance(args.model, args.data, args.split, args.limit, args.batch_size)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""How much of a model's skill comes from the pixels: its loss on built SFT conversations with their
images and with blank ones (gbtrain.evaluation.probes).

    python scripts/image_reliance.py --model runs/sft-model --data runs/sft [--split validation --limit 32]
"""

from __future__ import annotations

import json

from gbtrain.cli import parse_options, user_errors
from gbtrain.evaluation.probes import RelianceRun, image_reliance


def main() -> None:
    args = parse_options(RelianceRun, __doc__)
    with user_errors("image_reliance"):
        result = image_reliance(args.model, args.data, args.split, args.limit, args.batch_size)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

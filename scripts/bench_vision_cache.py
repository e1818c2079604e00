"""Training speed with and without the frozen-vision feature cache (vision_cache_mib), on the same padded batches.

    python scripts/bench_vision_cache.py --config configs/sft/tiny_cpu.yaml model=M dataset=D output_dir=unused \\
        freeze.vision_tower=true freeze.merger=true [--samples 48] [--batch 3] [--epochs 3] [--mix as-built] \\
        [--mib 1024]

Each variant runs scripts/bench_train.py's padded ("naive") mode in a child process for `epochs` passes over the
same samples (by default the training split's first ones, its own mix of crops and pages): real tokens/s, peak
memory, the cache's hits and misses, and the ratio. Over E passes the cache encodes each image once instead of E
times, so the gain grows with the passes and with the tower's share of a step (large for the demo's miniature, small
for a 7B language model)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from bench_child import run_child

from gbtrain.cli import parse_options
from gbtrain.config import option


@dataclass
class BenchVisionCache:
    """The benchmark's options (gbtrain.cli); `config` and `overrides` are the recipe's, as for bench_train.py."""

    config: str = option(help="the recipe's config (configs/sft/*.yaml)")
    samples: int = option(48, "samples of the mix run in each variant")
    batch: int = option(3, "samples per padded batch")
    epochs: int = option(3, "passes over the samples")
    mix: str = option("as-built", "which samples (scripts/bench_train.py --mix): as-built, the training split's own "
                                  "mix of crops and pages, or l3-l1", choices=("as-built", "l3-l1"))
    mib: int = option(1024, "the cache's budget in the cached variant")
    overrides: list[str] = option([], "the recipe's key=value (model=M dataset=D output_dir=unused, the vision side "
                                      "frozen)", positional=True)


def main() -> None:
    args = parse_options(BenchVisionCache, __doc__)
    bench_train = Path(__file__).with_name("bench_train.py")
    results = {}
    for mib in (0, args.mib):
        cmd = [sys.executable, str(bench_train), "--config", args.config, "--samples", str(args.samples),
               "--naive-batch", str(args.batch), "--mix", args.mix, "--epochs", str(args.epochs), "--mode", "naive",
               *args.overrides, f"vision_cache_mib={mib}"]
        results[mib] = run_child(cmd, f"vision_cache_mib={mib} run", dict(os.environ))
        print(json.dumps({"bench": "vision_cache", "vision_cache_mib": mib, **results[mib]}), flush=True)
    ratio = results[args.mib]["real_tokens_per_s"] / max(results[0]["real_tokens_per_s"], 1e-9)
    print(json.dumps({"bench": "vision_cache_ratio", "epochs": args.epochs,
                      "cached_over_encoded_real_tokens_per_s": round(ratio, 2)}))


if __name__ == "__main__":
    main()

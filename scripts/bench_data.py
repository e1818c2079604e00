"""Benchmark the data path: synthetic pages/s and SFT conversations/s (prints figures, asserts nothing).

    python scripts/bench_data.py --out runs/bench-data [--pages 700] [--target 10000] [--workers 2]
        [--tokenizer DIR]

Targets (2 cores): 700 pages in <= 180 s; 10k conversations built from them in <= 60 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from gbtrain.config import BuildConfig, load_config
from gbtrain.sft_dataset import build_sft_dataset
from gbtrain.synth.generate import generate_dataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/bench-data")
    ap.add_argument("--pages", type=int, default=700)
    ap.add_argument("--target", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--tokenizer", default=None, help="exact token lengths with this tokenizer (default: estimate)")
    args = ap.parse_args()
    out = Path(args.out)
    machine = {"cpus": os.cpu_count(), "workers": args.workers, "python": platform.python_version()}

    start = time.perf_counter()
    levels = generate_dataset(out / "synth", args.pages, seed=0, workers=args.workers)
    gen_s = time.perf_counter() - start
    print(json.dumps({"bench": "synth_pages", "pages": args.pages, "seconds": round(gen_s, 1),
                      "pages_per_s": round(args.pages / gen_s, 2), "target_seconds_for_700": 180,
                      "records": {k: len(v) for k, v in levels.items()}, **machine}))

    overrides = [f"data={out / 'synth'}", f"out={out / 'sft'}", f"target_count={args.target}",
                 f"workers={args.workers}"]
    if args.tokenizer:
        overrides.append(f"tokenizer={args.tokenizer}")
    cfg = load_config(BuildConfig, "configs/data/default.yaml", overrides)
    start = time.perf_counter()
    stats = build_sft_dataset(cfg)
    build_s = time.perf_counter() - start
    print(json.dumps({"bench": "build_sft", "conversations": stats["total"], "seconds": round(build_s, 1),
                      "conversations_per_s": round(stats["total"] / build_s, 1), "target_seconds_for_10k": 60,
                      "exact_lengths": stats["tokens"]["exact"], "shortfall": sum(stats["shortfall"].values()),
                      **machine}))


if __name__ == "__main__":
    main()

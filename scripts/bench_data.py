"""Benchmark the data path: synthetic pages/s and SFT conversations/s (prints figures, asserts nothing).

    python scripts/bench_data.py --out runs/bench-data [--pages 700] [--target 10000] [--workers 2]
        [--tokenizer DIR]

Targets (2 cores): 700 pages in <= 180 s; 10k conversations built from them in <= 60 s.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from gbtrain.cli import parse_options
from gbtrain.config import load_config, option
from gbtrain.data.build_config import BuildConfig
from gbtrain.data.sft_dataset import build_sft_dataset
from gbtrain.data.synth.generate import generate_dataset


@dataclass
class BenchData:
    """The benchmark's options; each field is one of its flags (gbtrain.cli)."""

    out: str = option("runs/bench-data", "folder for the synthetic pages (OUT/synth) and the build (OUT/sft)")
    pages: int = option(700, "synthetic pages generated")
    target: int = option(10_000, "conversations built from them (target_count)")
    workers: int = option(os.cpu_count() or 1, "processes for both steps (default: this machine's CPUs)")
    tokenizer: str | None = option(None, "exact token lengths with this tokenizer (default: estimate)")


def main() -> None:
    args = parse_options(BenchData, __doc__)
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

"""Build SFT conversations (a datasets.DatasetDict) from annotated exam pages.

    python data_builders/build_sft.py --data runs/synth --out runs/sft \
        [--config configs/data/default.yaml] [key=value ...]
    python data_builders/build_sft.py --data last_term/ --data reviewed/ --out runs/sft data_weights=[1,2]

Several --data folders (oldest first) are built as one set: a page in several (the same image) is taken once, from
the newest, in the split the oldest gave it (gbtrain.data.merge).

Keys (see gbtrain.config.BuildConfig): more_data, data_weights, target_count, seed, coords, vision.min_pixels,
vision.max_pixels,
max_length, tokenizer, validation_share, test_share, mix.levels.L1, mix.modes.answer-free,
mix.three_turn, l2_margin, lenient, workers.
"""

from __future__ import annotations

import argparse
import json
import time

from gbtrain.cli import HelpFormatter, user_errors
from gbtrain.config import keys_epilog, load_config
from gbtrain.data.build_config import BuildConfig
from gbtrain.data.sft_dataset import build_sft_dataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter, epilog=keys_epilog(BuildConfig))
    ap.add_argument("--config", help="YAML config (configs/data/*.yaml)")
    ap.add_argument("--data", action="append", help="GradingBench-layout folder (same as data=...); again for "
                                                    "further folders, oldest first (more_data=[...])")
    ap.add_argument("--out", help="output folder (same as out=...)")
    ap.add_argument("--lenient", action="store_true", help="skip bad records, counted and listed in the card")
    ap.add_argument("overrides", nargs="*", help="key=value config overrides")
    args = ap.parse_intermixed_args()  # key=value may come before, between or after the flags
    overrides = list(args.overrides)
    if args.data:
        overrides += [f"data={json.dumps(args.data[0])}"]
        overrides += [f"more_data={json.dumps(args.data[1:])}"] if len(args.data) > 1 else []
    overrides += [f"out={args.out}"] if args.out else []
    overrides += ["lenient=true"] if args.lenient else []
    with user_errors("build_sft"):
        cfg = load_config(BuildConfig, args.config, overrides)
        start = time.perf_counter()
        stats = build_sft_dataset(cfg)
    took = time.perf_counter() - start
    for line in stats["reader_warnings"]:
        print(f"warning: {line}")
    if stats["skipped_records"]:
        print(f"skipped {len(stats['skipped_records'])} bad record(s) (--lenient), listed in the card")
    print(f"wrote {stats['total']} conversations to {cfg.out} in {took:.1f} s; splits {stats['by']['split']}")
    if stats["sources"]:
        print("folders: " + "; ".join(f"{s['folder']} (weight {s['weight']:g}): {s['records']} records"
                                      for s in stats["sources"]))
    if stats["empty_targets"]:
        print(f"warning: conversations whose target is empty (records with no answer marks), by level: "
              f"{stats['empty_targets']} (listed in the card; a page whose answers were lost in conversion is never "
              f"written)")
    if stats["replaced_pages"]:
        print(f"pages taken from a newer folder: {len(stats['replaced_pages'])} (listed in the card)")
    if stats["dropped_over_max_length"]:
        print(f"dropped for length > {cfg.max_length}: {stats['dropped_over_max_length']}")
    if stats["shortfall"]:
        print(f"fewer than the configured mix (too few records): {stats['shortfall']}")
    print(f"card: {cfg.out}/card.md")


if __name__ == "__main__":
    main()

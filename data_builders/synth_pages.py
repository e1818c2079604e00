"""Write a synthetic exam-page dataset in the GradingBench layout (the embedded default data).

    python data_builders/synth_pages.py --out runs/synth --pages 700 --seed 0 [--wrong-share 0.3]
"""

from __future__ import annotations

import argparse
import sys
import time

from gbtrain.synth.generate import SynthOptions, generate_dataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (GradingBench layout)")
    ap.add_argument("--pages", type=int, default=700)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wrong-share", type=float, default=0.30, help="share of wrong answers (>= 0.10)")
    ap.add_argument("--blank-share", type=float, default=0.04, help="share of answers left blank")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: CPU count, at most 8)")
    args = ap.parse_args()
    start = time.perf_counter()
    try:
        levels = generate_dataset(args.out, args.pages, args.seed, SynthOptions(args.wrong_share, args.blank_share),
                                  workers=args.workers)
    except (ValueError, OSError) as e:  # bad options, or an output folder that cannot be written
        sys.exit(f"synth_pages: {e}")
    counts = ", ".join(f"{lvl}: {len(recs)} records" for lvl, recs in sorted(levels.items()))
    print(f"wrote {args.pages} pages to {args.out} in {time.perf_counter() - start:.1f} s ({counts})")


if __name__ == "__main__":
    main()

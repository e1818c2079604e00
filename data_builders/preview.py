"""Validate a GradingBench-layout folder and draw its ground truth on a few pages, to check a conversion (or any
dataset) by eye before training on it.

    python data_builders/preview.py --data DATA --out PREVIEW [--pages 8] [--level L3]

Prints the counts per level (records, answer groups, question regions, labels, subjects, stages, question types)
and every problem the reader finds in lenient mode (each naming file and record); writes PREVIEW/<record>.png for
`--pages` records spread over the level (answer boxes green = right, red = wrong, orange = other, with id, verdict,
"transcription" | reference; question regions blue) and PREVIEW/summary.json.
"""

from __future__ import annotations

import argparse

from gbtrain.cli import HelpFormatter, user_errors
from gbtrain.preview import preview, summary_lines
from gbtrain.vocabulary import LEVELS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("--data", required=True, help="GradingBench-layout folder")
    ap.add_argument("--out", required=True, help="folder for the drawn pages and summary.json")
    ap.add_argument("--pages", type=int, default=8, help="records to draw (spread over the level)")
    ap.add_argument("--level", choices=LEVELS, help="level to draw (default: L3, else the first present)")
    args = ap.parse_args()
    with user_errors("preview"):
        summary = preview(args.data, args.out, args.pages, args.level)
    print("\n".join(summary_lines(summary)))
    drawn = summary["drawn"]
    print(f"drew {len(drawn['files'])} {drawn['level']} records into {args.out}")


if __name__ == "__main__":
    main()

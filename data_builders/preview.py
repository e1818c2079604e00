"""Validate a GradingBench-layout folder and draw its ground truth on a few pages, to check a conversion (or any
dataset) by eye before training on it.

    python data_builders/preview.py --data DATA --out PREVIEW [--pages 8] [--level L3]

Prints the counts per level (records, answer groups, question regions, labels, subjects, stages, question types)
and every problem the reader finds in lenient mode (each naming file and record); writes PREVIEW/<record>.png for
`--pages` records spread over the level (answer boxes green = right, red = wrong, orange = other, with id, verdict,
"transcription" | reference; question regions blue) and PREVIEW/summary.json.
"""

from __future__ import annotations

from gbtrain.cli import parse_options, user_errors
from gbtrain.data.preview import PreviewRun, preview, summary_lines


def main() -> None:
    args = parse_options(PreviewRun, __doc__)
    with user_errors("preview"):
        summary = preview(args.data, args.out, args.pages, args.level)
    print("\n".join(summary_lines(summary)))
    drawn = summary["drawn"]
    print(f"drew {len(drawn['files'])} {drawn['level']} records into {args.out}")


if __name__ == "__main__":
    main()

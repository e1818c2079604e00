"""The gains of SFT over the base model, metric by metric and setting by setting.

    python eval/compare.py BASE/report.json SFT/report.json --out gains.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gbtrain.reports import compare, compare_plot


def _report(path: str) -> dict:
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    if not isinstance(report, dict) or not {"meta", "settings", "table2"} <= set(report):
        raise ValueError(f"{path} is not a report.json written by eval/run_eval.py")
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("sft")
    ap.add_argument("--out", required=True, help="Markdown file; the plot goes beside it (.png)")
    args = ap.parse_args()
    try:
        base, sft = (_report(p) for p in (args.base, args.sft))
        text, rows = compare(base, sft)
    except ValueError as e:
        sys.exit(f"compare: {e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    compare_plot(rows, out.with_suffix(".png"))
    print(text)


if __name__ == "__main__":
    main()

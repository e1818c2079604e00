"""The gains of SFT over the base model, metric by metric and setting by setting.

    python eval/compare.py BASE/report.json SFT/report.json --out gains.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gbtrain.reports import compare, compare_plot


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("sft")
    ap.add_argument("--out", required=True, help="Markdown file; the plot goes beside it (.png)")
    args = ap.parse_args()
    base, sft = (json.loads(Path(p).read_text(encoding="utf-8")) for p in (args.base, args.sft))
    text, rows = compare(base, sft)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    compare_plot(rows, out.with_suffix(".png"))
    print(text)


if __name__ == "__main__":
    main()

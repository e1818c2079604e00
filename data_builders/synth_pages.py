"""Write a synthetic exam-page dataset in the GradingBench layout (the embedded default data).

    python data_builders/synth_pages.py --out runs/synth --pages 700 --seed 0 [--profile legible] [--wrong-share 0.3]

The folder records its options in synth_pages.json, written last: a rerun may replace such a folder, and refuses
one holding any other dataset (or a generation that did not finish).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from gbtrain.cli import parse_options, user_errors
from gbtrain.data.synth.generate import SynthRun, generate_dataset
from gbtrain.outputs import SYNTH_RECORD, claim_rebuilt_folder


def check_out(out: str) -> None:
    """Refuse an empty name (it writes into the current folder) and a folder holding annotations this script did
    not finish writing: a copy of the real data would lose them."""
    folder = Path(out)
    claim_rebuilt_folder(out, "--out", "synth_pages",
                         (folder / SYNTH_RECORD).is_file() or not (folder / "annotations").exists())


def main() -> None:
    args = parse_options(SynthRun, __doc__)
    start = time.perf_counter()
    with user_errors("synth_pages"):  # bad options, or an output folder that cannot be written
        check_out(args.out)
        options = args.options()
        levels = generate_dataset(args.out, args.pages, args.seed, options, workers=args.workers)
        record = {"pages": args.pages, "seed": args.seed, "profile": args.profile, **asdict(options)}
        (Path(args.out) / SYNTH_RECORD).write_text(json.dumps(record) + "\n", encoding="utf-8")
    counts = ", ".join(f"{lvl}: {len(recs)} records" for lvl, recs in sorted(levels.items()))
    print(f"wrote {args.pages} pages to {args.out} in {time.perf_counter() - start:.1f} s ({counts})")


if __name__ == "__main__":
    main()

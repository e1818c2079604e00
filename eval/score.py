"""Score one setting's predictions with the GradingBench gated metric and localization mAP.

    python eval/score.py --data DIR --level L1|L2|L3 --mode answer-free|answer-based \
        --predictions P.jsonl --coords qwen25 [--min-pixels N --max-pixels N] \
        [--judge rule|vllm:MODEL|openai:MODEL[@URL]] [--match-radius 1.0] [--exclude-other] \
        [--allow-duplicates] --out report.json

P.jsonl holds one {"id": <record id>, "response": <raw model text>} per line. Exit codes: 0 scored (a response
that cannot be parsed is counted, with its reason), 2 a bad option, prediction file (malformed line, duplicated
ids), annotation, judge endpoint or output path (one line on stderr; gbtrain.cli).
"""

from __future__ import annotations

import argparse
import sys

from gbtrain.annotations import load_level
from gbtrain.backends import VLLMMemory, judge_from_spec
from gbtrain.cli import HelpFormatter, user_errors
from gbtrain.coords import CONVENTIONS, PixelBudget
from gbtrain.judges import judge_usage
from gbtrain.scoring import ScoreOptions, read_predictions, score, write_report
from gbtrain.vocabulary import LEVELS, MODES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--level", required=True, choices=LEVELS)
    ap.add_argument("--mode", required=True, choices=MODES)
    ap.add_argument("--predictions", required=True)
    ap.add_argument("--coords", required=True, choices=CONVENTIONS, help="the convention the model was prompted with")
    ap.add_argument("--min-pixels", type=int, default=PixelBudget().min_pixels)
    ap.add_argument("--max-pixels", type=int, default=PixelBudget().max_pixels)
    ap.add_argument("--judge", default="rule", help=judge_usage())
    ap.add_argument("--kv-cache-gib", type=float, default=None,
                    help="vllm judge: KV-cache size in GiB (default on CPU: a quarter of free memory, 0.5-4 GiB)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vllm judge on a GPU")
    ap.add_argument("--match-radius", type=float, default=1.0, help="x the group's box diagonal")
    ap.add_argument("--exclude-other", action="store_true", help="drop half-right/unanswered/unknown groups")
    ap.add_argument("--allow-duplicates", action="store_true", help="keep the last line of a duplicated id")
    ap.add_argument("--lenient", action="store_true", help="skip bad annotation records (listed)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with user_errors("score"):  # options first: a bad radius or pixel budget must not score a file as 0.0
        opts = ScoreOptions(args.level, args.mode, args.coords, PixelBudget(args.min_pixels, args.max_pixels),
                            args.match_radius, args.exclude_other, args.allow_duplicates, args.judge)
        judge = judge_from_spec(args.judge, VLLMMemory(args.kv_cache_gib, args.gpu_memory_utilization))
        loaded = load_level(args.data, args.level, lenient=args.lenient)
        preds = read_predictions(args.predictions, allow_duplicates=args.allow_duplicates)
        for problem in loaded.skipped + loaded.warnings:
            print(f"score: warning: {problem}", file=sys.stderr)
        report = score(loaded.records, preds, opts, judge)
        write_report(report, args.out)
    cov, replies = report["coverage"], report["judge_replies"]
    if replies["unclear"]:
        print(f"score: warning: the judge gave {replies['unclear']} of {replies['asked']} replies that are neither "
              f"yes nor no (counted as not equivalent; examples in {args.out} judge_replies)", file=sys.stderr)
    print(f"{args.level} {args.mode}: accuracy {report['accuracy']:.4f} over {report['n_groups']} groups "
          f"(localized {report['localized']:.4f}, recognized {report['recognized']:.4f}, "
          f"reasoned {report['reasoned']:.4f}); mAP@[.2:.5] {report['map_20_50']:.2f}; "
          f"missing {cov['missing']}, unparsable {cov['unparsable']}, unexpected {cov['unexpected']} -> {args.out}")

if __name__ == "__main__":
    main()

"""Evaluate a checkpoint on the GradingBench settings: predictions, scores, tables, plots, overlays.

    python eval/run_eval.py --model PATH_OR_ID --data DIR --out OUTDIR [--settings all | L1-af,L3-ab,...]
        [--three-turn] [--diagnostics] [--backend vllm|hf|openai] [--judge rule|vllm:MODEL|openai:MODEL]
        [--coords qwen25|rel1000|...] [--tensor-parallel-size N] [--data-parallel-size N] [--limit N]

Predictions are appended per batch to OUTDIR/predictions/<setting>.jsonl; a rerun resumes (--overwrite
redoes). OUTDIR/report.json, report.md, plots/*.png and overlays/*.png are written at the end.
"""

from __future__ import annotations

import argparse
import sys

from gbtrain.cli import HelpFormatter, add_model_arguments, user_errors
from gbtrain.evaluation import EvalRun, evaluate_checkpoint
from gbtrain.judges import JUDGES
from gbtrain.reports import markdown
from gbtrain.vocabulary import one_of


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint folder or hub id (openai: the served model name)")
    ap.add_argument("--data", required=True, help="GradingBench-layout folder")
    ap.add_argument("--out", required=True)
    ap.add_argument("--settings", default="all", help="all, or a list such as L1-af,L3-ab")
    ap.add_argument("--three-turn", action="store_true", help="also run the locate / solve / compare decomposition")
    ap.add_argument("--diagnostics", action="store_true", help="L1 localization/recognition/reasoning only")
    add_model_arguments(ap)
    ap.add_argument("--judge", default="rule", help=one_of(k.usage for k in JUDGES.values()))
    ap.add_argument("--l2-margin", type=float, default=None,
                    help="margin of L2 regions derived from answers (pages without question marks); default: the "
                         "checkpoint's training build's, else 0.02")
    ap.add_argument("--batch-size", type=int, default=256, help="records per backend call and flushed chunk")
    ap.add_argument("--limit", type=int, default=None, help="first N records of each level")
    ap.add_argument("--overwrite", action="store_true", help="redo settings instead of resuming")
    ap.add_argument("--overlays", type=int, default=4, help="records drawn per L1/L3 setting")
    return ap


def main() -> None:
    args = parser().parse_args()
    with user_errors("run_eval"):
        report = evaluate_checkpoint(EvalRun(**vars(args)))
    print(markdown(report))
    for name, rep in report["settings"].items():
        if rep["judge_replies"]["unclear"]:
            print(f"run_eval: warning: {name}: the judge gave {rep['judge_replies']['unclear']} of "
                  f"{rep['judge_replies']['asked']} replies that are neither yes nor no (counted as not "
                  f"equivalent; examples in report.json judge_replies)", file=sys.stderr)


if __name__ == "__main__":
    main()

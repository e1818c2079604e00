"""Choose a checkpoint by the gated metric: evaluate every checkpoint a training run saved, write a table and plot of
accuracy and mAP by step, and name the best one.

    python eval/select_checkpoint.py --run runs/sft-7b-lora --data DATA --out runs/select-7b-lora \
        [--settings L1-af,L3-ab] [--split validation|test|all] [--limit N] [--metric accuracy|map] \
        [--backend vllm|hf] [--keep-merged true|false] [--copy-best runs/sft-7b-best]

Every checkpoint-N folder of --run (and its final model when no checkpoint has its step) is evaluated like
eval/run_eval.py on the pages of --data that the training build put in --split (a LoRA checkpoint merged into its
base under OUT/merged first); OUT/<checkpoint>/ holds each evaluation, OUT/selection.csv, selection.md,
selection.png and selection.json the table, the plot and the best. A rerun evaluates only what is not scored yet; one
with other inputs or settings is refused (--overwrite discards the earlier work).
"""

from __future__ import annotations

import argparse
import sys

from gbtrain.cli import HelpFormatter, add_model_arguments, user_errors
from gbtrain.judges import JUDGES
from gbtrain.selection import SelectRun, markdown, select_checkpoint
from gbtrain.vocabulary import one_of


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("--run", required=True, help="training output_dir (recipes/sft_qwen.py output_dir=...)")
    ap.add_argument("--data", required=True, help="GradingBench-layout folder (the training set's source)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--settings", default="L1-af,L3-ab", help="single-turn settings, e.g. L1-af,L2-ab,L3-af (or all)")
    ap.add_argument("--split", default="validation", choices=("validation", "test", "all"),
                    help="pages of --data the training build put in this split (all: a held-out folder)")
    ap.add_argument("--limit", type=int, default=None, help="first N records of each level")
    ap.add_argument("--metric", default="accuracy", choices=("accuracy", "map"),
                    help="accuracy: mean gated accuracy, ties by mean mAP; map: the reverse; then the earlier step")
    ap.add_argument("--base", default=None, help="LoRA runs: the base model (default: the one the run recorded)")
    ap.add_argument("--allow-other-base", action="store_true",
                    help="merge although --base is not the adapters' recorded base (same weights, other name)")
    add_model_arguments(ap)  # checkpoints are local models: vllm or hf
    ap.add_argument("--judge", default="rule", help=one_of(k.usage for k in JUDGES.values()))
    ap.add_argument("--l2-margin", type=float, default=None, help="default: the run's training build's")
    ap.add_argument("--batch-size", type=int, default=256, help="records per backend call")
    ap.add_argument("--keep-merged", default="true", choices=("true", "false"),
                    help="keep LoRA checkpoints merged under OUT/merged (false: deleted after scoring)")
    ap.add_argument("--copy-best", default=None, help="copy (LoRA: merge) the best checkpoint into this folder")
    ap.add_argument("--overwrite", action="store_true", help="discard the earlier evaluations in --out and redo")
    return ap


def main() -> None:
    args = parser().parse_args()
    with user_errors("select_checkpoint"):
        summary = select_checkpoint(SelectRun(**{**vars(args), "keep_merged": args.keep_merged == "true"}))
    print(markdown(summary))
    for row in summary["rows"]:
        if row["status"] != "ok":
            print(f"select_checkpoint: warning: {row['checkpoint']} not evaluated: {row['problem']}", file=sys.stderr)
    best = summary["best"]
    print(f"best: {best['checkpoint']} (step {best['step']}), {best['path']}; evaluated now: "
          f"{len(summary['evaluated_now'])}, scored earlier: "
          f"{len(summary['rows']) - len(summary['evaluated_now']) - len(summary['failed'])}, failed: "
          f"{len(summary['failed'])}" + (f"; copied to {summary['copied_to']}" if summary["copied_to"] else ""))


if __name__ == "__main__":
    main()

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

from gbtrain.cli import user_errors
from gbtrain.selection import SelectRun, markdown, select_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    ap.add_argument("--backend", default="vllm", choices=("vllm", "hf"))
    ap.add_argument("--judge", default="rule", help="rule, vllm:MODEL or openai:MODEL[@URL]")
    ap.add_argument("--coords", default=None, help="default: the run's recorded convention")
    ap.add_argument("--min-pixels", type=int, default=None, help="default: the run's recorded pixel budget")
    ap.add_argument("--max-pixels", type=int, default=None)
    ap.add_argument("--l2-margin", type=float, default=None, help="default: the run's training build's")
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--max-model-len", type=int, default=32768)
    ap.add_argument("--tensor-parallel-size", type=int, default=1)
    ap.add_argument("--data-parallel-size", type=int, default=1)
    ap.add_argument("--kv-cache-gib", type=float, default=None, help="vllm: KV-cache size in GiB")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    ap.add_argument("--batch-size", type=int, default=256, help="records per backend call")
    ap.add_argument("--hf-batch-size", type=int, default=8)
    ap.add_argument("--keep-merged", default="true", choices=("true", "false"),
                    help="keep LoRA checkpoints merged under OUT/merged (false: deleted after scoring)")
    ap.add_argument("--copy-best", default=None, help="copy (LoRA: merge) the best checkpoint into this folder")
    ap.add_argument("--overwrite", action="store_true", help="discard the earlier evaluations in --out and redo")
    args = ap.parse_args()
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

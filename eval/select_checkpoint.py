"""Choose a checkpoint by the gated metric: evaluate every checkpoint a training run saved, write a table and plot of
accuracy and mAP by step, and name the best one.

    python eval/select_checkpoint.py --run runs/sft-7b-lora --data DATA --out runs/select-7b-lora \
        [--settings L1-af,L3-ab] [--split validation|test|all] [--limit N] [--metric accuracy|map] \
        [--backend vllm|hf] [--no-keep-merged] [--copy-best runs/sft-7b-best] \
        [--target-accuracy 0.95 | --review-budget 0.2 | --max-error 0.05 [--delta 0.05] [--certify items|points]]

Every checkpoint-N folder of --run (and its final model when no checkpoint has its step) is evaluated like
eval/run_eval.py on the pages of --data that the training build put in --split (a LoRA checkpoint merged into its
base under OUT/merged first); OUT/<checkpoint>/ holds each evaluation, OUT/selection.csv, selection.md,
selection.png and selection.json the table, the plot and the best. With --target-accuracy, --review-budget or
--max-error (certified over the validation pages, at --delta divided among the checkpoints compared), the review
threshold of selective grading is chosen on the best checkpoint's evaluation of each L3 setting and recorded
in OUT/selective_threshold.json and the --copy-best folder, where eval/grade_pages.py applies it. A rerun evaluates
only what is not scored yet; one with other inputs or settings is refused (--overwrite discards the earlier work).
"""

from __future__ import annotations

import sys

from gbtrain.cli import parse_options, user_errors
from gbtrain.evaluation.selection import SelectRun, markdown, select_checkpoint


def main() -> None:
    sel = parse_options(SelectRun, __doc__)
    with user_errors("select_checkpoint"):
        summary = select_checkpoint(sel)
    print(markdown(summary))
    for row in summary["rows"]:
        if row["status"] != "ok":
            print(f"select_checkpoint: warning: {row['checkpoint']} not evaluated: {row['problem']}", file=sys.stderr)
    chosen = summary["selective"] or {"settings": {}}
    for name, c in chosen["settings"].items():
        if c["threshold"] is None:
            print(f"select_checkpoint: warning: no review threshold for {name}: {c['problem']}", file=sys.stderr)
    best = summary["best"]
    print(f"best: {best['checkpoint']} (step {best['step']}), {best['path']}; evaluated now: "
          f"{len(summary['evaluated_now'])}, scored earlier: "
          f"{len(summary['rows']) - len(summary['evaluated_now']) - len(summary['failed'])}, failed: "
          f"{len(summary['failed'])}" + (f"; copied to {summary['copied_to']}" if summary["copied_to"] else ""))


if __name__ == "__main__":
    main()

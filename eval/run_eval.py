"""Evaluate a checkpoint on the GradingBench settings: predictions, scores, tables, plots, overlays.

    python eval/run_eval.py --model PATH_OR_ID --data DIR --out OUTDIR [--settings all | L1-af,L3-ab,...]
        [--three-turn] [--diagnostics] [--backend vllm|hf|openai] [--judge rule|vllm:MODEL|openai:MODEL]
        [--coords qwen25|rel1000|...] [--tensor-parallel-size N] [--data-parallel-size N] [--limit N]

Predictions are appended per batch to OUTDIR/predictions/<setting>.jsonl; a rerun resumes (--overwrite
redoes). OUTDIR/report.json, report.md, plots/*.png and overlays/*.png are written at the end.
"""

from __future__ import annotations

import sys

from gbtrain.cli import parse_options, user_errors
from gbtrain.evaluation.reports import markdown
from gbtrain.evaluation.run import EvalRun, evaluate_checkpoint


def main() -> None:
    run = parse_options(EvalRun, __doc__)
    with user_errors("run_eval"):
        report = evaluate_checkpoint(run)
    print(markdown(report))
    trained = report["meta"]["held_out"]["training_records"]
    if trained:
        print(f"run_eval: warning: {trained} of the evaluated records are pages the model trained on "
              f"({report['meta']['held_out']['why']}): pass --split test for the held-out ones", file=sys.stderr)
    for name, rep in report["settings"].items():
        if rep["judge_replies"]["unclear"]:
            print(f"run_eval: warning: {name}: the judge gave {rep['judge_replies']['unclear']} of "
                  f"{rep['judge_replies']['asked']} replies that are neither yes nor no (counted as not "
                  f"equivalent; examples in report.json judge_replies)", file=sys.stderr)


if __name__ == "__main__":
    main()

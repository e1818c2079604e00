"""Score one setting's predictions with the GradingBench gated metric and localization mAP.

    python eval/score.py --data DIR --level L1|L2|L3 --mode answer-free|answer-based \
        --predictions P.jsonl --coords qwen25 [--min-pixels N --max-pixels N --factor 28] \
        [--judge rule|vllm:MODEL|openai:MODEL[@URL]] [--match-radius 1.0] [--exclude-other] \
        [--allow-duplicates] [--answer-tolerance 0.05] [--ignore-missing] [--bootstrap-resamples 1000] \
        [--bootstrap-seed 0] --out report.json
    python eval/score.py --self-check

P.jsonl holds one {"id": <record id>, "response": <raw model text>} per line. Writes report.json and, beside it,
report.questions.csv (one row per annotated group: its gates, matched box, IoU, CER, F1, ANLS, verdict and points).
A missing or unparsable reply fails its groups unless --ignore-missing, which scores the answered records only (and
says so).
--self-check scores five reference items with perfect predictions and exits 1 unless every metric is perfect.
Exit codes: 0 scored (a response that cannot be parsed is counted, with its reason), 2 a bad option, prediction file
(malformed line, duplicated ids), annotation, judge endpoint or output path (one line on stderr; gbtrain.cli).
"""

from __future__ import annotations

import sys

from gbtrain.cli import parse_options, user_errors
from gbtrain.metric.scoring import ScoreRun, score_file, scorer_sha256, self_check


def main() -> None:
    if sys.argv[1:] == ["--self-check"]:
        problems = self_check()
        for problem in problems:
            print(f"score: self-check: {problem}", file=sys.stderr)
        print(f"self-check {'failed' if problems else 'passed'}: five reference items, perfect predictions, both "
              f"modes (scorer {scorer_sha256()[:12]})")
        sys.exit(1 if problems else 0)
    run = parse_options(ScoreRun, __doc__)
    with user_errors("score"):
        report, problems = score_file(run)
    for problem in problems:
        print(f"score: warning: {problem}", file=sys.stderr)
    cov, replies = report["coverage"], report["judge_replies"]
    if replies["unclear"]:
        print(f"score: warning: the judge gave {replies['unclear']} of {replies['asked']} replies that are neither "
              f"yes nor no (counted as not equivalent; examples in {run.out} judge_replies)", file=sys.stderr)
    if run.ignore_missing:
        print(f"score: missing and unparsable replies ignored (--ignore-missing): scored the {report['n_records']} "
              f"records answered, {cov['missing']} missing and {cov['unparsable']} unparsable left out",
              file=sys.stderr)
    interval = report["intervals"]["accuracy"]
    r = report["map_ranked"]
    ranked = f"ranked by confidence: {r['value']:.2f}" if r["value"] is not None else r["undefined"]
    ci = f" [{interval[0]:.4f}, {interval[1]:.4f}]" if interval else ""
    print(f"{run.level} {run.mode}: accuracy {report['accuracy']:.4f}{ci} over {report['n_groups']} groups "
          f"(localized {report['localized']:.4f}, recognized {report['recognized']:.4f}, "
          f"reasoned {report['reasoned']:.4f}); mAP@[.2:.5] {report['map_20_50']:.2f} ({ranked}); "
          f"missing {cov['missing']}, unparsable {cov['unparsable']}, unexpected {cov['unexpected']} -> {run.out}")
    soft, gate = report["soft_scores"], report["answer_gate"]
    print("soft scores: " + ", ".join(f"{k} {v:.4f}" for k, v in soft.items() if v is not None)
          + (f"; answers decided by rule {gate['by_rule']}, by the judge {gate['by_judge']}, undecided "
             f"{gate['undecided']} (failed); {gate['no_reference']} groups without a reference answer" if run.mode ==
             "answer-free" else ""))
    points = report["points"]
    if points:
        m, pcov, k = points["model"], points["coverage"], points["model"]["kappa"]["value"]
        print(f"points over {points['n']} groups: MAE {m['mae']:.3f} ({m['normalized_mae']:.3f} of the full score), "
              f"bias {m['mean_signed_error']:+.3f}, kappa {'undefined' if k is None else f'{k:.3f}'}, same band "
              f"{m['exact_band']:.3f}; missing {pcov['missing']}, out of range {pcov['out_of_range']}, unexpected "
              f"{pcov['unexpected']}")

if __name__ == "__main__":
    main()

"""Agreement of a model's points with teachers' points, for scores made anywhere (docs/metric.md#points).

    python eval/agreement.py --teacher T.jsonl --model M.jsonl --out report.json \
        [--point-bands 0.6,0.85] [--large-error 0.5] [--allow-missing] [--allow-duplicates]

T.jsonl holds one {"submission", "question", "score", "full_score"} per line (optional "score_2", a second teacher's,
and "question_type"); M.jsonl one {"submission", "question", "score"}. The report gives the points figures of
eval/score.py; submissions appear in it only as anonymous numbers. Exit codes: 0 reported, 2 a bad option or line,
a key in one file only (without --allow-missing) or twice in the model's (without --allow-duplicates), an unwritable
--out (one line on stderr; gbtrain.cli).
"""

from __future__ import annotations

from gbtrain.cli import parse_options, user_errors
from gbtrain.metric.agreement import AgreementRun, agreement_file


def _value(figure: dict) -> str:
    return "undefined" if figure["value"] is None else f"{figure['value']:.3f}"


def main() -> None:
    run = parse_options(AgreementRun, __doc__)
    with user_errors("agreement"):
        report = agreement_file(run)
    p = report["points"]
    m, cov = p["model"], p["coverage"]
    print(f"agreement: {p['n']} questions of {report['submissions']} submissions: MAE {m['mae']:.3f} points "
          f"({m['normalized_mae']:.3f} of the full score), bias {m['mean_signed_error']:+.3f}, max error "
          f"{m['max_error']:.3f}, large errors {m['large_errors']}; kappa {_value(m['kappa'])} (linear "
          f"{_value(m['weighted_kappa']['linear'])}, quadratic {_value(m['weighted_kappa']['quadratic'])}), same band "
          f"{m['exact_band']:.3f}, same points {m['exact_points']:.3f}; missing {cov['missing']}, unexpected "
          f"{cov['unexpected']}, duplicate {cov['duplicate']}, out of range {cov['out_of_range']} -> {run.out}")
    lost, given = m["costs_marks"], m["gives_marks"]
    print(f"agreement: the model cost students {lost['points']:g} points on {lost['n']} questions (below the "
          f"teacher) and gave {given['points']:g} on {given['n']} (above)")
    if p["second_teacher"]:
        t = p["second_teacher"]["teacher_2"]
        print(f"agreement: second teacher on {t['n']} questions (the human ceiling): MAE {t['mae']:.3f}, kappa "
              f"{_value(t['kappa'])}, same band {t['exact_band']:.3f}")


if __name__ == "__main__":
    main()

"""The gains of SFT over the base model, metric by metric and setting by setting, each with its paired 95%
interval and (the gates) its exact McNemar p-value (docs/metric.md#intervals-and-paired-gains).

    python eval/compare.py BASE/report.json SFT/report.json --out gains.md [--bootstrap-resamples 1000]
        [--bootstrap-seed 0]

Reads each report's outcomes.jsonl beside it (checked by the hash its report records). Writes gains.md, gains.png and
gains.html (a self-contained page that links each run's report.html).
"""

from __future__ import annotations

import json
from pathlib import Path

from gbtrain.cli import parse_options, user_errors
from gbtrain.evaluation.html_report import write_comparison_page
from gbtrain.evaluation.reports import METRICS, CompareRun, compare, compare_plot, read_outcomes
from gbtrain.outputs import RUN_RECORD


def _report(path: str) -> dict:
    """A report.json with every field compare reads (an older, edited or truncated file is refused, not half-read)."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    if not _complete(report):
        raise ValueError(f"{path} is not a report.json written by eval/run_eval.py")
    return report


def _complete(report) -> bool:
    def setting_ok(s) -> bool:
        return (isinstance(s, dict) and {"n_groups", "n_records", "coverage"} <= set(s)
                and all(isinstance(s.get(m), int | float) and not isinstance(s.get(m), bool) for m in METRICS))

    return (isinstance(report, dict) and isinstance(report.get("meta"), dict) and isinstance(report.get("table2"), dict)
            and isinstance(report.get("settings"), dict) and all(map(setting_ok, report["settings"].values())))


def _output(out: str, inputs: tuple[str, ...]) -> Path:
    """The Markdown path; it and the plot and page beside it must not be one of the reports being compared."""
    md = Path(out)
    written = {md.resolve(), md.with_suffix(".png").resolve(), md.with_suffix(".html").resolve()}
    clash = [p for p in inputs if Path(p).resolve() in written]
    if clash:
        raise ValueError(f"--out {out} would overwrite the input {clash[0]}: choose another --out")
    folder = md.resolve().parent
    if (folder / RUN_RECORD).is_file() or (folder / "report.json").is_file():
        # gains.md/.png/.html beside an evaluation's own report.md/.html would replace them (--out BASE/report.md)
        raise ValueError(f"--out {out} lies in an evaluation's folder ({folder}): write the comparison to a folder "
                         f"of its own, e.g. --out gains.md")
    return md


def main() -> None:
    args = parse_options(CompareRun, __doc__)
    with user_errors("compare"):
        out = _output(args.out, (args.base, args.sft))
        base, sft = (_report(p) for p in (args.base, args.sft))
        outcomes = read_outcomes(args.base, base), read_outcomes(args.sft, sft)
        text, rows = compare(base, sft, outcomes, args.interval_options())
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        compare_plot(rows, out.with_suffix(".png"))
        write_comparison_page(out.with_suffix(".html"), base, sft, text, rows, out.with_suffix(".png"),
                              (args.base, args.sft))
    print(text)


if __name__ == "__main__":
    main()

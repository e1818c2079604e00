"""The review loop: teachers correct the model's grades in a sheet or in Label Studio, and their corrections come back
as a re-grade rate and as training data.

    python eval/review.py export --graded GRADED [--image-url URL-PREFIX]
    python eval/review.py import --graded GRADED --reviewed FILE --out DIR [--box-iou 0.5] [--subject Mathematics]

export writes GRADED/review/ (GRADED: a grade_pages --out): review.csv (one row per item, with empty columns
reviewed, correctness, score and reason for the teacher), labelstudio_tasks.json (one task per page, the model's
boxes, verdicts, transcriptions and points as predictions), labelstudio_config.xml (the project's labeling config)
and images/ (the pages the tasks show). import reads the reviewed review.csv or Label Studio's JSON export of those
tasks and writes DIR/review_report.json and .md (the re-grade rate = reviewed items the teacher changed / reviewed
items, overall and per question type; what changed; the size of point changes; the reasons given; what was not
reviewed) and the pages reviewed whole as a GradingBench folder (DIR/images, annotations, manifest) for
data_builders/build_sft.py.
"""

from __future__ import annotations

import sys

from gbtrain.cli import parse_options, user_errors
from gbtrain.grading.review import ReviewRun
from gbtrain.grading.review_export import export_review
from gbtrain.grading.review_import import import_review


def main() -> None:
    run = parse_options(ReviewRun, __doc__)
    with user_errors("review"):
        if run.action == "export":
            done = export_review(run)
            print(f"review of {done['pages']} pages, {done['items']} items ({done['not_shown']} without a box: in the "
                  f"sheet only) and {done['missing']} keyed questions found on no page (a row and a region each, "
                  f"for the teacher to place) written to {done['folder']}: review.csv, labelstudio_tasks.json, "
                  f"labelstudio_config.xml, images/")
            return
        rep = import_review(run)
    rate = "n/a" if rep["regrade_rate"] is None else f"{100 * rep['regrade_rate']:.1f}%"
    print(f"re-grade rate {rate}: {rep['changed']} of {rep['reviewed']} reviewed items changed "
          f"({', '.join(f'{k} {v}' for k, v in rep['changes'].items() if v) or 'nothing'}); {rep['unreviewed']} items "
          f"not reviewed")
    levels = ", ".join(f"{level} {n}" for level, n in sorted(rep["written"]["levels"].items()))
    print(f"report: {run.out}/review_report.md; reviewed pages for build_sft: {rep['written']['records']} pages, "
          f"{rep['written']['marks']} marks in {run.out} (records: {levels or 'none'})")
    left_out = rep["written"]["left_out"]
    if left_out:
        print(f"review: warning: {len(left_out)} reviewed pages left out of the training data (first: page "
              f"{left_out[0]['page']}: {left_out[0]['why']}); each is named in review_report.md", file=sys.stderr)


if __name__ == "__main__":
    main()

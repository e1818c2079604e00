"""Write the docs' key tables from the options dataclasses, so that the docs say what the code does.

    python scripts/doc_keys.py [--check]

Each table lies between `<!-- keys:NAME -->` and `<!-- /keys:NAME -->` in the docs page it belongs to and is
gbtrain.config.keys_table of one dataclass: the builder's config keys (docs/data.md), the recipe's (docs/training.md),
the options every tool that asks a checkpoint shares (ModelOptions) and each evaluation tool's own
(docs/evaluation.md), and the review loop's (docs/review.md). tests/core/test_config.py fails when one differs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from pathlib import Path

from gbtrain.cli import parse_options, user_errors
from gbtrain.config import keys_table, option
from gbtrain.data.build_config import BuildConfig
from gbtrain.evaluation.run import EvalRun
from gbtrain.evaluation.selection import SelectRun
from gbtrain.grading.grade import GradeRun
from gbtrain.grading.review import ReviewRun
from gbtrain.inference.registry import ModelOptions
from gbtrain.metric.agreement import AgreementRun
from gbtrain.metric.scoring import ScoreRun
from gbtrain.train.config import TrainConfig

DOCS = Path(__file__).resolve().parents[1] / "docs"
MODEL_FLAGS = frozenset(f.name for f in fields(ModelOptions))  # one table of their own, not one per tool
# page -> {region: table}
PAGES = {
    "data.md": {"data": lambda: keys_table(BuildConfig)},
    "training.md": {"sft": lambda: keys_table(TrainConfig)},
    "evaluation.md": {"model": lambda: keys_table(ModelOptions, flags=True),
                      "eval": lambda: keys_table(EvalRun, flags=True, leave_out=MODEL_FLAGS),
                      "grade": lambda: keys_table(GradeRun, flags=True, leave_out=MODEL_FLAGS),
                      "select": lambda: keys_table(SelectRun, flags=True, leave_out=MODEL_FLAGS),
                      "score": lambda: keys_table(ScoreRun, flags=True),
                      "agreement": lambda: keys_table(AgreementRun, flags=True)},
    "review.md": {"review": lambda: keys_table(ReviewRun, flags=True)},
}


@dataclass
class DocKeys:
    """The script's options; each field is one of its flags (gbtrain.cli)."""

    docs: str = option(str(DOCS), "the docs folder whose pages' key tables are written")
    check: bool = option(False, "change nothing; exit 1 when a table differs from its dataclass (CI)")


def rendered(text: str, page: str) -> str:
    """A page's text with each of its regions' tables written anew; a region without its two markers is a
    ValueError."""
    for name, table in PAGES[page].items():
        start, end = f"<!-- keys:{name} -->", f"<!-- /keys:{name} -->"
        if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
            raise ValueError(f"docs/{page} needs one {start} ... {end} region (the {name} key table)")
        head, rest = text.split(start)
        tail = rest.split(end)[1]
        text = f"{head}{start}\n{table()}\n{end}{tail}"
    return text


def main() -> None:
    run = parse_options(DocKeys, __doc__)
    stale = []
    with user_errors("doc_keys"):
        for page in PAGES:
            path = Path(run.docs) / page
            text = path.read_text(encoding="utf-8")
            new = rendered(text, page)
            if new != text:
                stale.append(path)
                if not run.check:
                    path.write_text(new, encoding="utf-8")
    if not stale:
        print(f"{run.docs}: the key tables are up to date")
    elif run.check:
        print(f"doc_keys: {', '.join(map(str, stale))}: key tables differ from the options dataclasses: run "
              f"scripts/doc_keys.py", file=sys.stderr)
        sys.exit(1)
    else:
        print(f"key tables rewritten from the options dataclasses: {', '.join(map(str, stale))}")


if __name__ == "__main__":
    main()

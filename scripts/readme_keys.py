"""Write the README's key tables from the options dataclasses, so that the README says what the code does.

    python scripts/readme_keys.py [--check]

Each table lies between `<!-- keys:NAME -->` and `<!-- /keys:NAME -->` in README.md and is
gbtrain.config.keys_table of one dataclass: the recipe's and the builder's config keys, the options every tool that
asks a checkpoint shares (ModelOptions) and each evaluation tool's own. tests/test_config.py fails when one differs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from pathlib import Path

from gbtrain.backends import ModelOptions
from gbtrain.cli import parse_options, user_errors
from gbtrain.config import BuildConfig, TrainConfig, keys_table, option
from gbtrain.evaluation import EvalRun
from gbtrain.grading import GradeRun
from gbtrain.scoring import ScoreRun
from gbtrain.selection import SelectRun

README = Path(__file__).resolve().parents[1] / "README.md"
MODEL_FLAGS = frozenset(f.name for f in fields(ModelOptions))  # one table of their own, not one per tool
REGIONS = {"data": lambda: keys_table(BuildConfig), "sft": lambda: keys_table(TrainConfig),
           "model": lambda: keys_table(ModelOptions, flags=True),
           "eval": lambda: keys_table(EvalRun, flags=True, leave_out=MODEL_FLAGS),
           "grade": lambda: keys_table(GradeRun, flags=True, leave_out=MODEL_FLAGS),
           "select": lambda: keys_table(SelectRun, flags=True, leave_out=MODEL_FLAGS),
           "score": lambda: keys_table(ScoreRun, flags=True)}


@dataclass
class ReadmeKeys:
    """The script's options; each field is one of its flags (gbtrain.cli)."""

    readme: str = option(str(README), "the README whose key tables are written")
    check: bool = option(False, "change nothing; exit 1 when a table differs from its dataclass (CI)")


def rendered(text: str) -> str:
    """The README text with every region's table written anew; a region without its two markers is a ValueError."""
    for name, table in REGIONS.items():
        start, end = f"<!-- keys:{name} -->", f"<!-- /keys:{name} -->"
        if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
            raise ValueError(f"the README needs one {start} ... {end} region (the {name} key table)")
        head, rest = text.split(start)
        tail = rest.split(end)[1]
        text = f"{head}{start}\n{table()}\n{end}{tail}"
    return text


def main() -> None:
    run = parse_options(ReadmeKeys, __doc__)
    path = Path(run.readme)
    with user_errors("readme_keys"):
        text = path.read_text(encoding="utf-8")
        new = rendered(text)
        if new != text and not run.check:
            path.write_text(new, encoding="utf-8")
    if new == text:
        print(f"{path}: the key tables are up to date")
    elif run.check:
        print(f"readme_keys: {path}: key tables differ from the options dataclasses: run scripts/readme_keys.py",
              file=sys.stderr)
        sys.exit(1)
    else:
        print(f"{path}: key tables rewritten from the options dataclasses")

if __name__ == "__main__":
    main()

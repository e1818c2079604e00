"""The review threshold in force for a grading run: given, chosen anew from the validation table a checkpoint
records, or the one select_checkpoint chose and recorded there."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Protocol

from gbtrain.files import read_json
from gbtrain.metric.selective import (
    BUDGET_FLAG,
    CERTIFIED_FLAG,
    TARGET_FLAG,
    choose_threshold,
    pages_intact,
    rule_flag,
)
from gbtrain.outputs import SELECTIVE_RECORD
from gbtrain.text import brief
from gbtrain.vocabulary import L3, setting_name


def _share(value) -> bool:
    """A share as a record may hold one: a finite number from 0 to 1 (not a boolean, not text)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and 0 <= value <= 1


def entry_problem(entry) -> str | None:
    """What is wrong with one setting's entry of a threshold record, or None: its threshold (and coverage, accuracy,
    review share) a share from 0 to 1 or null with the problem that left it so, and its coverage table present, with
    a share at each of its rows. A record edited by hand must not send everything, or nothing, to review."""
    if not isinstance(entry, dict) or "threshold" not in entry or "table" not in entry:
        return "not a setting's entry (threshold and table)"
    if entry["threshold"] is None:
        return None if entry.get("problem") else "no threshold, and no problem saying why"
    bad = [key for key in ("threshold", "coverage", "accuracy", "review_share")
           if key in entry and entry[key] is not None and not _share(entry[key])]
    if bad:
        return f"{bad[0]} {brief(entry[bad[0]], 40)} is not a share from 0 to 1"
    table = entry["table"]
    rows = table.get("rows") if isinstance(table, dict) else None
    if not isinstance(rows, list) or not rows or not all(map(_row_intact, rows)) or \
            ("pages" in table and not pages_intact(table["pages"])):
        return "its coverage-accuracy table is missing or damaged"
    row = next((r for r in rows if r["threshold"] == entry["threshold"]), None)
    if row is None or any(key in entry and entry[key] != row.get(key) for key in ("coverage", "accuracy")):
        return (f"its threshold {brief(entry['threshold'], 20)} and figures are not those of its own table's row (a "
                f"record edited by hand)")
    return None


MAX_COUNT = 10**9  # groups or items of one validation evaluation: more is no record select_checkpoint wrote


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def _row_intact(row) -> bool:
    """A coverage table's row as coverage_table writes it: shares, counts, and an accuracy its counts give."""
    if not (isinstance(row, dict) and _share(row.get("threshold")) and _share(row.get("coverage"))):
        return False
    if "accepted" not in row:  # a table recorded before the counts
        return row.get("accuracy") is None or _share(row["accuracy"])
    accepted, errors, accuracy = row["accepted"], row.get("errors"), row.get("accuracy")
    if not (_count(accepted) and _count(errors) and errors <= accepted):
        return False
    return accuracy is None if not accepted else _share(accuracy) and abs(
        accuracy - (accepted - errors) / accepted) <= 1e-6


def read_selective_record(model: str | Path) -> dict | None:
    """The record eval/select_checkpoint.py left in a checkpoint folder (gbtrain.evaluation.selection.
    record_threshold): per L3 setting, the threshold it chose on validation and that evaluation's coverage-accuracy
    table; None when the folder has none."""
    path = Path(model) / SELECTIVE_RECORD
    if not Path(model).is_dir() or not path.is_file():
        return None
    try:
        record = read_json(path)
        compared = record.get("candidates", 1)  # the checkpoints a certified threshold's delta is divided among
        ok = isinstance(record["rule"], dict) and isinstance(record["settings"], dict) and \
            isinstance(compared, int) and not isinstance(compared, bool) and compared >= 1
    except (ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise ValueError(f"{path}: not a threshold record of select_checkpoint: delete it, or record one anew "
                         f"(select_checkpoint --copy-best with {TARGET_FLAG}, {BUDGET_FLAG} or {CERTIFIED_FLAG})")
    for setting, entry in record["settings"].items():
        problem = entry_problem(entry)
        if problem:
            raise ValueError(f"{path}: {setting}: {problem}: delete the file, or record a threshold anew "
                             f"(select_checkpoint --copy-best with {TARGET_FLAG}, {BUDGET_FLAG} or {CERTIFIED_FLAG})")
    return record


class ThresholdOptions(Protocol):
    """What the threshold depends on of a grading run (gbtrain.grading.grade.GradeRun has it)."""

    model: str
    review_threshold: float | None

    @property
    def mode(self) -> str: ...

    def selective_rule(self) -> dict | None: ...


def review_threshold(run: ThresholdOptions) -> dict | None:
    """The review threshold in force and where it comes from ({"threshold", "source", ...}), or None. In order:
    --review-threshold; --target-accuracy, --review-budget or --max-error, chosen (selective.choose_threshold) from
    the validation table recorded in --model for this run's setting (L3, its mode; a certified one at --delta
    divided among the checkpoints select_checkpoint compared on that evaluation, as it recorded); else the
    threshold recorded there, the one select_checkpoint chose (with its figures: a certified one's p-value too);
    else none."""
    rule = run.selective_rule()
    if run.review_threshold is not None:
        if rule:
            raise ValueError(f"--review-threshold and {rule_flag(rule)}: give one (a threshold, or "
                             f"a rule to choose one from the checkpoint's validation table)")
        if not 0 <= run.review_threshold <= 1:  # NaN too
            raise ValueError(f"--review-threshold {run.review_threshold}: give a judgment confidence from 0 to 1, "
                             f"e.g. 0.8")
        return {"threshold": run.review_threshold, "source": "--review-threshold"}
    record = read_selective_record(run.model)
    path = Path(run.model) / SELECTIVE_RECORD
    if record is None:
        if rule:
            raise ValueError(f"{rule_flag(rule)}: --model {run.model} holds no {SELECTIVE_RECORD} "
                             f"(the validation table select_checkpoint records with --copy-best and {TARGET_FLAG}, "
                             f"{BUDGET_FLAG} or {CERTIFIED_FLAG}): record one, or give --review-threshold")
        return None
    setting = setting_name(L3, run.mode)
    chosen = record["settings"].get(setting)
    if chosen is None:
        raise ValueError(f"{path}: no threshold for {setting} (it has {', '.join(record['settings']) or 'none'}), "
                         f"the setting {run.mode} pages are graded in: rerun select_checkpoint with {setting} in "
                         f"--settings, or give --review-threshold")
    if rule:
        try:
            picked = choose_threshold(chosen["table"], rule, record.get("candidates", 1))
        except ValueError as e:
            raise ValueError(f"{path}, {setting}: {e}") from None
    elif chosen["threshold"] is None:
        raise ValueError(f"{path}: select_checkpoint chose no threshold for {setting} ({chosen.get('problem')}): "
                         f"give {TARGET_FLAG}, {BUDGET_FLAG}, {CERTIFIED_FLAG} or --review-threshold")
    else:
        picked, rule = {k: v for k, v in chosen.items() if k not in ("table", "problem")}, record["rule"]
    return {**picked, "source": str(path.resolve()), "setting": setting, "rule": rule,
            "evaluation": record.get("evaluation")}

"""Agreement of a model's scores with teachers' from files alone, for scores made anywhere (eval/agreement.py).

Both files are JSONL keyed by (submission, question). The teachers' file is the reference set and is read strictly;
a key found in one file only is refused unless allowed (then counted and listed); submissions are written as
anonymous numbers (s1, s2, ... in order of first appearance, the teachers' file first), never by their ids.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from gbtrain.config import option
from gbtrain.data.annotations import points_problem
from gbtrain.metric.points import Key, PointsOptions, Reference, points_report
from gbtrain.metric.scoring import write_report
from gbtrain.values import folded, question_id_key

TEACHER_KEYS = ("submission", "question", "score", "full_score", "score_2", "question_type", "rubric",
                "rubric_version", "comment", "arbitration")
MODEL_KEYS = ("submission", "question", "score")  # other keys of a model line (its reply, a run name) are not read


@dataclass
class AgreementRun:
    """Everything one `eval/agreement.py` call needs; each field is one of its flags (gbtrain.cli.add_options)."""

    teacher: str = option(help='JSONL, one {"submission", "question", "score", "full_score"} per line (optional: '
                               '"score_2" a second teacher\'s, "question_type", "rubric", "comment", ...)')
    model: str = option(help='JSONL, one {"submission", "question", "score"} per line')
    out: str = option(help="the report (JSON; submissions only as anonymous numbers)")
    point_bands: str = option("0.6,0.85", "the kappa bands' edges as shares of the full score (bands: below 0.6, "
                                          "0.6 to 0.85, from 0.85)")
    large_error: float = option(0.5, "an error above this share of the full score is large")
    allow_missing: bool = option(False, "count and list keys found in one file only instead of refusing them")
    allow_duplicates: bool = option(False, "keep the last line of a key the model file gives twice (listed)")


def _key(row: dict, path: str, n: int) -> Key:
    for name in ("submission", "question"):
        value = row.get(name)
        if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
            raise ValueError(f"{path}:{n}: \"{name}\" must be a non-empty id (text or an integer), got "
                             f"{json.dumps(value)[:60]}")
    # as grade_pages matches a model's question id to a key's: read as a page prints it (`Q5`, `第5题` are 5)
    return folded(str(row["submission"])), question_id_key(str(row["question"]))


def _lines(path: str, needed: tuple[str, ...]):
    """(line number, object) of a JSONL file, each with the keys needed; a bad line is one error naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a BOM (a file saved by a Windows editor) is read past
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}): save it as UTF-8") from None
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"{path}:{n}: malformed JSON line: {str(e)[:200]}") from None
        if not isinstance(row, dict) or any(k not in row for k in needed):
            raise ValueError(f"{path}:{n}: a line needs {', '.join(repr(k) for k in needed)}")
        yield n, row


def _points(row: dict, key: str, where: str) -> float | None:
    value = row.get(key)
    if value is None:
        return None
    try:
        ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    except OverflowError:  # an integer beyond a float's range
        ok = False
    if not ok:
        raise ValueError(f"{where}: \"{key}\" must be a finite number of points, got {json.dumps(value)[:60]}")
    return value  # as written (an integer stays one): messages show it so


def read_teacher(path: str) -> list[Reference]:
    """The reference set: every line a question graded in points, checked as the annotation reader checks points
    (full_score > 0, score and score_2 within 0..full_score, no key twice, no unknown key)."""
    refs: dict[Key, Reference] = {}
    for n, row in _lines(path, ("submission", "question", "score", "full_score")):
        where = f"{path}:{n}"
        unknown = sorted(set(row) - set(TEACHER_KEYS))
        if unknown:
            close = difflib.get_close_matches(unknown[0], TEACHER_KEYS, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{where}: unknown key {unknown[0]!r}{hint}: the keys read are {', '.join(TEACHER_KEYS)}")
        key = _key(row, path, n)
        if key in refs:
            raise ValueError(f"{where}: submission {key[0]!r} question {key[1]!r} is graded twice: keep one line")
        full, score, second = (_points(row, k, where) for k in ("full_score", "score", "score_2"))
        if full is None or score is None:
            raise ValueError(f"{where}: \"score\" and \"full_score\" must both be numbers")
        problem = points_problem(full, score, second)
        if problem:  # the annotation reader's rule
            raise ValueError(f"{where}: {problem}")
        qtype = row.get("question_type")
        refs[key] = Reference(key, full, score, str(qtype) if qtype not in (None, "") else "Other", second)
    if not refs:
        raise ValueError(f"{path}: no teacher scores: nothing to compare")
    return list(refs.values())


def read_model(path: str) -> list[tuple[Key, object]]:
    """(key, score as written), in file order; the points report checks each score."""
    return [(_key(row, path, n), row["score"]) for n, row in _lines(path, MODEL_KEYS)]


def _first(keys: list[Key]) -> str:
    return f"submission {keys[0][0]!r} question {keys[0][1]!r}"


def check_keys(run: AgreementRun, refs: list[Reference], given: list[tuple[Key, object]]) -> None:
    """A key in one file only, or one the model gives twice, is refused (naming both files and the first such key)
    unless --allow-missing / --allow-duplicates."""
    teacher = {r.key for r in refs}
    model = Counter(k for k, _ in given)
    missing = [r.key for r in refs if r.key not in model]
    unexpected = [k for k in model if k not in teacher]
    if (missing or unexpected) and not run.allow_missing:
        parts = ([f"{len(missing)} of the {len(refs)} question(s) of {run.teacher} have no score in {run.model} "
                  f"(first: {_first(missing)})"] if missing else []) + (
            [f"{len(unexpected)} score(s) of {run.model} are for no question of {run.teacher} (first: "
             f"{_first(unexpected)})"] if unexpected else [])
        raise ValueError(f"{'; '.join(parts)}: fix the files, or pass --allow-missing to count and list them")
    twice = [k for k, n in model.items() if n > 1]
    if twice and not run.allow_duplicates:
        raise ValueError(f"{run.model}: {len(twice)} keys are scored more than once (first: {_first(twice)}): keep "
                         f"one line each, or pass --allow-duplicates to count the last (listed)")


def anonymise(refs: list[Reference], given: list[tuple[Key, object]]) -> tuple[list[Reference], list]:
    """The same keys with each submission replaced by its number, s1, s2, ... in order of first appearance."""
    numbers: dict[str, str] = {}
    for sub, _ in [r.key for r in refs] + [k for k, _ in given]:
        numbers.setdefault(sub, f"s{len(numbers) + 1}")
    refs = [Reference((numbers[r.key[0]], r.key[1]), r.full_score, r.score, r.question_type, r.score_2) for r in refs]
    return refs, [((numbers[k[0]], k[1]), v) for k, v in given]


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def agreement_file(run: AgreementRun) -> dict:
    """Read both files, check their keys, and write the report to --out (nothing else is written)."""
    opts = PointsOptions.parse(run.point_bands, run.large_error)
    out = Path(run.out)
    if not str(run.out).strip():
        raise ValueError("--out is empty: name the report file")
    for flag, path in (("--teacher", run.teacher), ("--model", run.model)):
        if Path(path).exists() and out.exists() and out.resolve() == Path(path).resolve():
            raise ValueError(f"--out {run.out} is {flag} {path}: choose another --out")
    refs, given = read_teacher(run.teacher), read_model(run.model)
    check_keys(run, refs, given)
    refs, given = anonymise(refs, given)
    report = {
        "points": points_report(refs, given, opts),
        "submissions": len({r.key[0] for r in refs}),
        "identities": "submissions are numbered s1, s2, ... in order of first appearance (the teachers' file, then "
                      "the model's); no submission id is written",
        "inputs": {"teacher_sha256": _sha256(run.teacher), "model_sha256": _sha256(run.model)},
        "settings": {"point_bands": list(opts.bands), "large_error": opts.large_error,
                     "allow_missing": run.allow_missing, "allow_duplicates": run.allow_duplicates},
    }
    write_report(report, out)
    return report

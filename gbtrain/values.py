"""One reader for each value a person types: a label word and a number of points. Annotations, converters, answer
keys, review sheets, Label Studio imports and model replies all call these, so one text means one thing everywhere:

- a word is looked up as written, then case-insensitively, after Unicode compatibility folding (fullwidth `ｒｉｇｈｔ`
  and `Right` are `right`); `true` / `false` name right / wrong;
- points are a plain decimal number (`7`, `7.5`, `-1e1`, fullwidth digits read as digits) or one with a decimal
  comma (`2,5`; at most two digits after it, so `1,000` is refused rather than read as 1); an integer stays one.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping

from gbtrain.schema import LABEL_WORDS, VERDICTS

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", re.ASCII)
_DECIMAL_COMMA = re.compile(r"[+-]?\d+,\d{1,2}", re.ASCII)
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)


def folded(text: str) -> str:
    """`text` as compared: Unicode compatibility folding (fullwidth forms), outer spaces stripped."""
    return unicodedata.normalize("NFKC", text).strip()


def alias_lookup(aliases: Mapping[str, str], raw: str) -> str | None:
    """What `raw` names in `aliases` (word -> name): as written, then case-insensitively; None when it names
    nothing."""
    text = folded(raw)
    found = aliases.get(text)
    if found is None:
        key = text.casefold()
        found = next((name for word, name in aliases.items() if folded(word).casefold() == key), None)
    return found


def label_of(raw: str, extra: Mapping[str, str] | None = None) -> str | None:
    """The label (a verdict, or the question-region label) a word names: `extra` (the user's own words) first, then
    the benchmark's (schema.LABEL_WORDS); None when it names none."""
    return alias_lookup({**LABEL_WORDS, **(extra or {})}, raw)


def verdict_of(raw: str, extra: Mapping[str, str] | None = None) -> str | None:
    """The verdict (schema.VERDICTS) a word names, as label_of reads it; None when it names none, or names the
    question-region label."""
    label = label_of(raw, extra)
    return label if label in VERDICTS else None


def points_from_text(text: str) -> int | float:
    """Points written as text (a tool's attribute, an answer key, a teacher's sheet, a model's reply): `7` stays an
    int, `7.5` and `2,5` are floats. A ValueError says "not a number" or "not a finite number"; each caller names
    where the text was."""
    cleaned = folded(text)
    if _DECIMAL_COMMA.fullmatch(cleaned):
        cleaned = cleaned.replace(",", ".")
    if not _NUMBER.fullmatch(cleaned):
        raise ValueError("not a finite number" if cleaned.lower().lstrip("+-") in ("nan", "inf", "infinity")
                         else "not a number")
    # past 64 digits an integer is read as a float (infinite past 309 digits, where int() would overflow float
    # arithmetic later; it refuses 4,300 digits outright)
    value = int(cleaned) if _INTEGER.fullmatch(cleaned) and len(cleaned) <= 64 else float(cleaned)
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value

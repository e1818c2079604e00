"""One reader for each value a person types: a label word and a number of points. Annotations, converters, answer
keys, review sheets, Label Studio imports and model replies all call these, so one text means one thing everywhere:

- a word is looked up as written, then case-insensitively, after Unicode compatibility folding (fullwidth `ｒｉｇｈｔ`
  and `Right` are `right`); `true` / `false` name right / wrong;
- points are a plain decimal number (`7`, `7.5`, `-1e1`, fullwidth digits read as digits) or one with a decimal
  comma (`2,5`; at most two digits after it, so `1,000` is refused rather than read as 1); an integer stays one;
- a question id is read as a page prints it (`Q5`, `5.`, `(5)`, `第五题`, `五、`, `5(2)`, `３-２`) into its parts
  (question, sub-question: `5`, `5-2`), so that an answer key's `5` and a model's `第5题` name one question.
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


# (`#` is no prefix: `#3` is schema.UNNUMBERED's third question by position, not question 3)
_ID_PREFIXES = re.compile(r"^(?:question|problem|exercise|no\.?|q\.?|第)\s*", re.IGNORECASE)
_ID_FILLERS = re.compile(r"小题|问题|小问|题|问|第")  # between and after the numbers: 第3题第2问
_CHINESE_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
                   "九": 9}
_ID_PART = re.compile(r"\d+|[零〇一二两三四五六七八九十百]+|[a-zA-Z]")
_ID_SEPARATORS = re.compile(r"[\s.\-_、:：)(\]\[/,，;；]*")
_DIGIT = "[一二两三四五六七八九]"
_CHINESE_NUMERAL = re.compile(rf"(?:({_DIGIT})百)?零?(?:({_DIGIT})?(十))?({_DIGIT})?")
MAX_ID_LENGTH = 40  # longer text is no printed question number: compared as written


def chinese_number(text: str) -> int | None:
    """A Chinese numeral up to 999 (`五`, `十二`, `二十`, `一百零五`) as an integer; None when it is not one."""
    if all(c in _CHINESE_DIGITS for c in text):  # digit by digit, as 一〇 for 10
        return int("".join(str(_CHINESE_DIGITS[c]) for c in text))
    match = _CHINESE_NUMERAL.fullmatch(text)
    if not match or not text:
        return None
    hundreds, tens, ten, units = match.groups()
    value = 100 * _CHINESE_DIGITS[hundreds] if hundreds else 0
    if ten:
        value += 10 * (_CHINESE_DIGITS[tens] if tens else 1)
    return value + (_CHINESE_DIGITS[units] if units else 0)


def question_id_parts(text: str) -> tuple[str, ...] | None:
    """The question and sub-question numbers a printed question id names: `Q5`, `5.`, `(5)`, `5)`, `No. 5`, `第5题`,
    `第五题`, `五、`, `⑤` -> ("5",); `5-2`, `5(2)`, `5.2`, `第3题(2)`, `3(a)` -> ("5", "2"), ..., ("3", "a"). Letters
    are lower-cased, numbers written without leading zeros. None when the text is not such an id (a word, a
    sentence): it is then compared as written (question_id_key)."""
    cleaned = folded(text)
    if not cleaned or len(cleaned) > MAX_ID_LENGTH:
        return None
    cleaned = _ID_PREFIXES.sub("", cleaned, count=1).strip()
    parts: list[str] = []
    rest = cleaned
    while rest:
        rest = rest[_ID_SEPARATORS.match(rest).end():]
        if not rest:
            break
        filler = _ID_FILLERS.match(rest)
        if filler and parts:
            rest = rest[filler.end():]
            continue
        found = _ID_PART.match(rest)
        if not found:
            return None
        token = found.group(0)
        if token.isdigit():
            parts.append(str(int(token)))
        elif token.isascii():
            if parts and parts[-1].isalpha():  # two letters in a row: a word, not a sub-question
                return None
            parts.append(token.lower())
        else:
            number = chinese_number(token)
            if number is None:
                return None
            parts.append(str(number))
        rest = rest[found.end():]
    if not parts or parts[0].isalpha():  # a question is numbered; a lone letter is a choice, not an id
        return None
    return tuple(parts)


def question_id_key(text: str) -> str:
    """What two question ids are compared by: their parts joined by "-" (`第5题(2)` and `5-2` both `5-2`), or, for
    an id that is no printed number, the text folded and case-folded."""
    parts = question_id_parts(text)
    return "-".join(parts) if parts is not None else folded(text).casefold()

"""Answer equivalence, by the conventions of benchmark scorers (XL-DocBench style); the soft scores (token F1,
ANLS) are text_scores'.

The reference answer's type (number, choice, boolean or text) picks one rule, which returns True or False when it
can decide and None when it cannot (two different texts), so that a model judge decides only what rules cannot.
Deterministic, with every input size capped so that a hostile answer cannot make the scorer slow.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from gbtrain.values import chinese_number
from gbtrain.vocabulary import FALSE_WORDS, TRUE_WORDS, one_of

ANSWER_TYPES = ("number", "choice", "boolean", "text")

# Two numbers are equal when their values are: 19 is not 20 on a school exam. A relative tolerance is asked for with
# --answer-tolerance (0.05 is the document-QA scorers' convention, for data whose answers are rounded readings).
DEFAULT_REL_TOL = Fraction(0)

MAX_NUMBER_CHARS = 64  # a longer "number" is not an exam answer
MAX_EXPONENT = 999  # |exponent| above this is refused: exact arithmetic on 10^(10^9) would never end

# "The answer is", "Answer:", "答案是" ... and a leading "=", matched after NFKC (which turns "：" into ":").
_ANSWER_PREFIX = re.compile(
    r"(?:final answer\s*:|the (?:final )?answer is\b\s*:?|answer is\b\s*:?|answer\s*:"
    r"|答案是\s*:?|答案\s*:|答\s*:|=)\s*", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_TRAILING_PUNCT = re.compile(r"[\s.。,，;；:：!！?？、]+$")
# Han, kana, Hangul: scripts written without spaces between words (text_scores cuts them per character too).
CJK_CLASS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"
_CJK_GAP = re.compile(f"(?<=[{CJK_CLASS}]) (?=[{CJK_CLASS}])")


def _strip_prefix(s: str) -> str:
    """s without its leading answer prefixes ("Final answer: the answer is 5" -> "5"), in one pass over them (a
    slice per prefix made 900,000 "=" quadratic)."""
    s, pos = s.strip(), 0
    while (m := _ANSWER_PREFIX.match(s, pos)) and m.end() > pos:
        pos = m.end()
    return s[pos:].strip()


def normalize_answer(text: str) -> str:
    """NFKC, lowercase, answer prefix and English articles removed, punctuation (Unicode P*) deleted, whitespace
    collapsed: SQuAD's normalisation, plus the prefixes models write. Chinese has no spaces between words, so its
    characters are kept as they are ("答案是北京。" -> "北京")."""
    s = _strip_prefix(unicodedata.normalize("NFKC", text or "").lower())
    s = "".join(ch for ch in s if not unicodedata.category(ch).startswith("P"))
    s = " ".join(_ARTICLES.sub(" ", s).split())
    return _CJK_GAP.sub("", s)  # "高 兴" is 高兴: no word boundary between CJK characters


# --- numbers ---------------------------------------------------------------------------------------------------

def _vulgar_fractions() -> dict[str, tuple[str, Fraction]]:
    """Each vulgar fraction character (½, ⅓, ...) -> (a private-use stand-in, its value). NFKC would turn "1½" into
    "11⁄2", so the stand-in, which NFKC keeps, replaces the character first."""
    table = {}
    for i, code in enumerate([0xBC, 0xBD, 0xBE, *range(0x2150, 0x215F), 0x2189]):
        num, den = unicodedata.normalize("NFKC", chr(code)).split("\u2044")
        table[chr(code)] = (chr(0xE000 + i), Fraction(int(num), int(den)))
    return table


_VULGAR = _vulgar_fractions()
_VULGAR_VALUE = dict(_VULGAR.values())
_SUPERSCRIPT_RUN = re.compile("[⁺⁻]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+")  # "10³" is 10^3, not the 103 that NFKC would make of it
_SUPERSCRIPT_DIGITS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "0123456789+-")
_SUBSCRIPT = re.compile("[₀-₉]")
_INT = r"[0-9]{1,3}(?:,[0-9]{3})+|[0-9]{1,3}(?: [0-9]{3})+|[0-9]+"  # thousands groups: all "," or all " "
_EXP = r"[+-]?[0-9]+"
_NUMBER = re.compile(
    r"(?P<sign>[+-])?(?:"
    rf"(?P<mant>(?:{_INT})(?:\.[0-9]+)?|\.[0-9]+)(?:e(?P<e>{_EXP}))?(?:\s*[×x*·⋅]\s*(?P<base>[0-9]+)\^(?P<bexp>{_EXP}))?"
    rf"|(?P<pbase>[0-9]+)\^(?P<pexp>{_EXP})"
    r"|(?:(?P<whole>[0-9]+) )?(?P<num>[0-9]+)/(?P<den>[0-9]+)"
    "|(?P<vwhole>[0-9]+)? ?(?P<vulgar>[\ue000-\ue0ff])"
    r")(?P<pct>%)?")


def _nfkc_keeping_numbers(text: str) -> str:
    """NFKC, with what it would misread kept: ½ as a stand-in (not "1⁄2" glued to a whole), superscripts as powers
    ("10³" is 10^3, not 103); the minus sign and the fraction slash as ASCII."""
    s = "".join(_VULGAR[ch][0] if ch in _VULGAR else ch for ch in text)
    s = _SUPERSCRIPT_RUN.sub(lambda m: "^" + m.group().translate(_SUPERSCRIPT_DIGITS), s)
    return unicodedata.normalize("NFKC", s).replace("\u2212", "-").replace("\u2044", "/")


def _power(base: str, exponent: str) -> Fraction | None:
    e, b = int(exponent), int(base)
    if abs(e) > MAX_EXPONENT or (b == 0 and e < 0):
        return None
    return Fraction(b) ** e


def parse_number(text: str) -> Fraction | None:
    """The exact value of a number written as an exam answer, else None.

    Integers, decimals, signs, percentages, a/b, ½ and 1½ (and the proper mixed 1 1/2), thousands groups
    ("1,000", "1 000"), 1.5e3, 1.5×10^3, 10^3, 2^10, 10³; an answer prefix and trailing sentence punctuation are
    ignored. Units are not ("5 cm" is None): a rule cannot know whether a unit is right. Over MAX_NUMBER_CHARS
    characters or an exponent over MAX_EXPONENT is None, so exact arithmetic stays fast.
    """
    # a text too long to be a number is refused before the cache, which so holds short texts only
    return None if len(text) > MAX_NUMBER_CHARS else _parse_number(text)


@lru_cache(maxsize=16_384)  # a setting's references repeat (and are parsed once more to infer their type)
def _parse_number(text: str) -> Fraction | None:
    if _SUBSCRIPT.search(text):
        return None
    s = _nfkc_keeping_numbers(text).lower()
    s = _TRAILING_PUNCT.sub("", _strip_prefix(s))
    s = re.sub(r"\s*\^\s*[({]\s*([+-]?[0-9]+)\s*[)}]", r"^\1", s)  # 10^(-3), 10^{-3}
    s = re.sub(r"\s*([/^])\s*", r"\1", re.sub(r"\s+%$", "%", s))
    m = _NUMBER.fullmatch(s) if len(s) <= MAX_NUMBER_CHARS else None
    if m is None:
        return None
    value: Fraction | None
    if m["mant"] is not None:
        value = Fraction(m["mant"].replace(",", "").replace(" ", ""))
        for base, exponent in (("10", m["e"]), (m["base"], m["bexp"])):
            power = Fraction(1) if exponent is None else _power(base, exponent)
            value = None if value is None or power is None else value * power
    elif m["pbase"] is not None:
        value = _power(m["pbase"], m["pexp"])
    elif m["num"] is not None:
        num, den = int(m["num"]), int(m["den"])
        if den == 0 or (m["whole"] is not None and num >= den):  # "1 3/2" is no mixed number
            return None
        value = int(m["whole"] or 0) + Fraction(num, den)
    else:
        value = int(m["vwhole"] or 0) + _VULGAR_VALUE[m["vulgar"]]
    if value is None:
        return None
    if m["sign"] == "-":
        value = -value
    return value / 100 if m["pct"] else value


# A final value as students write it: "x = 5", "2 + 3 = 5" (the value after the last "=" or "≈"), "5个", "12 cm",
# "60°", "¥5", "三" (Chinese numerals), with an answer prefix ("答：5") and sentence punctuation around.
_LAST_EQUALS = re.compile(r"^.*[=≈]\s*")
# Units a value may carry: any run of CJK characters (个, 元, 厘米, 平方米, 个苹果), or a known Latin unit, alone or
# as a product or quotient with a power (cm^2, m/s, km/h); a letter that is no unit ("5x") is not one: 5x is not 5.
_LATIN_UNITS = ("mm|cm|dm|km|m|mg|kg|g|t|ml|mL|l|L|ms|s|sec|min|h|hr|hrs|d|day|days|hour|hours|minute|minutes|"
                "second|seconds|year|years|yr|yrs|N|J|kJ|W|kW|V|A|mA|Pa|kPa|Hz|mol|K|rad|deg|degrees?|cents?|"
                "dollars?|yuan|pcs")
_LATIN_UNIT = rf"(?:{_LATIN_UNITS})(?:\^-?[0-9])?"
_UNIT = re.compile(rf"\s*(?:[\u3400-\u4dbf\u4e00-\u9fff]{{1,8}}|[°℃℉′″'\"]|{_LATIN_UNIT}(?:\s*/\s*{_LATIN_UNIT})?)")
_NUMBER_END = re.compile("[0-9%\ue000-\ue0ff零〇一二两三四五六七八九十百]")
_UNIT_BEFORE = re.compile(r"^(?P<unit>[$¥€£])\s*(?P<num>.+)$")
_CHINESE_NUMERAL_TEXT = re.compile("[零〇一二两三四五六七八九十百]+")


@dataclass(frozen=True)
class NumberReading:
    """An answer read as a number: its value, its unit as written (spaces dropped; None without one) and whether
    it carried a percent sign (whose value is already divided by 100)."""

    value: Fraction
    unit: str | None
    percent: bool


def read_number(text: str) -> NumberReading | None:
    """The final value an answer states, with its unit, else None (an expression, a word, two values). The number
    itself is parse_number's (every notation it knows) or a Chinese numeral up to 999 (gbtrain.values)."""
    if len(text) > 4 * MAX_NUMBER_CHARS:
        return None
    s = _TRAILING_PUNCT.sub("", _strip_prefix(_nfkc_keeping_numbers(text).strip()))
    s = _LAST_EQUALS.sub("", s) if "=" in s or "≈" in s else s
    for candidate, unit in _number_and_unit(s):
        value = parse_number(candidate)
        if value is None and _CHINESE_NUMERAL_TEXT.fullmatch(candidate):
            value = None if (n := chinese_number(candidate)) is None else Fraction(n)
        if value is not None:
            return NumberReading(value, unit, candidate.rstrip().endswith("%"))
    return None


def _number_and_unit(s: str) -> list[tuple[str, str | None]]:
    """The ways `s` splits into a number and a unit: the whole as a number first, then the longest number a unit
    follows ("二十五个" is 25 个, not 2 十五个), then a currency sign before it."""
    ways: list[tuple[str, str | None]] = [(s, None)]
    ways += [(s[:end], "".join(s[end:].split())) for end in range(len(s) - 1, 0, -1)
             if _NUMBER_END.match(s[end - 1]) and _UNIT.fullmatch(s, end)]
    if m := _UNIT_BEFORE.match(s):
        ways.append((m["num"].strip(), m["unit"]))
    return ways


def _number_verdict(answer: str, reference: NumberReading, rel_tol: Fraction) -> bool | None:
    """Whether an answer states the reference's value. A unit the reference lacks is ignored ("5个" for 5); the
    same unit compares values; another unit, or none where the reference has one, is undecided (120 mm for 12 cm,
    or whether a missing unit costs marks, is the teacher's rule). A percent on one side only matches either reading
    of the sign (50% = 0.5, and 50% = 50: a key that writes a percentage without its sign). Undecided (None) also
    for an answer that states no single value ("x > 5", "five")."""
    read = read_number(answer)
    if read is None:
        return None
    if reference.unit is not None and read.unit != reference.unit:
        return None
    values = [read.value]
    if read.percent != reference.percent:
        values.append(read.value * 100 if read.percent else read.value / 100)
    return any(numbers_equal(v, reference.value, rel_tol) for v in values)


def numbers_equal(a: Fraction, b: Fraction, rel_tol: Fraction = DEFAULT_REL_TOL) -> bool:
    """|a - b| <= rel_tol * |b|, b being the reference; a reference 0 is met only by 0 (no tolerance to scale)."""
    if rel_tol < 0:
        raise ValueError(f"rel_tol must be >= 0, not {rel_tol}")
    if b == 0:
        return a == 0
    return abs(a - b) <= rel_tol * abs(b)


# --- choices and booleans -------------------------------------------------------------------------------------

_CHOICE_LEAD = re.compile(r"^(?:options?|choices?|选项|选)\s*", re.IGNORECASE)
_BRACKETED_LETTER = re.compile(r"[(\[{]\s*([A-Ha-h])\s*[)\]}]")
_CHOICE_SEP = re.compile(r"\s*(?:[,、;/&和]|\band\b)\s*|\s+", re.IGNORECASE)


def extract_choices(text: str) -> frozenset[str] | None:
    """The set of choice letters A-H an answer names ("B", "(b)", "A, C", "A and C", "A、C", "AC", "Option B",
    "答案是B"), else None. A single letter may be lowercase, a run of letters must be upper case and without
    repeats, so that words such as "bad" or "Bob" are not read as choices."""
    s = _CHOICE_LEAD.sub("", _strip_prefix(unicodedata.normalize("NFKC", text or "")))
    s = _BRACKETED_LETTER.sub(r"\1", _TRAILING_PUNCT.sub("", s))
    letters: set[str] = set()
    for token in filter(None, _CHOICE_SEP.split(s)):
        if re.fullmatch("[A-Ha-h]", token):
            letters.add(token.upper())
        elif re.fullmatch("[A-H]{2,8}", token) and len(set(token)) == len(token):
            letters.update(token)
        else:
            return None
    return frozenset(letters) or None


def parse_boolean(text: str) -> bool | None:
    """True / False for a word of gbtrain.vocabulary's TRUE_WORDS / FALSE_WORDS (after normalize_answer, emoji
    variation selectors dropped), else None. Those lists are the project's one definition of true/false words."""
    s = normalize_answer(text).replace("\ufe0f", "").replace("\ufe0e", "")
    if s in TRUE_WORDS:
        return True
    if s in FALSE_WORDS:
        return False
    return None


def infer_answer_type(reference: str) -> str:
    """A reference's type, the first that fits of: number, choice, boolean, text ("F" is choice F, not false)."""
    if read_number(reference) is not None:
        return "number"
    if extract_choices(reference) is not None:
        return "choice"
    if parse_boolean(reference) is not None:
        return "boolean"
    return "text"


# the annotation's question type, where it fixes how a reference answer is read; any other is inferred from it
_TYPE_OF_QUESTION = {"Multiple-choice": "choice", "True-False": "boolean"}


def answer_type_of(question_type: str | None, reference: str) -> str:
    """The type whose rule judges answers to a question: from its question type where that fixes it (a
    Multiple-choice question's reference is choice letters), else inferred from the reference."""
    return _TYPE_OF_QUESTION.get(question_type or "") or infer_answer_type(reference)


def _text_verdict(answer: str, reference: str) -> bool | None:
    """True when the texts are equal after normalisation (or, when that leaves nothing, after NFKC, case and
    whitespace folding); otherwise None: different words may still mean the same, which only a judge can tell."""
    a, r = ("".join(normalize_answer(s).split()) for s in (answer, reference))  # spaces never decide: "x = 2"
    if a and a == r:
        return True
    light_a, light_r = ("".join(unicodedata.normalize("NFKC", s).lower().split()) for s in (answer, reference))
    return True if light_a == light_r else None


def answers_equivalent(answer: str, reference: str, answer_type: str | None = None,
                       rel_tol: Fraction = DEFAULT_REL_TOL) -> bool | None:
    """Whether an answer matches the reference by the rule of the reference's type (given, or inferred when None):
    True / False when the rule decides, None when it cannot (texts that differ) so that a judge may decide.

    An empty answer is False. Number: by value, in any notation, with the unit rules of _number_verdict; an answer
    stating no single value is None. Choice and boolean: an answer that is not one is False. A reference that is not
    of the type given falls back to the text rule.
    """
    if answer_type is not None and answer_type not in ANSWER_TYPES:
        raise ValueError(f"answer_type {answer_type!r} must be {one_of(ANSWER_TYPES)}")
    if not (answer or "").strip():
        return False
    kind = answer_type or infer_answer_type(reference)
    if kind == "number" and (ref_number := read_number(reference)) is not None:
        return _number_verdict(answer, ref_number, rel_tol)
    if kind == "choice" and (ref_choices := extract_choices(reference)) is not None:
        return extract_choices(answer) == ref_choices
    if kind == "boolean" and (ref_truth := parse_boolean(reference)) is not None:
        return parse_boolean(answer) is ref_truth
    return _text_verdict(answer, reference)


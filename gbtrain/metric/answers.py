"""Answer equivalence and soft text scores, by the conventions of benchmark scorers (XL-DocBench style).

The reference answer's type (number, choice, boolean or text) picks one rule, which returns True or False when it
can decide and None when it cannot (two different texts), so that a model judge decides only what rules cannot.
Soft scores: SQuAD token F1 and DocVQA ANLS (its edit distance by rapidfuzz, as the CER's). Deterministic, with every
input size capped so that a hostile answer cannot make the scorer slow.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from fractions import Fraction
from functools import lru_cache

from rapidfuzz.distance import Levenshtein

from gbtrain.vocabulary import FALSE_WORDS, TRUE_WORDS, one_of

ANSWER_TYPES = ("number", "choice", "boolean", "text")

# Two numbers are equal when they differ by at most 5% of the reference: exam answers are often rounded
# ("0.33" for 1/3, "3.14" for pi), and 5% relative is the benchmark scorers' tolerance.
DEFAULT_REL_TOL = Fraction(5, 100)

MAX_NUMBER_CHARS = 64  # a longer "number" is not an exam answer
MAX_EXPONENT = 999  # |exponent| above this is refused: exact arithmetic on 10^(10^9) would never end
ANLS_MAX_CELLS = 25_000_000  # len(a) * len(b) above this: ANLS is scored on the first ANLS_CAP_CHARS of each
ANLS_CAP_CHARS = 5_000

# "The answer is", "Answer:", "答案是" ... and a leading "=", matched after NFKC (which turns "：" into ":").
_ANSWER_PREFIX = re.compile(
    r"^(?:final answer\s*:|the (?:final )?answer is\b\s*:?|answer is\b\s*:?|answer\s*:"
    r"|答案是\s*:?|答案\s*:|答\s*:|=)\s*", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_TRAILING_PUNCT = re.compile(r"[\s.。,，;；:：!！?？、]+$")
# Han, kana, Hangul: scripts written without spaces between words.
_CJK_CLASS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"
_CJK_GAP = re.compile(f"(?<=[{_CJK_CLASS}]) (?=[{_CJK_CLASS}])")
_CJK = re.compile(f"[{_CJK_CLASS}]")


def _strip_prefix(s: str) -> str:
    """s without its leading answer prefixes ("Final answer: the answer is 5" -> "5")."""
    s = s.strip()
    while (m := _ANSWER_PREFIX.match(s)) and m.end():
        s = s[m.end():].strip()
    return s


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
    s = "".join(_VULGAR[ch][0] if ch in _VULGAR else ch for ch in text)
    s = _SUPERSCRIPT_RUN.sub(lambda m: "^" + m.group().translate(_SUPERSCRIPT_DIGITS), s)
    s = unicodedata.normalize("NFKC", s).replace("\u2212", "-").replace("\u2044", "/").lower()
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
    if parse_number(reference) is not None:
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
    a, r = normalize_answer(answer), normalize_answer(reference)
    if a and a == r:
        return True
    light_a, light_r = (" ".join(unicodedata.normalize("NFKC", s).lower().split()) for s in (answer, reference))
    return True if light_a == light_r else None


def answers_equivalent(answer: str, reference: str, answer_type: str | None = None,
                       rel_tol: Fraction = DEFAULT_REL_TOL) -> bool | None:
    """Whether an answer matches the reference by the rule of the reference's type (given, or inferred when None):
    True / False when the rule decides, None when it cannot (texts that differ) so that a judge may decide.

    An empty answer is False. Number, choice and boolean: an answer that is not one is False. A reference that
    is not of the type given falls back to the text rule.
    """
    if answer_type is not None and answer_type not in ANSWER_TYPES:
        raise ValueError(f"answer_type {answer_type!r} must be {one_of(ANSWER_TYPES)}")
    if not (answer or "").strip():
        return False
    kind = answer_type or infer_answer_type(reference)
    if kind == "number" and (ref_number := parse_number(reference)) is not None:
        number = parse_number(answer)
        return number is not None and numbers_equal(number, ref_number, rel_tol)
    if kind == "choice" and (ref_choices := extract_choices(reference)) is not None:
        return extract_choices(answer) == ref_choices
    if kind == "boolean" and (ref_truth := parse_boolean(reference)) is not None:
        return parse_boolean(answer) is ref_truth
    return _text_verdict(answer, reference)


# --- soft text scores -----------------------------------------------------------------------------------------

def _tokens(text: str) -> list[str]:
    """normalize_answer's words; a text without spaces that contains CJK is split per character, since Chinese
    and Japanese do not separate words (character F1 is the usual convention for them)."""
    s = normalize_answer(text)
    return list(s) if " " not in s and _CJK.search(s) else s.split()


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD token F1: the harmonic mean of token precision and recall over the multiset of shared tokens.
    Both empty -> 1.0, one empty -> 0.0."""
    if prediction == reference:  # the common case of a right reading, and 1.0 by the definition
        return 1.0
    pred, ref = _tokens(prediction), _tokens(reference)
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def _anls_one(pred: str, ref: str, threshold: float) -> float:
    if len(pred) * len(ref) > ANLS_MAX_CELLS:
        pred, ref = pred[:ANLS_CAP_CHARS], ref[:ANLS_CAP_CHARS]
    longest = max(len(pred), len(ref))
    if longest == 0:
        return 1.0
    nl = Levenshtein.distance(pred, ref) / longest
    return 1.0 - nl if nl < threshold else 0.0


def anls(prediction: str, reference: str | list[str], threshold: float = 0.5) -> float:
    """ANLS of DocVQA (Biten et al. 2019): 1 - NL, NL = Levenshtein / the longer length, on lowercased strings
    with whitespace stripped and collapsed; 0 when NL >= threshold; the best over a list of references. Both
    empty -> 1.0. When len(prediction) * len(reference) > ANLS_MAX_CELLS, the score is that of the first
    ANLS_CAP_CHARS characters of each, so that a runaway answer cannot stall scoring."""
    references = [reference] if isinstance(reference, str) else list(reference)
    if not references:
        raise ValueError("anls needs at least one reference")
    if prediction in references:  # the common case of a right reading, and 1.0 by the definition
        return 1.0
    pred = " ".join((prediction or "").lower().split())
    return max(_anls_one(pred, " ".join((ref or "").lower().split()), threshold) for ref in references)

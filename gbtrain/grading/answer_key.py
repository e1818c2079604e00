"""A teacher's answer key (question id -> reference answer, full score, rubric, type), the grading prompt it
makes, and the question a graded item answers."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import yaml

from gbtrain import prompts
from gbtrain.metric.answers import answer_type_of, answers_equivalent
from gbtrain.metric.parsing import PredictedItem
from gbtrain.schema import QUESTION_TYPE_ALIASES, QUESTION_TYPES, UNNUMBERED
from gbtrain.text import brief
from gbtrain.values import points_from_text, question_id_key
from gbtrain.vocabulary import ANSWER_BASED, ANSWER_FREE, L3

KEY_FIELDS = ("answer", "full_score", "rubric", "question_type", "page")  # what a key's question mapping may hold
MAX_PAGE = 1000  # a key's page number: the page of the document (1 its first) the question is printed on


@dataclass(frozen=True)
class KeyQuestion:
    """One question of an answer key: its reference answer (None: "no reference answer") and, for a question graded
    in points, its full score and rubric; its type, where the key says (the review report counts by it); the page
    of the document it is printed on, where the key says (that page is asked for it, and its answer there is
    preferred)."""

    qid: str
    answer: str | None
    full_score: float | None = None
    rubric: str | None = None
    question_type: str | None = None
    page: int | None = None

    @property
    def plain(self) -> bool:
        """Whether the key gives only the reference answer (the form keys had before points)."""
        return self.full_score is None and self.rubric is None and self.question_type is None and self.page is None


AnswerKey = list[KeyQuestion]


def _scalar(qid: str, value, what: str) -> str | None:
    if isinstance(value, dict | list):
        raise ValueError(f"question {qid!r}: the {what} must be one value, not {type(value).__name__}")
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _full_score(qid: str, value) -> float | None:
    """A full score as the key writes it (YAML and JSON numbers are read as their text): a finite number above 0;
    an integer stays one, as in annotations."""
    text = _scalar(qid, value, "full_score")
    if text is None:
        return None
    try:
        number = points_from_text(text)
    except ValueError as e:
        if str(e) != "not a finite number":
            raise ValueError(f"question {qid!r}: full_score {brief(text, 40)} is not a number") from None
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"question {qid!r}: full_score {brief(text, 40)} must be a finite number above 0")
    return number


def _page(qid: str, value) -> int | None:
    text = _scalar(qid, value, "page")
    if text is None:
        return None
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_PAGE):
        raise ValueError(f"question {qid!r}: page {brief(text, 40)} must be a page number 1-{MAX_PAGE} (the page of "
                         f"the document the question is printed on)")
    return int(text)


def _key_question(qid: str, value) -> KeyQuestion:
    """A key's entry: a plain value (the reference answer, as before points), or a mapping of KEY_FIELDS."""
    if not isinstance(value, dict):
        return KeyQuestion(qid, _scalar(qid, value, "reference answer"))
    unknown = [str(k) for k in value if k not in KEY_FIELDS]
    if unknown:
        raise ValueError(f"question {qid!r}: unknown key {unknown[0]!r} (a question's mapping holds "
                         f"{', '.join(KEY_FIELDS)})")
    qtype = _scalar(qid, value.get("question_type"), "question_type")
    if qtype is not None and qtype not in QUESTION_TYPE_ALIASES:
        raise ValueError(f"question {qid!r}: question_type {brief(qtype, 40)} is not one of "
                         f"{', '.join(QUESTION_TYPES)} (or their Chinese names)")
    return KeyQuestion(qid, _scalar(qid, value.get("answer"), "reference answer"),
                       _full_score(qid, value.get("full_score")), _scalar(qid, value.get("rubric"), "rubric"),
                       QUESTION_TYPE_ALIASES[qtype] if qtype is not None else None, _page(qid, value.get("page")))


class _RepeatedQuestion(ValueError):
    """A question id given twice in an answer key."""


def _once_each(pairs: list[tuple[str, object]]) -> dict:
    """A mapping whose keys are given once: a question answered twice in a key is a slip that both readers would
    settle silently (the last answer wins)."""
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise _RepeatedQuestion(f"question {key!r} appears twice (keep one reference answer per question)")
        seen[key] = value
    return seen


class _KeyLoader(yaml.BaseLoader):
    """YAML as text (no type conversion), each mapping's keys given once."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        mapping = super().construct_mapping(node, deep=deep)  # which refuses a key that is not text
        if len(mapping) < len(node.value):
            _once_each([(self.construct_object(k, deep=deep), None) for k, _ in node.value])
        return mapping


def load_answer_key(path: str | Path) -> AnswerKey:
    """The questions of a YAML or JSON answer key, in the file's order (the order the prompt lists them): question id
    -> reference answer, or -> {answer, full_score, rubric, question_type} for a question graded in points. Values
    are kept as written: YAML is read without type conversion and JSON numbers as their text, so `1.10` stays
    `1.10`; an empty YAML value (`3:`) or a JSON null means "no reference answer". A question given twice is
    refused; a UTF-8 byte order mark (a key saved by a Windows editor) is read past."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise ValueError(f"--answer-key {path}: name a .yaml, .yml or .json file")
    try:
        text = path.read_text(encoding="utf-8-sig")
        data = (json.loads(text, parse_float=str, parse_int=str, object_pairs_hook=_once_each) if suffix == ".json"
                else yaml.load(text, Loader=_KeyLoader))
    except _RepeatedQuestion as e:
        raise ValueError(f"--answer-key {path}: {e}") from None
    except (ValueError, RecursionError, yaml.YAMLError) as e:  # also bytes not UTF-8, nesting past Python's limit
        raise ValueError(f"--answer-key {path}: cannot be read ({' '.join(str(e).split())})") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"--answer-key {path}: must map question ids to reference answers (e.g. `1: 42`)")
    try:
        key = [_key_question(str(qid), value) for qid, value in data.items()]
    except ValueError as e:
        raise ValueError(f"--answer-key {path}: {e}") from None
    seen: dict[str, str] = {}
    for q in key:
        if not q.qid.strip():  # `"": 42` or `? ''`: no page prints it, no reply can name it
            raise ValueError(f"--answer-key {path}: a question with an empty id (its reference {brief(q.answer, 40)}): "
                             f"give it the number the page prints")
        other = seen.setdefault(question_id_key(q.qid), q.qid)
        if other != q.qid:  # `5` and `Q5`: a model's `第5题` would name both
            raise ValueError(f"--answer-key {path}: questions {other!r} and {q.qid!r} are one question as a page "
                             f"prints it (both read as {question_id_key(q.qid)!r}): keep one, or number them apart")
    return key


def key_references(key: AnswerKey | None) -> list[tuple[str, str | None]]:
    """The reference answers, as the prompt's references block lists them."""
    return [(q.qid, q.answer) for q in key or []]


def key_points(key: AnswerKey | None) -> list[tuple[str, float, str | None]]:
    """The questions graded in points, as the prompt's points block lists them."""
    return [(q.qid, q.full_score, q.rubric) for q in key or [] if q.full_score is not None]


def answer_key_hash(key: AnswerKey | None) -> str | None:
    """A hash of the key's content (not its file's bytes: reformatting the file changes no prompt). A key of plain
    answers hashes as it did before points, so that its graded folders resume."""
    if not key:
        return None
    content = key_references(key) if all(q.plain for q in key) else [
        [q.qid, q.answer, q.full_score, q.rubric, q.question_type, *([q.page] if q.page is not None else [])]
        for q in key]
    return hashlib.sha256(json.dumps(content, ensure_ascii=False).encode()).hexdigest()[:16]


def page_questions(key: AnswerKey | None, page: int) -> AnswerKey | None:
    """The key's questions asked on page `page` (1 the document's first): those the key places there and those it
    places nowhere; the whole key when it places none."""
    if not key:
        return key
    return [q for q in key if q.page is None or q.page == page]


def asked_ids(key: AnswerKey | None, page: int) -> list[str] | None:
    """The ids of the questions page `page` is asked for, as a page file records them where the key places
    questions on pages (so that a page numbered otherwise since is asked again); None where it places none."""
    if not key or all(q.page is None for q in key):
        return None
    return [q.qid for q in page_questions(key, page) or []]


def grading_prompt(coords: str, key: AnswerKey | None) -> str:
    """The evaluator's L3 instruction: answer-free, or answer-based with the key as the reference answers (and its
    full scores, where it gives them)."""
    return prompts.single_turn(L3, ANSWER_BASED if key else ANSWER_FREE, coords, None, key_references(key) or None,
                               key_points(key) or None)


def key_ids(key: AnswerKey | None) -> dict[str, str]:
    """The key's questions by their ids as compared (gbtrain.values.question_id_key): made once per page, not per
    item, so that a reply of many items against a long key stays linear."""
    return {question_id_key(q.qid): q.qid for q in key or []}


# Answers compared with the asked questions' references on one page (about 37 us each, 0.7 s in all): past it, an
# unnamed item is left unmatched (read_reply marks it), so that a reply of hundreds of unnamed items against a key
# of thousands of questions cannot take minutes.
MAX_REFERENCE_TRIES = 20_000


@dataclass
class ReferenceTries:
    """What is left of a page's MAX_REFERENCE_TRIES, and how many items went untried."""

    left: int = MAX_REFERENCE_TRIES
    skipped: int = 0


def question_of(item: PredictedItem, key: AnswerKey | None, asked: AnswerKey | None = None,
                ids: dict[str, str] | None = None,
                tries: ReferenceTries | None = None) -> tuple[str | None, str | None]:
    """The question an item answers and how it was found: ("id") the id the model wrote, read as a page prints it
    (gbtrain.values.question_id_key: `Q5`, `第五题` and `5.` are key question 5) or, without a key, as written; else
    ("reference") the one question of `asked` (the questions its page was asked for; by default the key's) whose
    reference the item's answer repeats (read by the reference's type, exactly: "(B)" repeats B, "1/2" repeats
    0.5), a fallback the tables count; else the id the model wrote, if any, matched to nothing (None). `ids`: the
    key's key_ids, where the caller has them; `tries`: the page's comparisons left (an item past them is not
    compared, and counted)."""
    given = item.question_id
    if key is None:
        return given, "id" if given else None
    found = (key_ids(key) if ids is None else ids).get(question_id_key(given)) if given else None
    if found is not None:
        return found, "id"
    references = [q for q in (key if asked is None else asked) if q.answer is not None]
    if tries is not None:
        if len(references) > tries.left:
            tries.skipped += 1
            return given, None
        tries.left -= len(references)
    matches = [q.qid for q in references if answers_equivalent(
        item.answer, q.answer, answer_type_of(q.question_type, q.answer), Fraction(0)) is True]
    return (matches[0], "reference") if len(matches) == 1 else (given, None)


Found = list[tuple[str | None, str | None]]  # question_of's (question, how) of a page's items


def by_position(found: Found, asked: AnswerKey | None) -> Found:
    """question_of's answers for a page's items in reading order, with the key's unnumbered questions (`#1`, `#2`,
    ...: schema.UNNUMBERED, an exam that prints no numbers) given by position ("position"): the k-th item matched to
    no question takes the k-th of those questions its page was asked for that no item named or repeated."""
    taken = {qid for qid, how in found if how}
    free = [q.qid for q in asked or [] if q.qid.startswith(UNNUMBERED) and q.qid not in taken]
    out = []
    for qid, how in found:
        if how is None and free:
            qid, how = free.pop(0), "position"
        out.append((qid, how))
    return out

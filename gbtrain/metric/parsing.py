"""Parse a model's grading output into items, never crashing.

Handles what models actually write: ```json fences and prose around them, <think> blocks, a single
object instead of a list, {"results": [...]} wrappers, trailing commas, Python literals and single
quotes, boxes as strings or nested lists, numbers as strings, and output cut off mid-item (the
complete items before the cut are recovered). The scanner tracks strings, so braces and brackets
inside text do not confuse it.

Hostile output cannot stall or crash the scorer: brackets are matched in one linear pass, a response
over MAX_RESPONSE_CHARS or nested deeper than MAX_DEPTH is unparsable with its own reason, and
numbers too large for a float are invalid values, not errors.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field

from gbtrain.values import points_from_text
from gbtrain.vocabulary import FALSE_WORDS, TRUE_WORDS

# Failure reasons (the scorer counts them).
EMPTY = "empty"  # nothing but whitespace / reasoning
NO_JSON = "no_json"  # no list or object found
NOT_ITEMS = "not_items"  # JSON found, but no object items in it
TRUNCATED = "truncated"  # cut off; the complete items before the cut were kept (may be none)
MALFORMED = "malformed_items"  # some elements of the list could not be read; the others were kept
TOO_LARGE = "too_large"  # longer than MAX_RESPONSE_CHARS: not read (8,192 tokens are ~40k characters)
TOO_DEEP = "too_deep"  # brackets nested deeper than MAX_DEPTH: not read (a grading answer nests 3-4 deep)

MAX_RESPONSE_CHARS = 1_000_000
MAX_DEPTH = 32

_REASONING_TAG = re.compile(r"<(/?)(think|thinking|reasoning|reflection)>", re.I)
_WORD = re.compile(r"[A-Za-z_]+")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n?(.*?)(```|$)", re.S)
_WRAPPER_KEYS = ("results", "result", "items", "answers", "predictions", "grading", "output", "data", "questions")
# The keys a reply may name its boxes and judgments by (public: the confidences find their tokens by them)
BOX_KEYS = ("bbox_2d", "bbox", "box", "bboxes")
_TEXT_KEYS = ("text", "transcription", "hand", "handwriting")
_ANSWER_KEYS = ("answer", "derived_answer")
CORRECT_KEYS = ("correctness", "correct", "is_correct", "judgment")
_SCORE_KEYS = ("score", "points")
QUESTION_KEYS = ("question_id", "question", "qid", "id")  # what models name the question an answer belongs to
# Why a model's score is no number of points (the points report lists each).
NOT_A_NUMBER, NOT_FINITE = "not a number", "not finite"


@dataclass
class ParseResult:
    items: list[dict] = field(default_factory=list)
    reason: str | None = None  # None when the output parsed cleanly

    @property
    def ok(self) -> bool:
        return self.reason is None


def strip_reasoning(text: str) -> str:
    """Drop <think>...</think>-style blocks (an opening tag with the next closing tag of its name); then,
    with a closing tag left, keep what follows the last one; with an opening tag left (never closed), the
    output from it on is reasoning. One pass over the tags."""
    tags = [(m.start(), m.end(), bool(m.group(1)), m.group(2).lower()) for m in _REASONING_TAG.finditer(text)]
    kept, pos, i = [], 0, 0
    next_close: dict[str, int] = {}  # per name, the index in `tags` from which to look for its closing tag
    while i < len(tags):
        start, _, closing, name = tags[i]
        if not closing:
            j = max(next_close.get(name, 0), i + 1)
            while j < len(tags) and not (tags[j][2] and tags[j][3] == name):
                j += 1
            next_close[name] = j
            if j < len(tags):  # a block: drop it and go on after its closing tag
                kept.append(text[pos:start])
                pos, i = tags[j][1], j + 1
                continue
        i += 1
    text = "".join(kept) + text[pos:]
    last_close, first_open = None, None
    for m in _REASONING_TAG.finditer(text):
        if m.group(1):
            last_close, first_open = m, None
        elif first_open is None:
            first_open = m
    if last_close is not None:
        text = text[last_close.end():]
    if first_open is not None:
        text = text[:first_open.start() - (last_close.end() if last_close is not None else 0)]
    return text


class _Brackets:
    """Every bracket pair of a text, matched in one pass that honours strings: `end(start)` is O(1).
    A single quote inside a word (don't) is text, not a Python string opener."""

    def __init__(self, text: str):
        self.close: dict[int, int] = {}
        self.max_depth = 0
        stack: list[tuple[str, int]] = []
        quote: str | None = None
        pairs = {"[": "]", "{": "}"}
        i, n = 0, len(text)
        while i < n:
            ch = text[i]
            if quote:
                if ch == "\\":
                    i += 2
                    continue
                if ch == quote:
                    quote = None
            elif ch in "\"'":
                if not (ch == "'" and 0 < i < n - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()):
                    quote = ch
            elif ch in pairs:
                stack.append((pairs[ch], i))
                self.max_depth = max(self.max_depth, len(stack))
            elif ch in "]}" and stack and ch == stack[-1][0]:
                self.close[stack.pop()[1]] = i + 1
            i += 1
        self.length = n

    def end(self, start: int) -> tuple[int, bool]:
        """From an opening bracket at `start`, the index just past its matching close; when the text ends
        first, (len(text), False)."""
        end = self.close.get(start)
        return (end, True) if end is not None else (self.length, False)


def _python_literals(s: str) -> str:
    """JSON bare words -> Python (true -> True ...), outside strings, for ast.literal_eval."""
    out, quote, i = [], None, 0
    words = {"true": "True", "false": "False", "null": "None"}
    while i < len(s):
        ch = s[i]
        if quote:
            out.append(ch)
            if ch == "\\" and i + 1 < len(s):
                out.append(s[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = None
            i += 1
            continue
        if ch in "\"'":
            quote = ch
            out.append(ch)
            i += 1
            continue
        m = _WORD.match(s, i)
        if m:
            word = m.group(0)
            out.append(words.get(word, word))
            i += len(word)
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def loads_lenient(s: str):
    """json.loads, else the same text read as a Python literal (single quotes, True/None, trailing commas).
    Raises ValueError when neither reads it."""
    try:
        return json.loads(s)
    except (ValueError, RecursionError):  # JSONDecodeError, or an integer over Python's digit limit
        pass
    try:
        return ast.literal_eval(_python_literals(s))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
        raise ValueError(f"not JSON or a Python literal: {e}") from e


def _list_items(text: str, brackets: _Brackets, start: int) -> tuple[list, bool, int]:
    """(elements, closed, unreadable) of the list opening at `start`. A list cut short yields its
    complete elements; an element that cannot be read is skipped and counted."""
    end, closed = brackets.end(start)
    if closed:
        try:
            value = loads_lenient(text[start:end])
            return (value if isinstance(value, list) else [value]), True, 0
        except ValueError:
            pass
    # Element by element: each complete {...} (or [...]) at depth one.
    items, bad, i = [], 0, start + 1
    while i < end:
        ch = text[i]
        if ch in "{[":
            e, ok = brackets.end(i)
            if not ok:
                return items, False, bad
            try:
                items.append(loads_lenient(text[i:e]))
            except ValueError:
                bad += 1
            i = e
        elif ch == "]":
            return items, True, bad
        else:
            i += 1
    return items, closed, bad


def _unwrap(value) -> list | None:
    """A list of items from a parsed value: the list itself, a wrapper's list, or one object."""
    if isinstance(value, list):
        if len(value) == 1 and isinstance(value[0], list) and all(isinstance(v, dict) for v in value[0]):
            return value[0]  # [[{...}, {...}]]
        return value
    if isinstance(value, dict):
        if not value:
            return []
        for key in _WRAPPER_KEYS:
            if isinstance(value.get(key), list):
                return value[key]
        lists = [v for v in value.values() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)]
        if len(lists) == 1 and not any(k in value for k in BOX_KEYS):
            return lists[0]
        return [value]
    return None


def _from_text(text: str) -> ParseResult | None:
    """Parse the first list or object in `text`; None when there is none."""
    brackets = _Brackets(text)
    if brackets.max_depth > MAX_DEPTH:
        return ParseResult([], TOO_DEEP)
    for m in re.finditer(r"[\[{]", text):
        start = m.start()
        if text[start] == "[":
            items, closed, bad = _list_items(text, brackets, start)
            if not items and closed:
                # "[]" is a valid empty answer; "[1, 2]" style prose brackets are not items
                end, _ = brackets.end(start)
                if text[start:end].replace(" ", "") == "[]":
                    return ParseResult([], None)
                continue
            if not items and not closed:
                return ParseResult([], TRUNCATED)
            objs = [it for it in (_unwrap(items) or []) if isinstance(it, dict)]
            if not objs:
                continue
            return ParseResult(objs, TRUNCATED if not closed else (MALFORMED if bad else None))
        end, closed = brackets.end(start)
        if closed:
            try:
                value = loads_lenient(text[start:end])
            except ValueError:
                continue
            objs = [it for it in (_unwrap(value) or []) if isinstance(it, dict)]
            if objs or value == {}:
                return ParseResult(objs, None)
            continue
        # An object cut off: maybe a wrapper whose list holds complete items.
        inner = text.find("[", start)
        if inner != -1:
            items, _, _ = _list_items(text, brackets, inner)
            objs = [it for it in items if isinstance(it, dict)]
            return ParseResult(objs, TRUNCATED)
        return ParseResult([], TRUNCATED)
    return None


def parse_response(response: str | None) -> ParseResult:
    """The items of a model response (list of dicts, raw values) and why parsing was not clean."""
    if response is None or not response.strip():
        return ParseResult([], EMPTY)
    if len(response) > MAX_RESPONSE_CHARS:
        return ParseResult([], TOO_LARGE)
    text = strip_reasoning(response)
    if not text.strip():
        return ParseResult([], EMPTY)
    fenced = [m.group(2) for m in _FENCE.finditer(text)]
    for block in reversed(fenced):  # the last fenced block is usually the final answer
        result = _from_text(block)
        if result is not None:
            return result
    result = _from_text(text)
    if result is not None:
        return result
    return ParseResult([], NOT_ITEMS if re.search(r"[\[{]", text) else NO_JSON)


# ------------------------------------------------------------------------------------ field values
def parse_number(v) -> float | None:
    if isinstance(v, bool):
        return None
    try:  # an integer beyond a float's range (a 401-digit "coordinate") is no number
        if isinstance(v, int | float):
            return float(v) if math.isfinite(v) else None
        if isinstance(v, str):
            f = float(v.strip())
            return f if math.isfinite(f) else None
    except (ValueError, OverflowError):
        return None
    return None


def parse_points(v) -> tuple[float | None, str | None]:
    """A model's score as points, or why it is none: (points, None), or (None, NOT_A_NUMBER / NOT_FINITE). A number
    written as text counts as gbtrain.values.points_from_text reads it ("7.5", "2,5"); a fraction or a grade ("7/10",
    "B") does not."""
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        return None, NOT_A_NUMBER
    try:
        value = float(points_from_text(v) if isinstance(v, str) else v)
    except ValueError as e:
        return None, NOT_FINITE if str(e) == "not a finite number" else NOT_A_NUMBER
    except OverflowError:  # an integer beyond a float's range
        return None, NOT_FINITE
    return (value, None) if math.isfinite(value) else (None, NOT_FINITE)


def parse_boxes(value) -> list[list[float]]:
    """Boxes of an item's bbox field: [x1,y1,x2,y2], several of those, a polygon of [x, y] points, or
    any of these as a string. Invalid parts are dropped; [] when nothing valid remains."""
    if isinstance(value, str):
        try:
            value = loads_lenient(value.strip())
        except ValueError:
            nums = re.findall(r"-?\d+(?:\.\d+)?", value)
            value = [float(n) for n in nums] if len(nums) == 4 else None
    if not isinstance(value, list | tuple) or not value:
        return []
    if all(not isinstance(v, list | tuple) for v in value):
        nums = [parse_number(v) for v in value]
        return [nums] if len(nums) == 4 and all(n is not None for n in nums) else []
    if all(isinstance(v, list | tuple) and len(v) == 2 for v in value):  # polygon points
        pts = [(parse_number(a), parse_number(b)) for a, b in value]
        pts = [p for p in pts if p[0] is not None and p[1] is not None]
        if len(pts) >= 2:
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            return [[min(xs), min(ys), max(xs), max(ys)]]
        return []
    boxes: list[list[float]] = []
    for v in value:
        boxes += parse_boxes(v)
    return boxes


def _first(item: dict, keys: tuple[str, ...]):
    for k in keys:
        if k in item:
            return item[k]
    return None


def _as_text(v) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return "".join(_as_text(x) for x in v)
    return str(v)


# A judgment may also be 1 / 0 or a cross "x"; as an answer these are a number and a variable (judges keeps them).
_TRUE = TRUE_WORDS | {"1"}
_FALSE = FALSE_WORDS | {"0", "x"}


def coerce_correctness(v) -> bool | None:
    """A judgment as a boolean; None when it is not one (the scorer fails such a judgment)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float) and v in (0, 1):
        return bool(v)
    if isinstance(v, str):
        s = v.strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    return None


@dataclass
class PredictedItem:
    """One normalised prediction: boxes in the model's convention, and the three answers."""

    index: int
    boxes: list[list[float]]
    text: str
    answer: str
    correctness: bool | None
    raw: dict
    score: object = None  # the raw value of its score key (None: no score given), read by parse_points
    question_id: str | None = None  # the question it answers, as the model named it (None: not named)
    confidence: float | None = None  # of its judgment, from the reply's logprobs (metric.confidence.annotate)
    box_confidence: float | None = None  # of its box, the same way


def question_id(item: dict) -> str | None:
    """The question an item names (question_id, or the keys models use for it), as text; None when it names none."""
    value = _first(item, QUESTION_KEYS)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    named = (str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)).strip()
    return named or None


def normalize_items(items: list[dict]) -> list[PredictedItem]:
    return [PredictedItem(i, parse_boxes(_first(it, BOX_KEYS)), _as_text(_first(it, _TEXT_KEYS)),
                          _as_text(_first(it, _ANSWER_KEYS)), coerce_correctness(_first(it, CORRECT_KEYS)), it,
                          _first(it, _SCORE_KEYS), question_id=question_id(it))
            for i, it in enumerate(items)]

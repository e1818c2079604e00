"""Typed annotation records: the one schema that the reader, generator, builder and scorer share.

The GradingBench files mix Chinese and English keys and values; everything is normalised here to
English vocabularies, and the raw value is kept where it matters for round trips or reporting.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cached_property

from gbtrain.vocabulary import LEVELS as LEVELS  # re-exported: the levels a record has

SUBJECTS = ("Mathematics", "Chinese", "English", "Science", "Humanities")
STAGES = ("Elementary", "Junior_High", "Senior_High")
QUESTION_TYPES = ("Fill-in-the-blank", "Multiple-choice", "True-False", "Problem-Solving", "Other")

# Grading labels. "right"/"wrong" are the expert verdicts; the other three occur in the data and are
# scored as "wrong" unless a scorer excludes them. "question" marks are context regions, not answers.
RIGHT, WRONG, HALF_RIGHT, UNANSWERED, UNKNOWN = "right", "wrong", "half_right", "unanswered", "unknown"
CONTEXT = "question"

LABEL_ALIASES = {
    "right": RIGHT, "正确": RIGHT, "对": RIGHT,
    "wrong": WRONG, "错误": WRONG, "错": WRONG,
    "半对": HALF_RIGHT, "half_right": HALF_RIGHT,
    "未作答": UNANSWERED, "unanswered": UNANSWERED,
    "未知": UNKNOWN, "unknown": UNKNOWN,
    "question": CONTEXT, "整题": CONTEXT,
    "Other": UNKNOWN,  # the released benchmark's normaliser writes it for the Chinese labels it does not know
}
LABELS = (RIGHT, WRONG, HALF_RIGHT, UNANSWERED, UNKNOWN, CONTEXT)
VERDICTS = tuple(label for label in LABELS if label != CONTEXT)  # what an answer can be judged
# Every word that names a label wherever a person writes one (annotations, converters' exports, review sheets,
# Label Studio choices); gbtrain.values.verdict_of reads them, case-insensitively.
LABEL_WORDS = {**LABEL_ALIASES, "true": RIGHT, "false": WRONG}
STAGE_ALIASES = {
    "小学": "Elementary", "Elementary": "Elementary", "Primary": "Elementary",
    "初中": "Junior_High", "Junior_High": "Junior_High", "Middle": "Junior_High", "Junior High": "Junior_High",
    "高中": "Senior_High", "Senior_High": "Senior_High", "High": "Senior_High", "Senior High": "Senior_High",
    "其他": "Other", "Other": "Other",  # a stage the annotators did not list (the released data has it)
}
QUESTION_TYPE_ALIASES = {
    "填空": "Fill-in-the-blank", "口算": "Fill-in-the-blank", "简单口算": "Fill-in-the-blank",
    "Fill-in-the-blank": "Fill-in-the-blank", "Fill-in-blank": "Fill-in-the-blank",
    "选择": "Multiple-choice", "Multiple-choice": "Multiple-choice",
    "判断": "True-False", "True-False": "True-False", "True-false": "True-False", "True/False": "True-False",
    "解答": "Problem-Solving", "开放": "Problem-Solving", "Problem-Solving": "Problem-Solving",
    "Solution": "Problem-Solving",
    "其他": "Other", "Other": "Other",
}
CONTENT_FORMAT_ALIASES = {
    "文本": "Text-only", "Text-only": "Text-only", "Text": "Text-only",
    "图表": "Chart-based", "作图": "Chart-based", "Chart-based": "Chart-based", "Chart": "Chart-based",
    "其他": "Other", "Other": "Other",
}
CONTENT_FORMATS = ("Text-only", "Chart-based", "Other")
NO_REFERENCE = "答案暂无"  # the data's placeholder for "no reference answer available"


@dataclass(frozen=True)
class Box:
    """Axis-aligned box in original-image pixels (x1 <= x2, y1 <= y2)."""

    x1: float
    y1: float
    x2: float
    y2: float

    @staticmethod
    def enclosing(points: list[tuple[float, float]] | list[Box]) -> Box:
        if points and isinstance(points[0], Box):
            return Box(min(b.x1 for b in points), min(b.y1 for b in points),
                       max(b.x2 for b in points), max(b.y2 for b in points))
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        return Box(min(xs), min(ys), max(xs), max(ys))

    @property
    def width(self) -> float:
        return self.x2 - self.x1

    @property
    def height(self) -> float:
        return self.y2 - self.y1

    @property
    def center(self) -> tuple[float, float]:
        return (self.x1 + self.x2) / 2, (self.y1 + self.y2) / 2

    @property
    def diagonal(self) -> float:
        return math.hypot(self.width, self.height)

    @property
    def area(self) -> float:
        return max(0.0, self.width) * max(0.0, self.height)

    def is_finite(self) -> bool:
        return all(math.isfinite(v) for v in (self.x1, self.y1, self.x2, self.y2))

    def clip(self, width: float, height: float) -> Box:
        return Box(min(max(self.x1, 0.0), width), min(max(self.y1, 0.0), height),
                   min(max(self.x2, 0.0), width), min(max(self.y2, 0.0), height))

    def expand(self, margin: float, width: float, height: float) -> Box:
        return Box(self.x1 - margin, self.y1 - margin, self.x2 + margin, self.y2 + margin).clip(width, height)

    def iou(self, other: Box) -> float:
        inter = Box(max(self.x1, other.x1), max(self.y1, other.y1), min(self.x2, other.x2), min(self.y2, other.y2))
        if inter.width <= 0 or inter.height <= 0:
            return 0.0
        union = self.area + other.area - inter.area
        return inter.area / union if union > 0 else 0.0

    def as_list(self) -> list[float]:
        return [self.x1, self.y1, self.x2, self.y2]


@dataclass
class Mark:
    """One annotated region: a student's answer area, or a question ("context") region.

    Records, marks and groups are read once and then treated as immutable (boxes are cached)."""

    points: list[tuple[float, float]]  # polygon as annotated; a flat box is stored as its two corners
    label: str  # normalised: RIGHT, WRONG, HALF_RIGHT, UNANSWERED, UNKNOWN or CONTEXT
    raw_label: str
    mark_id: str = ""  # "parent-sub", or "parent" for a question without sub-parts
    hand: str = ""  # transcription of the handwriting
    std: str | None = None  # reference answer as annotated (may be NO_REFERENCE); None when absent
    question_type: str = "Other"
    content_format: str = "Other"
    stage: str | None = None
    question_id: str | None = None  # on context marks: the question the region belongs to
    # Points (docs/data.md): the question's full score, the teacher's score and a second teacher's, as annotated
    # (an int stays an int, so a file round-trips), with the rubric, comment and arbitration note; None when absent.
    full_score: float | None = None
    score: float | None = None
    score_2: float | None = None
    rubric: str | None = None  # the rubric's text or id
    rubric_version: str | None = None
    comment: str | None = None  # the teacher's comment
    arbitration: str | None = None  # how the two teachers' scores were settled
    extra_attributes: dict = field(default_factory=dict)  # attributes not understood, kept for round trips
    extra: dict = field(default_factory=dict)  # mark-level keys not understood, kept for round trips

    @property
    def reference(self) -> str | None:
        """The reference answer, or None when there is none (absent, empty or NO_REFERENCE)."""
        if self.std is None or not self.std.strip() or self.std.strip() == NO_REFERENCE:
            return None
        return self.std

    @cached_property
    def box(self) -> Box:
        return Box.enclosing(self.points)

    @property
    def is_context(self) -> bool:
        return self.label == CONTEXT

    def moved(self, dx: float, dy: float, ndigits: int) -> Mark:
        """This mark on a crop whose top-left corner is (dx, dy) on its page, every other field kept (points,
        scores, extras): the one way an L1 crop's marks are made, by the generator and the converters alike."""
        return replace(self, points=[(round(x - dx, ndigits), round(y - dy, ndigits)) for x, y in self.points])


UNNUMBERED = "#"  # a question id `#k` (`#k-j`): a page that prints no question numbers, its k-th question by position


def printed_id(question_id: str | None) -> str | None:
    """A question id as the page prints it: None for an unnumbered one (`#k`, numbered by position only), which a
    target gives as null and a model is not asked to write."""
    return None if question_id is None or question_id.startswith(UNNUMBERED) else question_id


@dataclass
class Group:
    """The answer marks of one record that share one id: the unit that is graded and scored."""

    group_id: str
    marks: list[Mark]

    @cached_property
    def _ordered(self) -> list[Mark]:
        return sorted(self.marks, key=lambda m: (m.box.y1, m.box.x1))

    @cached_property
    def box(self) -> Box:
        return Box.enclosing([m.box for m in self.marks])

    @property
    def label(self) -> str:
        """right only if every mark is right; otherwise the first non-right label in reading order."""
        labels = [m.label for m in self._ordered]
        return RIGHT if all(lbl == RIGHT for lbl in labels) else next(lbl for lbl in labels if lbl != RIGHT)

    @property
    def is_right(self) -> bool:
        return self.label == RIGHT

    @property
    def hand(self) -> str:
        return "".join(m.hand for m in self._ordered)

    @property
    def std(self) -> str | None:
        """Distinct reference answers in reading order, joined; None when no mark has one."""
        seen: list[str] = []
        for m in self._ordered:
            if m.reference is not None and m.reference not in seen:
                seen.append(m.reference)
        return "；".join(seen) if seen else None

    @property
    def parent_id(self) -> str:
        return self.group_id.split("-", 1)[0]

    def _agreed(self, attr: str):
        """The one value the group's marks give for a points field (marks without it do not count); None when none
        does. Marks that disagree are an error: which of their values is the group's cannot be guessed."""
        values = {getattr(m, attr) for m in self.marks} - {None}
        if len(values) > 1:
            shown = ", ".join(sorted(repr(v) for v in values))
            raise ValueError(f"group {self.group_id}: its marks disagree on {attr} ({shown}): give every mark of "
                             f"the group the same {attr}, or it on one mark only")
        return next(iter(values), None)

    @property
    def full_score(self) -> float | None:
        return self._agreed("full_score")

    @property
    def score(self) -> float | None:
        """The teacher's points (0..full_score); None when the group is graded right/wrong only."""
        return self._agreed("score")

    @property
    def score_2(self) -> float | None:
        """A second teacher's points: the human agreement the model is measured beside."""
        return self._agreed("score_2")

    @property
    def rubric(self) -> str | None:
        return self._agreed("rubric")

    @property
    def rubric_version(self) -> str | None:
        return self._agreed("rubric_version")

    @property
    def comment(self) -> str | None:
        return self._agreed("comment")

    @property
    def arbitration(self) -> str | None:
        return self._agreed("arbitration")

    def _common(self, attr: str) -> str:
        return Counter(getattr(m, attr) for m in self.marks).most_common(1)[0][0]

    @property
    def question_type(self) -> str:
        return self._common("question_type")

    @property
    def content_format(self) -> str:
        return self._common("content_format")

    @property
    def stage(self) -> str | None:
        return self._common("stage")


@dataclass
class Record:
    """One annotation record: an image (page or crop) with its marks."""

    record_id: str
    level: str
    subject: str
    image: str  # relative to images/<level>/, e.g. "Mathematics/p0001.jpg"
    width: int
    height: int
    marks: list[Mark]
    page: str | None = None  # the source page, when the file says (L1 crops); see page_id
    extra: dict = field(default_factory=dict)

    @property
    def page_id(self) -> str:
        """The page a record comes from, used to split by page: the record's `page_id` when given (the reader
        derives an L1 crop's from its name), else the image file name (L2 and L3 images are whole pages)."""
        return self.page or self.image.rsplit("/", 1)[-1].rsplit(".", 1)[0]

    @cached_property
    def groups(self) -> list[Group]:
        """Answer groups in reading order (by the top, then left, of each group's box); made once (a record's marks
        are not changed after it is read, and the scorer asks for them per item)."""
        by_id: dict[str, list[Mark]] = {}
        for m in self.marks:
            if not m.is_context:
                by_id.setdefault(m.mark_id, []).append(m)
        groups = [Group(gid, ms) for gid, ms in by_id.items()]
        return sorted(groups, key=lambda g: (g.box.y1, g.box.x1))

    @property
    def context_regions(self) -> list[Box]:
        return [m.box for m in self.marks if m.is_context]

    @property
    def stage(self) -> str | None:
        stages = [m.stage for m in self.marks if m.stage]
        return Counter(stages).most_common(1)[0][0] if stages else None

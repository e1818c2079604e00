"""The YAML mapping that says how an annotation tool's export reads as GradingBench marks.

Annotation tools know labels, shapes and free-form attributes; GradingBench needs answer areas with an id, a
transcription, a reference answer and a verdict, and question regions with a question id. The mapping names, per
project, which label is which kind of region and which attribute (Label Studio control, CVAT attribute, labelme
key, COCO attribute) holds which field. See configs/convert/example.yaml.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from gbtrain.config import load_config
from gbtrain.schema import STAGE_ALIASES, VERDICTS
from gbtrain.text import brief

FORMATS = ("labelstudio", "cvat", "labelme", "coco")
LABEL_FIELD = "@label"  # a field name meaning "the region's label" (e.g. categories named right / wrong)


@dataclass
class FieldNames:
    """Where each GradingBench field is read: the tool's attribute name on a region (stage, subject, question type
    and content format also on the page), LABEL_FIELD for the region's label, or null when not annotated."""

    id: str | None = "id"  # answer: "parent-sub" question id (e.g. 3-2), or "3"; null: pages print no numbers,
    # answers are numbered by position (#1, #2, ...; schema.UNNUMBERED)
    hand: str | None = "hand"  # answer: transcription of the handwriting
    std: str | None = "std"  # answer: reference answer (optional)
    verdict: str | None = "verdict"  # answer: right / wrong / half_right / unanswered / unknown (or an alias)
    question_id: str | None = "question_id"  # question region: its question id (else taken from its answers)
    question_type: str | None = None  # 填空 / Fill-in-the-blank / 选择 / ... (schema aliases)
    content_format: str | None = None  # 文本 / Text-only / 图表 / Chart-based / ...
    stage: str | None = None  # 小学 / Elementary / 初中 / Junior_High / ...
    subject: str | None = None  # page: Mathematics / Chinese / English / Science / Humanities (or your own)
    # points (docs/data.md), all optional: a question graded in points has full_score and the teacher's score
    full_score: str | None = None  # answer: the question's points (a number above 0)
    score: str | None = None  # answer: the teacher's points, 0..full_score
    score_2: str | None = None  # answer: a second teacher's points, 0..full_score
    rubric: str | None = None  # answer: the rubric's text or id
    rubric_version: str | None = None
    comment: str | None = None  # answer: the teacher's comment
    arbitration: str | None = None  # answer: how two teachers' scores were settled


@dataclass
class ConvertMapping:
    """data_builders/convert.py: how one tool's export maps onto the GradingBench layout."""

    format: str = "???"  # labelstudio | cvat | labelme | coco
    answer_labels: list[str] = field(default_factory=lambda: ["answer"])
    question_labels: list[str] = field(default_factory=lambda: ["question"])
    ignore_labels: list[str] = field(default_factory=list)  # left out on purpose, counted in the report
    fields: FieldNames = field(default_factory=FieldNames)
    verdicts: dict[str, str] = field(default_factory=dict)  # your spellings -> right / wrong / ... (added to aliases)
    subject: str | None = None  # when the page does not say (fields.subject)
    stage: str | None = None  # when neither the region nor the page says (fields.stage)
    image_key: str = "image"  # Label Studio: the task data key that holds the image
    unnamed_ids: str | None = None  # regex: ids that name no question (a review export's item<n>): read as none


def mapping_problems(m: ConvertMapping) -> list[str]:
    """What makes a mapping unusable, each naming the key: checked before any export is read."""
    problems = []
    if m.format not in FORMATS:
        problems.append(f"format: {m.format!r} is not one of {', '.join(FORMATS)}")
    if not m.answer_labels:
        problems.append("answer_labels: name at least one label")
    kinds = {"answer_labels": m.answer_labels, "question_labels": m.question_labels, "ignore_labels": m.ignore_labels}
    seen: dict[str, str] = {}
    for kind, labels in kinds.items():
        for label in labels:
            if label in seen:
                problems.append(f"{kind}: label {label!r} is also in {seen[label]}")
            seen.setdefault(label, kind)
    problems += [f"fields.{name}: required (the attribute that holds it)" for name in ("hand", "verdict")
                 if not getattr(m.fields, name)]
    problems += [f"verdicts.{k}: {v!r} is not one of {', '.join(VERDICTS)}" for k, v in m.verdicts.items()
                 if v not in VERDICTS]
    if m.unnamed_ids is not None:
        try:
            re.compile(m.unnamed_ids)
        except re.error as e:
            problems.append(f"unnamed_ids: {brief(m.unnamed_ids, 60)} is not a regular expression ({e})")
    if m.stage is not None and m.stage not in STAGE_ALIASES:
        problems.append(f"stage: {m.stage!r} is not a known stage ({', '.join(sorted(set(STAGE_ALIASES.values())))})")
    return problems


def load_mapping(path: str | Path, overrides: list[str] | None = None) -> ConvertMapping:
    """The mapping file plus key=value overrides; unknown keys, wrong types and bad values are one ValueError
    naming the file."""
    mapping = load_config(ConvertMapping, path, overrides)
    problems = mapping_problems(mapping)
    if problems:
        raise ValueError(f"bad mapping {path}: " + "; ".join(problems))
    return mapping

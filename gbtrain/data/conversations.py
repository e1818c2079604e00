"""SFT conversations built from annotation records.

A conversation is TRL's conversational vision format: ``messages`` whose first user turn goes with the
record's image, and assistant turns that hold the JSON the model should answer. Boxes are written in
the configured coordinate convention with the same resize the processor applies (``gbtrain.coords``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gbtrain import prompts
from gbtrain.coords import DEFAULT_L2_MARGIN, PixelBudget, to_model
from gbtrain.schema import Box, Group, Record, printed_id
from gbtrain.vocabulary import ANSWER_BASED, L2, MODE_SHORT


@dataclass
class Conversation:
    sample_id: str
    record: Record
    mode: str
    turns: int  # 1, or 3 for the locate / solve / compare decomposition
    messages: list[dict]  # [{"role": "user"|"assistant", "content": str}, ...]


def group_answer(group: Group) -> str:
    """The answer a grader derives: the reference when there is one, else the student's own answer
    when it was judged right, else "" (unknown: a wrong answer with no reference)."""
    if group.std is not None:
        return group.std
    return group.hand if group.is_right else ""


def answer_items(record: Record, coords: str, budget: PixelBudget) -> list[dict]:
    """The assistant's JSON items for a record, in reading order: the question each answers (its group id, as the
    answer key and the references name it; null where the page prints no number: schema.printed_id), box,
    transcription, answer, judgment; a group graded in points adds its teacher's `score` (right/wrong-only groups
    are as before)."""
    return [
        {
            "question_id": printed_id(g.group_id),
            "bbox_2d": to_model(g.box.clip(record.width, record.height), record.width, record.height, coords, budget),
            "text": g.hand,
            "answer": group_answer(g),
            "correctness": g.is_right,
            **({"score": g.score} if g.full_score is not None else {}),
        }
        for g in record.groups
    ]


def points_to_grade(record: Record) -> list[tuple[str, float, str | None]] | None:
    """The groups graded in points, with full score and rubric, as the prompt states them; None for a
    right/wrong-only record. The builder and the evaluator both ask here."""
    points = [(g.group_id, g.full_score, g.rubric) for g in record.groups if g.full_score is not None]
    return points or None


def regions_to_grade(record: Record, margin: float) -> list[Box]:
    """L2: the question regions to grade. From the record's question marks; without any, the enclosing
    box of the record's answer boxes plus a margin (a fraction of the page's longer side)."""
    if record.context_regions:
        return [b.clip(record.width, record.height) for b in record.context_regions]
    groups = record.groups
    if not groups:
        raise ValueError(f"record {record.record_id}: no question region and no answer marks to derive one from")
    box = Box.enclosing([g.box for g in groups])
    return [box.expand(margin * max(record.width, record.height), record.width, record.height)]


def references(record: Record) -> list[tuple[str, str | None]]:
    return [(g.group_id, g.std) for g in record.groups]


def dump(items: list[dict]) -> str:
    return json.dumps(items, ensure_ascii=False)


def prompt_inputs(record: Record, mode: str, coords: str, budget: PixelBudget,
                  l2_margin: float) -> tuple[list[list] | None, list[tuple[str, str | None]] | None]:
    """What a record's first prompt carries besides the instructions: the L2 regions to grade (in the model's
    convention) and, answer-based, the references. The builder and the evaluator both ask here, so a model is
    evaluated on the prompts it was trained on."""
    regions = None
    if record.level == L2:
        regions = [to_model(b, record.width, record.height, coords, budget)
                   for b in regions_to_grade(record, l2_margin)]
    return regions, references(record) if mode == ANSWER_BASED else None


def build_conversation(record: Record, mode: str, three_turn: bool, coords: str, budget: PixelBudget,
                       l2_margin: float = DEFAULT_L2_MARGIN) -> Conversation:
    regions, refs = prompt_inputs(record, mode, coords, budget, l2_margin)
    points = points_to_grade(record)
    items = answer_items(record, coords, budget)
    if not three_turn:
        messages = [
            {"role": "user", "content": prompts.single_turn(record.level, mode, coords, regions, refs, points)},
            {"role": "assistant", "content": dump(items)},
        ]
    else:
        messages = [
            {"role": "user", "content": prompts.turn_locate(record.level, coords, regions)},
            {"role": "assistant", "content": dump([{k: i[k] for k in ("question_id", "bbox_2d", "text")}
                                                   for i in items])},
            {"role": "user", "content": prompts.turn_solve(mode, refs)},
            {"role": "assistant", "content": dump([{"answer": i["answer"]} for i in items])},
            {"role": "user", "content": prompts.turn_compare(points)},
            {"role": "assistant", "content": dump([{k: i[k] for k in ("correctness", "score") if k in i}
                                                   for i in items])},
        ]
    turns = 3 if three_turn else 1
    sample_id = f"{record.level}-{record.record_id}-{MODE_SHORT[mode]}-t{turns}"
    return Conversation(sample_id, record, mode, turns, messages)


def with_image_placeholder(messages: list[dict]) -> list[dict]:
    """The structured form chat templates expect, the image placed before the first user text."""
    out = []
    for i, m in enumerate(messages):
        content = [{"type": "text", "text": m["content"]}]
        if i == 0:
            content.insert(0, {"type": "image"})
        out.append({"role": m["role"], "content": content})
    return out

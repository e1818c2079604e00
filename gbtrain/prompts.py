"""The instructions shown to the model: one wording for training (data builder) and testing (evaluator).

Three levels (L1 question crop, L2 one question on a page, L3 whole page), two modes (answer-free:
the model derives the answer itself; answer-based: reference answers are given), and the three-turn
decomposition (locate + transcribe, solve or align, compare).
"""

from __future__ import annotations

import hashlib

from gbtrain.coords import CONVENTIONS
from gbtrain.vocabulary import ANSWER_BASED, ANSWER_FREE, L1, L2, L3, MODES

_COORDS = {
    "qwen25": "[x1, y1, x2, y2] in pixels of the image as you see it",
    "abs": "[x1, y1, x2, y2] in pixels of the original image",
    "rel1000": "[x1, y1, x2, y2] scaled to 0-1000",
    "rel1000-yxyx": "[y1, x1, y2, x2] scaled to 0-1000",
    "rel1": "[x1, y1, x2, y2] as fractions 0-1 of the width and height",
    "rel1-cxcywh": "[cx, cy, w, h] as fractions 0-1 of the width and height",
}
assert set(_COORDS) == set(CONVENTIONS)

_SCOPE = {
    L1: "This image is one question cropped from a student's exam paper.",
    L2: "This image is a student's exam page.",
    L3: "This image is a student's exam page.",
}
_TRANSCRIBE = ("Transcribe the handwriting exactly as written (a wrong answer stays wrong; write \"\" for a "
               "blank answer).")
_QUESTION = ('Put the number of the question each answer belongs to in "question_id", as the page numbers it (a '
             'sub-question as "3-2").')


def _box_rule(coords: str) -> str:
    if coords not in _COORDS:
        raise ValueError(f"unknown coordinate convention {coords!r}")
    return f"Boxes are {_COORDS[coords]}."


def _region_rule(regions: list[list]) -> str:
    where = "; ".join(str(r) for r in regions)
    return f"Grade only the question in the region {where}; ignore everything else on the page."


def references_block(references: list[tuple[str, str | None]]) -> str:
    """The reference answers given in answer-based mode, one line per question id."""
    lines = [f"{qid}: {ref if ref is not None else '(no reference answer)'}" for qid, ref in references]
    return "Reference answers:\n" + "\n".join(lines)


def points_block(points: list[tuple[str, float, str | None]]) -> str:
    """Questions graded in points: each one's full score (and rubric), and where the points earned go. Only pages
    that carry points get it, so a right/wrong-only prompt is the same text as before points existed."""
    lines = [f"{qid}: {full:g} points" + (f" (rubric: {rubric})" if rubric else "") for qid, full, rubric in points]
    return ("Full scores:\n" + "\n".join(lines) + '\nFor each of these questions, put the points the student\'s '
            'answer earns (0 to its full score) in "score".')


def single_turn(level: str, mode: str, coords: str, regions: list[list] | None = None,
                references: list[tuple[str, str | None]] | None = None,
                points: list[tuple[str, float, str | None]] | None = None) -> str:
    """The one-turn grading instruction: locate, transcribe, answer, judge (and score, where points are given);
    output a JSON list."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
    parts = [_SCOPE[level]]
    if level == L2:
        parts.append(_region_rule(regions or []))
    parts.append("Find every handwritten answer area, each sub-question separately, and grade it.")
    parts.append(_QUESTION)
    parts.append(_TRANSCRIBE)
    if mode == ANSWER_FREE:
        parts.append('Solve each question yourself and put your answer in "answer".')
    else:
        parts.append(references_block(references or []))
        parts.append('Put the reference answer of each question in "answer".')
    parts.append('Set "correctness" to true if the student\'s answer is right, else false.')
    if points:
        parts.append(points_block(points))
    parts.append(_box_rule(coords))
    score = ', "score": 1' if points else ""
    parts.append('Reply with a JSON list in reading order: [{"question_id": "...", "bbox_2d": [...], "text": "...", '
                 f'"answer": "...", "correctness": true{score}}}]')
    return "\n".join(parts)


def turn_locate(level: str, coords: str, regions: list[list] | None = None) -> str:
    """Three-turn, turn 1: boxes and transcriptions only."""
    parts = [_SCOPE[level]]
    if level == L2:
        parts.append(_region_rule(regions or []))
    parts += ["Find every handwritten answer area, each sub-question separately.", _QUESTION, _TRANSCRIBE,
              _box_rule(coords), 'Reply with a JSON list in reading order: [{"question_id": "...", "bbox_2d": [...], '
                                 '"text": "..."}]']
    return "\n".join(parts)


def turn_solve(mode: str, references: list[tuple[str, str | None]] | None = None) -> str:
    """Three-turn, turn 2: derive the answers (answer-free) or align the given references (answer-based)."""
    if mode == ANSWER_FREE:
        return ('Now solve each of those questions yourself. Reply with a JSON list in the same order: '
                '[{"answer": "..."}]')
    return (references_block(references or []) + "\nMatch each answer area above with its reference answer. "
            'Reply with a JSON list in the same order: [{"answer": "..."}]')


def turn_compare(points: list[tuple[str, float, str | None]] | None = None) -> str:
    """Three-turn, turn 3: judge each student's answer against the answer of turn 2 (and score it, where points
    are given)."""
    if not points:
        return ('Compare each student\'s answer with that answer. Reply with a JSON list in the same order: '
                '[{"correctness": true}]')
    return ('Compare each student\'s answer with that answer.\n' + points_block(points) +
            '\nReply with a JSON list in the same order: [{"correctness": true, "score": 1}]')


def diag_locate(coords: str) -> str:
    """Diagnostics, localization only: boxes of every answer area, nothing else."""
    return "\n".join([_SCOPE[L1], "Find every handwritten answer area, each sub-question separately.",
                      _box_rule(coords), 'Reply with a JSON list in reading order: [{"bbox_2d": [...]}]'])


def diag_recognize(coords: str, box: list) -> str:
    """Diagnostics, recognition only: transcribe the handwriting inside a given box."""
    return "\n".join([_SCOPE[L1], f"Transcribe the handwriting inside the box {box}.", _TRANSCRIBE,
                      _box_rule(coords), 'Reply with JSON: {"text": "..."}'])


def diag_reason(question_id: str, transcription: str, mode: str, reference: str | None) -> str:
    """Diagnostics, reasoning only: judge a given transcription (with the reference in answer-based mode)."""
    parts = [_SCOPE[L1], f'The student\'s answer to question {question_id} reads: "{transcription}".']
    if mode == ANSWER_BASED:
        parts.append(references_block([(question_id, reference)]))
    parts.append('Is it right? Reply with JSON: {"correctness": true}')
    return "\n".join(parts)


def prompt_fingerprint() -> str:
    """A short hash of every instruction template, recorded with predictions to tie them to a wording."""
    probe = [single_turn(lvl, m, c, [[0, 0, 1, 1]], [("1", "x")]) for lvl in _SCOPE for m in MODES for c in _COORDS]
    points = [("1", 2, "r")]
    probe += [single_turn(L3, ANSWER_FREE, "qwen25", points=points), turn_compare(points)]
    probe += [turn_locate(L2, "qwen25", [[0, 0, 1, 1]]), turn_solve(ANSWER_FREE),
              turn_solve(ANSWER_BASED, [("1", "x")]), turn_compare(), diag_locate("qwen25"),
              diag_recognize("qwen25", [0, 0, 1, 1]), diag_reason("1", "x", ANSWER_BASED, "y")]
    return hashlib.sha256("\n".join(probe).encode()).hexdigest()[:12]

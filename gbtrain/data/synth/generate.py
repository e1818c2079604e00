"""Synthetic GradingBench datasets: pages -> L3 pages, L2 question records, L1 question crops.

Deterministic for a seed: page i draws everything from its own generator seeded by (seed, i), so
the result does not depend on the number of worker processes.
"""

from __future__ import annotations

import io
import os
import random
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from PIL import Image
from tqdm import tqdm

from gbtrain.config import option
from gbtrain.data.annotations import write_level, write_manifest
from gbtrain.data.pages import PageOutput, crop_jpeg, l1_crop, write_page
from gbtrain.data.synth import artifacts
from gbtrain.data.synth.banks import CHOICE, FILL, QUESTION_TYPES, RUBRICS, TF, make_question
from gbtrain.data.synth.render import DrawnAnswer, DrawnQuestion, question_mix, render_clean_page
from gbtrain.schema import LABEL_ALIASES, STAGES, SUBJECTS, Box, Mark, Record
from gbtrain.vocabulary import L1, L2, L3

MIN_WRONG_SHARE = 0.10


@dataclass(frozen=True)
class SynthOptions:
    wrong_share: float = 0.30
    blank_share: float = 0.04
    page_width: tuple[int, int] = (1000, 1240)  # width range; height follows an A4-like ratio
    subjects: tuple[str, ...] = SUBJECTS
    stages: tuple[str, ...] = STAGES
    question_types: tuple[str, ...] = QUESTION_TYPES
    scale: float = 1.0  # print and handwriting size against the page: larger means fewer, bigger questions
    two_column_share: float = 0.35
    question_slots: int = 16  # questions drawn for a page, in section order; those that do not fit are skipped
    min_answers: int = 5  # a page with fewer is laid out again
    points: bool = True  # every answer carries its full score, the teacher's points and its type's rubric (RUBRICS)

    def __post_init__(self):
        if not MIN_WRONG_SHARE <= self.wrong_share <= 0.9:
            raise ValueError(f"wrong_share must be in [{MIN_WRONG_SHARE}, 0.9], got {self.wrong_share}")
        if not 0 <= self.blank_share <= 0.3:
            raise ValueError(f"blank_share must be in [0, 0.3], got {self.blank_share}")
        for name, chosen, known in (("subjects", self.subjects, SUBJECTS), ("stages", self.stages, STAGES),
                                    ("question_types", self.question_types, QUESTION_TYPES)):
            if not chosen or not set(chosen) <= set(known):
                raise ValueError(f"{name} must be a non-empty subset of {', '.join(known)}, got {chosen}")
        if not 0.5 <= self.scale <= 4 or not 0 <= self.two_column_share <= 1 or self.min_answers < 1 \
                or self.question_slots < 1:
            raise ValueError(f"scale must be in [0.5, 4], two_column_share in [0, 1], min_answers and question_slots "
                             f">= 1, got {self.scale}, {self.two_column_share}, {self.min_answers}, "
                             f"{self.question_slots}")


# Named generator settings. "legible" is `demo.sh --full`'s: Elementary mathematics answered in digits, choice
# letters and ticks, drawn 2.5 times larger on one column, so that a page shrunk to a few hundred image tokens (what
# a CPU can train on) still shows each handwritten answer at least one token (28 px) tall. "marks" is the default
# demo's: the same pages with only choice and true/false questions, so every answer is one of six marks
# (CHARSETS), which a miniature's vision tower learns to read in a short warm-up.
PROFILES = {
    "gradingbench": SynthOptions(),
    "legible": SynthOptions(subjects=("Mathematics",), stages=("Elementary",), question_types=(FILL, CHOICE, TF),
                            scale=2.5, two_column_share=0.0, question_slots=4, min_answers=3),
    "marks": SynthOptions(subjects=("Mathematics",), stages=("Elementary",), question_types=(CHOICE, TF),
                          scale=2.5, two_column_share=0.0, question_slots=4, min_answers=2),
}
# What each reading profile's students write: the characters a miniature's vision warm-up teaches for it
# (gbtrain.miniature.warmup)
CHARSETS = {"legible": "0123456789-ABCD√×°", "marks": "ABCD√×"}


@dataclass
class SynthRun:
    """Everything one `data_builders/synth_pages.py` call needs; each field is one of its flags (gbtrain.cli)."""

    out: str = option(help="output folder (GradingBench layout)")
    pages: int = option(700, "pages to generate", bounds=(1, 10**7))
    seed: int = option(0, "dataset seed (page i draws from its own generator seeded by seed and i)",
                       bounds=(0, 2**32 - 1))
    profile: str = option("gradingbench", "generator settings (gbtrain.data.synth.generate.PROFILES): gradingbench "
                          "(the benchmark's mix), legible (large Elementary mathematics, demo.sh --full) or marks "
                          "(legible's choice and true/false questions only, the default demo)")
    wrong_share: float | None = option(None, "share of wrong answers (>= 0.10; default: the profile's, 0.30)")
    blank_share: float | None = option(None, "share of answers left blank (default: the profile's, 0.04)")
    points: bool = option(True, "give every answer its full score, the teacher's points and its type's rubric "
                          "(--no-points: graded right/wrong only, as GradingBench)")
    workers: int | None = option(None, "processes (default: CPU count, at most 8)", bounds=(1, 256))

    def options(self) -> SynthOptions:
        if self.profile not in PROFILES:
            raise ValueError(f"--profile must be one of {', '.join(PROFILES)}, got {self.profile!r}")
        shares = {k: v for k, v in (("wrong_share", self.wrong_share), ("blank_share", self.blank_share))
                  if v is not None}
        return replace(PROFILES[self.profile], **shares, points=self.points)


def _poly(b: Box) -> list[tuple[float, float]]:
    """A box as the four-point polygon GradingBench stores (rounded to 0.1 px)."""
    x1, y1, x2, y2 = (round(v, 1) for v in b.as_list())
    return [(x1, y1), (x2, y1), (x2, y2), (x1, y2)]


def teacher_points(answer: DrawnAnswer) -> dict:
    """An answer's points as a teacher marks them under its type's rubric: all for a right answer, none for a blank
    one, the rubric's share for a wrong one (the working right, a slip)."""
    full, rubric = RUBRICS[answer.part.qtype]
    score = 0 if not answer.hand else full if answer.is_right else answer.part.wrong_credit
    return {"full_score": full, "score": score, "rubric": rubric}


def _answer_marks(q: DrawnQuestion, boxes: dict[int, Box], h, stage: str, points: bool) -> list[Mark]:
    marks = []
    for a in q.answers:
        box = boxes.get(a.label_index) if a.hand else None
        if box is None:  # blank answer (or ink lost to the warp): the slot is the answer area
            box = artifacts.warp_box(h, a.slot)
        raw_label = "未作答" if not a.hand else ("right" if a.is_right else "wrong")
        marks.append(Mark(points=_poly(box), label=LABEL_ALIASES[raw_label], raw_label=raw_label,
                          mark_id=a.mark_id, hand=a.hand, std=a.part.std, question_type=a.part.qtype,
                          content_format=q.question.content_format, stage=stage,
                          **(teacher_points(a) if points else {})))
    return marks


@dataclass
class RenderedPage:
    subject: str
    stage: str
    photo: Image.Image  # the page as scanned, before JPEG
    labels: Image.Image  # warped label map: answer label_index per ink pixel
    homography: object  # numpy 3x3, clean page -> photo
    questions: list[DrawnQuestion]
    rng: random.Random  # the page's generator, positioned after rendering


def render_page(seed: int, index: int, options: SynthOptions = SynthOptions(),
                ink_visible: bool = True) -> RenderedPage:
    """Lay out, draw and scan page `index` of dataset `seed` (no annotation yet)."""
    rng = random.Random(f"gbtrain-synth-{seed}-{index}")
    subjects = options.subjects
    subject = subjects[index % len(subjects)] if rng.random() < 0.5 else rng.choice(subjects)
    stage = rng.choice(options.stages)
    width = rng.randint(*options.page_width)
    size = (width, round(width * rng.uniform(1.33, 1.45)))
    columns = 2 if rng.random() < options.two_column_share else 1
    for _attempt in range(16):  # a page whose questions leave too few answers is laid out again
        questions: list = []
        for qtype in question_mix(rng, options.question_slots, options.question_types):
            for _ in range(6):  # avoid printing the same stem twice on one page
                q = make_question(rng, subject, qtype, stage)
                if all(q.stem != other.stem for other in questions):
                    break
            questions.append(q)
        clean = render_clean_page(rng, subject, stage, questions, size, columns, options.wrong_share,
                                  options.blank_share, ink_visible, options.scale)
        if sum(len(q.answers) for q in clean.questions) >= options.min_answers:
            break
    else:
        raise RuntimeError(f"page {index}: could not place {options.min_answers} answers")
    photo, labels, h = artifacts.scan(clean.image, clean.labels, rng)
    return RenderedPage(subject, stage, photo, labels, h, clean.questions, rng)


def generate_page(seed: int, index: int, options: SynthOptions = SynthOptions()) -> PageOutput:
    """One page with its L3 record, L2 records (one per question) and L1 crops (one per question)."""
    page = render_page(seed, index, options)
    subject, stage, h, rng = page.subject, page.stage, page.homography, page.rng
    n_labels = sum(len(q.answers) for q in page.questions)
    boxes = artifacts.label_boxes(page.labels, n_labels)
    w, hh = page.photo.size
    page_id = f"p{index:05d}"
    rel = f"{subject}/{page_id}.jpg"
    page_jpeg = artifacts.jpeg(page.photo, rng)

    all_marks: list[Mark] = []
    l2: list[Record] = []
    l1: list[tuple[Record, bytes]] = []
    page_image = Image.open(io.BytesIO(page_jpeg))
    for k, q in enumerate(page.questions):
        answers = _answer_marks(q, boxes, h, stage, options.points)
        all_marks += answers
        qbox = artifacts.warp_box(h, q.box).clip(w, hh)
        context = Mark(points=_poly(qbox), label="question", raw_label="question", mark_id=str(q.number),
                       question_id=str(q.number), stage=stage, content_format=q.question.content_format,
                       question_type=q.question.parts[0].qtype)
        l2.append(Record(f"{page_id}_{k}", L2, subject, rel, w, hh, [*answers, context]))
        crop = l1_crop(qbox, w, hh)
        cx, cy = round(crop.x1), round(crop.y1)
        cw, ch = round(crop.x2) - cx, round(crop.y2) - cy
        shifted = [m.moved(cx, cy, 1) for m in answers]
        l1.append((Record(f"{page_id}_q{q.number}", L1, subject, f"{subject}/{page_id}_q{q.number}.jpg",
                          cw, ch, shifted, page=page_id), crop_jpeg(page_image, (cx, cy, cw, ch))))
    l3 = Record(page_id, L3, subject, rel, w, hh, all_marks)
    return PageOutput(page_id, subject, page_jpeg, l3, l2, l1)


def _job(args: tuple[int, int, SynthOptions, str]) -> PageOutput:
    seed, index, options, out = args
    page = generate_page(seed, index, options)
    write_page(Path(out), page)
    page.jpeg = b""  # written already; do not ship image bytes back to the parent
    page.l1 = [(r, b"") for r, _ in page.l1]
    return page


def generate_dataset(out: str | Path, pages: int, seed: int = 0, options: SynthOptions = SynthOptions(),
                     workers: int | None = None, progress: bool = True) -> dict[str, list[Record]]:
    """Write `pages` synthetic pages in the GradingBench layout under `out`; return the records."""
    out = Path(out)
    if pages < 1 or (workers is not None and workers < 1):
        raise ValueError(f"pages ({pages}) and workers ({workers}) must be at least 1")
    workers = workers or min(os.cpu_count() or 1, 8)
    jobs = [(seed, i, options, str(out)) for i in range(pages)]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            results = list(tqdm(pool.map(_job, jobs, chunksize=4), total=pages, desc="pages", disable=not progress))
    else:
        results = [_job(j) for j in tqdm(jobs, desc="pages", disable=not progress)]
    levels = {
        L1: [r for p in results for r, _ in p.l1],
        L2: [r for p in results for r in p.l2],
        L3: [p.l3 for p in results],
    }
    for level, records in levels.items():
        write_level(out, level, records)
    write_manifest(out, levels)
    return levels

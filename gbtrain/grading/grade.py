"""Grade new, unannotated pages with a checkpoint: whole-page (L3) grading, answer-free or with an answer key.

The pages are every image (gbtrain.files.IMAGE_SUFFIXES: JPEG, PNG, WebP, BMP, TIFF) under a folder (recursively)
and every page of every PDF there (rendered with pypdfium2). Each page is asked exactly as the evaluator asks an L3
record: the same instruction (gbtrain.prompts), the checkpoint's recorded coordinate convention and pixel budget,
the same backends, sampling and too-long rule (gbtrain.evaluation.run), and the same parser and box rules
(gbtrain.metric.parsing, gbtrain.metric.scoring.item_boxes); the model's boxes come back in the page's own pixels.

    OUT/pages/<page>.json     per page: items (box in page pixels, transcription, answer, judgment, and points:
                              the model's score of a question the answer key gives a full score; the judgment's
                              and box's confidences, and whether the item goes to a teacher), raw reply, parse
                              status, totals (in points too)
    OUT/overlays/<page>.png   the page with the items drawn (those for review in their own colour)
    OUT/grades.csv            one row per item of every page; OUT/totals.csv one row per page; OUT/summary.json
    OUT/run.json              what made the folder; a rerun with other settings is refused (--overwrite redoes)

A page's JSON is written (atomically, after its overlay) when its batch comes back and a rerun skips the pages that
have one, so a run killed at any point resumes; the tables are rewritten from the page files at the end of every
run. A page that cannot be read (a truncated JPEG, a damaged PDF) is skipped and reported (summary.json and a
warning), never marked done: one bad scan does not stop a folder of them, and the next run tries it again. So is
a page graded with an error (its prompt did not fit --max-model-len, an endpoint refused it): it is written with
status "error", counted, and tried again.

Selective grading (docs/metric.md#selective-grading): each item's confidences come from the reply's token logprobs
(gbtrain.metric.confidence, as the evaluator's); with a review threshold in force (--review-threshold, or the one
eval/select_checkpoint.py chose on the validation split and recorded in the checkpoint, SELECTIVE_RECORD), an item
whose judgment confidence is below it, or has none, is marked for review."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

from PIL import Image
from tqdm import tqdm

from gbtrain import prompts
from gbtrain.config import option
from gbtrain.data.drawing import REVIEW_COLOR, Shape, cut, draw_shapes, verdict_color
from gbtrain.evaluation.engine import GRADING_SCHEMA, EvalOptions, Evaluator
from gbtrain.evaluation.run import EvalRun, RunPlan, check_run, open_backend, plan_run
from gbtrain.files import IMAGE_SUFFIXES, write_atomic
from gbtrain.grading.answer_key import (
    AnswerKey,
    answer_key_hash,
    asked_ids,
    grading_prompt,
    load_answer_key,
    page_questions,
)
from gbtrain.grading.documents import documents_of
from gbtrain.grading.grades import RESULTS, is_graded, page_file, page_record
from gbtrain.grading.pages import PDF_DPI_RANGE, LoadedPage, Page, find_pages, load_page, students_of
from gbtrain.grading.tables import write_tables
from gbtrain.grading.threshold import review_threshold
from gbtrain.inference.base import SamplingOptions, message
from gbtrain.inference.registry import ModelOptions
from gbtrain.metric.selective import (
    SelectiveFlags,
)
from gbtrain.outputs import SELECTIVE_RECORD, FolderLock, claim_output_folder, overlapping
from gbtrain.schema import RIGHT, WRONG
from gbtrain.text import redact
from gbtrain.vocabulary import ANSWER_BASED, ANSWER_FREE, L3, setting_name

OVERLAYS = "overlays"
BATCH_PIXELS = 300_000_000  # decoded pages held at once (1.2 GB at PIL's 4 bytes per RGB pixel): a batch is cut
# earlier when it is reached


@dataclass
class GradeRun(ModelOptions, SelectiveFlags):
    """Everything one `eval/grade_pages.py` call needs: ModelOptions (how the model is asked), SelectiveFlags
    (a threshold chosen anew from the validation table recorded in the checkpoint) and these. Each field is a flag
    of grade_pages.py (gbtrain.cli.add_options)."""

    model: str = option(help="checkpoint folder or hub id (openai: the served model name)")
    pages: str = option(help="folder of page images (JPEG, PNG, WebP, BMP, TIFF) and PDFs, searched recursively")
    out: str = option(help="output folder (per-page results, overlays, CSVs)")
    answer_key: str | None = option(None, "YAML or JSON mapping question id -> reference answer, or -> {answer, "
                                          "full_score, rubric, question_type}")
    pdf_dpi: float = option(200, "resolution PDF pages are rendered at (36-600)")
    batch_size: int = option(16, "pages per backend call and written chunk (whole pages: keep it small)",
                             bounds=(1, 4096))
    overwrite: bool = option(False, "regrade every page instead of resuming")
    review_threshold: float | None = option(None, "mark for review the items whose judgment confidence is below this "
                                                  f"(0-1); default: the threshold in --model's {SELECTIVE_RECORD}, "
                                                  "if any")
    students: str | None = option(None, "CSV with columns file,student: each page file's student (its path under "
                                        "--pages); totals per student in students.csv")
    student_pattern: str | None = option(None, "regex whose first group, searched in each page file's path under "
                                               "--pages, is its student (e.g. '^([^/]+)/' for a folder per student)")

    @property
    def mode(self) -> str:
        return ANSWER_BASED if self.answer_key else ANSWER_FREE

    def as_eval_run(self) -> EvalRun:
        """The evaluator's view of these options, one L3 setting, so that its checks, its coords and budget
        defaults (the checkpoint's record) and its backend construction apply unchanged."""
        shared = {f.name: getattr(self, f.name) for f in fields(EvalRun) if hasattr(self, f.name)}
        return EvalRun(**shared, data=self.pages, settings=setting_name(L3, self.mode))


def grading_identity(run: GradeRun, plan: RunPlan, key: AnswerKey | None, threshold: float | None = None) -> dict:
    """What makes a page's grades: the model and how it was asked (backend, coords, budget, prompt wording, answer
    key, token limit, PDF resolution), which folder, and the review threshold that marked its items (a folder
    graded before thresholds has none, as a run without one). Batch sizes and parallelism change no reply."""
    model = str(Path(run.model).resolve()) if Path(run.model).is_dir() else run.model
    return {"tool": "grade_pages", "model": model, "backend": run.backend,
            "base_url": redact(run.base_url) if run.base_url else None, "coords": plan.coords,
            "min_pixels": plan.budget.min_pixels, "max_pixels": plan.budget.max_pixels,
            "prompt_hash": prompts.prompt_fingerprint(), "mode": run.mode, "answer_key_sha256": answer_key_hash(key),
            "max_tokens": run.max_tokens, "structured": run.structured, "pdf_dpi": run.pdf_dpi,
            "pages": str(Path(run.pages).resolve()), "review_threshold": threshold}


def check_grade_run(run: GradeRun) -> Path:
    """The options this tool adds to the evaluator's, checked before anything is loaded; returns the pages folder."""
    check_run(run.as_eval_run())
    low, high = PDF_DPI_RANGE
    if not low <= run.pdf_dpi <= high:  # NaN too
        raise ValueError(f"--pdf-dpi {run.pdf_dpi}: choose {low}-{high} (the model sees at most --max-pixels)")
    pages = Path(run.pages)
    if not pages.is_dir():
        raise FileNotFoundError(f"pages folder not found: {run.pages}")
    overlap = overlapping("--out", run.out, {"--pages": run.pages})
    if overlap:  # the overlays would be graded as pages by the next run
        raise ValueError(f"{overlap[0]}: choose another --out")
    if (Path(run.out) / "predictions").is_dir():
        raise ValueError(f"--out {run.out} holds an evaluation (predictions/): choose another --out")
    return pages


def grade_pages(run: GradeRun, progress: bool = True) -> dict:
    """Grade every page of run.pages not graded yet, then write the tables; returns the summary (with
    `graded_now`, the pages this run graded). Options, answer key, model and pages are checked first; the output
    folder is then held for the whole run."""
    folder = check_grade_run(run)
    key = load_answer_key(run.answer_key) if run.answer_key else None
    threshold = review_threshold(run)
    limit = None if threshold is None else threshold["threshold"]
    plan = plan_run(run.as_eval_run())
    pages, unreadable = find_pages(folder)
    if not pages and not unreadable:
        raise ValueError(f"{folder}: no pages (image files {', '.join(IMAGE_SUFFIXES)}, or PDF files)")
    students = students_of(sorted({p.rel for p in pages} | {u["page"] for u in unreadable}), run.students,
                           run.student_pattern)
    places = documents_of(pages, students)
    out = Path(run.out)
    with FolderLock(out):
        identity = grading_identity(run, plan, key, limit)
        claim_output_folder(out, identity, run.overwrite, work=(RESULTS, OVERLAYS), discard=True)  # before any model
        todo = [p for p in pages if not is_graded(out, p, asked_ids(key, places[p.name][1]))]
        failed = _grade(run, plan, key, limit, todo, places, out, progress) if todo else []
        summary = write_tables(out, pages, unreadable + failed, identity, threshold, students, key)
    if not summary["pages"]:
        raise ValueError(f"{folder}: no page could be graded ({len(summary['unreadable'])} unreadable, each named in "
                         f"{out / 'summary.json'})")
    return summary | {"graded_now": len(todo) - len(failed)}


def _grade(run: GradeRun, plan: RunPlan, key: AnswerKey | None, threshold: float | None, todo: list[Page],
           places: dict[str, tuple[str, int]], out: Path, progress: bool) -> list[dict]:
    """Grade `todo` batch by batch on the run's backend; returns the pages that could not be read. Each page is
    asked for its own questions of the key (answer_key.page_questions). Replies go through the evaluator's sender,
    so a prompt that cannot fit the context, or an endpoint's refusal of one page, is that page's error and the run
    goes on."""
    backend, tokenizer = open_backend(run.as_eval_run(), plan)
    sampling = SamplingOptions(max_tokens=run.max_tokens, json_schema=GRADING_SCHEMA if run.structured else None)
    sender = Evaluator(backend, run.pages, out, EvalOptions(plan.coords, plan.budget, sampling, run.batch_size,
                                                            run.max_model_len if tokenizer else None),
                       tokenizer=tokenizer, progress=False)
    failed: list[dict] = []
    bar = tqdm(total=len(todo), desc="grade", disable=not progress)
    try:
        for loaded in _batches(todo, run.batch_size, run.pdf_dpi, failed, bar):
            asked = [page_questions(key, places[lp.page.name][1]) for lp in loaded]
            texts = [grading_prompt(plan.coords, a) for a in asked]
            replies = sender.send_batch([[message(t, lp.image)] for t, lp in zip(texts, loaded, strict=True)], texts,
                                        loaded)
            for lp, reply, a in zip(loaded, replies, asked, strict=True):
                _save_page(out, lp, page_record(lp, reply, plan.coords, plan.budget, key, threshold,
                                                places[lp.page.name], a))
    finally:
        bar.close()
        backend.close()
    return failed


def _batches(todo: list[Page], size: int, dpi: float, failed: list[dict], bar) -> Iterator[list[LoadedPage]]:
    """The pages decoded one at a time into batches of at most `size` pages and BATCH_PIXELS pixels, so that memory
    stays bounded whatever the pages; a page that cannot be read goes to `failed`."""
    batch: list[LoadedPage] = []
    for page in todo:
        try:
            lp = load_page(page, dpi)
        except ValueError as e:
            failed.append({"page": page.name, "error": str(e)})
            bar.update(1)
            continue
        if batch and (len(batch) == size or sum(p.width * p.height for p in batch) + lp.width * lp.height
                      > BATCH_PIXELS):
            yield batch
            bar.update(len(batch))
            batch = []
        batch.append(lp)
    if batch:
        yield batch
        bar.update(len(batch))


def _save_page(out: Path, page: LoadedPage, record: dict) -> None:
    """The overlay first, then the page file that marks the page done."""
    overlay = out / OVERLAYS / f"{page.page.stem}.png"
    overlay.parent.mkdir(parents=True, exist_ok=True)
    draw_grades(page.image, record["items"]).save(overlay)
    write_atomic(page_file(out, page.page), json.dumps(record, ensure_ascii=False, indent=1) + "\n")


def draw_grades(image: Image.Image, items: list[dict]) -> Image.Image:
    """The page with each item's box coloured by the model's judgment (green right, red wrong, orange none; an item
    for review in REVIEW_COLOR, `REVIEW` after its verdict), labelled `question verdict` above and
    `"transcription" | answer` below."""
    shapes = []
    for it in items:
        if it["box"] is None:
            continue
        verdict = {True: RIGHT, False: WRONG}.get(it["correctness"], "unjudged")
        color = verdict_color(verdict)
        if it.get("review"):
            verdict, color = f"{verdict} REVIEW", REVIEW_COLOR
        shapes.append(Shape(it["box"], color, above=f"{it['question_id'] or '#' + str(it['index'] + 1)} {verdict}",
                            below=f'"{cut(it["text"])}" | {cut(it["answer"])}'))
    return draw_shapes(image, shapes)

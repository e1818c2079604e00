"""Grade new, unannotated pages with a checkpoint: whole-page (L3) grading, answer-free or with an answer key.

The pages are every JPEG/PNG under a folder (recursively) and every page of every PDF there (rendered with
pypdfium2). Each page is asked exactly as the evaluator asks an L3 record: the same instruction (gbtrain.prompts),
the checkpoint's recorded coordinate convention and pixel budget, the same backends, sampling and too-long rule
(gbtrain.evaluation.run), and the same parser and box rules (gbtrain.metric.parsing,
gbtrain.metric.scoring.item_boxes); the model's boxes come back in the page's own pixels.

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
whose judgment confidence is below it, or has none, is marked for review.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import yaml
from PIL import Image, ImageDraw, ImageOps
from tqdm import tqdm

from gbtrain import prompts
from gbtrain.config import option, overlapping
from gbtrain.coords import PixelBudget, aspect_problem
from gbtrain.data.annotations import points_from_text
from gbtrain.data.preview import COLORS, OTHER_COLOR, TEXT_CHARS
from gbtrain.data.synth.fonts import draw_text
from gbtrain.evaluation.engine import GRADING_SCHEMA, EvalOptions, Evaluator
from gbtrain.evaluation.run import (
    EvalRun,
    FolderLock,
    RunPlan,
    check_run,
    claim_output_folder,
    open_backend,
    plan_run,
)
from gbtrain.files import read_json, write_atomic
from gbtrain.inference.base import SamplingOptions, message
from gbtrain.inference.registry import ModelOptions
from gbtrain.metric import confidence
from gbtrain.metric.parsing import PredictedItem, normalize_items, parse_points, parse_response
from gbtrain.metric.scoring import ScoreOptions, item_boxes
from gbtrain.metric.selective import (
    BUDGET_FLAG,
    TARGET_FLAG,
    SelectiveFlags,
    choose_threshold,
    needs_review,
    rule_flag,
)
from gbtrain.schema import QUESTION_TYPE_ALIASES, QUESTION_TYPES, RIGHT, WRONG
from gbtrain.text import csv_cell, redact, safe_name
from gbtrain.vocabulary import ANSWER_BASED, ANSWER_FREE, L3, setting_name

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
PDF_SUFFIX = ".pdf"
RESULTS = "pages"  # OUT/pages: one file per graded page (see is_graded)
OVERLAYS = "overlays"
PDF_DPI_RANGE = (36, 600)  # a page the model sees at --max-pixels anyway; 600 dpi A4 is already 35 Mpx
# A PDF states its page size, so a file of a few hundred bytes can ask for gigapixels. A page larger than A0
# (841 x 1189 mm) is not an exam page and is refused before it is rendered; any page is rendered at no more
# than RENDER_PIXELS (600 dpi A4), at a lower dpi than --pdf-dpi when it would be more (its record says which).
A0_PT = (2384, 3370)
RENDER_PIXELS = 35_000_000
BATCH_PIXELS = 300_000_000  # decoded pages held at once (1.2 GB at PIL's 4 bytes per RGB pixel): a batch is cut
# earlier when it is reached
QUESTION_KEYS = ("question_id", "question", "qid", "id")  # the prompt asks for none; some models write one
KEY_FIELDS = ("answer", "full_score", "rubric", "question_type")  # what an answer key's question mapping may hold
OUT_OF_RANGE = "outside 0..full_score"  # a model's score kept on its item but not counted in the page's points
SELECTIVE_RECORD = "selective_threshold.json"  # in a checkpoint folder: the threshold chosen on validation
REVIEW_COLOR = (150, 40, 200)  # an item for review on the overlays, apart from the judgments' colours


@dataclass
class GradeRun(ModelOptions, SelectiveFlags):
    """Everything one `eval/grade_pages.py` call needs: ModelOptions (how the model is asked), SelectiveFlags
    (a threshold chosen anew from the validation table recorded in the checkpoint) and these. Each field is a flag
    of grade_pages.py (gbtrain.cli.add_options)."""

    model: str = option(help="checkpoint folder or hub id (openai: the served model name)")
    pages: str = option(help="folder of page images (JPEG/PNG) and PDFs, searched recursively")
    out: str = option(help="output folder (per-page results, overlays, CSVs)")
    answer_key: str | None = option(None, "YAML or JSON mapping question id -> reference answer, or -> {answer, "
                                          "full_score, rubric, question_type}")
    pdf_dpi: float = option(200, "resolution PDF pages are rendered at (36-600)")
    batch_size: int = option(16, "pages per backend call and written chunk (whole pages: keep it small)")
    overwrite: bool = option(False, "regrade every page instead of resuming")
    review_threshold: float | None = option(None, "mark for review the items whose judgment confidence is below this "
                                                  f"(0-1); default: the threshold in --model's {SELECTIVE_RECORD}, "
                                                  "if any")

    @property
    def mode(self) -> str:
        return ANSWER_BASED if self.answer_key else ANSWER_FREE

    def as_eval_run(self) -> EvalRun:
        """The evaluator's view of these options, one L3 setting, so that its checks, its coords and budget
        defaults (the checkpoint's record) and its backend construction apply unchanged."""
        shared = {f.name: getattr(self, f.name) for f in fields(EvalRun) if hasattr(self, f.name)}
        return EvalRun(**shared, data=self.pages, settings=setting_name(L3, self.mode))


# --------------------------------------------------------------------------------- pages
@dataclass(frozen=True)
class Page:
    """One page to grade: an image file, or page `index` (0-based) of a PDF; `rel` is the file's path under the
    pages folder."""

    source: Path
    rel: str
    index: int | None = None

    @property
    def name(self) -> str:
        """What the tables show: the file's path, with `-p<n>` for a PDF's page n."""
        return self.rel if self.index is None else f"{self.rel}-p{self.index + 1}"

    @property
    def stem(self) -> str:
        """The page's file name in OUT: any name stays inside OUT/pages and OUT/overlays (see safe_name)."""
        return safe_name(self.name)


@dataclass(frozen=True)
class PageSize:
    """What the scorer's box mapping (gbtrain.metric.scoring.item_boxes) reads from a record."""

    width: int
    height: int


@dataclass
class LoadedPage:
    """A decoded page. It has the `width` and `height` that the evaluator's length check and box mapping read
    from a record, so both take it in a record's place; `dpi`: what a PDF page was rendered at."""

    page: Page
    image: Image.Image
    dpi: float | None = None

    @property
    def width(self) -> int:
        return self.image.width

    @property
    def height(self) -> int:
        return self.image.height


def _pdf_page_count(path: Path) -> int:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(path)
    try:
        return len(pdf)
    finally:
        pdf.close()


def find_pages(folder: Path) -> tuple[list[Page], list[dict]]:
    """Every page under `folder` in path order, and the PDFs that cannot be opened ({"page", "error"}). Hidden
    files and folders (`.DS_Store`, `._scan.jpg`) are not pages."""
    import pypdfium2 as pdfium

    pages, unreadable = [], []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder)
        suffix = path.suffix.lower()
        if any(part.startswith(".") for part in rel.parts) or suffix not in (*IMAGE_SUFFIXES, PDF_SUFFIX):
            continue
        if suffix in IMAGE_SUFFIXES:
            pages.append(Page(path, rel.as_posix()))
            continue
        try:
            count = _pdf_page_count(path)
        except (pdfium.PdfiumError, OSError) as e:
            unreadable.append({"page": rel.as_posix(), "error": f"cannot open PDF {rel.as_posix()}: {e}"})
            continue
        pages += [Page(path, rel.as_posix(), i) for i in range(count)]
    return pages, unreadable


def render_dpi(width_pt: float, height_pt: float, dpi: float) -> float:
    """The dpi a PDF page of this size is rendered at: `dpi`, or less where that would exceed RENDER_PIXELS (the
    largest scale s with (w s + 1)(h s + 1) <= RENDER_PIXELS, as the renderer rounds each side up)."""
    w, h = width_pt, height_pt
    scale = (math.sqrt((w + h) ** 2 + 4 * w * h * (RENDER_PIXELS - 1)) - (w + h)) / (2 * w * h)
    return min(dpi, 72 * scale)


def load_page(page: Page, dpi: float) -> LoadedPage:
    """The page as an RGB image, upright: a photo turned by its EXIF orientation (what a viewer shows, so the boxes
    match what the user sees; new pages have no annotations tied to the stored orientation), a PDF page rendered
    at `dpi` (render_dpi). A page that cannot be read, a PDF page larger than A0, or a page too long and thin for
    the model's processor is a ValueError naming it."""
    import pypdfium2 as pdfium

    try:
        if page.index is None:
            with Image.open(page.source) as im:
                loaded = LoadedPage(page, ImageOps.exif_transpose(im).convert("RGB"))
        else:
            pdf = pdfium.PdfDocument(page.source)
            try:
                pdf_page = pdf[page.index]
                width, height = pdf_page.get_size()
                if not min(width, height) > 0:  # NaN too
                    raise ValueError(f"cannot read page {page.name}: its size is {width} x {height} pt")
                if max(width, height) > A0_PT[1] or min(width, height) > A0_PT[0]:
                    raise ValueError(f"cannot read page {page.name}: it is {width:.0f} x {height:.0f} pt, larger than "
                                     f"A0 ({A0_PT[0]} x {A0_PT[1]} pt); split or scale the PDF's pages")
                used = render_dpi(width, height, dpi)
                loaded = LoadedPage(page, pdf_page.render(scale=used / 72).to_pil().convert("RGB"), round(used, 2))
            finally:
                pdf.close()
    except (OSError, SyntaxError, Image.DecompressionBombError, pdfium.PdfiumError) as e:
        raise ValueError(f"cannot read page {page.name}: {e}") from None
    aspect = aspect_problem(loaded.width, loaded.height)  # the backend would refuse the whole batch over it
    if aspect:
        raise ValueError(f"cannot grade page {page.name}: {aspect}")
    return loaded


# --------------------------------------------------------------------------------- answer key and prompt
@dataclass(frozen=True)
class KeyQuestion:
    """One question of an answer key: its reference answer (None: "no reference answer") and, for a question graded
    in points, its full score and rubric; its type, where the key says (the review report counts by it)."""

    qid: str
    answer: str | None
    full_score: float | None = None
    rubric: str | None = None
    question_type: str | None = None

    @property
    def plain(self) -> bool:
        """Whether the key gives only the reference answer (the form keys had before points)."""
        return self.full_score is None and self.rubric is None and self.question_type is None


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
            raise ValueError(f"question {qid!r}: full_score {text!r:.40} is not a number") from None
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"question {qid!r}: full_score {text!r:.40} must be a finite number above 0")
    return number


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
        raise ValueError(f"question {qid!r}: question_type {qtype!r:.40} is not one of {', '.join(QUESTION_TYPES)} "
                         f"(or their Chinese names)")
    return KeyQuestion(qid, _scalar(qid, value.get("answer"), "reference answer"),
                       _full_score(qid, value.get("full_score")), _scalar(qid, value.get("rubric"), "rubric"),
                       QUESTION_TYPE_ALIASES[qtype] if qtype is not None else None)


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
        return [_key_question(str(qid), value) for qid, value in data.items()]
    except ValueError as e:
        raise ValueError(f"--answer-key {path}: {e}") from None


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
        [q.qid, q.answer, q.full_score, q.rubric, q.question_type] for q in key]
    return hashlib.sha256(json.dumps(content, ensure_ascii=False).encode()).hexdigest()[:16]


def grading_prompt(coords: str, key: AnswerKey | None) -> str:
    """The evaluator's L3 instruction: answer-free, or answer-based with the key as the reference answers (and its
    full scores, where it gives them)."""
    return prompts.single_turn(L3, ANSWER_BASED if key else ANSWER_FREE, coords, None, key_references(key) or None,
                               key_points(key) or None)


# --------------------------------------------------------------------------------- reading a reply
def question_of(item: PredictedItem, key: AnswerKey | None) -> str | None:
    """The question an item answers: the id the model wrote, if any; else, with an answer key, the one question
    whose reference the item's answer repeats (the prompt asks for the reference in "answer")."""
    given = next((item.raw[k] for k in QUESTION_KEYS if item.raw.get(k) not in (None, "")), None)
    if given is not None:
        return str(given)
    matches = [q.qid for q in key or [] if q.answer is not None and q.answer.strip() == item.answer.strip()]
    return matches[0] if len(matches) == 1 else None


def item_score(raw, full: float | None) -> tuple[float | None, str | None]:
    """A model's score as points (parsing.parse_points) and what is wrong with it: not a number, not finite, or
    outside 0..full (kept, flagged, and left out of the page's points); (None, None) when it gave none."""
    if raw is None:
        return None, None
    value, why = parse_points(raw)
    if value is not None and full is not None and not 0 <= value <= full:
        why = OUT_OF_RANGE
    return value, why


def read_reply(reply: str, width: int, height: int, coords: str, budget: PixelBudget,
               key: AnswerKey | None = None, logprobs: list | None = None,
               threshold: float | None = None) -> tuple[list[dict], str | None]:
    """The items of a page's reply with their boxes in page pixels (clipped to the page; None without a valid
    box), their points (item_score; the full score and type are the key's for the item's question), their
    judgment's and box's confidences (from the reply's `logprobs`, as the evaluator's; None without them) and
    whether each goes to a teacher under `threshold` (never without one), and why the reply did not parse cleanly
    (parsing's reason; None when it did)."""
    parsed = parse_response(reply)
    opts = ScoreOptions(L3, ANSWER_BASED if key else ANSWER_FREE, coords, budget)
    questions = {q.qid: q for q in key or []}
    normalized = normalize_items(parsed.items)
    confidence.annotate(normalized, reply, logprobs)
    items = []
    for ib in item_boxes(normalized, PageSize(width, height), opts):
        it = ib.item
        box = None if ib.box is None else [round(v, 1) for v in ib.box.as_list()]
        qid = question_of(it, key)
        question = questions.get(qid)
        full = question.full_score if question else None
        score, problem = item_score(it.score, full)
        items.append({"index": it.index, "question_id": qid, "box": box, "model_boxes": it.boxes, "text": it.text,
                      "answer": it.answer, "correctness": it.correctness, "score": score, "score_problem": problem,
                      "full_score": full, "rubric": question.rubric if question else None,
                      "reference": question.answer if question else None,
                      "question_type": question.question_type if question else None,
                      "confidence": _rounded(it.confidence), "box_confidence": _rounded(it.box_confidence),
                      "review": threshold is not None and needs_review(it.confidence, threshold)})
    return items, parsed.reason


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def page_totals(items: list[dict], status: str) -> dict:
    """A page's counts: items, judged right, judged wrong, not judged (no boolean judgment), whether the reply was
    unparsable (not read cleanly; the items before a cut are still counted), and its points: the model's scores of
    the items that answer a question with a full score (a flagged score counts 0) out of those questions' full
    scores, each question once (None, None on a page without such items), and the items marked for review."""
    judged = [it["correctness"] for it in items]
    scored = [it for it in items if it.get("full_score") is not None]
    full = {it["question_id"]: it["full_score"] for it in scored}
    points = sum(it["score"] for it in scored if it["score"] is not None and not it["score_problem"])
    return {"items": len(items), "right": judged.count(True), "wrong": judged.count(False),
            "unjudged": sum(j is None for j in judged), "unparsable": int(status not in ("ok", "error")),
            "points": round(points, 6) if scored else None, "full_points": round(sum(full.values()), 6) if scored
            else None, "review": sum(bool(it.get("review")) for it in items)}


def page_record(page: LoadedPage, reply: dict, coords: str, budget: PixelBudget, key: AnswerKey | None,
                threshold: float | None = None) -> dict:
    """A graded page as OUT/pages/<page>.json holds it. `reply` is an Evaluator.send_batch row: the model's text
    (with its tokens' logprobs where the backend gave them), or an error (prompt too long for the context, an
    endpoint's refusal) with no text; status "error" then. `threshold`: the review threshold in force, if any."""
    items, reason = read_reply(reply["response"], page.width, page.height, coords, budget, key, reply.get("logprobs"),
                               threshold)
    status = "error" if reply.get("error") else reason or "ok"
    p = page.page
    return {"page": p.name, "source": p.rel, "pdf_page": None if p.index is None else p.index + 1, "pdf_dpi": page.dpi,
            "width": page.width, "height": page.height, "mode": ANSWER_BASED if key else ANSWER_FREE,
            "status": status, "error": reply.get("error"), "totals": page_totals(items, status),
            "review_threshold": threshold, "items": items, "response": str(reply["response"])}


# --------------------------------------------------------------------------------- drawing
def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS - 1] + "…"


def draw_grades(image: Image.Image, items: list[dict]) -> Image.Image:
    """The page with each item's box in the preview's colours (green judged right, red wrong, orange not judged;
    an item for review in REVIEW_COLOR, `REVIEW` after its verdict), labelled `question verdict` above and
    `"transcription" | answer` below."""
    img = image.convert("RGB")
    draw = ImageDraw.Draw(img)
    size = max(12, img.width // 70)
    for it in items:
        if it["box"] is None:
            continue
        verdict = {True: "right", False: "wrong"}.get(it["correctness"], "unjudged")
        color = COLORS[RIGHT] if it["correctness"] is True else COLORS[WRONG] if it["correctness"] is False \
            else OTHER_COLOR
        if it.get("review"):
            verdict, color = f"{verdict} REVIEW", REVIEW_COLOR
        x1, y1, _, y2 = it["box"]
        draw.rectangle(it["box"], outline=color, width=3)
        draw_text(draw, x1, max(size, y1 - 3), f"{it['question_id'] or '#' + str(it['index'] + 1)} {verdict}", size,
                  color)
        draw_text(draw, x1, y2 + size + 2, f'"{_cut(it["text"])}" | {_cut(it["answer"])}', size, color)
    return img


# --------------------------------------------------------------------------------- the output folder
def page_file(out: Path, page: Page) -> Path:
    return out / RESULTS / f"{page.stem}.json"


PAGE_FIELDS = ("page", "status", "totals", "items")  # what the tables read from a page file


def read_page_file(path: Path) -> dict:
    """A page file this tool wrote (the tables and the review loop read them); anything else is a ValueError."""
    try:
        record = read_json(path, errors="replace")
    except ValueError:
        record = None
    if not isinstance(record, dict) or not all(k in record for k in PAGE_FIELDS):
        raise ValueError(f"{path}: not a page file this tool wrote: pass --overwrite to regrade, or choose another "
                         f"--out")
    return record


def is_graded(out: Path, page: Page) -> bool:
    """Whether a rerun skips the page: it has a page file, and no error (a prompt that did not fit the context, an
    endpoint's refusal) that another --max-model-len or a later try may mend."""
    path = page_file(out, page)
    return path.is_file() and read_page_file(path)["status"] != "error"


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


GRADE_COLUMNS = ("page", "item", "question_id", "text", "answer", "correctness", "score", "full_score", "x1", "y1",
                 "x2", "y2", "confidence", "box_confidence", "review", "status")
TOTAL_COLUMNS = ("page", "status", "items", "right", "wrong", "unjudged", "unparsable", "points", "full_points",
                 "review")


def write_tables(out: Path, pages: list[Page], unreadable: list[dict], identity: dict,
                 threshold: dict | None = None) -> dict:
    """grades.csv, totals.csv and summary.json over every graded page of the folder (this run's and earlier
    runs'), in page order; returns the summary. `threshold`: the review threshold in force and where it came
    from (review_threshold)."""
    records = [read_page_file(page_file(out, p)) for p in pages if page_file(out, p).is_file()]
    # errors="backslashreplace": a lone surrogate (in a reply, or a file name's undecodable bytes) is written as its
    # escape, as write_atomic writes the page files
    with open(out / "grades.csv", "w", encoding="utf-8", errors="backslashreplace", newline="") as f:
        w = csv.writer(f)
        w.writerow(GRADE_COLUMNS)
        for r in records:
            for it in r["items"]:
                box = it["box"] or ["", "", "", ""]
                # none on pages graded before points, or before confidences
                points = [table_value(it.get(k)) for k in ("score", "full_score")]
                confidences = [table_value(it.get(k)) for k in ("confidence", "box_confidence")]
                w.writerow(map(csv_cell, [r["page"], it["index"] + 1, it["question_id"] or "", it["text"], it["answer"],
                                          "" if it["correctness"] is None else str(it["correctness"]).lower(),
                                          *points, *box, *confidences, str(bool(it.get("review"))).lower(),
                                          r["status"]]))
    # pages graded before points have no points totals, those before thresholds no review count
    per_page = [{"page": r["page"], "status": r["status"], "points": None, "full_points": None, "review": 0,
                 **r["totals"]} for r in records]
    with open(out / "totals.csv", "w", encoding="utf-8", errors="backslashreplace", newline="") as f:
        w = csv.DictWriter(f, TOTAL_COLUMNS)
        w.writeheader()
        w.writerows({k: csv_cell(table_value(v)) for k, v in row.items()} for row in per_page)
    in_points = [t for t in per_page if t["full_points"] is not None]
    items = [it for r in records for it in r["items"]]
    summary = {"run": identity, "pages": len(records),
               **{k: sum(t[k] for t in per_page) for k in ("items", "right", "wrong", "unjudged", "unparsable",
                                                           "review")},
               "review_threshold": threshold, "without_confidence": sum(it.get("confidence") is None for it in items),
               **{k: round(sum(t[k] for t in in_points), 6) if in_points else None for k in ("points", "full_points")},
               "errors": sum(t["status"] == "error" for t in per_page), "unreadable": unreadable,
               "per_page": per_page}
    write_atomic(out / "summary.json", json.dumps(summary, ensure_ascii=False, indent=1) + "\n")
    return summary


def table_value(value):
    """A table cell of a value that may be absent (None: an empty cell), a whole number of points without `.0`."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return "" if value is None else value


# --------------------------------------------------------------------------------- the review threshold
def read_selective_record(model: str | Path) -> dict | None:
    """The record eval/select_checkpoint.py left in a checkpoint folder (gbtrain.evaluation.selection.
    record_threshold): per L3 setting, the threshold it chose on validation and that evaluation's coverage-accuracy
    table; None when the folder has none."""
    path = Path(model) / SELECTIVE_RECORD
    if not Path(model).is_dir() or not path.is_file():
        return None
    try:
        record = read_json(path)
        ok = isinstance(record["rule"], dict) and all(isinstance(v, dict) and "threshold" in v and "table" in v
                                                      for v in record["settings"].values())
    except (ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise ValueError(f"{path}: not a threshold record of select_checkpoint: delete it, or record one anew "
                         f"(select_checkpoint --copy-best with {TARGET_FLAG} or {BUDGET_FLAG})")
    return record


def review_threshold(run: GradeRun) -> dict | None:
    """The review threshold in force and where it comes from ({"threshold", "source", ...}), or None. In order:
    --review-threshold; --target-accuracy or --review-budget, chosen (selective.choose_threshold) from the
    validation table recorded in --model for this run's setting (L3, its mode); else the threshold recorded
    there, the one select_checkpoint chose; else none."""
    rule = run.selective_rule()
    if run.review_threshold is not None:
        if rule:
            raise ValueError(f"--review-threshold and {rule_flag(rule)}: give one (a threshold, or "
                             f"a rule to choose one from the checkpoint's validation table)")
        if not 0 <= run.review_threshold <= 1:  # NaN too
            raise ValueError(f"--review-threshold {run.review_threshold}: give a judgment confidence from 0 to 1, "
                             f"e.g. 0.8")
        return {"threshold": run.review_threshold, "source": "--review-threshold"}
    record = read_selective_record(run.model)
    path = Path(run.model) / SELECTIVE_RECORD
    if record is None:
        if rule:
            raise ValueError(f"{rule_flag(rule)}: --model {run.model} holds no {SELECTIVE_RECORD} "
                             f"(the validation table select_checkpoint records with --copy-best and {TARGET_FLAG} or "
                             f"{BUDGET_FLAG}): record one, or give --review-threshold")
        return None
    setting = setting_name(L3, run.mode)
    chosen = record["settings"].get(setting)
    if chosen is None:
        raise ValueError(f"{path}: no threshold for {setting} (it has {', '.join(record['settings']) or 'none'}), "
                         f"the setting {run.mode} pages are graded in: rerun select_checkpoint with {setting} in "
                         f"--settings, or give --review-threshold")
    if rule:
        try:
            picked = choose_threshold(chosen["table"], rule)
        except ValueError as e:
            raise ValueError(f"{path}, {setting}: {e}") from None
    elif chosen["threshold"] is None:
        raise ValueError(f"{path}: select_checkpoint chose no threshold for {setting} ({chosen.get('problem')}): "
                         f"give {TARGET_FLAG}, {BUDGET_FLAG} or --review-threshold")
    else:
        picked, rule = {k: chosen[k] for k in ("threshold", "coverage", "accuracy", "review_share")}, record["rule"]
    return {**picked, "source": str(path.resolve()), "setting": setting, "rule": rule,
            "evaluation": record.get("evaluation")}


# --------------------------------------------------------------------------------- the run
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
        raise ValueError(f"{folder}: no pages (JPEG, PNG or PDF files)")
    out = Path(run.out)
    with FolderLock(out):
        identity = grading_identity(run, plan, key, limit)
        claim_output_folder(out, identity, run.overwrite, work=(RESULTS, OVERLAYS), discard=True)  # before any model
        todo = [p for p in pages if not is_graded(out, p)]
        failed = _grade(run, plan, key, limit, todo, out, progress) if todo else []
        summary = write_tables(out, pages, unreadable + failed, identity, threshold)
    if not summary["pages"]:
        raise ValueError(f"{folder}: no page could be graded ({len(summary['unreadable'])} unreadable, each named in "
                         f"{out / 'summary.json'})")
    return summary | {"graded_now": len(todo) - len(failed)}


def _grade(run: GradeRun, plan: RunPlan, key: AnswerKey | None, threshold: float | None, todo: list[Page], out: Path,
           progress: bool) -> list[dict]:
    """Grade `todo` batch by batch on the run's backend; returns the pages that could not be read. Replies go
    through the evaluator's sender, so a prompt that cannot fit the context, or an endpoint's refusal of one page,
    is that page's error and the run goes on."""
    backend, tokenizer = open_backend(run.as_eval_run(), plan)
    sampling = SamplingOptions(max_tokens=run.max_tokens, json_schema=GRADING_SCHEMA if run.structured else None)
    sender = Evaluator(backend, run.pages, out, EvalOptions(plan.coords, plan.budget, sampling, run.batch_size,
                                                            run.max_model_len if tokenizer else None),
                       tokenizer=tokenizer, progress=False)
    text = grading_prompt(plan.coords, key)
    failed: list[dict] = []
    bar = tqdm(total=len(todo), desc="grade", disable=not progress)
    try:
        for loaded in _batches(todo, run.batch_size, run.pdf_dpi, failed, bar):
            replies = sender.send_batch([[message(text, lp.image)] for lp in loaded], [text] * len(loaded), loaded)
            for lp, reply in zip(loaded, replies, strict=True):
                _save_page(out, lp, page_record(lp, reply, plan.coords, plan.budget, key, threshold))
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

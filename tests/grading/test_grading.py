"""Grading new, unannotated pages (gbtrain.grading, eval/grade_pages.py): pages found and PDFs rendered, the
answer key and its prompt, replies mapped to page pixels, the output folder (per-page JSON, overlays, CSVs),
resumption, refusals, and one run on the tiny model with the hf backend."""

import csv
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from gbtrain import prompts
from gbtrain.coords import model_unit_size, to_model
from gbtrain.grading import grade
from gbtrain.grading.answer_key import KeyQuestion, answer_key_hash, grading_prompt, key_references, load_answer_key
from gbtrain.grading.grade import GradeRun, grade_pages
from gbtrain.grading.grades import read_reply
from gbtrain.grading.pages import RENDER_PIXELS, find_pages, load_page
from gbtrain.schema import Box

ROOT = Path(__file__).resolve().parents[2]


def _pdf(path: Path, colors=("red", "blue"), size=(200, 300)) -> Path:
    """A PDF of one page per colour, each `size` pixels at 100 dpi (so 144 x 216 points)."""
    pages = [Image.new("RGB", size, c) for c in colors]
    path.parent.mkdir(parents=True, exist_ok=True)
    pages[0].save(path, save_all=True, append_images=pages[1:], resolution=100)
    return path


def _truncated_jpeg(path: Path) -> Path:
    Image.effect_noise((300, 300), 60).convert("RGB").save(path, quality=95)
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 3])
    return path


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, str(ROOT / "eval" / "grade_pages.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


# --------------------------------------------------------------------------------- pages
def test_pages_are_found_recursively_and_pdf_pages_rendered(tmp_path):
    folder = tmp_path / "pages"
    folder.mkdir()
    Image.new("RGB", (300, 400), "white").save(folder / "a.jpg")
    (folder / "sub").mkdir()
    Image.new("RGB", (50, 60), "white").save(folder / "sub" / "b.PNG")
    _pdf(folder / "sub" / "exam.pdf")
    exif = Image.Exif()
    exif[0x0112] = 6  # a phone photo stored sideways: shown turned by 90 degrees
    Image.new("RGB", (120, 80), "white").save(folder / "photo.jpg", exif=exif)
    _truncated_jpeg(folder / "trunc.jpg")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    (folder / "notes.txt").write_text("not a page")
    (folder / "._a.jpg").write_bytes(b"macOS metadata")
    (folder / ".thumbs").mkdir()
    Image.new("RGB", (10, 10)).save(folder / ".thumbs" / "t.png")

    pages, unreadable = find_pages(folder)
    assert [p.name for p in pages] == ["a.jpg", "photo.jpg", "sub/b.PNG", "sub/exam.pdf-p1", "sub/exam.pdf-p2",
                                       "trunc.jpg"]
    assert [u["page"] for u in unreadable] == ["broken.pdf"] and "broken.pdf" in unreadable[0]["error"]
    by_name = {p.name: p for p in pages}
    first, second = (load_page(by_name[f"sub/exam.pdf-p{n}"], dpi=200) for n in (1, 2))
    assert abs(first.width - 400) <= 1 and abs(first.height - 600) <= 1 and first.dpi == 200  # 144 x 216 pt
    assert first.image.getpixel((200, 300))[0] > 200 and second.image.getpixel((200, 300))[2] > 200  # red, blue
    assert load_page(by_name["photo.jpg"], 200).image.size == (80, 120)  # upright, as a viewer shows it
    with pytest.raises(ValueError, match=r"cannot read page trunc\.jpg"):
        load_page(by_name["trunc.jpg"], 200)


def _sized_pdf(path: Path, *sizes_pt: tuple[float, float]) -> Path:
    """A PDF of blank pages of the given sizes in points, as small as a file can be that asks for any size."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument.new()
    for width, height in sizes_pt:
        pdf.new_page(width, height)
    pdf.save(path)
    pdf.close()
    return path


def test_every_image_kind_the_converters_read_is_a_page_and_a_multi_page_tiff_is_refused(tmp_path):
    """One image-suffix list (gbtrain.files.IMAGE_SUFFIXES): a .webp or .tif page converts and grades alike."""
    folder = tmp_path / "pages"
    folder.mkdir()
    for name, kind in (("a.webp", "WEBP"), ("b.tif", "TIFF"), ("c.bmp", "BMP"), ("d.gif", "GIF")):
        Image.new("RGB", (60, 80), "white").save(folder / name, kind)
    frames = [Image.new("RGB", (60, 80), color) for color in ("white", "gray")]
    frames[0].save(folder / "scan.tiff", "TIFF", save_all=True, append_images=frames[1:])
    pages, unreadable = find_pages(folder)
    assert [p.name for p in pages] == ["a.webp", "b.tif", "c.bmp", "scan.tiff"] and not unreadable  # no .gif
    assert [load_page(p, 200).width for p in pages[:3]] == [60, 60, 60]
    with pytest.raises(ValueError, match=r"cannot read page scan\.tiff: it holds 2 images \(a multi-page scan\): save "
                                         r"them as a PDF"):
        load_page(pages[3], 200)


def test_pdf_pages_are_rendered_within_a_pixel_cap_and_huge_ones_refused(tmp_path):
    folder = tmp_path / "pages"
    folder.mkdir()
    pdf = _sized_pdf(folder / "bomb.pdf", (10_000, 10_000), (14_400, 100), (2384, 3370), (595, 842))
    assert pdf.stat().st_size < 2000
    pages, _ = find_pages(folder)
    for page, width in zip(pages[:2], ("10000", "14400"), strict=True):
        with pytest.raises(ValueError, match=rf"cannot read page bomb\.pdf-p{page.index + 1}: it is {width} x \d+ pt, "
                                             r"larger than A0 \(2384 x 3370 pt\); split or scale"):
            load_page(page, 200)
    a0, a4 = load_page(pages[2], 200), load_page(pages[3], 200)
    assert a0.width * a0.height <= RENDER_PIXELS and a0.dpi < 200  # 62 Mpx at 200 dpi: rendered at ~150
    assert a0.dpi == pytest.approx(72 * (RENDER_PIXELS / (2384 * 3370)) ** 0.5, abs=0.1)
    assert a4.dpi == 200 and abs(a4.width - 1653) <= 1


def test_nothing_graded_is_an_error_and_batches_hold_a_bounded_number_of_pixels(tmp_path, budget, monkeypatch):
    pages = tmp_path / "pages"
    pages.mkdir()
    _sized_pdf(pages / "huge.pdf", (10_000, 10_000))
    (pages / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    backend = RecordingBackend(budget)
    monkeypatch.setattr(grade, "open_backend", lambda run, plan: (backend, None))
    run = GradeRun("recorded", str(pages), str(tmp_path / "out"), backend="openai", coords="qwen25",
                   min_pixels=budget.min_pixels, max_pixels=budget.max_pixels)
    with pytest.raises(ValueError, match=r"no page could be graded \(2 unreadable, each named in .*summary\.json\)"):
        grade_pages(run, progress=False)
    assert backend.prompts == []

    for i in range(5):
        Image.new("RGB", (100, 100), "white").save(pages / f"p{i}.png")
    monkeypatch.setattr(grade, "BATCH_PIXELS", 25_000)  # two 100 x 100 pages
    sizes = []
    monkeypatch.setattr(backend, "chat", lambda convs, sampling, chat=backend.chat: sizes.append(len(convs))
                        or chat(convs, sampling))
    summary = grade_pages(run, progress=False)
    assert sizes == [2, 2, 1] and summary["graded_now"] == 5 and len(summary["unreadable"]) == 2


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_folder_of_the_users_own_pages_and_overlays_is_refused_and_kept(tmp_path, budget, monkeypatch, overwrite):
    pages = tmp_path / "pages"
    pages.mkdir()
    Image.new("RGB", (100, 100), "white").save(pages / "a.png")
    out = tmp_path / "out"
    for name in ("pages/scan-notes.json", "overlays/marked.png"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("the user's")
    monkeypatch.setattr(grade, "open_backend", lambda run, plan: (RecordingBackend(budget), None))
    run = GradeRun("recorded", str(pages), str(out), backend="openai", coords="qwen25", overwrite=overwrite,
                   min_pixels=budget.min_pixels, max_pixels=budget.max_pixels)
    with pytest.raises(ValueError, match=r"holds pages, overlays that no readable run\.json of grade_pages vouches "
                                         r"for: choose another --out \(--overwrite discards only"):
        grade_pages(run, progress=False)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name != ".lock") == [
        "overlays/marked.png", "pages/scan-notes.json"]


# --------------------------------------------------------------------------------- answer key and prompt
def test_answer_key_keeps_answers_as_written_and_changes_the_prompt(tmp_path):
    yml = tmp_path / "key.yaml"
    yml.write_text('1: 1.10\n"2b": x = 3\n3:\n4: yes\n', encoding="utf-8")
    key = load_answer_key(yml)
    assert key_references(key) == [("1", "1.10"), ("2b", "x = 3"), ("3", None), ("4", "yes")]
    js = tmp_path / "key.json"
    js.write_text('{"1": 1.10, "2": null, "3": true, "4": "甲"}', encoding="utf-8")
    assert key_references(load_answer_key(js)) == [("1", "1.10"), ("2", None), ("3", "true"), ("4", "甲")]

    free, based = grading_prompt("qwen25", None), grading_prompt("qwen25", key)
    assert free == prompts.single_turn("L3", "answer-free", "qwen25")  # the evaluator's L3 wording
    assert based == prompts.single_turn("L3", "answer-based", "qwen25", None, key_references(key))
    assert "Reference answers:\n1: 1.10\n2b: x = 3\n3: (no reference answer)" in based and "Reference" not in free

    for text, suffix, why in (("- 1\n- 2\n", ".yaml", "must map question ids"), ("1: [a, b]\n", ".yaml", "one value"),
                              ("1: 2\n", ".txt", r"\.yaml, \.yml or \.json"), ("{1: 2", ".json", "cannot be read")):
        bad = tmp_path / f"bad{suffix}"
        bad.write_text(text)
        with pytest.raises(ValueError, match=why):
            load_answer_key(bad)


def test_a_key_in_points_asks_for_scores_and_a_plain_key_asks_as_before(tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text("1: x = 3\n2: 5\n", encoding="utf-8")
    pts = tmp_path / "points.yaml"
    pts.write_text('1: {answer: x = 3, full_score: 4, rubric: "2 for the method"}\n2: 5\n'
                   "3: {full_score: 2.5, question_type: 填空}\n", encoding="utf-8")
    key = load_answer_key(pts)
    assert key == [KeyQuestion("1", "x = 3", 4, "2 for the method"), KeyQuestion("2", "5"),
                   KeyQuestion("3", None, 2.5, None, "Fill-in-the-blank")]
    text = grading_prompt("qwen25", key)
    assert text == prompts.single_turn("L3", "answer-based", "qwen25", None, key_references(key),
                                       [("1", 4, "2 for the method"), ("3", 2.5, None)])
    assert "Full scores:\n1: 4 points (rubric: 2 for the method)\n3: 2.5 points\n" in text and '"score": 1' in text
    assert grading_prompt("qwen25", load_answer_key(plain)) == prompts.single_turn(
        "L3", "answer-based", "qwen25", None, [("1", "x = 3"), ("2", "5")])  # the prompt of a key before points
    # a plain key hashes as before points (its graded folders resume); full scores and rubrics change the hash
    assert answer_key_hash(load_answer_key(plain)) == hashlib.sha256(
        json.dumps([["1", "x = 3"], ["2", "5"]]).encode()).hexdigest()[:16]
    for change in ("full_score: 5", 'rubric: "all or nothing"'):
        other = tmp_path / "other.yaml"
        other.write_text(pts.read_text(encoding="utf-8").replace(change.split(":")[0] + (
            ": 4" if "full" in change else ': "2 for the method"'), change), encoding="utf-8")
        assert load_answer_key(other) != key and answer_key_hash(load_answer_key(other)) != answer_key_hash(key)
    js = tmp_path / "key.json"
    js.write_text('{"1": {"answer": 7, "full_score": 3}}', encoding="utf-8")
    assert load_answer_key(js) == [KeyQuestion("1", "7", 3)]

    for text, why in (("1: {answer: 7, points: 3}\n", r"unknown key 'points' \(a question's mapping holds answer, "
                                                        r"full_score, rubric, question_type, page\)"),
                      ("1: {page: 0}\n", "page '0' must be a page number 1-1000"),
                      ("1: {page: two}\n", "page 'two' must be a page number 1-1000"),
                      ("1: {full_score: 0}\n", "full_score '0' must be a finite number above 0"),
                      ("1: {full_score: -2}\n", "full_score '-2' must be a finite number above 0"),
                      ("1: {full_score: nan}\n", "full_score 'nan' must be a finite number above 0"),
                      ("1: {full_score: 1e999}\n", "full_score '1e999' must be a finite number above 0"),
                      ("1: {full_score: four}\n", "full_score 'four' is not a number"),
                      ("1: {full_score: [4]}\n", "the full_score must be one value, not list"),
                      ("1: {question_type: essay}\n", "question_type 'essay' is not one of")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=rf"--answer-key {bad}: question '1': {why}"):
            load_answer_key(bad)
    for text in ('"": 42\n1: 7\n', "' ': 42\n", '{"": "42"}'):  # an id no page prints and no reply can name
        bad = tmp_path / ("bad.json" if text.startswith("{") else "bad.yaml")
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=rf"--answer-key {bad}: a question with an empty id \(its reference "
                                             r"'42'\): give it the number the page prints"):
            load_answer_key(bad)


# --------------------------------------------------------------------------------- replies
def test_a_reply_is_read_into_page_pixels(budget):
    w, h = 1000, 1400
    box = Box(100, 200, 400, 600)
    model_box = to_model(box, w, h, "qwen25", budget)
    reply = ("<think>the page has two answers</think>```json\n["
             f'{{"bbox_2d": {model_box}, "text": "12", "answer": "12", "correctness": true, "question": "3"}},'
             '{"bbox_2d": "none", "text": "x", "answer": "x = 3", "correctness": "no"},'
             f'{{"bbox_2d": [-5, -5, {w * 3}, {h * 3}], "text": "", "answer": "7", "correctness": "maybe"}}]\n```')
    items, reason = read_reply(reply, w, h, "qwen25", budget, [KeyQuestion("1", "7"), KeyQuestion("2", "x = 3")])
    assert reason is None and len(items) == 3
    ux, uy = model_unit_size(w, h, "qwen25", budget)
    assert all(abs(a - b) <= u for a, b, u in zip(items[0]["box"], box.as_list(), (ux, uy, ux, uy), strict=True))
    assert items[0]["model_boxes"] == [model_box] and items[0]["correctness"] is True
    assert items[0]["question_id"] == "3"  # the model's own id wins
    assert items[1]["box"] is None and items[1]["correctness"] is False and items[1]["question_id"] == "2"
    assert items[2]["box"] == [0, 0, w, h] and items[2]["correctness"] is None and items[2]["question_id"] == "1"
    rel = read_reply('[{"bbox_2d": [100, 100, 500, 250], "text": "a"}]', w, h, "rel1000", budget)[0]
    assert rel[0]["box"] == [100.0, 140.0, 500.0, 350.0]
    assert read_reply("I cannot grade this page.", w, h, "qwen25", budget) == ([], "no_json")
    cut = read_reply('[{"bbox_2d": [1, 2, 3, 4], "text": "a"}, {"bbox_2d": [5,', w, h, "qwen25", budget)
    assert len(cut[0]) == 1 and cut[1] == "truncated"


def test_unnamed_items_are_compared_with_the_key_only_up_to_a_stated_limit(budget):
    """300 items that name no question against a key of 3,000 (every answer compared with every reference took
    minutes): items are compared until MAX_REFERENCE_TRIES, the rest are left unmatched and marked untried, the
    first ones still found by the reference they repeat."""
    from gbtrain.grading.answer_key import MAX_REFERENCE_TRIES

    key = [KeyQuestion(str(i), str(1000 + i)) for i in range(3000)]
    reply = json.dumps([{"bbox_2d": [10, 10, 50, 50], "text": str(1000 + i), "answer": str(1000 + i),
                         "correctness": True} for i in range(300)])
    items, reason = read_reply(reply, 1000, 1400, "qwen25", budget, key)
    tried = MAX_REFERENCE_TRIES // len(key)
    assert reason is None and len(items) == 300
    assert [it["question_id"] for it in items[:tried]] == [str(i) for i in range(tried)]
    assert all(it["matched_by"] == "reference" and not it["reference_untried"] for it in items[:tried])
    assert all(it["matched_by"] is None and it["reference_untried"] for it in items[tried:])


# --------------------------------------------------------------------------------- the output folder
class RecordingBackend:
    """Answers every page with one item: the page's middle half, in the model's (qwen25) convention."""

    name, model = "openai", "recorded"

    def __init__(self, budget):
        self.budget, self.prompts = budget, []

    def chat(self, conversations, sampling):
        replies = []
        for conv in conversations:
            image, text = conv[0]["content"][0]["image"], conv[0]["content"][1]["text"]
            self.prompts.append(text)
            w, h = image.size
            box = to_model(Box(w / 4, h / 4, 3 * w / 4, 3 * h / 4), w, h, "qwen25", self.budget)
            replies.append(json.dumps([{"bbox_2d": box, "text": "x = 3", "answer": "x = 3", "correctness": True}]))
        return replies

    def close(self):
        pass


class ScoringBackend(RecordingBackend):
    """Answers every page with three items: question 1 (4 points, scored 3), question 2 (no full score, scored
    anyway) and question 3 (2.5 points, scored 7: out of range)."""

    def chat(self, conversations, sampling):
        self.prompts += [c[0]["content"][1]["text"] for c in conversations]
        items = [{"bbox_2d": [10, 10, 50, 30], "question": q, "text": "t", "answer": "a", "correctness": True,
                  "score": s} for q, s in (("1", 3), ("2", "1"), ("3", 7))]
        return [json.dumps(items)] * len(conversations)


def test_points_in_grade_pages_items_and_totals(tmp_path, budget, monkeypatch):
    pages = tmp_path / "pages"
    pages.mkdir()
    for name in ("a.png", "b.png"):
        Image.new("RGB", (400, 560), "white").save(pages / name)
    key = tmp_path / "key.yaml"
    key.write_text("1: {answer: x, full_score: 4}\n2: y\n3: {full_score: 2.5}\n", encoding="utf-8")
    backend = ScoringBackend(budget)
    monkeypatch.setattr(grade, "open_backend", lambda run, plan: (backend, None))
    out = tmp_path / "out"
    summary = grade_pages(GradeRun("scored", str(pages), str(out), answer_key=str(key), backend="openai",
                                   coords="qwen25", min_pixels=budget.min_pixels, max_pixels=budget.max_pixels),
                          progress=False)
    assert all("Full scores:\n1: 4 points\n3: 2.5 points" in p for p in backend.prompts)
    page = json.loads((out / "pages" / "a.png.json").read_text(encoding="utf-8"))
    assert [(it["score"], it["full_score"], it["score_problem"]) for it in page["items"]] == [
        (3, 4, None), (1, None, None), (7, 2.5, "outside 0..full_score")]
    assert summary["points"] == 6 and summary["full_points"] == 13
    with open(out / "totals.csv", newline="") as f:
        # each page a document: its points out of its key's full scores; the flagged score counts 0
        assert [(r["points"], r["full_points"]) for r in csv.DictReader(f)] == [("3", "6.5")] * 2
    with open(out / "grades.csv", newline="") as f:
        assert [(r["score"], r["full_score"]) for r in csv.DictReader(f)][:3] == [("3", "4"), ("1", ""), ("7", "2.5")]


class ItemsBackend(RecordingBackend):
    """Answers every page with `items`: (question id or None, answer, score) in reading order."""

    def __init__(self, budget, items):
        super().__init__(budget)
        self.items = items

    def chat(self, conversations, sampling):
        self.prompts += [c[0]["content"][1]["text"] for c in conversations]
        reply = [{**({"question_id": q} if q is not None else {}), "bbox_2d": [10, 10 + 40 * k, 50, 30 + 40 * k],
                  "text": "t", "answer": a, "correctness": True, **({"score": s} if s is not None else {})}
                 for k, (q, a, s) in enumerate(self.items)]
        return [json.dumps(reply)] * len(conversations)


def test_totals_list_every_keyed_question_once(tmp_path, budget, monkeypatch):
    """A key of five questions: two with the same reference (choice letter B), one with a rubric and no reference,
    worth points. The model names question 1 twice, question 2 in fullwidth digits, answers question 4 without an id
    (its reference, unique, finds it: "42.0" is 42, read as a number, exactly), and never answers question 5.
    Totals: every keyed question once, 1's first item kept, 5 missing with 0 points, out of all the key's full
    scores; per document and per student."""
    pages = tmp_path / "pages"
    for student in ("ann", "bob"):
        (pages / student).mkdir(parents=True)
        Image.new("RGB", (400, 560), "white").save(pages / student / "p1.png")
    key = tmp_path / "key.yaml"
    key.write_text("1: {answer: B, full_score: 2}\n2: {answer: B, full_score: 2}\n"
                   "3: {rubric: 'explains the method', full_score: 4}\n4: {answer: '42', full_score: 1}\n"
                   "5: {answer: C, full_score: 3}\n", encoding="utf-8")
    backend = ItemsBackend(budget, [("1", "B", 2), ("1", "B", 1), ("２", "B", 1), ("3", "the method", 3),
                                    (None, "42.0", 1)])
    monkeypatch.setattr(grade, "open_backend", lambda run, plan: (backend, None))
    out = tmp_path / "out"
    summary = grade_pages(GradeRun("scored", str(pages), str(out), answer_key=str(key), backend="openai",
                                   coords="qwen25", min_pixels=budget.min_pixels, max_pixels=budget.max_pixels,
                                   student_pattern=r"^([^/]+)/"), progress=False)
    page = next(json.loads(f.read_text(encoding="utf-8")) for f in (out / "pages").glob("*.json")
                if json.loads(f.read_text(encoding="utf-8"))["source"] == "ann/p1.png")
    assert [(it["question_id"], it["matched_by"]) for it in page["items"]] == [
        ("1", "id"), ("1", "id"), ("2", "id"), ("3", "id"), ("4", "reference")]
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        ann = [r for r in csv.DictReader(f) if r["page"] == "ann/p1.png"]
    assert [(r["duplicate_of"], r["review"]) for r in ann[:2]] == [("", "false"), ("ann/p1.png #1", "true")]
    totals = summary["per_document"]["ann"]
    assert (totals["points"], totals["full_points"]) == (7, 12)  # 2 + 1 + 3 + 1 + 0, out of every full score
    assert (totals["missing"], totals["duplicate"], totals["by_reference"], totals["unkeyed"]) == (1, 1, 1, 0)
    assert totals["review"] == 2  # the duplicate item and the missing question
    assert summary["per_student"] == summary["per_document"]  # a student's pages are one document
    assert summary["per_student"]["ann"]["points"] == 7 and summary["points"] == 14
    with open(out / "questions.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [(r["student"], r["question_id"], r["status"], r["item"], r["points"]) for r in rows[:5]] == [
        ("ann", "1", "duplicate", "1", "2"), ("ann", "2", "found", "3", "1"), ("ann", "3", "found", "4", "3"),
        ("ann", "4", "found", "5", "1"), ("ann", "5", "missing", "", "0")]
    with open(out / "students.csv", newline="", encoding="utf-8") as f:
        assert [(r["student"], r["points"], r["full_points"], r["missing"]) for r in csv.DictReader(f)] == [
            ("ann", "7", "12", "1"), ("bob", "7", "12", "1")]


def test_an_exam_that_prints_no_numbers_is_matched_by_position(tmp_path, budget, monkeypatch):
    """A key of unnumbered questions (#1, #2, #3: the first, second, third answer in reading order) and a model that
    names none (or one the key lacks): the item whose answer repeats a reference takes that question, the others the
    remaining ones in reading order; each is counted as matched by position."""
    pages = tmp_path / "pages"
    pages.mkdir()
    Image.new("RGB", (400, 560), "white").save(pages / "a.png")
    key = tmp_path / "key.yaml"
    key.write_text("'#1': {answer: '7', full_score: 2}\n'#2': {answer: '9', full_score: 2}\n"
                   "'#3': {answer: '11', full_score: 2}\n", encoding="utf-8")
    backend = ItemsBackend(budget, [(None, "8", 0), ("Q9", "10", 1), (None, "11", 2)])
    monkeypatch.setattr(grade, "open_backend", lambda run, plan: (backend, None))
    out = tmp_path / "out"
    summary = grade_pages(GradeRun("scored", str(pages), str(out), answer_key=str(key), backend="openai",
                                   coords="qwen25", min_pixels=budget.min_pixels, max_pixels=budget.max_pixels),
                          progress=False)
    page = json.loads((out / "pages" / "a.png.json").read_text(encoding="utf-8"))
    assert [(it["question_id"], it["matched_by"]) for it in page["items"]] == [
        ("#1", "position"), ("#2", "position"), ("#3", "reference")]
    assert (summary["points"], summary["full_points"], summary["missing"]) == (3, 6, 0)
    assert (summary["by_position"], summary["by_reference"], summary["unkeyed"]) == (2, 1, 0)


def _confident_reply(items: list[dict], confidences: list[float]) -> str:
    """The reply of `items` with token logprobs (one token per character) that give each item's judgment the
    confidence asked for, as a vLLM or openai backend's reply carries them (gbtrain.metric.confidence)."""
    import math
    import re

    class Reply(str):
        logprobs: list

    text = json.dumps(items, ensure_ascii=False)
    logprob = [0.0] * len(text)
    for match, conf in zip(re.finditer(r'"correctness": (true|false)', text), confidences, strict=True):
        for i in range(match.start(1), match.end(1)):
            logprob[i] = math.log(conf)
    reply = Reply(text)
    reply.logprobs = [[i, lp] for i, lp in enumerate(logprob)]
    return reply


class ExamBackend(RecordingBackend):
    """Answers each page by its colour (`pages`: colour -> items (printed id or None, answer, correctness, score,
    confidence)), each item in its own row of the page, in the model's (qwen25) convention."""

    def __init__(self, budget, pages):
        super().__init__(budget)
        self.pages, self.asked = pages, {}

    def chat(self, conversations, sampling):
        replies = []
        for conv in conversations:
            image, text = conv[0]["content"][0]["image"], conv[0]["content"][1]["text"]
            w, h = image.size
            colour = min(self.pages, key=lambda c: sum(abs(a - b) for a, b in zip(
                c, image.getpixel((w // 2, h // 2)), strict=True)))
            self.asked[colour] = text
            items = [{**({"question_id": q} if q is not None else {}),
                      "bbox_2d": to_model(Box(w / 8, h * (k + 1) / 8, w / 2, h * (k + 1.5) / 8), w, h, "qwen25",
                                          self.budget),
                      "text": a, "answer": a, "correctness": ok, "score": pts}
                     for k, (q, a, ok, pts, _) in enumerate(self.pages[colour])]
            replies.append(_confident_reply(items, [c for *_, c in self.pages[colour]]))
        return replies


def test_a_hand_made_exam_is_totalled_once_per_student_over_both_pages(tmp_path, budget, monkeypatch):
    """Three students' two-page exams: Ann and Bob scanned as PDFs, Cy photographed as two files. The key: question
    5 (choice B, on page 1) and 10 (choice B again, on page 2), 8 (12, either page) and 11 (rubric only, no
    reference). Ids are printed as pages print them (Q5, 第8题, 10., (11), 第五题, 5., 十一); Bob answers 10 without
    an id (its answer B names 5 and 10, but only 10 is asked on page 2) and skips 11; Cy answers 8 on both pages
    (the more confident, on page 2, is kept), skips 10 and writes a question 12 the key does not have. Every page,
    document and student total and every review flag is checked against values worked out by hand."""
    red, blue, green, yellow, magenta, cyan = ((255, 0, 0), (0, 0, 255), (0, 255, 0), (255, 255, 0), (255, 0, 255),
                                               (0, 255, 255))
    pages = tmp_path / "pages"
    _pdf(pages / "ann" / "exam.pdf", colors=(red, blue), size=(400, 560))
    _pdf(pages / "bob" / "exam.pdf", colors=(green, yellow), size=(400, 560))
    (pages / "cy").mkdir()
    for name, colour in (("p1.png", magenta), ("p2.png", cyan)):
        Image.new("RGB", (400, 560), colour).save(pages / "cy" / name)
    key = tmp_path / "key.yaml"
    key.write_text("5: {answer: B, full_score: 2, question_type: 选择, page: 1}\n8: {answer: '12', full_score: 3}\n"
                   "10: {answer: B, full_score: 2, question_type: 选择, page: 2}\n"
                   "11: {rubric: 'explains why the angle is right', full_score: 4}\n", encoding="utf-8")
    backend = ExamBackend(budget, {
        red: [("Q5", "B", True, 2, 0.9), ("第8题", "12", True, 3, 0.9)],
        blue: [("10.", "B", True, 2, 0.9), ("(11)", "a² + b² = c²", True, 3, 0.8)],
        green: [("第五题", "C", False, 0, 0.9), ("8", "12", True, 3, 0.9)],
        yellow: [(None, "B", True, 2, 0.7)],
        magenta: [("5.", "B", True, 2, 0.9), ("8", "13", False, 0, 0.6)],
        cyan: [("第8题", "12", True, 3, 0.95), ("十一", "Pythagoras", True, 4, 0.9), ("Q12", "x", True, 1, 0.9)]})
    monkeypatch.setattr(grade, "open_backend", lambda run, plan: (backend, None))
    out = tmp_path / "out"
    summary = grade_pages(GradeRun("scored", str(pages), str(out), answer_key=str(key), backend="openai",
                                   coords="qwen25", min_pixels=budget.min_pixels, max_pixels=budget.max_pixels,
                                   student_pattern=r"^([^/]+)/", pdf_dpi=100), progress=False)

    # each page is asked for its own questions: 5 on page 1, 10 on page 2, 8 and 11 on both
    for colour in (red, green, magenta):
        assert "Reference answers:\n5: B\n8: 12\n11: (no reference answer)\n" in backend.asked[colour]
    for colour in (blue, yellow, cyan):
        assert "Reference answers:\n8: 12\n10: B\n11: (no reference answer)\n" in backend.asked[colour]

    def rows(name):
        with open(out / name, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))

    # per page: what it holds (the points of the questions kept on it, out of their full scores)
    assert [(r["page"], r["document"], r["points"], r["full_points"], r["review"], r["duplicate"], r["by_reference"],
             r["unkeyed"]) for r in rows("totals.csv")] == [
        ("ann/exam.pdf-p1", "ann", "5", "5", "0", "0", "0", "0"),
        ("ann/exam.pdf-p2", "ann", "5", "6", "0", "0", "0", "0"),
        ("bob/exam.pdf-p1", "bob", "3", "5", "0", "0", "0", "0"),
        ("bob/exam.pdf-p2", "bob", "2", "2", "0", "0", "1", "0"),
        ("cy/p1.png", "cy", "2", "2", "1", "1", "0", "0"),
        ("cy/p2.png", "cy", "7", "7", "0", "0", "0", "1")]
    # per document (a student's pages): the key once, every full score once
    assert [(r["document"], r["pages"], r["points"], r["full_points"], r["missing"], r["duplicate"], r["review"])
            for r in rows("documents.csv")] == [("ann", "2", "10", "11", "0", "0", "0"),
                                                ("bob", "2", "5", "11", "1", "0", "1"),
                                                ("cy", "2", "9", "11", "1", "1", "2")]
    assert [(r["student"], r["points"], r["full_points"]) for r in rows("students.csv")] == [
        ("ann", "10", "11"), ("bob", "5", "11"), ("cy", "9", "11")]
    assert (summary["points"], summary["full_points"], summary["missing"], summary["duplicate"]) == (24, 33, 2, 1)
    assert summary["unkeyed_ids"] == {"Q12": 1} and summary["review"] == 3
    # per keyed question of a document: where it was found, or that it was not
    assert [(r["document"], r["question_id"], r["status"], r["page"], r["item"], r["points"], r["review"])
            for r in rows("questions.csv")] == [
        ("ann", "5", "found", "ann/exam.pdf-p1", "1", "2", "False"),
        ("ann", "8", "found", "ann/exam.pdf-p1", "2", "3", "False"),
        ("ann", "10", "found", "ann/exam.pdf-p2", "1", "2", "False"),
        ("ann", "11", "found", "ann/exam.pdf-p2", "2", "3", "False"),
        ("bob", "5", "found", "bob/exam.pdf-p1", "1", "0", "False"),
        ("bob", "8", "found", "bob/exam.pdf-p1", "2", "3", "False"),
        ("bob", "10", "found", "bob/exam.pdf-p2", "1", "2", "False"),
        ("bob", "11", "missing", "", "", "0", "True"),
        ("cy", "5", "found", "cy/p1.png", "1", "2", "False"),
        ("cy", "8", "duplicate", "cy/p2.png", "1", "3", "True"),
        ("cy", "10", "missing", "", "", "0", "True"),
        ("cy", "11", "found", "cy/p2.png", "2", "4", "False")]
    # per item: the key's id for the printed one, and the review flags
    assert [(r["page"], r["printed_id"], r["question_id"], r["review"], r["duplicate_of"])
            for r in rows("grades.csv")] == [
        ("ann/exam.pdf-p1", "Q5", "5", "false", ""), ("ann/exam.pdf-p1", "第8题", "8", "false", ""),
        ("ann/exam.pdf-p2", "10.", "10", "false", ""), ("ann/exam.pdf-p2", "(11)", "11", "false", ""),
        ("bob/exam.pdf-p1", "第五题", "5", "false", ""), ("bob/exam.pdf-p1", "8", "8", "false", ""),
        ("bob/exam.pdf-p2", "", "10", "false", ""),
        ("cy/p1.png", "5.", "5", "false", ""), ("cy/p1.png", "8", "8", "true", "cy/p2.png #1"),
        ("cy/p2.png", "第8题", "8", "false", ""), ("cy/p2.png", "十一", "11", "false", ""),
        ("cy/p2.png", "Q12", "Q12", "false", "")]


def test_a_student_for_every_page_or_a_named_refusal(tmp_path):
    from gbtrain.grading.pages import students_of

    files = ["ann/p1.png", "bob/p1.pdf"]
    assert students_of(files, None, None) is None
    assert students_of(files, None, r"^([^/]+)/") == {"ann/p1.png": "ann", "bob/p1.pdf": "bob"}
    with pytest.raises(ValueError, match=r"--student-pattern 'x\(.*\)' names no student in 'ann/p1.png' \(2 page "
                                         r"files\)"):
        students_of(files, None, r"x(\d+)")
    # a pattern that backtracks exponentially on a long name: a one-line refusal after its time limit, not a hang
    with pytest.raises(ValueError, match=r"--student-pattern '\(a\|aa\)\+\$' took over 1 s on 'aaa.*without nested "
                                         r"repeats"):
        students_of(["a" * 5000 + "!.png"], None, r"(a|aa)+$")
    with pytest.raises(ValueError, match=r"--student-pattern '\(': not a regular expression"):
        students_of(files, None, "(")
    for empty in ("", "  "):  # an unset shell variable: refused, not read as no pattern
        with pytest.raises(ValueError, match=r"--student-pattern is empty: give a pattern"):
            students_of(files, None, empty)
        with pytest.raises(ValueError, match=r"--students is empty: name the CSV manifest"):
            students_of(files, empty, None)
    manifest = tmp_path / "students.csv"
    manifest.write_text("file,student\nann/p1.png,Ann\nbob/p1.pdf,Bob\n", encoding="utf-8")
    assert students_of(files, str(manifest), None) == {"ann/p1.png": "Ann", "bob/p1.pdf": "Bob"}
    manifest.write_text("file,student\nann/p1.png,Ann\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"no student for 'bob/p1.pdf' \(1 page files\): add a row for each"):
        students_of(files, str(manifest), None)
    manifest.write_text("file,student\nann/p1.png,Ann\nbob/p2.pdf,Bob\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 3: 'bob/p2.pdf' is no page file under --pages"):
        students_of(files, str(manifest), None)


def test_answer_key_run_with_recorded_replies_writes_every_file_inside_out(tmp_path, budget, monkeypatch):
    pages = tmp_path / "pages"
    (pages / "a").mkdir(parents=True)
    Image.new("RGB", (700, 990), "white").save(pages / "a" / "odd..name #1 .png")
    _pdf(pages / "exam.pdf", size=(300, 420))
    key = tmp_path / "key.yaml"
    key.write_text("1: x = 3\n2: 5\n")
    backend = RecordingBackend(budget)
    monkeypatch.setattr(grade, "open_backend", lambda run, plan: (backend, None))
    out = tmp_path / "out"
    run = GradeRun("recorded", str(pages), str(out), answer_key=str(key), backend="openai", coords="qwen25",
                   min_pixels=budget.min_pixels, max_pixels=budget.max_pixels, pdf_dpi=100)
    summary = grade_pages(run, progress=False)

    assert summary["pages"] == summary["graded_now"] == 3 and summary["right"] == 3 and not summary["unreadable"]
    assert backend.prompts == [grading_prompt("qwen25", load_answer_key(key))] * 3
    files = [p for p in out.rglob("*") if p.is_file()]
    assert all(out.resolve() in p.resolve().parents for p in files)
    assert len(list((out / "pages").glob("*.json"))) == len(list((out / "overlays").glob("*.png"))) == 3
    odd = next(json.loads(p.read_text()) for p in (out / "pages").glob("*.json") if "odd" in p.name)
    assert odd["page"] == "a/odd..name #1 .png" and odd["status"] == "ok"
    assert odd["items"][0]["box"] == pytest.approx([175, 247.5, 525, 742.5], abs=2)  # page pixels, not model's
    assert odd["items"][0]["question_id"] == "1"  # its answer repeats reference 1
    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["page"] for r in rows] == ["a/odd..name #1 .png", "exam.pdf-p1", "exam.pdf-p2"]
    assert rows[1]["correctness"] == "true" and float(rows[1]["x2"]) == pytest.approx(225, abs=2)
    recorded = json.loads((out / "run.json").read_text())
    assert recorded["mode"] == "answer-based" and recorded["answer_key_sha256"] and recorded["pdf_dpi"] == 100


def test_a_page_the_endpoint_refused_is_counted_and_tried_again(tmp_path, budget, monkeypatch):
    from gbtrain.inference.base import FailedReply

    pages = tmp_path / "pages"
    pages.mkdir()
    Image.new("RGB", (400, 560), "white").save(pages / "a.png")
    backend = RecordingBackend(budget)
    monkeypatch.setattr(grade, "open_backend", lambda run, plan: (backend, None))
    run = GradeRun("recorded", str(pages), str(tmp_path / "out"), backend="openai", coords="qwen25",
                   min_pixels=budget.min_pixels, max_pixels=budget.max_pixels)
    monkeypatch.setattr(backend, "chat", lambda convs, sampling: [FailedReply("400 BadRequestError: too big")])
    refused = grade_pages(run, progress=False)
    assert refused["errors"] == 1 and refused["per_page"][0]["status"] == "error"
    monkeypatch.undo()
    monkeypatch.setattr(grade, "open_backend", lambda run, plan: (backend, None))
    again = grade_pages(run, progress=False)
    assert again["graded_now"] == 1 and again["errors"] == 0 and again["right"] == 1


# --------------------------------------------------------------------------------- the tiny model
@pytest.mark.slow
def test_hf_run_resumes_skips_an_unreadable_page_and_refuses_other_settings(synth_dir, tiny_model_dir, budget,
                                                                               tmp_path):
    pages = tmp_path / "pages"
    (pages / "more").mkdir(parents=True)
    l3 = sorted((synth_dir / "images" / "L3").rglob("*.jpg"))
    shutil.copy(l3[0], pages / "p1.jpg")
    shutil.copy(l3[1], pages / "more" / "p2.jpg")
    _pdf(pages / "scan.pdf", size=(280, 400))
    _truncated_jpeg(pages / "bad.jpg")
    out = tmp_path / "out"
    run = GradeRun(str(tiny_model_dir), str(pages), str(out), backend="hf", min_pixels=budget.min_pixels,
                   max_pixels=budget.max_pixels, max_tokens=16, batch_size=3)
    summary = grade_pages(run, progress=False)

    names = ["more/p2.jpg", "p1.jpg", "scan.pdf-p1", "scan.pdf-p2"]
    assert summary["graded_now"] == 4 and [t["page"] for t in summary["per_page"]] == names
    assert [u["page"] for u in summary["unreadable"]] == ["bad.jpg"]
    assert "cannot read page bad.jpg" in summary["unreadable"][0]["error"]
    for path in (out / "pages").glob("*.json"):
        page = json.loads(path.read_text())
        assert {"items", "response", "status", "totals", "width", "height"} <= set(page)
        with Image.open(out / "overlays" / f"{path.stem}.png") as im:
            assert im.size == (page["width"], page["height"])
    with open(out / "totals.csv", newline="") as f:
        assert [r["page"] for r in csv.DictReader(f)] == names
    recorded = json.loads((out / "run.json").read_text())
    assert recorded["coords"] == "qwen25" and recorded["max_pixels"] == budget.max_pixels
    assert recorded["mode"] == "answer-free" and recorded["answer_key_sha256"] is None

    # a rerun grades only what is missing (and tries the unreadable page again)
    done = {p.name: p.stat().st_mtime_ns for p in (out / "pages").glob("*.json")}
    (out / "pages" / "p1.jpg.json").unlink()
    again = grade_pages(run, progress=False)
    assert again["graded_now"] == 1 and (out / "pages" / "p1.jpg.json").is_file()
    assert all(p.stat().st_mtime_ns == done[p.name] for p in (out / "pages").glob("*.json") if p.name != "p1.jpg.json")

    # other settings on the same folder: one line naming the difference and the way out, exit code 2
    key = tmp_path / "key.yaml"
    key.write_text("1: 42\n")
    proc = _cli("--model", tiny_model_dir, "--pages", pages, "--out", out, "--backend", "hf", "--min-pixels",
                budget.min_pixels, "--max-pixels", budget.max_pixels, "--max-tokens", 16, "--answer-key", key)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert line.startswith("grade_pages: ") and "\n" not in line
    assert "answer_key_sha256" in line and "mode" in line and "--overwrite" in line


def test_user_errors_are_one_line(tmp_path):
    pages = tmp_path / "pages"
    pages.mkdir()
    proc = _cli("--model", "x/y", "--pages", tmp_path / "none", "--out", tmp_path / "o", "--coords", "qwen25")
    assert proc.returncode == 2 and proc.stderr.strip() == f"grade_pages: pages folder not found: {tmp_path / 'none'}"
    proc = _cli("--model", "x/y", "--pages", pages, "--out", pages / "graded", "--coords", "qwen25")
    assert proc.returncode == 2 and "lies inside --pages" in proc.stderr and len(proc.stderr.splitlines()) == 1

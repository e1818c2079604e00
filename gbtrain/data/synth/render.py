"""Lay out and draw one clean exam page: printed questions, charts and a student's handwriting.

Alongside the RGB page, every handwritten glyph is also drawn into a label map (answer index + 1 per
pixel), so answer boxes can be read off the ink itself after the scan distortion is applied.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw

from gbtrain.data import fonts
from gbtrain.data.synth.banks import (
    CHOICE,
    EXAM_TITLES,
    FILL,
    GRADES,
    QUESTION_TYPES,
    SECTION_TITLES,
    SOLVE,
    TF,
    Chart,
    Part,
    Question,
)
from gbtrain.schema import Box

PRINT_INK = (28, 28, 30)
BASE_WIDTH = 1240  # layout sizes below are for this page width and scale with it
_SLOT_RE = re.compile(r"(____|（　　）|\(    \))")
_CJK_NUMERALS = "一二三四五六七八九十"
_ROMAN = ("I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X")
TITLE_SUFFIXES = ("期中测试卷", "期末测试卷", "单元练习")
INFO_LINE = "姓名：________  班级：________  得分：________"
FIXED_TEXT = _CJK_NUMERALS + "".join(TITLE_SUFFIXES) + INFO_LINE + "、（）＿"  # for font subsetting


@dataclass
class HandStyle:
    """One student's handwriting: ink, size, slant and how unsteady it is."""

    ink: tuple[int, int, int]
    size: int
    slant_deg: float
    jitter: float  # glyph offset / rotation spread, as a fraction of the size
    stroke: int
    wobble: float  # baseline wobble amplitude, fraction of the size
    visible: bool = True  # False draws the label map only (tests diff pages with and without ink)

    @staticmethod
    def random(rng: random.Random, unit: float) -> HandStyle:
        ink = rng.choice([(20, 30, 120), (15, 15, 20), (30, 45, 150), (60, 60, 70), (10, 40, 90)])
        return HandStyle(ink=ink, size=round(rng.uniform(27, 34) * unit), slant_deg=rng.uniform(-6, 6),
                         jitter=rng.uniform(0.03, 0.09), stroke=rng.choice([0, 0, 1]),
                         wobble=rng.uniform(0.02, 0.08))


@dataclass
class DrawnAnswer:
    mark_id: str
    part: Part
    is_right: bool
    hand: str  # what was written ("" when left blank)
    label_index: int  # value in the label map (0 = no ink)
    slot: Box  # the answer slot on the clean page (used for blank answers)


@dataclass
class DrawnQuestion:
    number: int
    question: Question
    box: Box  # clean-page box of the question (stem, figure, answers)
    answers: list[DrawnAnswer] = field(default_factory=list)


@dataclass
class CleanPage:
    image: Image.Image
    labels: Image.Image  # mode "L": answer label_index per ink pixel
    questions: list[DrawnQuestion]


def _draw_print(draw: ImageDraw.ImageDraw, x: float, baseline: float, text: str, size: int,
                fill=PRINT_INK) -> float:
    """Draw printed text at a baseline; return the x after it."""
    return fonts.draw_text(draw, x, baseline, text, size, fill)


def write_hand(page: Image.Image, labels: Image.Image, text: str, x: float, baseline: float,
               style: HandStyle, label_index: int, rng: random.Random) -> float:
    """Write `text` glyph by glyph with per-glyph jitter; returns the x after the last glyph."""
    s = style.size
    phase = rng.uniform(0, 2 * math.pi)
    for ch in text:
        if ch == " ":
            x += s * 0.35
            continue
        name = fonts.font_name_for("hand", ch)
        size = max(8, round(s * rng.uniform(0.92, 1.08) * (1.6 if ch in "√×" else 1.15 if ord(ch) < 0x2E80 else 1.0)))
        f = fonts.font(name, size)
        pad = size
        canvas = Image.new("L", (size * 2 + pad, size * 2 + pad), 0)
        ImageDraw.Draw(canvas).text((pad // 2, size * 1.5), ch, font=f, fill=255, anchor="ls",
                                    stroke_width=style.stroke, stroke_fill=255)
        angle = -style.slant_deg + rng.gauss(0, style.jitter * 60)
        glyph = canvas.rotate(angle, resample=Image.BICUBIC, center=(pad // 2, size * 1.5))
        bbox = glyph.getbbox()
        if bbox is None:
            continue
        glyph = glyph.crop(bbox)
        dy = s * style.wobble * math.sin(phase + x / (s * 2.5)) + rng.gauss(0, style.jitter * s * 0.4)
        px = round(x + bbox[0] - pad // 2 + rng.gauss(0, style.jitter * s * 0.3))
        py = round(baseline - size * 1.5 + bbox[1] + dy)
        if style.visible:
            page.paste(style.ink, (px, py), glyph)
        labels.paste(label_index, (px, py), glyph.point(lambda v: 255 if v >= 80 else 0))
        x += f.getlength(ch) * rng.uniform(0.95, 1.1) + s * 0.04
    return x


def hand_width(text: str, style: HandStyle) -> float:
    return fonts.text_width("hand", text, style.size) * 1.05 + style.size * 0.04 * len(text)


def _tokens(text: str) -> list[str]:
    """Split printed text into wrap units: slots, Latin words (with their trailing space), CJK chars."""
    out: list[str] = []
    for piece in _SLOT_RE.split(text):
        if not piece:
            continue
        if _SLOT_RE.fullmatch(piece):
            out.append(piece)
            continue
        out.extend(m.group(0) for m in re.finditer(r"[A-Za-z0-9.,'’?!:;()\-+=/×÷°_]+ ?|\s|.", piece))
    return out


class _QuestionCanvas:
    """Draws one question into its own strip, so its height is known before it is placed."""

    def __init__(self, width: int, unit: float, style: HandStyle, rng: random.Random, first_label: int):
        self.w, self.unit, self.style, self.rng = width, unit, style, rng
        self.img = Image.new("RGB", (width, round(1400 * unit)), (255, 255, 255))
        self.labels = Image.new("L", self.img.size, 0)
        self.draw = ImageDraw.Draw(self.img)
        self.size = round(25 * unit)
        self.line_h = round(48 * unit)
        self.y = self.line_h * 0.8  # baseline of the current line
        self.x = 0.0
        self.indent = 0.0
        self.next_label = first_label
        self.answers: list[DrawnAnswer] = []

    def newline(self, gap: float = 1.0) -> None:
        self.x = self.indent
        self.y += self.line_h * gap

    def _slot_width(self, part: Part, token: str) -> float:
        longest = max(len(part.right_answer), len(part.wrong_answer), 2)
        if token == "____":
            return max(90 * self.unit, hand_width("8" * longest, self.style) * 1.25)
        return max(80 * self.unit, self.style.size * 2.4)

    def _answer(self, mark_id: str, part: Part, is_right: bool, blank: bool, slot: Box, x: float,
                baseline: float, width: float) -> None:
        hand = "" if blank else (part.right_answer if is_right else part.wrong_answer)
        label = self.next_label
        self.next_label += 1
        if hand:
            if part.lines > 1:
                self._write_block(hand, slot, label)
            else:
                w = hand_width(hand, self.style)
                start = x + max(0.0, (width - w) / 2) + self.rng.uniform(-0.1, 0.1) * self.style.size
                write_hand(self.img, self.labels, hand, start, baseline - self.rng.uniform(2, 6) * self.unit,
                           self.style, label, self.rng)
        self.answers.append(DrawnAnswer(mark_id, part, is_right, hand, label, slot))

    def _write_block(self, text: str, area: Box, label: int) -> None:
        """Problem-solving work: wrap the handwriting across the lines of its answer area."""
        lines, cur = [], ""
        for ch in text:
            if hand_width(cur + ch, self.style) > area.width * 0.92 and cur:
                lines.append(cur)
                cur = ""
            cur += ch
        lines.append(cur)
        step = self.style.size * 1.5
        base = area.y1 + self.style.size * 1.1
        for i, line in enumerate(lines):
            write_hand(self.img, self.labels, line, area.x1 + self.rng.uniform(5, 25) * self.unit, base + i * step,
                       self.style, label, self.rng)

    def printed(self, text: str, slot_for: tuple[str, Part, bool, bool] | None = None) -> None:
        """Flow printed text, wrapping; the first slot token in it becomes `slot_for`'s answer slot."""
        for tok in _tokens(text):
            is_slot = bool(_SLOT_RE.fullmatch(tok)) and slot_for is not None
            width = self._slot_width(slot_for[1], tok) if is_slot else fonts.text_width("print", tok, self.size)
            if self.x + width > self.w and self.x > self.indent:
                self.newline()
                if tok.isspace():
                    continue
            if is_slot:
                self._slot(tok, width, slot_for)
                slot_for = None
            else:
                if _SLOT_RE.fullmatch(tok):  # a slot with no answer attached: draw it empty
                    tok = tok.replace("____", "＿＿")
                self.x = _draw_print(self.draw, self.x, self.y, tok, self.size)

    def _slot(self, token: str, width: float, slot_for: tuple[str, Part, bool, bool]) -> None:
        mark_id, part, is_right, blank = slot_for
        x0, y = self.x, self.y
        if token == "____":
            self.draw.line([(x0 + 2, y + 4 * self.unit), (x0 + width - 2, y + 4 * self.unit)], fill=PRINT_INK,
                           width=max(1, round(1.5 * self.unit)))
        else:
            _draw_print(self.draw, x0, y, "（", self.size)
            _draw_print(self.draw, x0 + width - self.size, y, "）", self.size)
        slot = Box(x0, y - self.style.size * 1.1, x0 + width, y + 6 * self.unit)
        self._answer(mark_id, part, is_right, blank, slot, x0, y, width)
        self.x = x0 + width + 6 * self.unit

    def work_area(self, mark_id: str, part: Part, is_right: bool, blank: bool) -> None:
        """A blank area under the question where problem-solving work is written."""
        self.newline(0.6)
        height = self.style.size * (1.5 * part.lines + 0.6)
        area = Box(self.indent, self.y - self.line_h * 0.6, self.w - 10 * self.unit,
                   self.y - self.line_h * 0.6 + height)
        self._answer(mark_id, part, is_right, blank, area, area.x1, area.y2, area.width)
        self.y = area.y2 + self.line_h * 0.2
        self.x = self.indent

    def chart(self, chart: Chart) -> None:
        self.newline(0.4)
        cw, ch = min(self.w * 0.75, 520 * self.unit), 230 * self.unit
        x0, y0 = self.indent + 20 * self.unit, self.y - self.line_h * 0.4
        if chart.kind == "bars":
            _draw_bars(self.draw, Box(x0, y0, x0 + cw, y0 + ch), chart, round(self.size * 0.8), self.unit)
        else:
            _draw_triangle(self.draw, Box(x0, y0, x0 + cw * 0.7, y0 + ch), chart, round(self.size * 0.9), self.unit)
        self.y = y0 + ch + self.line_h * 0.8
        self.x = self.indent

    def used_height(self) -> int:
        return round(self.y + self.line_h * 0.35)


def _draw_bars(draw: ImageDraw.ImageDraw, area: Box, chart: Chart, size: int, unit: float) -> None:
    left, bottom = area.x1 + 40 * unit, area.y2 - 30 * unit
    top = area.y1 + 30 * unit
    draw.line([(left, top), (left, bottom), (area.x2, bottom)], fill=PRINT_INK, width=max(1, round(2 * unit)))
    vmax = max(chart.values) * 1.15
    n = len(chart.values)
    slot = (area.x2 - left) / n
    for i, (lab, v) in enumerate(zip(chart.labels, chart.values, strict=True)):
        bx = left + slot * i + slot * 0.25
        by = bottom - (bottom - top) * v / vmax
        draw.rectangle([bx, by, bx + slot * 0.5, bottom], outline=PRINT_INK, fill=(200, 200, 205))
        _draw_print(draw, bx, by - 4 * unit, f"{v:g}", size)
        _draw_print(draw, bx, bottom + size + 4 * unit, lab, size)
    _draw_print(draw, left + 10 * unit, area.y1 + size, chart.title, size)


def _draw_triangle(draw: ImageDraw.ImageDraw, area: Box, chart: Chart, size: int, unit: float) -> None:
    a = (area.x1 + 20 * unit, area.y2 - 20 * unit)
    b = (area.x2 - 20 * unit, area.y2 - 20 * unit)
    c = (area.x1 + area.width * 0.4, area.y1 + 20 * unit)
    draw.polygon([a, b, c], outline=PRINT_INK, width=max(1, round(2 * unit)))
    _draw_print(draw, a[0] - size, a[1] + size * 0.3, chart.labels[0], size)
    _draw_print(draw, b[0] + 4 * unit, b[1] + size * 0.3, chart.labels[1], size)
    _draw_print(draw, c[0] - size * 0.3, c[1] - 6 * unit, chart.labels[2], size)
    _draw_print(draw, a[0] + 30 * unit, a[1] - 8 * unit, f"{chart.values[0]:g}°", round(size * 0.8))
    _draw_print(draw, b[0] - 60 * unit, b[1] - 8 * unit, f"{chart.values[1]:g}°", round(size * 0.8))


def draw_question(q: Question, number: int, width: int, unit: float, style: HandStyle, rng: random.Random,
                  first_label: int, wrong_share: float, blank_share: float) -> tuple[_QuestionCanvas, DrawnQuestion]:
    c = _QuestionCanvas(width, unit, style, rng, first_label)
    multi = len(q.parts) > 1

    def outcome(i: int) -> tuple[str, Part, bool, bool]:
        part = q.parts[i]
        blank = rng.random() < blank_share
        return (f"{number}-{i + 1}" if multi else str(number)), part, rng.random() >= wrong_share, blank

    prefix = f"{number}. "
    outcomes = [outcome(i) for i in range(len(q.parts))]
    # A part with no prompt of its own answers in the stem's slot (choice brackets, a blank in the stem).
    stem_slot = next((o for o in outcomes if not o[1].prompt and o[1].qtype != SOLVE), None)
    c.printed(prefix + q.stem, slot_for=stem_slot)
    c.indent = fonts.text_width("print", prefix, c.size)
    if q.options:
        c.newline()
        for opt in q.options:
            w = fonts.text_width("print", opt, c.size) + 40 * unit
            if c.x + w > c.w:
                c.newline()
            _draw_print(c.draw, c.x, c.y, opt, c.size)
            c.x += w
    if q.chart is not None:
        c.chart(q.chart)
    else:
        c.newline()
    inline = [o for o in outcomes if o is not stem_slot and o[1].qtype != SOLVE]
    for k, o in enumerate(inline):
        text = (f"({k + 1}) " if multi else "") + o[1].prompt
        if "____" not in text:
            text += " ____"
        w = fonts.text_width("print", text, c.size) + c._slot_width(o[1], "____") + 50 * unit
        if c.x > c.indent and c.x + w > c.w:
            c.newline()
        c.printed(text, slot_for=o)
        c.x += 40 * unit
    solve = [o for o in outcomes if o[1].qtype == SOLVE]
    if inline and solve:
        c.newline()
    for o in solve:
        c.work_area(*o)
    height = c.used_height()
    c.img = c.img.crop((0, 0, width, height))
    c.labels = c.labels.crop((0, 0, width, height))
    return c, DrawnQuestion(number, q, Box(0, 0, width, height), c.answers)


def _offset(b: Box, dx: float, dy: float) -> Box:
    return Box(b.x1 + dx, b.y1 + dy, b.x2 + dx, b.y2 + dy)


def tight_box(img: Image.Image) -> tuple[int, int, int, int] | None:
    """Bounding box of the non-white pixels of a strip."""
    arr = np.asarray(img.convert("L")) < 200
    rows, cols = np.flatnonzero(arr.any(axis=1)), np.flatnonzero(arr.any(axis=0))
    if rows.size == 0:
        return None
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


def render_clean_page(rng: random.Random, subject: str, stage: str, questions: list[Question],
                      size: tuple[int, int], columns: int, wrong_share: float, blank_share: float,
                      ink_visible: bool = True, scale: float = 1.0) -> CleanPage:
    """Place questions section by section, column by column, until the page is full; `scale` draws print and
    handwriting that much larger against the page."""
    w, h = size
    page_unit = w / BASE_WIDTH  # the header and margins keep the page's own size
    unit = page_unit * scale
    page = Image.new("RGB", size, (255, 255, 255))
    labels = Image.new("L", size, 0)
    draw = ImageDraw.Draw(page)
    style = HandStyle.random(rng, unit)
    style.visible = ink_visible
    margin, gap = round(70 * page_unit), round(50 * page_unit)
    zh = subject != "English"
    grade = rng.choice(GRADES[stage])
    title = f"{grade}{EXAM_TITLES[subject]}{rng.choice(TITLE_SUFFIXES)}"
    tsize = round(40 * page_unit)
    _draw_print(draw, (w - fonts.text_width("print", title, tsize)) / 2, margin + tsize, title, tsize)
    info = INFO_LINE
    isize = round(24 * page_unit)
    _draw_print(draw, (w - fonts.text_width("print", info, isize)) / 2, margin + tsize + 60 * page_unit, info, isize)
    top = round(margin + tsize + 100 * page_unit)
    col_w = (w - 2 * margin - gap * (columns - 1)) // columns
    col, y = 0, top
    placed: list[DrawnQuestion] = []
    section, n_sections = None, 0
    for q in questions:
        qtype = q.parts[0].qtype
        number = len(placed) + 1
        canvas, drawn = draw_question(q, number, col_w, unit, style, rng,
                                      first_label=1 + sum(len(p.answers) for p in placed),
                                      wrong_share=wrong_share, blank_share=blank_share)
        header_h = round(52 * unit) if qtype != section else 0
        if y + header_h + canvas.img.height > h - margin:
            if col + 1 >= columns:
                continue  # the last column is full for this one; a shorter question may still fit
            col += 1
            y = top
        x = margin + col * (col_w + gap)
        if qtype != section:
            section = qtype
            name = SECTION_TITLES[zh][qtype]
            head = f"{_CJK_NUMERALS[n_sections]}、{name}" if zh else f"{_ROMAN[n_sections]}. {name}"
            n_sections += 1
            _draw_print(draw, x, y + round(36 * unit), head, round(27 * unit))
            y += header_h
        page.paste(canvas.img, (x, y))
        labels.paste(canvas.labels, (x, y))
        tb = tight_box(canvas.img) or (0, 0, col_w, canvas.img.height)
        for a in drawn.answers:
            a.slot = _offset(a.slot, x, y)
        # the question region holds its printed text, ink and answer slots (a blank one has no ink)
        drawn.box = Box.enclosing([Box(x + tb[0], y + tb[1], x + tb[2], y + tb[3]), *(a.slot for a in drawn.answers)])
        placed.append(drawn)
        y += canvas.img.height
    return CleanPage(page, labels, placed)


def question_mix(rng: random.Random, n: int, types: tuple[str, ...] = QUESTION_TYPES) -> list[str]:
    """Question types for a page, in section order, with every one of `types` likely present."""
    weights = {t: w for t, w in {FILL: 4, CHOICE: 2, TF: 2, SOLVE: 1.2}.items() if t in types}
    types = rng.choices(list(weights), weights=list(weights.values()), k=n)
    order = [FILL, CHOICE, TF, SOLVE]
    return sorted(types, key=order.index)

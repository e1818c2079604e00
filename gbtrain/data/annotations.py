"""Read, validate and write the GradingBench on-disk layout.

    DATA/images/L1|L2|L3/<Subject>/<file>.jpg
    DATA/annotations/L1.json ...       a JSON list of records, or {"samples": [...]}
    DATA/manifest/summary.json         counts per level and subject (written, never trusted)

Every problem names the annotation file and the record id. Strict mode (the default) raises one
``AnnotationError`` listing all problems; lenient mode skips bad records and returns them, counted.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePosixPath

from PIL import Image

from gbtrain.config import load_config
from gbtrain.coords import aspect_problem
from gbtrain.schema import (
    CONTENT_FORMAT_ALIASES,
    CONTENT_FORMATS,
    LABEL_WORDS,
    LABELS,
    QUESTION_TYPE_ALIASES,
    QUESTION_TYPES,
    STAGE_ALIASES,
    UNANSWERED,
    UNKNOWN,
    Group,
    Mark,
    Record,
)
from gbtrain.text import brief
from gbtrain.values import alias_lookup
from gbtrain.vocabulary import L1, L2, L3, LEVELS

# Keys as they appear in the data: English first, then the Chinese spelling (纬度 is the data's typo).
_STAGE_KEYS = ("educational_stage", "学段")
_FORMAT_KEYS = ("dimension1", "纬度1")
_TYPE_KEYS = ("dimension2", "纬度2")
_QUESTION_ID_KEYS = ("question_id", "题目id")
_ANNO_RESULT_KEYS = ("anno_result", "拉框结果")  # the annotation tool's own right/wrong; unused, as by the benchmark
POINT_NUMBERS = ("full_score", "score", "score_2")  # points: the question's, the teacher's, a second teacher's
POINT_TEXTS = ("rubric", "rubric_version", "comment", "arbitration")
_KNOWN_ATTRS = {"id", "std", "hand", *_FORMAT_KEYS, *_TYPE_KEYS, *_QUESTION_ID_KEYS, *_ANNO_RESULT_KEYS,
                *POINT_NUMBERS, *POINT_TEXTS}
_KNOWN_MARK_KEYS = {"bbox_2d", "markLabel", "attributes", *_STAGE_KEYS}
_KNOWN_RECORD_KEYS = {"id", "subject", "level", "image", "width", "height", "marks", "page_id"}
ALIASES_FILE = "aliases.yaml"  # DATA/annotations/aliases.yaml: the user's own spellings of labels and categories

BOX_TOLERANCE_FRACTION = 0.02  # boxes may overshoot the image by 2% of its size (annotation slop)


@dataclass(frozen=True)
class Problem:
    file: str
    record_id: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}" + (f" [record {self.record_id}]" if self.record_id is not None else "")
        return f"{where}: {self.message}"


class AnnotationError(ValueError):
    """Bad annotation data; ``problems`` lists every one found, each naming file and record."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        if len(problems) == 1:  # the common case (one value, one key, one file) is one line
            super().__init__(str(problems[0]))
            return
        shown = "\n  ".join(str(p) for p in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"{len(problems)} annotation problems:\n  {shown}{more}")


@dataclass
class Aliases:
    """DATA/annotations/aliases.yaml: your spellings -> gbtrain's names, added to the benchmark's own, e.g.
    `labels: {correct: right, partial: half_right}`. It lives with the annotations (and is hashed with them), so
    every tool that reads the folder reads the same meanings."""

    labels: dict[str, str] = field(default_factory=dict)  # markLabel -> right / wrong / half_right / ...
    stages: dict[str, str] = field(default_factory=dict)  # educational_stage -> Elementary / Junior_High / ...
    question_types: dict[str, str] = field(default_factory=dict)  # dimension2 -> Fill-in-the-blank / ...
    content_formats: dict[str, str] = field(default_factory=dict)  # dimension1 -> Text-only / Chart-based / Other


@dataclass(frozen=True)
class _Vocabulary:
    """One annotated field's known values: the benchmark's aliases plus the user's, what lenient mode takes an
    unknown value as, and the aliases.yaml section that maps it."""

    name: str  # the key as the data spells it
    aliases: dict[str, str]
    fallback: str | None
    section: str

    def lookup(self, raw: str) -> str | None:
        return alias_lookup(self.aliases, raw)


def _vocabularies(data_dir: Path) -> dict[str, _Vocabulary]:
    path = Path(data_dir) / "annotations" / ALIASES_FILE
    user = load_config(Aliases, path) if path.is_file() else Aliases()
    allowed = {"labels": LABELS, "stages": tuple(sorted(set(STAGE_ALIASES.values()))),
               "question_types": QUESTION_TYPES, "content_formats": CONTENT_FORMATS}
    bad = [f"{section}.{k}: {v!r} is not one of {', '.join(allowed[section])}"
           for section in allowed for k, v in getattr(user, section).items() if v not in allowed[section]]
    builtin = {"labels": LABEL_WORDS, "stages": STAGE_ALIASES, "question_types": QUESTION_TYPE_ALIASES,
               "content_formats": CONTENT_FORMAT_ALIASES}
    # the benchmark's own words keep their meaning: `labels: {right: wrong}` would turn every verdict round
    bad += [f"{section}.{k}: {k!r} already names {alias_lookup(builtin[section], k)!r}; map only your own words"
            for section in builtin for k, v in getattr(user, section).items()
            if alias_lookup(builtin[section], k) not in (None, v)]
    if bad:
        raise AnnotationError([Problem(str(path), None, "; ".join(bad))])
    return {
        "label": _Vocabulary("markLabel", {**LABEL_WORDS, **user.labels}, UNKNOWN, "labels"),
        "stage": _Vocabulary("educational_stage", {**STAGE_ALIASES, **user.stages}, None, "stages"),
        "type": _Vocabulary("dimension2", {**QUESTION_TYPE_ALIASES, **user.question_types}, "Other", "question_types"),
        "format": _Vocabulary("dimension1", {**CONTENT_FORMAT_ALIASES, **user.content_formats}, "Other",
                              "content_formats"),
    }


@dataclass
class _Reading:
    """What reading one level met beside its records: unknown values (by field and value) and keys outside the
    format, with the first record of each, so that many marks of one kind make one line."""

    vocabularies: dict[str, _Vocabulary]
    unknown: Counter = field(default_factory=Counter)  # (field name, raw value) -> marks
    unknown_keys: Counter = field(default_factory=Counter)  # (where, key) -> records or marks
    first: dict = field(default_factory=dict)  # either key -> the first record id
    record_id: str = ""

    def value(self, kind: str, raw) -> str | None:
        """The normalised value of a field (None when not annotated); an unknown one is counted and takes its
        fallback, which lenient mode keeps and strict mode refuses once the file is read."""
        if raw is None or str(raw).strip() == "":
            return None
        found = self.vocabularies[kind].lookup(str(raw).strip())
        if found is None:
            self.unknown[(kind, str(raw))] += 1
            self.first.setdefault((kind, str(raw)), self.record_id)
            return self.vocabularies[kind].fallback
        return found

    def keys(self, where: str, raw: dict, known: set[str]) -> dict:
        """The keys of `raw` outside the format (a misspelling such as page_Id), counted; kept as extra fields."""
        extra = {k: v for k, v in raw.items() if k not in known}
        for k in extra:
            self.unknown_keys[(where, k)] += 1
            self.first.setdefault((where, k), self.record_id)
        return extra

    def counts(self) -> dict[str, int]:
        """`markLabel 'correct' -> unknown`: marks per unknown value and what lenient mode took it as."""
        out = {}
        for (kind, raw), n in sorted(self.unknown.items()):
            vocab = self.vocabularies[kind]
            out[f"{vocab.name} {raw!r} -> {vocab.fallback or 'Unknown'}"] = n
        out.update({f"{where} key {key!r} kept as extra": n for (where, key), n in sorted(self.unknown_keys.items())})
        return out

    def problems(self, fname: str, lenient: bool) -> list[Problem]:
        """One line per unknown value or key, naming its first record and the way out (strict), or what lenient
        mode did with it."""
        lines = []
        for (kind, raw), n in sorted(self.unknown.items()):
            vocab = self.vocabularies[kind]
            fallback = vocab.fallback or "Unknown"
            message = (f"unknown {vocab.name} {raw!r} on {n} mark(s), taken as {fallback!r} (--lenient)" if lenient
                       else f"unknown {vocab.name} {raw!r} on {n} mark(s): map it in annotations/{ALIASES_FILE} "
                            f"({vocab.section}: {{{raw}: ...}}) or pass --lenient to take it as {fallback!r}")
            lines.append(Problem(fname, self.first[(kind, raw)], message))
        for (where, key), n in sorted(self.unknown_keys.items()):
            known = {"record": _KNOWN_RECORD_KEYS, "mark": _KNOWN_MARK_KEYS}.get(where, _KNOWN_ATTRS)
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            message = (f"unknown {where} key {key!r} on {n} {where}(s), kept as an extra field (--lenient)" if lenient
                       else f"unknown {where} key {key!r}{hint} on {n} {where}(s): rename it, or pass --lenient to "
                            f"keep it as an extra field")
            lines.append(Problem(fname, self.first[(where, key)], message))
        return lines


@dataclass
class LoadedLevel:
    level: str
    records: list[Record]
    skipped: list[Problem] = field(default_factory=list)  # lenient mode: records left out, with why
    warnings: list[Problem] = field(default_factory=list)  # lenient mode: unknown values and keys, counted
    unknown_values: dict[str, int] = field(default_factory=dict)  # "markLabel 'correct' -> unknown": marks
    pages_from_names: set[str] = field(default_factory=set)  # L1 records whose page came from their image name


def annotation_path(data_dir: str | Path, level: str) -> Path:
    return Path(data_dir) / "annotations" / f"{level}.json"


def image_root(data_dir: str | Path, level: str) -> Path:
    return Path(data_dir) / "images" / level


def image_path(data_dir: str | Path, record: Record) -> Path:
    return image_root(data_dir, record.level) / record.image


def annotations_sha256(data_dir: str | Path) -> str:
    """A short hash of a data folder's annotation files and aliases (names and bytes): what evaluation and
    selection folders record, so work made on other annotations (or other meanings of them) is refused rather than
    mixed."""
    digest = hashlib.sha256()
    folder = Path(data_dir) / "annotations"
    aliases = [folder / ALIASES_FILE] if (folder / ALIASES_FILE).is_file() else []
    for path in [*sorted(folder.glob("*.json")), *aliases]:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def available_levels(data_dir: str | Path) -> list[str]:
    return [lvl for lvl in LEVELS if annotation_path(data_dir, lvl).exists()]


def _first(d: dict, keys: tuple[str, ...]):
    for k in keys:
        if k in d:
            return d[k]
    return None


def _parse_points(raw, where: str) -> list[tuple[float, float]]:
    """A polygon [[x, y], ...] or a flat [x1, y1, x2, y2] (stored as its two corners)."""
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: bbox_2d must be a non-empty list, got {raw!r}")
    try:
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in raw):
            if len(raw) != 4:
                raise ValueError(f"{where}: a flat bbox_2d needs 4 numbers, got {len(raw)}")
            pts = [(float(raw[0]), float(raw[1])), (float(raw[2]), float(raw[3]))]
        else:
            pts = []
            for p in raw:
                if not (isinstance(p, list | tuple) and len(p) == 2
                        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in p)):
                    raise ValueError(f"{where}: bbox_2d point must be [x, y], got {_short(p)}")
                pts.append((float(p[0]), float(p[1])))
    except OverflowError:  # an integer beyond a float's range
        pts = [(math.inf, math.inf)]
    if not all(math.isfinite(v) for pt in pts for v in pt):
        raise ValueError(f"{where}: bbox_2d has a non-finite coordinate: {_short(raw)}")
    return pts


def _short(value) -> str:
    """A value of the data as a message shows it: its repr, cut (a corner of 401 digits is not read out)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _unicode(text: str, key: str) -> str:
    """Text that UTF-8 can write: a lone surrogate (an escaped \\ud800 in the JSON) would fail every file it
    reaches later (predictions, the SFT set, reports)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{key} {brief(text, 60)} is not valid Unicode text (a lone surrogate)") from None
    return text


def _text(value, key: str) -> str | None:
    """A text field; a number is taken as its text (a transcription "12" may be stored as 12)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{key} must be text or a number, got {type(value).__name__} {brief(value, 60)}")
    return _unicode(value, key) if isinstance(value, str) else str(value)


def _points(value, key: str) -> float | None:
    """A number of points as annotated (an integer stays one, so the file round-trips); None when absent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number of points, got {type(value).__name__} {brief(value, 60)}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer beyond a float's range
        finite = False
    if not finite:
        raise ValueError(f"{key} must be a finite number of points, got {value!s:.60}")
    return value


def blank_answer_problem(hand: str | None, label: str) -> str | None:
    """What is wrong with an answer mark's transcription, or None: an answer with no transcription must have the
    verdict unanswered (a blank answer). The one rule: the converters and the review import both apply it; each
    names where the transcription was before the rule."""
    if (hand is None or not hand.strip()) and label != UNANSWERED:
        return "an answer left blank has the verdict unanswered"
    return None


def points_problem(full: float | None, score: float | None, second: float | None) -> str | None:
    """What is wrong with one answer's points, or None: full_score > 0, score and full_score both or neither
    (score_2 only beside them), each score within 0..full_score. The one rule: the reader and the converters
    both apply it."""
    if full is None and score is None and second is None:
        return None
    if full is None:
        given = "score" if score is not None else "score_2"
        return f"{given} without full_score: add full_score (the question's points)"
    if full <= 0:
        return f"full_score {full!r} must be above 0"
    if score is None:
        return (f"full_score {full!r} without the teacher's score: add score (0..{full!r}), or drop full_score to "
                f"grade it right/wrong only")
    for key, value in (("score", score), ("score_2", second)):
        if value is not None and not 0 <= value <= full:
            return f"{key} {value!r} is outside 0..{full!r} (its full_score)"
    return None


def _check_points(group: Group) -> None:
    """A group's points: the same on each of its marks that gives them (marks that disagree raise here), and
    points_problem's rule."""
    problem = points_problem(group.full_score, group.score, group.score_2)
    if problem:
        raise ValueError(f"group {group.group_id}: {problem}")


def _parse_mark(raw: dict, index: int, reading: _Reading) -> Mark:
    where = f"mark {index}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object, got {type(raw).__name__}")
    if "bbox_2d" not in raw:
        raise ValueError(f"{where}: missing bbox_2d")
    points = _parse_points(raw["bbox_2d"], where)
    raw_label = str(raw.get("markLabel", ""))
    if not raw_label.strip():
        raise ValueError(f"{where}: missing markLabel (right, wrong, question, ... or 正确 / 错误 / 整题)")
    label = reading.value("label", raw_label)
    attrs = raw.get("attributes") or {}
    if not isinstance(attrs, dict):
        raise ValueError(f"{where}: attributes must be an object")
    question_type = reading.value("type", _first(attrs, _TYPE_KEYS))
    content_format = reading.value("format", _first(attrs, _FORMAT_KEYS))
    qid = _first(attrs, _QUESTION_ID_KEYS)
    return Mark(
        points=points,
        label=label,
        raw_label=raw_label,
        mark_id=(_text(attrs.get("id"), f"{where} attributes.id") or "").strip(),
        hand=_text(attrs.get("hand"), f"{where} attributes.hand") or "",
        std=_text(attrs.get("std"), f"{where} attributes.std"),
        question_type=question_type or "Other",
        content_format=content_format or "Other",
        stage=reading.value("stage", _first(raw, _STAGE_KEYS)),
        question_id=_text(qid, f"{where} question id"),
        **{key: _points(attrs.get(key), f"{where} attributes.{key}") for key in POINT_NUMBERS},
        **{key: _text(attrs.get(key), f"{where} attributes.{key}") for key in POINT_TEXTS},
        extra_attributes=reading.keys("mark attribute", attrs, _KNOWN_ATTRS),  # a misspelt "scroe" is not lost
        extra=reading.keys("mark", raw, _KNOWN_MARK_KEYS),
    )


def _check_image_path(rel: str) -> None:
    p = PurePosixPath(rel.replace("\\", "/"))
    if not p.parts or p.is_absolute() or ".." in p.parts or rel.startswith(("/", "\\")) or ":" in p.parts[0]:
        raise ValueError(f"image path {rel!r} must be relative to the level's image folder, without '..'")


def _crop_page(image: str) -> str:
    """The page an L1 crop without page_id was cut from, by the benchmark's naming (`<page>_<k>`, as its L2 ids);
    a crop that does not follow it is refused. The split is by page: a crop hashed apart from its page would put
    test pages' questions into training."""
    stem = image.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    page = stem.rsplit("_", 1)[0] if "_" in stem else ""
    if not page:
        raise ValueError(f"an L1 crop needs page_id (the page it was cut from; its image name {image!r} does not "
                         f"follow the benchmark's <page>_<k> naming), so that a page's crops stay in one split")
    return page


def parse_record(raw: dict, level: str, reading: _Reading) -> Record:
    """Normalise one raw record; raises ValueError with what is wrong (the caller adds file and id)."""
    for key in ("id", "image", "width", "height", "marks"):
        if key not in raw:
            raise ValueError(f"missing key {key!r}")
    rid = raw["id"]
    if isinstance(rid, bool) or not isinstance(rid, str | int) or not str(rid).strip():
        raise ValueError(f"id must be a non-empty string or an integer, got {brief(rid, 60)}")
    _unicode(str(rid), "id")
    rel = _unicode(str(raw["image"]), "image")
    _check_image_path(rel)
    width, height = raw["width"], raw["height"]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (width, height)):
        raise ValueError(f"width/height must be positive integers, got {width!r}x{height!r}")
    aspect = aspect_problem(width, height)
    if aspect:
        raise ValueError(aspect)
    if not isinstance(raw["marks"], list):
        raise ValueError("marks must be a list")
    marks = [_parse_mark(m, i, reading) for i, m in enumerate(raw["marks"])]
    tol_x, tol_y = BOX_TOLERANCE_FRACTION * width, BOX_TOLERANCE_FRACTION * height
    for i, m in enumerate(marks):
        b = m.box
        if b.x1 < -tol_x or b.y1 < -tol_y or b.x2 > width + tol_x or b.y2 > height + tol_y:
            raise ValueError(f"mark {i} ({m.mark_id or m.raw_label}): box {b.as_list()} lies outside the "
                             f"{width}x{height} image")
        if not m.is_context and not m.mark_id:
            raise ValueError(f"mark {i}: answer mark without attributes.id (on a page that prints no question "
                             f"numbers, number its answers by position: #1, #2, ... in reading order)")
        if m.is_context and any(getattr(m, key) is not None for key in (*POINT_NUMBERS, *POINT_TEXTS)):
            raise ValueError(f"mark {i}: points on a question mark, which is not graded: put full_score, score and "
                             f"the rest on its answer marks")
    subject = str(raw.get("subject") or rel.split("/", 1)[0])
    raw_level = raw.get("level")
    if raw_level is not None and str(raw_level) != level:
        raise ValueError(f"record level {raw_level!r} found in the {level} annotation file")
    record = Record(
        record_id=str(raw["id"]), level=level, subject=subject, image=rel, width=width, height=height,
        marks=marks, page=_text(raw.get("page_id"), "page_id"),
        extra=reading.keys("record", raw, _KNOWN_RECORD_KEYS),
    )
    for group in record.groups:
        _check_points(group)
    if level == L2 and not record.context_regions and not record.groups:
        raise ValueError("an L2 record needs a question mark (the region to grade) or answer marks to derive it from")
    return record


def _jpeg_complete(path: Path) -> bool:
    """A JPEG cut short (an interrupted copy or download) lacks its end-of-image marker near the end."""
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - 64))
        return b"\xff\xd9" in f.read()


@lru_cache(maxsize=4096)
def _image_size(path: Path, version: tuple[int, int]) -> tuple[int, int]:
    """(width, height) of an image file whose data is proven whole: a JPEG decoded at 1/8 scale (which still reads
    every compressed byte, so a broken stream fails here and not in the middle of an evaluation or a training
    run), a PNG by its chunk checksums. Cached per file version: the L2 records of a page share its file."""
    with Image.open(path) as im:
        size = im.size
        if im.format == "PNG":  # its chunk checksums, then its pixels: a header over missing data passes verify()
            im.verify()
            with Image.open(path) as again:
                again.load()
        elif im.format == "JPEG":
            if not _jpeg_complete(path):
                raise ValueError(f"image {path} is truncated (no JPEG end marker)")
            im.draft(im.mode, (max(1, size[0] // 8), max(1, size[1] // 8)))
            im.load()
    return size


@lru_cache(maxsize=4096)
def _header_size(path: Path, version: tuple[int, int]) -> tuple[int, int]:
    """(width, height) as the image file's header says, its data not read (the scorer reads no pixel). Cached per
    file version, as _image_size."""
    with Image.open(path) as im:
        return im.size


def _check_image_file(data_dir: Path, record: Record, whole: bool = True) -> None:
    path = image_path(data_dir, record)
    root = image_root(data_dir, record.level).resolve()
    if not path.resolve().is_relative_to(root):
        raise ValueError(f"image path {record.image!r} leaves {root}")
    if not path.is_file():
        raise ValueError(f"image file not found: {path}")
    stat = path.stat()
    try:
        size = (_image_size if whole else _header_size)(path, (stat.st_mtime_ns, stat.st_size))
    except (OSError, SyntaxError, Image.DecompressionBombError) as e:
        raise ValueError(f"cannot read image {path}: {e}") from None
    if size != (record.width, record.height):
        raise ValueError(f"image {path} is {size[0]}x{size[1]}, annotation says {record.width}x{record.height}")


def load_level(data_dir: str | Path, level: str, *, lenient: bool = False, check_images: bool = True,
               whole_images: bool = True) -> LoadedLevel:
    """Load and validate one level. Strict: raise AnnotationError on any problem. Lenient: skip, count, list.
    `whole_images`: each image's data is proven whole (decoded); else only its header's size is checked against
    the annotation (for the scorer, which reads no pixel: checking 300 pages by their header took a 3,300-group
    scoring run from 2.70 s to 1.28 s, scripts/bench_score.py)."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"data directory not found: {data_dir}")
    path = annotation_path(data_dir, level)
    fname = str(path)
    if not path.is_file():
        raise AnnotationError([Problem(fname, None, "annotation file not found")])
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as e:  # also bytes not UTF-8, nesting or digits past Python's limits
        raise AnnotationError([Problem(fname, None, f"malformed JSON: {str(e)[:200]}")]) from None
    raw_records = doc.get("samples") if isinstance(doc, dict) else doc
    if not isinstance(raw_records, list):
        raise AnnotationError([Problem(fname, None, "expected a list of records or {'samples': [...]}")])

    out = LoadedLevel(level=level, records=[])
    reading = _Reading(_vocabularies(data_dir))
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(raw_records):
        rid = str(raw.get("id")) if isinstance(raw, dict) and "id" in raw else f"#{index}"
        rid = rid.encode("utf-8", "backslashreplace").decode()  # printable in messages and the card
        reading.record_id = rid
        try:
            if not isinstance(raw, dict):
                raise ValueError(f"record {index} is not an object")
            if rid in seen:
                raise ValueError(f"duplicate record id (first at position {seen[rid]}, again at {index})")
            seen[rid] = index
            record = parse_record(raw, level, reading)
            if record.page is not None and not record.page.strip():
                raise ValueError(f"page_id {record.page!r} is blank: name the page the record was cut from, or leave "
                                 f"page_id out (an L1 crop's then comes from its image name)")
            if level == L1 and record.page is None:
                record.page = _crop_page(record.image)
                out.pages_from_names.add(record.record_id)
            if check_images:
                _check_image_file(data_dir, record, whole_images)
        except ValueError as e:
            problems.append(Problem(fname, rid, str(e)))
            continue
        out.records.append(record)
    if not lenient:
        problems += reading.problems(fname, lenient=False)
        if problems:
            raise AnnotationError(problems)
    out.warnings = reading.problems(fname, lenient=True)
    out.unknown_values = reading.counts()
    out.skipped = problems
    return out


def load_dataset(data_dir: str | Path, levels: tuple[str, ...] | list[str] | None = None, *,
                 lenient: bool = False, check_images: bool = True) -> dict[str, LoadedLevel]:
    """Load the given levels (default: every level that has an annotation file)."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"data directory not found: {data_dir}")
    levels = list(levels) if levels else available_levels(data_dir)
    if not levels:
        raise AnnotationError([Problem(str(data_dir / "annotations"), None, "no L1/L2/L3 annotation files")])
    loaded = {lvl: load_level(data_dir, lvl, lenient=lenient, check_images=check_images) for lvl in levels}
    _check_crop_pages(data_dir, loaded, lenient)
    return loaded


def _check_crop_pages(data_dir: Path, loaded: dict[str, LoadedLevel], lenient: bool) -> None:
    """An L1 crop must name a page of the L2/L3 files, when there are any, whether by page_id (a misspelt one would
    split the page's crops from it) or by its image name (else the naming is not the benchmark's and the split would
    guess). Lenient: such crops are skipped, listed."""
    pages = {r.page_id for lvl in (L2, L3) if lvl in loaded for r in loaded[lvl].records}
    if L1 not in loaded or not pages:
        return
    level = loaded[L1]
    stray = [r for r in level.records if r.page not in pages]
    if not stray:
        return
    fname = str(annotation_path(data_dir, L1))

    def why(r: Record) -> str:
        if r.record_id in level.pages_from_names:
            return (f"no page_id, and {r.page!r} (its image name up to the last '_') is no page of the L2/L3 files: "
                    f"add page_id (the page it was cut from), so that a page's crops stay in one split")
        return (f"page_id {r.page!r} is no page of the L2/L3 files: correct it (the page the crop was cut from), so "
                f"that a page's crops stay in one split")

    if not lenient:
        others = f" ({len(stray) - 1} more crops alike)" if len(stray) > 1 else ""
        raise AnnotationError([Problem(fname, stray[0].record_id, why(stray[0]) + others)])
    gone = {r.record_id for r in stray}
    level.records = [r for r in level.records if r.record_id not in gone]
    level.skipped += [Problem(fname, r.record_id, why(r)) for r in stray]


def _mark_to_raw(m: Mark) -> dict:
    attrs: dict = {"id": m.mark_id, "hand": m.hand}
    if m.std is not None:
        attrs["std"] = m.std
    attrs["dimension1"] = m.content_format
    attrs["dimension2"] = m.question_type
    if m.question_id is not None:
        attrs["question_id"] = m.question_id
    attrs.update({key: getattr(m, key) for key in (*POINT_NUMBERS, *POINT_TEXTS) if getattr(m, key) is not None})
    attrs.update(m.extra_attributes)
    raw: dict = {"bbox_2d": [[x, y] for x, y in m.points], "markLabel": m.raw_label, "attributes": attrs}
    if m.stage is not None:
        raw["educational_stage"] = m.stage
    raw.update(m.extra)
    return raw


def record_to_raw(r: Record) -> dict:
    raw = {"id": r.record_id, "subject": r.subject, "level": r.level, "image": r.image,
           "width": r.width, "height": r.height, "marks": [_mark_to_raw(m) for m in r.marks]}
    if r.page is not None:
        raw["page_id"] = r.page
    raw.update(r.extra)
    return raw


def write_level(data_dir: str | Path, level: str, records: list[Record]) -> Path:
    """Write annotations/<level>.json (a record list, UTF-8, stable key order)."""
    path = annotation_path(data_dir, level)
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = Counter(r.record_id for r in records)
    dup = [i for i, n in ids.items() if n > 1]
    if dup:
        raise ValueError(f"refusing to write {path}: duplicate record ids {dup[:10]}")
    path.write_text(json.dumps([record_to_raw(r) for r in records], ensure_ascii=False, indent=1) + "\n",
                    encoding="utf-8")
    return path


def write_manifest(data_dir: str | Path, records_by_level: dict[str, list[Record]]) -> Path:
    """Counts per level and subject, plus answer-group counts; written for people, never read back."""
    summary = {}
    for level, records in sorted(records_by_level.items()):
        summary[level] = {
            "records": len(records),
            "groups": sum(len(r.groups) for r in records),
            "by_subject": dict(sorted(Counter(r.subject for r in records).items())),
        }
    path = Path(data_dir) / "manifest" / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path

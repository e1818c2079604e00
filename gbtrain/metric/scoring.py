"""The GradingBench gated metric and localization mAP, defined exactly (docs/metric.md#the-metric).

Per answer group: (3) spatial correspondence by centre distance within a radius, one item per group;
(4) transcription gate, CER < 0.7; (5) answer-free only: the derived answer equals the reference
(rule or LLM judge); (6) the model's right/wrong judgment equals the expert label. Accuracy is the
share of ALL annotated groups of the level passing every gate; nothing missing is dropped from the
denominator. mAP@[0.2:0.5] is computed separately by one-to-one IoU matching.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from functools import cached_property
from pathlib import Path

from rapidfuzz.distance import Levenshtein

from gbtrain.config import option
from gbtrain.coords import CONVENTIONS, PixelBudget, from_model
from gbtrain.data.annotations import annotation_path, load_level
from gbtrain.data.held_out import SplitFlags, resolve_held_out
from gbtrain.files import read_json, write_table
from gbtrain.inference.base import VLLMMemory
from gbtrain.metric import answers, confidence, intervals, judges, parsing, points, selective, text_scores
from gbtrain.metric.intervals import IntervalFlags, IntervalOptions, PageOutcomes
from gbtrain.metric.points import PointsFlags, PointsOptions, verdict_errors
from gbtrain.metric.text_scores import normalize_text
from gbtrain.outputs import claim_output_files, require_out
from gbtrain.schema import RIGHT, WRONG, Box, Group, Mark, Record, printed_id
from gbtrain.values import question_id_key
from gbtrain.vocabulary import ANSWER_FREE, LEVELS, MODES

IOU_THRESHOLDS = (0.20, 0.25, 0.30, 0.35, 0.40, 0.45, 0.50)
CER_THRESHOLD = 0.7
BREAKDOWN_KEYS = ("subject", "stage", "question_type", "content_format")
_ROUND = 6


@dataclass(frozen=True)
class ScoreOptions:
    level: str
    mode: str  # answer-free | answer-based
    coords: str
    budget: PixelBudget = PixelBudget()
    match_radius: float = 1.0
    exclude_other: bool = False  # drop groups labelled other than right/wrong from the denominator
    allow_duplicates: bool = False
    judge: str = "rule"
    points_options: PointsOptions = PointsOptions()  # bands and the large-error threshold
    intervals: IntervalOptions = IntervalOptions()  # the bootstrap's resamples and seed
    answer_tolerance: float = float(answers.DEFAULT_REL_TOL)  # numbers: the relative difference still equal
    rule_first: bool = True  # an LLM judge is asked only what the typed rule cannot decide (False: every answer)
    ignore_missing: bool = False  # score only the records answered with items (the report's header says so)

    def __post_init__(self):
        if self.level not in LEVELS or self.mode not in MODES:
            raise ValueError(f"level {self.level!r} / mode {self.mode!r}: choose L1-L3 and answer-free/answer-based")
        if not (math.isfinite(self.match_radius) and self.match_radius > 0):
            raise ValueError(f"match radius {self.match_radius!r}: must be a positive number")
        if not (isinstance(self.answer_tolerance, int | float) and 0 <= self.answer_tolerance < 1):  # NaN too
            raise ValueError(f"--answer-tolerance {self.answer_tolerance!r}: give a relative difference from 0 "
                             f"(exact) to below 1, e.g. 0.05")
        from_model([0, 0, 1, 1], 1, 1, self.coords, self.budget)  # raises on an unknown convention


class PredictionsError(ValueError):
    """Bad prediction file (malformed line, missing id, duplicate ids without --allow-duplicates)."""


@dataclass
class Predictions:
    responses: dict[str, str]
    duplicates: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # id -> why no reply was generated (the evaluator's)
    turns: dict[str, list[str]] = field(default_factory=dict)  # id -> a three-turn record's raw turns
    logprobs: dict[str, list] = field(default_factory=dict)  # id -> [char offset, logprob] per generated token


def read_predictions(path: str | Path, allow_duplicates: bool = False) -> Predictions:
    """Read P.jsonl ({"id", "response"} per line). Duplicated ids are an error unless allowed (then the
    last line wins and they are listed)."""
    responses: dict[str, str] = {}
    errors: dict[str, str] = {}
    turns: dict[str, list[str]] = {}
    logprobs: dict[str, list] = {}
    dups: list[str] = []
    # A byte that is not UTF-8 (a model's broken output) becomes U+FFFD instead of stopping the read; a BOM
    # (a file saved by a Windows editor) is dropped.
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError) as e:  # also nesting or digits past Python's limits
                raise PredictionsError(f"{path}:{n}: malformed JSON line: {str(e)[:200]}") from None
            if not isinstance(row, dict) or "id" not in row:
                raise PredictionsError(f"{path}:{n}: a prediction line needs an \"id\"")
            if isinstance(row["id"], bool) or not isinstance(row["id"], str | int):
                raise PredictionsError(f"{path}:{n}: \"id\" must be a record id (text or an integer), got "
                                       f"{json.dumps(row['id'])[:60]}")
            rid = str(row["id"])
            if rid in responses:
                dups.append(rid)
            response = row.get("response")
            responses[rid] = response if isinstance(response, str) else ("" if response is None else json.dumps(
                response, ensure_ascii=False))
            if row.get("error"):
                errors[rid] = str(row["error"])[:300]
            if isinstance(row.get("turns"), list):
                turns[rid] = [str(t) for t in row["turns"]]
            if isinstance(row.get("logprobs"), list):  # older lines have none: their items get no confidence
                logprobs[rid] = row["logprobs"]
            else:
                logprobs.pop(rid, None)
    if dups and not allow_duplicates:
        shown = ", ".join(sorted(set(dups))[:20])
        raise PredictionsError(f"{path}: {len(set(dups))} duplicated id(s): {shown} (use --allow-duplicates to keep "
                               f"the last line of each)")
    return Predictions(responses, sorted(set(dups)), errors, turns, logprobs)


def cer(prediction: str, reference: str) -> float:
    """Levenshtein(pred, ref) / max(len(ref), 1) after NFKC, whitespace removal and lowercasing."""
    p, r = normalize_text(prediction), normalize_text(reference)
    return Levenshtein.distance(p, r) / max(len(r), 1)


@dataclass
class ItemBox:
    item: parsing.PredictedItem
    box: Box | None  # original pixels, clipped; None when the item has no valid box


def item_boxes(items: list[parsing.PredictedItem], record: Record, opts: ScoreOptions) -> list[ItemBox]:
    out = []
    for it in items:
        box = None
        try:
            boxes = [from_model(b, record.width, record.height, opts.coords, opts.budget) for b in it.boxes]
        except (ValueError, ZeroDivisionError):
            boxes = []
        if boxes:
            b = Box.enclosing(boxes).clip(record.width, record.height)
            if b.is_finite() and b.width > 0 and b.height > 0:
                box = b
        out.append(ItemBox(it, box))
    return out


def match_by_centre(items: list[ItemBox], group_boxes: list[Box], radius: float) -> dict[int, int]:
    """Step 3: group index -> item index. Items top-down (y1, x1, output order); each takes the nearest
    unmatched group whose centre is within radius x that group's diagonal of its own centre."""
    order = sorted((i for i, ib in enumerate(items) if ib.box is not None),
                   key=lambda i: (items[i].box.y1, items[i].box.x1, i))
    reach = [(gb.center, radius * gb.diagonal) for gb in group_boxes]
    taken: dict[int, int] = {}
    for i in order:
        cx, cy = items[i].box.center
        best, best_d = None, math.inf
        for g_idx, ((gx, gy), limit) in enumerate(reach):
            if g_idx in taken:
                continue
            d = math.hypot(cx - gx, cy - gy)
            if d <= limit and d < best_d:
                best, best_d = g_idx, d
        if best is not None:
            taken[best] = i
    return taken


def iou_pairs(boxes: list[Box], group_boxes: list[Box]) -> list[tuple[float, int, int]]:
    """(IoU, item, group) for every overlapping pair, by descending IoU (ties: item, then group order)."""
    pairs = [(b.iou(g), i, j) for i, b in enumerate(boxes) for j, g in enumerate(group_boxes)]
    return sorted((p for p in pairs if p[0] > 0), key=lambda t: (-t[0], t[1], t[2]))


def iou_matches(pairs: list[tuple[float, int, int]], threshold: float) -> int:
    """True positives at one IoU threshold: greedy one-to-one over `iou_pairs` order."""
    used_i, used_j, tp = set(), set(), 0
    for iou, i, j in pairs:
        if iou < threshold:
            break
        if i not in used_i and j not in used_j:
            used_i.add(i)
            used_j.add(j)
            tp += 1
    return tp


@dataclass
class GroupOutcome:
    record_id: str
    group_id: str
    label: str
    subject: str
    stage: str
    question_type: str
    content_format: str
    localized: bool = False
    recognized: bool = False
    reasoned: bool = False
    accurate: bool = False
    cer: float | None = None
    judged: bool | None = None  # the model's judgment, when it reached step 6 with a valid one
    confidence: float | None = None  # the matched item's judgment confidence (docs/metric.md#confidences)
    unverifiable: bool = False  # answer-free, no reference: the answer gate was skipped
    excluded: bool = False
    has_reference: bool = False  # the group has a reference answer (std): its answer's soft scores count
    answer_type: str | None = None  # answer-free: the reference's type, whose rule judged the answer
    answer_by: str | None = None  # answer-free: what decided the answer gate, "rule" or the judge's name
    box: list[float] | None = None  # the matched item's box (original pixels)
    iou: float | None = None  # its IoU with the group's box
    text_f1: float | None = None  # soft scores of the matched item's transcription and (with a reference) answer
    text_anls: float | None = None
    answer_f1: float | None = None
    answer_anls: float | None = None
    points: float | None = None  # the matched item's score, as points (parsing.parse_points; None without one)


def _pending(record: Record, g: Group) -> GroupOutcome:
    return GroupOutcome(record.record_id, g.group_id, g.label, record.subject, g.stage or "Unknown",
                        g.question_type, g.content_format, has_reference=g.std is not None)


def _rate(n: int, d: int) -> float:
    return round(n / d, _ROUND) if d else 0.0


def record_true_positives(records: list[Record], boxes_by_record: dict[str, list[Box]]) -> list[list[int]]:
    """Each record's true positives at each IoU threshold (items and groups are matched within their record)."""
    out = []
    for r in records:
        pairs = iou_pairs(boxes_by_record.get(r.record_id, []), [g.box for g in r.groups])
        out.append([iou_matches(pairs, t) for t in IOU_THRESHOLDS])
    return out


def map_20_50(records: list[Record], boxes_by_record: dict[str, list[Box]],
              true_positives: list[list[int]] | None = None) -> tuple[float, dict[str, float]]:
    """mAP@[0.2:0.5] in [0, 100]: AP_t = P_t x R_t over the whole setting (one PR point: no confidences).
    `true_positives`: record_true_positives of the same records, when already counted."""
    tps = record_true_positives(records, boxes_by_record) if true_positives is None else true_positives
    n_items = sum(len(boxes_by_record.get(r.record_id, [])) for r in records)
    n_groups = sum(len(r.groups) for r in records)
    ap = {}
    for k, t in enumerate(IOU_THRESHOLDS):
        tp = sum(row[k] for row in tps)
        p = tp / n_items if n_items else 0.0
        rec = tp / n_groups if n_groups else 0.0
        ap[f"{t:.2f}"] = round(p * rec, _ROUND)
    return round(100 * sum(ap.values()) / len(ap), 4), ap


def ranked_map(boxes: list[tuple[float | None, int, int, Box, list[Box]]], n_groups: int) -> dict:
    """mAP@[0.2:0.5] the standard way, in [0, 100]: every valid box (its confidence, record and item index, the box
    and its record's group boxes) ranked by its box confidence, 101-point interpolated AP per IoU threshold
    (docs/metric.md#confidences). Null, with why, when a box has no confidence (no IoU is computed then)."""
    without = sum(conf is None for conf, *_ in boxes)
    if not boxes or without:
        why = confidence.NO_CONFIDENCES if without == len(boxes) else \
            f"{without} of {len(boxes)} boxes without a confidence: one-point mAP only"
        return {"value": None, "ap_by_iou": None, "undefined": why}
    ranked = [(conf, r, i, [box.iou(group) for group in groups]) for conf, r, i, box, groups in boxes]
    ap = {f"{t:.2f}": round(confidence.interpolated_ap(confidence.ranked_hits(ranked, t), n_groups), _ROUND)
          for t in IOU_THRESHOLDS}
    return {"value": round(100 * sum(ap.values()) / len(ap), 4), "ap_by_iou": ap, "undefined": None}


def _points(g: GradedSetting) -> dict | None:
    """The points report (gbtrain.metric.points) over every group with a full score, --exclude-other or not (a
    half-right answer is what points measure); None when the annotations give no points. A score comes from the
    item matched to its group; a scored item that matched none is listed as unexpected, as `item <index>`."""
    return points.points_report(g.references, g.scores, g.opts.points_options) if g.references else None


def _pages(g: GradedSetting) -> dict[str, PageOutcomes]:
    """Each page's share of the setting (gbtrain.metric.intervals): what its intervals resample, and what
    eval/compare.py pairs. An L1 crop or L2 region counts with the page it comes from."""
    pages: dict[str, PageOutcomes] = {}
    n_groups = Counter(o.record_id for o in g.outcomes)  # every group, for the mAP's recall
    for r, tp in zip(g.records, g.true_positives, strict=True):
        page = pages.setdefault(r.page_id, PageOutcomes({}, [0] * (2 + len(IOU_THRESHOLDS)), {}))
        for k, n in enumerate([len(g.boxes_by_record.get(r.record_id, [])), n_groups[r.record_id], *tp]):
            page.boxes[k] += n
    page_of = {r.record_id: r.page_id for r in g.records}
    for o in g.counted:
        pages[page_of[o.record_id]].gates[(o.record_id, o.group_id)] = intervals.gates_passed(
            o.localized, o.recognized, o.reasoned, o.accurate)
    rows, _ = points.rated(g.references, g.scores, g.opts.points_options)
    for ref, (_, teacher, model) in zip(g.references, rows, strict=True):
        pages[page_of[ref.key[0]]].errors[ref.key] = abs(model - teacher)
    return pages


# The modules whose code decides a score, relative to the gbtrain package: what scorer_sha256 hashes, and nothing
# else (a CLI runner such as metric/agreement.py, or a report's layout, changes no figure). docs/metric.md lists
# them; tests/metric/test_scoring.py fails when code outside them runs while a setting is scored.
SCORER_MODULES = ("metric/scoring.py", "metric/answers.py", "metric/parsing.py", "metric/judges.py",
                  "metric/points.py", "metric/intervals.py", "metric/confidence.py", "metric/selective.py",
                  "metric/text_scores.py", "schema.py", "coords.py", "values.py", "vocabulary.py")


def scorer_sha256() -> str:
    """Hash of the code that decides a score (SCORER_MODULES, the true/false words of vocabulary.py among them), so
    that two reports made by the same scorer are comparable and others are not."""
    h = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for name in SCORER_MODULES:
        h.update(name.encode() + b"\0" + (package / name).read_bytes())
    return h.hexdigest()


@dataclass
class GradedSetting:
    """One setting graded record by record (steps 3-6 for every group): what every summary metric reads."""

    records: list[Record]
    predictions: Predictions
    opts: ScoreOptions
    judge: judges.Judge
    outcomes: list[GroupOutcome] = field(default_factory=list)
    judged_pairs: list[tuple[str, str]] = field(default_factory=list)  # (answer, reference) asked of the judge
    boxes_by_record: dict[str, list[Box]] = field(default_factory=dict)  # valid boxes of each answered record
    matched_items: dict[tuple[str, str], parsing.PredictedItem] = field(default_factory=dict)
    scores: list[tuple[tuple[str, str], object]] = field(default_factory=list)  # ((record, group), score written)
    missing: list[str] = field(default_factory=list)
    unparsable: list[str] = field(default_factory=list)
    parse_reasons: Counter = field(default_factory=Counter)
    no_valid_box: int = 0
    # (box confidence or None, record index, item index, the box, its record's group boxes) of every valid box
    ranked: list[tuple[float | None, int, int, Box, list[Box]]] = field(default_factory=list)
    unmatched: list[tuple[str, parsing.PredictedItem]] = field(default_factory=list)  # (record, item) of no group

    @cached_property
    def counted(self) -> list[GroupOutcome]:
        """The denominator: every group, less those excluded (--exclude-other)."""
        return [o for o in self.outcomes if not o.excluded]

    @cached_property
    def true_positives(self) -> list[list[int]]:
        return record_true_positives(self.records, self.boxes_by_record)

    @cached_property
    def localization(self) -> tuple[float, dict[str, float]]:
        return map_20_50(self.records, self.boxes_by_record, self.true_positives)

    @cached_property
    def references(self) -> list[points.Reference]:
        """Every group with a full score: what the points report, and its interval, measure against."""
        return [points.Reference((r.record_id, grp.group_id), grp.full_score, grp.score, grp.question_type,
                                 grp.score_2) for r in self.records for grp in r.groups if grp.full_score is not None]

    @cached_property
    def pages(self) -> dict[str, PageOutcomes]:
        return _pages(self)

    def rate(self, gate: str) -> float:
        return _rate(sum(getattr(o, gate) for o in self.counted), len(self.counted))


def grade(records: list[Record], predictions: Predictions, opts: ScoreOptions,
          judge: judges.Judge | None = None) -> GradedSetting:
    """Every group's outcome: matched (3), transcribed (4), answered (5, one judge call for the whole setting)
    and judged (6)."""
    missing = [r.record_id for r in records if r.record_id not in predictions.responses]
    g = GradedSetting(records, predictions, opts, judge or judges.RuleJudge(), missing=missing)
    pending_answers: list[tuple[GroupOutcome, parsing.PredictedItem, str]] = []
    answered = []
    for r in records:
        group_outcomes = [_pending(r, grp) for grp in r.groups]
        if r.record_id in predictions.responses:
            pending = _grade_record(g, r, group_outcomes)
            if opts.ignore_missing and g.unparsable[-1:] == [r.record_id]:
                continue
            pending_answers += pending
        elif opts.ignore_missing:
            continue
        g.outcomes += group_outcomes
        answered.append(r)
    if opts.ignore_missing:  # every metric over the records answered with items only (the report's header says so)
        if records and not answered:  # "accuracy 0 over 0 groups" would read as a score
            raise ValueError(f"--ignore-missing: none of the {len(records)} records has a reply with items "
                             f"({len(missing)} missing, {len(g.unparsable)} unparsable), so nothing would be scored; "
                             f"drop --ignore-missing to score them as failures, or check the predictions' ids")
        g.records = answered
    tolerance = Fraction(str(opts.answer_tolerance))
    undecided = []
    for out, item, ref in pending_answers:  # (5) the rule of the reference's type; a judge for what it cannot tell
        decided = answers.answers_equivalent(item.answer, ref, out.answer_type, tolerance)
        if (decided is None or not opts.rule_first) and not isinstance(g.judge, judges.RuleJudge):
            undecided.append((out, item, ref))
            continue
        out.answer_by = "rule" if decided is not None else UNDECIDED
        if decided:
            out.reasoned = True
            _judge_step(out, item)
    g.judged_pairs = [(item.answer, ref) for _, item, ref in undecided]
    verdicts = g.judge.judge_many(g.judged_pairs)
    for (out, item, _), ok in zip(undecided, verdicts, strict=True):
        out.answer_by = getattr(g.judge, "name", "judge")
        if ok:
            out.reasoned = True
            _judge_step(out, item)
    if opts.exclude_other:
        for o in g.outcomes:
            o.excluded = o.label not in (RIGHT, WRONG)
    return g


def _grade_record(g: GradedSetting, r: Record, group_outcomes: list[GroupOutcome]
                  ) -> list[tuple[GroupOutcome, parsing.PredictedItem, str]]:
    """One answered record's groups through steps 3, 4 and 6; returns those waiting for the answer gate (5)."""
    parsed = parsing.parse_response(g.predictions.responses[r.record_id])
    if parsed.reason:
        g.parse_reasons[parsed.reason] += 1
        if not parsed.items:
            g.unparsable.append(r.record_id)
    normalized = parsing.normalize_items(parsed.items)
    confidence.annotate(normalized, g.predictions.responses[r.record_id], g.predictions.logprobs.get(r.record_id))
    items = item_boxes(normalized, r, g.opts)
    g.no_valid_box += sum(ib.box is None for ib in items)
    g.boxes_by_record[r.record_id] = [ib.box for ib in items if ib.box is not None]
    group_boxes = [grp.box for grp in r.groups]
    g.ranked += [(ib.item.box_confidence, len(g.boxes_by_record) - 1, i, ib.box, group_boxes)
                 for i, ib in enumerate(items) if ib.box is not None]
    pending = []
    matches = match_by_centre(items, [grp.box for grp in r.groups], g.opts.match_radius)
    group_of = {i_idx: r.groups[g_idx].group_id for g_idx, i_idx in matches.items()}
    g.unmatched += [(r.record_id, ib.item) for i, ib in enumerate(items) if i not in group_of]
    g.scores += [((r.record_id, group_of.get(i, f"item {i}")), ib.item.score) for i, ib in enumerate(items)
                 if ib.item.score is not None]
    for g_idx, i_idx in matches.items():
        grp, out, item, box = r.groups[g_idx], group_outcomes[g_idx], items[i_idx].item, items[i_idx].box
        g.matched_items[(r.record_id, grp.group_id)] = item
        out.localized = True
        out.confidence = item.confidence
        out.box = [round(v, 1) for v in box.as_list()]
        out.iou = round(box.iou(grp.box), _ROUND)
        out.cer = round(cer(item.text, grp.hand), _ROUND)
        out.points = parsing.parse_points(item.score)[0] if item.score is not None else None
        out.text_f1 = round(text_scores.token_f1(item.text, grp.hand), _ROUND)
        out.text_anls = round(text_scores.anls(item.text, grp.hand), _ROUND)
        if grp.std is not None:
            out.answer_f1 = round(text_scores.token_f1(item.answer, grp.std), _ROUND)
            out.answer_anls = round(text_scores.anls(item.answer, grp.std), _ROUND)
        if out.cer >= CER_THRESHOLD:
            continue
        out.recognized = True
        if g.opts.mode == ANSWER_FREE and grp.std is not None:
            out.answer_type = answers.answer_type_of(grp.question_type, grp.std)
            pending.append((out, item, grp.std))
            continue
        out.unverifiable = g.opts.mode == ANSWER_FREE
        out.reasoned = True
        _judge_step(out, item)
    return pending


def certification_pages(g: GradedSetting) -> dict[str, list[selective.Candidate]]:
    """What a certified review threshold counts on each page (docs/metric.md#selective-grading), as grade_pages
    accepts items: every counted group, through the item matched to it (its judgment confidence; an error unless
    it passes every gate and names the group's question where it names one; in points, the group's full score and
    the points its item awarded wrongly), and every item of the model matched to no group (a made-up box, or one
    without a valid box): an error whenever its confidence lets it through, awarding in points what it wrote (0 to
    the page's largest full score)."""
    page_of = {r.record_id: r.page_id for r in g.records}
    rows, _ = points.rated(g.references, g.scores, g.opts.points_options)
    off = {ref.key: (full, abs(model - teacher))
           for ref, (full, teacher, model) in zip(g.references, rows, strict=True)}
    largest: dict[str, float] = {}
    for ref in g.references:
        largest[ref.key[0]] = max(largest.get(ref.key[0], 0.0), float(ref.full_score))
    pages: dict[str, list[selective.Candidate]] = {page: [] for page in page_of.values()}
    for o in g.counted:
        item = g.matched_items.get((o.record_id, o.group_id))
        named = item is not None and item.question_id is not None and printed_id(o.group_id) is not None
        elsewhere = named and question_id_key(item.question_id) != question_id_key(o.group_id)
        full, wrong = off.get((o.record_id, o.group_id), (0.0, 0.0))
        pages[page_of[o.record_id]].append(selective.Candidate(o.confidence, not o.accurate or elsewhere, full, wrong))
    for record_id, item in g.unmatched:
        awarded = min(max(parsing.parse_points(item.score)[0] or 0.0, 0.0), largest.get(record_id, 0.0))
        pages[page_of[record_id]].append(selective.Candidate(item.confidence, True, awarded, awarded))
    return pages


def _coverage(g: GradedSetting) -> dict:
    unexpected = sorted(set(g.predictions.responses) - {r.record_id for r in g.records})
    dups = g.predictions.duplicates
    return {"missing": len(g.missing), "unexpected": len(unexpected), "duplicate": len(dups),
            "unparsable": len(g.unparsable), "no_valid_box": g.no_valid_box,
            "ids": {"missing": g.missing, "unexpected": unexpected, "duplicate": dups, "unparsable": g.unparsable}}


# The report of a setting, field by field (docs/metric.md#the-metric lists each). A new metric is one line here: its
# name and the function of the graded setting that computes it.
METRICS: dict[str, Callable[[GradedSetting], object]] = {
    "level": lambda g: g.opts.level,
    "mode": lambda g: g.opts.mode,
    "n_records": lambda g: len(g.records),
    "n_groups": lambda g: len(g.counted),
    "accuracy": lambda g: g.rate("accurate"),
    "localized": lambda g: g.rate("localized"),
    "recognized": lambda g: g.rate("recognized"),
    "reasoned": lambda g: g.rate("reasoned"),
    "correct": lambda g: sum(o.accurate for o in g.counted),
    "fn": lambda g: verdict_errors(verdict_pairs(g.counted))["costs_marks"],
    "fp": lambda g: verdict_errors(verdict_pairs(g.counted))["gives_marks"],
    "unverifiable": lambda g: sum(o.unverifiable for o in g.counted),
    "judge_replies": lambda g: g.judge.stats(g.judged_pairs),
    "answer_gate": lambda g: answer_gate(g.counted),
    "soft_scores": lambda g: soft_scores(g.counted),
    "labels": lambda g: dict(sorted(Counter(o.label for o in g.outcomes).items())),
    "excluded_other_labels": lambda g: sum(o.excluded for o in g.outcomes),
    "map_20_50": lambda g: g.localization[0],
    "ap_by_iou": lambda g: g.localization[1],
    "map_ranked": lambda g: ranked_map(g.ranked, sum(len(r.groups) for r in g.records)),
    "selective": lambda g: selective.coverage_table(g.counted, certification_pages(g)),
    "calibration": lambda g: selective.calibration(g.counted),
    "coverage": _coverage,
    "parse_failures": lambda g: dict(sorted(g.parse_reasons.items())),
    "breakdown": lambda g: breakdown(g.counted),
    "points": _points,
    "intervals": lambda g: intervals.setting_intervals(g.pages, g.opts.intervals),
    "pages": lambda g: {page: p.to_json() for page, p in g.pages.items()},
    "settings": lambda g: asdict(g.opts) | {"judge": getattr(g.judge, "name", g.opts.judge),
                                            "cer_threshold": CER_THRESHOLD, "iou_thresholds": list(IOU_THRESHOLDS)},
    "scorer_sha256": lambda g: scorer_sha256(),
    "groups": lambda g: [dict(vars(o)) for o in g.outcomes],
}


def summarize(graded: GradedSetting) -> dict:
    """The setting's report: every metric of METRICS over the graded setting."""
    return {name: metric(graded) for name, metric in METRICS.items()}


def score(records: list[Record], predictions: Predictions, opts: ScoreOptions,
          judge: judges.Judge | None = None) -> dict:
    """Score one setting (level x mode); returns the report dict (docs/metric.md#the-metric: every field)."""
    if opts.mode not in MODES:
        raise ValueError(f"unknown mode {opts.mode!r}")
    return summarize(grade(records, predictions, opts, judge))


def _judge_step(out: GroupOutcome, item: parsing.PredictedItem) -> None:
    """Step 6: the coerced judgment must equal the label (right vs. everything else)."""
    out.judged = item.correctness
    out.accurate = item.correctness is not None and item.correctness == (out.label == RIGHT)


def verdict_pairs(outcomes: list[GroupOutcome]) -> list[tuple[bool, bool]]:
    """(teacher says right, model says right) of the groups the model judged."""
    return [(o.label == RIGHT, o.judged is True) for o in outcomes if o.judged is not None]


SOFT_SCORES = ("text_f1", "text_anls", "answer_f1", "answer_anls")


def soft_scores(outcomes: list[GroupOutcome]) -> dict[str, float | None]:
    """Token F1 and ANLS (threshold 0.5) of the transcriptions and of the derived answers, beside the CER gate:
    the mean over the groups (an unmatched group scores 0; the answer's over the groups with a reference answer,
    None without any)."""
    with_reference = [o for o in outcomes if o.has_reference]
    means = {}
    for name in SOFT_SCORES:
        over = with_reference if name.startswith("answer") else outcomes
        means[name] = round(sum(getattr(o, name) or 0.0 for o in over) / len(over), _ROUND) if over else None
    return means


UNDECIDED = "undecided"  # answer_by of an answer the typed rule cannot decide, with no LLM judge to ask


def answer_gate(outcomes: list[GroupOutcome]) -> dict:
    """How the answer gate (5) was decided: by answer type, how many answers its rule judged, how many went to the
    judge, and how many neither could decide (`undecided`: the rule cannot tell two different texts apart, or read
    a value where the reference has a unit; without an LLM judge they fail the gate, counted here, never passed as
    equal); and the groups whose reference is the data's placeholder (答案暂无), which skip the gate answer-free
    (`no_reference`), so that a figure compares with the paper's."""
    asked = [o for o in outcomes if o.answer_by is not None]
    return {"by_rule": sum(o.answer_by == "rule" for o in asked),
            "by_judge": sum(o.answer_by not in ("rule", UNDECIDED) for o in asked),
            "undecided": sum(o.answer_by == UNDECIDED for o in asked),
            "no_reference": sum(not o.has_reference for o in outcomes),
            "types": dict(sorted(Counter(o.answer_type for o in asked).items()))}


def breakdown(outcomes: list[GroupOutcome]) -> dict:
    """Accuracy by subject, stage, question type and content format, over the categories in the data, the soft
    scores, and the wrong verdicts that cost students marks or gave them marks (points.verdict_errors)."""
    result = {}
    for key in BREAKDOWN_KEYS:
        cats: dict[str, list[GroupOutcome]] = {}
        for o in outcomes:
            cats.setdefault(getattr(o, key), []).append(o)
        result[key] = {k: {"n": len(os), "correct": sum(o.accurate for o in os),
                           "accuracy": _rate(sum(o.accurate for o in os), len(os)), **soft_scores(os),
                           **verdict_errors(verdict_pairs(os))} for k, os in sorted(cats.items())}
    return result


@dataclass(kw_only=True)
class GateFlags:
    """The answer gate's tolerance and what counts as missing, for every tool that scores (eval/score.py,
    eval/run_eval.py), defined once."""

    answer_tolerance: float = option(float(answers.DEFAULT_REL_TOL), "answer gate: the relative difference within "
                                     "which a number equals its reference (0: exact, as a teacher marks; 0.05 is the "
                                     "document-QA scorers' convention for rounded readings)", group="scoring")
    rule_first: bool = option(True, "answer gate with an LLM judge: the typed rule decides numbers, choices and "
                                    "truth values, the judge the rest (--no-rule-first: the judge decides every "
                                    "answer, as the paper's scorer did)", group="scoring")
    ignore_missing: bool = option(False, "score only the records the model answered with items (the report's header "
                                         "says how many were left out); by default a missing or unparsable reply "
                                         "fails its groups", group="scoring")

    def gate_options(self) -> dict:
        return {"answer_tolerance": self.answer_tolerance, "rule_first": self.rule_first,
                "ignore_missing": self.ignore_missing}

    def check_gate(self, judge: str) -> None:
        """Refuse --no-rule-first without an LLM judge: the rule judge decides every answer already, so the flag
        would be taken and change nothing."""
        if not self.rule_first and judge.partition(":")[0] == "rule":
            raise ValueError("--no-rule-first asks an LLM judge every answer, but --judge is rule: give --judge "
                             "vllm:MODEL or openai:MODEL[@URL], or drop --no-rule-first")


# the per-question table (score.py: REPORT.questions.csv; run_eval.py: OUT/questions.csv): one row per group
QUESTION_COLUMNS = ("setting", "record_id", "group_id", "label", "question_type", "localized", "recognized",
                    "reasoned", "accurate", "box", "iou", "cer", "text_f1", "text_anls", "answer_type", "answer_by",
                    "answer_f1", "answer_anls", "verdict", "points", "excluded")


def question_rows(setting: str, report: dict) -> list[dict]:
    """The rows of the per-question table of one scored setting (its report's groups)."""
    def verdict(judged) -> str:
        return "" if judged is None else RIGHT if judged else WRONG
    return [{**g, "setting": setting, "verdict": verdict(g["judged"]),
             "box": " ".join(f"{v:g}" for v in g["box"]) if g["box"] else None} for g in report["groups"]]


def _is_score_report(path: Path) -> bool:
    """A report score.py wrote (a JSON object with its scorer's hash and groups), which a rerun may replace."""
    try:
        report = read_json(path)
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and {"scorer_sha256", "groups", "coverage"} <= set(report)


def _is_question_table(path: Path) -> bool:
    """A per-question table score.py wrote: its header is QUESTION_COLUMNS."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().rstrip("\r\n") == ",".join(QUESTION_COLUMNS)
    except OSError:
        return False


def questions_path(report_path: str | Path) -> Path:
    """Where score.py writes a report's per-question table: beside it, REPORT.questions.csv."""
    path = Path(report_path)
    return path.with_name(path.stem + ".questions.csv")


@dataclass
class ScoreRun(PointsFlags, IntervalFlags, SplitFlags, GateFlags):
    """Everything one `eval/score.py` call needs; each field is one of its flags (gbtrain.cli.add_options)."""

    data: str = option(help="GradingBench-layout folder")
    level: str = option(help="the level scored", choices=LEVELS)
    mode: str = option(help="the mode scored", choices=MODES)
    predictions: str = option(help='JSONL, one {"id": <record id>, "response": <raw model text>} per line')
    coords: str = option(help="the convention the model was prompted with", choices=CONVENTIONS)
    out: str = option(help="the report (JSON)")
    min_pixels: int = option(PixelBudget().min_pixels, "the pixel budget the model saw (qwen25 boxes)",
                             bounds=(1, 10**9))
    max_pixels: int = option(PixelBudget().max_pixels, "as --min-pixels", bounds=(1, 10**9))
    factor: int = option(PixelBudget().factor, "the model's image token side in px (qwen25 boxes): 28 Qwen2.5-VL, "
                                               "32 Qwen3-VL", bounds=(1, 1024))
    judge: str = option("rule", judges.judge_usage)
    kv_cache_gib: float | None = option(None, "vllm judge: KV-cache size in GiB (default on CPU: a quarter of free "
                                              "memory, 0.5-4 GiB, at most 64 full contexts' worth)")
    gpu_memory_utilization: float = option(0.9, "vllm judge on a GPU: share of the card")
    match_radius: float = option(1.0, "x the group's box diagonal")
    exclude_other: bool = option(False, "drop half-right/unanswered/unknown groups")
    allow_duplicates: bool = option(False, "keep the last line of a duplicated id")
    lenient: bool = option(False, "skip bad annotation records (listed)")


def score_file(run: ScoreRun) -> tuple[dict, list[str]]:
    """Score one prediction file and write its report; returns the report and the annotation problems skipped
    or warned about. The options are checked first, so a bad radius or budget never scores a file as 0.0."""
    opts = ScoreOptions(run.level, run.mode, run.coords, PixelBudget(run.min_pixels, run.max_pixels, run.factor),
                        run.match_radius, run.exclude_other, run.allow_duplicates, run.judge,
                        run.points_options(), run.interval_options(), **run.gate_options())
    run.check_gate(run.judge)
    require_out(run.out)
    claim_output_files([(Path(run.out), _is_score_report), (questions_path(run.out), _is_question_table)],
                       {"--data": run.data, "--predictions": run.predictions, "--build": run.build}, "--out",
                       "score.py")
    judge = judges.judge_from_spec(run.judge, VLLMMemory(run.kv_cache_gib, run.gpu_memory_utilization))
    held = resolve_held_out(run.data, run.split, run.build, None)
    loaded = load_level(run.data, run.level, lenient=run.lenient, whole_images=False)
    loaded.records = [r for r in loaded.records if held.keeps(r)]
    if not loaded.records:  # a report of "0 groups" would read as a score
        skipped = f" ({len(loaded.skipped)} skipped as unreadable)" if loaded.skipped else ""
        raise ValueError(f"{annotation_path(run.data, run.level)} holds no records{skipped}: nothing to score; check "
                         f"--data and --level")
    preds = read_predictions(run.predictions, allow_duplicates=run.allow_duplicates)
    report = score(loaded.records, preds, opts, judge) | {
        "held_out": held.record(loaded.records)}
    write_report(report, run.out)
    write_table(questions_path(run.out), QUESTION_COLUMNS, question_rows(f"{run.level}-{run.mode}", report))
    return report, loaded.skipped + loaded.warnings


# score.py --self-check: five reference items, one of each answer type (a fraction among the numbers), all right
_SELF_CHECK = (("42", "42", "Fill-in-the-blank"), ("1/2", "1/2", "Fill-in-the-blank"), ("B", "B", "Multiple-choice"),
               ("√", "√", "True-False"), ("library", "library", "Fill-in-the-blank"))
_SELF_CHECK_ONES = ("accuracy", "localized", "recognized", "reasoned")


def self_check() -> list[str]:
    """Five reference items with perfect predictions scored in both modes: every gate, mAP and soft score must be
    perfect and every answer decided by its type's rule. Returns what is not (nothing: the scorer works here)."""
    marks = [Mark(points=[(100, 100 + 150 * i), (400, 100 + 150 * i), (400, 200 + 150 * i), (100, 200 + 150 * i)],
                  label=RIGHT, raw_label=RIGHT, mark_id=f"q{i + 1}", hand=hand, std=std, question_type=qtype)
             for i, (hand, std, qtype) in enumerate(_SELF_CHECK)]
    record = Record("self-check", "L3", "Mathematics", "self-check.png", 1000, 1000, marks)
    reply = [{"bbox_2d": [100, 100 + 150 * i, 400, 200 + 150 * i], "text": hand, "answer": std, "correctness": True}
             for i, (hand, std, _) in enumerate(_SELF_CHECK)]
    problems = []
    for mode in MODES:
        report = score([record], Predictions({"self-check": json.dumps(reply, ensure_ascii=False)}),
                       ScoreOptions("L3", mode, "abs"))
        figures = {m: report[m] for m in _SELF_CHECK_ONES} | {"map_20_50 / 100": report["map_20_50"] / 100} | {
            f"soft {k}": v for k, v in report["soft_scores"].items() if v is not None}
        problems += [f"{mode}: {name} {value!r}, not 1" for name, value in figures.items() if value != 1]
        if mode == ANSWER_FREE and report["answer_gate"]["by_rule"] != len(_SELF_CHECK):
            problems.append(f"{mode}: the rule decided {report['answer_gate']} of {len(_SELF_CHECK)} answers")
    return problems


def write_report(report: dict, path: str | Path) -> None:
    """Byte-stable JSON: sorted keys, fixed rounding (done when building the report). Any text round-trips: a
    lone surrogate (an id or reply a model made up) is written as its JSON escape, not refused by UTF-8."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    try:
        path.write_text(text, encoding="utf-8", errors="backslashreplace")
    except OSError as e:  # a full disk's error names no file
        raise OSError(e.errno, e.strerror, str(path)) from None


# ----------------------------------------------------------------------------- isolated diagnostics
def recognition_rate(records: list[Record], texts: dict[tuple[str, str], str]) -> float:
    """Recognition only: share of groups whose transcription (given its box) has CER < 0.7; a group with
    no transcription fails."""
    groups = [(r.record_id, g) for r in records for g in r.groups]
    ok = sum((rid, g.group_id) in texts and cer(texts[(rid, g.group_id)], g.hand) < CER_THRESHOLD
             for rid, g in groups)
    return _rate(ok, len(groups))


def reasoning_accuracy(records: list[Record], judgments: dict[tuple[str, str], object]) -> float:
    """Reasoning only: share of groups whose judgment (given the transcription) equals the label."""
    groups = [(r.record_id, g) for r in records for g in r.groups]
    ok = 0
    for rid, g in groups:
        verdict = parsing.coerce_correctness(judgments.get((rid, g.group_id)))
        ok += verdict is not None and verdict == g.is_right
    return _rate(ok, len(groups))


def localization_map(records: list[Record], predictions: Predictions, opts: ScoreOptions) -> float:
    """Localization only: mAP@[0.2:0.5] of the boxes in the responses."""
    boxes = {}
    for r in records:
        parsed = parsing.parse_response(predictions.responses.get(r.record_id))
        boxes[r.record_id] = [ib.box for ib in item_boxes(parsing.normalize_items(parsed.items), r, opts)
                              if ib.box is not None]
    return map_20_50(records, boxes)[0]

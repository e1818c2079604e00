"""The evaluation engine: the six settings and the three-turn decomposition asked of a backend in batches, the
L1 diagnostics, and the defaults a checkpoint implies (box convention, pixel budget, L2 margin).

Every setting's records go to the backend in batches (one backend call per batch and turn); predictions are
appended to OUTDIR/predictions/<setting>.jsonl with flush + fsync after each batch, and a rerun skips the records
already there, so a run killed at any point resumes and ends with the same report.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from PIL import Image
from tqdm import tqdm

from gbtrain import prompts
from gbtrain.coords import DEFAULT_L2_MARGIN, PixelBudget, convention_for_model, to_model
from gbtrain.data.annotations import image_path, load_level
from gbtrain.data.conversations import points_to_grade, prompt_inputs
from gbtrain.data.held_out import HeldOut
from gbtrain.families import DEFAULT_FAMILY, family_of_model
from gbtrain.inference.base import Backend, SamplingOptions, message
from gbtrain.metric.intervals import IntervalOptions
from gbtrain.metric.parsing import parse_response
from gbtrain.metric.points import PointsOptions
from gbtrain.metric.scoring import (
    Predictions,
    ScoreOptions,
    localization_map,
    read_predictions,
    reasoning_accuracy,
    recognition_rate,
    score,
)
from gbtrain.schema import Record
from gbtrain.train.checkpoints import read_checkpoint_record
from gbtrain.vocabulary import ALL_SETTINGS, ANSWER_BASED, L1, LEVELS, MODE_OF_SHORT, MODES, setting_name


@dataclass(frozen=True)
class Setting:
    level: str
    mode: str  # answer-free | answer-based
    three_turn: bool = False

    @property
    def name(self) -> str:
        return setting_name(self.level, self.mode, self.three_turn)


def parse_settings(spec: str, three_turn: bool = False) -> list[Setting]:
    names = ALL_SETTINGS if spec in ("all", "") else tuple(s.strip() for s in spec.split(",") if s.strip())
    out = []
    for name in names:
        level, _, mode = name.partition("-")
        if level not in LEVELS or mode not in MODE_OF_SHORT:
            raise ValueError(f"unknown setting {name!r}; settings are {', '.join(ALL_SETTINGS)} (or all)")
        out.append(Setting(level, MODE_OF_SHORT[mode]))
    if not out:
        raise ValueError(f"--settings {spec!r} names no setting; settings are {', '.join(ALL_SETTINGS)} (or all)")
    if three_turn:
        out += [Setting(s.level, s.mode, True) for s in list(out)]
    return out


def default_coords(model: str) -> str:
    """The convention the recipe recorded in the checkpoint, else the one of its config.json model_type,
    else of the model name; unknown -> ask the user."""
    recorded = read_checkpoint_record(model)
    if recorded:
        return recorded.coords
    cfg = Path(model) / "config.json"
    if cfg.is_file():
        try:
            model_type = json.loads(cfg.read_text(encoding="utf-8")).get("model_type", "")
        except (ValueError, AttributeError) as e:
            raise ValueError(f"{cfg} is not a model config ({e}); pass --coords, or fix the checkpoint") from None
        conv = convention_for_model(str(model_type))
        if conv:
            return conv
    conv = convention_for_model(model)
    if conv is None:
        raise ValueError(f"cannot tell the coordinate convention of {model!r}; pass --coords")
    return conv


def default_budget(model: str) -> PixelBudget:
    """The pixel budget the recipe recorded in the checkpoint (its training data's), else GradingBench's.
    A hub checkpoint's own processor keys (e.g. max_pixels 12845056) are never the evaluation budget."""
    recorded = read_checkpoint_record(model)
    if recorded:
        return recorded.budget
    return PixelBudget(factor=(family_of_model(model) or DEFAULT_FAMILY).patch_factor)


def default_l2_margin(model: str) -> float:
    """The L2 region margin the checkpoint's training data was built with, else the builder's default."""
    recorded = read_checkpoint_record(model)
    return recorded.l2_margin if recorded else DEFAULT_L2_MARGIN


def recorded_build(model: str) -> str | None:
    """The training build the checkpoint records (None: none recorded), whose held-out pages evaluate it."""
    recorded = read_checkpoint_record(model)
    return recorded.dataset if recorded else None


@lru_cache(maxsize=8)  # L2 records of a page come together; pages can be tens of MB decoded
def _decode(path: Path) -> Image.Image:
    try:
        with Image.open(path) as im:
            return im.convert("RGB")
    except (OSError, SyntaxError, Image.DecompressionBombError) as e:  # damaged after validation
        raise ValueError(f"cannot decode image {path}: {e}") from None


@dataclass
class EvalOptions:
    coords: str
    budget: PixelBudget
    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    batch_size: int = 256  # records per backend call (and per flushed chunk)
    max_model_len: int | None = None  # with a tokenizer: records whose prompt cannot fit are reported, not sent
    limit: int | None = None
    l2_margin: float = DEFAULT_L2_MARGIN  # derived L2 regions, as the training data's builder drew them
    points: PointsOptions = PointsOptions()  # the bands and large-error share of the points report
    intervals: IntervalOptions = IntervalOptions()  # the bootstrap's resamples and seed
    held_out: HeldOut = field(default_factory=lambda: HeldOut("all", None, "every record"))  # records evaluated
    gates: dict = field(default_factory=dict)  # the answer gate's tolerance and --ignore-missing (GateFlags)


class Evaluator:
    """Runs settings against one backend and writes predictions, resumably."""

    def __init__(self, backend: Backend, data_dir: str | Path, out_dir: str | Path, options: EvalOptions,
                 tokenizer=None, progress: bool = True):
        self.backend, self.data_dir, self.out = backend, Path(data_dir), Path(out_dir)
        self.opts, self.tokenizer, self.progress = options, tokenizer, progress
        self._records: dict[str, list[Record]] = {}

    def records(self, level: str) -> list[Record]:
        if level not in self._records:
            recs = [r for r in load_level(self.data_dir, level).records if self.opts.held_out.keeps(r)]
            if not recs:
                raise ValueError(f"{self.data_dir}: no {level} records" + (
                    "" if self.opts.held_out.split == "all" else f" in {self.opts.held_out.why}: the build holds "
                    f"none of its pages out there; pass --split validation, or --split all (training pages included)"))
            self._records[level] = recs[:self.opts.limit] if self.opts.limit else recs
        return self._records[level]

    def image(self, r: Record) -> Image.Image:
        """The record's image, decoded once per file: the L2 records of a page share it (callers do not
        modify it)."""
        return _decode(image_path(self.data_dir, r))

    # ----------------------------------------------------------------------------- prompts per record
    def first_prompt(self, r: Record, s: Setting) -> str:
        o = self.opts
        regions, refs = prompt_inputs(r, s.mode, o.coords, o.budget, o.l2_margin)
        if s.three_turn:
            return prompts.turn_locate(r.level, o.coords, regions)
        return prompts.single_turn(r.level, s.mode, o.coords, regions, refs, points_to_grade(r))

    def _too_long(self, chunk: list[Record], texts: list[str], sampling: SamplingOptions) -> list[str | None]:
        """Per record: why its prompt cannot fit the context (None when it fits or cannot be checked).
        Lengths follow the builder's rule (chat template + image tokens, gbtrain.data.sft_dataset.LengthCounter)."""
        if self.tokenizer is None or not self.opts.max_model_len:
            return [None] * len(chunk)
        from gbtrain.data.sft_dataset import LengthCounter

        lengths = LengthCounter(self.tokenizer, self.opts.budget).count(
            [[{"role": "user", "content": t}] for t in texts], [(r.width, r.height) for r in chunk])
        limit = self.opts.max_model_len - sampling.max_tokens
        return [f"prompt of {n} tokens does not fit max_model_len - max_tokens = {limit}" if n > limit else None
                for n in lengths]

    # ----------------------------------------------------------------------------- running
    def predictions_path(self, s: Setting) -> Path:
        return self.out / "predictions" / f"{s.name}.jsonl"

    def done_ids(self, s: Setting) -> set[str]:
        """Ids already answered. Run after _repair_tail, so every line is whole: a line that cannot be read was
        not written by an interrupted run, and appending after it would mix it into the report."""
        path = self.predictions_path(s)
        if not path.exists():
            return set()
        ids = set()
        with open(path, encoding="utf-8", errors="replace") as f:  # a model's broken bytes are read as U+FFFD
            for n, line in enumerate(f, start=1):
                try:
                    ids.add(str(json.loads(line)["id"]))
                except (ValueError, KeyError, TypeError, RecursionError):
                    raise ValueError(f"{path}:{n}: not a prediction line this evaluator wrote: pass --overwrite to "
                                     f"redo the setting, or choose another --out") from None
        return ids

    def _repair_tail(self, path: Path) -> None:
        """Drop a partial last line left by a kill, so appends start on a clean line."""
        if not path.exists():
            return
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            path.write_bytes(data[:data.rfind(b"\n") + 1])

    def run(self, s: Setting, overwrite: bool = False, sampling: SamplingOptions | None = None) -> Path:
        """Answer the setting's records not answered yet; `sampling` (default: the options') is this setting's."""
        sampling = self.opts.sampling if sampling is None else sampling
        path = self.predictions_path(s)
        path.parent.mkdir(parents=True, exist_ok=True)
        if overwrite:
            path.unlink(missing_ok=True)
        self._repair_tail(path)
        done = self.done_ids(s)
        todo = [r for r in self.records(s.level) if r.record_id not in done]
        bar = tqdm(total=len(todo), desc=s.name, disable=not self.progress)
        for i in range(0, len(todo), self.opts.batch_size):
            chunk = todo[i:i + self.opts.batch_size]
            start = time.perf_counter()
            rows = self._three_turn(chunk, s, sampling) if s.three_turn else self._single(chunk, s, sampling)
            seconds = round((time.perf_counter() - start) / max(len(chunk), 1), 4)
            # backslashreplace: a reply with a lone surrogate (an endpoint's \ud800) stays the JSON escape it was
            with open(path, "a", encoding="utf-8", errors="backslashreplace") as f:
                for row in rows:
                    row |= {"setting": s.name, "backend": self.backend.name, "model": self.backend.model,
                            "prompt_hash": prompts.prompt_fingerprint(), "seconds": seconds}
                    f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
            bar.update(len(chunk))
        bar.close()
        return path

    def send_batch(self, convs: list[list[dict]], prompts_text: list[str], chunk: list[Record],
                   sampling: SamplingOptions | None = None) -> list[dict]:
        """One backend call for the conversations that fit; the others get an error line. `sampling` defaults to
        the options'."""
        sampling = self.opts.sampling if sampling is None else sampling
        errors = self._too_long(chunk, prompts_text, sampling)
        send = [c for c, e in zip(convs, errors, strict=True) if e is None]
        replies = iter(self.backend.chat(send, sampling) if send else [])
        rows = []
        for e in errors:
            reply = None if e else next(replies)
            error = e or getattr(reply, "error", None)  # a FailedReply: the endpoint refused this record
            row = {"response": "", "error": error} if error else {"response": str(reply)}
            if not error and getattr(reply, "logprobs", None) is not None:  # per token [char offset, logprob]
                row["logprobs"] = reply.logprobs
            rows.append(row)
        return rows

    def _single(self, chunk: list[Record], s: Setting, sampling: SamplingOptions) -> list[dict]:
        texts = [self.first_prompt(r, s) for r in chunk]
        convs = [[message(t, self.image(r))] for r, t in zip(chunk, texts, strict=True)]
        outs = self.send_batch(convs, texts, chunk, sampling)
        return [{"id": r.record_id, **o} for r, o in zip(chunk, outs, strict=True)]

    def _three_turn(self, chunk: list[Record], s: Setting, sampling: SamplingOptions) -> list[dict]:
        texts = [self.first_prompt(r, s) for r in chunk]
        convs = [[message(t, self.image(r))] for r, t in zip(chunk, texts, strict=True)]
        turns: list[list[str]] = [[] for _ in chunk]
        errors: list[str | None] = [None] * len(chunk)
        follow_ups: list[Callable[[Record], str]] = [
            lambda r: prompts.turn_solve(s.mode, prompt_inputs(r, s.mode, self.opts.coords, self.opts.budget,
                                                               self.opts.l2_margin)[1]),
            lambda r: prompts.turn_compare(points_to_grade(r)),
        ]
        outs = self.send_batch(convs, texts, chunk, sampling)
        for k, o in enumerate(outs):
            errors[k] = o.get("error")
            turns[k].append(o["response"])
        for make in follow_ups:
            live = [k for k in range(len(chunk)) if errors[k] is None]
            for k in live:
                convs[k] = [*convs[k], message(turns[k][-1], role="assistant"), message(make(chunk[k]))]
            replies = self.backend.chat([convs[k] for k in live], sampling) if live else []
            for k, reply in zip(live, replies, strict=True):
                turns[k].append(reply)
        rows = []
        for k, r in enumerate(chunk):
            row = {"id": r.record_id, "turns": turns[k], "response": merge_turns(turns[k])}
            if errors[k]:
                row["error"] = errors[k]
            rows.append(row)
        return rows

    # ----------------------------------------------------------------------------- scoring
    def predictions(self, s: Setting) -> Predictions:
        path = self.predictions_path(s)
        return read_predictions(path) if path.exists() else Predictions({})

    def score_options(self, s: Setting, match_radius: float = 1.0) -> ScoreOptions:
        return ScoreOptions(s.level, s.mode, self.opts.coords, self.opts.budget, match_radius,
                            points_options=self.opts.points, intervals=self.opts.intervals, **self.opts.gates)

    def score(self, s: Setting, judge, match_radius: float = 1.0) -> dict:
        """The setting's report, plus the records whose line carries an error (prompt too long, endpoint
        refused): they are scored as failures and counted here."""
        predictions = self.predictions(s)
        report = score(self.records(s.level), predictions, self.score_options(s, match_radius), judge)
        errors = predictions.errors
        return report | {"generation_errors": {"count": len(errors), "examples": dict(list(errors.items())[:5])}}


def merge_turns(turns: list[str]) -> str:
    """Three-turn outputs -> one JSON list: item i of each turn merged (boxes + text, answer, correctness)."""
    lists = [parse_response(t).items for t in turns]
    if not lists or not lists[0]:
        return turns[0] if turns else ""  # nothing located: score turn 1 as it is (empty or unparsable)
    n = len(lists[0])
    merged = []
    for i in range(n):
        item: dict = {}
        for items in lists:
            if i < len(items):
                item.update({k: v for k, v in items[i].items() if k not in item})
        merged.append(item)
    return json.dumps(merged, ensure_ascii=False)


# --------------------------------------------------------------------------------- L1 diagnostics
def run_diagnostics(ev: Evaluator) -> dict:
    """The paper's isolated capabilities on L1: localization only (mAP), recognition only (CER < 0.7 given
    the group's box), reasoning only (judgment accuracy given the transcription; both modes)."""
    records = ev.records(L1)
    coords, budget, sampling = ev.opts.coords, ev.opts.budget, ev.opts.sampling
    images = {r.record_id: ev.image(r) for r in records}
    opts = ScoreOptions(L1, ANSWER_BASED, coords, budget)
    replies = ev.backend.chat([[message(prompts.diag_locate(coords), images[r.record_id])] for r in records],
                               sampling)
    located = Predictions({r.record_id: reply for r, reply in zip(records, replies, strict=True)})

    groups = [(r, g) for r in records for g in r.groups]
    convs = [[message(prompts.diag_recognize(coords, to_model(g.box, r.width, r.height, coords, budget)),
                      images[r.record_id])] for r, g in groups]
    texts = {}
    for (r, g), reply in zip(groups, ev.backend.chat(convs, sampling), strict=True):
        items = parse_response(reply).items
        texts[(r.record_id, g.group_id)] = str(items[0].get("text", "")) if items else ""

    reasoning = {}
    for mode in MODES:
        convs = [[message(prompts.diag_reason(g.group_id, g.hand, mode, g.std), images[r.record_id])]
                 for r, g in groups]
        judgments = {}
        for (r, g), reply in zip(groups, ev.backend.chat(convs, sampling), strict=True):
            items = parse_response(reply).items
            judgments[(r.record_id, g.group_id)] = items[0].get("correctness") if items else None
        reasoning[mode] = reasoning_accuracy(records, judgments)
    return {"localization_map_20_50": localization_map(records, located, opts),
            "recognition_rate": recognition_rate(records, texts),
            "reasoning_accuracy": reasoning, "n_records": len(records), "n_groups": len(groups)}


# A one-turn reply as the builder writes its targets (gbtrain.data.conversations.answer_items), keys in that order:
# `score` where the prompt gives full scores. xgrammar (vLLM's default backend) allows no key the schema leaves out.
GRADING_SCHEMA = {
    "type": "array",
    "items": {"type": "object", "properties": {
        "question_id": {"type": "string"},
        "bbox_2d": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4},
        "text": {"type": "string"}, "answer": {"type": "string"}, "correctness": {"type": "boolean"},
        "score": {"type": "number"}},
        "required": ["bbox_2d", "text", "answer", "correctness"]},
}

"""Batch evaluation of a checkpoint: six settings, the three-turn decomposition, L1 diagnostics.

Every setting's records go to the backend in batches (one backend call per batch and turn), predictions
are appended to OUTDIR/predictions/<setting>.jsonl with flush + fsync after each batch, and a rerun
skips the records already there, so a run killed at any point resumes and ends with the same report.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from PIL import Image
from tqdm import tqdm

from gbtrain import prompts
from gbtrain.annotations import annotations_sha256, image_path, load_level
from gbtrain.backends import (
    BACKENDS,
    Backend,
    BackendOptions,
    ModelOptions,
    SamplingOptions,
    VLLMMemory,
    message,
    without_credentials,
)
from gbtrain.config import below_minimum, identity_differences, option, overlapping, require_model
from gbtrain.conversations import prompt_inputs
from gbtrain.coords import (
    CONVENTIONS,
    DEFAULT_L2_MARGIN,
    PixelBudget,
    convention_for_model,
    read_checkpoint_record,
    to_model,
)
from gbtrain.families import DEFAULT_FAMILY, family_of_model
from gbtrain.judges import Judge, judge_from_spec, judge_usage
from gbtrain.parsing import parse_response
from gbtrain.schema import Record
from gbtrain.scoring import (
    Predictions,
    ScoreOptions,
    localization_map,
    read_predictions,
    reasoning_accuracy,
    recognition_rate,
    score,
)
from gbtrain.vocabulary import ALL_SETTINGS, ANSWER_BASED, L1, L2, LEVELS, MODE_OF_SHORT, MODES, one_of, setting_name


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


class Evaluator:
    """Runs settings against one backend and writes predictions, resumably."""

    def __init__(self, backend: Backend, data_dir: str | Path, out_dir: str | Path, options: EvalOptions,
                 tokenizer=None, progress: bool = True):
        self.backend, self.data_dir, self.out = backend, Path(data_dir), Path(out_dir)
        self.opts, self.tokenizer, self.progress = options, tokenizer, progress
        self._records: dict[str, list[Record]] = {}

    def records(self, level: str) -> list[Record]:
        if level not in self._records:
            recs = load_level(self.data_dir, level).records
            if not recs:
                raise ValueError(f"{self.data_dir}: no {level} records")
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
        return prompts.single_turn(r.level, s.mode, o.coords, regions, refs)

    def _too_long(self, chunk: list[Record], texts: list[str], sampling: SamplingOptions) -> list[str | None]:
        """Per record: why its prompt cannot fit the context (None when it fits or cannot be checked).
        Lengths follow the builder's rule (chat template + image tokens, gbtrain.sft_dataset.LengthCounter)."""
        if self.tokenizer is None or not self.opts.max_model_len:
            return [None] * len(chunk)
        from gbtrain.sft_dataset import LengthCounter

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
            rows.append({"response": "", "error": error} if error else {"response": reply})
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
            lambda r: prompts.turn_compare(),
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
        return ScoreOptions(s.level, s.mode, self.opts.coords, self.opts.budget, match_radius)

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


GRADING_SCHEMA = {
    "type": "array",
    "items": {"type": "object", "properties": {
        "bbox_2d": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4},
        "text": {"type": "string"}, "answer": {"type": "string"}, "correctness": {"type": "boolean"}},
        "required": ["bbox_2d", "text", "answer", "correctness"]},
}


@dataclass
class EvalRun(ModelOptions):
    """Everything one `eval/run_eval.py` call needs: ModelOptions (how the model is asked) and these. Each field
    is a flag of run_eval.py (gbtrain.cli.add_options)."""

    model: str = option(help="checkpoint folder or hub id (openai: the served model name)")
    data: str = option(help="GradingBench-layout folder")
    out: str = option(help="output folder (predictions, reports, overlays)")
    settings: str = option("all", "all, or a list such as L1-af,L3-ab")
    three_turn: bool = option(False, "also run the locate / solve / compare decomposition")
    diagnostics: bool = option(False, "L1 localization/recognition/reasoning only")
    judge: str = option("rule", judge_usage)
    l2_margin: float | None = option(None, "margin of L2 regions derived from answers (pages without question "
                                           "marks); default: the checkpoint's training build's, else 0.02")
    batch_size: int = option(256, "records per backend call and flushed chunk")
    limit: int | None = option(None, "first N records of each level")
    overwrite: bool = option(False, "redo settings instead of resuming")
    overlays: int = option(4, "records drawn per L1/L3 setting")


RUN_RECORD = "run.json"


def run_identity(run: EvalRun, coords: str, budget: PixelBudget, l2_margin: float = DEFAULT_L2_MARGIN) -> dict:
    """What makes an evaluation folder's predictions: the model, how it was asked, and on which data.
    (`--limit`, batch sizes, parallelism and the judge may change between reruns: they do not change a line.)"""
    data = Path(run.data)
    model = str(Path(run.model).resolve()) if Path(run.model).is_dir() else run.model
    base_url = without_credentials(run.base_url) if run.base_url else None
    return {"model": model, "backend": run.backend, "base_url": base_url, "coords": coords,
            "min_pixels": budget.min_pixels, "max_pixels": budget.max_pixels, "l2_margin": l2_margin,
            "prompt_hash": prompts.prompt_fingerprint(), "max_tokens": run.max_tokens, "structured": run.structured,
            "data": str(data.resolve()), "annotations_sha256": annotations_sha256(data)}


class FolderLock:
    """An exclusive lock on OUTDIR/.lock for the whole run (released by the OS if the process dies), so two
    runs never append to the same prediction files; the holder's pid is in the file for the message."""

    def __init__(self, out: Path):
        self.path = out / ".lock"

    def __enter__(self):
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.seek(0)
            holder = self.file.read().strip() or "another process"
            self.file.close()
            raise ValueError(f"{self.path.parent} is in use by another evaluation ({holder}): wait for it to "
                             f"finish, or choose another --out") from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(f"pid {os.getpid()}")
        self.file.flush()
        return self

    def __exit__(self, *exc):
        self.file.close()


def _recorded_identity(path: Path) -> dict | None:
    """An earlier run's run.json; None when it cannot be read (it cannot vouch for the predictions beside it)."""
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return None
    return recorded if isinstance(recorded, dict) else None


def claim_output_folder(out: Path, identity: dict, overwrite: bool, results: str = "predictions") -> None:
    """Record what makes this folder's predictions; a rerun with anything else is refused rather than mixed
    with them (or, with --overwrite, the old predictions go first). A record without predictions (a run that
    stopped before its first batch) is replaced. `results`: the subfolder that holds the work (grading new
    pages keeps its per-page files in OUT/pages)."""
    path = out / RUN_RECORD
    predictions = out / results
    if path.is_file() and predictions.is_dir() and any(predictions.iterdir()):
        recorded = _recorded_identity(path)
        differs = identity_differences(recorded, identity) if recorded is not None else [f"{path} cannot be read"]
        if differs and not overwrite:
            raise ValueError(f"{out} holds predictions made otherwise ({'; '.join(differs)}): choose another "
                             f"--out, or pass --overwrite to discard them")
        if differs:
            shutil.rmtree(predictions, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(identity, indent=1) + "\n", encoding="utf-8")


def check_run(run: EvalRun) -> None:
    """Every count option at least 1 (or 0 where none makes sense), before anything is loaded: `--limit 0`
    used to mean "everything" and a zero batch size looped."""
    at_least = {"max_tokens": (run.max_tokens, 1), "max_model_len": (run.max_model_len, 1),
                "tensor_parallel_size": (run.tensor_parallel_size, 1),
                "data_parallel_size": (run.data_parallel_size, 1), "batch_size": (run.batch_size, 1),
                "overlays": (run.overlays, 0), "concurrency": (run.concurrency, 1),
                "hf_batch_size": (run.hf_batch_size, 1)}
    for key in ("limit", "min_pixels", "max_pixels", "kv_cache_gib", "l2_margin"):
        if getattr(run, key) is not None:
            at_least[key] = (getattr(run, key), {"kv_cache_gib": 1e-9, "l2_margin": 0}.get(key, 1))
    bad = below_minimum({f"--{k.replace('_', '-')}": v for k, v in at_least.items()}, sep=" ")
    if bad:
        raise ValueError("; ".join(bad))
    if run.backend not in BACKENDS:
        raise ValueError(f"unknown backend {run.backend!r}: {one_of(BACKENDS)}")
    if not run.out.strip():
        raise ValueError("--out is empty: name the output folder")


@dataclass(frozen=True)
class RunPlan:
    """What a run resolved from its options and its model before touching the output folder."""

    coords: str
    budget: PixelBudget
    l2_margin: float
    settings: list[Setting]
    memory: VLLMMemory
    judge: Judge  # an LLM judge's engine starts only when first asked


def plan_run(run: EvalRun) -> RunPlan:
    """The model found, its coords and pixel budget, the settings, the engine memory and the judge, each checked,
    so that a run refused for any of them leaves no lock, record or prediction behind."""
    if BACKENDS[run.backend].loads_model:  # an endpoint's model is the endpoint's name for it
        require_model(run.model)
    coords = run.coords or default_coords(run.model)
    if coords not in CONVENTIONS:
        raise ValueError(f"--coords {coords!r}: unknown coordinate convention; choose one of {', '.join(CONVENTIONS)}")
    base_budget = default_budget(run.model)
    budget = PixelBudget(base_budget.min_pixels if run.min_pixels is None else run.min_pixels,
                         base_budget.max_pixels if run.max_pixels is None else run.max_pixels, base_budget.factor)
    l2_margin = default_l2_margin(run.model) if run.l2_margin is None else run.l2_margin
    memory = VLLMMemory(run.kv_cache_gib, run.gpu_memory_utilization)
    return RunPlan(coords, budget, l2_margin, parse_settings(run.settings, run.three_turn), memory,
                   judge_from_spec(run.judge, memory))


def evaluate_checkpoint(run: EvalRun, progress: bool = True) -> dict:
    """Resolve, run the settings, score and write; returns the report (also OUTDIR/report.json, report.md,
    report.html, plots/, overlays/). Options, inputs and the model are checked first; the output folder is then
    held for the whole run."""
    plan = resolve_run(run)
    out = Path(run.out)
    with FolderLock(out):
        identity = run_identity(run, plan.coords, plan.budget, plan.l2_margin)
        claim_output_folder(out, identity, run.overwrite)  # before any model starts
        ev, diagnostics = run_settings(run, plan, progress)
        scored = {s.name: ev.score(s, plan.judge) for s in plan.settings}
        return write_reports(ev, plan.settings, scored, run_meta(run, plan, identity), diagnostics, run.overlays)


def resolve_run(run: EvalRun) -> RunPlan:
    """The options, the data folder and the model checked and resolved, before anything is written."""
    check_run(run)
    if not Path(run.data).is_dir():
        raise FileNotFoundError(f"data directory not found: {run.data}")
    overlap = overlapping("--out", run.out, {"--data": run.data})
    if overlap:  # --overwrite deletes OUT/predictions; the data's own folders must never be in reach
        raise ValueError(f"{overlap[0]}: choose another --out")
    return plan_run(run)


def open_backend(run: EvalRun, plan: RunPlan):
    """The evaluated model's backend as the run's options ask, and its tokenizer (None for an endpoint: its
    prompts cannot be measured here). Grading new pages (gbtrain.grading) opens its model here too, so both
    tools ask a checkpoint the same way."""
    options = BackendOptions(plan.budget, run.max_model_len, run.tensor_parallel_size, run.data_parallel_size,
                             run.structured, plan.memory, run.hf_batch_size, run.base_url, run.api_key_env,
                             run.concurrency)
    backend = BACKENDS[run.backend].from_options(run.model, options)
    return backend, backend.tokenizer()


def setting_sampling(run: EvalRun, s: Setting) -> SamplingOptions:
    """A setting's sampling: the run's token limit, and the grading JSON schema for a single-turn setting of a
    `--structured` run (the three-turn replies are other shapes)."""
    return SamplingOptions(max_tokens=run.max_tokens,
                           json_schema=GRADING_SCHEMA if run.structured and not s.three_turn else None)


def run_settings(run: EvalRun, plan: RunPlan, progress: bool = True) -> tuple[Evaluator, dict | None]:
    """Every setting's predictions (resuming what is there) and, when asked, the L1 diagnostics; the backend is
    closed after, so an LLM judge gets the memory the evaluated model held. Returns the evaluator (its records,
    images and predictions, for scoring and writing) and the diagnostics."""
    backend, tokenizer = open_backend(run, plan)
    ev = Evaluator(backend, Path(run.data), Path(run.out),
                   EvalOptions(plan.coords, plan.budget, SamplingOptions(max_tokens=run.max_tokens), run.batch_size,
                               run.max_model_len if tokenizer else None, run.limit, plan.l2_margin),
                   tokenizer=tokenizer, progress=progress)
    for s in plan.settings:
        ev.run(s, overwrite=run.overwrite, sampling=setting_sampling(run, s))
    diagnostics = run_diagnostics(ev) if run.diagnostics else None
    backend.close()
    return ev, diagnostics


def run_meta(run: EvalRun, plan: RunPlan, identity: dict) -> dict:
    """The report's `meta`: what was evaluated, how, and what scored it."""
    from gbtrain.scoring import scorer_sha256

    return {"model": run.model, "backend": run.backend, "coords": plan.coords,
            "judge": without_credentials(run.judge), "min_pixels": plan.budget.min_pixels,
            "max_pixels": plan.budget.max_pixels, "max_tokens": run.max_tokens,
            "prompt_hash": prompts.prompt_fingerprint(), "scorer_sha256": scorer_sha256(), "limit": run.limit,
            "structured": run.structured, "data": identity["data"],
            "annotations_sha256": identity["annotations_sha256"]}


def write_reports(ev: Evaluator, settings: list[Setting], scored: dict[str, dict], meta: dict,
                  diagnostics: dict | None, overlays: int) -> dict:
    """OUTDIR/report.json, report.md, plots/, overlays/ (the first `overlays` records of each single-turn L1/L3
    setting) and report.html, from the scored settings; returns the report. The groups' outcomes, which
    report.json leaves out, go to report.html's records."""
    from gbtrain import html_report, reports
    from gbtrain.parsing import normalize_items
    from gbtrain.scoring import item_boxes, write_report

    out = ev.out
    report = reports.build_report(scored, meta, diagnostics)
    write_report(report, out / "report.json")
    (out / "report.md").write_text(reports.markdown(report), encoding="utf-8")
    reports.plots(report, out / "plots")
    for s in settings:
        if s.three_turn or s.level == L2 or overlays <= 0:
            continue
        responses = ev.predictions(s).responses
        for r in ev.records(s.level)[:overlays]:
            items = item_boxes(normalize_items(parse_response(responses.get(r.record_id)).items), r,
                               ev.score_options(s))
            reports.overlay(ev.image(r), r, scored[s.name], items,
                            out / "overlays" / f"{s.name}_{reports.safe_name(r.record_id)}.png")
    html_report.write_run_page(out, report, {name: rep["groups"] for name, rep in scored.items()})
    return report

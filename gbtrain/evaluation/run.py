"""One evaluation run of a checkpoint (eval/run_eval.py, and each checkpoint select_checkpoint.py scores): its
options, the identity that its output folder is claimed with, the folder lock, and the steps from opening a backend
to the written reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gbtrain import prompts
from gbtrain.config import below_minimum, option, out_of_bounds, require_model
from gbtrain.coords import CONVENTIONS, DEFAULT_L2_MARGIN, PixelBudget
from gbtrain.data.annotations import annotations_sha256
from gbtrain.data.held_out import HeldOut, SplitFlags, resolve_held_out
from gbtrain.evaluation.engine import (
    GRADING_SCHEMA,
    EvalOptions,
    Evaluator,
    Setting,
    default_budget,
    default_coords,
    default_l2_margin,
    parse_settings,
    recorded_build,
    run_diagnostics,
)
from gbtrain.files import write_table
from gbtrain.inference.base import BackendOptions, SamplingOptions, VLLMMemory
from gbtrain.inference.registry import BACKENDS, ModelOptions
from gbtrain.metric.intervals import IntervalFlags
from gbtrain.metric.judges import Judge, judge_from_spec, judge_usage
from gbtrain.metric.parsing import parse_response
from gbtrain.metric.points import PointsFlags
from gbtrain.metric.scoring import GateFlags
from gbtrain.outputs import FolderLock, claim_output_folder, overlapping, require_out
from gbtrain.text import redact, safe_name
from gbtrain.vocabulary import L2, one_of


@dataclass
class EvalRun(ModelOptions, PointsFlags, IntervalFlags, SplitFlags, GateFlags):
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
    batch_size: int = option(256, "records per backend call and flushed chunk", bounds=(1, 65_536))
    limit: int | None = option(None, "first N records of each level", bounds=(1, 10**7))
    overwrite: bool = option(False, "redo settings instead of resuming")
    overlays: int = option(4, "records drawn per L1/L3 setting", bounds=(0, 10_000))


def run_identity(run: EvalRun, coords: str, budget: PixelBudget, l2_margin: float = DEFAULT_L2_MARGIN,
                 held_out: HeldOut | None = None) -> dict:
    """What makes an evaluation folder's predictions: the model, how it was asked, and on which data (the folder,
    and which of its records: `held_out`, every record when None).
    (`--limit`, batch sizes, parallelism and the judge may change between reruns: they do not change a line.)"""
    data = Path(run.data)
    model = str(Path(run.model).resolve()) if Path(run.model).is_dir() else run.model
    base_url = redact(run.base_url) if run.base_url else None
    return {"tool": "run_eval", "model": model, "backend": run.backend, "base_url": base_url, "coords": coords,
            "min_pixels": budget.min_pixels, "max_pixels": budget.max_pixels, "l2_margin": l2_margin,
            "prompt_hash": prompts.prompt_fingerprint(), "max_tokens": run.max_tokens, "structured": run.structured,
            "data": str(data.resolve()), "annotations_sha256": annotations_sha256(data),
            "split": held_out.split if held_out else "all", "build": held_out.build if held_out else None}


def check_run(run: EvalRun) -> None:
    """Every count within its bounds (config.option's: `--limit 0` used to mean "everything" and a zero batch size
    looped) and the other numbers at their least, before anything is loaded (a run made in code too)."""
    at_least = {"request_timeout": (run.request_timeout, 1)}
    for key in ("kv_cache_gib", "l2_margin"):
        if getattr(run, key) is not None:
            at_least[key] = (getattr(run, key), {"kv_cache_gib": 1e-9, "l2_margin": 0}[key])
    bad = out_of_bounds(run, sep=" ", flags=True) + below_minimum(
        {f"--{k.replace('_', '-')}": v for k, v in at_least.items()}, sep=" ")
    if bad:
        raise ValueError("; ".join(bad))
    if run.backend not in BACKENDS:
        raise ValueError(f"unknown backend {run.backend!r}: {one_of(BACKENDS)}")
    run.points_options()  # refuses bad bands, resample counts and seeds before any model loads
    run.interval_options()
    run.check_gate(run.judge)
    require_out(run.out)


@dataclass(frozen=True)
class RunPlan:
    """What a run resolved from its options and its model before touching the output folder."""

    coords: str
    budget: PixelBudget
    l2_margin: float
    settings: list[Setting]
    memory: VLLMMemory
    judge: Judge  # an LLM judge's engine starts only when first asked
    held_out: HeldOut  # which records of --data are evaluated


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
    held_out = resolve_held_out(run.data, run.split, run.build,
                                recorded_build(run.model) if BACKENDS[run.backend].loads_model else None)
    return RunPlan(coords, budget, l2_margin, parse_settings(run.settings, run.three_turn), memory,
                   judge_from_spec(run.judge, memory), held_out)


def evaluate_checkpoint(run: EvalRun, progress: bool = True) -> dict:
    """Resolve, run the settings, score and write; returns the report (also OUTDIR/report.json, report.md,
    report.html, plots/, overlays/). Options, inputs and the model are checked first; the output folder is then
    held for the whole run."""
    plan = resolve_run(run)
    out = Path(run.out)
    with FolderLock(out):
        identity = run_identity(run, plan.coords, plan.budget, plan.l2_margin, plan.held_out)
        claim_output_folder(out, identity, run.overwrite)  # before any model starts
        ev, diagnostics = run_settings(run, plan, progress)
        scored = {s.name: ev.score(s, plan.judge) for s in plan.settings}
        evaluated = [r for level in sorted({s.level for s in plan.settings}) for r in ev.records(level)]
        meta = run_meta(run, plan, identity) | {"held_out": plan.held_out.record(evaluated)}
        return write_reports(ev, plan.settings, scored, meta, diagnostics, run.overlays)


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
    prompts cannot be measured here). Grading new pages (gbtrain.grading.grade) opens its model here too, so both
    tools ask a checkpoint the same way."""
    options = BackendOptions(plan.budget, run.max_model_len, run.tensor_parallel_size, run.data_parallel_size,
                             run.structured, plan.memory, run.hf_batch_size, run.base_url, run.api_key_env,
                             run.concurrency, request_timeout=run.request_timeout, max_retries=run.max_retries)
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
                               run.max_model_len if tokenizer else None, run.limit, plan.l2_margin,
                               run.points_options(), run.interval_options(), plan.held_out, run.gate_options()),
                   tokenizer=tokenizer, progress=progress)
    for s in plan.settings:
        ev.run(s, overwrite=run.overwrite, sampling=setting_sampling(run, s))
    diagnostics = run_diagnostics(ev) if run.diagnostics else None
    backend.close()
    return ev, diagnostics


def run_meta(run: EvalRun, plan: RunPlan, identity: dict) -> dict:
    """The report's `meta`: what was evaluated, how, and what scored it."""
    from gbtrain.metric.scoring import scorer_sha256

    return {"model": run.model, "backend": run.backend, "coords": plan.coords,
            "judge": redact(run.judge), "min_pixels": plan.budget.min_pixels,
            "max_pixels": plan.budget.max_pixels, "max_tokens": run.max_tokens,
            "prompt_hash": prompts.prompt_fingerprint(), "scorer_sha256": scorer_sha256(), "limit": run.limit,
            "structured": run.structured, "data": identity["data"],
            "annotations_sha256": identity["annotations_sha256"],
            "point_bands": list(run.points_options().bands), "large_error": run.large_error,
            **run.gate_options()}


def write_reports(ev: Evaluator, settings: list[Setting], scored: dict[str, dict], meta: dict,
                  diagnostics: dict | None, overlays: int) -> dict:
    """OUTDIR/report.json, outcomes.jsonl, report.md, plots/, overlays/ (the first `overlays` records of each
    single-turn L1/L3 setting) and report.html, from the scored settings; returns the report. The groups' outcomes,
    which report.json leaves out, go to report.html's records and, page by page, to outcomes.jsonl (what
    eval/compare.py pairs; report.json's meta records its hash)."""
    from gbtrain.evaluation import html_report, reports
    from gbtrain.metric.parsing import normalize_items
    from gbtrain.metric.scoring import QUESTION_COLUMNS, item_boxes, question_rows, write_report

    out = ev.out
    outcomes = reports.outcomes_text(scored)
    report = reports.build_report(scored, meta | {"outcomes": reports.outcomes_record(outcomes)}, diagnostics)
    (out / reports.OUTCOMES_FILE).write_text(outcomes, encoding="ascii")
    write_report(report, out / "report.json")
    write_table(out / "questions.csv", QUESTION_COLUMNS,
                [row for name, rep in sorted(scored.items()) for row in question_rows(name, rep)])
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
                            out / "overlays" / f"{s.name}_{safe_name(r.record_id)}.png")
    html_report.write_run_page(out, report, {name: rep["groups"] for name, rep in scored.items()})
    return report

"""Checkpoint selection: score every checkpoint a training run saved on held-out pages with the gated metric and
name the best one, instead of choosing by eval loss (which the demo shows can fall while accuracy stays at 0).

Each checkpoint is evaluated by gbtrain.evaluation.run.evaluate_checkpoint (same backends, prompts and scorer as
eval/run_eval.py) with the coordinate convention, pixel budget and L2 margin of the run's training data (one
record for the whole run: the root's, a checkpoint's, or the training dataset's). A LoRA checkpoint is
merged into its base first (gbtrain.train.merge, as recipes/merge_lora.py does): the backends serve plain checkpoints,
and a LoRA run also trains the merger fully, which a vLLM LoRA adapter cannot carry.

    OUT/selection_run.json     what made the folder (training run, data, split, settings, limit, how the model is
                               asked); a rerun with anything else is refused (--overwrite discards the work)
    OUT/data/                  the evaluated split of --data in the GradingBench layout (annotations of the split's
                               records, images linked to --data's own)
    OUT/<checkpoint>/          one evaluation run folder per checkpoint (predictions/, report.json, report.md, ...)
    OUT/merged/<checkpoint>/   a LoRA checkpoint merged into its base (deleted after scoring with keep_merged false)
    OUT/selection.csv, .md, .png, .json   the table by step, the plot, the best checkpoint and the failures
    OUT/selective_threshold.json          with --target-accuracy, --review-budget or --max-error: the review
                                          threshold chosen on the best checkpoint's evaluation per L3 setting (a
                                          certified one at --delta / the checkpoints compared), also written into
                                          the --copy-best folder, where eval/grade_pages.py applies it

A checkpoint whose folder holds a report.json is not evaluated again, so a rerun resumes (and, after the training
continued, scores only the new checkpoints). A checkpoint that cannot be evaluated (no weights, damaged weights, a
model that does not load) is listed with the reason and tried again by the next run; the others go on.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from dataclasses import dataclass, fields, replace
from pathlib import Path

from gbtrain.cli import describe
from gbtrain.config import option, require_model
from gbtrain.coords import CONVENTIONS, PixelBudget
from gbtrain.data.annotations import annotations_sha256, image_root, load_level, write_level
from gbtrain.data.held_out import resolve_held_out
from gbtrain.data.sft_dataset import finished_build
from gbtrain.data.splits import SplitRule
from gbtrain.evaluation.engine import parse_settings
from gbtrain.evaluation.run import EvalRun, check_run, evaluate_checkpoint
from gbtrain.files import read_json, write_atomic, write_table
from gbtrain.inference.registry import ModelOptions
from gbtrain.metric.judges import judge_from_spec, judge_usage
from gbtrain.metric.selective import SelectiveFlags, choose_threshold, merge_units, rule_flag
from gbtrain.outputs import (
    COPY_MARKER,
    SELECTION_RECORD,
    SELECTIVE_RECORD,
    TRAINING_RECORD,
    FolderLock,
    claim_output_folder,
    overlapping,
)
from gbtrain.schema import Record
from gbtrain.text import markdown_code, markdown_text, redact
from gbtrain.train.checkpoints import (
    Checkpoint,
    CheckpointRecord,
    eval_losses,
    find_checkpoints,
    read_training_run,
    training_record,
    write_checkpoint_record,
)
from gbtrain.vocabulary import L3

SPLITS = ("validation", "test", "all")
METRICS = ("accuracy", "map")
NOT_COPIED = ("optimizer.pt", "scheduler.pt", "rng_state*.pth", "global_step*", "latest", "zero_to_fp32.py",
              "training_args.bin", "trainer_state.json", "checkpoint-*", "runs", TRAINING_RECORD)
_EVAL_FOLDER = re.compile(r"(checkpoint|final)-\d+")


@dataclass
class SelectRun(ModelOptions, SelectiveFlags):
    """Everything one `eval/select_checkpoint.py` call needs: ModelOptions (how each checkpoint is asked; coords,
    pixels and the L2 margin default to the run's record), SelectiveFlags (the review threshold chosen on the best
    checkpoint's evaluation) and these. Each field is a flag of select_checkpoint.py (gbtrain.cli.add_options)."""

    run: str = option(help="training output_dir (recipes/sft_qwen.py output_dir=...)")
    data: str = option(help="GradingBench-layout folder (the training set's source)")
    out: str = option(help="output folder (one evaluation per checkpoint, the table, the plot)")
    settings: str = option("L1-af,L3-ab", "single-turn settings, e.g. L1-af,L2-ab,L3-af (or all)")
    split: str = option("validation", "pages of --data the training build put in this split (all: a held-out "
                                      "folder)", choices=SPLITS)
    limit: int | None = option(None, "first N records of each level", bounds=(1, 10**7))
    metric: str = option("accuracy", "accuracy: mean gated accuracy, ties by mean mAP; map: the reverse; then the "
                                     "earlier step", choices=METRICS)
    base: str | None = option(None, "LoRA runs: the base model (default: the one the run recorded)")
    allow_other_base: bool = option(False, "merge although --base is not the adapters' recorded base (same weights, "
                                           "other name)")
    judge: str = option("rule", judge_usage)
    l2_margin: float | None = option(None, "default: the run's training build's")
    batch_size: int = option(256, "records per backend call", bounds=(1, 65_536))
    keep_merged: bool = option(True, "keep LoRA checkpoints merged under OUT/merged (--no-keep-merged: deleted "
                                     "after scoring)")
    copy_best: str | None = option(None, "copy (LoRA: merge) the best checkpoint into this folder")
    overwrite: bool = option(False, "discard the earlier evaluations in --out and redo")


# --------------------------------------------------------------------------------- the evaluated records
def split_records(data: str | Path, levels: list[str], split: str, dataset: str | None) -> dict[str, list[Record]]:
    """The records of each level whose page the training build put in `split`, told by their pixels
    (gbtrain.data.held_out), so no checkpoint is scored on pages it trained on; `all`: every record (a held-out
    folder)."""
    loaded = {lvl: load_level(data, lvl).records for lvl in levels}
    if split == "all":
        return loaded
    if not dataset or not Path(dataset).is_dir():
        raise FileNotFoundError(f"the run's training dataset {dataset} is gone: its build record gives the {split} "
                                f"split; pass --split all to evaluate every record of a held-out --data")
    held = resolve_held_out(data, split, dataset, None)
    chosen = {lvl: [r for r in recs if held.keeps(r)] for lvl, recs in loaded.items()}
    for lvl, recs in chosen.items():
        if not recs:
            raise ValueError(f"{data}: no {lvl} record is a page {dataset} put in its {split} split (told by their "
                             f"pixels): pass --split all to evaluate every record of a held-out folder, or other "
                             f"--settings")
    return chosen


def write_split(records: dict[str, list[Record]], source: str | Path, folder: Path) -> None:
    """`folder` as a GradingBench-layout folder of `records`: their annotations, and each level's images linked to
    the source's (nothing is copied)."""
    for level, recs in records.items():
        write_level(folder, level, recs)
        link = image_root(folder, level)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.is_file():
            link.unlink()
        elif link.is_dir():
            shutil.rmtree(link)
        link.symlink_to(image_root(source, level).resolve(), target_is_directory=True)


# --------------------------------------------------------------------------------- the output folder
def _evaluation_folders(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("*-*") if p.is_dir() and _EVAL_FOLDER.fullmatch(p.name))


def claim_selection_folder(out: Path, identity: dict, overwrite: bool) -> None:
    """Record what makes this folder's evaluations; a rerun with anything else is refused rather than mixed into
    one table (--overwrite discards the earlier evaluations, merged copies and split instead)."""
    work = [p.name for p in _evaluation_folders(out)] + ["merged", "data"] if out.is_dir() else []
    claim_output_folder(out, identity | {"tool": "select_checkpoint"}, overwrite, work, record=SELECTION_RECORD,
                        discard=True)


def merge_checkpoint(base: str, adapter: Path, dest: Path, allow_other_base: bool) -> Path:
    """`adapter` merged into `base` at `dest` (kept from an earlier run when complete: a merge is written beside
    it and renamed when done, so a merge cut short is never taken for a model)."""
    from gbtrain.train.merge import merge_lora

    if dest.is_dir():
        return dest
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        merge_lora(base, str(adapter), str(partial), allow_other_base=allow_other_base)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    partial.rename(dest)
    return dest


# --------------------------------------------------------------------------------- the table
def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 6)


def table_row(c: Checkpoint, report: dict | None, settings: list[str], eval_loss: float | None,
              problem: str | None = None) -> dict:
    """One checkpoint's figures, as its report.json has them (accuracy 0-1, mAP 0-100), or the reason it has none."""
    row = {"checkpoint": c.name, "step": c.step, "kind": c.kind, "status": "ok" if report else "failed",
           "accuracy": {}, "map": {}, "mean_accuracy": None, "mean_map": None, "eval_loss": eval_loss,
           "problem": problem}
    if report:
        row["accuracy"] = {s: report["settings"][s]["accuracy"] for s in settings}
        row["map"] = {s: report["settings"][s]["map_20_50"] for s in settings}
        row["mean_accuracy"] = _mean(list(row["accuracy"].values()))
        row["mean_map"] = _mean(list(row["map"].values()))
    return row


def best_row(rows: list[dict], metric: str = "accuracy") -> dict | None:
    """The best scored row: highest mean gated accuracy, ties by mean mAP (metric "map": the reverse), then the
    earlier step (fewer steps, same figures: less chance of having fitted the training pages)."""
    first, second = ("mean_accuracy", "mean_map") if metric == "accuracy" else ("mean_map", "mean_accuracy")
    scored = [r for r in rows if r["status"] == "ok"]
    return min(scored, key=lambda r: (-r[first], -r[second], r["step"])) if scored else None


def write_csv(rows: list[dict], settings: list[str], path: Path) -> None:
    columns = ("checkpoint", "step", "status", *[f"accuracy {s}" for s in settings], *[f"mAP {s}" for s in settings],
               "mean_accuracy", "mean_map", "eval_loss", "problem")
    write_table(path, columns, [{**r, **{f"accuracy {s}": r["accuracy"].get(s) for s in settings},
                                 **{f"mAP {s}": r["map"].get(s) for s in settings}} for r in rows])


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def markdown(summary: dict) -> str:
    """selection.md. Text from files (folder names in the notes, a library's error in a problem, paths) is quoted
    with markdown_text or markdown_code: a checkpoint-<img ...> folder shows as its name, never as HTML."""
    ident = {k: markdown_text(v) for k, v in summary["identity"].items()}
    code = {k: markdown_code(v) for k, v in summary["identity"].items()}
    settings, rows, best = summary["settings"], summary["rows"], summary["best"]
    limit = f"first {ident['limit']} records per level" if summary["identity"]["limit"] else "every record"
    rule = ("gated accuracy, ties by mAP" if summary["metric"] == "accuracy" else "mAP, ties by gated accuracy")
    lines = [f"# Checkpoint selection: {ident['run']}", "",
             f"Data {code['data']}, split {code['split']} ({limit}), backend {code['backend']}, judge "
             f"{code['judge']}; best by mean {rule}, then the earlier step. Accuracy in %, mAP@[.2:.5] 0-100.", "",
             "| checkpoint | step | " + " | ".join(f"acc {s}" for s in settings)
             + " | mean acc | mean mAP | eval loss |",
             "|---|---:|" + "---:|" * (len(settings) + 3)]
    for r in rows:
        mark = " **(best)**" if best and r["checkpoint"] == best["checkpoint"] else ""
        if r["status"] != "ok":
            lines.append(f"| {r['checkpoint']} | {r['step']} | " + " | ".join("–" for _ in settings)
                         + f" | failed | | {_loss(r['eval_loss'])} |")
            continue
        lines.append(f"| {r['checkpoint']}{mark} | {r['step']} | "
                     + " | ".join(_pct(r["accuracy"][s]) for s in settings)
                     + f" | {_pct(r['mean_accuracy'])} | {r['mean_map']:.2f} | {_loss(r['eval_loss'])} |")
    lines.append("")
    if best:
        lines.append(f"Best: **{best['checkpoint']}** (step {best['step']}): mean accuracy "
                     f"{_pct(best['mean_accuracy'])}%, mean mAP {best['mean_map']:.2f}; folder "
                     f"{markdown_code(best['path'])}.")
    chosen = summary.get("selective")
    if chosen:
        shared = (f" (delta divided among the {chosen['candidates']} checkpoints compared on it)"
                  if "max_error" in chosen["rule"] else "")
        lines += ["", f"Review threshold ({_rule_text(chosen['rule'])}), chosen on {markdown_text(chosen['split'])} "
                      f"with {markdown_text(chosen['checkpoint'])}{shared}:", ""]
        lines += [f"- {name}: " + (f"{c['threshold']:.2f} (coverage {_pct(c['coverage'])}%, accuracy "
                                   f"{_pct(c['accuracy'])}%)" if c["threshold"] is not None
                                   else f"none: {markdown_text(c['problem'])}")
                  for name, c in chosen["settings"].items()]
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["", "Not evaluated (the next run tries again):", ""]
        lines += [f"- {r['checkpoint']}: {markdown_text(r['problem'])}" for r in failed]
    if summary["notes"]:
        lines += ["", "Notes:", ""] + [f"- {markdown_text(n)}" for n in summary["notes"]]
    return "\n".join(lines) + "\n"


def _rule_text(rule: dict) -> str:
    """A selective rule as the table's note says it: `target accuracy 95%`, `review budget 20%` or `certified error
    of items 5% at delta 5%`."""
    if "max_error" in rule:
        return (f"certified error of {rule.get('certify', 'items')} {_pct(rule['max_error'])}% at delta "
                f"{_pct(rule['delta'])}%")
    (key, value), = rule.items()
    return f"{key.replace('_', ' ')} {_pct(value)}%"


def _loss(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def plot(rows: list[dict], settings: list[str], best: dict | None, path: Path) -> None:
    """Accuracy and mAP by step: one line per setting and the mean, the best checkpoint ringed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r["status"] == "ok"]
    steps = [r["step"] for r in ok]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, key, mean, scale, title in ((axes[0], "accuracy", "mean_accuracy", 100, "gated accuracy %"),
                                        (axes[1], "map", "mean_map", 1, "mAP@[.2:.5]")):
        for s in settings:
            ax.plot(steps, [scale * r[key][s] for r in ok], marker=".", linewidth=1, alpha=0.7, label=s)
        ax.plot(steps, [scale * r[mean] for r in ok], marker="o", color="black", linewidth=2, label="mean")
        if best:
            ax.scatter([best["step"]], [scale * best[mean]], s=160, facecolors="none", edgecolors="red",
                       linewidths=2, zorder=3, label=f"best ({best['checkpoint']})")
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------- copying the best
def copy_best(c: Checkpoint, dest: Path, merged: Path, base: str, record: CheckpointRecord | None,
              allow_other_base: bool) -> Path:
    """The best checkpoint as a plain model folder that run_eval.py and grade_pages.py read as it is: its weights
    (a LoRA checkpoint merged), processor, and the run's coords and pixel budget record; no trainer state."""
    if dest.is_dir():  # a copy an earlier selection made is replaced (its marker says so); other files are refused
        shutil.rmtree(dest)
    if c.kind == "lora" and merged.is_dir():
        shutil.copytree(merged, dest)
    elif c.kind == "lora":
        from gbtrain.train.merge import merge_lora

        merge_lora(base, str(c.path), str(dest), allow_other_base=allow_other_base)
    else:
        shutil.copytree(c.path, dest, ignore=shutil.ignore_patterns(*NOT_COPIED))
    if record:
        write_checkpoint_record(dest, record)
    (dest / COPY_MARKER).write_text(json.dumps({"checkpoint": c.name, "step": c.step, "from": str(c.path.resolve())},
                                               indent=1) + "\n", encoding="utf-8")
    return dest


def _check_copy_target(dest: Path, inputs: dict[str, str]) -> None:
    overlap = overlapping("--copy-best", dest, inputs)
    if overlap:
        raise ValueError(f"{overlap[0]}: choose another folder")
    if dest.exists() and (not dest.is_dir() or (any(dest.iterdir()) and not (dest / COPY_MARKER).is_file())):
        raise ValueError(f"--copy-best {dest} exists and holds other files: choose a new or empty folder")


# --------------------------------------------------------------------------------- the selection
def _eval_template(sel: SelectRun, record: CheckpointRecord | None) -> EvalRun:
    """The evaluation every checkpoint gets (model and out are set per checkpoint); the run's recorded coords, budget
    and margin unless the user set them."""
    asked = {f.name: getattr(sel, f.name) for f in fields(ModelOptions)}
    if record:
        asked["coords"] = sel.coords or record.coords
        asked["min_pixels"] = sel.min_pixels if sel.min_pixels is not None else record.budget.min_pixels
        asked["max_pixels"] = sel.max_pixels if sel.max_pixels is not None else record.budget.max_pixels
    return EvalRun(**asked, model="", data="", out="", settings=sel.settings, judge=sel.judge,
                   l2_margin=sel.l2_margin if sel.l2_margin is not None else (record.l2_margin if record else None),
                   batch_size=sel.batch_size, limit=sel.limit)


def check_select_run(sel: SelectRun) -> None:
    """Options that are wrong whatever the run holds, before anything is read."""
    if sel.split not in SPLITS:
        raise ValueError(f"--split {sel.split!r}: choose one of {', '.join(SPLITS)}")
    if sel.metric not in METRICS:
        raise ValueError(f"--metric {sel.metric!r}: choose one of {', '.join(METRICS)}")
    if sel.backend not in ("vllm", "hf"):
        raise ValueError(f"--backend {sel.backend!r}: checkpoint selection runs local checkpoints with vllm or hf")
    if sel.coords is not None and sel.coords not in CONVENTIONS:
        raise ValueError(f"--coords {sel.coords!r}: unknown coordinate convention; choose one of "
                         f"{', '.join(CONVENTIONS)}")
    check_run(replace(_eval_template(sel, None), out=sel.out))
    settings = [s.name for s in parse_settings(sel.settings)]
    rule = sel.selective_rule()
    if rule and not threshold_settings(settings):
        raise ValueError(f"{rule_flag(rule)}: --settings {sel.settings} has no L3 setting, the "
                         f"whole pages grade_pages grades: add L3-af or L3-ab")
    judge_from_spec(sel.judge)  # a bad spec would fail each checkpoint's evaluation (an LLM judge starts later)


def select_checkpoint(sel: SelectRun, progress: bool = True) -> dict:
    """Evaluate every checkpoint of a training run (resuming), write the table, plot and best; returns the summary
    (also OUT/selection.json). Every input is checked before the output folder is touched."""
    check_select_run(sel)
    run_dir, out = Path(sel.run), Path(sel.out)
    training = read_training_run(run_dir)
    candidates, notes = find_checkpoints(run_dir)
    if not Path(sel.data).is_dir():
        raise FileNotFoundError(f"data directory not found: {sel.data}")
    overlap = overlapping("--out", out, {"--run": sel.run, "--data": sel.data})
    if overlap:
        raise ValueError(f"{overlap[0]}: choose another --out")
    if sel.copy_best:
        _check_copy_target(Path(sel.copy_best), {"--run": sel.run, "--data": sel.data, "--out": sel.out})
    record = training_record(run_dir, training, candidates)
    base = sel.base or training["model"]
    if any(c.kind == "lora" for c in candidates):
        require_model(base, "--base")
    settings = [s.name for s in parse_settings(sel.settings)]
    rule = sel.selective_rule()
    levels = sorted({s.split("-")[0] for s in settings})
    records = split_records(sel.data, levels, sel.split, training.get("dataset"))
    units = certification_units(records.get(L3, []), training.get("dataset")) if rule and "max_error" in rule else None
    template = _eval_template(sel, record)
    if template.min_pixels is not None and template.max_pixels is not None:  # else each evaluation's check
        PixelBudget(template.min_pixels, template.max_pixels)
    identity = {"run": str(run_dir.resolve()),
                "run_record_sha256": hashlib.sha256((run_dir / TRAINING_RECORD).read_bytes()).hexdigest()[:16],
                "data": str(Path(sel.data).resolve()), "annotations_sha256": annotations_sha256(sel.data),
                "split": sel.split, "settings": settings, "limit": sel.limit, "backend": sel.backend,
                "judge": redact(sel.judge), "base": base if any(c.kind == "lora" for c in candidates)
                else None, "coords": template.coords, "min_pixels": template.min_pixels,
                "max_pixels": template.max_pixels, "l2_margin": template.l2_margin, "max_tokens": sel.max_tokens,
                "max_model_len": sel.max_model_len}
    with FolderLock(out):  # two selections into one folder would merge into and evaluate the same folders
        claim_selection_folder(out, identity, sel.overwrite)
        data = Path(sel.data)
        if sel.split != "all":
            data = out / "data"
            write_split(records, sel.data, data)
        # the split's own folder holds its pages only: each evaluation takes that split of the build, told by their
        # pixels (with `all`, every record of --data, its training pages counted in each report)
        template = replace(template, data=str(data), split=sel.split,
                           build=None if sel.split == "all" else training.get("dataset"))
        return _select(sel, out, candidates, notes, template, settings, identity, base, record, progress, units)


def _evaluate(sel: SelectRun, c: Checkpoint, out: Path, template: EvalRun, base: str, progress: bool) -> dict:
    """One checkpoint's report (merged first when LoRA). Kept apart so that any failure of this checkpoint's own
    files is caught by the caller and the others still run."""
    model = c.path
    merged = out / "merged" / c.name
    if c.kind == "lora":
        model = merge_checkpoint(base, c.path, merged, sel.allow_other_base)
    try:
        return evaluate_checkpoint(replace(template, model=str(model), out=str(out / c.name)), progress)
    finally:
        if c.kind == "lora" and not sel.keep_merged:
            shutil.rmtree(merged, ignore_errors=True)


def _scored(path: Path, settings: list[str]) -> dict | None:
    """An earlier evaluation's report when it is whole: every setting's accuracy and mAP a finite number, as the
    table and the ranking read them (a damaged one is made again: the evaluation resumes from its predictions)."""
    try:
        report = read_json(path)
        figures = [report["settings"][s][key] for s in settings for key in ("accuracy", "map_20_50")]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in figures)
    return report if numbers else None


def _select(sel: SelectRun, out: Path, candidates: list[Checkpoint], notes: list[str], template: EvalRun,
            settings: list[str], identity: dict, base: str, record: CheckpointRecord | None, progress: bool,
            units: tuple[dict[str, str], str] | None = None) -> dict:
    losses = eval_losses(sel.run)
    rows, evaluated_now = [], []
    for c in candidates:
        problem = c.problem
        report = _scored(out / c.name / "report.json", settings) if problem is None else None
        if problem is None and report is None:
            try:
                report = _evaluate(sel, c, out, template, base, progress)
                evaluated_now.append(c.name)
            # A checkpoint's files fail in their libraries' own ways (safetensors, peft, a vLLM engine that does not
            # start): any failure here is this checkpoint's, reported with its type, and the others go on.
            except Exception as e:
                problem = f"{type(e).__name__}: {describe(e)}"
        rows.append(table_row(c, report, settings, losses.get(c.step), problem))
    present = {c.name for c in candidates}
    gone = [p.name for p in _evaluation_folders(out) if p.name not in present]
    if gone:
        notes = [*notes, f"evaluated earlier, no longer in the run (deleted by save_total_limit?): {', '.join(gone)}"]
    best = best_row(rows, sel.metric)
    by_name = {c.name: c for c in candidates}
    summary = {"identity": identity, "settings": settings, "metric": sel.metric, "rows": rows,
               "best": None, "evaluated_now": evaluated_now, "failed": [r["checkpoint"] for r in rows
                                                                        if r["status"] != "ok"],
               "notes": notes, "merged_kept": sel.keep_merged, "copied_to": None, "selective": None}
    if best:
        c = by_name[best["checkpoint"]]
        summary["best"] = {**{k: best[k] for k in ("checkpoint", "step", "kind", "mean_accuracy", "mean_map",
                                                    "eval_loss")}, "path": str(c.path),
                           "evaluation": str(out / c.name)}
    rule = sel.selective_rule()
    if best and rule:
        c = by_name[best["checkpoint"]]
        compared = sum(r["status"] == "ok" for r in rows)  # the best of these was picked on the same evaluation
        chosen = record_threshold(c, out / c.name / "report.json", sel.split, rule, threshold_settings(settings),
                                  compared, units)
        write_atomic(out / SELECTIVE_RECORD, json.dumps(chosen, indent=1) + "\n")
        summary["selective"] = {**chosen, "settings": {name: {k: v for k, v in entry.items() if k != "table"}
                                                       for name, entry in chosen["settings"].items()}}
    write_csv(rows, settings, out / "selection.csv")
    plot(rows, settings, best, out / "selection.png")
    (out / "selection.md").write_text(markdown(summary), encoding="utf-8")
    if not best:
        _write_json(summary, out)
        reasons = "; ".join(f"{r['checkpoint']}: {r['problem']}" for r in rows)
        raise ValueError(f"no checkpoint of {sel.run} could be evaluated ({reasons})")
    if sel.copy_best:
        c = by_name[best["checkpoint"]]
        summary["copied_to"] = str(copy_best(c, Path(sel.copy_best), out / "merged" / c.name, base, record,
                                             sel.allow_other_base))
        if rule:  # where grade_pages reads it
            shutil.copyfile(out / SELECTIVE_RECORD, Path(sel.copy_best) / SELECTIVE_RECORD)
    _write_json(summary, out)
    return summary


def threshold_settings(settings: list[str]) -> list[str]:
    """The settings a review threshold is chosen for: the single-turn L3 ones, as grade_pages asks whole pages."""
    return [s.name for s in parse_settings(",".join(settings)) if s.level == L3 and not s.three_turn]


def certification_units(records: list[Record], dataset: str | None) -> tuple[dict[str, str], str] | None:
    """What a certified threshold counts as drawn independently (docs/metric.md#selective-grading): the student or
    exam the training build's split_group names for each page of `records` (a student's pages share a hand, so they
    are not independent; the build drew them together), as (page -> unit, "split_group <pattern>"); None (each page
    its own unit) when the build names none. A page the pattern names nothing for is SplitRule.key's ValueError."""
    group = getattr(finished_build(dataset), "split_group", None) if dataset and Path(dataset).is_dir() else None
    if not group:
        return None
    rule = SplitRule(0, 0.0, 0.0, group)
    return {r.page_id: rule.key(r) for r in records}, f"split_group {group}"


def record_threshold(c: Checkpoint, report_path: Path, split: str, rule: dict, settings: list[str],
                     candidates: int = 1, units: tuple[dict[str, str], str] | None = None) -> dict:
    """The review threshold `rule` asks for on each of `settings` of the checkpoint's evaluation, with that
    setting's coverage-accuracy table (grade_pages chooses anew from it for another rule) or the reason none was
    chosen: what SELECTIVE_RECORD holds. `candidates`: the checkpoints compared on this evaluation, which a
    certified threshold's delta is divided among; `units`: certification_units, into which the table's pages are
    merged."""
    report = read_json(report_path)
    chosen = {}
    for name in settings:
        table = report["settings"][name].get("selective")
        entry = {"threshold": None, "coverage": None, "accuracy": None, "review_share": None, "problem": None,
                 "table": table}
        try:
            if table is None:  # an evaluation scored before confidences, kept by a rerun
                raise ValueError(f"{report_path} has no coverage-accuracy table (scored before confidences): "
                                 f"rerun with --overwrite")
            if units:
                entry["table"] = table = merge_units(table, *units)
            entry |= choose_threshold(table, rule, candidates)
        except ValueError as e:
            entry["problem"] = str(e)
        chosen[name] = entry
    return {"tool": "select_checkpoint", "checkpoint": c.name, "step": c.step, "split": split, "rule": rule,
            "candidates": candidates, "evaluation": str(report_path.resolve()), "settings": chosen}


def _write_json(summary: dict, out: Path) -> None:
    (out / "selection.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


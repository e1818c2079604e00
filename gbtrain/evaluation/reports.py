"""Evaluation reports: the paper's Table 2 layout, Markdown, plots, overlays, and SFT-vs-base gains."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from PIL import Image

from gbtrain.config import option
from gbtrain.data.drawing import GROUND_TRUTH_COLOR, PREDICTION_COLOR, Shape, cut, draw_shapes
from gbtrain.metric.intervals import (
    IntervalFlags,
    IntervalOptions,
    PageOutcomes,
    PairingError,
    paired_gains,
    setting_values,
)
from gbtrain.schema import Record
from gbtrain.text import markdown_text, redact
from gbtrain.vocabulary import ANSWER_BASED, ANSWER_FREE, LEVELS, setting_name

GATES = ("localized", "recognized", "reasoned", "accuracy")
OUTCOMES_FILE = "outcomes.jsonl"  # beside report.json: each setting's per-page outcomes, what compare pairs
INTERVALS_DOC = "docs/metric.md#intervals-and-paired-gains"
SELECTIVE_SHOWN = (0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99)  # report.md's thresholds; report.json has all 101


@dataclass
class CompareRun(IntervalFlags):
    """Everything one `eval/compare.py` call needs: the two reports by their place, then --out (gbtrain.cli), and
    the paired bootstrap's resamples and seed."""

    base: str = option(help="the base model's report.json (eval/run_eval.py)", positional=True)
    sft: str = option(help="the fine-tuned model's report.json", positional=True)
    out: str = option(help="Markdown file; the plot (.png) and the page (.html) go beside it")


def table2(settings: dict[str, dict]) -> dict:
    """Per level: mAP (of the answer-free run, else the answer-based one), Acc-F, Acc-B; overall = mean of
    the accuracies present (all six in a full run)."""
    table: dict = {}
    accs = []
    for lvl in LEVELS:
        af, ab = (settings.get(setting_name(lvl, mode)) for mode in (ANSWER_FREE, ANSWER_BASED))
        if not af and not ab:
            continue
        row = {"mAP": (af or ab)["map_20_50"], "Acc-F": af["accuracy"] if af else None,
               "Acc-B": ab["accuracy"] if ab else None}
        accs += [v for v in (row["Acc-F"], row["Acc-B"]) if v is not None]
        table[lvl] = row
    table["Overall"] = round(sum(accs) / len(accs), 6) if accs else None
    table["n_accuracies"] = len(accs)
    return table


def three_turn_rows(settings: dict[str, dict]) -> list[dict]:
    rows = []
    for name, rep in sorted(settings.items()):
        if name.endswith("-3t") and name[:-3] in settings:
            one = settings[name[:-3]]
            rows.append({"setting": name[:-3], "single_turn": one["accuracy"], "three_turn": rep["accuracy"],
                         "single_turn_map": one["map_20_50"], "three_turn_map": rep["map_20_50"]})
    return rows


def build_report(settings: dict[str, dict], meta: dict, diagnostics: dict | None) -> dict:
    """report.json: the scored settings without their groups and pages (report.html and OUTCOMES_FILE hold
    those)."""
    slim = {k: {kk: vv for kk, vv in v.items() if kk not in ("groups", "pages")} for k, v in settings.items()}
    return {"meta": meta, "table2": table2(settings), "three_turn": three_turn_rows(settings),
            "diagnostics": diagnostics, "settings": slim}


def outcomes_text(settings: dict[str, dict]) -> str:
    """OUTCOMES_FILE: one JSON line per setting with its pages' outcomes (the scorer's `pages`), ASCII, byte-stable."""
    return "".join(json.dumps({"setting": name, "pages": s["pages"]}, sort_keys=True, separators=(",", ":")) + "\n"
                   for name, s in sorted(settings.items()))


def outcomes_record(text: str) -> dict:
    """What report.json's meta says of its OUTCOMES_FILE, so that compare finds it and knows it unchanged."""
    return {"file": OUTCOMES_FILE, "sha256": hashlib.sha256(text.encode("ascii")).hexdigest()}


@dataclass(frozen=True)
class ReportOutcomes:
    """A report's per-page outcomes (setting -> page -> its outcomes), or why it has none (a line for the gains)."""

    settings: dict[str, dict[str, PageOutcomes]] | None
    why_none: str = ""


def read_outcomes(report_path: str | Path, report: dict) -> ReportOutcomes:
    """The per-page outcomes of each setting of a report.json, from the OUTCOMES_FILE beside it, checked against the
    hash its meta records. A report that predates them, or whose file was not kept beside it, has none (its gains are
    shown without intervals, saying why); a file that is not the one the report was written with is refused."""
    record = report["meta"].get("outcomes")
    if record is None:
        return ReportOutcomes(None, f"{report_path} predates them (its meta names no {OUTCOMES_FILE}): rerun "
                                    f"eval/run_eval.py into its folder to score it again")
    path = Path(report_path).with_name(OUTCOMES_FILE)
    if not path.is_file():
        return ReportOutcomes(None, f"{path} is missing: keep it beside {report_path} (eval/run_eval.py writes both)")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read {path} ({e.strerror}), the per-group outcomes of {report_path}") from None
    if not isinstance(record, dict) or hashlib.sha256(data).hexdigest() != record.get("sha256"):
        raise ValueError(f"{path} is not the file {report_path} was written with (its sha256 differs): restore it, "
                         f"or rerun eval/run_eval.py into that folder to score it again")
    try:
        lines = [json.loads(line) for line in data.decode("ascii").splitlines()]
        settings = {line["setting"]: {page: PageOutcomes.from_json(p) for page, p in line["pages"].items()}
                    for line in lines}
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not an outcomes file of eval/run_eval.py ({e})") from None
    edited = figures_unlike_outcomes(report, settings)
    if edited:
        raise ValueError(f"{report_path}: {edited}, which its {OUTCOMES_FILE} gives: the report was edited after "
                         f"eval/run_eval.py wrote it; rerun eval/run_eval.py into that folder to score it again")
    return ReportOutcomes(settings)


_TOLERANCE = {"map_20_50": 1e-3}  # what a report's rounding may move a figure (mAP: 4 decimals; rates: 6)


def figures_unlike_outcomes(report: dict, settings: dict[str, dict[str, PageOutcomes]]) -> str | None:
    """The first figure of the report that its own per-page outcomes do not give ('L1-af accuracy 0.9 is not 0.5'),
    or None: a gain is computed from the figures and its interval from the outcomes, so both must be the scorer's."""
    for name, pages in sorted(settings.items()):
        figures = report["settings"].get(name)
        if not isinstance(figures, dict) or not pages:
            continue
        values = setting_values(pages)
        for metric in METRICS:
            given, value = figures.get(metric), values[metric]
            if value is not None and isinstance(given, int | float) and not math.isclose(
                    given, value, abs_tol=_TOLERANCE.get(metric, 1e-5)):
                return f"{name} {metric} {given!r} is not {round(value, 6)!r}"
    return None


def _ci(value, interval: list[float] | None = None, scale: float = 100, digits: int = 1) -> str:
    """A figure (a rate in %, by default) with its 95% interval, `57.1 [48.3, 65.0]`; the figure alone where it has
    none, `–` where there is no figure."""
    if value is None:
        return "–"
    text = f"{scale * value:.{digits}f}"
    return text + (f" [{scale * interval[0]:.{digits}f}, {scale * interval[1]:.{digits}f}]" if interval else "")


def _cell(setting: dict | None, metric: str) -> str:
    """A setting's accuracy, gate rate (%) or mAP with its interval (report.json's `intervals`)."""
    if not setting:
        return "–"
    interval = (setting.get("intervals") or {}).get(metric)
    return _ci(setting[metric], interval, 1 if metric == "map_20_50" else 100)


def ranked_map_notes(settings: dict[str, dict]) -> list[str]:
    """mAP ranked by the boxes' confidences (docs/metric.md#confidences) per setting, or why there is none."""
    if not any("map_ranked" in s for s in settings.values()):
        return []  # a report from before confidences
    cells = [f"{name} {r['value']:.2f}" if r["value"] is not None else f"{name}: {r['undefined']}"
             for name, s in sorted(settings.items()) if (r := s.get("map_ranked"))]
    return ["", "mAP ranked by box confidence (101-point): " + "; ".join(cells) + "."]


def interval_notes(settings: dict[str, dict]) -> list[str]:
    """The lines under a table of intervals: how they were made, and the settings that have none, with why."""
    made = [s["intervals"] for s in settings.values() if s.get("intervals")]
    if not made:
        return ["", "No intervals: this report predates them."]
    i = made[0]
    lines = ["", f"[low, high]: 95% interval, {i['method']}, {i['resamples']} resamples, seed {i['seed']} "
                 f"({INTERVALS_DOC})."]
    return lines + [f"{name}: no interval: {s['intervals']['undefined']}." for name, s in sorted(settings.items())
                    if s.get("intervals") and s["intervals"]["undefined"]]


def held_out_lines(meta: dict) -> list[str]:
    """The report's lines on which records were scored: a warning first when the model trained on some of them, and
    whether missing replies were left out (--ignore-missing); none for a report from before evaluations recorded
    either."""
    ignored = ["**Missing replies ignored** (--ignore-missing): each setting is scored over the records the model "
               "answered with items only; its missing and unparsable replies are left out (counted in coverage).",
               ""] if meta.get("ignore_missing") else []
    held = meta.get("held_out")
    if not held:
        return ignored
    lines = [*ignored, f"Records: {markdown_text(held['why'])}.", ""]
    if held["training_records"]:
        lines = [f"**Warning: {held['training_records']} of the evaluated records are pages the model trained on**: "
                 f"these figures overstate what it does on new pages (`--split test` evaluates the held-out ones).",
                 "", *lines]
    return lines


def markdown(report: dict) -> str:
    t = report["table2"]
    meta = {k: markdown_text(v) for k, v in report["meta"].items()}
    lines = [f"# Evaluation: {meta.get('model')}", "",
             f"Backend {meta.get('backend')}, coords {meta.get('coords')}, judge {meta.get('judge')}, pixels "
             f"{meta.get('min_pixels')}-{meta.get('max_pixels')}.", "", *held_out_lines(report["meta"]),
             "## Table 2 layout (accuracy %, mAP@[.2:.5])", ""]
    levels = [lvl for lvl in LEVELS if lvl in t]
    settings = report["settings"]
    lines.append("| " + " | ".join(f"{lvl} mAP | {lvl} Acc-F | {lvl} Acc-B" for lvl in levels) + " | Overall |")
    lines.append("|" + "---:|" * (3 * len(levels) + 1))
    cells = []
    for lvl in levels:
        af, ab = (settings.get(setting_name(lvl, mode)) for mode in (ANSWER_FREE, ANSWER_BASED))
        cells.append(f"{_cell(af or ab, 'map_20_50')} | {_cell(af, 'accuracy')} | {_cell(ab, 'accuracy')}")
    lines.append("| " + " | ".join(cells) + f" | {_ci(t['Overall'])} |")
    lines += ["", "## Per setting", "",
              "| setting | groups | localized | recognized | reasoned | accuracy | mAP | FN | FP | missing "
              "| unparsable |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in sorted(settings.items()):
        c = s["coverage"]
        lines.append(f"| {name} | {s['n_groups']} | " + " | ".join(_cell(s, m) for m in (*GATES, "map_20_50"))
                     + f" | {s['fn']} | {s['fp']} | {c['missing']} | {c['unparsable']} |")
    lines += ["", "FN: the teacher's right judged wrong (costs the student marks); FP: judged right where the teacher "
              "did not (gives marks)."]
    lines += interval_notes(settings)
    lines += ranked_map_notes(settings)
    lines += harm_table(settings)
    lines += soft_table(settings)
    lines += selective_table(settings)
    lines += points_table(settings)
    if report["three_turn"]:
        lines += ["", "## Three-turn vs single-turn (accuracy %)", "", "| setting | single | three-turn |",
                  "|---|---:|---:|"]
        lines += [f"| {r['setting']} | {_cell(settings[r['setting']], 'accuracy')} | "
                  f"{_cell(settings[r['setting'] + '-3t'], 'accuracy')} |" for r in report["three_turn"]]
    d = report.get("diagnostics")
    if d:
        lines += ["", "## L1 diagnostics (isolated capabilities)", "",
                  f"- localization only: mAP@[.2:.5] {d['localization_map_20_50']:.1f}",
                  f"- recognition only (CER < 0.7 given the box): {_ci(d['recognition_rate'])}%",
                  f"- reasoning only (judgment given the transcription): answer-free "
                  f"{_ci(d['reasoning_accuracy']['answer-free'])}%, answer-based "
                  f"{_ci(d['reasoning_accuracy']['answer-based'])}%"]
    return "\n".join(lines) + "\n"


def harm_table(settings: dict[str, dict]) -> list[str]:
    """The Markdown lines of the wrong verdicts per question type, by whom they hurt (FN costs marks, FP gives
    them), for the settings that judged any group."""
    rows = [(name, qtype, b) for name, s in sorted(settings.items())
            for qtype, b in s.get("breakdown", {}).get("question_type", {}).items()
            if "costs_marks" in b and (b["costs_marks"] or b["gives_marks"])]
    if not rows:
        return []
    return ["", "## Wrong verdicts by question type", "", "| setting | question type | groups | costs marks (FN) | "
            "gives marks (FP) |", "|---|---|---:|---:|---:|",
            *[f"| {name} | {markdown_text(qtype)} | {b['n']} | {b['costs_marks']} | {b['gives_marks']} |"
              for name, qtype, b in rows]]


def soft_table(settings: dict[str, dict]) -> list[str]:
    """The Markdown lines of the soft scores beside the gates (token F1 and ANLS of transcriptions and answers, in
    %) and what decided the answer gate; none for a report from before them."""
    rows = {name: s for name, s in sorted(settings.items()) if s.get("soft_scores")}
    if not rows:
        return []

    def pct(value) -> str:
        return "–" if value is None else f"{100 * value:.1f}"
    lines = ["", "## Soft scores (docs/metric.md#the-metric)", "",
             "Token F1 and ANLS of the transcriptions and of the derived answers, in % (an unmatched group scores 0); "
             "answers decided by their type's rule / by the judge / by neither (undecided: failed, never passed as "
             "equal), answer-free; groups whose reference is the data's placeholder (答案暂无: no answer gate).", "",
             "| setting | text F1 | text ANLS | answer F1 | answer ANLS | answers: rule / judge / undecided | no "
             "reference |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, s in rows.items():
        soft, gate = s["soft_scores"], s.get("answer_gate") or {}
        counts = [gate.get(k, 0) for k in ("by_rule", "by_judge", "undecided")]
        decided = " / ".join(map(str, counts)) if any(counts) else "–"
        lines.append(f"| {name} | " + " | ".join(pct(soft[k]) for k in ("text_f1", "text_anls", "answer_f1",
                                                                       "answer_anls"))
                     + f" | {decided} | {gate.get('no_reference', '–')} |")
    return lines


def selective_table(settings: dict[str, dict]) -> list[str]:
    """The Markdown lines of the coverage-accuracy tables (docs/metric.md#selective-grading) at SELECTIVE_SHOWN,
    one row per setting: `coverage / accuracy` in %; none for a report from before confidences."""
    tables = {name: s["selective"] for name, s in sorted(settings.items()) if s.get("selective")}
    if not tables:
        return []
    lines = ["", "## Selective grading (docs/metric.md#selective-grading)", "",
             "Share of groups graded automatically (judgment confidence ≥ threshold) / accuracy of those, in %; the "
             "rest go to a teacher. Every threshold: report.json `selective`; plot: plots/selective.png.", "",
             "| setting | " + " | ".join(f"≥ {t:.2f}" for t in SELECTIVE_SHOWN) + " |",
             "|---|" + "---:|" * len(SELECTIVE_SHOWN)]
    for name, table in tables.items():
        if not table["rows"]:
            lines.append(f"| {name} | " + " | ".join("–" for _ in SELECTIVE_SHOWN) + " |")
            continue
        rows = {r["threshold"]: r for r in table["rows"]}
        lines.append(f"| {name} | " + " | ".join(f"{_ci(rows[t]['coverage'])} / {_ci(rows[t]['accuracy'])}"
                                                 for t in SELECTIVE_SHOWN) + " |")
    lines += [f"{name}: {t['undefined']}." for name, t in tables.items() if not t["rows"]]
    calibrated = {name: s["calibration"] for name, s in sorted(settings.items())
                  if (s.get("calibration") or {}).get("ece") is not None}
    if calibrated:
        lines += ["", "Calibration of the judgment confidence (groups passing every gate against the confidence; "
                      "plot: plots/reliability.png): ECE " + ", ".join(f"{name} {c['ece']:.3f}"
                                                                         for name, c in calibrated.items()) + "."]
    return lines


def kappa_text(k: dict) -> str:
    """A kappa as the reports print it: its value, or "undefined" (its reason is in report.json), never 0."""
    return "undefined" if k["value"] is None else f"{k['value']:.3f}"


def _harm(direction: dict | None) -> str:
    """`N (P pts)` of points_errors' side: questions and points (n/a in a report written before it was kept)."""
    return "n/a" if direction is None else f"{direction['n']} ({direction['points']:g} pts)"


def points_table(settings: dict[str, dict]) -> list[str]:
    """The Markdown lines of the points figures (gbtrain.metric.points) of the settings whose groups carry points;
    none when no setting does."""
    graded = {name: s["points"] for name, s in sorted(settings.items()) if s.get("points")}
    if not graded:
        return []
    lines = ["", "## Points against the teacher (docs/metric.md#points)", "",
             "| setting | questions | MAE | MAE / full | bias | max error | large errors | kappa | quadratic kappa | "
             "same band | costs marks | gives marks | missing | out of range |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, p in graded.items():
        m, c = p["model"], p["coverage"]
        mae = _ci(m["mae"], (settings[name].get("intervals") or {}).get("mae"), 1, 3)
        lines.append(f"| {name} | {p['n']} | {mae} | {m['normalized_mae']:.3f} | "
                     f"{m['mean_signed_error']:+.3f} | {m['max_error']:g} | {m['large_errors']} | "
                     f"{kappa_text(m['kappa'])} | {kappa_text(m['weighted_kappa']['quadratic'])} | "
                     f"{_ci(m['exact_band'])}% | {_harm(m.get('costs_marks'))} | {_harm(m.get('gives_marks'))} | "
                     f"{c['missing']} | {c['out_of_range']} |")
    return lines


def plots(report: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    names = sorted(report["settings"])
    paths = []
    fig, ax = plt.subplots(figsize=(max(6, len(names) * 0.9), 3.5))
    acc = [100 * report["settings"][n]["accuracy"] for n in names]
    mp = [report["settings"][n]["map_20_50"] for n in names]
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], acc, 0.4, label="accuracy %")
    ax.bar([i + 0.2 for i in x], mp, 0.4, label="mAP@[.2:.5]")
    ax.set_xticks(list(x), names, rotation=30, ha="right")
    ax.set_ylim(0, 100)
    ax.legend()
    ax.set_title("Per setting")
    fig.tight_layout()
    paths.append(out_dir / "settings.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for n in names:
        ax.plot(list(GATES), [100 * report["settings"][n][g] for g in GATES], marker="o", label=n)
    ax.set_ylim(0, 100)
    ax.set_ylabel("% of groups passing")
    ax.set_title("Gate funnel")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    paths.append(out_dir / "funnel.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    curves = {n: report["settings"][n]["selective"]["rows"] for n in names
              if (report["settings"][n].get("selective") or {}).get("rows")}
    if curves:
        paths.append(selective_plot(curves, out_dir / "selective.png"))
    calibrated = {n: report["settings"][n]["calibration"] for n in names
                  if (report["settings"][n].get("calibration") or {}).get("bins")}
    if calibrated:
        paths.append(reliability_plot(calibrated, out_dir / "reliability.png"))
    return paths


def reliability_plot(calibrated: dict[str, dict], path: Path) -> Path:
    """The reliability diagram per setting: accuracy against mean confidence of each confidence bin that holds
    groups (on the diagonal: calibrated), with the ECE in the legend."""
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
    for name, c in calibrated.items():
        kept = [b for b in c["bins"] if b["n"]]
        ax.plot([b["confidence"] for b in kept], [b["accuracy"] for b in kept], marker="o",
                label=f"{name} (ECE {c['ece']:.3f})")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("judgment confidence")
    ax.set_ylabel("share passing every gate")
    ax.set_title("Reliability")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def selective_plot(curves: dict[str, list[dict]], path: Path) -> Path:
    """Selective grading per setting: the accuracy of the groups graded automatically against the share sent to a
    teacher, one point per confidence threshold (those that leave some group to the model)."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, rows in curves.items():
        kept = [r for r in rows if r["accuracy"] is not None]
        ax.plot([100 * (1 - r["coverage"]) for r in kept], [100 * r["accuracy"] for r in kept], marker=".",
                label=name)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    ax.set_xlabel("% of groups sent to review")
    ax.set_ylabel("accuracy % of the rest")
    ax.set_title("Selective grading (confidence threshold 0 to 1)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


OUTCOMES = {"loc": "not localized", "cer": "CER ≥ 0.7", "ans": "answer wrong", "judg": "judgment wrong",
            "PASS": "correct"}


def outcome(group: dict) -> str:
    """A scored group's first failed gate (a key of OUTCOMES, as the overlays label it), or PASS."""
    if group.get("accurate"):
        return "PASS"
    return ("loc" if not group.get("localized") else "cer" if not group.get("recognized") else
            "ans" if not group.get("reasoned") else "judg")


def overlay(image: Image.Image, record: Record, setting_report: dict, items_boxes: list, out: Path) -> Path:
    """The page with GT boxes (green), predicted boxes (red), matched pairs linked, each GT group labelled
    with its outcome and each prediction with its text, answer and judgment."""
    outcomes = {g["group_id"]: g for g in setting_report["groups"] if g["record_id"] == record.record_id}
    shapes = [Shape(g.box.as_list(), GROUND_TRUTH_COLOR, above=f"{g.group_id} {outcome(outcomes.get(g.group_id, {}))}")
              for g in record.groups]
    links = []
    for ib in items_boxes:
        if ib.box is None:
            continue
        b = ib.box
        shapes.append(Shape(b.as_list(), PREDICTION_COLOR, 2,
                            below=cut(f"{ib.item.text} | {ib.item.answer} | {ib.item.correctness}")))
        best = min(record.groups, key=lambda g: (g.box.center[0] - b.center[0]) ** 2 + (g.box.center[1] - b.center[1])
                   ** 2, default=None)
        if best is not None and outcomes.get(best.group_id, {}).get("localized"):
            links.append((b.center, best.box.center))
    out.parent.mkdir(parents=True, exist_ok=True)
    draw_shapes(image, shapes, links).save(out)
    return out


METRICS = ("accuracy", "localized", "recognized", "reasoned", "map_20_50")


GATE_KEYS = ("answer_tolerance", "rule_first", "ignore_missing")  # run_eval's meta: how its answers were scored


def _records_evaluated(meta: dict) -> dict:
    """Which records of the folder a report scored: its split and the build that decided it, by the build's
    contents where the report records them (a copy of the build elsewhere is the same build), else its path."""
    held = meta.get("held_out") or {}
    build = held.get("contents_sha256") or held.get("build")
    return {"split": held.get("split"), "build": build}


def comparison_problems(base: dict, sft: dict) -> list[str]:
    """Why two reports cannot be compared: other annotations, record limit, judge, scorer or its gate options (the
    answer tolerance, whether the rule decides first, whether missing replies count), other records of the folder
    (a split of another build, or every record against a split: pass --build to the base model's evaluation), or
    settings that scored other groups. (Models, conventions and pixel budgets may differ: that is the comparison.)"""
    problems = [redact(f"{key}: {base['meta'].get(key)!r} vs {sft['meta'].get(key)!r}")
                for key in ("annotations_sha256", "limit", "judge", "scorer_sha256", "point_bands", "large_error",
                            *GATE_KEYS)
                if base["meta"].get(key) != sft["meta"].get(key)]
    records = [_records_evaluated(report["meta"]) for report in (base, sft)]
    if records[0] != records[1]:
        problems.append(redact(f"records evaluated: {records[0]} vs {records[1]} (evaluate both with the same --split "
                               f"and --build)"))
    common = sorted(set(base["settings"]) & set(sft["settings"]))
    if not common:
        problems.append("no setting in common")
    problems += [f"{name}: {base['settings'][name]['n_groups']} vs {sft['settings'][name]['n_groups']} groups"
                 for name in common if base["settings"][name]["n_groups"] != sft["settings"][name]["n_groups"]]
    return problems


def paired(base: dict, sft: dict, outcomes: tuple[ReportOutcomes, ReportOutcomes],
           opts: IntervalOptions) -> dict[str, dict] | None:
    """Each common setting's paired gains (gbtrain.metric.intervals.paired_gains); None when a report has no
    outcomes. Two reports scored on other groups are refused, naming the first that differs."""
    b, s = (o.settings for o in outcomes)
    if b is None or s is None:
        return None
    gains = {}
    for name in sorted(set(base["settings"]) & set(sft["settings"])):
        try:
            gains[name] = paired_gains(b.get(name, {}), s.get(name, {}), opts)
        except PairingError as e:
            raise ValueError(f"{name}: {e}: the reports were not scored on the same records; evaluate both with the "
                             f"same --data and --limit") from None
    return gains


def _gain(row: dict, scale: float = 100, digits: int = 1) -> str:
    """A gain with its paired interval and McNemar p-value where it has them: `+5.0 [-1.2, +11.3], p = 0.21`."""
    text = f"{scale * row['gain']:+.{digits}f}"
    if row.get("interval"):
        low, high = row["interval"]
        text += f" [{scale * low:+.{digits}f}, {scale * high:+.{digits}f}]"
    if row.get("p") is not None:
        text += ", p < 0.001" if row["p"] < 0.001 else f", p = {row['p']:.2g}"
    return text


NOT_READ = ReportOutcomes(None, "its outcomes were not read")


def compare(base: dict, sft: dict, outcomes: tuple[ReportOutcomes, ReportOutcomes] = (NOT_READ, NOT_READ),
            opts: IntervalOptions = IntervalOptions()) -> tuple[str, list[dict]]:
    """Gains of SFT over base, metric by metric and setting by setting (Markdown and rows), each with its paired
    95% interval and, for the gates, its McNemar p-value when both reports have their outcomes (read_outcomes)."""
    problems = comparison_problems(base, sft)
    if problems:
        raise ValueError("the reports were not made on the same records and scoring (" + "; ".join(problems)
                         + "): evaluate both with the same --data, --limit and --judge")
    gains = paired(base, sft, outcomes, opts)
    rows = []
    for name in sorted(set(base["settings"]) & set(sft["settings"])):
        b, s, g = base["settings"][name], sft["settings"][name], (gains or {}).get(name, {})
        rows.append({"setting": name, **{m: {"base": b[m], "sft": s[m], "gain": round(s[m] - b[m], 6),
                                             "interval": g.get(m), "p": g.get("p", {}).get(m)} for m in METRICS}})
    bo, so = base["table2"].get("Overall"), sft["table2"].get("Overall")
    lines = [f"# Gains of {markdown_text(sft['meta'].get('model'))} over {markdown_text(base['meta'].get('model'))}",
             "",
             "| setting | accuracy base → SFT (Δ) | localized | recognized | reasoned | mAP base → SFT (Δ) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{100 * r[m]['base']:.1f} → {100 * r[m]['sft']:.1f} ({_gain(r[m])})"
                 for m in ("accuracy", "localized", "recognized", "reasoned")]
        m = r["map_20_50"]
        cells.append(f"{m['base']:.1f} → {m['sft']:.1f} ({_gain(m, 1)})")
        lines.append(f"| {r['setting']} | " + " | ".join(cells) + " |")
    lines += gain_notes(gains, opts, outcomes)
    if bo is not None and so is not None:
        lines += ["", f"Overall accuracy (mean of the settings' accuracies): {100 * bo:.1f} → {100 * so:.1f} "
                      f"({100 * (so - bo):+.1f})"]
    lines += points_gains(base["settings"], sft["settings"], gains)
    bu = sum(v["coverage"]["unparsable"] for v in base["settings"].values())
    su = sum(v["coverage"]["unparsable"] for v in sft["settings"].values())
    n = sum(v["n_records"] for v in base["settings"].values())
    lines += [f"Unparsable responses: {bu} → {su} of {n} records"]
    return "\n".join(lines) + "\n", rows


def gain_notes(gains: dict[str, dict] | None, opts: IntervalOptions,
               outcomes: tuple[ReportOutcomes, ReportOutcomes]) -> list[str]:
    """The lines under the gains table: how the intervals and p-values were made, or why there are none."""
    if gains is None:
        why = "; ".join(dict.fromkeys(o.why_none for o in outcomes if o.settings is None))
        return ["", f"No intervals: {why} ({INTERVALS_DOC})."]
    return (["", f"Δ [low, high]: 95% paired interval of the gain, the same pages resampled for both models "
                 f"({opts.resamples} resamples, seed {opts.seed}); p: exact McNemar test on the groups one model "
                 f"passes and the other fails ({INTERVALS_DOC})."]
            + [f"{name}: no interval: {g['undefined']}." for name, g in sorted(gains.items()) if g["undefined"]])


def points_gains(base: dict[str, dict], sft: dict[str, dict], gains: dict[str, dict] | None = None) -> list[str]:
    """The Markdown lines of the points figures base -> SFT, for the settings both reports graded in points (with
    the MAE's change and its paired interval where `gains` has one)."""
    names = [n for n in sorted(set(base) & set(sft)) if base[n].get("points") and sft[n].get("points")]
    if not names:
        return []
    lines = ["", "Points against the teacher (MAE in points: lower is better; kappa on bands of the full score):", "",
             "| setting | questions | MAE base → SFT | MAE / full | kappa | quadratic kappa |",
             "|---|---:|---|---|---|---|"]
    for n in names:
        b, s = base[n]["points"]["model"], sft[n]["points"]["model"]
        interval = ((gains or {}).get(n) or {}).get("mae")
        change = f" ({_gain({'gain': s['mae'] - b['mae'], 'interval': interval}, 1, 3)})" if interval else ""
        lines.append(f"| {n} | {sft[n]['points']['n']} | {b['mae']:.3f} → {s['mae']:.3f}{change} | "
                     f"{b['normalized_mae']:.3f} → {s['normalized_mae']:.3f} | {kappa_text(b['kappa'])} → "
                     f"{kappa_text(s['kappa'])} | {kappa_text(b['weighted_kappa']['quadratic'])} → "
                     f"{kappa_text(s['weighted_kappa']['quadratic'])} |")
    return [*lines, ""]


def compare_plot(rows: list[dict], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.9), 3.5))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [100 * r["accuracy"]["base"] for r in rows], 0.4, label="base")
    ax.bar([i + 0.2 for i in x], [100 * r["accuracy"]["sft"] for r in rows], 0.4, label="SFT")
    ax.set_xticks(list(x), [r["setting"] for r in rows], rotation=30, ha="right")
    ax.set_ylabel("accuracy %")
    ax.set_ylim(0, 100)
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out

"""Intervals and paired gains (gbtrain.metric.intervals): the page bootstrap is reproducible and covers a known rate,
McNemar is exact, paired intervals resample the same pages, reports of other records are refused, and
eval/compare.py reads two real run folders scored by the scorer."""

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gbtrain.coords import PixelBudget
from gbtrain.data.conversations import answer_items
from gbtrain.evaluation.engine import EvalOptions, Evaluator, parse_settings
from gbtrain.evaluation.reports import OUTCOMES_FILE, outcomes_record
from gbtrain.evaluation.run import write_reports
from gbtrain.metric.intervals import (
    GATES,
    IntervalOptions,
    PageOutcomes,
    PairingError,
    _Table,
    mcnemar_exact,
    paired_gains,
    setting_intervals,
)
from gbtrain.metric.judges import RuleJudge

ROOT = Path(__file__).resolve().parents[2]


def pages_of(passed: list[list[bool]]) -> dict[str, PageOutcomes]:
    """Pages of groups that pass every gate or none (no boxes, no points)."""
    return {f"p{i:03d}": PageOutcomes({(f"p{i:03d}", str(j)): 4 * ok for j, ok in enumerate(groups)}, [0] * 9, {})
            for i, groups in enumerate(passed)}


def test_mcnemar_by_hand():
    # b = 1, c = 5: n = 6, min = 1: 2 * (C(6,0) + C(6,1)) / 2^6 = 2 * 7 / 64
    assert mcnemar_exact(1, 5) == mcnemar_exact(5, 1) == 14 / 64 == 0.21875
    assert mcnemar_exact(0, 6) == 2 / 64
    assert mcnemar_exact(0, 0) == 1.0  # no discordant pair
    assert mcnemar_exact(3, 3) == 1.0  # 2 * 42 / 64 > 1: capped
    big = mcnemar_exact(300, 200)  # 2^500 stays exact: no overflow, no 0/0
    assert 0 < big < mcnemar_exact(30, 20) < 1


def test_the_bootstrap_is_reproducible_by_seed():
    rng = random.Random(1)
    pages = pages_of([[rng.random() < 0.6 for _ in range(5)] for _ in range(30)])
    first = setting_intervals(pages, IntervalOptions(1000, 3))
    assert first == setting_intervals(pages, IntervalOptions(1000, 3))
    assert first["accuracy"] != setting_intervals(pages, IntervalOptions(1000, 4))["accuracy"]
    assert (first["method"], first["resamples"], first["seed"], first["pages"]) == (
        "percentile bootstrap over pages", 1000, 3, 30)


@pytest.mark.parametrize("clustered", [False, True])
def test_the_interval_covers_a_known_rate(clustered):
    """40 pages of 5 groups, each right with p = 0.6 (clustered: a page's groups all right or all wrong together).
    The 95% interval covers 0.6 in at least 90 of 100 seeds, and its width is the binomial one of the independent
    units: 200 groups, or 40 pages when they move together (a group-level bootstrap would be too narrow there)."""
    covered, widths = 0, []
    for seed in range(100):
        rng = np.random.default_rng(seed)
        draws = rng.random(40)[:, None].repeat(5, 1) if clustered else rng.random((40, 5))
        iv = setting_intervals(pages_of((draws < 0.6).tolist()), IntervalOptions(1000, seed))["accuracy"]
        covered += iv[0] <= 0.6 <= iv[1]
        widths.append(iv[1] - iv[0])
    assert covered >= 90
    units = 40 if clustered else 200
    assert np.mean(widths) == pytest.approx(2 * 1.96 * (0.6 * 0.4 / units) ** 0.5, rel=0.15)


def test_too_few_pages_give_no_interval():
    for passed in ([], [[True, False, True]]):
        iv = setting_intervals(pages_of(passed), IntervalOptions())
        assert iv["undefined"] == f"{len(passed)} page(s): a bootstrap over pages needs at least 2"
        assert all(iv[m] is None for m in (*GATES, "map_20_50", "mae"))
    gains = paired_gains(pages_of([[True, False]]), pages_of([[True, True]]), IntervalOptions())
    assert gains["accuracy"] is None and gains["p"]["accuracy"] == mcnemar_exact(0, 1) == 1.0


def test_paired_intervals_resample_the_same_pages():
    """Pages that are all right or all wrong for the base; the fine-tuned model gets one more group right on each
    all-wrong page. Each model's own interval overlaps the other's, yet no resample of the pages loses: the paired
    interval lies above 0, and McNemar counts the groups only the fine-tuned model passes."""
    rng = random.Random(0)
    base = [[rng.random() < 0.5] * 5 for _ in range(20)]
    sft = [groups if groups[0] else [True, *groups[1:]] for groups in base]
    bp, sp = pages_of(base), pages_of(sft)
    opts = IntervalOptions()
    b_iv, s_iv = setting_intervals(bp, opts)["accuracy"], setting_intervals(sp, opts)["accuracy"]
    assert b_iv[1] > s_iv[0]  # unpaired, the two intervals overlap
    gains = paired_gains(bp, sp, opts)
    improved = sum(not groups[0] for groups in base)
    assert improved >= 5 and gains["accuracy"][0] > 0
    assert gains["discordant"]["accuracy"] == {"base_only": 0, "sft_only": improved}
    assert gains["p"]["accuracy"] == mcnemar_exact(0, improved)
    same = paired_gains(bp, bp, opts)
    assert same["accuracy"] == [0.0, 0.0] and same["p"]["accuracy"] == 1.0


def test_reports_of_other_records_are_not_paired():
    base = pages_of([[True, False], [False, False]])
    fewer = {p: PageOutcomes(dict(o.gates), o.boxes, {}) for p, o in base.items()}
    del fewer["p001"].gates[("p001", "1")]
    with pytest.raises(PairingError, match="record 'p001' group '1' is only in the base report"):
        paired_gains(base, fewer, IntervalOptions())
    moved = pages_of([[True, False], [False, False]])
    moved["p000"].gates[("p009", "0")] = 0
    moved["p001"].gates[("p001", "0")] = 0
    with pytest.raises(PairingError, match="record 'p009' group '0' is only in the fine-tuned report"):
        paired_gains(base, moved, IntervalOptions())
    with pytest.raises(PairingError, match="page 'p002' is only in the fine-tuned report"):
        paired_gains(base, pages_of([[True, False], [False, False], [True]]), IntervalOptions())


def test_bad_options_are_refused():
    for bad in ((99, 0), (1000, -1), (True, 0)):
        with pytest.raises(ValueError, match="--bootstrap"):
            IntervalOptions(*bad)


# ----------------------------------------------------------------------------- with the scorer, on synthetic pages
def faulty(record, index: int, seed: int) -> str | None:
    """The record's ground-truth reply with faults drawn per group: a misread, a shifted box, a wrong score."""
    rng = random.Random(f"{seed}:{index}")
    if rng.random() < 0.1:
        return None
    items = answer_items(record, "qwen25", PixelBudget())
    for it in items:
        if rng.random() < 0.3:
            it["text"] = "zzzzzzzz"
        if rng.random() < 0.2:
            it["bbox_2d"] = [v + 9 for v in it["bbox_2d"]]
        if rng.random() < 0.3 and it.get("score") is not None:
            it["score"] = 0
    return json.dumps(items, ensure_ascii=False)


def make_run(data: Path, out: Path, seed: int | None) -> tuple[dict, dict]:
    """A run folder as eval/run_eval.py writes it, from predictions with faults (`seed`) or without (None)."""
    ev = Evaluator(None, data, out, EvalOptions("qwen25", PixelBudget()))
    settings = parse_settings("L1-af,L3-ab")
    for s in settings:
        path = ev.predictions_path(s)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            for i, r in enumerate(ev.records(s.level)):
                reply = faulty(r, i, seed) if seed is not None else json.dumps(answer_items(r, "qwen25",
                                                                                            PixelBudget()))
                if reply is not None:
                    f.write(json.dumps({"id": r.record_id, "response": reply}) + "\n")
    scored = {s.name: ev.score(s, RuleJudge()) for s in settings}
    meta = {"model": f"m{seed}", "backend": "hf", "coords": "qwen25", "judge": "rule", "limit": None,
            "annotations_sha256": "a", "scorer_sha256": "s"}
    return write_reports(ev, settings, scored, meta, None, overlays=0), scored


@pytest.fixture(scope="module")
def runs(synth_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("intervals")
    return {name: (root / name, *make_run(synth_dir, root / name, seed)) for name, seed in (("base", 1), ("sft", None))}


def test_the_pages_give_the_scorers_figures(runs):
    """Resampled with every page once, the pages' sums give the scorer's own accuracy, rates, mAP and MAE; an L1
    crop counts with its page."""
    _, report, scored = runs["base"]
    for name, s in scored.items():
        pages = {p: PageOutcomes.from_json(raw) for p, raw in s["pages"].items()}
        values = _Table.of(pages, sorted(pages)).values(np.ones((1, len(pages))))
        for gate in GATES:
            assert values[gate][0] == pytest.approx(s[gate], abs=1e-6), (name, gate)
        assert values["map_20_50"][0] == pytest.approx(s["map_20_50"], abs=1e-3)
        assert 0 < s["map_20_50"] < 100 and 0 < s["accuracy"] < 1
        assert values["mae"][0] == pytest.approx(s["points"]["model"]["mae"], abs=1e-6) and s["points"]["model"]["mae"]
        assert len(pages) == 12 and sum(len(p.gates) for p in pages.values()) == s["n_groups"]
        iv = report["settings"][name]["intervals"]
        assert all(iv[m][0] <= s[m] <= iv[m][1] for m in ("accuracy", "map_20_50")) and iv["accuracy"][0] < iv[
            "accuracy"][1]
        assert "pages" not in report["settings"][name] and "groups" not in report["settings"][name]
    md = (runs["base"][0] / "report.md").read_text()
    acc = report["settings"]["L1-af"]
    assert f"{100 * acc['accuracy']:.1f} [{100 * acc['intervals']['accuracy'][0]:.1f}, " in md
    assert "95% interval, percentile bootstrap over pages, 1000 resamples, seed 0" in md


def compare(tmp_path, base: Path, sft: Path, *flags) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "eval" / "compare.py"), str(base / "report.json"),
                           str(sft / "report.json"), "--out", str(tmp_path / "gains.md"), *flags],
                          capture_output=True, text=True, timeout=300)


def test_compare_pairs_two_real_reports(runs, tmp_path):
    (base_dir, base, base_scored), (sft_dir, sft, sft_scored) = runs["base"], runs["sft"]
    proc = compare(tmp_path, base_dir, sft_dir)
    assert proc.returncode == 0, proc.stderr
    gains = (tmp_path / "gains.md").read_text()
    for name in ("L1-af", "L3-ab"):
        b = {(g["record_id"], g["group_id"]): g["accurate"] for g in base_scored[name]["groups"]}
        s = {(g["record_id"], g["group_id"]): g["accurate"] for g in sft_scored[name]["groups"]}
        only_base, only_sft = sum(b[k] and not s[k] for k in b), sum(s[k] and not b[k] for k in b)
        assert only_sft > 0 and only_base == 0  # the fine-tuned replies are the ground truth
        p = mcnemar_exact(only_base, only_sft)
        row = next(line for line in gains.splitlines() if line.startswith(f"| {name} |"))
        gain = sft["settings"][name]["accuracy"] - base["settings"][name]["accuracy"]
        text = "p < 0.001" if p < 0.001 else f"p = {p:.2g}"
        cell = row.split(" | ")[1]
        assert cell.startswith(f"{100 * base['settings'][name]['accuracy']:.1f} → 100.0 ({100 * gain:+.1f} [+")
        assert cell.endswith(f"], {text})")
        low = float(cell.split("[")[1].split(",")[0])
        assert 0 < low <= 100 * gain
    assert "95% paired interval of the gain" in gains and "1000 resamples, seed 0" in gains
    other = compare(tmp_path, base_dir, sft_dir, "--bootstrap-seed", "5")
    assert other.returncode == 0 and "seed 5" in (tmp_path / "gains.md").read_text()


def test_compare_checks_the_outcomes_and_reads_reports_without_them(runs, tmp_path):
    import shutil

    (base_dir, *_), (sft_dir, *_) = runs["base"], runs["sft"]
    copy = tmp_path / "sft"
    shutil.copytree(sft_dir, copy)
    outcomes = copy / OUTCOMES_FILE
    lines = outcomes.read_text().splitlines()
    outcomes.write_text("\n".join(lines[:-1]) + "\n")
    proc = compare(tmp_path, base_dir, copy)
    assert proc.returncode == 2 and "sha256 differs" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    outcomes.unlink()  # a report.json kept without it: gains without intervals, saying why
    proc = compare(tmp_path, base_dir, copy)
    assert proc.returncode == 0, proc.stderr
    assert f"No intervals: {outcomes} is missing: keep it beside {copy / 'report.json'}" in proc.stdout
    # the same records named otherwise (the hash made to match): refused, naming the first such group
    renamed = [json.loads(line) for line in lines]
    first = renamed[0]["pages"][sorted(renamed[0]["pages"])[0]]["gates"][0]
    record = first[0]
    first[0] = "zz-elsewhere"  # sorts after every record id: the first difference is the one renamed
    text = "".join(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n" for line in renamed)
    outcomes.write_text(text)
    report = json.loads((copy / "report.json").read_text())
    report["meta"]["outcomes"] = outcomes_record(text)
    (copy / "report.json").write_text(json.dumps(report))
    proc = compare(tmp_path, base_dir, copy)
    assert proc.returncode == 2, proc.stdout
    assert f"L1-af: scored record '{record}' group '{first[1]}' is only in the base report" in proc.stderr
    assert "evaluate both with the same --data and --limit" in proc.stderr
    # reports that predate intervals (no outcomes in their meta): gains without intervals, said so
    for folder in (copy, tmp_path / "base"):
        if folder != copy:
            shutil.copytree(base_dir, folder)
        report = json.loads((folder / "report.json").read_text())
        del report["meta"]["outcomes"]
        for s in report["settings"].values():
            del s["intervals"]
        (folder / "report.json").write_text(json.dumps(report))
    proc = compare(tmp_path, tmp_path / "base", copy)
    assert proc.returncode == 0, proc.stderr
    gains = (tmp_path / "gains.md").read_text()
    assert f"No intervals: {tmp_path / 'base' / 'report.json'} predates them (its meta names no outcomes.jsonl)" \
        in gains and f"; {copy / 'report.json'} predates them" in gains and " [" not in gains


def test_score_cli_records_its_bootstrap_and_refuses_a_bad_one(synth_dir, tmp_path):
    from gbtrain.data.annotations import load_level

    preds = tmp_path / "p.jsonl"
    preds.write_text("".join(json.dumps({"id": r.record_id, "response": json.dumps(answer_items(
        r, "qwen25", PixelBudget()))}) + "\n" for r in load_level(synth_dir, "L3").records[1:]))
    common = [sys.executable, str(ROOT / "eval" / "score.py"), "--data", str(synth_dir), "--level", "L3", "--mode",
              "answer-based", "--predictions", str(preds), "--coords", "qwen25", "--out", str(tmp_path / "r.json")]
    proc = subprocess.run([*common, "--bootstrap-seed", "7"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    iv = report["intervals"]
    assert (iv["seed"], iv["resamples"], iv["pages"]) == (7, 1000, 12) and report["settings"]["intervals"]["seed"] == 7
    assert f"accuracy {report['accuracy']:.4f} [{iv['accuracy'][0]:.4f}, {iv['accuracy'][1]:.4f}]" in proc.stdout
    assert iv["accuracy"][0] < report["accuracy"] < iv["accuracy"][1] == 1.0  # one page missing: below 1
    proc = subprocess.run([*common, "--bootstrap-resamples", "50"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "--bootstrap-resamples 50: must be at least 100" in proc.stderr


def test_a_resample_count_is_bounded_before_any_work():
    """1e9 resamples asked numpy for 22 GiB after the whole evaluation: refused when the options are read."""
    from gbtrain.metric.intervals import MAX_RESAMPLES, IntervalOptions

    assert IntervalOptions(MAX_RESAMPLES).resamples == MAX_RESAMPLES
    with pytest.raises(ValueError, match=r"--bootstrap-resamples 1000000000: give 100 to 20,000"):
        IntervalOptions(1_000_000_000)

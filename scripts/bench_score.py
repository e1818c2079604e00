"""Benchmark the scorer: 6 settings x ~3,300 groups of synthetic predictions (prints figures).

    python scripts/bench_score.py [--groups 3300] [--seed 0]

Records and predictions are made in memory (no images needed): predictions copy the ground truth
with perturbations (shifted boxes, misread texts, wrong answers and judgments, missing and
unparsable records), so every gate of the metric is exercised. Target: <= 2 s in all, one core.
Then hostile model output, as a predictions file read and scored like any other: a 10 MB line of
brackets, a 10 MB line of text, 2,000-deep nesting, 8,000 unclosed brackets, 100,000 unclosed <think>
tags, 1 MB of prose brackets, a 401-digit coordinate and a 1e999999999 answer. Target: <= 2 s.
Last, one L3 setting of --groups through eval/score.py as a whole process (best of 3, imports included), and the
top-level imports that take longest. Target: <= 2 s.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from gbtrain.cli import parse_options
from gbtrain.config import option
from gbtrain.coords import PixelBudget
from gbtrain.data.annotations import annotation_path, image_path, record_to_raw
from gbtrain.data.conversations import answer_items
from gbtrain.metric.scoring import Predictions, ScoreOptions, read_predictions, score
from gbtrain.schema import Mark, Record
from gbtrain.vocabulary import ANSWER_FREE, L3, LEVELS, MODES


@dataclass
class BenchScore:
    """The benchmark's options; each field is one of its flags (gbtrain.cli)."""

    groups: int = option(3300, "answer groups per level (each level's records are scored in both modes)")
    seed: int = option(0, "seed of the records and their perturbed predictions")


def make_records(n_groups: int, level: str, rng: random.Random) -> list[Record]:
    records, made, k = [], 0, 0
    while made < n_groups:
        marks = []
        for g in range(min(11, n_groups - made)):
            x, y = rng.uniform(50, 900), 60 + g * 120
            label = rng.choice(["right", "right", "wrong"])
            marks.append(Mark(points=[(x, y), (x + rng.uniform(40, 200), y + rng.uniform(20, 60))], label=label,
                              raw_label=label, mark_id=f"{g + 1}", hand=str(rng.randint(0, 999)),
                              std=str(rng.randint(0, 999)), question_type="Fill-in-the-blank"))
        made += len(marks)
        records.append(Record(f"{level}-{k}", level, "Mathematics", f"Mathematics/{k}.jpg", 1200, 1500, marks))
        k += 1
    return records


def make_predictions(records: list[Record], rng: random.Random, budget: PixelBudget) -> Predictions:
    responses = {}
    for r in records:
        roll = rng.random()
        if roll < 0.03:
            continue  # missing
        if roll < 0.05:
            responses[r.record_id] = "I could not read this page."
            continue
        items = answer_items(r, "qwen25", budget)
        for it in items:
            if rng.random() < 0.1:
                it["bbox_2d"] = [v + rng.randint(-40, 40) for v in it["bbox_2d"]]
            if rng.random() < 0.1:
                it["text"] = "x" + it["text"][::-1]
            if rng.random() < 0.1:
                it["answer"] = "?"
            if rng.random() < 0.1:
                it["correctness"] = not it["correctness"]
        responses[r.record_id] = "```json\n" + json.dumps(items, ensure_ascii=False) + "\n```"
    return Predictions(responses)


def main() -> None:
    args = parse_options(BenchScore, __doc__)
    rng = random.Random(args.seed)
    budget = PixelBudget()
    total = 0.0
    for level in LEVELS:
        records = make_records(args.groups, level, rng)
        preds = make_predictions(records, rng, budget)
        for mode in MODES:
            start = time.perf_counter()
            report = score(records, preds, ScoreOptions(level, mode, "qwen25"))
            took = time.perf_counter() - start
            total += took
            print(json.dumps({"bench": "score", "level": level, "mode": mode, "groups": report["n_groups"],
                              "seconds": round(took, 3), "accuracy": report["accuracy"],
                              "map_20_50": report["map_20_50"]}))
    print(json.dumps({"bench": "score_total", "settings": 6, "seconds": round(total, 3), "target_seconds": 2.0}))
    hostile(rng)
    whole_process(args.groups, rng)


def whole_process(n_groups: int, rng: random.Random, tries: int = 3) -> None:
    """One L3 setting of n_groups through `eval/score.py` as a user runs it (the whole process, imports included):
    the best of `tries` runs, and the imports that take longest (python -X importtime)."""
    root = Path(__file__).resolve().parents[1]
    records = make_records(n_groups, L3, rng)
    preds = make_predictions(records, rng, PixelBudget())
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        annotations = annotation_path(data, L3)
        annotations.parent.mkdir(parents=True)
        annotations.write_text(json.dumps([record_to_raw(r) for r in records]), encoding="utf-8")
        blank = Path(tmp) / "blank.png"
        Image.new("L", (records[0].width, records[0].height), 255).save(blank)
        for r in records:  # the reader checks each page's image: one blank page, linked
            image = image_path(data, r)
            image.parent.mkdir(parents=True, exist_ok=True)
            os.link(blank, image)
        path = Path(tmp) / "p.jsonl"
        path.write_text("".join(json.dumps({"id": k, "response": v}) + "\n" for k, v in preds.responses.items()),
                        encoding="utf-8")
        cmd = [sys.executable, str(root / "eval" / "score.py"), "--data", str(data), "--level", L3, "--mode",
               ANSWER_FREE, "--predictions", str(path), "--coords", "qwen25", "--out", str(Path(tmp) / "r.json")]
        times = []
        for _ in range(tries):
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                raise SystemExit(proc.stderr[-2000:])
            times.append(time.perf_counter() - start)
        traced = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], check=True, capture_output=True,
                                text=True).stderr
    imports = sorted(((int(m[1]), m[2].strip()) for m in re.finditer(r"import time:\s+\d+ \|\s+(\d+) \|( *\S+)",
                                                                        traced) if m[2].startswith(" ")
                      and not m[2].startswith("  ")), reverse=True)[:6]
    print(json.dumps({"bench": "score_process", "level": L3, "groups": n_groups, "best_seconds": round(min(times), 3),
                      "seconds": [round(t, 3) for t in times], "target_seconds": 2.0,
                      "slowest_top_level_imports_ms": {name: round(us / 1000) for us, name in imports}}))


def hostile(rng: random.Random) -> None:
    item = '{"bbox_2d": [%s, 1, 2, 3], "text": "1", "answer": "%s", "correctness": true}'
    responses = ["[" * 10_000_000, "a" * 10_000_000, "[" * 2000 + "]" * 2000, "[" * 8000,
                 "<think>" * 100_000 + "[]", "see [1] and [2] " * 62_000, "[" + item % ("9" * 401, "1") + "]",
                 "[" + item % ("5", "1e999999999") + "]"]
    records = make_records(len(responses) * 11, L3, rng)[:len(responses)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hostile.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for r, response in zip(records, responses, strict=True):
                f.write(json.dumps({"id": r.record_id, "response": response}) + "\n")
        start = time.perf_counter()
        report = score(records, read_predictions(path), ScoreOptions(L3, ANSWER_FREE, "qwen25"))
        took = time.perf_counter() - start
        size = path.stat().st_size
    print(json.dumps({"bench": "score_hostile", "lines": len(responses), "megabytes": round(size / 2**20, 1),
                      "seconds": round(took, 3), "parse_failures": report["parse_failures"],
                      "target_seconds": 2.0}))


if __name__ == "__main__":
    main()

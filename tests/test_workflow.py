"""The README's commands as a user runs them: subprocesses with a clean environment (PATH and HOME only),
in order: synthetic pages, a tiny model, SFT conversations, a few training steps through `accelerate
launch`, vLLM evaluation of the base and the fine-tuned model, scoring one setting, and the gains table; and the
path from a Label Studio export to graded new pages (convert, preview, build, train, select, grade).
No vLLM, hub or thread variable is set, and the test process holds a few GiB of memory while vLLM starts,
as a user's other programs would."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from labelstudio_export import labelstudio_export

from gbtrain.data.annotations import load_dataset, load_level
from gbtrain.inference.base import kv_cache_bytes

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
HELD_GIB = 3


def user_env(home: Path) -> dict[str, str]:
    return {"PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home)}


def run(cmd: list, env: dict, timeout: int = 900) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{(proc.stdout + proc.stderr)[-4000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def first_steps(tmp_path_factory) -> tuple[Path, Path]:
    """The README's first two commands, run once for both workflows (each only reads what they write): eight
    synthetic pages and the tiny base model."""
    root = tmp_path_factory.mktemp("first-steps")
    env = user_env(root / "home")
    (root / "home").mkdir()
    pages, model = root / "pages", root / "base-model"
    run(["python", "data_builders/synth_pages.py", "--out", pages, "--pages", 8, "--seed", 0], env)
    run(["python", "scripts/make_tiny_model.py", "--out", model], env)
    return pages, model


@pytest.mark.slow
def test_readme_commands_in_a_clean_environment(first_steps, tmp_path):
    env = user_env(tmp_path / "home")
    (tmp_path / "home").mkdir()
    (pages, model), sft = first_steps, tmp_path / "sft"
    run(["python", "data_builders/build_sft.py", "--data", pages, "--out", sft, "--config",
         "configs/data/default.yaml", f"tokenizer={model}", "target_count=60", "vision.min_pixels=3136",
         "vision.max_pixels=50176", "max_length=2048", "coords=rel1000"], env)
    trained = tmp_path / "sft-model"
    run(["accelerate", "launch", "--num_processes", 1, "--cpu", "recipes/sft_qwen.py", "--config",
         "configs/sft/tiny_cpu.yaml", f"model={model}", f"dataset={sft}", f"output_dir={trained}", "max_steps=3",
         "pack_tokens=2048", "max_length=2048", "eval_steps=3", "save_steps=3", "limit_eval_samples=4",
         "report_to=[]"], env)
    assert (trained / "train_summary.json").is_file()

    ballast = b"\x01" * (HELD_GIB * 2**30)  # resident memory held by "other programs" while vLLM starts
    reports = {}
    # the base model is told the budget, convention and build (whose held-out pages both are scored on); the
    # fine-tuned one reads them from its checkpoint
    for name, checkpoint, extra in (("base", model, ["--coords", "rel1000", "--min-pixels", 3136, "--max-pixels",
                                                     50176, "--build", sft]), ("sft", trained, [])):
        out = tmp_path / f"eval-{name}"
        printed = run(["python", "eval/run_eval.py", "--model", checkpoint, "--data", pages, "--out", out,
                       "--settings", "L1-af,L3-ab", "--limit", 2, "--max-tokens", 32, "--max-model-len", 4096, *extra],
                      env)
        reports[name] = json.loads((out / "report.json").read_text())
        # with no --kv-cache-gib the engine's cache is what 64 contexts of this model need, not 4 GiB to write
        assert f"'kv_cache_memory_bytes': {kv_cache_bytes(str(checkpoint), 4096)}," in printed
    del ballast
    # recorded by the recipe, read by the evaluator
    assert {k: reports["sft"]["meta"][k] for k in ("coords", "min_pixels", "max_pixels")} == {
        "coords": "rel1000", "min_pixels": 3136, "max_pixels": 50176}
    assert all(set(r["settings"]) == {"L1-af", "L3-ab"} for r in reports.values())
    assert {r["meta"]["held_out"]["split"] for r in reports.values()} == {"auto"}

    scored = tmp_path / "L3-ab.json"
    printed = run(["python", "eval/score.py", "--data", pages, "--level", "L3", "--mode", "answer-based",
                   "--predictions", tmp_path / "eval-sft" / "predictions" / "L3-ab.jsonl", "--coords", "rel1000",
                   "--min-pixels", 3136, "--max-pixels", 50176, "--out", scored], env)
    assert "L3 answer-based: accuracy" in printed
    assert json.loads(scored.read_text())["coverage"]["missing"] == 8 - 2  # eight pages, two evaluated
    run(["python", "eval/compare.py", tmp_path / "eval-base" / "report.json", tmp_path / "eval-sft" / "report.json",
         "--out", tmp_path / "gains.md"], env)
    assert "| L1-af |" in (tmp_path / "gains.md").read_text()


def _pages(data: Path) -> list[tuple]:
    """The L3 truth of a folder as the strict reader reads it: each page and every answer mark's fields."""
    return [(r.record_id, r.subject, r.image, r.width, r.height,
             [(m.mark_id, m.label, m.box.as_list(), m.hand, m.std, m.question_type, m.content_format, m.stage)
              for m in r.marks]) for r in load_level(data, "L3").records]


@pytest.mark.slow
def test_label_studio_export_to_graded_pages(first_steps, tmp_path):
    """README's "Your own exams" path, worked end to end: a Label Studio export of synthetic pages is converted,
    previewed, built into conversations, trained for four steps (two checkpoints), the checkpoints are scored on
    the validation pages and the best one grades two new pages."""
    env = user_env(tmp_path / "home")
    (tmp_path / "home").mkdir()
    (synth, model), data = first_steps, tmp_path / "mydata"
    export = labelstudio_export(synth, tmp_path / "export.json")
    printed = run(["python", "data_builders/convert.py", "--mapping", "configs/convert/example.yaml", "--export",
                   export, "--images", synth / "images" / "L3", "--out", data, "fields.content_format=format"], env)
    assert "converted 8 of 8 pages (labelstudio)" in printed and "unmappable items left out: 0" in printed
    assert _pages(data) == _pages(synth)  # the page truth survives Label Studio's percent coordinates
    counts = {level: len(lv.records) for level, lv in load_dataset(data).items()}
    assert counts == {level: len(lv.records) for level, lv in load_dataset(synth).items()}  # a crop per question

    printed = run(["python", "data_builders/preview.py", "--data", data, "--out", tmp_path / "preview", "--pages", 3],
                  env)
    groups = sum(len(r.groups) for r in load_level(data, "L3").records)
    assert f"L3: 8 records, {groups} answer groups, " in printed and "drew 3 L3 records" in printed
    assert "problems found by the reader: 0" in printed and "left out by the conversion: 0 items" in printed
    summary = json.loads((tmp_path / "preview" / "summary.json").read_text())
    assert {level: s["records"] for level, s in summary["levels"].items()} == counts
    assert len(list((tmp_path / "preview").glob("*.png"))) == 3

    sft, trained = tmp_path / "sft", tmp_path / "sft-run"
    run(["python", "data_builders/build_sft.py", "--data", data, "--out", sft, "--config", "configs/data/default.yaml",
         f"tokenizer={model}", "target_count=40", "vision.min_pixels=3136", "vision.max_pixels=50176",
         "max_length=2048", "coords=rel1000", "validation_share=0.2"], env)
    run(["accelerate", "launch", "--num_processes", 1, "--cpu", "recipes/sft_qwen.py", "--config",
         "configs/sft/tiny_cpu.yaml", f"model={model}", f"dataset={sft}", f"output_dir={trained}", "max_steps=4",
         "save_steps=2", "eval_steps=2", "pack_tokens=2048", "max_length=2048", "limit_eval_samples=4",
         "report_to=[]"], env)
    checkpoints = sorted(p.name for p in trained.glob("checkpoint-*"))
    assert checkpoints == ["checkpoint-2", "checkpoint-4"]
    assert all((trained / c / "gbtrain_checkpoint.json").is_file() for c in checkpoints)

    best = tmp_path / "best"
    printed = run(["python", "eval/select_checkpoint.py", "--run", trained, "--data", data, "--out",
                   tmp_path / "select", "--backend", "hf", "--limit", 1, "--max-tokens", 24, "--copy-best", best], env)
    with open(tmp_path / "select" / "selection.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["checkpoint"], r["status"]) for r in rows] == [(c, "ok") for c in checkpoints]
    chosen = json.loads((tmp_path / "select" / "selection.json").read_text())["best"]["checkpoint"]
    assert chosen in checkpoints and f"best: {chosen} (step" in printed
    assert (best / "gbtrain_checkpoint.json").read_text() == (trained / chosen / "gbtrain_checkpoint.json").read_text()

    scans = tmp_path / "scans"  # new pages, never annotated: only their images, in one flat folder
    run(["python", "data_builders/synth_pages.py", "--out", tmp_path / "new", "--pages", 2, "--seed", 1], env)
    scans.mkdir()
    for image in (tmp_path / "new" / "images" / "L3").rglob("*.jpg"):
        shutil.copy(image, scans / f"new-{image.name}")
    graded = tmp_path / "graded"
    printed = run(["python", "eval/grade_pages.py", "--model", best, "--pages", scans, "--out", graded, "--backend",
                   "hf", "--max-tokens", 64], env)
    assert "graded 2 pages now, 2 in all" in printed
    names = sorted(p.name for p in scans.iterdir())
    with open(graded / "totals.csv", newline="") as f:
        assert sorted(r["page"] for r in csv.DictReader(f)) == names
    with open(graded / "grades.csv", newline="") as f:
        items = list(csv.DictReader(f))
    summary = json.loads((graded / "summary.json").read_text())
    assert summary["pages"] == 2 and summary["items"] == len(items) and {r["page"] for r in items} <= set(names)
    assert sorted(p.name for p in (graded / "overlays").iterdir()) == [f"{n}.png" for n in names]

    # the loop closes: teachers correct the grades in Label Studio (here: every model box deleted, each true answer
    # of the page drawn and graded, as the synthetic truth has it), the import writes every level, and the next
    # fine-tune trains on last term's pages and the reviewed ones together
    run(["python", "eval/review.py", "export", "--graded", graded], env)
    tasks = json.loads((graded / "review" / "labelstudio_tasks.json").read_text(encoding="utf-8"))
    truth = {f"new-{Path(r.image).name}": r for r in load_level(tmp_path / "new", "L3").records}
    exported = [_teacher_redraws(task, truth[task["data"]["page"]], n) for n, task in enumerate(tasks)]
    (tmp_path / "ls-export.json").write_text(json.dumps(exported), encoding="utf-8")
    reviewed = tmp_path / "reviewed"
    printed = run(["python", "eval/review.py", "import", "--graded", graded, "--reviewed", tmp_path / "ls-export.json",
                   "--out", reviewed, "--subject", "Mathematics"], env)
    marks = sum(len(r.marks) for r in truth.values())
    assert f"reviewed pages for build_sft: 2 pages, {marks} marks" in printed
    questions = sum(len({m.mark_id.split("-", 1)[0] for m in r.marks if not m.is_context}) for r in truth.values())
    assert {lv: len(ld.records) for lv, ld in load_dataset(reviewed).items()} == {"L1": questions, "L2": questions,
                                                                               "L3": 2}
    both, retrained = tmp_path / "sft-both", tmp_path / "sft-both-run"
    printed = run(["python", "data_builders/build_sft.py", "--data", data, "--data", reviewed, "--out", both,
                   f"tokenizer={model}", "target_count=40", "vision.min_pixels=3136", "vision.max_pixels=50176",
                   "max_length=2048", "coords=rel1000", "validation_share=0.2", "data_weights=[1,2]"], env)
    assert f"folders: {data} (weight 1): " in printed and f"{reviewed} (weight 2): " in printed
    stats = json.loads((both / "stats.json").read_text())
    assert stats["sources"][1]["tag"] == "1-reviewed" and stats["replaced_pages"] == []  # new pages: none replaced
    run(["accelerate", "launch", "--num_processes", 1, "--cpu", "recipes/sft_qwen.py", "--config",
         "configs/sft/tiny_cpu.yaml", f"model={best}", f"dataset={both}", f"output_dir={retrained}", "max_steps=2",
         "save_steps=2", "eval_steps=2", "pack_tokens=2048", "max_length=2048", "limit_eval_samples=4",
         "report_to=[]"], env)
    assert (retrained / "checkpoint-2" / "gbtrain_checkpoint.json").is_file()


def _teacher_redraws(task: dict, truth, n: int) -> dict:
    """A task as Label Studio exports it after a teacher deleted the model's regions and drew each answer of the
    page with its question id, transcription, verdict and points (the review's labeling config)."""
    results = []
    for k, mark in enumerate(truth.marks):
        if mark.is_context:
            continue
        box = mark.box
        common = {"id": f"t{n}r{k}", "to_name": "image", "original_width": truth.width,
                  "original_height": truth.height, "image_rotation": 0, "origin": "manual"}
        value = {"x": 100 * box.x1 / truth.width, "y": 100 * box.y1 / truth.height,
                 "width": 100 * (box.x2 - box.x1) / truth.width, "height": 100 * (box.y2 - box.y1) / truth.height,
                 "rotation": 0}
        results.append({**common, "type": "rectanglelabels", "from_name": "verdict",
                        "value": {**value, "rectanglelabels": [mark.label]}})
        controls = [("qid", "textarea", mark.mark_id), ("hand", "textarea", mark.hand or None),
                    ("score", "number", mark.score), ("full_score", "number", mark.full_score)]
        results += [{**common, "type": kind, "from_name": name,
                     "value": {**value, {"textarea": "text", "number": "number"}[kind]: v if kind == "number" else [v]}}
                    for name, kind, v in controls if v is not None]
    return {"id": 300 + n, "data": task["data"], "project": 9,
            "predictions": [{"id": 600 + n, "model_version": "best", "result": task["predictions"][0]["result"]}],
            "annotations": [{"id": 900 + n, "completed_by": {"id": 1, "email": "teacher@school.example"},
                             "result": results, "was_cancelled": False, "ground_truth": False, "lead_time": 61.5,
                             "created_at": "2026-12-07T10:00:00.000000Z", "parent_prediction": 600 + n}]}

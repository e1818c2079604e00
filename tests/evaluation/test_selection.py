"""Checkpoint selection (gbtrain.evaluation.selection, eval/select_checkpoint.py): finding a run's checkpoints, the
ranking rule, the table, the evaluated split, the output folder's refusals, and one run on checkpoints the recipe
saved (LoRA, merged per checkpoint, hf backend)."""

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gbtrain.evaluation.selection import (
    SelectRun,
    best_row,
    check_select_run,
    claim_selection_folder,
    markdown,
    split_records,
    table_row,
    write_csv,
)
from gbtrain.outputs import COPY_MARKER
from gbtrain.train.checkpoints import Checkpoint, eval_losses, find_checkpoints, training_record

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args, timeout=900):
    return subprocess.run([sys.executable, str(ROOT / "eval" / "select_checkpoint.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _model_folder(path: Path, kind: str = "full", weights: bool = True) -> Path:
    """The files a saved model folder is recognised by (their content is not read by the discovery)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / ("adapter_config.json" if kind == "lora" else "config.json")).write_text("{}")
    if weights:
        (path / ("adapter_model.safetensors" if kind == "lora" else "model.safetensors")).write_bytes(b"w")
    return path


def _saved(path: Path, kind: str = "full", weights: bool = True, record=None, run_id: str | None = None) -> Path:
    """A checkpoint as the trainer leaves it: its files, its gbtrain record, then the completion marker."""
    from gbtrain.train.checkpoints import mark_complete, write_checkpoint_record

    _model_folder(path, kind, weights)
    if record is not None:
        write_checkpoint_record(path, record)
    mark_complete(path, run_id, int(path.name.removeprefix("checkpoint-")) if path.name[-1].isdigit() else 0)
    return path


# --------------------------------------------------------------------------------- discovery
def test_every_checkpoint_is_found_by_step_with_its_kind_and_problem(tmp_path):
    run = tmp_path / "run"
    _saved(run / "checkpoint-10", "lora")
    _saved(run / "checkpoint-2")
    _saved(run / "checkpoint-4", weights=False)
    (run / "checkpoint-6" / "global_step6").mkdir(parents=True)
    _saved(run / "checkpoint-6", weights=False)
    (run / "checkpoint-8").mkdir()  # a save cut short before anything was written
    _saved(run / "checkpoint-x")  # not a trainer checkpoint name
    _model_folder(run)  # the final model, saved at the root at step 12 (no checkpoint at that step)
    (run / "train_summary.json").write_text(json.dumps({"global_step": 12}))
    found, notes = find_checkpoints(run)
    assert [(c.name, c.step, c.kind) for c in found] == [
        ("checkpoint-2", 2, "full"), ("checkpoint-4", 4, "full"), ("checkpoint-6", 6, "full"),
        ("checkpoint-10", 10, "lora"), ("final-12", 12, "full")]
    problems = {c.name: c.problem for c in found}
    assert problems["checkpoint-2"] is None and problems["checkpoint-10"] is None and problems["final-12"] is None
    assert problems["checkpoint-4"] == "no weights (model.safetensors)"
    assert "DeepSpeed ZeRO shards (global_step6/)" in problems["checkpoint-6"]
    assert found[-1].path == run and notes == [
        "checkpoint-8 is not evaluated: no gbtrain_complete.json: its save did not finish (or gbtrain did not save it)",
        "checkpoint-x is not evaluated: not a name the trainer writes (checkpoint-N, N in digits without leading "
        "zeros)"]
    (run / "checkpoint-x").rename(tmp_path / "elsewhere")
    (run / "checkpoint-8").rmdir()

    (run / "train_summary.json").write_text(json.dumps({"global_step": 10}))  # the trainer saved the last step too
    found, notes = find_checkpoints(run)
    assert found[-1].name == "checkpoint-10" and notes == [f"the final model in {run} is checkpoint-10's weights "
                                                           f"(saved at the same step)"]
    (run / "train_summary.json").unlink()
    found, notes = find_checkpoints(run)
    assert found[-1].name == "checkpoint-10" and "train_summary.json" in notes[0]


def test_only_checkpoints_this_run_saved_are_taken_and_the_others_are_named(tmp_path):
    from gbtrain.coords import PixelBudget
    from gbtrain.train.checkpoints import CheckpointRecord, write_checkpoint_record

    run = tmp_path / "run"
    record = CheckpointRecord("qwen25", PixelBudget(3136, 200704))  # as the trainer writes it into every save
    for name in ("checkpoint-1", "checkpoint-0001", "checkpoint-\u0663", "checkpoint-2"):
        _saved(run / name, record=record)
    write_checkpoint_record(run, record)
    _saved(run / "checkpoint-3", record=CheckpointRecord("rel1000", record.budget))  # another run's
    (run / "checkpoint-4").symlink_to(_saved(tmp_path / "base-model"), target_is_directory=True)
    found, notes = find_checkpoints(run)
    assert [c.name for c in found] == ["checkpoint-1", "checkpoint-2"]
    assert sorted(notes) == sorted([
        "checkpoint-0001 is not evaluated: not a name the trainer writes (checkpoint-N, N in digits without leading "
        "zeros)",
        "checkpoint-\u0663 is not evaluated: not a name the trainer writes (checkpoint-N, N in digits without leading "
        "zeros)",
        "checkpoint-3 is not evaluated: its gbtrain_checkpoint.json differs from the run's: a checkpoint of another "
        "run",
        f"checkpoint-4 is not evaluated: a symbolic link (to {(tmp_path / 'base-model').resolve()}), not a checkpoint "
        f"saved in this run"])


def test_a_checkpoint_whose_marker_names_another_run_or_other_files_is_named_not_taken(tmp_path):
    """A checkpoint copied in from a run with the same settings carries that run's id; a file truncated or deleted
    after the save no longer matches the marker."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "gbtrain_run.json").write_text(json.dumps({"model": "m", "run_id": "ours"}))
    for step in (1, 2, 3, 4):
        _saved(run / f"checkpoint-{step}", run_id="ours")
    _saved(run / "checkpoint-5", run_id="theirs")
    (run / "checkpoint-2" / "model.safetensors").write_bytes(b"")  # truncated
    (run / "checkpoint-3" / "config.json").unlink()
    (run / "checkpoint-4" / "gbtrain_complete.json").write_text("{")
    found, notes = find_checkpoints(run)
    assert [c.name for c in found] == ["checkpoint-1"]
    assert notes == [
        "checkpoint-2 is not evaluated: model.safetensors is 0 bytes, 1 when saved: damaged or truncated",
        "checkpoint-3 is not evaluated: config.json is missing (it was saved with the checkpoint)",
        "checkpoint-4 is not evaluated: its gbtrain_complete.json cannot be read (Expecting property name enclosed in "
        "double quotes: line 1 column 2 (char 1))",
        "checkpoint-5 is not evaluated: saved by another run ('theirs', this folder's run is 'ours')"]


def test_a_run_still_going_takes_its_record_from_a_checkpoint_it_saved(tmp_path):
    """No root record yet: the data's coords come from a checkpoint find_checkpoints took, never from a folder it
    left out (checkpoint-0001 sorts first)."""
    from gbtrain.coords import PixelBudget
    from gbtrain.train.checkpoints import CheckpointRecord

    run = tmp_path / "run"
    ours = CheckpointRecord("qwen25", PixelBudget(3136, 200704))
    _saved(run / "checkpoint-0001", record=CheckpointRecord("rel1000", ours.budget))
    _saved(run / "checkpoint-1", record=ours)
    found, _ = find_checkpoints(run)
    assert training_record(run, {}, found) == ours


def test_a_folder_without_checkpoints_is_one_clear_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(ValueError, match="no checkpoint-N folder and no final model"):
        find_checkpoints(run)
    (run / "gbtrain_run.json").write_text(json.dumps({"model": "m", "dataset": "d"}))
    (tmp_path / "data").mkdir()
    proc = _cli("--run", run, "--data", tmp_path / "data", "--out", tmp_path / "out", timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"select_checkpoint: {run}: no checkpoint-N folder and no final model: "
                                                f"point --run at a training output_dir (recipes/sft_qwen.py "
                                                f"output_dir=...)"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("option", "message"), [
    ({"split": "train"}, "--split 'train': choose one of validation, test, all"),
    ({"metric": "loss"}, "--metric 'loss'"),
    ({"backend": "openai"}, "runs local checkpoints with vllm or hf"),
    ({"coords": "pixels"}, "--coords 'pixels': unknown coordinate convention"),
    ({"limit": 0}, "--limit"),
    ({"settings": "L4-af"}, "unknown setting 'L4-af'"),
])
def test_bad_options_are_refused_before_anything_is_read(option, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_select_run(SelectRun(run="missing", data="missing", out="o", **option))


def test_eval_loss_comes_from_the_trainer_log_and_the_final_summary(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint-4").mkdir(parents=True)
    history = [{"loss": 3.0, "step": 2}, {"eval_loss": 2.5, "step": 2}, {"eval_loss": 2.0, "step": 4}]
    (run / "checkpoint-4" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    (run / "checkpoint-5").mkdir()
    (run / "checkpoint-5" / "trainer_state.json").write_text("{broken")
    (run / "train_summary.json").write_text(json.dumps({"global_step": 6, "eval_loss": 1.5}))
    assert eval_losses(run) == {2: 2.5, 4: 2.0, 6: 1.5}


# --------------------------------------------------------------------------------- ranking and the table
def _report(acc: dict[str, float], maps: dict[str, float]) -> dict:
    """The part of an evaluation's report.json that the table reads."""
    return {"settings": {s: {"accuracy": acc[s], "map_20_50": maps[s]} for s in acc}}


def _row(name: str, step: int, acc: tuple[float, float], maps: tuple[float, float]) -> dict:
    settings = ["L1-af", "L3-ab"]
    report = _report(dict(zip(settings, acc, strict=True)), dict(zip(settings, maps, strict=True)))
    return table_row(Checkpoint(name, step, Path(name), "full"), report, settings, None)


def test_the_best_is_the_highest_mean_accuracy_then_map_then_the_earlier_step():
    rows = [_row("checkpoint-2", 2, (0.1, 0.3), (50.0, 10.0)), _row("checkpoint-4", 4, (0.3, 0.2), (1.0, 1.0)),
            _row("checkpoint-6", 6, (0.2, 0.3), (20.0, 20.0)), _row("checkpoint-8", 8, (0.25, 0.25), (30.0, 10.0))]
    assert [r["mean_accuracy"] for r in rows] == [0.2, 0.25, 0.25, 0.25]
    assert best_row(rows)["checkpoint"] == "checkpoint-6"  # 0.25 three times: the higher mean mAP (20.0)
    assert best_row(rows, "map")["checkpoint"] == "checkpoint-2"  # mean mAP 30.0
    tied = [_row("checkpoint-9", 9, (0.5, 0.0), (5.0, 5.0)), _row("checkpoint-3", 3, (0.0, 0.5), (0.0, 10.0))]
    assert best_row(tied)["checkpoint"] == "checkpoint-3"  # same figures: the earlier step
    failed = table_row(Checkpoint("checkpoint-12", 12, Path("x"), "lora"), None, ["L1-af"], 0.7, "OSError: broken")
    assert best_row([failed]) is None and best_row([*rows, failed])["checkpoint"] == "checkpoint-6"


def test_the_table_holds_the_report_figures_and_names_failures(tmp_path):
    rows = [_row("checkpoint-2", 2, (0.1, 0.3), (50.123456, 10.0)),
            table_row(Checkpoint("checkpoint-4", 4, Path("c4"), "lora"), None, ["L1-af", "L3-ab"], 0.75,
                      "SafetensorError: header too large")]
    rows[0]["eval_loss"] = 1.234567891
    write_csv(rows, ["L1-af", "L3-ab"], tmp_path / "t.csv")
    read = _csv(tmp_path / "t.csv")
    assert [r["checkpoint"] for r in read] == ["checkpoint-2", "checkpoint-4"]
    assert float(read[0]["accuracy L3-ab"]) == 0.3 and float(read[0]["mAP L1-af"]) == 50.123456
    assert float(read[0]["mean_map"]) == rows[0]["mean_map"] == 30.061728
    assert float(read[0]["eval_loss"]) == 1.234567891 and read[0]["status"] == "ok"
    assert read[1]["status"] == "failed" and read[1]["problem"] == "SafetensorError: header too large"
    assert read[1]["accuracy L1-af"] == "" and float(read[1]["eval_loss"]) == 0.75
    identity = {"run": "/r", "data": "/d", "split": "validation", "limit": 2, "backend": "hf", "judge": "rule"}
    text = markdown({"identity": identity, "settings": ["L1-af", "L3-ab"], "rows": rows, "metric": "accuracy",
                     "best": {**rows[0], "path": "/r/checkpoint-2"}, "notes": ["a note"]})
    assert "| checkpoint-2 **(best)** | 2 | 10.0 | 30.0 | 20.0 | 30.06 | 1.2346 |" in text
    assert "- checkpoint-4: SafetensorError: header too large" in text and "- a note" in text


# --------------------------------------------------------------------------------- the evaluated split
def test_only_pages_the_build_kept_out_of_training_are_evaluated(synth_dir, sft_dir):
    from datasets import load_from_disk

    chosen = split_records(synth_dir, ["L1", "L3"], "validation", str(sft_dir))
    built = load_from_disk(str(sft_dir))
    train_pages, val_pages = set(built["train"]["page_id"]), set(built["validation"]["page_id"])
    pages = {r.page_id for recs in chosen.values() for r in recs}
    assert chosen["L1"] and chosen["L3"] and not pages & train_pages and val_pages <= pages
    assert len(split_records(synth_dir, ["L3"], "all", None)["L3"]) == 12
    with pytest.raises(FileNotFoundError, match="pass --split all"):
        split_records(synth_dir, ["L3"], "validation", str(sft_dir / "gone"))


def test_a_selection_made_otherwise_is_refused_and_overwrite_discards_it(tmp_path):
    out = tmp_path / "sel"
    identity = {"run": "/r", "settings": ["L1-af"], "limit": 2}
    claim_selection_folder(out, identity, overwrite=False)
    (out / "checkpoint-2").mkdir()
    (out / "merged" / "checkpoint-2").mkdir(parents=True)
    claim_selection_folder(out, identity, overwrite=False)  # the same selection resumes
    with pytest.raises(ValueError, match=r"made otherwise \(limit: 2 there, 3 now\).*--overwrite"):
        claim_selection_folder(out, identity | {"limit": 3}, overwrite=False)
    assert (out / "checkpoint-2").is_dir()
    claim_selection_folder(out, identity | {"limit": 3}, overwrite=True)
    assert not (out / "checkpoint-2").exists() and not (out / "merged").exists()
    assert json.loads((out / "selection_run.json").read_text())["limit"] == 3


@pytest.mark.parametrize("overwrite", [False, True])
def test_work_no_selection_record_vouches_for_is_never_reused_or_deleted(tmp_path, overwrite):
    """A folder of the user's own (data/, merged/, checkpoint-1/) is refused, and --overwrite deletes none of it."""
    out = tmp_path / "mine"
    for name in ("data/L1.json", "merged/notes.txt", "checkpoint-1/model.safetensors"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("the user's")
    with pytest.raises(ValueError, match=r"holds checkpoint-1, merged, data that no readable selection_run\.json of "
                                         r"select_checkpoint vouches for: choose another --out \(--overwrite discards "
                                         r"only work that select_checkpoint recorded\)"):
        claim_selection_folder(out, {"run": "/r"}, overwrite=overwrite)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "checkpoint-1/model.safetensors", "data/L1.json", "merged/notes.txt"]


# --------------------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_select_among_lora_checkpoints_the_recipe_saved(recipe_lora, synth_dir, tmp_path):
    """Two LoRA checkpoints from the real recipe, each merged and evaluated with the hf backend on two records
    per level of the validation pages (the hf backend: one vLLM CPU engine per checkpoint would cost ~40 s
    each to start); a rerun evaluates nothing, a damaged checkpoint is listed, changed data is refused."""
    run = tmp_path / "run"  # a copy of the shared run (tests/conftest.py): a checkpoint is added to it below
    shutil.copytree(recipe_lora("qwen2_5_vl")[2], run)
    data = tmp_path / "data"  # a copy, changed at the end
    shutil.copytree(synth_dir, data)
    out, best_dir = tmp_path / "select", tmp_path / "best"
    args = ("--run", run, "--data", data, "--out", out, "--backend", "hf", "--limit", 2, "--max-tokens", 24,
            "--max-model-len", 4096, "--no-keep-merged", "--copy-best", best_dir)
    proc = _cli(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]

    rows = _csv(out / "selection.csv")
    assert [(r["checkpoint"], r["step"], r["status"]) for r in rows] == [("checkpoint-2", "2", "ok"),
                                                                         ("checkpoint-4", "4", "ok")]
    means = {}
    for r in rows:
        report = json.loads((out / r["checkpoint"] / "report.json").read_text())
        assert set(report["settings"]) == {"L1-af", "L3-ab"} and report["meta"]["limit"] == 2
        for s in ("L1-af", "L3-ab"):
            assert float(r[f"accuracy {s}"]) == report["settings"][s]["accuracy"]
            assert float(r[f"mAP {s}"]) == report["settings"][s]["map_20_50"]
        assert float(r["eval_loss"]) > 0
        means[r["checkpoint"]] = (float(r["mean_accuracy"]), float(r["mean_map"]), int(r["step"]))
        # LoRA: the merged checkpoint was evaluated with the run's coords and budget, then deleted (--keep-merged)
        recorded = json.loads((out / r["checkpoint"] / "run.json").read_text())
        assert recorded["model"] == str((out / "merged" / r["checkpoint"]).resolve())
        assert recorded["data"] == str((out / "data").resolve())
        root = json.loads((run / "gbtrain_checkpoint.json").read_text())
        # the factor is the model's own (its family's, checked when its processor loads), not an evaluation
        # option; the training build is the record's (the evaluation scores the split's own folder whole)
        made = [k for k in root if k not in ("factor", "dataset")]
        assert {k: recorded[k] for k in made} == {k: root[k] for k in made}
    assert not list((out / "merged").iterdir())
    expected = min(means, key=lambda n: (-means[n][0], -means[n][1], means[n][2]))
    summary = json.loads((out / "selection.json").read_text())
    assert summary["best"]["checkpoint"] == expected and f"best: {expected} (step" in proc.stdout
    assert summary["evaluated_now"] == ["checkpoint-2", "checkpoint-4"] and (out / "selection.png").stat().st_size
    assert "checkpoint-4's weights" in summary["notes"][0]  # the root's final model: not evaluated twice
    assert json.loads((best_dir / COPY_MARKER).read_text())["checkpoint"] == expected
    assert (best_dir / "model.safetensors").is_file() and not (best_dir / "adapter_config.json").exists()
    assert (best_dir / "gbtrain_checkpoint.json").read_text() == (run / "gbtrain_checkpoint.json").read_text()

    # a rerun evaluates nothing; a checkpoint whose weights were damaged after the save is named, not evaluated (a
    # truncation: its marker's sizes) or listed as failed (bytes garbled in place: only loading finds it)
    from gbtrain.train.checkpoints import mark_complete

    reports = {n: (out / n / "report.json").stat().st_mtime_ns for n in means}
    run_id = json.loads((run / "gbtrain_run.json").read_text())["run_id"]
    for step in (3, 5):
        shutil.copytree(run / "checkpoint-2", run / f"checkpoint-{step}")
        mark_complete(run / f"checkpoint-{step}", run_id, step)  # as if saved at that step
    weights = run / "checkpoint-3" / "adapter_model.safetensors"
    weights.write_bytes(b"\x00" * weights.stat().st_size)
    weights = run / "checkpoint-5" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    proc = _cli(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {n: (out / n / "report.json").stat().st_mtime_ns for n in means} == reports
    assert "evaluated now: 0, scored earlier: 2, failed: 1" in proc.stdout
    assert "checkpoint-5 is not evaluated: adapter_model.safetensors is 100 bytes" in proc.stdout + proc.stderr
    warning = [ln for ln in proc.stderr.splitlines() if ln.startswith("select_checkpoint: warning:")]
    assert len(warning) == 1 and "checkpoint-3 not evaluated" in warning[0]
    rows = _csv(out / "selection.csv")
    assert [(r["checkpoint"], r["status"]) for r in rows] == [("checkpoint-2", "ok"), ("checkpoint-3", "failed"),
                                                              ("checkpoint-4", "ok")]
    assert rows[1]["problem"] and json.loads((out / "selection.json").read_text())["best"]["checkpoint"] == expected
    assert not (out / "merged" / "checkpoint-3.partial").exists()

    # changed annotations: refused before any model starts, in one line
    annotations = data / "annotations" / "L1.json"
    records = json.loads(annotations.read_text())
    records[0]["marks"][0]["attributes"]["hand"] += "x"
    annotations.write_text(json.dumps(records, ensure_ascii=False))
    proc = _cli(*args)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "made otherwise (annotations_sha256:" in proc.stderr and "--overwrite" in proc.stderr

"""data_builders/export_hub.py: a build as a self-contained DatasetDict that plain `datasets` and TRL use without
gbtrain's loader (images embedded, README front matter true to the folder), and the folders it refuses."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gbtrain.data.hub_export import HubExportRun, check_export, export_hub
from gbtrain.outputs import HUB_EXPORT_RECORD

ROOT = Path(__file__).resolve().parents[2]


def files_under(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def front_matter(readme: Path) -> dict:
    _, meta, _ = readme.read_text(encoding="utf-8").split("---\n", 2)
    return yaml.safe_load(meta)


@pytest.fixture(scope="module")
def exported(sft_dir, tmp_path_factory):
    """The session's small build exported by the real command; the build's files before and after."""
    out = tmp_path_factory.mktemp("hub") / "export"
    before = files_under(sft_dir)
    proc = subprocess.run([sys.executable, str(ROOT / "data_builders/export_hub.py"), "--build", str(sft_dir),
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "licence: unknown" in proc.stdout
    return out, before, files_under(sft_dir)


def test_the_export_opens_with_plain_datasets_and_holds_the_builds_rows(exported, sft_dir):
    from datasets import Image, List, load_from_disk
    from PIL import Image as PILImage

    out, before, after = exported
    assert before == after  # the build is an input: no cache file, no change
    build, export = load_from_disk(str(sft_dir)), load_from_disk(str(out))
    assert list(export) == list(build)
    for split in build:
        assert export[split].column_names == build[split].column_names
        assert export[split].features["images"] == List(Image())
        others = [c for c in build[split].column_names if c != "images"]
        assert export[split].select_columns(others).to_list() == build[split].select_columns(others).to_list()
        raw = export[split].with_format("arrow")["images"].to_pylist()  # the stored cells, undecoded
        for row, cells, paths in zip(export[split], raw, build[split]["images"], strict=True):
            (image,) = row["images"]
            assert isinstance(image, PILImage.Image) and image.size == (row["image_width"], row["image_height"])
            assert [c["bytes"] for c in cells] == [(sft_dir / p).read_bytes() for p in paths]  # the JPEGs as built
    record = json.loads((out / HUB_EXPORT_RECORD).read_text())
    assert record["rows"] == {s: len(build[s]) for s in build}
    assert record["duplication"] > 1 and record["export_bytes"] > record["embedded_image_bytes"]


def test_the_readme_is_the_card_with_true_front_matter(exported, sft_dir, budget, tmp_path):
    """The front matter's files are this folder's, so `load_dataset` on the folder reads them (as the Hub would)."""
    from datasets import load_dataset, load_from_disk

    out, _, _ = exported
    meta = front_matter(out / "README.md")
    assert meta["license"] == "unknown" and meta["task_categories"] == ["image-text-to-text"]
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert (sft_dir / "card.md").read_text(encoding="utf-8") in readme
    assert (f'processor.image_processor.size = {{"shortest_edge": {budget.min_pixels}, "longest_edge": '
            f'{budget.max_pixels}}}') in readme
    loaded = load_dataset(str(out), cache_dir=str(tmp_path / "cache"))
    build = load_from_disk(str(sft_dir))
    assert {s: len(d) for s, d in loaded.items()} == {s: len(d) for s, d in build.items() if len(d)}
    assert loaded["train"][0]["sample_id"] == build["train"][0]["sample_id"]


def test_a_rerun_replaces_an_earlier_or_stopped_export_and_nothing_else(sft_dir, tmp_path):
    out = tmp_path / "again"
    run = HubExportRun(build=str(sft_dir), out=str(out), license="cc-by-4.0")
    export_hub(run)
    record = json.loads((out / HUB_EXPORT_RECORD).read_text())
    assert record["status"] == "complete" and "README.md" in record["files"]
    (out / HUB_EXPORT_RECORD).write_text('{"status": "unfinished"}')  # stopped: its first record is all there is
    export_hub(run)
    stale = out / "train" / "data-00007-of-00008.arrow"  # a shard of an earlier, larger export, which listed it
    stale.write_bytes(b"old")
    record = json.loads((out / HUB_EXPORT_RECORD).read_text())
    (out / HUB_EXPORT_RECORD).write_text(json.dumps(record | {"files": [*record["files"], stale.relative_to(
        out).as_posix()]}))
    (out / "notes.txt").write_text("mine")  # beside the export, not one of its names: never touched
    export_hub(run)
    assert not stale.exists() and (out / "notes.txt").read_text() == "mine"
    assert front_matter(out / "README.md")["license"] == "cc-by-4.0"
    mine = out / "train" / "mine.csv"  # a user's file among the export's own: no record vouches for it
    mine.write_text("the user's")
    listing = files_under(tmp_path)
    with pytest.raises(ValueError, match=r"holds train/mine\.csv \(1 files\) that export_hub did not write"):
        export_hub(run)
    assert files_under(tmp_path) == listing


def test_files_shaped_like_an_export_without_its_record_are_never_deleted(sft_dir, tmp_path):
    """The user's own train/, README.md and parquet files (no gbtrain_export.json): not taken for a stopped export."""
    out = tmp_path / "mine"
    (out / "train").mkdir(parents=True)
    (out / "train" / "mine.csv").write_text("x")
    (out / "README.md").write_text("# my dataset")
    (out / "train" / "part-0.parquet").write_bytes(b"PAR1")
    listing = files_under(tmp_path)
    with pytest.raises(ValueError, match="holds files that export_hub did not write"):
        export_hub(HubExportRun(build=str(sft_dir), out=str(out)))
    assert files_under(tmp_path) == listing


@pytest.mark.parametrize("where", ["build", "inside", "around", "other-files"])
def test_an_output_folder_of_other_work_is_refused(sft_dir, tmp_path, where):
    import shutil

    build = tmp_path / "sft"
    shutil.copytree(sft_dir, build)
    out = {"build": build, "inside": build / "hub", "around": tmp_path, "other-files": tmp_path / "mine"}[where]
    if where == "other-files":
        out.mkdir()
        (out / "thesis.tex").write_text("x")
    listing = files_under(tmp_path)
    message = "holds files that export_hub did not write" if where == "other-files" else "folder of its own"
    with pytest.raises(ValueError, match=message):
        export_hub(HubExportRun(build=str(build), out=str(out)))
    assert files_under(tmp_path) == listing


def test_a_push_that_cannot_happen_is_refused_before_any_work(sft_dir, tmp_path, monkeypatch):
    out = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE is set"):
        check_export(HubExportRun(build=str(sft_dir), out=str(out), license="cc-by-4.0", push_to_hub="me/exams"))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(ValueError, match="--license"):
        check_export(HubExportRun(build=str(sft_dir), out=str(out), push_to_hub="me/exams"))
    with pytest.raises(ValueError, match="Repo id"):
        check_export(HubExportRun(build=str(sft_dir), out=str(out), license="mit", push_to_hub="not a repo"))
    proc = subprocess.run([sys.executable, str(ROOT / "data_builders/export_hub.py"), "--build", str(sft_dir),
                           "--out", str(out), "--license", "mit", "--push-to-hub", "me/exams"],
                          capture_output=True, text=True, timeout=120, env={"PATH": "", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2 and proc.stderr.startswith("export_hub: --push-to-hub me/exams: HF_HUB_OFFLINE")
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()


def test_trl_trains_a_step_on_the_export_without_gbtrain(exported, tiny_model_dir, budget, tmp_path):
    """TRL's SFTTrainer with its own vision collator, on `load_from_disk` of the export and a processor made as the
    README says: nothing of gbtrain between the folder and the training step."""
    import torch
    from datasets import load_from_disk
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from trl import SFTConfig, SFTTrainer

    out, _, _ = exported
    train = load_from_disk(str(out))["train"]
    train = train.select([i for i, level in enumerate(train["level"]) if level == "L1"][:2])  # no cache file
    processor = AutoProcessor.from_pretrained(tiny_model_dir)
    processor.image_processor.size = {"shortest_edge": budget.min_pixels, "longest_edge": budget.max_pixels}
    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir, dtype=torch.float32)
    args = SFTConfig(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=2, report_to=[],
                     max_length=None, gradient_checkpointing=False, use_cpu=True, save_strategy="no",
                     dataloader_num_workers=0)
    result = SFTTrainer(model=model, args=args, train_dataset=train, processing_class=processor).train()
    assert result.global_step == 1 and result.training_loss > 0


def test_a_row_naming_a_file_outside_the_build_is_refused(sft_dir, tmp_path):
    """A build row edited to name any file (../private/secret.jpg, an absolute path) is neither trained on nor
    embedded in an export, ready for --push-to-hub."""
    import shutil

    from datasets import load_from_disk

    from gbtrain.data.sft_dataset import load_sft_dataset

    build = tmp_path / "build"
    shutil.copytree(sft_dir, build)
    secret = tmp_path / "private" / "secret.jpg"
    secret.parent.mkdir()
    secret.write_bytes((build / "images").rglob("*.jpg").__next__().read_bytes())
    for bad in ("../private/secret.jpg", str(secret)):
        dd = load_from_disk(str(sft_dir))
        dd["train"] = dd["train"].map(lambda row, i, p=bad: {"images": [p] if i == 0 else row["images"]},
                                      with_indices=True)
        shutil.rmtree(build / "train")
        dd["train"].save_to_disk(str(build / "train"))
        with pytest.raises(ValueError, match=r"a train row names the image .*secret\.jpg.*, which is not under "
                                             r"images/ of a build"):
            load_sft_dataset(build)
        with pytest.raises(ValueError, match="not under images/"):
            export_hub(HubExportRun(str(build), str(tmp_path / "export")))
        assert not (tmp_path / "export").exists()

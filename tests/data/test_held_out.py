"""Which records an evaluation scores (gbtrain.data.held_out, gbtrain.data.splits): the held-out pages of the model's
training build by default, every record of a folder the build never saw, and a refusal of a split that cannot hold."""

from __future__ import annotations

import shutil

import pytest

from gbtrain.data.annotations import load_level
from gbtrain.data.held_out import resolve_held_out
from gbtrain.data.sft_dataset import finished_build, load_sft_dataset
from gbtrain.data.splits import SplitRule, split_of
from gbtrain.schema import Record


@pytest.fixture(scope="module")
def held_build(synth_dir, tmp_path_factory):
    """A build of the synthetic pages whose test and validation splits both hold pages (the session's shared build,
    10% test of 12 pages, holds none), built without a tokenizer (its lengths estimated)."""
    from conftest import TEST_MAX_PIXELS, TEST_MIN_PIXELS

    from gbtrain.coords import PixelBudget
    from gbtrain.data.build_config import BuildConfig
    from gbtrain.data.sft_dataset import build_sft_dataset

    out = tmp_path_factory.mktemp("held") / "sft"
    build_sft_dataset(BuildConfig(data=str(synth_dir), out=str(out), target_count=40, seed=1, validation_share=0.2,
                                  test_share=0.4, vision=PixelBudget(TEST_MIN_PIXELS, TEST_MAX_PIXELS),
                                  max_length=4096, workers=1), progress=False)
    return out


def test_auto_is_the_test_split_of_the_build_made_from_data(held_build, synth_dir):
    sft_dir = held_build
    held = resolve_held_out(synth_dir, "auto", None, str(sft_dir))
    assert (held.split, held.build) == ("auto", str(sft_dir.resolve()))
    records = load_level(synth_dir, "L3").records
    kept = {r.page_id for r in records if held.keeps(r)}
    built = load_sft_dataset(sft_dir)
    assert kept == set(built["test"]["page_id"])  # the builder's own test pages, and no other
    assert kept and not kept & set(built["train"]["page_id"])
    said = held.record([r for r in records if held.keeps(r)])
    assert said["training_records"] == 0 and said["by_content"]["test"] == len(kept) and said["build"] == held.build
    validation = resolve_held_out(synth_dir, "validation", None, str(sft_dir))
    assert {r.page_id for r in records if validation.keeps(r)} == set(built["validation"]["page_id"]) != set()
    assert "neither trained nor validated on" in held.why and "told by their pixels" in held.why


def test_every_record_of_its_source_counts_its_training_pages(sft_dir, synth_dir):
    held = resolve_held_out(synth_dir, "all", str(sft_dir), None)
    records = load_level(synth_dir, "L3").records
    trained = {p for p in load_sft_dataset(sft_dir)["train"]["page_id"]}
    assert held.record(records)["training_records"] == sum(r.page_id in trained for r in records) > 0
    assert "TRAINING PAGES INCLUDED" in held.why


def test_a_copied_moved_or_relatively_named_folder_is_the_same_pages(held_build, synth_dir, tmp_path, monkeypatch):
    """Held-out is decided by the pages' pixels: the build's pages copied elsewhere, the build itself moved, and the
    folder named from another working directory all hold out the same pages and count the same trained ones."""
    from gbtrain.evaluation.reports import comparison_problems

    records = load_level(synth_dir, "L3").records
    original = resolve_held_out(synth_dir, "auto", None, str(held_build))
    expected = {r.page_id for r in records if original.keeps(r)}
    before = original.record([r for r in records if original.keeps(r)])
    trained = set(load_sft_dataset(held_build)["train"]["page_id"])
    copy = tmp_path / "elsewhere" / "pages"
    shutil.copytree(synth_dir, copy)
    moved_build = tmp_path / "moved_build"
    shutil.copytree(held_build, moved_build)
    shutil.rmtree(held_build)  # the build moved to another machine's path: the checkpoint's record is stale
    try:
        monkeypatch.chdir(tmp_path / "elsewhere")
        for data in (copy, "pages", "../elsewhere/pages"):
            held = resolve_held_out(data, "auto", str(moved_build), None)
            copied = load_level(data, "L3").records
            assert {r.page_id for r in copied if held.keeps(r)} == expected
            after = held.record([r for r in copied if held.keeps(r)])
            assert after["contents_sha256"] == before["contents_sha256"] and after["build"] != before["build"]
            reports = [{"meta": {"held_out": said}, "settings": {}} for said in (before, after)]
            assert not [p for p in comparison_problems(*reports) if "records evaluated" in p]  # compare pairs them
            every = resolve_held_out(data, "all", str(moved_build), None)
            said = every.record(copied)
            assert said["training_records"] == sum(r.page_id in trained for r in copied) > 0
            assert said["build"] == str(moved_build.resolve())
    finally:
        shutil.copytree(moved_build, held_build)  # the module's other tests use it


def test_a_copy_of_a_page_the_build_read_is_known_by_its_bytes_without_decoding(held_build, synth_dir, tmp_path):
    """Every record of --data is asked before --limit takes the first ones: a page whose file is byte for byte one
    the build read is looked up by its file hash (contents.json's files) and gets the split decoding would give."""
    from gbtrain.data import contents
    from gbtrain.data.annotations import image_path

    copy = tmp_path / "copy"
    shutil.copytree(synth_dir, copy)
    held = resolve_held_out(copy, "auto", str(held_build), None)
    records = load_level(copy, "L3").records
    contents._pixels_sha256.cache_clear()
    known = [r for r in records if contents.file_sha256(image_path(copy, r)) in held.contents.files]
    assert known
    splits = [held.split_of(r) for r in known]
    assert contents._pixels_sha256.cache_info().misses == 0  # not one decoded
    assert splits == [held.contents.images[contents.pixels_sha256(image_path(copy, r))] for r in known]


def test_a_folder_the_build_never_saw_is_evaluated_whole(sft_dir, synth_dir, tmp_path):
    """Other pixels (here: every page re-drawn with one pixel changed) are pages the build never saw: all of them
    are evaluated, recorded as a base model's evaluation is, and no split of the build holds any."""
    from PIL import Image

    other = tmp_path / "other"
    shutil.copytree(synth_dir, other)
    for path in (other / "images").rglob("*.*"):
        with Image.open(path) as im:
            changed = im.convert("RGB")
        changed.putpixel((0, 0), (1, 2, 3))
        changed.save(path, format="PNG" if path.suffix.lower() == ".png" else "JPEG", quality=100)
    held = resolve_held_out(other, "auto", None, str(sft_dir))
    records = load_level(other, "L3").records
    assert all(held.keeps(r) for r in records)
    said = held.record(records)
    assert (said["split"], said["build"], said["training_records"]) == ("all", None, 0)
    assert said["by_content"]["unseen"] == len(records) and "none was trained on" in said["why"]
    test = resolve_held_out(other, "test", str(sft_dir), None)
    assert not any(test.keeps(r) for r in records)  # the evaluation then says no record is in the split


def test_a_build_made_before_contents_were_recorded(held_build, synth_dir, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(held_build, old)
    (old / "contents.json").unlink()
    held = resolve_held_out(synth_dir, "auto", str(old), None)
    assert held.split == "all" and "build it again" in held.why
    with pytest.raises(ValueError, match=r"--split test: --build \S+ was made before builds recorded"):
        resolve_held_out(synth_dir, "test", str(old), None)
    (old / "contents.json").write_text('{"images": {"abc": "somewhere"}}')
    with pytest.raises(ValueError, match=r"contents.json: not a build's contents record"):
        resolve_held_out(synth_dir, "auto", str(old), None)


def test_no_build_known(synth_dir, tmp_path):
    assert resolve_held_out(synth_dir, "auto", None, None).split == "all"
    gone = resolve_held_out(synth_dir, "auto", None, str(tmp_path / "moved"))
    assert gone.split == "all" and "is gone" in gone.why
    with pytest.raises(ValueError, match=r"--split test: no training build is known \(a base model"):
        resolve_held_out(synth_dir, "test", None, None)
    with pytest.raises(FileNotFoundError, match="dataset folder not found"):
        resolve_held_out(synth_dir, "auto", str(tmp_path / "moved"), None)  # a --build the user named must exist
    (tmp_path / "damaged").mkdir()  # the checkpoint's build, its build_config.yaml gone: as if the build were gone
    damaged = resolve_held_out(synth_dir, "auto", None, str(tmp_path / "damaged"))
    assert damaged.split == "all" and "cannot be read" in damaged.why
    with pytest.raises(ValueError, match="is not a finished build"):
        resolve_held_out(synth_dir, "test", None, str(tmp_path / "damaged"))


def test_a_group_keeps_a_students_pages_in_one_split():
    rule = SplitRule(seed=0, validation_share=0.3, test_share=0.3, group=r"^(student\d+)/")
    pages = [Record(f"s{s}p{p}", "L3", "Mathematics", f"student{s}/page{p}.jpg", 10, 10, []) for s in range(20)
             for p in range(4)]
    by_student: dict[str, set[str]] = {}
    for r in pages:
        by_student.setdefault(r.image.split("/")[0], set()).add(rule.split(r))
    assert all(len(splits) == 1 for splits in by_student.values())
    assert {s for splits in by_student.values() for s in splits} == {"train", "validation", "test"}
    with pytest.raises(ValueError, match=r"record x: its image 'loose\.jpg' does not match split_group"):
        rule.split(Record("x", "L3", "Mathematics", "loose.jpg", 10, 10, []))
    empty = SplitRule(seed=0, validation_share=0.3, test_share=0.3, group=r"^([a-z]*)/")
    with pytest.raises(ValueError, match=r"record y: split_group .* names no student or exam \(an empty match\)"):
        empty.split(Record("y", "L3", "Mathematics", "/p1.jpg", 10, 10, []))
    slow = SplitRule(seed=0, validation_share=0.3, test_share=0.3, group=r"(x+x+)+y")
    with pytest.raises(ValueError, match=r"split_group '\(x\+x\+\)\+y' took over 1 s on 'xxx"):
        slow.split(Record("z", "L3", "Mathematics", "x" * 5000 + ".jpg", 10, 10, []))
    with pytest.raises(ValueError, match=r"split_group '\[': not a regular expression"):
        SplitRule(seed=0, validation_share=0.3, test_share=0.3, group="[")


def test_the_builder_splits_by_group(synth_dir, tmp_path):
    """split_group in the build config: the builder puts every page of a group (here: a subject folder) in one split,
    the rule's."""
    from conftest import TEST_MAX_PIXELS, TEST_MIN_PIXELS

    from gbtrain.coords import PixelBudget
    from gbtrain.data.build_config import BuildConfig
    from gbtrain.data.sft_dataset import build_sft_dataset

    out = tmp_path / "sft"
    cfg = BuildConfig(data=str(synth_dir), out=str(out), target_count=40, seed=1, validation_share=0.3,
                      test_share=0.3, vision=PixelBudget(TEST_MIN_PIXELS, TEST_MAX_PIXELS), max_length=4096,
                      split_group=r"^([^/]+)/", workers=1)
    build_sft_dataset(cfg, progress=False)
    rule = SplitRule.of(finished_build(out))
    assert rule.group == r"^([^/]+)/"
    built = load_sft_dataset(out)
    subjects = {r.page_id: r.image.split("/")[0] for r in load_level(synth_dir, "L3").records}
    assert sum(len(rows) > 0 for rows in built.values()) >= 2  # groups landed in more than one split
    for split, rows in built.items():
        assert {split_of(subjects[p], rule.seed, rule.validation_share, rule.test_share) for p in rows["page_id"]} \
            <= {split}

import json
import os
import shutil

import pytest

from gbtrain.coords import PixelBudget
from gbtrain.data.build_config import BuildConfig, MixConfig
from gbtrain.data.sft_dataset import build_sft_dataset, load_sft_dataset
from gbtrain.data.splits import split_of
from gbtrain.text import markdown_text

# the pixel budget of the session's tiny model (tests/conftest.py)
TEST_MIN_PIXELS, TEST_MAX_PIXELS = 28 * 28 * 4, 28 * 28 * 256


def config(data, out, **kw):
    base = dict(data=str(data), out=str(out), target_count=400, seed=1, validation_share=0.2, test_share=0.2,
                vision=PixelBudget(TEST_MIN_PIXELS, TEST_MAX_PIXELS), max_length=4096, workers=2,
                mix=MixConfig(three_turn=0.3))
    base.update(kw)
    return BuildConfig(**base)


@pytest.fixture(scope="module")
def built(synth_dir, tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("sft") / "out"
    stats = build_sft_dataset(config(synth_dir, out, tokenizer=str(tiny_model_dir)), progress=False)
    return out, stats


def test_split_by_page(built):
    out, _ = built
    dd = load_sft_dataset(out, decode_images=False)
    pages = {s: set(dd[s]["page_id"]) for s in dd}
    assert pages["train"] and pages["test"]
    assert not (pages["train"] & pages["test"]) and not (pages["train"] & pages["validation"])
    assert not (pages["validation"] & pages["test"])
    for s in dd:
        for row in dd[s].select_columns(["page_id", "split"]):
            assert split_of(row["page_id"], 1, 0.2, 0.2) == s == row["split"]


def test_every_kind_present_and_card(built):
    out, stats = built
    dd = load_sft_dataset(out, decode_images=False)
    kinds = {(r["level"], r["mode"], r["turns"]) for r in dd["train"].select_columns(["level", "mode", "turns"])}
    assert kinds == {(lvl, m, t) for lvl in ("L1", "L2", "L3") for m in ("answer-free", "answer-based") for t in (1, 3)}
    assert stats["total"] == sum(len(dd[s]) for s in dd)
    card = (out / "card.md").read_text()
    for word in ("By level", "By mode", "By subject", "By stage", "question type", "by label", "Token lengths, exact"):
        assert word in card
    assert json.loads((out / "stats.json").read_text())["total"] == stats["total"]


def test_targets_parse_and_images_exist(built):
    out, _ = built
    from pathlib import Path

    dd = load_sft_dataset(out, decode_images=False)
    for row in dd["train"].select(range(40)):
        assert Path(row["images"][0]).is_file()
        for m in row["messages"][1::2]:
            assert m["role"] == "assistant"
            assert isinstance(json.loads(m["content"]), list)
    # each image is stored once, however many conversations use it
    images = {p for s in dd for row in dd[s].select_columns(["images"]) for p in row["images"]}
    assert len(list((out / "images").rglob("*.jpg"))) == len(images)


def test_lengths_are_the_processor_token_counts(built, tiny_model_dir):
    """num_tokens equals what the real processor produces, and its image tokens match image_grid_thw."""
    from PIL import Image

    from gbtrain.data.conversations import with_image_placeholder
    from gbtrain.data.sft_dataset import dataset_pixel_budget
    from gbtrain.train.modeling import load_processor

    out, _ = built
    proc = load_processor(tiny_model_dir, dataset_pixel_budget(out))
    image_id = proc.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    rows = load_sft_dataset(out)["train"].shuffle(seed=0).select(range(12))
    for row in rows:
        image = row["images"][0]
        assert isinstance(image, Image.Image)
        messages = with_image_placeholder(row["messages"])
        text = proc.apply_chat_template(messages, tokenize=False)
        enc = proc(text=[text], images=[image], return_tensors="pt")
        t, gh, gw = enc["image_grid_thw"][0].tolist()
        assert int((enc["input_ids"] == image_id).sum()) == t * gh * gw // 4
        assert enc["input_ids"].shape[1] == row["num_tokens"]


def test_overlong_conversations_are_dropped_and_counted(synth_dir, tiny_model_dir, tmp_path):
    stats = build_sft_dataset(config(synth_dir, tmp_path / "o", tokenizer=str(tiny_model_dir), max_length=450),
                              progress=False)
    dropped = sum(stats["dropped_over_max_length"].values())
    assert dropped > 0
    assert stats["tokens"]["all"]["max"] <= 450
    assert "Dropped for length > 450" in (tmp_path / "o" / "card.md").read_text()


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_an_output_folder_overlapping_the_data_is_refused(synth_dir, tmp_path, where):
    """The build replaces folders under OUT: with OUT in (or around) the source, source images would go."""
    data = tmp_path / "pages"
    shutil.copytree(synth_dir, data)
    before = sorted(p.relative_to(data) for p in data.rglob("*"))
    out = {"same": data, "inside": data / "images" / "sft", "around": tmp_path}[where]
    with pytest.raises(ValueError, match="overlap"):
        build_sft_dataset(config(data, out), progress=False)
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == before


def test_bad_mix_is_refused(synth_dir, tmp_path):
    with pytest.raises(ValueError, match=r"mix\.levels"):
        build_sft_dataset(config(synth_dir, tmp_path, mix=MixConfig(levels={"L1": 0.5, "L4": 0.5})), progress=False)


@pytest.mark.slow
def test_trl_sft_trainer_accepts_the_dataset(built, tiny_model_dir, tmp_path):
    """The builder's output goes straight into TRL's SFTTrainer (vision path) and trains a step."""
    import torch
    from transformers import AutoModelForImageTextToText
    from trl import SFTConfig, SFTTrainer

    from gbtrain.data.sft_dataset import dataset_pixel_budget
    from gbtrain.train.modeling import load_processor

    out, _ = built
    train = load_sft_dataset(out)["train"].filter(lambda r: r["level"] == "L1").select(range(4))
    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir, dtype=torch.float32)
    args = SFTConfig(output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=2,
                     learning_rate=1e-3, report_to=[], max_length=None, gradient_checkpointing=False,
                     use_cpu=True, save_strategy="no", logging_steps=1, dataloader_num_workers=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=train,
                         processing_class=load_processor(tiny_model_dir, dataset_pixel_budget(out)))
    result = trainer.train()
    assert result.global_step == 2 and result.training_loss > 0


@pytest.mark.parametrize(("option", "message"), [
    ({"validation_share": float("nan")}, "validation_share"), ({"test_share": -0.1}, "validation_share"),
    ({"mix": MixConfig(levels={"L1": float("nan"), "L2": 0.5, "L3": 0.5})}, "mix.levels"),
    ({"mix": MixConfig(three_turn=float("nan"))}, "three_turn"), ({"target_count": 0}, "target_count"),
    ({"max_length": -5}, "max_length"), ({"workers": 0}, "workers"), ({"l2_margin": float("nan")}, "l2_margin"),
])
def test_out_of_range_build_options_are_refused_before_any_work(synth_dir, tmp_path, option, message):
    with pytest.raises(ValueError, match=message):
        build_sft_dataset(config(synth_dir, tmp_path / "o", **option), progress=False)
    assert not (tmp_path / "o").exists()


def test_an_unfinished_build_is_refused(built, tmp_path):
    """build_config.yaml is written last: a build killed before it leaves a folder no reader takes."""
    out, _ = built
    copy = tmp_path / "killed"
    shutil.copytree(out, copy)
    (copy / "build_config.yaml").unlink()
    with pytest.raises(ValueError, match="not a finished build"):
        load_sft_dataset(copy)
    with pytest.raises(FileNotFoundError, match="dataset folder not found"):
        load_sft_dataset(tmp_path / "nowhere")


def _without_l1_page_ids(synth_dir, tmp_path, rename=None):
    """A copy of the synthetic layout whose L1 crops carry no page_id (as many hand-made layouts), the images
    linked; `rename` changes each crop's id and file name."""
    data = tmp_path / "data"
    shutil.copytree(synth_dir, data, copy_function=os.link)
    ann = data / "annotations" / "L1.json"
    records = json.loads(ann.read_text(encoding="utf-8"))
    for r in records:
        r.pop("page_id")
        if rename:
            old = data / "images" / "L1" / r["image"]
            r["image"] = rename(r["image"])
            old.rename(data / "images" / "L1" / r["image"])
    ann.unlink()  # a link to the session's layout: write a file of its own
    ann.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    return data


def test_crops_without_page_id_stay_with_their_page(synth_dir, tmp_path):
    """Crops named <page>_<k> are split with their page: none of a page's crops reaches another split."""
    data = _without_l1_page_ids(synth_dir, tmp_path)
    build_sft_dataset(config(data, tmp_path / "out"), progress=False)
    dd = load_sft_dataset(tmp_path / "out", decode_images=False)
    split_of_page: dict[str, set[str]] = {}
    for s in dd:
        for row in dd[s].select_columns(["page_id", "level"]):
            split_of_page.setdefault(row["page_id"], set()).add(s)
    assert all(len(splits) == 1 for splits in split_of_page.values())
    l1_pages = {p for s in dd for p, lvl in zip(dd[s]["page_id"], dd[s]["level"], strict=True) if lvl == "L1"}
    l3_pages = {p for s in dd for p, lvl in zip(dd[s]["page_id"], dd[s]["level"], strict=True) if lvl == "L3"}
    pages = {r["id"] for r in json.loads((data / "annotations" / "L3.json").read_text(encoding="utf-8"))}
    assert l1_pages and l1_pages <= pages  # each crop's page is a page of the layout, not the crop's own name
    assert l3_pages <= pages


def test_crops_whose_names_name_no_page_are_refused(synth_dir, tmp_path):
    data = _without_l1_page_ids(synth_dir, tmp_path, rename=lambda image: image.replace("_q", "-q"))
    with pytest.raises(ValueError, match=r"L1.json \[record .*needs page_id"):
        build_sft_dataset(config(data, tmp_path / "out"), progress=False)
    data = _without_l1_page_ids(synth_dir, tmp_path / "other", rename=lambda image: image.replace("/p", "/crop_p"))
    with pytest.raises(ValueError, match=r"no page of the L2/L3 files: add page_id .*more crops alike"):
        build_sft_dataset(config(data, tmp_path / "out"), progress=False)


def test_unknown_label_fails_in_one_line_and_builds_with_a_mapping(synth_dir, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(synth_dir, data, copy_function=os.link)
    ann = data / "annotations" / "L3.json"
    records = json.loads(ann.read_text(encoding="utf-8"))
    for m in records[0]["marks"]:
        if m["markLabel"] in ("right", "正确"):
            m["markLabel"] = "correct"
    ann.unlink()  # a link to the session's layout: write a file of its own
    ann.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(ValueError) as e:
        build_sft_dataset(config(data, tmp_path / "out"), progress=False)
    assert len(str(e.value).splitlines()) == 1  # one line, however many marks
    assert "unknown markLabel 'correct'" in str(e.value) and "aliases.yaml" in str(e.value)
    (data / "annotations" / "aliases.yaml").write_text("labels: {correct: right}\n", encoding="utf-8")
    stats = build_sft_dataset(config(data, tmp_path / "out"), progress=False)
    assert stats["total"] > 0 and not stats["reader_warnings"]


@pytest.fixture(scope="module")
def moved_build(synth_dir, tiny_model_dir, tmp_path_factory):
    """A small build moved (shutil.move) away from where it was made, the folder it was made in deleted."""
    made_in = tmp_path_factory.mktemp("made-in")
    build_sft_dataset(config(synth_dir, made_in / "sft", target_count=60, tokenizer=str(tiny_model_dir)),
                      progress=False)
    moved = tmp_path_factory.mktemp("moved-to") / "sft"
    shutil.move(made_in / "sft", moved)
    shutil.rmtree(made_in)
    return moved


def test_a_moved_build_names_its_images_relative_to_itself(moved_build):
    """Rows name images by paths relative to the folder, so the build travels: plain load_from_disk shows them as
    they are, and the loader opens them where the folder now lies."""
    from pathlib import Path

    from datasets import load_from_disk

    plain = load_from_disk(str(moved_build))
    relative = {p for s in plain for row in plain[s]["images"] for p in row}
    assert relative and all(p.startswith("images/") and (moved_build / p).is_file() for p in relative)
    paths = load_sft_dataset(moved_build, decode_images=False)
    decoded = load_sft_dataset(moved_build)
    for s in plain:
        assert [[Path(p) for p in row] for row in paths[s]["images"]] == [
            [moved_build.resolve() / p for p in row] for row in plain[s]["images"]]
        for row in decoded[s].select(range(min(3, len(decoded[s])))):
            assert row["images"][0].size == (row["image_width"], row["image_height"])


def test_a_build_without_its_images_is_refused_on_loading(moved_build, tmp_path):
    copy = tmp_path / "arrow-only"
    shutil.copytree(moved_build, copy, ignore=shutil.ignore_patterns("images"))
    with pytest.raises(FileNotFoundError, match=r"image\(s\) that its train rows name are missing.*folder whole"):
        load_sft_dataset(copy, decode_images=False)


def test_the_trainer_trains_a_step_on_a_moved_build(moved_build, tiny_model_dir, tmp_path):
    """The recipe's own training path (gbtrain.train.trainer.train, as recipes/sft_qwen.py calls it) on the moved
    build: one optimizer step, in this process."""
    from pathlib import Path

    from gbtrain.config import load_config
    from gbtrain.train.config import TrainConfig
    from gbtrain.train.trainer import train

    recipe = Path(__file__).resolve().parents[2] / "configs" / "sft" / "tiny_cpu.yaml"
    cfg = load_config(TrainConfig, str(recipe), [f"model={tiny_model_dir}", f"dataset={moved_build}",
                                                 f"output_dir={tmp_path / 'run'}", "report_to=[]", "max_steps=1",
                                                 "save_steps=1000", "eval_steps=1000", "limit_train_samples=4",
                                                 "limit_eval_samples=2"])
    summary = train(cfg)
    assert summary["global_step"] == 1 and summary["training_loss"] > 0 and summary["eval_loss"] > 0


def test_a_build_with_points_puts_scores_in_targets_and_full_scores_in_prompts(synth_dir, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(synth_dir, data, copy_function=os.link)
    ann = data / "annotations" / "L3.json"
    records = json.loads(ann.read_text(encoding="utf-8"))
    for r in records:  # every answer of every page: 3 points, the teacher gave 2 (right) or 0
        for m in r["marks"]:
            if m["markLabel"] not in ("question", "整题"):
                m["attributes"].update(full_score=3, score=2 if m["markLabel"] in ("right", "正确") else 0)
    ann.unlink()  # a link to the session's layout: write a file of its own
    ann.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    build_sft_dataset(config(data, tmp_path / "out", mix=MixConfig(levels={"L3": 1.0}, three_turn=0.0),
                             target_count=20), progress=False)
    rows = load_sft_dataset(tmp_path / "out", decode_images=False)["train"]
    assert len(rows) > 0
    for row in rows:
        items = json.loads(row["messages"][1]["content"])
        assert items and all(i["score"] == (2 if i["correctness"] else 0) for i in items)
        assert "Full scores:" in row["messages"][0]["content"] and ": 3 points" in row["messages"][0]["content"]


# ------------------------------------------------------------------------------------------ several folders
def _reviewed_folder(last_term, out, corrected_page: str):
    """A folder as the review import writes one: last term's page `corrected_page` (its image, byte for byte)
    under another name, with the teacher's correction (the first group's verdict flipped), and three pages of
    another exam whose ids repeat last term's (p0001, ...) but whose images do not."""
    import dataclasses

    from gbtrain.data.annotations import load_dataset, load_level, write_level, write_manifest
    from gbtrain.data.pages import PageOutput, question_records, write_page
    from gbtrain.data.synth.generate import generate_dataset
    from gbtrain.schema import RIGHT, WRONG
    from gbtrain.vocabulary import L1, L2, L3

    other = out.parent / "other"
    generate_dataset(other, pages=3, seed=99, workers=1, progress=False)
    original = next(r for r in load_level(last_term, L3).records if r.page_id == corrected_page)
    first = original.groups[0].group_id
    flip = {RIGHT: WRONG, WRONG: RIGHT}
    marks = [dataclasses.replace(m, label=flip[m.label], raw_label=flip[m.label], score=None, full_score=None)
             if m.mark_id == first and m.label in flip else m for m in original.marks]
    corrected = dataclasses.replace(original, record_id="scan_0042", image="Mathematics/scan_0042.jpg", marks=marks)
    image = (last_term / "images" / L3 / original.image).read_bytes()
    l2, _ = question_records(corrected)
    write_page(out, PageOutput("scan_0042", corrected.subject, image, corrected, l2, []))
    levels = {L3: [corrected, *load_level(other, L3).records], L2: [*l2, *load_level(other, L2).records],
              L1: load_level(other, L1).records}
    for level in (L1, L2, L3):
        shutil.copytree(other / "images" / level, out / "images" / level, dirs_exist_ok=True)
    for level, records in levels.items():
        write_level(out, level, records)
    write_manifest(out, levels)
    load_dataset(out)  # read back strictly
    return original, corrected, first


def test_several_folders_take_a_page_once_from_the_newest_in_its_old_split(synth_dir, tmp_path):
    """Last term's twelve pages and a reviewed folder: the corrected page is taken once, from the reviewed folder,
    with the teacher's verdict, in the split last term's copy had (not the one its new name hashes to); the other
    exam's pages named like last term's stay pages of their own; the card, the stats and the evaluator's held-out
    rule say so."""
    from datasets import load_from_disk

    from gbtrain.data.held_out import resolve_held_out
    from gbtrain.data.splits import SplitRule

    # the page whose split differs from the one its new name would give (so keeping it is seen)
    rule = SplitRule(1, 0.2, 0.2)
    page = next(p for p in (f"p{n:05d}" for n in range(12)) if rule.split_key(p) != rule.split_key("scan_0042"))
    reviewed = tmp_path / "reviewed"
    original, corrected, first = _reviewed_folder(synth_dir, reviewed, page)
    out = tmp_path / "sft"
    stats = build_sft_dataset(config(synth_dir, out, more_data=[str(reviewed)]), progress=False)
    assert stats["replaced_pages"] == [{"page": page, "folder": str(synth_dir), "by": str(reviewed)}]
    assert [s["tag"] for s in stats["sources"]] == [None, "1-reviewed"]
    from gbtrain.data.annotations import image_path
    from gbtrain.data.contents import pixels_sha256, read_contents

    assert read_contents(out).images[pixels_sha256(image_path(reviewed, corrected))] == rule.split_key(page)
    dd = load_from_disk(str(out))
    rows = [r for s in dd for r in dd[s]]
    # last term's copy is gone, at every level (the other exam's page of the same name stays, under its folder's tag)
    assert not [r for r in rows if r["page_id"] == page and not r["record_id"].startswith("1-reviewed/")]
    mine = [r for r in rows if r["page_id"] == "scan_0042"]
    assert mine and {r["split"] for r in mine} == {rule.split_key(page)} != {rule.split_key("scan_0042")}
    l3 = next(r for r in mine if r["level"] == "L3" and r["turns"] == 1)
    assert l3["record_id"] == "1-reviewed/scan_0042"
    assert l3["images"] == ["images/1-reviewed/L3/Mathematics/scan_0042.jpg"]
    target = {it["question_id"]: it["correctness"] for it in json.loads(l3["messages"][-1]["content"])}
    assert target[first] is (original.groups[0].label != "right")  # the teacher's verdict
    assert (out / l3["images"][0]).is_file()
    # the other exam's pages, named p00000.. like last term's: pages of their own, beside last term's
    ids = {r["record_id"] for r in rows if r["level"] == "L3"}
    other = "p00001" if page != "p00001" else "p00002"
    assert {other, f"1-reviewed/{other}"} <= ids
    from gbtrain.data.annotations import load_dataset

    assert stats["sources"][1]["records"] == sum(len(ld.records) for ld in load_dataset(reviewed).values())
    card = (out / "card.md").read_text(encoding="utf-8")
    row = f"| {markdown_text(page)} | {markdown_text(synth_dir)} | {markdown_text(reviewed)} |"
    assert "### Pages taken from a newer folder (1)" in card and row in card
    # evaluating the reviewed folder with this build holds its corrected page out as the build did
    held = resolve_held_out(reviewed, "auto", str(out), None)
    assert held.split_of(corrected) == rule.split_key(page)


def test_folder_weights_draw_the_reviewed_records_first(synth_dir, tmp_path):
    reviewed = tmp_path / "reviewed"
    _reviewed_folder(synth_dir, reviewed, "p00003")
    kw = dict(target_count=8, validation_share=0, test_share=0, more_data=[str(reviewed)],
              mix=MixConfig(levels={"L1": 0, "L2": 0, "L3": 1}, three_turn=0))
    stats = build_sft_dataset(config(synth_dir, tmp_path / "weighted", data_weights=[1, 1e6], **kw), progress=False)
    from datasets import load_from_disk

    ids = [r["record_id"] for r in load_from_disk(str(tmp_path / "weighted"))["train"]]
    assert stats["total"] == 8 and sum(i.startswith("1-reviewed/") for i in ids) == 8  # 4 pages x 2 modes
    plain = build_sft_dataset(config(synth_dir, tmp_path / "plain", **kw), progress=False)
    assert plain["total"] == 8


@pytest.mark.parametrize(("extra", "message"), [
    ({"data_weights": [1]}, r"data_weights has 1 value\(s\) for 2 folder\(s\)"),
    ({"data_weights": [1, 0]}, r"data_weights: 0 is not a finite number above 0"),
    ({"more_data": "SAME"}, r"data folder \S+ is given twice"),
    ({"more_data": "EMPTY"}, r"no L1/L2/L3 annotation files"),
])
def test_bad_folder_lists_are_refused(synth_dir, tmp_path, extra, message):
    from gbtrain.data.annotations import AnnotationError

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.txt").write_text("not a GradingBench folder")
    more = {"SAME": [str(synth_dir)]}.get(extra.get("more_data"), [str(tmp_path / "x")])
    with pytest.raises((ValueError, AnnotationError), match=message):
        build_sft_dataset(config(synth_dir, tmp_path / "out", **{**extra, "more_data": more}), progress=False)

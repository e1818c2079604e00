import json
import shutil

import pytest

from gbtrain.config import BuildConfig, MixConfig
from gbtrain.coords import PixelBudget
from gbtrain.data.sft_dataset import build_sft_dataset, load_sft_dataset, split_of

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
    stats = build_sft_dataset(config(synth_dir, tmp_path / "o", tokenizer=str(tiny_model_dir), max_length=330),
                              progress=False)
    dropped = sum(stats["dropped_over_max_length"].values())
    assert dropped > 0
    assert stats["tokens"]["all"]["max"] <= 330
    assert "Dropped for length > 330" in (tmp_path / "o" / "card.md").read_text()


def test_moved_output_is_rebased(built, tmp_path):
    out, _ = built
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    dd = load_sft_dataset(moved, decode_images=False)
    assert dd["train"][0]["images"][0].startswith(str(moved.resolve()))


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

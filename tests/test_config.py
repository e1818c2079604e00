import pytest

from gbtrain.config import BuildConfig, load_config
from gbtrain.coords import PixelBudget


def test_defaults_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("data: d\nout: o\ntarget_count: 50\nmix:\n  three_turn: 0.5\n")
    cfg = load_config(BuildConfig, path, ["vision.max_pixels=401408", "mix.levels.L1=0.2", "seed=3"])
    assert (cfg.data, cfg.target_count, cfg.seed, cfg.mix.three_turn) == ("d", 50, 3, 0.5)
    assert cfg.vision == PixelBudget(50176, 401408)
    assert cfg.mix.levels["L1"] == 0.2 and cfg.mix.levels["L3"] == 0.15


def test_the_shipped_config_loads():
    cfg = load_config(BuildConfig, "configs/data/default.yaml", ["data=x", "out=y"])
    assert cfg.target_count == 10000 and cfg.vision.max_pixels == 2200 * 28 * 28


def test_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="missing required config value"):
        load_config(BuildConfig, None, [])
    with pytest.raises(ValueError, match="bad config"):
        load_config(BuildConfig, None, ["data=x", "out=y", "no_such_key=1"])
    with pytest.raises(ValueError, match="bad config"):
        load_config(BuildConfig, None, ["data=x", "out=y", "target_count=many"])
    with pytest.raises(ValueError, match="key=value"):
        load_config(BuildConfig, None, ["data"])


def test_interpolation_is_refused_so_no_secret_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("GB_SECRET_TOKEN", "sk-never-written")
    path = tmp_path / "c.yaml"
    path.write_text("data: d\nout: o\ntokenizer: ${oc.env:GB_SECRET_TOKEN}\n")
    with pytest.raises(ValueError, match=r"tokenizer: \$\{\.\.\.\} interpolation is not read"):
        load_config(BuildConfig, path, [])
    with pytest.raises(ValueError, match=r"mix\.levels\.L1: "):
        load_config(BuildConfig, None, ["data=x", "out=y", "mix.levels.L1=${oc.env:GB_SECRET_TOKEN}"])


def test_a_bad_pixel_budget_is_refused_when_the_config_loads():
    for overrides in (["vision.min_pixels=0"], ["vision.min_pixels=90000", "vision.max_pixels=1000"]):
        with pytest.raises(ValueError, match="min_pixels"):
            load_config(BuildConfig, None, ["data=x", "out=y", *overrides])

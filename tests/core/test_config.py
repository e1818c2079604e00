import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from gbtrain.config import config_keys, keys_table, load_config
from gbtrain.coords import PixelBudget
from gbtrain.data.build_config import BuildConfig
from gbtrain.train.config import TrainConfig

ROOT = Path(__file__).parents[2]


def test_defaults_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("data: d\nout: o\ntarget_count: 50\nmix:\n  three_turn: 0.5\n")
    cfg = load_config(BuildConfig, path, ["vision.max_pixels=401408", "mix.levels.L1=0.2", "seed=3"])
    assert (cfg.data, cfg.target_count, cfg.seed, cfg.mix.three_turn) == ("d", 50, 3, 0.5)
    assert cfg.vision == PixelBudget(50176, 401408)
    assert cfg.mix.levels["L1"] == 0.2 and cfg.mix.levels["L3"] == 0.15


def test_the_shipped_configs_load():
    cfg = load_config(BuildConfig, "configs/data/default.yaml", ["data=x", "out=y"])
    assert cfg.target_count == 10000 and cfg.vision.max_pixels == 2200 * 28 * 28 and cfg.vision.factor == 28
    qwen3 = load_config(BuildConfig, "configs/data/qwen3vl.yaml", ["data=x", "out=y"])
    assert (qwen3.coords, qwen3.vision.factor) == ("rel1000", 32)
    assert qwen3.vision.max_pixels // 32**2 == cfg.vision.max_pixels // 28**2  # the same token budget


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


@pytest.mark.parametrize("path", sorted(str(p) for p in (ROOT / "configs" / "sft").glob("*.yaml")))
def test_every_shipped_training_config_passes_the_option_checks(path, monkeypatch):
    """As on a GPU machine with the optional packages (bf16, flash-attn, bitsandbytes are the configs' choice):
    every key known, every number in range; a LoRA config sets no key LoRA ignores (freeze.llm)."""
    import importlib.util

    from omegaconf import OmegaConf

    from gbtrain.train import modeling
    from gbtrain.train.config import TrainConfig

    monkeypatch.setattr(modeling, "cuda_available", lambda: True)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    cfg = load_config(TrainConfig, path, ["model=m", "dataset=d", "output_dir=o"])
    modeling.check_options(cfg)
    if cfg.finetune in ("lora", "qlora"):
        assert "llm" not in OmegaConf.load(path).get("freeze", {}), f"{path}: freeze.llm is ignored by LoRA"


@pytest.mark.parametrize("path", sorted(str(p) for p in (ROOT / "configs" / "data").glob("*.yaml")))
def test_every_shipped_data_config_passes_the_option_checks(path):
    from gbtrain.data.sft_dataset import _check_config

    _check_config(load_config(BuildConfig, path, ["data=d", "out=o"]))


def doc_keys():
    """scripts/doc_keys.py as a module: the docs' key regions and how each is written."""
    spec = importlib.util.spec_from_file_location("doc_keys", ROOT / "scripts" / "doc_keys.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass is made in a module that Python knows
    spec.loader.exec_module(module)
    return module


def test_doc_key_tables_are_the_options_dataclasses():
    """A key added, renamed, re-defaulted or re-explained in a dataclass without its docs row fails here."""
    script = doc_keys()
    for page in script.PAGES:
        text = (ROOT / "docs" / page).read_text(encoding="utf-8")
        assert script.rendered(text, page) == text, \
            f"docs/{page}: the key tables differ from the options dataclasses: run scripts/doc_keys.py"


def test_the_key_tables_give_every_key_its_default_and_help():
    table = keys_table(TrainConfig).splitlines()
    assert len(table) == 2 + len(config_keys(TrainConfig))
    rows = {row.split(" | ")[0].strip("| `"): row.split(" | ")[1:] for row in table[2:]}
    assert rows["lora.r"] == ["`64`", "adapter rank [1-4,096] |"] and rows["model"][0] == "required"
    assert all(meaning.strip(" |") for _, meaning in rows.values()), "a key without help"
    assert r"q_proj\|k_proj" in rows["lora.target_modules"][0]  # a pipe would split the cell
    script = doc_keys()
    text = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    stale = text.replace("| `lora.r` | `64` |", "| `lora.r` | `32` |")
    fixed = script.rendered(stale, "training.md")
    assert stale != text and fixed == text
    assert "`32`" not in fixed.split("<!-- keys:sft -->")[1].split("<!-- /keys:sft -->")[0]
    with pytest.raises(ValueError, match=r"docs/data.md needs one <!-- keys:data --> \.\.\. <!-- /keys:data --> "
                                         r"region"):
        script.rendered("no markers", "data.md")


def test_an_override_starting_with_at_is_plain_text_and_bad_yaml_names_the_override():
    """YAML reserves `@` and the backtick: `fields.verdict=@label` (the converters' LABEL_FIELD, "the region's
    label") used to end in a yaml.scanner.ScannerError traceback. Any other value YAML cannot read is one line."""
    from gbtrain.data.converters.mapping import LABEL_FIELD, ConvertMapping

    mapping = load_config(ConvertMapping, ROOT / "configs" / "convert" / "example.yaml",
                          ["fields.verdict=@label", "fields.hand=`hand`", "subject=Mathematics"])
    assert (mapping.fields.verdict, mapping.fields.hand, mapping.subject) == (LABEL_FIELD, "`hand`", "Mathematics")
    with pytest.raises(ValueError) as err:
        load_config(ConvertMapping, None, ["format=coco", "answer_labels=[right, wrong"])
    assert str(err.value).startswith("bad override 'answer_labels=[right, wrong': not a YAML value (")
    assert "\n" not in str(err.value)


def _option_dataclasses():
    """Every dataclass of gbtrain whose fields are options (a help text): the tools', the configs' and their
    sections."""
    import importlib
    import inspect
    import pkgutil

    import gbtrain

    for info in pkgutil.walk_packages(gbtrain.__path__, "gbtrain."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__ and any(
                    "help" in f.metadata for f in dataclasses.fields(obj)):
                yield obj


def test_every_count_has_bounds_stated_in_its_help():
    """A count a user passes has a ceiling (issue 48: --bootstrap-resamples 1000000000 asked numpy for 22 GiB), and
    --help and the docs' key tables say it."""
    from gbtrain.config import help_of

    counts = [(cls.__name__, f) for cls in _option_dataclasses() for f in dataclasses.fields(cls)
              if str(f.type).split(" | ")[0] == "int" and "help" in f.metadata]
    assert len(counts) > 50
    unbounded = [f"{name}.{f.name}" for name, f in counts if not f.metadata.get("bounds")]
    assert not unbounded, unbounded
    for _, f in counts:
        low, high = f.metadata["bounds"]
        assert help_of(f).endswith(f"[{low:,}-{high:,}]") and low < high


def test_a_value_outside_its_bounds_is_refused_by_every_loader(tmp_path, capsys):
    from gbtrain.cli import parse_options
    from gbtrain.config import load_config, out_of_bounds
    from gbtrain.metric.scoring import ScoreRun
    from gbtrain.train.config import TrainConfig

    with pytest.raises(SystemExit) as e:
        parse_options(ScoreRun, None, ["--data", "d", "--predictions", "p", "--level", "L1", "--mode", "answer-free",
                                       "--coords", "qwen25", "--out", "o", "--bootstrap-resamples", "1000000000"])
    assert e.value.code == 2
    assert "--bootstrap-resamples 1000000000: must be at most 20,000" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"lora\.r=0: must be at least 1; save_steps=10000000000: must be at most "):
        load_config(TrainConfig, None, ["model=m", "dataset=d", "output_dir=o", "lora.r=0", "save_steps=10000000000"])
    cfg = load_config(TrainConfig, None, ["model=m", "dataset=d", "output_dir=o"])
    assert out_of_bounds(cfg) == []
    cfg.max_steps = float("nan")
    assert out_of_bounds(cfg, sep=" ", flags=True) == ["--max-steps nan: must be at least -1"]

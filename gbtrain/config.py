"""YAML configs with command-line overrides (OmegaConf), typed by dataclasses.

Every entry script takes ``--config FILE.yaml`` and then any number of ``key=value`` (dotted for
nested keys, e.g. ``vision.max_pixels=401408``); unknown keys and wrong types are errors.
The ``vision`` section is the one min/max-pixels setting that builder, trainer and evaluator share.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gbtrain.coords import DEFAULT_L2_MARGIN, PixelBudget
from gbtrain.vocabulary import ANSWER_BASED, ANSWER_FREE, L1, L2, L3

T = TypeVar("T")


@dataclass
class MixConfig:
    """Shares of the conversations by level and mode, and the share that is three-turn."""

    levels: dict[str, float] = field(default_factory=lambda: {L1: 0.45, L2: 0.40, L3: 0.15})
    modes: dict[str, float] = field(default_factory=lambda: {ANSWER_FREE: 0.5, ANSWER_BASED: 0.5})
    three_turn: float = 0.2


@dataclass
class BuildConfig:
    """data_builders/build_sft.py: annotated pages -> SFT conversations."""

    data: str = "???"  # a GradingBench-layout folder
    out: str = "???"
    target_count: int = 10_000
    seed: int = 0
    coords: str = "qwen25"
    vision: PixelBudget = field(default_factory=PixelBudget)  # min/max pixels, checked when loaded
    max_length: int = 8192  # tokens, image included; longer conversations are dropped and counted
    tokenizer: str | None = None  # model or tokenizer folder for exact lengths; None = estimate
    validation_share: float = 0.05  # of pages
    test_share: float = 0.10  # of pages
    mix: MixConfig = field(default_factory=MixConfig)
    l2_margin: float = DEFAULT_L2_MARGIN
    lenient: bool = False  # skip bad records (counted and listed) instead of stopping
    workers: int = 2


def below_minimum(values: dict[str, tuple[float, float]], sep: str = "=") -> list[str]:
    """`name{sep}value: must be at least low` for each (value, low) that is NaN, infinite or too small: the
    range check every tool runs on its options before any work."""
    return [f"{name}{sep}{value!r}: must be at least {low:g}" for name, (value, low) in values.items()
            if not (math.isfinite(value) and value >= low)]


def identity_differences(recorded: dict, identity: dict) -> list[str]:
    """`key: old there, new now` for each key where an output folder's recorded identity (what made its
    work) differs from the current run's: the one comparison behind every "made otherwise" refusal."""
    return [f"{k}: {recorded.get(k)!r} there, {v!r} now" for k, v in identity.items() if recorded.get(k) != v]


def _interpolations(node, prefix: str = "") -> list[str]:
    """Keys whose value is an OmegaConf interpolation such as ${oc.env:TOKEN}."""
    if isinstance(node, dict):
        return [k for key, v in node.items() for k in _interpolations(v, f"{prefix}{key}.")]
    if isinstance(node, list):
        return [k for i, v in enumerate(node) for k in _interpolations(v, f"{prefix}{i}.")]
    return [prefix.rstrip(".")] if isinstance(node, str) and "${" in node else []


def load_yaml(path: str | Path):
    """A YAML config file as an OmegaConf mapping; unreadable, malformed or not a mapping is one ValueError that
    names the file (yaml's own messages span lines)."""
    from omegaconf import DictConfig
    from yaml import YAMLError

    try:
        loaded = OmegaConf.load(path)
    except (YAMLError, UnicodeDecodeError) as e:
        raise ValueError(f"bad config {path}: {' '.join(str(e).split())}") from None
    if not isinstance(loaded, DictConfig):
        raise ValueError(f"bad config {path}: it must be a mapping of keys to values, not a {type(loaded).__name__}")
    return loaded


def load_config(schema: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Defaults of `schema`, then the YAML file, then `key=value` overrides; checked for missing values."""
    try:
        cfg = OmegaConf.structured(schema)
        if path is not None:
            cfg = OmegaConf.merge(cfg, load_yaml(path))
        if overrides:
            bad = [o for o in overrides if "=" not in o]
            if bad:
                raise ValueError(f"overrides must be key=value, got {bad}")
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
        interpolated = _interpolations(OmegaConf.to_container(cfg, resolve=False))
        if interpolated:
            raise ValueError(f"{', '.join(interpolated)}: ${{...}} interpolation is not read (a resolved "
                             f"${{oc.env:...}} secret would be written into the output folder's config); "
                             f"write the value itself")
        missing = sorted(OmegaConf.missing_keys(cfg))
        if missing:
            raise ValueError(f"missing required config value(s): {', '.join(missing)} (set them in the YAML or "
                             f"as key=value)")
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:  # its message ends in full_key/object_type lines: the key goes first
        where = f" in {path}" if path else ""
        key = f"{e.full_key}: " if getattr(e, "full_key", None) else ""
        raise ValueError(f"bad config{where}: {key}{str(e).splitlines()[0]}") from e


def overlapping(out_name: str, out: str | Path, inputs: dict[str, str | Path]) -> list[str]:
    """`OUT_NAME X is/lies inside/holds NAME Y` for each input folder that an output folder shares a tree with: a
    tool that replaces files in its output would overwrite (or mix its work into) its own input. Inputs that are
    not local folders (hub ids) are skipped."""
    out_abs = Path(out).resolve()
    problems = []
    for name, path in inputs.items():
        if not path or not Path(path).is_dir():
            continue
        src = Path(path).resolve()
        how = "is" if out_abs == src else "lies inside" if src in out_abs.parents else (
            "holds" if out_abs in src.parents else None)
        if how:
            problems.append(f"{out_name} {out} {how} {name} {path}")
    return problems


def require_model(name: str, what: str = "model") -> None:
    """A model given as a path must be a folder: transformers would call a missing one a malformed hub id."""
    hub_id = not name.startswith(("/", ".", "~")) and name.count("/") == 1
    if not Path(name).is_dir() and not hub_id:
        raise FileNotFoundError(f"{what} not found: {name} (a folder, or a hub id like Qwen/Qwen2.5-VL-7B-Instruct)")


def option(default: Any = MISSING, help: str | Callable[[], str] = "",
           choices: tuple | Callable[[], tuple] | None = None) -> Any:
    """A tool option's dataclass field: its default, `--help` text and choices (callables are read when the parser
    is built, so a registry's entries added later are offered), from which gbtrain.cli.add_options makes its flag."""
    return field(default=default, metadata={"help": help, "choices": choices})


def config_keys(schema: type | Any, prefix: str = "") -> dict[str, Any]:
    """Every `key=value` key of a config dataclass (nested sections dotted: `lora.r`) with its default: what
    `--help` lists and the README's key tables must cover (tests/test_config.py)."""
    from dataclasses import fields, is_dataclass

    keys: dict[str, Any] = {}
    for f in fields(schema):
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if is_dataclass(default):
            keys |= config_keys(default, f"{prefix}{f.name}.")
        else:
            keys[prefix + f.name] = default
    return keys


def keys_epilog(schema: type) -> str:
    """`--help`'s list of a config's keys and defaults (??? = required)."""
    return "config keys (key=value overrides; defaults):\n" + "\n".join(
        f"  {key} = {default}" for key, default in config_keys(schema).items())


def to_yaml(cfg: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


@dataclass
class LoraSettings:
    r: int = 64
    alpha: int = 128
    dropout: float = 0.05
    # LLM linears only: the vision blocks have gate/up/down projections too, so select by path.
    target_modules: str = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


@dataclass
class FreezeSettings:
    """Which parts do not train (full fine-tuning; with LoRA the base weights are frozen anyway)."""

    vision_tower: bool = True
    merger: bool = False
    llm: bool = False


@dataclass
class LearningRates:
    llm: float = 1e-4
    merger: float = 1e-5
    vision_tower: float = 2e-6


@dataclass
class TrainConfig:
    """recipes/sft_qwen.py: TRL + PEFT SFT of a Qwen2.5-VL-class model on the builder's output."""

    model: str = "???"  # hub id or folder (with model_init=random: only its config is read)
    model_init: str = "pretrained"  # pretrained | random (architecture from config, random weights)
    dataset: str = "???"  # data_builders/build_sft.py output folder
    output_dir: str = "???"
    finetune: str = "lora"  # lora | full | qlora (bitsandbytes 4-bit, GPU only)
    lora: LoraSettings = field(default_factory=LoraSettings)
    freeze: FreezeSettings = field(default_factory=FreezeSettings)
    lr: LearningRates = field(default_factory=LearningRates)
    vision: PixelBudget | None = None  # None: the dataset's (it must match the one the boxes were built with)
    max_length: int = 8192  # longer samples are rejected before training, counted, never truncated
    packing: bool = True  # padding-free packing into rows of pack_tokens; False: padded, length-grouped
    pack_tokens: int = 16384
    per_device_batch_size: int = 1  # packed rows (packing) or samples (no packing) per device step
    gradient_accumulation_steps: int = 8
    num_train_epochs: float = 1.0
    max_steps: int = -1
    warmup_ratio: float = 0.03  # share of the total steps (transformers warmup_steps < 1)
    weight_decay: float = 0.0
    lr_scheduler: str = "cosine"
    max_grad_norm: float = 1.0
    gradient_checkpointing: bool = True  # non-reentrant
    attn_implementation: str = "sdpa"  # sdpa | eager | flash_attention_2 | flex_attention (GPU)
    precision: str = "auto"  # auto (bf16 on GPU, fp32 on CPU) | bf16 | fp32
    liger: bool = False  # Liger kernels (GPU, liger-kernel installed)
    eval_steps: int = 200
    save_steps: int = 200
    save_total_limit: int = 3
    logging_steps: int = 10
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])
    seed: int = 42
    resume: bool = False  # continue from the last checkpoint in output_dir
    dataloader_num_workers: int = 2
    peak_tflops: float = 989.0  # per-device dense bf16 peak for MFU (H100/H200 SXM); 0 disables MFU
    limit_train_samples: int | None = None
    limit_eval_samples: int | None = None

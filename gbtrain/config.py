"""YAML configs with command-line overrides (OmegaConf), typed by dataclasses.

Every entry script takes ``--config FILE.yaml`` and then any number of ``key=value`` (dotted for
nested keys, e.g. ``vision.max_pixels=401408``); unknown keys and wrong types are errors.
The ``vision`` section is the one min/max-pixels setting that builder, trainer and evaluator share.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gbtrain.coords import DEFAULT_L2_MARGIN, PixelBudget
from gbtrain.vocabulary import ANSWER_BASED, ANSWER_FREE, L1, L2, L3

T = TypeVar("T")


def option(default: Any = MISSING, help: str | Callable[[], str] = "",
           choices: tuple | Callable[[], tuple] | None = None, positional: bool = False, group: str = "") -> Any:
    """A tool option's dataclass field: its default, `--help` text and choices (callables are read when the parser
    is built, so a registry's entries added later are offered), from which gbtrain.cli.add_options makes its flag.
    `positional`: an argument given by its place (compare.py's two reports; a list: any number of them). `group`:
    options a family of tools shares (the model options of every tool that asks a checkpoint), listed after each
    tool's own in `--help`. A list or dict default is copied for each instance."""
    metadata = {"help": help, "choices": choices, "positional": positional, "group": group}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def field_default(f: Field) -> Any:
    """A dataclass field's default value (MISSING when it has none), whether given as a value or a factory."""
    return f.default_factory() if f.default_factory is not MISSING else f.default


def help_of(f: Field) -> str:
    """A field's help text (config.option's, read now if it is a callable)."""
    text = f.metadata.get("help") or ""
    return text() if callable(text) else text


@dataclass
class MixConfig:
    """Shares of the conversations by level and mode, and the share that is three-turn."""

    levels: dict[str, float] = option({L1: 0.45, L2: 0.40, L3: 0.15}, "shares by level")
    modes: dict[str, float] = option({ANSWER_FREE: 0.5, ANSWER_BASED: 0.5}, "shares by mode")
    three_turn: float = option(0.2, "share of three-turn conversations")


@dataclass
class BuildConfig:
    """data_builders/build_sft.py: annotated pages -> SFT conversations."""

    data: str = option("???", "the GradingBench-layout folder read (also --data)")
    out: str = option("???", "the folder written (also --out)")
    target_count: int = option(10_000, "conversations to build (split in proportion to pages)")
    seed: int = option(0, "seed of the page split and of the sampling of records")
    coords: str = option("qwen25", "box convention (docs/metric.md#coordinates)")
    vision: PixelBudget = field(default_factory=PixelBudget)  # the budget shared with training and evaluation
    max_length: int = option(8192, "longest conversation kept, in tokens, image included; longer ones are dropped "
                                   "and counted")
    tokenizer: str | None = option(None, "model or tokenizer folder for exact lengths (null: estimated, and the card "
                                         "says so)")
    validation_share: float = option(0.05, "share of pages in the validation split")
    test_share: float = option(0.10, "share of pages in the test split")
    mix: MixConfig = field(default_factory=MixConfig)
    l2_margin: float = option(DEFAULT_L2_MARGIN, "margin of an L2 region derived from answer boxes (pages without "
                                                 "question marks)")
    lenient: bool = option(False, "skip bad records (counted and listed) instead of stopping")
    workers: int = option(2, "threads linking or copying the images into OUT/images")


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


_YAML_RESERVED = ("@", "`")  # YAML reserves these: no plain value may start with one


def _from_overrides(overrides: list[str]):
    """`key=value` overrides as one OmegaConf mapping, each value read as YAML. YAML reserves `@` and the backtick,
    so `fields.verdict=@label` (the converters' LABEL_FIELD) would not parse: such a value is the plain string the
    user typed. Any other value YAML cannot read is one ValueError naming the override (yaml's messages span
    lines)."""
    from yaml import YAMLError

    cfg = OmegaConf.create()
    for override in overrides:
        key, _, value = override.partition("=")
        try:
            cfg.merge_with_dotlist([override])
        except YAMLError as e:
            if not value.startswith(_YAML_RESERVED):
                raise ValueError(f"bad override {override!r}: not a YAML value ({' '.join(str(e).split())}); put "
                                 f"text in YAML quotes, e.g. {key}='\"...\"' on the command line") from None
            cfg.merge_with_dotlist([f"{key}={json.dumps(value)}"])
    return cfg


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
            cfg = OmegaConf.merge(cfg, _from_overrides(overrides))
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


def require_out(out: str | Path, flag: str = "--out") -> None:
    """An output folder must be named: an empty value (an unset shell variable) would mean the current folder."""
    if not str(out).strip():
        raise ValueError(f"{flag} is empty: name the output folder")


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
    if Path(name).is_dir():
        return
    if not hub_id:
        raise FileNotFoundError(f"{what} not found: {name} (a folder, or a hub id like Qwen/Qwen2.5-VL-7B-Instruct)")
    from huggingface_hub import constants, try_to_load_from_cache

    # Offline, transformers would say it "couldn't connect" without naming the model or why it did not try.
    # (The variable as it is now: huggingface_hub reads it once, when first imported.)
    offline = os.environ.get("HF_HUB_OFFLINE", "").upper() in constants.ENV_VARS_TRUE_VALUES
    if offline and not isinstance(try_to_load_from_cache(name, "config.json"), str):
        raise FileNotFoundError(f"{what} {name} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
                                f"HF_HUB_OFFLINE is set: download it first (hf download {name}), point HF_HOME at "
                                f"the cache that holds it, or pass its folder")


def config_fields(schema: type | Any, prefix: str = "") -> list[tuple[str, Field, Any]]:
    """Every `key=value` key of a config dataclass (nested sections dotted: `lora.r`) with its field and default."""
    from dataclasses import fields, is_dataclass

    keys: list[tuple[str, Field, Any]] = []
    for f in fields(schema):
        default = field_default(f)
        if is_dataclass(default):
            keys += config_fields(default, f"{prefix}{f.name}.")
        else:
            keys.append((prefix + f.name, f, default))
    return keys


def config_keys(schema: type | Any) -> dict[str, Any]:
    """Every `key=value` key of a config dataclass with its default: what `--help` lists."""
    return {key: default for key, _, default in config_fields(schema)}


def keys_epilog(schema: type) -> str:
    """`--help`'s list of a config's keys, defaults (??? = required) and help."""
    return "config keys (key=value overrides; defaults):\n" + "\n".join(
        f"  {key} = {_yaml_value(default)}" + (f"  # {help_of(f)}" if help_of(f) else "")
        for key, f, default in config_fields(schema))


def keys_table(schema: type, flags: bool = False, leave_out: frozenset[str] = frozenset()) -> str:
    """A Markdown table of a config's keys (or, `flags`, a tool's flags and positional arguments) with each default
    and help: the key tables of docs/ are these (scripts/doc_keys.py writes them, tests/test_config.py checks
    them), so that a key cannot be added, renamed or re-defaulted without its row."""
    rows = [f"| {'flag' if flags else 'key'} | default | meaning |", "|---|---|---|"]
    keys = config_fields(schema)
    if flags:  # in --help's order (gbtrain.cli.add_options): required, the tool's own, then each shared group
        keys = sorted(keys, key=lambda k: (k[2] is not MISSING, k[1].metadata.get("group", "")))
    for key, f, default in keys:
        if key in leave_out:
            continue
        name = key if not flags or f.metadata.get("positional") else "--" + key.replace("_", "-")
        choices = f.metadata.get("choices")
        choices = choices() if callable(choices) else choices
        meaning = help_of(f) + (f" (one of: {', '.join(map(str, choices))})" if choices else "")
        shown = "required" if default is MISSING or default == "???" else f"`{_yaml_value(default)}`"
        meaning = meaning.replace("<", "&lt;")  # `<record id>` would be read as an HTML tag
        rows.append("| " + " | ".join(_cell(text) for text in (f"`{name}`", shown, meaning)) + " |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    """Text as one Markdown table cell: one line, its pipes escaped (GitHub splits cells even inside code)."""
    return " ".join(text.split()).replace("|", "\\|")


def _yaml_value(value: Any) -> str:
    """A default as it is written in a YAML config or a key=value override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(map(_yaml_value, value)) + "]"
    return str(value)


def to_yaml(cfg: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


@dataclass
class LoraSettings:
    r: int = option(64, "adapter rank")
    alpha: int = option(128, "adapter scale numerator (scale = alpha / r)")
    dropout: float = option(0.05, "dropout on the adapters' input")
    target_modules: str = option(r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
                                 "regex on module paths: the LLM's linears only (the vision blocks have gate/up/down "
                                 "projections too)")


@dataclass
class FreezeSettings:
    """Which parts do not train (full fine-tuning; with LoRA the base weights are frozen anyway)."""

    vision_tower: bool = option(True, "the vision tower does not train (false needs finetune=full)")
    merger: bool = option(False, "the vision-language merger does not train (with LoRA it trains fully unless "
                                 "frozen)")
    llm: bool = option(False, "full fine-tuning only: the language model does not train (LoRA configs leave it "
                                "out)")


@dataclass
class LearningRates:
    """One optimizer group per part (no weight decay on biases and norms)."""

    llm: float = option(1e-4, "learning rate of the language model (its adapters with LoRA)")
    merger: float = option(1e-5, "learning rate of the merger")
    vision_tower: float = option(2e-6, "learning rate of the vision tower")


@dataclass
class TrainConfig:
    """recipes/sft_qwen.py: TRL + PEFT SFT of a Qwen2.5-VL-class model on the builder's output."""

    model: str = option("???", "hub id or folder (with model_init=random only its config is read)")
    model_init: str = option("pretrained", "pretrained, or random: the architecture from the model's config with "
                                           "random weights (benchmarks, no download)")
    dataset: str = option("???", "data_builders/build_sft.py output folder")
    output_dir: str = option("???", "where checkpoints and the result go")
    finetune: str = option("lora", "lora, full, or qlora (4-bit NF4: GPU + bitsandbytes)")
    lora: LoraSettings = field(default_factory=LoraSettings)
    freeze: FreezeSettings = field(default_factory=FreezeSettings)
    lr: LearningRates = field(default_factory=LearningRates)
    vision: PixelBudget | None = option(None, "pixel budget (null: the dataset's); must equal the one the dataset's "
                                              "boxes were built with (checked)")
    max_length: int = option(8192, "longer samples are rejected before training, counted in train_summary.json, "
                                   "never truncated")
    packing: bool = option(True, "padding-free packing into rows of pack_tokens; false: padded batches, "
                                 "length-grouped sampling")
    pack_tokens: int = option(16384, "tokens per packed row")
    pack_length_multiple: int = option(0, "pad each packed row up to a multiple of this many tokens (a padding "
                                          "sample of its own, without loss), so compiled kernels (flex attention) "
                                          "see few shapes: pack_tokens gives one; 0: each row as long as its samples")
    per_device_batch_size: int = option(1, "packed rows (packing) or samples (no packing) per device step")
    gradient_accumulation_steps: int = option(8, "device steps per optimizer step")
    num_train_epochs: float = option(1.0, "passes over the training split")
    max_steps: int = option(-1, "optimizer steps (-1: as num_train_epochs gives)")
    warmup_ratio: float = option(0.03, "share of the total steps spent warming up")
    weight_decay: float = option(0.0, "AdamW weight decay (never on biases and norms)")
    lr_scheduler: str = option("cosine", "transformers scheduler name")
    max_grad_norm: float = option(1.0, "gradient clipping")
    gradient_checkpointing: bool = option(True, "non-reentrant activation checkpointing of the language model")
    checkpoint_every_n_layers: int = option(1, "with gradient_checkpointing: checkpoint every n-th decoder layer "
                                               "only (more memory, less recompute); 1: every layer")
    vision_cache_mib: int = option(0, "with the vision tower and merger frozen: keep each image's vision features "
                                      "(host memory, up to this many MiB) and encode an image once, not once per "
                                      "epoch; 0 disables; not under ZeRO-3")
    attn_implementation: str = option("sdpa", "sdpa or eager; on a GPU flex_attention (packed rows skip the blocks "
                                              "between samples; no extra package) or flash_attention_2 (varlen, "
                                              "flash-attn installed; docs/benchmarks.md)")
    precision: str = option("auto", "auto (bf16 on GPU, fp32 on CPU), bf16 (refused on a CPU machine) or fp32")
    liger: bool = option(False, "Liger kernels (GPU + liger-kernel): fused RMSNorm, SwiGLU, mRoPE and a linear "
                                "cross-entropy that never holds the logits")
    eval_steps: int = option(200, "eval loss on the validation split every this many steps")
    save_steps: int = option(200, "checkpoint every this many steps")
    save_total_limit: int = option(3, "checkpoints kept")
    logging_steps: int = option(10, "log loss, learning rate, real tokens/s and MFU every this many steps")
    report_to: list[str] = option(["tensorboard"], "loggers ([wandb] for W&B)")
    seed: int = option(42, "seed of the model's new weights, the data order and packing")
    resume: bool = option(False, "continue from the last checkpoint in output_dir")
    dataloader_num_workers: int = option(2, "data loading processes")
    peak_tflops: float = option(989.0, "per-device dense bf16 peak for the MFU column (H100/H200 SXM); 0 disables "
                                       "MFU")
    limit_train_samples: int | None = option(None, "train on the first N samples only (smoke runs)")
    limit_eval_samples: int | None = option(None, "evaluate on the first N samples only (smoke runs)")

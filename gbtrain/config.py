"""YAML configs with command-line overrides (OmegaConf), typed by dataclasses.

Every entry script takes ``--config FILE.yaml`` and then any number of ``key=value`` (dotted for
nested keys, e.g. ``vision.max_pixels=401408``); unknown keys and wrong types are errors.
The ``vision`` section is the one min/max-pixels setting that builder, trainer and evaluator share. The
configs themselves live with their stage: ``gbtrain.data.build_config`` and ``gbtrain.train.config``.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable
from dataclasses import MISSING, Field, field, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

T = TypeVar("T")


def option(default: Any = MISSING, help: str | Callable[[], str] = "",
           choices: tuple | Callable[[], tuple] | None = None, positional: bool = False, group: str = "",
           bounds: tuple[float, float] | None = None) -> Any:
    """A tool option's dataclass field: its default, `--help` text and choices (callables are read when the parser
    is built, so a registry's entries added later are offered), from which gbtrain.cli.add_options makes its flag.
    `positional`: an argument given by its place (compare.py's two reports; a list: any number of them). `group`:
    options a family of tools shares (the model options of every tool that asks a checkpoint), listed after each
    tool's own in `--help`. `bounds`: the lowest and highest value a number may take, stated in --help and checked
    by every loader (out_of_bounds): every count has a ceiling, so that no typo asks for 22 GiB. A list or dict
    default is copied for each instance."""
    metadata = {"help": help, "choices": choices, "positional": positional, "group": group, "bounds": bounds}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def field_default(f: Field) -> Any:
    """A dataclass field's default value (MISSING when it has none), whether given as a value or a factory."""
    return f.default_factory() if f.default_factory is not MISSING else f.default


def help_of(f: Field) -> str:
    """A field's help text (config.option's, read now if it is a callable), its bounds after it."""
    text = f.metadata.get("help") or ""
    text = text() if callable(text) else text
    bounds = f.metadata.get("bounds")
    return f"{text} [{bounds[0]:,}-{bounds[1]:,}]" if bounds else text


def out_of_bounds(options: Any, sep: str = "=", flags: bool = False, prefix: str = "") -> list[str]:
    """`name{sep}value: must be at least / at most ...` for each number of a loaded options dataclass (nested
    sections too) outside its option's bounds; NaN and infinities are outside any. `flags`: name them as
    --kebab-case flags (the tools), else as dotted config keys."""
    problems = []
    for f in fields(options):
        value = getattr(options, f.name)
        if is_dataclass(value):
            problems += out_of_bounds(value, sep, flags, f"{prefix}{f.name}.")
            continue
        bounds = f.metadata.get("bounds")
        if bounds is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        name = "--" + f.name.replace("_", "-") if flags else prefix + f.name
        low, high = bounds
        if (isinstance(value, float) and not math.isfinite(value)) or value < low:  # (an int of 401 digits: no float)
            problems.append(f"{name}{sep}{value!r}: must be at least {low:,}")
        elif value > high:
            problems.append(f"{name}{sep}{value!r}: must be at most {high:,}")
    return problems


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
        loaded = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:  # its message ends in full_key/object_type lines: the key goes first
        where = f" in {path}" if path else ""
        key = f"{e.full_key}: " if getattr(e, "full_key", None) else ""
        raise ValueError(f"bad config{where}: {key}{str(e).splitlines()[0]}") from e
    problems = out_of_bounds(loaded)
    if problems:
        raise ValueError(f"bad config{f' {path}' if path else ''}: {'; '.join(problems)}")
    return loaded


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
    and help: the key tables of docs/ are these (scripts/doc_keys.py writes them, tests/core/test_config.py checks
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

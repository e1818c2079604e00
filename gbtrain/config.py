"""YAML configs with command-line overrides (OmegaConf), typed by dataclasses.

Every entry script takes ``--config FILE.yaml`` and then any number of ``key=value`` (dotted for
nested keys, e.g. ``vision.max_pixels=401408``); unknown keys and wrong types are errors.
The ``vision`` section is the one min/max-pixels setting that builder, trainer and evaluator share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gbtrain.coords import PixelBudget

T = TypeVar("T")


@dataclass
class VisionConfig:
    """Image pixel budget (Qwen2.5-VL smart resize); defaults are the GradingBench reference runs."""

    min_pixels: int = 224 * 224
    max_pixels: int = 2200 * 28 * 28

    def budget(self) -> PixelBudget:
        return PixelBudget(self.min_pixels, self.max_pixels)


@dataclass
class MixConfig:
    """Shares of the conversations by level and mode, and the share that is three-turn."""

    levels: dict[str, float] = field(default_factory=lambda: {"L1": 0.45, "L2": 0.40, "L3": 0.15})
    modes: dict[str, float] = field(default_factory=lambda: {"answer-free": 0.5, "answer-based": 0.5})
    three_turn: float = 0.2


@dataclass
class BuildConfig:
    """data_builders/build_sft.py: annotated pages -> SFT conversations."""

    data: str = "???"  # a GradingBench-layout folder
    out: str = "???"
    target_count: int = 10_000
    seed: int = 0
    coords: str = "qwen25"
    vision: VisionConfig = field(default_factory=VisionConfig)
    max_length: int = 8192  # tokens, image included; longer conversations are dropped and counted
    tokenizer: str | None = None  # model or tokenizer folder for exact lengths; None = estimate
    validation_share: float = 0.05  # of pages
    test_share: float = 0.10  # of pages
    mix: MixConfig = field(default_factory=MixConfig)
    l2_margin: float = 0.02
    lenient: bool = False  # skip bad records (counted and listed) instead of stopping
    workers: int = 2


def load_config(schema: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Defaults of `schema`, then the YAML file, then `key=value` overrides; checked for missing values."""
    try:
        cfg = OmegaConf.structured(schema)
        if path is not None:
            cfg = OmegaConf.merge(cfg, OmegaConf.load(path))
        if overrides:
            bad = [o for o in overrides if "=" not in o]
            if bad:
                raise ValueError(f"overrides must be key=value, got {bad}")
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
        missing = sorted(OmegaConf.missing_keys(cfg))
        if missing:
            raise ValueError(f"missing required config value(s): {', '.join(missing)} (set them in the YAML or "
                             f"as key=value)")
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:
        where = f" in {path}" if path else ""
        raise ValueError(f"bad config{where}: {e}") from e


def to_yaml(cfg: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))

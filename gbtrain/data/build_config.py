"""The dataset build's config (data_builders/build_sft.py --config configs/data/*.yaml): which pages, how many
conversations of which kinds, the split and the pixel budget."""

from __future__ import annotations

from dataclasses import dataclass, field

from gbtrain.config import option
from gbtrain.coords import DEFAULT_L2_MARGIN, PixelBudget
from gbtrain.vocabulary import ANSWER_BASED, ANSWER_FREE, L1, L2, L3


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
    more_data: list[str] = option([], "further GradingBench folders, each newer than the one before (also --data "
                                      "again): a page in several is taken once, from the newest, in the oldest's "
                                      "split (gbtrain.data.merge)")
    data_weights: list[float] = option([], "a weight per folder (data, then more_data; default 1 each): how likely "
                                           "its records are drawn when a level has more than the mix asks for")
    out: str = option("???", "the folder written (also --out)")
    target_count: int = option(10_000, "conversations to build (split in proportion to pages)", bounds=(1, 10**8))
    seed: int = option(0, "seed of the page split and of the sampling of records", bounds=(0, 2**32 - 1))
    coords: str = option("qwen25", "box convention (docs/metric.md#coordinates)")
    vision: PixelBudget = field(default_factory=PixelBudget)  # the budget shared with training and evaluation
    max_length: int = option(8192, "longest conversation kept, in tokens, image included; longer ones are dropped "
                                   "and counted", bounds=(1, 2**20))
    tokenizer: str | None = option(None, "model or tokenizer folder for exact lengths (null: estimated, and the card "
                                         "says so)")
    validation_share: float = option(0.05, "share of pages in the validation split")
    test_share: float = option(0.10, "share of pages in the test split")
    split_group: str | None = option(None, "regex whose first group, searched in each record's image path, names "
                                           "its student or exam: all pages of one group go to one split (null: "
                                           "each page alone)")
    mix: MixConfig = field(default_factory=MixConfig)
    l2_margin: float = option(DEFAULT_L2_MARGIN, "margin of an L2 region derived from answer boxes (pages without "
                                                 "question marks)")
    lenient: bool = option(False, "skip bad records (counted and listed) instead of stopping")
    workers: int = option(2, "threads linking or copying the images into OUT/images", bounds=(1, 256))

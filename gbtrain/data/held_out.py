"""The records an evaluation scores: by default the pages the model's training build held out, never silently the
pages it trained on. `--split auto` takes the build's test split when `--data` is the folder that build was made
from (the checkpoint records its build; `--build` names one), and every record of a folder the build never saw."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gbtrain.config import option
from gbtrain.data.sft_dataset import finished_build, kept_splits
from gbtrain.data.splits import SPLITS, SplitRule
from gbtrain.schema import Record

SPLIT_CHOICES = ("auto", *reversed(SPLITS), "all")  # auto, test, validation, train, all


@dataclass(kw_only=True)
class SplitFlags:
    """Which records of --data are evaluated (a tool's options dataclass extends it; each field is a flag)."""

    split: str = option("auto", "records of --data evaluated: auto (the build's test split when --data is the folder "
                                "the model's training build was made from, else all), test, validation, train, or "
                                "all", choices=SPLIT_CHOICES)
    build: str | None = option(None, "the data_builders/build_sft.py output whose page split applies (default: the "
                                     "training build the checkpoint records)")


@dataclass(frozen=True)
class HeldOut:
    """The resolved choice: `split` (a split name, or "all"), the build whose rule decides it (None: no build
    applies, --data is not its source or no build is known), why, and whether --data is the folder that build was
    made from (so "all" includes training pages)."""

    split: str
    build: str | None
    why: str
    rule: SplitRule | None = None
    data_is_source: bool = False
    kept: dict[str, str] = field(default_factory=dict)  # page id -> split: pages split as an older folder's copy

    def split_of(self, record: Record) -> str:
        return self.kept.get(record.page_id) or self.rule.split(record)

    def keeps(self, record: Record) -> bool:
        return self.split == "all" or self.rule is None or self.split_of(record) == self.split

    def training_records(self, records: list[Record]) -> int:
        """How many of the evaluated `records` the build trained on (0 when --data is not its source)."""
        if not self.data_is_source or self.rule is None or self.split not in ("all", "train"):
            return 0
        return sum(self.split_of(r) == "train" for r in records)

    def record(self, training_records: int) -> dict:
        """What the report says of it."""
        return {"split": self.split, "build": self.build, "why": self.why, "training_records": training_records}


def resolve_held_out(data: str | Path, split: str, build: str | None, model_build: str | None) -> HeldOut:
    """The records of `data` to evaluate for `split` (SPLIT_CHOICES), with the build named by --build, else the
    one the checkpoint records (`model_build`). An explicit split needs a build made from `data`: anything else is
    a ValueError saying what to pass."""
    if split not in SPLIT_CHOICES:
        raise ValueError(f"--split {split!r}: choose one of {', '.join(SPLIT_CHOICES)}")
    source = build or model_build
    named = "--build" if build else "the checkpoint's training build"
    if source is None or (build is None and not Path(source).is_dir()):
        if split not in ("auto", "all"):
            known = f"its recorded build {source} is gone" if source else "a base model, or one gbtrain did not train"
            raise ValueError(f"--split {split}: no training build is known ({known}): pass --build, the "
                             f"data_builders/build_sft.py output made from --data")
        why = (f"every record: the checkpoint's training build {source} is gone, so its held-out pages are unknown "
               f"(pass --build)" if source else "every record: no training build is known (a base model, or one "
                                                "gbtrain did not train)")
        return HeldOut("all", None, why)
    try:
        cfg = finished_build(source)
    except (OSError, ValueError):
        if build is not None or split not in ("auto", "all"):
            raise
        # the checkpoint's build, moved or damaged since: as if gone (grade_pages and a foreign folder need none)
        return HeldOut("all", None, f"every record: the checkpoint's training build {source} cannot be read, so its "
                                    f"held-out pages are unknown (pass --build)")
    rule = SplitRule.of(cfg)
    folders = [Path(str(d)).resolve() for d in [cfg.data, *(getattr(cfg, "more_data", None) or [])]]
    built_from = folders[0] if len(folders) == 1 else ", ".join(map(str, folders))
    same = Path(data).resolve() in folders
    resolved = str(Path(source).resolve())
    if not same:
        if split not in ("auto", "all"):
            raise ValueError(f"--split {split}: --data {data} is not the folder {named} {source} was made from "
                             f"({built_from}): pass --split all for a folder it never saw, or the build made from "
                             f"--data")
        # every record, as without a build: the build decides nothing here (so evaluations compare alike)
        return HeldOut("all", None, f"every record: --data is not the folder {named} {source} was made from, so "
                                    f"none of its pages were trained on")
    chosen = "test" if split == "auto" else split
    why = {"test": "the test split of", "validation": "the validation split of",
           "train": "TRAINING PAGES of", "all": "every record, TRAINING PAGES INCLUDED, of"}[chosen]
    return HeldOut(chosen, resolved, f"{why} {named} {source}", rule, True, kept_splits(source, data))

"""The records an evaluation scores: by default those the model's training build neither trained nor validated on,
never silently the pages it trained on. Which pages a build holds is told by their pixels (the build's
contents.json, gbtrain.data.contents), not by the folder's path: a copied or moved folder, or one named by another
relative path, is the same pages. `--split auto` takes the build's test pages and any page it never saw; an
evaluation of pages it trained on says how many, whatever the split."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from gbtrain.config import option
from gbtrain.data.annotations import image_path
from gbtrain.data.contents import BuildContents, read_contents
from gbtrain.data.sft_dataset import finished_build
from gbtrain.data.splits import SPLITS
from gbtrain.schema import Record

SPLIT_CHOICES = ("auto", *reversed(SPLITS), "all")  # auto, test, validation, train, all
UNSEEN = "unseen"  # a page the build never read


@dataclass(kw_only=True)
class SplitFlags:
    """Which records of --data are evaluated (a tool's options dataclass extends it; each field is a flag)."""

    split: str = option("auto", "records of --data evaluated, told by their pixels: auto (those the model's training "
                                "build neither trained nor validated on: its test pages and pages it never saw), "
                                "test, validation, train (the build's pages of that split), or all",
                        choices=SPLIT_CHOICES)
    build: str | None = option(None, "the data_builders/build_sft.py output whose page split applies (default: the "
                                     "training build the checkpoint records)")


@dataclass(frozen=True)
class HeldOut:
    """The resolved choice: `split` (auto, a split name, or "all"), the build whose contents decide it (None: no
    build applies), why, the evaluated folder and the build's contents (None: none known)."""

    split: str
    build: str | None
    why: str
    data: Path | None = None
    contents: BuildContents | None = None

    def split_of(self, record: Record) -> str:
        """The split the build put this record's page in, by its pixels, or UNSEEN."""
        return self.contents.split_of(record, image_path(self.data, record)) or UNSEEN

    def keeps(self, record: Record) -> bool:
        if self.split == "all" or self.contents is None:
            return True
        found = self.split_of(record)
        return found in ("test", UNSEEN) if self.split == "auto" else found == self.split

    def record(self, records: list[Record]) -> dict:
        """What the report says of the evaluated `records`: the split and build (its path, and the fingerprint of its
        contents that comparisons go by), why, how many the build trained on (`training_records`) and how many of
        each split it holds (`by_content`). Records none of which the build holds are recorded as a base model's
        evaluation of the folder is (every record, no build), so the two compare."""
        if self.contents is None:
            return {"split": self.split, "build": self.build, "contents_sha256": None, "why": self.why,
                    "training_records": 0, "by_content": None}
        counts = Counter(self.split_of(r) for r in records)
        by_content = {name: counts.get(name, 0) for name in (*SPLITS, UNSEEN)}
        if self.split in ("auto", "all") and counts.get(UNSEEN, 0) == len(records):
            return {"split": "all", "build": None, "contents_sha256": None, "training_records": 0,
                    "by_content": by_content,
                    "why": f"every record: none of its pages is one the training build {self.build} read (told by "
                           f"their pixels), so none was trained on"}
        return {"split": self.split, "build": self.build, "contents_sha256": self.contents.fingerprint(),
                "why": self.why, "training_records": counts.get("train", 0), "by_content": by_content}


def resolve_held_out(data: str | Path, split: str, build: str | None, model_build: str | None) -> HeldOut:
    """The records of `data` to evaluate for `split` (SPLIT_CHOICES), with the build named by --build, else the
    one the checkpoint records (`model_build`). An explicit split needs a build whose contents are known: anything
    else is a ValueError saying what to pass."""
    if split not in SPLIT_CHOICES:
        raise ValueError(f"--split {split!r}: choose one of {', '.join(SPLIT_CHOICES)}")
    source = build or model_build
    named = "--build" if build else "the checkpoint's training build"
    if source is None or (build is None and not Path(source).is_dir()):
        if split not in ("auto", "all"):
            known = f"its recorded build {source} is gone" if source else "a base model, or one gbtrain did not train"
            raise ValueError(f"--split {split}: no training build is known ({known}): pass --build, the "
                             f"data_builders/build_sft.py output the model was trained on")
        why = (f"every record: the checkpoint's training build {source} is gone, so its held-out pages are unknown "
               f"(pass --build)" if source else "every record: no training build is known (a base model, or one "
                                                "gbtrain did not train)")
        return HeldOut("all", None, why)
    try:
        finished_build(source)
        contents = read_contents(source)
    except (OSError, ValueError):
        if build is not None or split not in ("auto", "all"):
            raise
        # the checkpoint's build, moved or damaged since: as if gone (grade_pages and a foreign folder need none)
        return HeldOut("all", None, f"every record: the checkpoint's training build {source} cannot be read, so its "
                                    f"held-out pages are unknown (pass --build)")
    if contents is None:
        if split not in ("auto", "all"):
            raise ValueError(f"--split {split}: {named} {source} was made before builds recorded their pages' "
                             f"contents, so its splits cannot be told: build it again with data_builders/build_sft.py "
                             f"(or pass --split all)")
        return HeldOut("all", None, f"every record: {named} {source} was made before builds recorded their pages' "
                                    f"contents, so which were trained on is unknown (build it again)")
    why = {"auto": "the pages neither trained nor validated on (its test split, and pages it never saw) by",
           "test": "the test split of", "validation": "the validation split of", "train": "TRAINING PAGES of",
           "all": "every record, TRAINING PAGES INCLUDED where it holds them, by"}[split]
    return HeldOut(split, str(Path(source).resolve()), f"{why} {named} {source}, told by their pixels", Path(data),
                   contents)

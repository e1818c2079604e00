"""Several GradingBench folders built as one training set: last term's pages beside this term's reviewed ones.

The folders are given oldest first (`data`, then `more_data`). A page is the same page in two folders when its image
is pixel for pixel the same (a copy of the file, or the review's own copy of a graded scan; a scan re-encoded or
scanned again is another page). Such a page is taken once, from the newest folder that has it (a teacher's
correction replaces the original), and it keeps the split of the oldest (what was held out stays held out). Records
of the second folder on are renamed `<tag>/<record id>` (the tag names their folder) so that two folders' `p1` stay
two records; their images are placed under `images/<tag>/` of the build. Each folder's weight makes its records
more (or less) likely to be drawn when a level has more records than the mix asks for."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from gbtrain.data import annotations
from gbtrain.data.contents import pixels_sha256
from gbtrain.data.splits import SplitRule
from gbtrain.schema import Record
from gbtrain.text import safe_name
from gbtrain.vocabulary import L1, L2, L3

RecordKey = tuple[str, str]  # (level, record id in the build)


@dataclass(frozen=True)
class Source:
    """One folder of the build: where it is, its weight, and its tag (None for the first: its records keep their
    ids and its images their place, as in a build of one folder)."""

    folder: Path
    weight: float
    tag: str | None


@dataclass
class Merged:
    """The folders' records as one set, and what the build needs to place, draw and split them."""

    records: dict[str, list[Record]]
    loaded: list[dict]  # each folder's annotations.load_dataset (its skipped records, warnings, unknown values)
    sources: list[Source]
    source_of: dict[RecordKey, int] = field(default_factory=dict)
    split_key: dict[RecordKey, str] = field(default_factory=dict)  # a replacing page's: the original's split key
    replaced: list[dict] = field(default_factory=list)  # {"page", "folder", "by"}: an older folder's page left out

    def weight(self, record: Record) -> float:
        return self.sources[self.source_of.get((record.level, record.record_id), 0)].weight

    def image_file(self, level: str, image: str, source: int) -> Path:
        return annotations.image_root(self.sources[source].folder, level) / image

    def image_in_build(self, record: Record) -> tuple[int, str, str]:
        """(folder, level, image) of a record: what the build places, once each."""
        return self.source_of.get((record.level, record.record_id), 0), record.level, record.image


def sources_of(data: str, more_data: list[str], weights: list[float]) -> list[Source]:
    """The build's folders, oldest first, with their weights (1 each when none are given). A folder named twice, a
    weight count that is not the folders', or a weight that is not a finite number above 0 is a ValueError."""
    folders = [Path(str(d)) for d in [data, *more_data]]
    if weights and len(weights) != len(folders):
        raise ValueError(f"data_weights has {len(weights)} value(s) for {len(folders)} folder(s) (data, then "
                         f"more_data): give one weight per folder, or none")
    bad = [w for w in weights if not (isinstance(w, int | float) and math.isfinite(w) and w > 0)]
    if bad:
        raise ValueError(f"data_weights: {bad[0]!r} is not a finite number above 0")
    seen: dict[Path, str] = {}
    for folder in folders:
        resolved = folder.resolve()
        if resolved in seen:
            raise ValueError(f"data folder {folder} is given twice (as {seen[resolved]} too): name each folder once")
        seen[resolved] = str(folder)
    return [Source(folder, float(weights[k]) if weights else 1.0, None if k == 0 else f"{k}-{safe_name(folder.name)}")
            for k, folder in enumerate(folders)]


def merge_sources(sources: list[Source], rule: SplitRule, lenient: bool) -> Merged:
    """Read every folder (annotations.load_dataset, strict unless `lenient`) and take each page once (the module's
    docstring). One folder is read as it is: nothing is hashed or renamed."""
    loaded = [annotations.load_dataset(s.folder, lenient=lenient) for s in sources]
    if len(sources) == 1:
        return Merged({level: ld.records for level, ld in loaded[0].items()}, loaded, sources)
    # each folder's pages by content: page id -> hash, from its L3 and L2 images (an L1 crop names its page)
    page_hash: list[dict[str, str]] = []
    for source, levels in zip(sources, loaded, strict=True):
        hashes: dict[str, str] = {}
        for level in (L3, L2):
            for r in levels[level].records if level in levels else []:
                path = annotations.image_path(source.folder, r)
                if r.page_id not in hashes:
                    hashes[r.page_id] = pixels_sha256(path)
        page_hash.append(hashes)
    newest: dict[str, int] = {}  # content -> the newest folder that has it
    oldest: dict[str, tuple[int, str]] = {}  # content -> (the oldest folder that has it, its page id there)
    for k, hashes in enumerate(page_hash):
        for page, content in hashes.items():
            newest[content] = k
            oldest.setdefault(content, (k, page))
    pages = [_pages(levels) for levels in loaded]
    originals = {content: pages[k].get(page) for content, (k, page) in oldest.items()}
    merged = Merged({level: [] for level in (L1, L2, L3)}, loaded, sources)
    merged.replaced = [{"page": page, "folder": str(sources[k].folder), "by": str(sources[newest[content]].folder)}
                       for k, hashes in enumerate(page_hash) for page, content in hashes.items()
                       if newest[content] != k]
    for k, (source, levels) in enumerate(zip(sources, loaded, strict=True)):
        for level, ld in levels.items():
            for r in ld.records:
                content = page_hash[k].get(r.page_id)
                if content is not None and newest[content] != k:  # a newer folder has the page
                    continue
                renamed = r if source.tag is None else dataclasses.replace(
                    r, record_id=f"{source.tag}/{r.record_id}", page=r.page_id)
                key = (level, renamed.record_id)
                merged.records[level].append(renamed)
                merged.source_of[key] = k
                if content is not None and oldest[content][0] != k and originals[content] is not None:
                    merged.split_key[key] = rule.key(originals[content])
    merged.records = {level: rs for level, rs in merged.records.items() if rs}
    return merged


def _pages(levels: dict) -> dict[str, Record]:
    """A folder's pages by page id: each one's L3 record, else its first L2 (what its split is decided by)."""
    found: dict[str, Record] = {}
    for level in (L3, L2):
        for r in levels[level].records if level in levels else []:
            found.setdefault(r.page_id, r)
    return found

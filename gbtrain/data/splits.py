"""Which split each page of a build is in: a hash of the page (or of its student or exam, where the build names a
group), the build's seed and its shares. The builder, checkpoint selection and the evaluator all ask this rule, so
no page is trained on and scored."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

from gbtrain.patterns import UserPattern
from gbtrain.schema import Record
from gbtrain.text import brief

SPLITS = ("train", "validation", "test")


def split_of(key: str, seed: int, validation_share: float, test_share: float) -> str:
    """Deterministic split of a page (or group) from a hash: stable when pages are added, never mixing a page."""
    u = int(hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()[:12], 16) / 16**12
    if u < test_share:
        return "test"
    if u < test_share + validation_share:
        return "validation"
    return "train"


@lru_cache(maxsize=64)
def _group_pattern(group: str) -> UserPattern:
    return UserPattern(group, "split_group")


@dataclass(frozen=True)
class SplitRule:
    """A build's split: its seed and shares, and `group`, a regex whose first group (or whole match), searched in a
    record's image path, names the student or exam its page belongs to: every page of one group shares a split, so
    no student's handwriting is both trained on and scored. Without `group`, each page is its own group."""

    seed: int
    validation_share: float
    test_share: float
    group: str | None = None

    def __post_init__(self):
        if self.group is not None:
            _group_pattern(self.group)

    @classmethod
    def of(cls, cfg) -> SplitRule:
        """The rule of a build config (BuildConfig, or a finished build's recorded config; one built before groups
        has none)."""
        return cls(int(cfg.seed), float(cfg.validation_share), float(cfg.test_share),
                   getattr(cfg, "split_group", None) or None)

    def key(self, record: Record) -> str:
        """What is hashed for `record`: its group, or its page. A record whose image path the group pattern does
        not match is a ValueError naming it."""
        if self.group is None:
            return record.page_id
        found = _group_pattern(self.group).search(record.image)
        if found is None:
            raise ValueError(f"record {record.record_id}: its image {brief(record.image)} does not match split_group "
                             f"{self.group!r}: name every page's student or exam in its path, or change split_group")
        group = found.group(1) if found.re.groups else found.group(0)
        if not group:  # hashing the page instead would split a group's pages as if it had none
            raise ValueError(f"record {record.record_id}: split_group {self.group!r} matches its image "
                             f"{brief(record.image)} but names no student or exam (an empty match): change split_group")
        return group

    def split(self, record: Record) -> str:
        return self.split_key(self.key(record))

    def split_key(self, key: str) -> str:
        """The split of a page or group by its key (SplitRule.key)."""
        return split_of(key, self.seed, self.validation_share, self.test_share)

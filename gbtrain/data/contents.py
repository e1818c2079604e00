"""What a build holds, by content: each image it read (any level) by the hash of its pixels, with the split its
conversations went to, and each student's or exam's split where the build names groups. Written with the build
(OUT/contents.json) and read by evaluation, scoring and selection, so that "trained on or not" is decided by the
pages themselves wherever their folder lies (copied, moved, named by a relative path, on another machine)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from PIL import Image

from gbtrain.data.splits import SPLITS, SplitRule
from gbtrain.schema import Record

CONTENTS_FILE = "contents.json"
# the split an image seen in several takes (two blank pages alike, one trained on): training wins, so nothing the
# model saw is ever scored as held out
_PRECEDENCE = {"train": 0, "validation": 1, "test": 2}


def pixels_sha256(path: str | Path) -> str:
    """The identity of an image: its size and mode-independent RGB pixels, hashed (a copy, a move or a lossless
    re-save keep it; a re-encoded JPEG or a new scan is another image). An unreadable file is a ValueError naming it."""
    return _pixels_sha256(*_cache_key(path))


def _cache_key(path: str | Path) -> tuple[str, int, int]:
    """A file's resolved path, modification time and size: what the hash caches are keyed by (a file rewritten in
    place is hashed again). A file that cannot be read is a ValueError naming it."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e.strerror})") from None
    return str(path.resolve()), stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=65_536)  # an L3 page and its L2 records share one file: decoded once (keyed by its stat too)
def _pixels_sha256(path: str, _mtime_ns: int, _size: int) -> str:
    try:
        with Image.open(path) as im:
            rgb = im.convert("RGB")
    except (OSError, SyntaxError, Image.DecompressionBombError) as e:
        raise ValueError(f"{path}: cannot be read ({e})") from None
    return hashlib.sha256(f"{rgb.width}x{rgb.height}:".encode() + rgb.tobytes()).hexdigest()


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes: a copy of an image the build read has the build's bytes, so its pixel hash is
    looked up instead of decoded again (every record of --data is asked before --limit takes the first ones)."""
    return _file_sha256(*_cache_key(path))


@lru_cache(maxsize=65_536)
def _file_sha256(path: str, _mtime_ns: int, _size: int) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e.strerror})") from None
    return digest.hexdigest()


def hash_all(paths: Iterable[Path], workers: int = 1) -> dict[Path, tuple[str, str]]:
    """(pixels_sha256, file_sha256) of each distinct path, `workers` at a time (decoding releases the GIL)."""
    distinct = sorted({Path(p) for p in paths})
    with ThreadPoolExecutor(max(1, workers)) as pool:
        return dict(zip(distinct, pool.map(lambda p: (pixels_sha256(p), file_sha256(p)), distinct), strict=True))


@dataclass(frozen=True)
class BuildContents:
    """A finished build's contents: image hash -> split, group -> split (split_group builds), and its split rule."""

    images: dict[str, str]
    groups: dict[str, str] = field(default_factory=dict)
    group: str | None = None  # the build's split_group pattern
    files: dict[str, str] = field(default_factory=dict)  # file_sha256 -> pixels_sha256 of the images the build read

    def split_of(self, record: Record, path: str | Path) -> str | None:
        """The split the build put this record's image in (by its pixels), else its student's or exam's split
        (a split_group build: a new page of a trained student is that student's), else None: the build never saw it."""
        known = self.files.get(file_sha256(path)) if self.files else None  # a build before 12-07 has no file map
        found = self.images.get(known or pixels_sha256(path))
        if found is None and self.group is not None:
            try:
                found = self.groups.get(SplitRule(0, 0, 0, self.group).key(record))
            except ValueError:  # a page whose path names no group: not one of the build's students
                found = None
        return found

    def fingerprint(self) -> str:
        """The sha256 of what the build holds: two copies of one build (any path) share it, another build does not."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()

    def to_json(self) -> dict:
        return {"hash": "sha256 of 'WxH:' + RGB pixels", "images": dict(sorted(self.images.items())),
                "group": self.group, "groups": dict(sorted(self.groups.items())),
                "files": dict(sorted(self.files.items()))}


def contents_of(split_by_image: Iterable[tuple[str, str]], group: str | None,
                split_by_group: Iterable[tuple[str, str]], files: dict[str, str] | None = None) -> BuildContents:
    """The contents of a build from (image hash, split) and (group, split) pairs, and the images' file hashes; an
    image in several splits is entered as trained on (if any) so that nothing the model saw is held out."""
    images: dict[str, str] = {}
    for sha, split in split_by_image:
        if split not in SPLITS:
            raise ValueError(f"split {split!r} is not one of {', '.join(SPLITS)}")
        if sha not in images or _PRECEDENCE[split] < _PRECEDENCE[images[sha]]:
            images[sha] = split
    return BuildContents(images, dict(split_by_group), group, dict(files or {}))


def write_contents(out: Path, contents: BuildContents) -> None:
    (out / CONTENTS_FILE).write_text(json.dumps(contents.to_json(), indent=0) + "\n", encoding="utf-8")


def read_contents(build: str | Path) -> BuildContents | None:
    """OUT/contents.json of a build (None: a build made before contents were recorded). A damaged file is a
    ValueError naming it and the way out."""
    path = Path(build) / CONTENTS_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        images, groups, files = data["images"], data.get("groups") or {}, data.get("files") or {}  # files: since 12-07
        ok = all(isinstance(k, str) and v in SPLITS for k, v in (*images.items(), *groups.items())) and all(
            isinstance(k, str) and v in images for k, v in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a build's contents record ({e}): build {build} again with "
                         f"data_builders/build_sft.py") from None
    if not ok or not (data.get("group") is None or isinstance(data["group"], str)):
        raise ValueError(f"{path}: not a build's contents record (an entry is not a hash and a split): build {build} "
                         f"again with data_builders/build_sft.py")
    return BuildContents(images, groups, data.get("group"), files)

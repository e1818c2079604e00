"""A finished SFT build as a self-contained, Hub-ready DatasetDict (what data_builders/export_hub.py writes).

A build names its images by paths relative to its folder, which only gbtrain's loader (or a reader who joins them)
turns into images. The export embeds each row's image as a `datasets.Image` (its JPEG bytes, unchanged, in the
Arrow files), so `datasets.load_from_disk` alone gives PIL images, TRL's SFTTrainer takes it as it is
(`messages` + `images`, its conversational vision format), and `DatasetDict.push_to_hub` can publish it:

    OUT/dataset_dict.json, train/, validation/, test/   the build's rows, images embedded
    OUT/README.md                                       Hub front matter + the build's card + how to use it
    OUT/gbtrain_export.json                             what was exported (written last: marks a finished export)

The Image feature stores bytes per row, so an image that several rows share (a page behind many questions) is
stored once per row: the export is larger than the build, which stores each image once (the record and the README
give the ratio). No plain DatasetDict can share the bytes between rows.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from gbtrain.config import option
from gbtrain.data.sft_dataset import dataset_coords, dataset_pixel_budget, finished_build, load_sft_dataset
from gbtrain.data.splits import SPLITS
from gbtrain.files import read_json, write_atomic
from gbtrain.outputs import HUB_EXPORT_RECORD, SYNTH_RECORD, claim_rebuilt_folder, overlapping, require_out
from gbtrain.text import brief, markdown_code

README = "README.md"
_OUTPUTS = (README, HUB_EXPORT_RECORD, "dataset_dict.json", *SPLITS)  # what a rerun replaces
SHARD_BYTES = 500 * 2**20  # images per Arrow file, as datasets' own default shard size


@dataclass
class HubExportRun:
    """Everything one `data_builders/export_hub.py` call needs; each field is one of its flags (gbtrain.cli)."""

    build: str = option(help="a finished data_builders/build_sft.py output folder")
    out: str = option(help="new folder for the export (empty, or an earlier export, which is replaced)")
    license: str = option("unknown", "the Hub licence id of the pages and annotations (e.g. cc-by-4.0), written "
                                     "into README.md; the build does not record it")
    push_to_hub: str | None = option(None, "also publish the export to this Hub dataset repo (owner/name)")
    private: bool = option(True, "create the Hub repo as private (exam pages carry students' handwriting)")


LICENCE_ID = re.compile(r"[a-z0-9][a-z0-9.-]{0,63}")


def check_export(run: HubExportRun) -> set[str]:
    """Everything that can be refused before any work: the output folder, and a push that cannot happen. Returns
    the earlier export's files a rerun replaces (earlier_export_files)."""
    require_out(run.out)
    if not LICENCE_ID.fullmatch(run.license):  # the card's front matter: an id the Hub knows, never free text
        raise ValueError(f"--license {brief(run.license)}: give a Hub licence id (lowercase letters, digits, . and -: "
                         f"cc-by-4.0, mit, apache-2.0, other; https://huggingface.co/docs/hub/repositories-licenses)")
    overlap = overlapping("--out", run.out, {"--build": run.build})
    if overlap:
        raise ValueError(f"{overlap[0]}: write the export to a folder of its own")
    out = Path(run.out)
    replaced = earlier_export_files(out)
    if run.push_to_hub is not None:
        from huggingface_hub import constants
        from huggingface_hub.utils import validate_repo_id

        validate_repo_id(run.push_to_hub)  # a ValueError naming what is wrong with the id
        if os.environ.get("HF_HUB_OFFLINE", "").upper() in constants.ENV_VARS_TRUE_VALUES:
            raise ValueError(f"--push-to-hub {run.push_to_hub}: HF_HUB_OFFLINE is set, so nothing can be uploaded: "
                             f"unset it to push, or export without --push-to-hub and push {out} later")
        if run.license == "unknown":
            raise ValueError(f"--push-to-hub {run.push_to_hub}: say under which licence the pages may be shared "
                             f"(--license cc-by-4.0, other, ...); the build does not record it")
    return replaced


# what a stopped export may have written: its README, and datasets' save_to_disk files (dataset_dict.json; per split
# its Arrow shards, dataset_info.json and state.json)
_WRITTEN = re.compile(rf"README\.md|dataset_dict\.json|({'|'.join(SPLITS)})/(data-\d{{5}}-of-\d{{5}}\.arrow|"
                      rf"dataset_info\.json|state\.json)")


def _files(out: Path) -> set[str]:
    """Every file an export may have written or replace, by its path under `out` (its record aside)."""
    return {p.relative_to(out).as_posix() for name in _OUTPUTS if name != HUB_EXPORT_RECORD
            for p in ([out / name] if (out / name).is_file() else (out / name).rglob("*")) if p.is_file()}


def earlier_export_files(out: Path) -> set[str]:
    """The files of an earlier export in `out` that a rerun replaces: those its record lists, or, for an export
    stopped before it finished (its record says unfinished, written before anything else), the files an export
    writes (_WRITTEN). A folder without a readable record, a file there (a user's train/mine.csv) that no record
    vouches for, or a link among the export's names is refused: nothing is deleted that this tool did not write."""
    try:
        record = read_json(out / HUB_EXPORT_RECORD) if (out / HUB_EXPORT_RECORD).is_file() else None
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("files", []), list):
        record = None
    claim_rebuilt_folder(out, "--out", "export_hub", record is not None)
    links = [p for name in _OUTPUTS for p in [out / name, *((out / name).rglob("*") if (out / name).is_dir() else ())]
             if p.is_symlink()]
    if links:
        raise ValueError(f"--out {out} holds {links[0].relative_to(out)}, a link (to {links[0].resolve()}): "
                         f"export_hub replaces no linked folder: remove the link, or choose another --out")
    present = _files(out) if out.is_dir() else set()
    if record is None:
        return present  # an empty folder, or none
    ours = ({f for f in present if _WRITTEN.fullmatch(f)} if record.get("status") == "unfinished" else
            {str(f) for f in record.get("files", [])})
    foreign = sorted(present - ours)
    if foreign:
        raise ValueError(f"--out {out} holds {foreign[0]} ({len(foreign)} files) that export_hub did not write "
                         f"(its {HUB_EXPORT_RECORD} does not list them): move them away, or choose another --out")
    return present


def _through_a_link(path: Path, build: Path) -> bool:
    """Whether `path` or a folder of it below the build (its rows' paths start at the resolved build) is a link."""
    top = build.resolve()
    path = Path(os.path.normpath(path.absolute()))
    return any(p.is_symlink() for p in (path, *path.parents) if p != top and top in p.parents)


def export_hub(run: HubExportRun) -> dict:
    """Write the export of `run.build` into `run.out` (and push it when asked); returns the record it writes."""
    from datasets import Dataset, DatasetDict, Features, Image, List

    start = time.perf_counter()
    replaced = check_export(run)
    build, out = Path(run.build), Path(run.out)
    dd = load_sft_dataset(build, decode_images=False)  # every image file checked to exist before anything is removed
    columns = dd[SPLITS[0]].column_names
    paths = {name: split["images"] for name, split in dd.items()}
    references = [p for rows in paths.values() for row in rows for p in row]
    linked = next((p for p in sorted(set(references)) if _through_a_link(Path(p), build)), None)
    if linked is not None:  # a build holds its images as files (hard links or copies): a link may lead anywhere
        raise ValueError(f"{linked}: a link (to {Path(linked).resolve()}), where a build holds its images as files: "
                         f"an export would publish whatever it leads to; build it again with "
                         f"data_builders/build_sft.py")
    sizes = {p: Path(p).stat().st_size for p in set(references)}
    features = Features({c: List(Image()) if c == "images" else dd[SPLITS[0]].features[c] for c in columns})
    # In memory: written to disk, datasets would put cache files into the build folder, which stays as it is. (A cast
    # leaves an empty split's features as they were: it is made anew with the export's.)
    dd = DatasetDict({name: split.select_columns(columns).cast(features, keep_in_memory=True) if len(split) else
                      Dataset.from_dict({c: [] for c in columns}, features=features) for name, split in dd.items()})
    out.mkdir(parents=True, exist_ok=True)
    # first: a run stopped from here on leaves a record that vouches for what it wrote
    write_atomic(out / HUB_EXPORT_RECORD, json.dumps({"status": "unfinished", "build": str(build)}) + "\n")
    for name in sorted(replaced):
        (out / name).unlink()
    for name in SPLITS:  # the folders the earlier export's files left, now empty
        if (out / name).is_dir() and not any(p.is_file() for p in (out / name).rglob("*")):
            shutil.rmtree(out / name)
    # datasets embeds the bytes of each local image file it writes, but counts its shards without them: as many as
    # SHARD_BYTES of images need (cut by rows, so they differ in size; an empty split keeps one for load_from_disk)
    split_bytes = {name: sum(sizes[p] for row in rows for p in row) for name, rows in paths.items()}
    shards = {name: max(1, min(len(dd[name]), math.ceil(n / SHARD_BYTES))) for name, n in split_bytes.items()}
    dd.save_to_disk(str(out), num_shards=shards)
    embedded, distinct = sum(sizes[p] for p in references), sum(sizes.values())
    record = {"build": str(build), "rows": {name: len(split) for name, split in dd.items()},
              "distinct_images": len(sizes), "distinct_image_bytes": distinct, "embedded_image_bytes": embedded,
              "duplication": round(embedded / max(1, distinct), 2), "license": run.license}
    (out / README).write_text(render_readme(build, record), encoding="utf-8")
    record |= {"build_bytes": folder_bytes(build), "export_bytes": folder_bytes(out),
               "seconds": round(time.perf_counter() - start, 1)}
    record |= {"status": "complete", "files": sorted(_files(out))}
    write_atomic(out / HUB_EXPORT_RECORD, json.dumps(record, indent=1) + "\n")
    if run.push_to_hub is not None:
        push(out, run.push_to_hub, run.private, render_readme(build, record, local_files=False))
    return record


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under `folder` (what a copy of it takes; hard links count in full)."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def _size_category(rows: int) -> str:
    """The Hub's size_categories bucket of a row count."""
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if rows < limit:
            return name
    return "n>1M"


def render_readme(build: Path, record: dict, local_files: bool = True) -> str:
    """README.md: the Hub's YAML front matter, the build's card, then what a user of the export must know (the box
    convention and pixel budget the targets need, the licence, the duplication). `local_files`: the front matter
    names this folder's Arrow files (load_dataset on the folder, an upload of it as it is); push_to_hub writes its
    own file list instead."""
    total = sum(record["rows"].values())
    meta: dict = {"license": record["license"], "pretty_name": "gbtrain exam-grading SFT conversations",
                  "task_categories": ["image-text-to-text"],
                  "tags": ["gbtrain", "exam-grading", "handwriting", "vision-language", "sft"],
                  "size_categories": [_size_category(total)]}
    if local_files:
        meta["configs"] = [{"config_name": "default", "data_files": [
            {"split": name, "path": f"{name}/data-*.arrow"} for name, n in record["rows"].items() if n]}]
    vision, coords = dataset_pixel_budget(build), dataset_coords(build)
    budget = f"min_pixels={vision.min_pixels}, max_pixels={vision.max_pixels}, {vision.factor} px per image token"
    synth = Path(str(finished_build(build).data)) / SYNTH_RECORD
    if synth.is_file():
        options = json.loads(synth.read_text(encoding="utf-8"))
        source = (f"The pages are gbtrain's synthetic exam pages ({options.get('pages')} pages, seed "
                  f"{options.get('seed')}, profile {options.get('profile')}), rendered with fonts under their own "
                  f"licences (gbtrain/data/fonts/).")
    else:
        source = "The build does not record where its pages come from."
    given = markdown_code(f"license: {record['license']}")
    licence = (f"{given} was given at export." if record["license"] != "unknown" else
               "The licence is `unknown`: set `license` above to the one the pages and annotations may be shared "
               "under before publishing.")
    card = (build / "card.md").read_text(encoding="utf-8") if (build / "card.md").is_file() else ""
    usage = f"""
## Using this export

Rows are TRL's conversational vision format: `messages` (role and content strings; the one image goes with the
first user turn) and `images` (a list of one image, its JPEG bytes embedded), plus `sample_id`, `page_id`,
`record_id`, `level`, `mode`, `turns`, `subject`, `stage`, `num_tokens`, `image_width`, `image_height` and `split`.
`datasets.load_from_disk(FOLDER)` opens this folder and `datasets.load_dataset(REPO)` a pushed copy; TRL's
`SFTTrainer` takes a split as it is.

The assistant's boxes are in the `{coords}` convention, computed on each image resized with {budget}.
Train with a processor that resizes the same way, set after loading (a hub checkpoint's `preprocessor_config.json`
asks for a far larger budget, and wins over a `size=` argument to `from_pretrained`; the boxes would then not match
the image the model sees); for Qwen2.5-VL and Qwen3-VL:

```python
processor = AutoProcessor.from_pretrained(MODEL)
processor.image_processor.size = {{"shortest_edge": {vision.min_pixels}, "longest_edge": {vision.max_pixels}}}
```

`num_tokens` counts the chat template and the image tokens at that budget.

{source} {licence}

Each row holds its own copy of its image (datasets' `Image` feature stores bytes per row): the {total:,} rows embed
{record['embedded_image_bytes']:,} bytes of image data, {record['duplication']}x the
{record['distinct_image_bytes']:,} bytes of their {record['distinct_images']:,} distinct images.
"""
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n\n" + card + usage


def push(out: Path, repo: str, private: bool, readme: str) -> None:
    """Publish the export: the README first (push_to_hub keeps a repo's card and adds its own file list and
    dataset_info to the front matter), then the splits as Parquet."""
    from datasets import DatasetDict, load_from_disk
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
    api.upload_file(path_or_fileobj=readme.encode(), path_in_repo=README, repo_id=repo, repo_type="dataset",
                    commit_message=f"gbtrain export of {out.name}: dataset card")
    export = load_from_disk(str(out))
    splits = DatasetDict({name: split for name, split in export.items() if len(split)})  # the Hub lists no empty one
    splits.push_to_hub(repo, private=private, commit_message=f"gbtrain export of {out.name}")

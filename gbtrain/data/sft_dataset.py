"""Build the SFT DatasetDict: split pages, sample the conversation mix, check lengths, write the card.

Output folder (``datasets.load_from_disk`` opens it; ``load_sft_dataset`` also turns the rows' image paths,
which are relative to OUT so that the folder can be moved or copied whole, into files to open):

    OUT/dataset_dict.json, train/, validation/, test/   the conversations
    OUT/images/<level>/<subject>/<file>.jpg              each image once (rows refer to it as images/<level>/...)
    OUT/card.md, OUT/stats.json, OUT/build_config.yaml   what was built, counted
    OUT/contents.json                                    every image read, by its pixels, with its split
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import statistics
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from gbtrain.config import below_minimum, load_yaml, out_of_bounds, to_yaml
from gbtrain.coords import CONVENTIONS, DEFAULT_L2_MARGIN, PixelBudget
from gbtrain.data.build_config import BuildConfig
from gbtrain.data.contents import BuildContents, contents_of, hash_all, write_contents
from gbtrain.data.conversations import Conversation, build_conversation, with_image_placeholder
from gbtrain.data.merge import Merged, merge_sources, sources_of
from gbtrain.data.splits import SPLITS, SplitRule
from gbtrain.families import DEFAULT_FAMILY, family_of_model
from gbtrain.outputs import overlapping
from gbtrain.schema import Record
from gbtrain.text import brief, markdown_text
from gbtrain.vocabulary import LEVELS, MODES


@dataclass
class Plan:
    items: list[tuple[Record, str, bool, str]] = field(default_factory=list)  # record, mode, three_turn, split
    shortfall: Counter = field(default_factory=Counter)  # (split, level, mode, turns) -> conversations missing


def plan_mix(records_by_level: dict[str, list[Record]], cfg: BuildConfig, merged: Merged | None = None) -> Plan:
    """Choose which (record, mode, turns) conversations to build, per split, to meet the configured mix.

    A record is used at most once per (mode, turns) stratum; when a stratum has too few records the
    missing count is recorded (the card reports it) rather than repeating conversations. With several folders
    (`merged`), a record is drawn by its folder's weight, and a page that replaced an older folder's is split as
    that one was.
    """
    _check_config(cfg)
    rng = random.Random(cfg.seed)
    rule = SplitRule.of(cfg)
    by_split: dict[str, dict[str, list[Record]]] = {s: {lvl: [] for lvl in LEVELS} for s in SPLITS}
    pages: dict[str, set[str]] = {s: set() for s in SPLITS}
    for level, records in records_by_level.items():
        for r in records:
            s = record_split(r, rule, merged)
            by_split[s][level].append(r)
            pages[s].add(r.page_id)
    total_pages = sum(len(p) for p in pages.values()) or 1
    plan = Plan()
    for split in SPLITS:
        split_target = cfg.target_count * len(pages[split]) / total_pages
        for level, share in cfg.mix.levels.items():
            pool = sorted(by_split[split].get(level, []), key=lambda r: r.record_id)
            for mode, mode_share in cfg.mix.modes.items():
                for three_turn, tt_share in ((False, 1 - cfg.mix.three_turn), (True, cfg.mix.three_turn)):
                    quota = round(split_target * share * mode_share * tt_share)
                    take = min(quota, len(pool))
                    plan.items += [(r, mode, three_turn, split) for r in _draw(rng, pool, take, merged)]
                    if quota > take:
                        plan.shortfall[(split, level, mode, 3 if three_turn else 1)] += quota - take
    return plan


def record_split(record: Record, rule: SplitRule, merged: Merged | None) -> str:
    """The split of a build's record: its page's (or group's) by the rule, or, for a page that replaced an older
    folder's copy, the split that copy had."""
    key = merged.split_key.get((record.level, record.record_id)) if merged else None
    return rule.split(record) if key is None else rule.split_key(key)


def group_key(record: Record, rule: SplitRule, merged: Merged | None) -> str:
    """What the rule hashes for a build's record (its group or page, or the older copy's)."""
    key = merged.split_key.get((record.level, record.record_id)) if merged else None
    return rule.key(record) if key is None else key


def build_contents(merged: Merged, rule: SplitRule, workers: int) -> BuildContents:
    """Every image the build read, at every level, by its pixels, with its split; each group's split where the
    build names groups: what evaluation asks to decide which pages were trained on (gbtrain.data.contents)."""
    records = [r for recs in merged.records.values() for r in recs]
    paths = {}
    for r in records:
        source, level, image = merged.image_in_build(r)
        paths[(r.level, r.record_id)] = merged.image_file(level, image, source)
    hashes = hash_all(paths.values(), workers)
    splits = [(hashes[paths[(r.level, r.record_id)]][0], record_split(r, rule, merged)) for r in records]
    groups = {group_key(r, rule, merged): split for r, (_, split) in zip(records, splits, strict=True)} \
        if rule.group else {}
    return contents_of(splits, rule.group, groups.items(), {file: pixels for pixels, file in hashes.values()})


def _draw(rng: random.Random, pool: list[Record], take: int, merged: Merged | None) -> list[Record]:
    """`take` records of `pool`, each at most once: uniformly (as a build of one folder always drew), or, where the
    folders' weights differ, by weight (Efraimidis and Spirakis: the largest u ** (1 / weight))."""
    if merged is None or len({s.weight for s in merged.sources}) == 1:
        return rng.sample(pool, take)
    keyed = sorted(((rng.random() ** (1 / merged.weight(r)), k) for k, r in enumerate(pool)), reverse=True)
    return [pool[k] for _, k in keyed[:take]]


def _check_config(cfg: BuildConfig) -> None:
    """Every build option in its range (NaN included), before any work."""
    if cfg.coords not in CONVENTIONS:
        raise ValueError(f"coords={cfg.coords!r}: choose one of {', '.join(CONVENTIONS)}")
    empty = [key for key in ("data", "out") if not str(getattr(cfg, key)).strip()]
    if empty:
        raise ValueError(f"{' and '.join(empty)} must name a folder (got an empty value)")
    for name, shares, allowed in (("mix.levels", cfg.mix.levels, LEVELS), ("mix.modes", cfg.mix.modes, MODES)):
        unknown = set(shares) - set(allowed)
        if unknown:
            raise ValueError(f"{name}: unknown keys {sorted(unknown)}; allowed {list(allowed)}")
        if not all(math.isfinite(v) and v >= 0 for v in shares.values()) or abs(sum(shares.values()) - 1) > 1e-6:
            raise ValueError(f"{name} must be non-negative shares summing to 1, got {dict(shares)}")
    if not 0 <= cfg.mix.three_turn <= 1:
        raise ValueError(f"mix.three_turn must be in [0, 1], got {cfg.mix.three_turn}")
    if not (0 <= cfg.validation_share < 1 and 0 <= cfg.test_share < 1 and cfg.validation_share + cfg.test_share < 1):
        raise ValueError("validation_share and test_share must be >= 0 and sum to less than 1")
    bad = out_of_bounds(cfg) + below_minimum({"l2_margin": (cfg.l2_margin, 0)})  # the counts' bounds: their options
    if bad:
        raise ValueError("; ".join(bad))


BUILD_FILES = ("build_config.yaml", "dataset_dict.json", "stats.json")  # any of them: a (maybe unfinished) build


def _check_output_folder(out: Path, folders: list[Path]) -> None:
    """The build replaces OUT/images and the split folders: OUT must share no tree with its sources, and hold
    nothing but an earlier build (a folder of other work would get the build's files mixed in)."""
    overlap = [problem for folder in folders for problem in overlapping("out", out, {"data": folder})]
    if overlap:
        raise ValueError(f"{overlap[0]}: write the SFT set to a folder of its own")
    if out.is_dir() and any(out.iterdir()) and not any((out / f).exists() for f in BUILD_FILES):
        raise ValueError(f"out {out} holds files that are not an SFT build: choose another --out (or an empty one)")


class LengthCounter:
    """Token length of a conversation as the model sees it: chat template text plus image tokens.

    With a tokenizer the count is exact; without one the text part is estimated (UTF-8 bytes / 3,
    a tokenizer-free upper-side guess) and the card says so.
    """

    def __init__(self, tokenizer, budget: PixelBudget):
        """`tokenizer`: a tokenizer object, a path or hub id to load one from, or None (estimate)."""
        self.budget = budget
        self.tokenizer = tokenizer
        if isinstance(tokenizer, str):
            from transformers import AutoTokenizer

            try:
                self.tokenizer = AutoTokenizer.from_pretrained(tokenizer)
            except (OSError, ValueError) as e:  # transformers' messages do not always name what it tried to load
                raise ValueError(f"tokenizer={tokenizer}: no tokenizer loads from it ({' '.join(str(e).split())}); "
                                 f"name a model folder or hub id, or null to estimate lengths") from None

    @property
    def exact(self) -> bool:
        return self.tokenizer is not None

    def lengths(self, convs: list[Conversation]) -> list[int]:
        return self.count([c.messages for c in convs], [(c.record.width, c.record.height) for c in convs])

    def count(self, messages: list[list[dict]], image_sizes: list[tuple[int, int]], batch: int = 512) -> list[int]:
        """Token lengths of conversations whose one image has the given (width, height)."""
        image_tokens = [self.budget.image_tokens(w, h) for w, h in image_sizes]
        if self.tokenizer is None:
            text = [sum(len(m["content"].encode()) for m in msgs) // 3 + 30 * len(msgs) for msgs in messages]
        else:
            text = []
            # a bar only where counting takes a while (a dataset build, not an evaluation's setting)
            for i in tqdm(range(0, len(messages), batch), desc="token lengths", leave=False,
                          disable=len(messages) <= batch):
                rendered = [self.tokenizer.apply_chat_template(with_image_placeholder(msgs), tokenize=False)
                            for msgs in messages[i:i + batch]]
                enc = self.tokenizer(rendered, add_special_tokens=False)["input_ids"]
                text += [len(ids) - 1 for ids in enc]  # the one <|image_pad|> stands for the image tokens
        return [t + n for t, n in zip(text, image_tokens, strict=True)]


IMAGES_DIR = "images"  # OUT/images: every image a row names, by a path relative to OUT


def _place_images(merged: Merged, out: Path, records: list[Record], workers: int) -> dict[tuple[int, str, str], str]:
    """Link (or copy) each distinct image into OUT/images once; return (folder, level, image) -> its path relative
    to OUT (`images/L1/...`, `images/<tag>/L1/...` for the second folder on: moved or shared, the folder's rows still
    name its own images)."""
    wanted = {merged.image_in_build(r) for r in records}
    tags = [s.tag for s in merged.sources]
    targets = {key: Path(IMAGES_DIR, *([tags[key[0]]] if tags[key[0]] else []), key[1], key[2]).as_posix()
               for key in wanted}

    def place(key: tuple[int, str, str]) -> None:
        src = merged.image_file(key[1], key[2], key[0])
        dst = out / targets[key]
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists():
            dst.unlink()
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        list(tqdm(pool.map(place, sorted(wanted)), total=len(wanted), desc="images", leave=False))
    return targets


def _row(c: Conversation, split: str, image: str, length: int) -> dict:
    r = c.record
    return {
        "sample_id": c.sample_id, "page_id": r.page_id, "record_id": r.record_id, "level": r.level,
        "mode": c.mode, "turns": c.turns, "subject": r.subject, "stage": r.stage or "Unknown",
        "num_tokens": length, "image_width": r.width, "image_height": r.height, "images": [image],
        "messages": c.messages, "split": split,
    }


def build_sft_dataset(cfg: BuildConfig, progress: bool = True) -> dict:
    """Run the whole build; returns the stats that are also written to OUT/stats.json."""
    from datasets import Dataset, DatasetDict

    _check_config(cfg)
    sources = sources_of(cfg.data, list(cfg.more_data), list(cfg.data_weights))
    out = Path(cfg.out)
    _check_output_folder(out, [source.folder for source in sources])
    budget = cfg.vision
    family = family_of_model(cfg.tokenizer) if cfg.tokenizer else None
    if family is not None:  # image token counts (and qwen25 boxes) follow the model's token size
        budget.check_family(family, cfg.tokenizer)
    merged = merge_sources(sources, SplitRule.of(cfg), cfg.lenient)
    plan = plan_mix(merged.records, cfg, merged)
    convs = [build_conversation(r, mode, tt, cfg.coords, budget, cfg.l2_margin)
             for r, mode, tt, _ in tqdm(plan.items, desc="conversations", disable=not progress)]
    counter = LengthCounter(cfg.tokenizer, budget)
    lengths = counter.lengths(convs)
    keep = [i for i, n in enumerate(lengths) if n <= cfg.max_length]
    dropped = Counter((convs[i].record.level, convs[i].mode, convs[i].turns)
                      for i, n in enumerate(lengths) if n > cfg.max_length)
    out.mkdir(parents=True, exist_ok=True)
    # build_config.yaml marks a finished build: it goes first and comes back last, so a build killed midway
    # (or a rebuild over an old one) leaves a folder that readers refuse instead of half-new targets.
    (out / "build_config.yaml").unlink(missing_ok=True)
    images = _place_images(merged, out, [convs[i].record for i in keep], cfg.workers)
    rows = {s: [] for s in SPLITS}
    for i in keep:
        split = plan.items[i][3]
        rec = convs[i].record
        rows[split].append(_row(convs[i], split, images[merged.image_in_build(rec)], lengths[i]))
    built = {s: Dataset.from_list(rows[s]) for s in SPLITS if rows[s]}
    if not built:
        raise ValueError(f"no conversations were built from {', '.join(str(s.folder) for s in sources)} (see the "
                         f"mix and max_length)")
    template = next(iter(built.values()))
    # an empty split keeps the others' features and one (empty) shard, so load_from_disk opens it
    dd = DatasetDict({s: built.get(s, template.select([])) for s in SPLITS})
    for s in SPLITS:
        if (out / s).exists():
            shutil.rmtree(out / s)
    dd.save_to_disk(str(out), num_shards={s: 1 for s in SPLITS})
    stats = _stats(cfg, merged, plan, [r for s in SPLITS for r in rows[s]], dropped, counter.exact)
    (out / "stats.json").write_text(json.dumps(stats, ensure_ascii=False, indent=1, sort_keys=True) + "\n",
                                    encoding="utf-8")
    (out / "card.md").write_text(render_card(stats), encoding="utf-8")
    write_contents(out, build_contents(merged, SplitRule.of(cfg), cfg.workers))
    (out / "build_config.yaml").write_text(to_yaml(cfg), encoding="utf-8")
    return stats


def _percentiles(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    v = sorted(values)
    q = statistics.quantiles(v, n=100, method="inclusive") if len(v) > 1 else [v[0]] * 99
    return {"min": v[0], "p50": q[49], "p90": q[89], "p99": q[98], "max": v[-1], "mean": round(sum(v) / len(v), 1)}


def _stats(cfg: BuildConfig, merged: Merged, plan: Plan, rows: list[dict], dropped: Counter, exact: bool) -> dict:
    by = {key: dict(sorted(Counter(r[key] for r in rows).items())) for key in
          ("split", "level", "mode", "turns", "subject", "stage")}
    # Question type and label are properties of answer groups: count them over the groups in the rows.
    group_types, group_labels = Counter(), Counter()
    record_index = {(lvl, rec.record_id): rec for lvl, recs in merged.records.items() for rec in recs}
    loaded = [ld for levels in merged.loaded for ld in levels.values()]
    for r in rows:
        for g in record_index[(r["level"], r["record_id"])].groups:
            group_types[g.question_type] += 1
            group_labels[g.label] += 1
    return {
        "total": len(rows),
        "by": by,
        "pages_by_split": {s: len({r["page_id"] for r in rows if r["split"] == s}) for s in SPLITS},
        "groups_by_question_type": dict(sorted(group_types.items())),
        "groups_by_label": dict(sorted(group_labels.items())),
        "tokens": {"exact": exact, "all": _percentiles([r["num_tokens"] for r in rows]),
                   **{lvl: _percentiles([r["num_tokens"] for r in rows if r["level"] == lvl]) for lvl in LEVELS}},
        "dropped_over_max_length": {f"{k[0]}/{k[1]}/t{k[2]}": n for k, n in sorted(dropped.items())},
        "shortfall": {f"{k[0]}/{k[1]}/{k[2]}/t{k[3]}": n for k, n in sorted(plan.shortfall.items())},
        "skipped_records": [str(p) for ld in loaded for p in ld.skipped],
        "reader_warnings": [str(p) for ld in loaded for p in ld.warnings],
        "unknown_values": _unknown_values(merged),
        "sources": [{"folder": str(s.folder), "weight": s.weight, "tag": s.tag,
                     "records": sum(merged.source_of.get((lvl, r.record_id), 0) == k
                                    for lvl, recs in merged.records.items() for r in recs)}
                    for k, s in enumerate(merged.sources)] if len(merged.sources) > 1 else None,
        "replaced_pages": merged.replaced,
        # conversations whose target is [] (a record with no answer marks: a page nobody wrote on, by its
        # annotation), counted by level: such a record teaches "nothing to grade here"
        "empty_targets": dict(sorted(Counter(r["level"] for r in rows
                                             if not record_index[(r["level"], r["record_id"])].groups).items())),
        "config": {"target_count": cfg.target_count, "coords": cfg.coords, "seed": cfg.seed,
                   "min_pixels": cfg.vision.min_pixels, "max_pixels": cfg.vision.max_pixels,
                   "max_length": cfg.max_length, "tokenizer": cfg.tokenizer},
    }


def _unknown_values(merged: Merged) -> dict[str, dict[str, int]]:
    """The reader's counts of unknown values per level, summed over the folders."""
    counts: dict[str, Counter] = {}
    for levels in merged.loaded:
        for lvl, ld in levels.items():
            if ld.unknown_values:
                counts.setdefault(lvl, Counter()).update(ld.unknown_values)
    return {lvl: dict(c) for lvl, c in counts.items()}


def _table(title: str, counts: dict) -> str:
    lines = [f"### {title}", "", "| value | count |", "|---|---:|"]
    lines += [f"| {markdown_text(k)} | {v} |" for k, v in counts.items()]
    return "\n".join(lines) + "\n"


def render_card(stats: dict) -> str:
    c = stats["config"]
    parts = [
        "# SFT conversations (gbtrain)", "",
        f"{stats['total']} conversations; coords `{c['coords']}`, pixels {c['min_pixels']}-{c['max_pixels']}, "
        f"max_length {c['max_length']}, seed {c['seed']}. Pages per split: {stats['pages_by_split']}.", "",
    ]
    for key in ("split", "level", "mode", "turns", "subject", "stage"):
        parts.append(_table(f"By {key}", stats["by"][key]))
    parts.append(_table("Answer groups by question type", stats["groups_by_question_type"]))
    parts.append(_table("Answer groups by label", stats["groups_by_label"]))
    if stats.get("empty_targets"):
        parts += [f"Conversations whose target is empty (records with no answer marks): {stats['empty_targets']}.",
                  ""]
    if stats.get("sources"):
        parts += ["### Folders (oldest first)", "", "| folder | tag | weight | records |", "|---|---|---:|---:|"]
        parts += [f"| {markdown_text(src['folder'])} | {markdown_text(src['tag'] or '')} | {src['weight']:g} | "
                  f"{src['records']} |"
                  for src in stats["sources"]]
        parts.append("")
    if stats.get("replaced_pages"):
        parts += [f"### Pages taken from a newer folder ({len(stats['replaced_pages'])})", "",
                  "| page | left out of | taken from |", "|---|---|---|"]
        parts += [f"| {markdown_text(p['page'])} | {markdown_text(p['folder'])} | {markdown_text(p['by'])} |"
                  for p in stats["replaced_pages"]]
        parts.append("")
    tok = stats["tokens"]
    kind = "exact (tokenizer " + str(c["tokenizer"]) + ")" if tok["exact"] else "ESTIMATED (no tokenizer given)"
    parts += [f"### Token lengths, {kind}", "", "| level | min | p50 | p90 | p99 | max | mean |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for lvl in ("all", *LEVELS):
        p = tok.get(lvl) or {}
        if p:
            parts.append(f"| {lvl} | " + " | ".join(f"{p[k]:g}" for k in ("min", "p50", "p90", "p99", "max", "mean"))
                         + " |")
    parts.append("")
    parts.append(_table(f"Dropped for length > {c['max_length']} tokens (level/mode/turns)",
                        stats["dropped_over_max_length"] or {"none": 0}))
    parts.append(_table("Shortfall against the configured mix (too few records)", stats["shortfall"] or {"none": 0}))
    for level, counts in stats["unknown_values"].items():
        parts.append(_table(f"{level}: values outside the format, taken as shown (lenient mode)", counts))
    if stats["skipped_records"]:
        parts.append("### Skipped records (lenient mode)\n\n"
                     + "\n".join(f"- {markdown_text(s)}" for s in stats["skipped_records"]))
    return "\n".join(parts) + "\n"


def load_sft_dataset(out: str | Path, decode_images: bool = True):
    """Open a built dataset for training, wherever the folder now lies: the rows name their images relative to it
    (a moved or copied build keeps working), so each path becomes that file under `out` (checked to exist), and
    (decode_images) the `images` column becomes an Image feature, decoded lazily to PIL on access."""
    from datasets import DatasetDict, Features, Image, List, load_from_disk

    out = Path(out).resolve()
    finished_build(out)
    dd = load_from_disk(str(out))
    # Both steps stay in memory (rows are text and image paths): written to disk, datasets would put cache files
    # into the build folder, an input that a reader must leave as it is (read-only, shared by ranks and runs).
    dd = DatasetDict({name: _with_image_files(split, name, out) for name, split in dd.items()})
    if decode_images:
        dd = DatasetDict({name: split.cast(Features({**split.features, "images": List(Image())}), keep_in_memory=True)
                          for name, split in dd.items()})
    return dd


def _with_image_files(split, name: str, out: Path):
    """`split` with each image path joined to `out` (an absolute one, of a build made before paths were relative,
    stays as it is); a path outside OUT/images (`../private/secret.jpg`) or a missing file is an error here rather
    than in the middle of training or an export."""
    paths = [[str(out / p) for p in row] for row in split["images"]]
    def lexical(path) -> Path:  # `..` taken out without following links: a build's images may be links
        return Path(os.path.normpath(Path(path).absolute()))

    def a_builds_image(path: Path) -> bool:
        """Under OUT/images, or (a row written as an absolute path: an older build, or a subset of one) under the
        images folder of a build (beside its build_config.yaml)."""
        if path.is_relative_to(inside):
            return True
        return any(a.name == IMAGES_DIR and (a.parent / "build_config.yaml").is_file() for a in path.parents)

    inside = lexical(out / IMAGES_DIR)
    outside = next((p for row in paths for p in row if not a_builds_image(lexical(p))), None)
    if outside is not None:  # a row edited to name any file (../private/secret.jpg) would be trained on or exported
        raise ValueError(f"{out}: a {name} row names the image {brief(outside, 120)}, which is not under {IMAGES_DIR}/ "
                         f"of a build: rows name only a build's own images; build it again with "
                         f"data_builders/build_sft.py")
    missing = sorted({p for row in paths for p in row if not Path(p).is_file()})
    if missing:
        raise FileNotFoundError(f"{out}: {len(missing)} image(s) that its {name} rows name are missing "
                                f"(first: {missing[0]}): move or copy the build folder whole, {IMAGES_DIR}/ "
                                f"included, or build it again with data_builders/build_sft.py")
    columns = split.column_names  # the build's order, which an export keeps
    return split.remove_columns("images").add_column("images", paths, feature=split.features["images"]).select_columns(
        columns)


def finished_build(out: str | Path):
    """OUT/build_config.yaml of a finished build; a missing folder or an unfinished build is an error."""
    if not Path(out).is_dir():
        raise FileNotFoundError(f"dataset folder not found: {out} (data_builders/build_sft.py writes one)")
    built = _build_config(out)
    if built is None:
        raise ValueError(f"{out} is not a finished build: it has no build_config.yaml, which the builder writes "
                         f"last; build it again with data_builders/build_sft.py")
    return built


def _build_config(out: str | Path):
    """OUT/build_config.yaml as written by build_sft_dataset (None when the folder has none)."""
    path = Path(out) / "build_config.yaml"
    if not path.exists():
        return None
    try:
        return load_yaml(path)
    except (OSError, ValueError) as e:  # a damaged record: the build cannot be trusted
        raise ValueError(f"{path} is damaged ({e}): build the dataset again with data_builders/build_sft.py") from None


def dataset_pixel_budget(out: str | Path) -> PixelBudget | None:
    """The pixel budget a built dataset's boxes were computed with (None for a folder without a build config)."""
    built = _build_config(out)
    vision = built.get("vision") if built is not None else None
    if not vision:
        return None
    return PixelBudget(int(vision.min_pixels), int(vision.max_pixels),
                       int(vision.get("factor", DEFAULT_FAMILY.patch_factor)))  # builds before factors were recorded


def dataset_l2_margin(out: str | Path) -> float:
    """The margin a built dataset's derived L2 regions were drawn with (the builder's default when unrecorded)."""
    built = _build_config(out)
    return float(built.l2_margin) if built is not None and built.get("l2_margin") is not None else DEFAULT_L2_MARGIN


def dataset_coords(out: str | Path) -> str | None:
    """The box convention a built dataset's targets use (None for a folder without a build config)."""
    built = _build_config(out)
    return str(built.coords) if built is not None and built.get("coords") else None

"""Look at a GradingBench-layout folder before spending GPU hours on it: what the reader accepts (counts by level,
label, subject, stage and question type), what it rejects (lenient mode: every problem, naming file and record),
and the ground truth drawn on a few pages (boxes with ids, verdicts and transcriptions).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from gbtrain.config import option
from gbtrain.data.annotations import LoadedLevel, image_path, load_dataset
from gbtrain.data.drawing import Shape, cut, draw_shapes, verdict_color
from gbtrain.files import read_json
from gbtrain.outputs import CONVERT_REPORT, overlapping, require_out
from gbtrain.schema import Record
from gbtrain.text import safe_name
from gbtrain.vocabulary import L3, LEVELS


@dataclass
class PreviewRun:
    """Everything one `data_builders/preview.py` call needs; each field is one of its flags (gbtrain.cli)."""

    data: str = option(help="GradingBench-layout folder")
    out: str = option(help="folder for the drawn pages and summary.json")
    pages: int = option(8, "records to draw (spread over the level)", bounds=(0, 10_000))
    level: str | None = option(None, "level to draw (default: L3, else the first present)", choices=LEVELS)


def summarize(loaded: dict[str, LoadedLevel], data_dir: str | Path) -> dict:
    """Counts per level as the lenient reader saw the folder, with every problem it found (and, for a converted
    folder, what the converter left out)."""
    summary: dict = {"levels": {}}
    for level, lv in loaded.items():
        groups = [g for r in lv.records for g in r.groups]
        summary["levels"][level] = {
            "records": len(lv.records), "groups": len(groups),
            "question_regions": sum(len(r.context_regions) for r in lv.records),
            "labels": dict(Counter(g.label for g in groups).most_common()),
            "subjects": dict(Counter(r.subject for r in lv.records).most_common()),
            "stages": dict(Counter(r.stage or "none" for r in lv.records).most_common()),
            "question_types": dict(Counter(g.question_type for g in groups).most_common()),
            "problems": [str(p) for p in lv.skipped], "warnings": [str(p) for p in lv.warnings],
        }
    report = Path(data_dir) / CONVERT_REPORT
    if report.is_file():
        summary["conversion"] = conversion_status(report)
    return summary


def conversion_status(path: Path) -> dict:
    """What the converter's report beside the data says: its status and how many items it left out. A report that
    cannot be read (damaged, or not the converter's) is said so, and the folder is checked like any other."""
    try:
        report = read_json(path)
        if not isinstance(report, dict) or not isinstance(report.get("unmapped", []), list):
            raise ValueError("not a report of data_builders/convert.py")
    except (OSError, ValueError) as e:
        return {"status": "unreadable", "unmapped": None, "problem": f"{path} cannot be read ({str(e)[:200]})"}
    return {"status": report.get("status"), "unmapped": len(report.get("unmapped", []))}


def summary_lines(summary: dict, shown: int = 20) -> list[str]:
    """The summary as the command prints it: one block per level, then the problems (the first `shown`)."""
    lines = []
    for level, s in summary["levels"].items():
        lines += [f"{level}: {s['records']} records, {s['groups']} answer groups, {s['question_regions']} question "
                  f"regions, {len(s['problems'])} records rejected",
                  f"  labels {s['labels']}", f"  subjects {s['subjects']}", f"  stages {s['stages']}",
                  f"  question types {s['question_types']}"]
    problems = [p for s in summary["levels"].values() for p in s["problems"] + s["warnings"]]
    lines.append(f"problems found by the reader: {len(problems)}" + (":" if problems else ""))
    lines += [f"  {p}" for p in problems[:shown]]
    if len(problems) > shown:
        lines.append(f"  ... and {len(problems) - shown} more")
    conversion = summary.get("conversion")
    if conversion and conversion["status"] == "unreadable":
        lines.append(f"{conversion['problem']}: if data_builders/convert.py wrote this folder, rerun it")
    elif conversion and conversion["status"] != "complete":
        lines.append("the conversion that wrote this folder did not finish: rerun data_builders/convert.py")
    elif conversion:
        lines.append(f"left out by the conversion: {conversion['unmapped']} items (see {CONVERT_REPORT})")
    return lines


def draw_ground_truth(image: Image.Image, record: Record) -> Image.Image:
    """The record's marks on its image: answer boxes coloured by verdict (green right, red wrong, orange other),
    labelled `id verdict` above and `"transcription" | reference` below; question regions in blue."""
    shapes = []
    for m in record.marks:
        outline = m.points if len(m.points) > 2 else m.box.as_list()
        if m.is_context:
            shapes.append(Shape(outline, verdict_color(m.label), 2, inside=f"Q{m.question_id or m.mark_id}"))
        else:
            shapes.append(Shape(outline, verdict_color(m.label), above=f"{m.mark_id} {m.label}",
                                below=f'"{cut(m.hand)}"' + (f" | {m.std}" if m.reference else "")))
    return draw_shapes(image, shapes)


def pick(records: list[Record], n: int) -> list[Record]:
    """n records spread evenly over the file (first, ..., last), so that a preview is not only its first pages."""
    if n >= len(records):
        return list(records)
    return [records[round(i * (len(records) - 1) / max(1, n - 1))] for i in range(n)]


def _earlier_summary(out: Path) -> dict | None:
    """OUT/summary.json when this command wrote it (its levels and the records it drew), else None."""
    try:
        summary = read_json(out / "summary.json")
    except (OSError, ValueError):
        return None
    if isinstance(summary, dict) and isinstance(summary.get("levels"), dict) and isinstance(summary.get("drawn"), dict):
        return summary
    return None


def _drawn_by(summary: dict, out: Path) -> list[Path]:
    """The pages an earlier preview into `out` drew, as its summary lists them (only PNGs directly in `out`:
    nothing else is this command's to delete)."""
    files = summary["drawn"].get("files")
    paths = [Path(f) for f in files if isinstance(f, str)] if isinstance(files, list) else []
    return [p for p in paths if p.suffix == ".png" and p.parent.resolve() == out.resolve() and p.is_file()
            and not p.is_symlink()]


def preview(data_dir: str | Path, out: str | Path, pages: int = 8, level: str | None = None) -> dict:
    """Summarize DATA, draw `pages` records of LEVEL (default L3, else the first level present) into OUT as PNGs,
    and write OUT/summary.json; returns the summary with the drawn files."""
    require_out(out)
    data_dir, out = Path(data_dir), Path(out)
    if pages < 0:
        raise ValueError(f"--pages {pages}: must be at least 0")
    overlap = overlapping("--out", out, {"--data": data_dir})
    if overlap:
        raise ValueError(f"{overlap[0]}: choose another --out")
    earlier = _earlier_summary(out) if out.is_dir() else None
    if out.is_dir() and any(out.iterdir()) and earlier is None:
        # its pages are written over by record id: the user's own files of those names would be lost
        raise ValueError(f"--out {out} holds files that are not a preview (no readable summary.json): choose another "
                         f"--out (or an empty one)")
    loaded = load_dataset(data_dir, lenient=True)
    summary = summarize(loaded, data_dir)
    level = level or (L3 if L3 in loaded else next(iter(loaded)))
    if level not in loaded:
        raise ValueError(f"--level {level}: {data_dir} has no {level} annotations (it has {', '.join(loaded)})")
    records = loaded[level].records
    out.mkdir(parents=True, exist_ok=True)
    for page in _drawn_by(earlier, out) if earlier else []:  # a rerun's pages must not sit beside another preview's
        page.unlink()
    drawn = []
    for record in pick(records, pages):
        with Image.open(image_path(data_dir, record)) as im:
            path = out / f"{safe_name(record.record_id)}.png"
            draw_ground_truth(im, record).save(path)
        drawn.append(str(path))
    summary["drawn"] = {"level": level, "files": drawn}
    (out / "summary.json").write_text(json.dumps(summary, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return summary

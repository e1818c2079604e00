"""Convert annotation-tool exports (Label Studio JSON, CVAT for images 1.1 XML, labelme JSON, COCO JSON) into the
GradingBench layout, so that practitioners can annotate their own exams with the tool they know.

    convert(export, load_mapping("configs/convert/example.yaml"), out, images=..., lenient=False)

Everything is read and checked before anything is written: in strict mode (the default) the first unmappable item
stops the conversion with one line naming the export file and the item; in lenient mode those items are left out
and listed in OUT/convert_report.json, and a page that lost an answer region is left out of L3 (its questions
touched by the loss out of L2/L1), listed too, unless keep_partial_pages. The written folder is read back with the
strict reader before the report says it is complete.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from gbtrain.config import option
from gbtrain.data.annotations import BOX_TOLERANCE_FRACTION, load_dataset, write_level, write_manifest
from gbtrain.data.converters import coco, cvat, labelme, labelstudio
from gbtrain.data.converters.build import ImageFinder, PagePlanner, PartialPage, Plan
from gbtrain.data.converters.mapping import FORMATS, ConvertMapping, load_mapping
from gbtrain.data.converters.sources import SourcePage
from gbtrain.data.pages import PageOutput, crop_jpeg, write_page
from gbtrain.files import read_json
from gbtrain.outputs import CONVERT_REPORT, claim_rebuilt_folder, overlapping, require_out
from gbtrain.vocabulary import L1, L2, L3

__all__ = [
    "CONVERT_REPORT",
    "FORMATS",
    "ConvertMapping",
    "ConvertRun",
    "convert",
    "load_mapping",
    "read_export",
    "summary_lines",
]

_OUTPUTS = ("images", "annotations", "manifest")  # what a rerun replaces in OUT


@dataclass
class ConvertRun:
    """Everything one `data_builders/convert.py` call needs; each field is one of its flags (gbtrain.cli), and
    `overrides` are its key=value arguments: they change the mapping, not these options."""

    mapping: str = option(help="YAML mapping (configs/convert/example.yaml)")
    export: str = option(help="the export file (labelme: a folder of JSON files, or one)")
    out: str = option(help="output folder (GradingBench layout)")
    images: str | None = option(None, "folder holding the page images (default: the export's folder)")
    format: str | None = option(None, "the export's tool (default: the mapping's format)", choices=FORMATS)
    lenient: bool = option(False, "leave unmappable items out, listed in the report")
    keep_partial_pages: bool = option(False, "with --lenient: keep a page that lost answer regions (not every one) in "
                                             "L3 (and all its questions in L2/L1), although its records then teach "
                                             "those regions as blank")
    overrides: list[str] = option([], "key=value mapping overrides (e.g. subject=Mathematics)",
                                  positional=True)  # (option copies a list default for each instance)

    def mapping_overrides(self) -> list[str]:
        """The mapping's key=value overrides, --format last (it wins over a format=... given too)."""
        return [*self.overrides, *([f"format={self.format}"] if self.format else [])]


def read_export(export: Path, mapping: ConvertMapping) -> list[SourcePage]:
    """The export's pages as the tool wrote them (no mapping applied yet)."""
    if export.suffix.lower() == ".zip":
        raise ValueError(f"--export {export} is a zip archive: unzip it and pass the annotation file (CVAT: "
                         f"annotations.xml; its images/ folder as --images)")
    if export.is_dir() and mapping.format != "labelme":
        raise ValueError(f"--export {export} is a folder: a {mapping.format} export is one file")
    if mapping.format == "labelstudio":
        return labelstudio.read(export, mapping.image_key)
    return {"cvat": cvat.read, "labelme": labelme.read, "coco": coco.read}[mapping.format](export)


def check_out(out: Path, export: Path, images: Path) -> None:
    """OUT must share no tree with the inputs (a rerun replaces OUT's images) and hold nothing but an earlier
    conversion: one whose report this converter wrote (a file of that name that it cannot read, or that another
    tool wrote, vouches for nothing, and a rerun would delete the images beside it)."""
    inputs = {"--images": images, **({"--export": export} if export.is_dir() else {})}
    overlap = overlapping("--out", out, inputs)
    if overlap:
        raise ValueError(f"{overlap[0]}: choose another --out")
    claim_rebuilt_folder(out, "--out", "convert", _is_report(out / CONVERT_REPORT))


def _is_report(path: Path) -> bool:
    """Whether `path` is a report this converter wrote (complete, or marked unfinished while it wrote)."""
    try:
        report = read_json(path)
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and report.get("status") in ("complete", "unfinished")


def convert(export: str | Path, mapping: ConvertMapping, out: str | Path, images: str | Path | None = None,
            lenient: bool = False, progress: bool = True, keep_partial_pages: bool = False) -> dict:
    """Convert an export into OUT (GradingBench layout) and return the report (also OUT/convert_report.json).
    IMAGES defaults to the export's folder. `keep_partial_pages`: see ConvertRun."""
    require_out(out)
    export, out = Path(export), Path(out)
    if not export.exists():
        raise FileNotFoundError(f"export not found: {export}")
    images = Path(images) if images is not None else (export if export.is_dir() else export.parent)
    if not images.is_dir():
        raise FileNotFoundError(f"images folder not found: {images}")
    check_out(out, export, images)
    plan = Plan()
    planner = PagePlanner(mapping, ImageFinder(images), plan, keep_partial=keep_partial_pages)
    for page in read_export(export, mapping):
        planner.add(page)
    if plan.unmapped and not lenient:
        more = f" (and {len(plan.unmapped) - 1} more)" if len(plan.unmapped) > 1 else ""
        raise ValueError(f"{plan.unmapped[0]}{more}: fix the export or the mapping, or rerun with --lenient to leave "
                         f"such items out (listed in {CONVERT_REPORT})")
    if not plan.pages:
        every = sum(p.every for p in plan.partial)
        partial = (f"; {len(plan.partial)} left out as they lost answer regions" + (
            f", {every} of them every one (each named in the list above: the mapping's fields, a question id "
            f"among them, may not be the export's)" if every else "") + (
            " (--keep-partial-pages keeps the others)" if every < len(plan.partial) else "")) if plan.partial else ""
        raise ValueError(f"{export}: no page could be converted ({plan.pages_in} in the export{partial})")
    counts = _write(plan, out, progress)
    report = _report(plan, export, images, mapping, lenient, counts)
    (out / CONVERT_REPORT).write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return report


def _write(plan: Plan, out: Path, progress: bool) -> dict[str, int]:
    """Replace OUT's images, annotations and manifest (the report is marked unfinished until the end); return the
    records per level as the strict reader reads them back. A page left out of L3 keeps its file only as the L2
    image its records name."""
    out.mkdir(parents=True, exist_ok=True)
    (out / CONVERT_REPORT).write_text(json.dumps({"status": "unfinished"}) + "\n", encoding="utf-8")
    for name in _OUTPUTS:
        if (out / name).exists():
            shutil.rmtree(out / name)
    for page in tqdm(plan.pages, desc="pages", disable=not progress):
        image = page.image.load()
        crops = [(record, crop_jpeg(image, crop)) for record, crop in page.l1]
        write_page(out, PageOutput(page.page_id, page.l3.subject, page.image.page_bytes(image), page.l3, page.l2,
                                    crops))
        if not page.in_l3:  # the L2 file is a link to (or a copy of) it, and stays
            (out / "images" / L3 / page.l3.image).unlink()
    levels = {L1: [r for p in plan.pages for r, _ in p.l1], L2: [r for p in plan.pages for r in p.l2],
              L3: [p.l3 for p in plan.l3_pages]}
    levels = {level: records for level, records in levels.items() if records}
    for level, records in levels.items():
        write_level(out, level, records)
    write_manifest(out, levels)
    return {level: len(loaded.records) for level, loaded in load_dataset(out).items()}


def _report(plan: Plan, export: Path, images: Path, mapping: ConvertMapping, lenient: bool,
            counts: dict[str, int]) -> dict:
    unknown = [f"{key} {value!r} on {n} region(s): not a known value, written as "
               f"{'None' if key == 'stage' else 'Other'}" for (key, value), n in sorted(plan.unknown_values.items())]
    cut = [f"{plan.cut_at_edge} region(s) past the image's edge by at most {BOX_TOLERANCE_FRACTION:.0%} of its size: "
           f"cut at the edge"] if plan.cut_at_edge else []
    return {
        "status": "complete", "export": str(export), "format": mapping.format, "images": str(images),
        "lenient": lenient, "pages": {"in_export": plan.pages_in, "written": len(plan.l3_pages),
                                      "partial": len(plan.partial)},
        "records": counts, "groups": sum(len(p.l3.groups) for p in plan.l3_pages),
        "ignored_labels": dict(plan.ignored), "unmapped": [vars(u) for u in plan.unmapped],
        "partial_pages": [vars(p) for p in plan.partial], "notes": plan.notes + unknown + cut,
    }


def summary_lines(report: dict, out: str | Path, shown: int = 20) -> list[str]:
    """What the command prints: counts, what was ignored, and the unmapped items (the first `shown`)."""
    records = ", ".join(f"{level} {n}" for level, n in sorted(report["records"].items()))
    lines = [f"converted {report['pages']['written']} of {report['pages']['in_export']} pages ({report['format']}) "
             f"to {out}: records {records}; {report['groups']} answer groups"]
    if report["ignored_labels"]:
        lines.append(f"ignored by the mapping: {report['ignored_labels']}")
    unmapped = report["unmapped"]
    lines.append(f"unmappable items left out: {len(unmapped)}" + (":" if unmapped else ""))
    lines += [f"  {u['file']} [{u['item']}]: {u['message']}" for u in unmapped[:shown]]
    if len(unmapped) > shown:
        lines.append(f"  ... and {len(unmapped) - shown} more")
    partial = report["partial_pages"]
    if partial:
        every = sum(p.get("every", False) for p in partial)
        lines.append(f"pages that lost answer regions: {len(partial)}" + (
            "" if any(p["kept"] for p in partial) else " (their records would teach those regions as blank; "
                                                      "--keep-partial-pages keeps them)") + (
            f"; {every} lost every one and are never kept" if every else "") + ":")
        lines += [f"  {PartialPage(**p)}" for p in partial[:shown]]
        if len(partial) > shown:
            lines.append(f"  ... and {len(partial) - shown} more")
    lines += [f"note: {n}" for n in report["notes"][:shown]]
    lines.append(f"report: {Path(out) / CONVERT_REPORT}")
    return lines

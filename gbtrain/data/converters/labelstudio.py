"""Label Studio's JSON export (the full "JSON" format, a list of tasks; not JSON-MIN).

Each task names its image in `data` and holds `annotations`, each a list of `result` entries. A region is the
results that share one `id`: its geometry and label (rectanglelabels / polygonlabels, or rectangle / polygon with
a labels result) and its per-region controls (TextArea -> `text`, Choices -> `choices`, Number -> `number`),
read as attributes named by the control's `from_name`. Coordinates are percentages (0-100) of
`original_width` / `original_height`; a rectangle's `rotation` turns it clockwise about its top-left corner.
Results without a region (whole-task Choices or TextAreas) and the task's `data` values are page attributes.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from gbtrain.data.converters.sources import (
    Points,
    SourceItem,
    SourcePage,
    finite_points,
    read_json,
    rotated_rectangle,
    scalar_attributes,
    text,
)

_GEOMETRY = ("rectanglelabels", "polygonlabels", "rectangle", "polygon")
_CONTROLS = {"textarea": "text", "choices": "choices", "number": "number"}
_UNSUPPORTED = ("ellipselabels", "ellipse", "keypointlabels", "keypoint", "brushlabels", "brush")


_CSV_COLUMNS = ("annotation_id", "annotator", "lead_time")  # in every CSV / TSV export's header (label-studio-sdk
# converter/exports/csv2.py: the keys "always presented")


def read(path: Path, image_key: str) -> list[SourcePage]:
    return [read_task(path, task, i, image_key) for i, task in enumerate(read_tasks(path))]


def read_tasks(path: Path) -> list[dict]:
    """The tasks of a Label Studio JSON export, for the converter and the review import alike: a CSV or JSON-MIN
    export (which keep no region's own values) is refused, naming the format to export instead."""
    try:
        doc = read_json(path)
    except ValueError:
        if _is_csv(path):
            raise ValueError(f"{path}: Label Studio CSV exports are not supported: export JSON (Label Studio's "
                             f"\"JSON\" format; JSON-MIN, like CSV, keeps no region's own values)") from None
        raise
    tasks = [doc] if isinstance(doc, dict) and "data" in doc else doc
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise ValueError(f"{path}: not a Label Studio JSON export (a list of tasks with 'data' and 'annotations')")
    if tasks and not any("annotations" in t for t in tasks):
        raise ValueError(f"{path}: no task has 'annotations': export with Label Studio's \"JSON\" format (not "
                         f"JSON-MIN or CSV)")
    for i, task in enumerate(tasks):  # read as none, a teacher's work would be counted unreviewed without a word
        found = task.get("annotations")
        if found is not None and (not isinstance(found, list) or not all(isinstance(a, dict) for a in found)):
            raise ValueError(f"{path} task {str(task.get('id', f'#{i}'))[:40]}: 'annotations' is "
                             f"{json.dumps(found, default=str)[:60]}, not a list of annotations: export the project "
                             f"again with Label Studio's \"JSON\" format")
    return tasks


def _is_csv(path: Path) -> bool:
    """A Label Studio CSV or TSV export: by its name, or by the columns of its header line."""
    if path.suffix.lower() in (".csv", ".tsv"):
        return True
    with open(path, "rb") as f:
        header = f.readline(65536).decode("utf-8", "replace")
    return all(column in header for column in _CSV_COLUMNS)


def submitted(task: dict) -> list[dict]:
    """A task's annotations that were submitted: not drafts (which the export leaves out), predictions or cancelled
    ("skipped") ones."""
    return [a for a in task.get("annotations") or [] if not a.get("was_cancelled")]  # read_tasks checked them


TEACHER_RULES = ("ground-truth", "first", "last", "agreement")  # whose annotation of a task counts (counted_annotation)


def _submit_order(annotation: dict) -> tuple:
    """When an annotation was submitted: its creation time, then its id (Label Studio numbers them as they come),
    whatever order the export lists them in."""
    ident = annotation.get("id")
    return str(annotation.get("created_at") or ""), ident if isinstance(ident, int) else 0, str(ident)


def counted_annotation(task: dict, rule: str = "ground-truth") -> tuple[dict | None, dict | None]:
    """The submitted annotation a task is read from, and the other teacher's (None: one annotation, or none). The
    rule (TEACHER_RULES): ground-truth, the one marked ground truth in Label Studio, else the first submitted; first
    or agreement, the first submitted (agreement then keeps only what both gave alike); last, the last submitted.
    The converter and the review import both read a task here."""
    done = sorted(submitted(task), key=_submit_order)
    if not done:
        return None, None
    marked = [a for a in done if a.get("ground_truth")] if rule == "ground-truth" else []
    counted = marked[0] if marked else done[-1] if rule == "last" else done[0]
    others = [a for a in done if a is not counted]
    return counted, others[0] if others else None


def chosen_annotation(task: dict) -> dict | None:
    """The submitted annotation a task is read from by default (counted_annotation's ground-truth rule)."""
    return counted_annotation(task)[0]


def teacher_of(annotation: dict) -> str:
    """Who submitted an annotation, as the export names them: completed_by's email, else its user id."""
    who = annotation.get("completed_by")
    if isinstance(who, dict):
        who = who.get("email") or who.get("id")
    return f"user {who}" if isinstance(who, int) else str(who or "unknown")


def read_task(path: Path, task: dict, index: int, image_key: str, annotation: dict | None = None) -> SourcePage:
    """One task of an export (`index`: its place, named when it has no id) as a page of regions: those of
    `annotation`, by default chosen_annotation's."""
    where = f"task {task.get('id', f'#{index}')}"
    data = task.get("data") if isinstance(task.get("data"), dict) else {}
    image_ref = text(data.get(image_key)) or text(task.get("file_upload")) or ""
    page = SourcePage(str(path), where, image_ref, None, attributes=scalar_attributes(data, {image_key}))
    if not image_ref:
        page.problems.append(f"no image: the task data has no {image_key!r} (set image_key in the mapping)")
    done = submitted(task)
    if not done:
        page.problems.append("no submitted annotation (only drafts, predictions or cancelled ones)")
        return page
    chosen = annotation or chosen_annotation(task)
    if len(done) > 1 and annotation is None:
        page.notes.append(f"{where}: {len(done)} annotations, used annotation {chosen.get('id')} (the ground "
                          f"truth one, else the first submitted)")
    regions: dict[str, list[dict]] = {}
    for i, result in enumerate(chosen.get("result") or []):
        if isinstance(result, dict):
            regions.setdefault(str(result.get("id") or f"#{i}"), []).append(result)
    for rid, results in regions.items():
        _region(page, f"{where}, region {rid!r}", results, rid)
    return page


def _controls(results: list[dict]) -> dict[str, str]:
    """Per-region control values by control name: several TextArea lines joined by newlines, choices by commas."""
    out = {}
    for r in results:
        key = _CONTROLS.get(r.get("type"))
        value = (r.get("value") or {}).get(key) if key else None
        if value is not None:
            values = value if isinstance(value, list) else [value]
            out[str(r.get("from_name"))] = ("\n" if key == "text" else ",").join(str(v) for v in values)
    return out


def _region(page: SourcePage, where: str, results: list[dict], rid: str) -> None:
    shapes = [r for r in results if r.get("type") in _GEOMETRY]
    geometry = shapes[0] if shapes else None
    attributes = _controls(results)
    controls = Counter(str(r.get("from_name")) for r in results if r.get("type") in _CONTROLS)
    if len(shapes) > 1 or any(n > 1 for n in controls.values()):
        # results of one region share its id; two shapes (or two values of one control) under one id are two
        # regions that an edit or a merge of exports gave the same id: neither can be told from the other
        page.items.append(SourceItem(where, _label(results), None, attributes,
                                     f"{len(shapes)} shapes or repeated controls share this region id: give each "
                                     f"region its own id", rid))
        return
    if geometry is None:
        unsupported = next((r["type"] for r in results if r.get("type") in _UNSUPPORTED), None)
        if unsupported is None:  # a whole-task control: a page attribute
            page.attributes.update(attributes)
            return
        page.items.append(SourceItem(where, _label(results), None, attributes,
                                     f"shape {unsupported!r} cannot be a box: draw a rectangle or polygon", rid))
        return
    size = (geometry.get("original_width"), geometry.get("original_height"))
    if not all(isinstance(v, int | float) and v > 0 for v in size):
        page.items.append(SourceItem(where, _label(results), None, attributes,
                                     "no original_width / original_height to place the region in pixels", rid))
        return
    page.size = page.size or (int(size[0]), int(size[1]))
    points = _points(geometry.get("value") or {}, float(size[0]), float(size[1]))
    problem = None if points else f"unreadable {geometry.get('type')} coordinates"
    page.items.append(SourceItem(where, _label(results), points, attributes, problem, rid))


def _label(results: list[dict]) -> str:
    """The region's label; several are joined with '+' (no mapping names such a label: it is listed)."""
    for r in results:
        kind = str(r.get("type"))
        labels = (r.get("value") or {}).get(kind) if kind.endswith("labels") else None
        if labels:
            return "+".join(str(x) for x in labels)
    return ""


def _points(value: dict, width: float, height: float) -> Points | None:
    if "points" in value:
        pts = finite_points(value["points"])
        return [(x * width / 100, y * height / 100) for x, y in pts] if pts and len(pts) >= 3 else None
    box = finite_points([(value.get("x"), value.get("y")), (value.get("width"), value.get("height"))])
    if box is None:
        return None
    turn = finite_points([(value.get("rotation") or 0, 0)])
    if turn is None:
        return None
    (x, y), (w, h) = box
    return rotated_rectangle(x * width / 100, y * height / 100, w * width / 100, h * height / 100, turn[0][0],
                             about_center=False)

"""A Label Studio JSON export of the pages of a GradingBench folder (e.g. synthetic pages), as an annotator would
export them after labelling those pages with tests/fixtures/convert/labelstudio/label_config.xml plus one more
per-region Choices, `format` (文本 / 图表 / 其他): uploads named `<8 hex>-<name>`, rectangles in percent of the
original size, the question types, stages and formats spelled as the label config offers them (Chinese), subject
and stage as task data. Read by `gbtrain.data.converters` with configs/convert/example.yaml and the override
`fields.content_format=format`, it gives back the folder's records (tests/test_workflow.py checks that)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from gbtrain.data.annotations import load_level
from gbtrain.schema import Mark, Record
from gbtrain.vocabulary import L2, L3

QUESTION_TYPES = {"Fill-in-the-blank": "填空", "Multiple-choice": "选择", "True-False": "判断",
                  "Problem-Solving": "解答", "Other": "其他"}
CONTENT_FORMATS = {"Text-only": "文本", "Chart-based": "图表", "Other": "其他"}
STAGES = {"Elementary": "小学", "Junior_High": "初中", "Senior_High": "高中"}


def _geometry(points: list[tuple[float, float]], width: int, height: int) -> tuple[str, dict]:
    """A box as a rectangle, anything else as a polygon; both in percent of the image size."""
    xs, ys = sorted({x for x, _ in points}), sorted({y for _, y in points})
    if len(points) == 4 and len(xs) == 2 and len(ys) == 2:
        return "rectanglelabels", {"x": 100 * xs[0] / width, "y": 100 * ys[0] / height,
                                   "width": 100 * (xs[1] - xs[0]) / width, "height": 100 * (ys[1] - ys[0]) / height,
                                   "rotation": 0}
    return "polygonlabels", {"points": [[100 * x / width, 100 * y / height] for x, y in points]}


def _region(rid: str, label: str, mark: Mark, record: Record, controls: dict[str, tuple[str, str]]) -> list[dict]:
    """The results of one region: its shape and label, then each per-region control (name -> (type, value))."""
    kind, value = _geometry(mark.points, record.width, record.height)
    common = {"id": rid, "to_name": "image", "original_width": record.width, "original_height": record.height,
              "image_rotation": 0, "origin": "manual"}
    results = [{**common, "type": kind, "from_name": "region" if kind == "rectanglelabels" else "region_poly",
                "value": {**value, kind: [label]}}]
    for name, (control, text) in controls.items():
        key = "text" if control == "textarea" else "choices"
        results.append({**common, "type": control, "from_name": name, "value": {**value, key: [text]}})
    return results


def _answer(rid: str, mark: Mark, record: Record) -> list[dict]:
    controls = {"qid": ("textarea", mark.mark_id)}
    if mark.hand:  # Label Studio writes no result for an empty TextArea
        controls["hand"] = ("textarea", mark.hand)
    if mark.std is not None:
        controls["std"] = ("textarea", mark.std)
    controls |= {"verdict": ("choices", mark.label), "type": ("choices", QUESTION_TYPES[mark.question_type]),
                 "format": ("choices", CONTENT_FORMATS[mark.content_format])}
    return _region(rid, "answer", mark, record, controls)


def labelstudio_export(data: Path, out: Path, project: int = 7) -> Path:
    """Write OUT (a JSON file) with one task per L3 page of DATA: its answer marks, and the question regions its
    L2 records hold; return OUT."""
    regions: dict[str, dict[tuple, Mark]] = {}  # page -> question regions, each once
    for record in load_level(data, L2).records:
        for mark in record.marks:
            if mark.is_context:
                regions.setdefault(record.page_id, {})[(mark.question_id, tuple(mark.points))] = mark
    tasks = []
    for i, page in enumerate(load_level(data, L3).records):
        (stage,) = {m.stage for m in page.marks}  # the synthetic pages hold one stage each
        results = [r for k, m in enumerate(page.marks) for r in _answer(f"{page.record_id}a{k}", m, page)]
        for k, m in enumerate(regions.get(page.record_id, {}).values()):
            results += _region(f"{page.record_id}q{k}", "question", m, page, {"qid": ("textarea", m.question_id)})
        name = Path(page.image).name
        upload = f"{hashlib.sha1(page.image.encode()).hexdigest()[:8]}-{name}"
        tasks.append({"id": 100 + i, "data": {"image": f"/data/upload/{project}/{upload}", "subject": page.subject,
                                               "stage": STAGES[stage]},
                      "annotations": [{"id": 500 + i, "completed_by": 1, "result": results, "was_cancelled": False,
                                       "ground_truth": False, "lead_time": 60.0}],
                      "predictions": [], "file_upload": upload, "project": project})
    out.write_text(json.dumps(tasks, ensure_ascii=False, indent=1), encoding="utf-8")
    return out

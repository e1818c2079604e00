"""Annotation-tool exports as the tools really write them, each a case the converters once got wrong
(gbtrain.data.converters): a box a little past the image's edge, labelme's embedded image behind a path that is no
image, X-AnyLabeling's four-corner rectangles, a CVAT project's subsets, pages that lost answers in lenient mode,
Label Studio's CSV and COCO exports, COCO masks and non-ASCII file names.

Each test names where the shape it writes is documented, or which tool (and version) writes it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import runpy
import shutil
import sys
from pathlib import Path

import pytest
from PIL import Image

from gbtrain.data.annotations import load_dataset, load_level
from gbtrain.data.converters import coco, convert, load_mapping, summary_lines
from gbtrain.data.converters.build import ImageFinder, PartialPage
from gbtrain.data.converters.sources import image_names
from gbtrain.outputs import CONVERT_REPORT

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "convert"
IMAGES = FIX / "images"
LS_EXPORT, LS_MAPPING = FIX / "labelstudio" / "export.json", ROOT / "configs" / "convert" / "example.yaml"


def _ls_tasks() -> list[dict]:
    return json.loads(LS_EXPORT.read_text(encoding="utf-8"))


def _ls_region(tasks: list[dict], rid: str, **value) -> None:
    """Set `value` keys of every result of Label Studio region `rid`: its shape and its per-region controls, which
    repeat the region's geometry (https://labelstud.io/guide/export#Label-Studio-JSON-format-of-annotated-tasks)."""
    for task in tasks:
        for result in task["annotations"][0]["result"]:
            if result["id"] == rid:
                result["value"].update(value)


def _write(path: Path, doc) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def _levels(out: Path) -> dict[str, set[str]]:
    return {level: {r.record_id for r in loaded.records} for level, loaded in load_dataset(out).items()}


# ------------------------------------------------------------------------------------------ 1. past the edge
def test_a_box_a_little_past_the_image_edge_is_cut_at_it_and_one_farther_out_is_refused(tmp_path):
    """Label Studio keeps a rectangle dragged past the edge as it is, e.g. x + width = 101.6% (value.x / width in
    percent of original_width: https://labelstud.io/tags/rectanglelabels, "Sample Results JSON"). Question 1 of p1
    is moved to the right edge (x 70%, width 30%), answer 1-1 to x 85%, width 16.6%: within the reader's 2%
    tolerance on the page, but not on the narrow L1 crop, which ends at the page's edge: it used to fail the
    read-back after writing. It is cut at the edge now; a box at x + width = 103% is refused before writing."""
    tasks = _ls_tasks()
    _ls_region(tasks, "p1q0", x=70.0, width=30.0)
    _ls_region(tasks, "p1a0", x=85.0, width=16.6)
    _ls_region(tasks, "p1a1", x=72.0, width=10.0)
    report = convert(_write(tmp_path / "export.json", tasks), load_mapping(LS_MAPPING), tmp_path / "out",
                     images=IMAGES, progress=False)
    assert report["status"] == "complete" and report["unmapped"] == []
    assert "1 region(s) past the image's edge by at most 2% of its size: cut at the edge" in report["notes"]
    l3 = {r.record_id: r for r in load_level(tmp_path / "out", "L3").records}
    assert next(m for m in l3["p1"].marks if m.mark_id == "1-1").box.as_list() == [408, 80, 480, 120]
    l1 = {r.record_id: r for r in load_level(tmp_path / "out", "L1").records}
    assert (l1["p1_q1"].width, l1["p1_q1"].height) == (163, 148)  # 336 - 19.2 ... the page's edge
    assert next(m for m in l1["p1_q1"].marks if m.mark_id == "1-1").box.as_list() == [91, 59, 163, 99]

    _ls_region(tasks, "p1a0", width=18.0)  # x + width = 103%: 14.4 px out, the tolerance is 9.6
    export = _write(tmp_path / "far.json", tasks)
    with pytest.raises(ValueError, match=r"far\.json \[task 101, region 'p1a0'\]: box \[408\.0, 80\.0, 494\.4, "
                                         r"120\.0\] lies outside the 480x640 image: fix the export"):
        convert(export, load_mapping(LS_MAPPING), tmp_path / "strict", images=IMAGES, progress=False)
    assert not (tmp_path / "strict").exists()  # refused before anything was written
    report = convert(export, load_mapping(LS_MAPPING), tmp_path / "lenient", images=IMAGES, lenient=True,
                     progress=False)
    assert report["status"] == "complete" and [u["item"] for u in report["unmapped"]] == ["task 101, region 'p1a0'"]


# ------------------------------------------------------------------------------------------ 2. labelme imageData
def test_labelme_embedded_image_is_used_when_image_path_is_no_image(tmp_path):
    """labelme's own tutorial file (wkentaro/labelme, examples/tutorial/apc2016_obj3.json) names itself as
    imagePath ("apc2016_obj3.json") and embeds its JPEG as imageData. The fixture p1.json (labelme 5.5.0's shape)
    is given that imagePath and imageData: the embedded image is read, and the report says so."""
    doc = json.loads((FIX / "labelme" / "p1.json").read_text(encoding="utf-8"))
    doc.update(imagePath="p1.json", imageData=base64.b64encode((IMAGES / "p1.jpg").read_bytes()).decode())
    export = _write(tmp_path / "export" / "p1.json", doc)
    report = convert(export, load_mapping(FIX / "labelme" / "mapping.yaml"), tmp_path / "out", progress=False)
    assert report["unmapped"] == [] and report["records"] == {"L1": 3, "L2": 3, "L3": 1}
    assert any("p1.json [image 'p1.json']: cannot read image" in n and n.endswith("used the embedded imageData")
               for n in report["notes"])
    (page,) = load_level(tmp_path / "out", "L3").records
    assert page.record_id == "p1"
    assert (tmp_path / "out" / "images" / "L3" / page.image).read_bytes() == (IMAGES / "p1.jpg").read_bytes()


# ------------------------------------------------------------------------------------------ 3. X-AnyLabeling
def test_x_anylabeling_four_corner_rectangles_give_the_records_of_every_other_tool(tmp_path):
    """tests/fixtures/convert/xanylabeling: the fixture pages as X-AnyLabeling 4.0.2 saves them
    (CVHub520/X-AnyLabeling, anylabeling/views/labeling/label_file.py LabelFile.save: a rectangle's four corners
    [xmin, ymin], [xmax, ymin], [xmax, ymax], [xmin, ymax]; schema.py create_xlabel_template: version, flags,
    checked, shapes, imagePath, imageData, imageHeight, imageWidth; shape.py Shape.to_dict: label, score, points,
    group_id, description, difficult, shape_type, flags, attributes, kie_linking; as in its example
    examples/classification/shape-level/sources/multi-task/elon-musk-tesla.json). They convert to the labelme
    fixture's records byte for byte; four points that are not an upright box's corners are unreadable."""
    mapping = load_mapping(FIX / "xanylabeling" / "mapping.yaml")
    report = convert(FIX / "xanylabeling", mapping, tmp_path / "x", images=IMAGES, progress=False)
    assert report["unmapped"] == [] and report["records"] == {"L1": 5, "L2": 5, "L3": 2}
    convert(FIX / "labelme", load_mapping(FIX / "labelme" / "mapping.yaml"), tmp_path / "labelme", images=IMAGES,
            progress=False)
    for level in ("L1", "L2", "L3"):
        assert (tmp_path / "x" / "annotations" / f"{level}.json").read_text() == \
            (tmp_path / "labelme" / "annotations" / f"{level}.json").read_text(), level

    doc = json.loads((FIX / "xanylabeling" / "p1.json").read_text(encoding="utf-8"))
    doc["shapes"][3]["points"][2] = [215.0, 125.0]  # answer 1-1: no longer an upright box
    report = convert(_write(tmp_path / "skew" / "p1.json", doc), mapping, tmp_path / "skewed", images=IMAGES,
                     lenient=True, progress=False)
    assert [(u["item"], u["message"]) for u in report["unmapped"]] == [
        ("image 'p1.jpg', shape #3", "unreadable rectangle points")]


# ------------------------------------------------------------------------------------------ 5. CVAT project subsets
def _cvat_project(tmp_path: Path) -> Path:
    """A "CVAT for images 1.1" export of a project with two tasks, subsets Train and Validation, whose pages are
    both named p1.jpg (cvat-ai/cvat, cvat/apps/dataset_manager/formats/cvat.py: dump_as_cvat_annotation writes
    <image id name subset task_id width height> for a ProjectData, _export_project writes each task's images to
    images/<subset>/; bindings.py ProjectData._init_meta: <meta><project> with <tasks> and <subsets>). The
    fixture's p2 becomes the Validation subset's p1.jpg."""
    xml = (FIX / "cvat" / "annotations.xml").read_text(encoding="utf-8")
    head, rest = xml.split("  <meta>\n", 1)
    task_meta, images = rest.split("  </meta>\n", 1)
    task = task_meta.split("    <dumped>")[0].replace("\n    ", "\n      ").replace("    <task>", "      <task>", 1)
    meta = (f"  <meta>\n    <project>\n      <id>3</id>\n      <name>exams</name>\n      <bugtracker></bugtracker>\n"
            f"      <created>2026-11-03 10:00:00.000000+00:00</created>\n"
            f"      <updated>2026-11-03 10:40:02.118000+00:00</updated>\n      <tasks>\n{task}      </tasks>\n"
            f"      <subsets>Train\nValidation</subsets>\n      <owner></owner>\n      <assignee></assignee>\n"
            f"    </project>\n    <dumped>2026-11-03 10:41:00.500000+00:00</dumped>\n  </meta>\n")
    images = images.replace('<image id="0" name="p1.jpg" width=',
                            '<image id="0" name="p1.jpg" subset="Train" task_id="12" width=')
    images = images.replace('<image id="1" name="p2.png" width=',
                            '<image id="1" name="p1.jpg" subset="Validation" task_id="13" width=')
    export = tmp_path / "project"
    (export / "images" / "Train").mkdir(parents=True)
    (export / "images" / "Validation").mkdir()
    shutil.copy(IMAGES / "p1.jpg", export / "images" / "Train" / "p1.jpg")
    Image.open(IMAGES / "p2.png").convert("RGB").save(export / "images" / "Validation" / "p1.jpg", quality=95)
    (export / "annotations.xml").write_text(head + meta + images, encoding="utf-8")
    return export


@pytest.mark.parametrize("images", ["images", "."], ids=["images-folder", "export-folder"])
def test_a_cvat_project_export_tells_pages_of_one_name_apart_by_their_subset(tmp_path, images):
    export = _cvat_project(tmp_path)
    report = convert(export / "annotations.xml", load_mapping(FIX / "cvat" / "mapping.yaml"), tmp_path / "out",
                     images=export / images, progress=False)
    assert report["unmapped"] == [] and report["records"] == {"L1": 5, "L2": 5, "L3": 2}
    pages = {r.record_id: r for r in load_level(tmp_path / "out", "L3").records}
    assert {p: r.subject for p, r in pages.items()} == {"p1": "Mathematics", "p1-2": "English"}
    assert f"{export / 'annotations.xml'} [image 'p1.jpg' of subset 'Validation']: page id p1 taken, written as " \
           f"p1-2" in report["notes"]
    with Image.open(tmp_path / "out" / "images" / "L3" / pages["p1-2"].image) as im:  # the Validation page
        assert im.convert("RGB").tobytes() == Image.open(export / "images" / "Validation" / "p1.jpg").convert(
            "RGB").tobytes()


# ------------------------------------------------------------------------------------------ 6. partial pages
def test_lenient_leaves_out_a_page_that_lost_an_answer_unless_kept(tmp_path, monkeypatch, capsys):
    """In the fixture's Label Studio export (the "JSON" format: https://labelstud.io/guide/export), answer 1-2 of
    p1 has no verdict Choices result (Label Studio writes no result for a control left empty). Kept, page p1 would
    teach that 1-2 is blank: it is left out of L3, with question 1's L2/L1 records, and listed."""
    tasks = _ls_tasks()
    results = tasks[0]["annotations"][0]["result"]
    results[:] = [r for r in results if not (r["id"] == "p1a1" and r["from_name"] == "verdict")]
    export = _write(tmp_path / "export.json", tasks)
    report = convert(export, load_mapping(LS_MAPPING), tmp_path / "out", images=IMAGES, lenient=True,
                     progress=False)
    assert [u["item"] for u in report["unmapped"]] == ["task 101, region 'p1a1'"]
    assert report["pages"] == {"in_export": 2, "written": 1, "partial": 1}
    assert report["partial_pages"] == [{"file": str(export), "item": "task 101", "page_id": "p1", "lost_answers": 1,
                                        "questions": ["1"], "kept": False, "every": False}]
    assert _levels(tmp_path / "out") == {"L3": {"p2"}, "L2": {"p1_1", "p1_2", "p2_0", "p2_1"},
                                         "L1": {"p1_q2", "p1_q3", "p2_q1", "p2_q2"}}
    assert not (tmp_path / "out" / "images" / "L3" / "Mathematics" / "p1.jpg").exists()  # its L2 file stays
    lines = summary_lines(report, tmp_path / "out")
    assert "pages that lost answer regions: 1 (their records would teach those regions as blank; " \
           "--keep-partial-pages keeps them):" in lines
    assert f"  {export} [task 101] (page p1): 1 answer region(s) lost: left out of L3, question(s) 1 out of " \
           f"L2/L1" in lines

    monkeypatch.setattr(sys, "argv", ["convert.py", "--mapping", str(LS_MAPPING), "--export", str(export),
                                      "--images", str(IMAGES), "--out", str(tmp_path / "kept"), "--lenient",
                                      "--keep-partial-pages"])
    runpy.run_path(str(ROOT / "data_builders" / "convert.py"), run_name="__main__")
    assert "1 answer region(s) lost: kept as it is" in capsys.readouterr().out
    kept = json.loads((tmp_path / "kept" / CONVERT_REPORT).read_text())
    assert kept["pages"] == {"in_export": 2, "written": 2, "partial": 1} and kept["partial_pages"][0]["kept"]
    l2 = {r.record_id: r for r in load_level(tmp_path / "kept", "L2").records}
    assert [g.group_id for g in l2["p1_0"].groups] == ["1-1"]


def test_a_page_that_lost_every_answer_is_never_kept(tmp_path):
    """Page p1 of the fixture's export without its question ids (a project whose `qid` TextArea was never filled):
    each of its answers is unmapped, so it keeps none; even with --keep-partial-pages it is never written as a page
    with no answers, and the report says so."""
    tasks = _ls_tasks()
    results = tasks[0]["annotations"][0]["result"]
    results[:] = [r for r in results if r["from_name"] != "qid"]
    report = convert(_write(tmp_path / "export.json", tasks), load_mapping(LS_MAPPING), tmp_path / "out",
                     images=IMAGES, lenient=True, keep_partial_pages=True, progress=False)
    (partial,) = report["partial_pages"]
    assert partial["page_id"] == "p1" and partial["every"] and not partial["kept"]
    assert _levels(tmp_path / "out")["L3"] == {"p2"} and "p1_0" not in _levels(tmp_path / "out")["L2"]
    assert "lost every one and are never kept" in " ".join(summary_lines(report, tmp_path / "out"))
    assert "(every answer region lost: never kept, even with --keep-partial-pages)" in str(PartialPage(**partial))


def test_an_export_without_question_ids_is_numbered_by_position_and_builds_non_empty_targets(tmp_path):
    """The fixture's export with no question id anywhere (a project whose pages print no numbers), read with
    fields.id and fields.question_id null: each question region is `#k` in reading order, its answers `#k` (one) or
    `#k-j` (several); the build's targets hold every answer with question_id null, never an empty list."""
    from gbtrain.data.build_config import BuildConfig, MixConfig
    from gbtrain.data.sft_dataset import build_sft_dataset, load_sft_dataset

    tasks = _ls_tasks()
    for task in tasks:
        results = task["annotations"][0]["result"]
        results[:] = [r for r in results if r["from_name"] != "qid"]
    export = _write(tmp_path / "export.json", tasks)
    with pytest.raises(ValueError, match=r"no question id \(field 'qid'; an export whose pages print no question "
                                         r"numbers: set fields.id: null"):
        convert(export, load_mapping(LS_MAPPING), tmp_path / "strict", images=IMAGES, progress=False)
    report = convert(export, load_mapping(LS_MAPPING, ["fields.id=null", "fields.question_id=null"]), tmp_path / "out",
                     images=IMAGES, progress=False)
    assert report["unmapped"] == [] and report["partial_pages"] == []
    truth = {r.record_id: r for r in load_level(tmp_path / "out", "L3").records}
    named = {r.record_id: r for r in convert(LS_EXPORT, load_mapping(LS_MAPPING), tmp_path / "named", images=IMAGES,
                                             progress=False) and load_level(tmp_path / "named", "L3").records}
    for page, record in truth.items():  # the same answers, numbered by position: one box each (no id joins two)
        assert all(g.group_id.startswith("#") and len(g.marks) == 1 for g in record.groups)
        assert sorted(m.hand for m in record.marks) == sorted(m.hand for m in named[page].marks if not m.is_context)
        assert {g.group_id.split("-")[0] for g in record.groups} == {f"#{k}" for k in range(1, len(
            {g.parent_id for g in named[page].groups}) + 1)}  # a question region each
    sft = tmp_path / "sft"
    build_sft_dataset(BuildConfig(data=str(tmp_path / "out"), out=str(sft), target_count=40, validation_share=0,
                                  test_share=0, mix=MixConfig(three_turn=0)), progress=False)
    rows = load_sft_dataset(sft, decode_images=False)["train"]
    targets = [json.loads(r["messages"][-1]["content"]) for r in rows]
    assert targets and all(t for t in targets) and all(it["question_id"] is None for t in targets for it in t)


def test_a_lost_answer_of_no_known_question_leaves_the_whole_page_out(tmp_path):
    """An ellipse labelled answer (Label Studio's ellipselabels result: https://labelstud.io/tags/ellipselabels,
    value x, y, radiusX, radiusY, rotation in percent) has no box and no question id: any question of p1 may miss
    it, so p1 gives no record at all."""
    tasks = _ls_tasks()
    tasks[0]["annotations"][0]["result"].append(
        {"id": "ell1", "type": "ellipselabels", "from_name": "ellipse", "to_name": "image", "original_width": 480,
         "original_height": 640, "image_rotation": 0, "origin": "manual",
         "value": {"x": 60.0, "y": 80.0, "radiusX": 5.0, "radiusY": 3.0, "rotation": 0, "ellipselabels": ["answer"]}})
    report = convert(_write(tmp_path / "export.json", tasks), load_mapping(LS_MAPPING), tmp_path / "out",
                     images=IMAGES, lenient=True, progress=False)
    assert report["partial_pages"][0]["questions"] == ["1", "2", "3"]
    assert _levels(tmp_path / "out") == {"L3": {"p2"}, "L2": {"p2_0", "p2_1"}, "L1": {"p2_q1", "p2_q2"}}
    assert not (tmp_path / "out" / "images" / "L2" / "Mathematics").exists()


# ------------------------------------------------------------------------------------------ 7. Label Studio CSV
@pytest.mark.parametrize(("name", "sep"), [("project-7-at-2026-11-03.csv", ","), ("export.tsv", "\t"),
                                           ("export.json", ",")])
def test_a_label_studio_csv_export_is_named(tmp_path, name, sep):
    """Label Studio's CSV / TSV export (label-studio-sdk, converter/exports/csv2.py: a header of the sorted keys,
    always annotator, annotation_id, created_at, updated_at and lead_time, every text quoted, QUOTE_NONNUMERIC;
    region lists as JSON text in their control's column)."""
    columns = ["annotation_id", "annotator", "created_at", "id", "image", "label", "lead_time", "updated_at"]
    row = ["501", '"1"', '"2026-11-03T10:02:11.412Z"', "101", '"/data/upload/7/3f2a9c1e-p1.jpg"',
           '"[{""x"": 5.0, ""y"": 6.25, ""width"": 90.0, ""height"": 17.1875, ""rotation"": 0, '
           '""rectanglelabels"": [""question""], ""original_width"": 480, ""original_height"": 640}]"', "60.0",
           '"2026-11-03T10:02:11.412Z"']
    (tmp_path / name).write_text(sep.join(f'"{c}"' for c in columns) + "\n" + sep.join(row) + "\n")
    with pytest.raises(ValueError, match=rf"{name.replace('.', '[.]')}: Label Studio CSV exports are not supported: "
                                         r"export JSON"):
        convert(tmp_path / name, load_mapping(LS_MAPPING), tmp_path / "out", images=IMAGES, progress=False)


# ------------------------------------------------------------------------------------------ 8. Label Studio COCO
def test_label_studio_coco_export_names_are_found_without_their_prefixes(tmp_path):
    """Label Studio's COCO export (label-studio-sdk, converter/converter.py Converter.convert_to_coco: images
    {width, height, id, file_name}, annotations {id, image_id, category_id, segmentation [], bbox, ignore, iscrowd,
    area}, info) copies each image to images/<first 8 hex of the MD5 of its URL>__<file name>
    (_extensions/label_studio_tools/core/utils/io.py, _build_cache_path), the file name of an upload keeping its
    own <8 hex>- prefix: the page is found as p1.jpg and named p1."""
    url = "/data/upload/7/3f2a9c1e-p1.jpg"
    file_name = f"images/{hashlib.md5(url.encode()).hexdigest()[:8]}__3f2a9c1e-p1.jpg"
    doc = {"images": [{"width": 480, "height": 640, "id": 0, "file_name": file_name}],
           "categories": [{"id": 0, "name": "answer"}, {"id": 1, "name": "question"}],
           "annotations": [{"id": 0, "image_id": 0, "category_id": 1, "segmentation": [], "bbox": [24.0, 40.0, 432.0,
                                                                                                   110.0],
                            "ignore": 0, "iscrowd": 0, "area": 47520.0}],
           "info": {"year": 2026, "version": "1.0", "description": "", "contributor": "Label Studio", "url": "",
                    "date_created": "2026-11-03 10:41:00.500000"}}
    (page,) = coco.read(_write(tmp_path / "result.json", doc))
    assert ImageFinder(IMAGES).find(page) == IMAGES / "p1.jpg"
    assert image_names(page.image_ref)[-1] == "p1.jpg"  # the page id's source


# ------------------------------------------------------------------------------------------ 9. COCO masks
def test_coco_masks_and_crowd_regions_are_listed_not_taken_as_their_bbox(tmp_path):
    """Datumaro's (and so CVAT's) COCO export writes a mask as an RLE object with iscrowd 1 (openvinotoolkit/datumaro,
    plugins/data_formats/coco/exporter.py _InstancesExporter.convert_instance: segmentation {counts, size},
    iscrowd int(is_crowd)); COCO's own format (https://cocodataset.org/#format-data) marks a crowd region by
    iscrowd 1. Both are refused like CVAT masks and Label Studio brushes: one line naming file and annotation."""
    doc = json.loads((FIX / "coco" / "instances.json").read_text(encoding="utf-8"))
    mask = doc["annotations"][3]  # answer 1-1 of p1
    mask.update(segmentation={"counts": [38550, 40, 600, 40, 268350], "size": [640, 480]}, iscrowd=1)
    crowd = doc["annotations"][4]  # answer 1-2
    crowd.update(segmentation=[[330.0, 80.0, 400.0, 80.0, 400.0, 120.0, 330.0, 120.0]], iscrowd=1)
    export = _write(tmp_path / "instances.json", doc)
    mapping = load_mapping(FIX / "coco" / "mapping.yaml")
    with pytest.raises(ValueError, match=r"instances\.json \[image 'p1\.jpg', annotation 4\]: an RLE mask "
                                         r"segmentation cannot be a box: draw a polygon or box \(and 1 more\)"):
        convert(export, mapping, tmp_path / "strict", images=IMAGES, progress=False)
    report = convert(export, mapping, tmp_path / "out", images=IMAGES, lenient=True, progress=False)
    assert [(u["item"], u["message"]) for u in report["unmapped"]] == [
        ("image 'p1.jpg', annotation 4", "an RLE mask segmentation cannot be a box: draw a polygon or box"),
        ("image 'p1.jpg', annotation 5", "a crowd region (iscrowd 1) cannot be a box: draw a polygon or box")]
    assert report["partial_pages"][0]["page_id"] == "p1"


# ------------------------------------------------------------------------------------------ 10. non-ASCII names
def test_page_ids_keep_the_letters_of_non_ascii_file_names(tmp_path):
    """COCO file_name is the image's file name as the tool stores it (https://cocodataset.org/#format-data); here a
    Chinese one and an accented one (NFC, as Windows, Linux and macOS's APFS keep names typed there)."""
    doc = json.loads((FIX / "coco" / "instances.json").read_text(encoding="utf-8"))
    names = ["期中试卷_03.jpg", "Prüfung_é.png"]
    images = tmp_path / "images"
    images.mkdir()
    for image, name in zip(doc["images"], names, strict=True):
        shutil.copy(IMAGES / image["file_name"], images / name)
        image["file_name"] = name
    convert(_write(tmp_path / "instances.json", doc), load_mapping(FIX / "coco" / "mapping.yaml"), tmp_path / "out",
            images=images, progress=False)
    levels = _levels(tmp_path / "out")
    assert levels["L3"] == {"期中试卷_03", "Prüfung_é"}
    assert {"期中试卷_03_q1", "Prüfung_é_q2"} <= levels["L1"] and "期中试卷_03_0" in levels["L2"]
    assert (tmp_path / "out" / "images" / "L3" / "Mathematics" / "期中试卷_03.jpg").is_file()



# ------------------------------------------------------------------------------------------ points
def _ls_number(tasks: list[dict], rid: str, control: str, number) -> None:
    """A per-region Number control's result, as Label Studio writes it beside the region's other results
    (https://labelstud.io/tags/number, "Sample Results JSON": type "number", value.number), geometry repeated."""
    for task in tasks:
        results = task["annotations"][0]["result"]
        shape = next(r for r in results if r["id"] == rid and r["type"] == "rectanglelabels")
        geometry = {k: v for k, v in shape["value"].items() if k != "rectanglelabels"}
        results.append({**{k: v for k, v in shape.items() if k != "value"}, "type": "number", "from_name": control,
                        "value": {**geometry, "number": number}})
        return


def test_points_are_mapped_from_number_controls_and_checked_before_writing(tmp_path):
    """A teacher's points on Label Studio Number controls reach the page and its L1 crop; a score above the full
    score is the item's problem, named before anything is written."""
    tasks = _ls_tasks()
    _ls_number(tasks, "p1a0", "points_max", 2)
    _ls_number(tasks, "p1a0", "points", 1.5)
    overrides = ["fields.full_score=points_max", "fields.score=points"]
    mapping = load_mapping(LS_MAPPING, overrides)
    convert(_write(tmp_path / "export.json", tasks), mapping, tmp_path / "out", images=IMAGES, progress=False)
    page = next(r for r in load_level(tmp_path / "out", "L3").records if r.record_id == "p1")
    graded = {g.group_id: (g.full_score, g.score) for g in page.groups}
    assert graded["1-1"] == (2, 1.5) and all(v == (None, None) for k, v in graded.items() if k != "1-1")
    crop = next(r for r in load_level(tmp_path / "out", "L1").records if r.record_id == "p1_q1")
    assert {g.group_id: g.score for g in crop.groups}["1-1"] == 1.5  # the crop's marks keep every field

    _ls_number(tasks, "p1a1", "points_max", 2)
    _ls_number(tasks, "p1a1", "points", 3)
    with pytest.raises(ValueError, match=r"bad\.json \[task 101, region 'p1a1'\]: answer \S+: score 3 is outside "
                                         r"0\.\.2 \(its full_score\)"):
        convert(_write(tmp_path / "bad.json", tasks), mapping, tmp_path / "out2", images=IMAGES, progress=False)
    assert not (tmp_path / "out2").exists()


def test_names_made_for_answers_never_take_a_real_question_id():
    """Issue 57: answers numbered by their region (fields.id null) are `3-1`, `3-2` for two answers in region 3; a
    region whose own id is `3-2` (and one printed `#1`) must keep its answer apart, never merge with a made name."""
    from gbtrain.data.converters.build import _numbered, _Region
    from gbtrain.data.converters.sources import SourceItem
    from gbtrain.schema import Mark

    def rect(x1, y1, x2, y2):
        return [(x1, y1), (x2, y1), (x2, y2), (x1, y2)]

    regions = [_Region(SourceItem(f"region {q}", "question", None), rect(0, y, 100, y + 90), q, None)
               for q, y in (("3", 0), ("3-2", 100), ("#1", 200), (None, 300))]
    answers = [(SourceItem(f"answer {k}", "answer", None),
                Mark(points=rect(10, y, 50, y + 20), label="right", raw_label="right"))
               for k, y in enumerate((10, 50, 110, 210, 310))]
    names = [mark.mark_id for _, mark in _numbered(answers, regions)]
    assert names == ["3-1", "3-2~2", "3-2", "#1", "#4"]
    assert len(set(names)) == len(names)


def test_a_label_studio_export_numbered_by_region_keeps_every_answer_apart(tmp_path):
    """Issue 57, as Label Studio writes it: the fixture's export with the answers' qid controls gone (fields.id
    null). Its first page's question regions are named `3`, none, and `#2` (a name like the one made for an unnamed
    region): region 3's two answers become `3-1` and `3-2`, the unnamed second region's `#2~2`, never `#2`, which
    region `#2`'s answer keeps. A region named like a sub-question (`3-2`) is refused, naming the way out."""
    def export(names: dict[str, str | None]) -> Path:
        tasks = _ls_tasks()
        for task in tasks:
            results = task["annotations"][0]["result"]
            results[:] = [r for r in results if not (r["from_name"] == "qid" and (
                "a" in r["id"] or names.get(r["id"], "") is None))]
            for r in results:
                if r["from_name"] == "qid" and r["id"] in names:
                    r["value"]["text"] = [names[r["id"]]]
        return _write(tmp_path / "export.json", tasks)

    mapping = load_mapping(LS_MAPPING, ["fields.id=null"])
    convert(export({"p1q0": "3", "p1q1": None, "p1q2": "#2"}), mapping, tmp_path / "out", images=IMAGES,
            progress=False)
    page = next(r for r in load_level(tmp_path / "out", "L3").records if "p1" in r.image)
    assert {m.mark_id: m.hand for m in page.marks if not m.is_context} == {"3-1": "7", "3-2": "35", "#2~2": "x=3",
                                                                          "#2": ""}
    assert all(len(g.marks) == 1 for g in page.groups)
    with pytest.raises(ValueError, match=r"\[task 101, region 'p1q1'\]: question region id '3-2' names a "
                                         r"sub-question .* give the region its question's id '3'"):
        convert(export({"p1q0": "3", "p1q1": "3-2"}), mapping, tmp_path / "refused", images=IMAGES, progress=False)

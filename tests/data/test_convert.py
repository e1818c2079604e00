"""Converters from annotation tools into the GradingBench layout (gbtrain.data.converters, data_builders/convert.py) and
the preview / validate command (gbtrain.data.preview, data_builders/preview.py).

The fixtures (tests/fixtures/convert, README.txt there cites each tool's export schema) hold two pages annotated
once and exported by each tool: every converter must write the same records, which the strict reader accepts.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from gbtrain.data.annotations import load_dataset, load_level
from gbtrain.data.converters import FORMATS, convert, cvat, labelstudio, load_mapping
from gbtrain.data.preview import preview, summary_lines
from gbtrain.outputs import CONVERT_REPORT

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "convert"
IMAGES = FIX / "images"
EXPORTS = {
    "labelstudio": (FIX / "labelstudio" / "export.json", ROOT / "configs" / "convert" / "example.yaml"),
    "cvat": (FIX / "cvat" / "annotations.xml", FIX / "cvat" / "mapping.yaml"),
    "labelme": (FIX / "labelme", FIX / "labelme" / "mapping.yaml"),
    "coco": (FIX / "coco" / "instances.json", FIX / "coco" / "mapping.yaml"),
}
FIB, PS = "Fill-in-the-blank", "Problem-Solving"
# page -> (subject, stage, image, answer marks: id, box, transcription, verdict, reference, question type)
TRUTH = {
    "p1": ("Mathematics", "Elementary", "Mathematics/p1.jpg", [
        ("1-1", (150, 80, 210, 120), "7", "right", "7", FIB),
        ("1-2", (330, 80, 400, 120), "35", "wrong", "30", FIB),
        ("2", (60, 212, 258, 298), "x=3", "right", "x=3", PS),
        ("3", (60, 400, 300, 450), "", "unanswered", "twelve", FIB)]),
    "p2": ("English", "Junior_High", "English/p2.png", [
        ("1-1", (60, 110, 180, 150), "went", "right", "went", FIB),
        ("1-2", (260, 110, 380, 150), "seed", "wrong", "saw", FIB),
        ("2", (150, 300, 230, 340), "am", "right", "am not", FIB),
        ("2", (150, 360, 260, 400), "not", "right", None, FIB)]),
}
# L2 record -> (its answer groups, its question regions)
L2_TRUTH = {
    "p1_0": ({"1-1", "1-2"}, [(24, 40, 456, 150)]), "p1_1": ({"2"}, [(24, 170, 456, 330)]),
    "p1_2": ({"3"}, [(24, 350, 456, 470)]), "p2_0": ({"1-1", "1-2"}, [(24, 40, 456, 200)]),
    "p2_1": ({"2"}, [(24, 230, 456, 420)]),
}
POLYGON = [(60.0, 220.0), (250.0, 212.0), (258.0, 290.0), (66.0, 298.0)]


def run_convert(fmt: str, out: Path, lenient: bool = False, export: Path | None = None) -> dict:
    default_export, mapping = EXPORTS[fmt]
    return convert(export or default_export, load_mapping(mapping), out, images=IMAGES, lenient=lenient,
                   progress=False)


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("converted")
    for fmt in FORMATS:
        run_convert(fmt, out / fmt)
    return {fmt: out / fmt for fmt in FORMATS}


def _box(box) -> tuple:
    return tuple(round(v, 2) for v in box.as_list())


@pytest.mark.parametrize("fmt", FORMATS)
def test_converter_round_trips_through_the_strict_reader(converted, fmt):
    out = converted[fmt]
    l3 = {r.record_id: r for r in load_level(out, "L3").records}
    assert set(l3) == set(TRUTH)
    for page_id, (subject, stage, image, marks) in TRUTH.items():
        r = l3[page_id]
        assert (r.subject, r.stage, r.image, r.width, r.height) == (subject, stage, image, 480, 640)
        got = sorted((m.mark_id, _box(m.box), m.hand, m.label, m.std, m.question_type) for m in r.marks)
        assert got == sorted(marks)
    assert next(m for m in l3["p1"].marks if m.mark_id == "2").points == POLYGON  # a polygon stays a polygon
    assert next(g for g in l3["p2"].groups if g.group_id == "2").hand == "amnot"  # two boxes, one group

    l2 = {r.record_id: r for r in load_level(out, "L2").records}
    assert {rid: ({g.group_id for g in r.groups}, [_box(b) for b in r.context_regions]) for rid, r in l2.items()} \
        == L2_TRUTH
    l1 = {r.record_id: r for r in load_level(out, "L1").records}
    assert set(l1) == {"p1_q1", "p1_q2", "p1_q3", "p2_q1", "p2_q2"}
    assert {r.page_id for r in l1.values()} == {"p1", "p2"}
    # The crop of question 1 of p1: its region plus the generator's margin (0.04 * 480 = 19.2 px), marks moved.
    assert (l1["p1_q1"].width, l1["p1_q1"].height) == (470, 148)
    assert _box(next(m for m in l1["p1_q1"].marks if m.mark_id == "1-1").box) == (145, 59, 205, 99)
    report = json.loads((out / CONVERT_REPORT).read_text())
    assert report["status"] == "complete" and report["unmapped"] == [] and report["records"] == {"L1": 5, "L2": 5,
                                                                                                 "L3": 2}


def test_every_tool_writes_the_same_records(converted):
    for level in ("L1", "L2", "L3"):
        texts = {fmt: (out / "annotations" / f"{level}.json").read_text() for fmt, out in converted.items()}
        assert len(set(texts.values())) == 1, level


def _ls_variant(tmp_path: Path) -> Path:
    """The Label Studio export with one item of each unmappable kind added."""
    tasks = json.loads(EXPORTS["labelstudio"][0].read_text())
    results = tasks[0]["annotations"][0]["result"]
    doodle = copy.deepcopy(results[0])
    doodle.update(id="doodle1")
    doodle["value"]["rectanglelabels"] = ["doodle"]
    ellipse = {"id": "ell1", "type": "ellipselabels", "from_name": "e", "to_name": "image", "original_width": 480,
               "original_height": 640, "value": {"x": 10, "y": 10, "radiusX": 2, "radiusY": 2,
                                                  "ellipselabels": ["answer"]}}
    results[:] = [r for r in results if not (r["id"] == "p1a0" and r["from_name"] == "hand")]  # 1-1: no transcription
    for r in results:
        if r["id"] == "p1a1":  # 1-2 moved below every question region
            r["value"]["y"] = 90.0
        if r["id"] == "p1a2" and r["from_name"] == "qid":  # answer 2 claims question 5 inside question 2's region
            r["value"]["text"] = ["5"]
        if r["id"] == "p1a3" and r["from_name"] == "type":
            r["value"]["choices"] = ["essay"]
    results += [doodle, ellipse]
    missing = copy.deepcopy(tasks[1])
    missing.update(id=103, file_upload="deadbeef-missing.jpg")
    missing["data"]["image"] = "/data/upload/7/deadbeef-missing.jpg"
    path = tmp_path / "export.json"
    path.write_text(json.dumps([*tasks, missing]))
    return path


def test_unmappable_items_are_listed_never_dropped_silently(tmp_path):
    report = run_convert("labelstudio", tmp_path / "out", lenient=True, export=_ls_variant(tmp_path))
    found = {(u["item"], u["message"].split(":")[0].split(" (")[0]) for u in report["unmapped"]}
    assert found == {
        ("task 101, region 'doodle1'", "unknown label 'doodle'"),
        ("task 101, region 'ell1'", "shape 'ellipselabels' cannot be a box"),
        ("task 101, region 'p1a0'", "answer 1-1"),
        ("task 101, region 'p1a1'", "answer 1-2 lies in no question region"),
        ("task 101, region 'p1a2'", "answer 5 lies in the region of question 2, not of question 5"),
        ("task 103", "page left out"),
    }
    messages = " | ".join(u["message"] for u in report["unmapped"])
    assert "no transcription (field 'hand')" in messages and "image file not found" in messages
    assert all(u["file"].endswith("export.json") for u in report["unmapped"])
    # p1 lost answers (one of them, the ellipse, of no known question): out of L3 and L2/L1, listed
    assert report["pages"] == {"in_export": 3, "written": 1, "partial": 1}
    assert [(p["page_id"], p["lost_answers"], p["questions"]) for p in report["partial_pages"]] == [
        ("p1", 5, ["1", "2", "3"])]
    assert "question_type 'essay' on 1 region(s): not a known value, written as Other" in report["notes"]
    assert [r.record_id for r in load_level(tmp_path / "out", "L3").records] == ["p2"]
    kept = convert(_ls_variant(tmp_path), load_mapping(EXPORTS["labelstudio"][1]), tmp_path / "kept", images=IMAGES,
                   lenient=True, progress=False, keep_partial_pages=True)
    p1 = next(r for r in load_level(tmp_path / "kept", "L3").records if r.record_id == "p1")
    assert [m.mark_id for m in p1.marks] == ["3"]
    assert "question 2 has no answer marks: not in L2/L1" in " ".join(kept["notes"])


def _escaping_export(fmt: str, tmp_path: Path, ref: str) -> Path:
    """The fixture export of `fmt` whose page p1 names its image by `ref` (a path that leaves the images folder)."""
    export = tmp_path / "export"
    export.mkdir()
    if fmt == "labelstudio":
        tasks = json.loads(EXPORTS[fmt][0].read_text())
        tasks[0]["data"]["image"] = ref
        (export / "export.json").write_text(json.dumps(tasks))
        return export / "export.json"
    if fmt == "coco":
        doc = json.loads(EXPORTS[fmt][0].read_text())
        doc["images"][0]["file_name"] = ref
        (export / "instances.json").write_text(json.dumps(doc))
        return export / "instances.json"
    if fmt == "cvat":
        xml = EXPORTS[fmt][0].read_text().replace('name="p1.jpg"', f'name="{ref}"')
        (export / "annotations.xml").write_text(xml)
        return export / "annotations.xml"
    for name in ("p1.json", "p2.json"):
        doc = json.loads((EXPORTS[fmt][0] / name).read_text())
        if name == "p1.json":
            doc["imagePath"] = ref
        (export / name).write_text(json.dumps(doc))
    return export


ESCAPES = [("labelstudio", "../secret/p1.jpg"), ("labelstudio", "/data/local-files/?d=../secret/p1.jpg"),
           ("labelstudio", "/data/local-files/?d=%2e%2e/secret/p1.jpg"), ("labelstudio", "%2e%2e/secret/p1.jpg"),
           ("coco", "../secret/p1.jpg"), ("cvat", "../secret/p1.jpg"), ("labelme", "../secret/p1.jpg")]


@pytest.mark.parametrize(("fmt", "ref"), ESCAPES)
def test_an_image_path_that_leaves_the_images_folder_is_refused(tmp_path, fmt, ref):
    """An export cannot make the converter read a file outside the images folder and copy it into the dataset."""
    images = tmp_path / "work" / "images"
    secret = tmp_path / "work" / "secret" / "p1.jpg"  # ../secret/p1.jpg from images/ (and from export/)
    secret.parent.mkdir(parents=True)
    shutil.copytree(IMAGES, images)
    (images / "p1.jpg").unlink()  # only the escaping reference could find a p1.jpg
    shutil.copy(IMAGES / "p1.jpg", secret)
    export = _escaping_export(fmt, tmp_path / "work", ref)
    mapping = load_mapping(EXPORTS[fmt][1])
    with pytest.raises(ValueError, match=r"is \S+/secret/p1\.jpg, outside the images folder .*copy the image there "
                                         r"or set --images"):
        convert(export, mapping, tmp_path / "out", images=images, progress=False)
    report = convert(export, mapping, tmp_path / "lenient", images=images, lenient=True, progress=False)
    assert report["pages"]["written"] == 1 and "secret" in report["unmapped"][0]["message"]
    written = [p for p in (tmp_path / "lenient").rglob("*") if p.is_file()]
    assert not any(p.read_bytes() == secret.read_bytes() for p in written)


def test_a_symbolic_link_out_of_the_images_folder_is_refused(tmp_path):
    images = tmp_path / "images"
    shutil.copytree(IMAGES, images)
    secret = tmp_path / "elsewhere" / "p1.jpg"
    secret.parent.mkdir()
    (images / "p1.jpg").rename(secret)
    (images / "p1.jpg").symlink_to(secret)
    with pytest.raises(ValueError, match=r"elsewhere/p1\.jpg, outside the images folder"):
        convert(EXPORTS["coco"][0], load_mapping(EXPORTS["coco"][1]), tmp_path / "out", images=images, progress=False)


def test_two_images_with_one_id_are_refused_not_merged(tmp_path):
    doc = json.loads(EXPORTS["coco"][0].read_text())
    doc["images"][1]["id"] = doc["images"][0]["id"]
    (tmp_path / "instances.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"two images have id 1 \('p1\.jpg' and 'p2\.png'\): give each image its "
                                         r"own id"):
        convert(tmp_path / "instances.json", load_mapping(EXPORTS["coco"][1]), tmp_path / "out", images=IMAGES,
                progress=False)


def _ls_task_edit(tmp_path: Path, edit) -> Path:
    tasks = json.loads(EXPORTS["labelstudio"][0].read_text())
    edit(tasks[0]["annotations"][0]["result"])
    path = tmp_path / "export.json"
    path.write_text(json.dumps(tasks))
    return path


def test_two_regions_sharing_a_result_id_are_unmappable_not_merged(tmp_path):
    def duplicate(results):
        first = next(r for r in results if r["type"] == "rectanglelabels")
        other = next(r for r in results if r["type"] == "rectanglelabels" and r["id"] != first["id"])
        for r in results:
            if r["id"] == other["id"]:
                r["id"] = first["id"]
    report = run_convert("labelstudio", tmp_path / "out", lenient=True, export=_ls_task_edit(tmp_path, duplicate))
    assert any("shapes or repeated controls share this region id" in u["message"] for u in report["unmapped"])


@pytest.mark.parametrize(("key", "value"), [("x", True), ("y", "6.25"), ("width", 10 ** 401), ("height", None)],
                         ids=["bool", "text", "401-digit", "null"])
def test_a_coordinate_that_is_not_a_number_is_unmappable(tmp_path, key, value):
    def corrupt(results):
        next(r for r in results if r["type"] == "rectanglelabels")["value"][key] = value
    report = run_convert("labelstudio", tmp_path / "out", lenient=True, export=_ls_task_edit(tmp_path, corrupt))
    assert "unreadable rectanglelabels coordinates" in [u["message"] for u in report["unmapped"]]


def test_ignored_labels_are_counted_not_listed(tmp_path):
    mapping = load_mapping(EXPORTS["labelstudio"][1], ["ignore_labels=[doodle]"])
    report = convert(_ls_variant(tmp_path), mapping, tmp_path / "out", images=IMAGES, lenient=True, progress=False)
    assert report["ignored_labels"] == {"doodle": 1}
    assert all("doodle" not in u["message"] for u in report["unmapped"]) and len(report["unmapped"]) == 5


def test_strict_mode_fails_with_one_line_naming_file_and_item(tmp_path):
    export = _ls_variant(tmp_path)
    with pytest.raises(ValueError) as err:
        run_convert("labelstudio", tmp_path / "out", export=export)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{export} [task 101, region ")
    assert "(and 5 more)" in message and "--lenient" in message
    assert not (tmp_path / "out").exists()  # nothing written


def test_rotated_boxes_turn_as_each_tool_documents(tmp_path):
    """Label Studio turns a rectangle about its top-left corner, CVAT a box about its centre (clockwise)."""
    task = {"id": 1, "data": {"image": "p.jpg"}, "annotations": [{"id": 1, "result": [
        {"id": "r", "type": "rectanglelabels", "from_name": "l", "to_name": "image", "original_width": 480,
         "original_height": 640, "value": {"x": 50, "y": 50, "width": 10, "height": 5, "rotation": 90,
                                           "rectanglelabels": ["answer"]}}]}]}
    (tmp_path / "ls.json").write_text(json.dumps([task]))
    (item,) = labelstudio.read(tmp_path / "ls.json", "image")[0].items
    assert [tuple(round(v, 6) for v in p) for p in item.points] == [(240, 320), (240, 368), (208, 368), (208, 320)]
    (tmp_path / "cvat.xml").write_text('<annotations><version>1.1</version><image id="0" name="p.jpg" width="480" '
                                       'height="640"><box label="answer" xtl="100" ytl="100" xbr="160" ybr="120" '
                                       'rotation="90"/><polyline label="answer" points="1,2;3,4"/></image>'
                                       '</annotations>')
    item, line = cvat.read(tmp_path / "cvat.xml")[0].items
    assert line.points is None and line.problem.startswith("shape 'polyline' cannot be a box")
    xs, ys = [p[0] for p in item.points], [p[1] for p in item.points]
    assert (round(min(xs)), round(min(ys)), round(max(xs)), round(max(ys))) == (120, 80, 140, 140)


def test_exif_turned_photo_is_written_upright(tmp_path):
    """A phone photo stored sideways with EXIF orientation 6 is shown upright by the tools: the page is written
    upright (no orientation left), so the boxes fit the pixels the models see."""
    upright = Image.new("RGB", (300, 400), "white")
    upright.paste((255, 0, 0), (20, 30, 80, 60))
    stored = upright.transpose(Image.Transpose.ROTATE_90)  # exif_transpose undoes it for orientation 6
    exif = Image.Exif()
    exif[0x0112] = 6
    (tmp_path / "images").mkdir()
    stored.save(tmp_path / "images" / "photo.jpg", exif=exif, quality=95)
    coco = {"images": [{"id": 1, "file_name": "photo.jpg", "width": 300, "height": 400}],
            "categories": [{"id": 1, "name": "right"}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [20, 30, 60, 30],
                             "attributes": {"id": "1"}, "utf8_string": "x"}]}
    (tmp_path / "coco.json").write_text(json.dumps(coco))
    mapping = load_mapping(EXPORTS["coco"][1], ["question_labels=[]", "subject=Science"])
    convert(tmp_path / "coco.json", mapping, tmp_path / "out", images=tmp_path / "images", progress=False)
    (page,) = load_level(tmp_path / "out", "L3").records
    with Image.open(tmp_path / "out" / "images" / "L3" / page.image) as im:
        assert im.size == (300, 400) and im.getexif().get(0x0112) is None
        assert im.convert("RGB").getpixel((50, 45))[0] > 200 > im.convert("RGB").getpixel((50, 45))[1]


def test_mapping_errors_name_the_file_and_key(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("format: labelstudio\nanswer_lables: [answer]\n")
    with pytest.raises(ValueError, match=r"bad config in .*m\.yaml: answer_lables"):
        load_mapping(bad)
    bad.write_text("format: labelstudio\nquestion_labels: [answer]\nverdicts: {ok: fine}\n")
    with pytest.raises(ValueError, match=r"bad mapping .*m\.yaml: question_labels: label 'answer' is also in "
                                         r"answer_labels; verdicts\.ok: 'fine'"):
        load_mapping(bad)


def test_exports_of_another_kind_are_named(tmp_path):
    (tmp_path / "min.json").write_text(json.dumps([{"id": 1, "image": "p1.jpg", "label": []}]))
    with pytest.raises(ValueError, match=r"min\.json: no task has 'annotations': export with Label Studio's"):
        run_convert("labelstudio", tmp_path / "out", export=tmp_path / "min.json")
    with pytest.raises(ValueError, match=r"annotations\.xml: not a JSON file"):
        run_convert("coco", tmp_path / "out", export=EXPORTS["cvat"][0])
    (tmp_path / "task.zip").write_bytes(b"PK")
    with pytest.raises(ValueError, match="is a zip archive: unzip it"):
        run_convert("cvat", tmp_path / "out", export=tmp_path / "task.zip")
    assert not (tmp_path / "out").exists()


def test_output_folder_must_be_new_or_an_earlier_conversion(tmp_path, converted):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds files that convert did not write"):
        run_convert("cvat", tmp_path / "notes")
    with pytest.raises(ValueError, match=r"--out .* lies inside --images"):
        run_convert("cvat", IMAGES / "out")
    run_convert("cvat", tmp_path / "again")
    report = run_convert("coco", tmp_path / "again")  # a rerun replaces an earlier conversion
    assert report["format"] == "coco" and (tmp_path / "notes" / "todo.txt").read_text() == "mine"


def test_convert_script_runs_as_a_user_runs_it(tmp_path):
    before = sorted(p.relative_to(FIX) for p in FIX.rglob("*"))
    export, mapping = EXPORTS["labelme"]
    proc = subprocess.run([sys.executable, str(ROOT / "data_builders" / "convert.py"), "--mapping", str(mapping),
                           "--export", str(export), "--images", str(IMAGES), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "converted 2 of 2 pages (labelme)" in proc.stdout and "records L1 5, L2 5, L3 2" in proc.stdout
    assert sorted(p.relative_to(FIX) for p in FIX.rglob("*")) == before  # nothing written beside the inputs
    assert set(load_dataset(tmp_path / "out")) == {"L1", "L2", "L3"}


def _run_script(name: str, args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", [name, *args])
    code = 0
    try:
        runpy.run_path(str(ROOT / "data_builders" / name), run_name="__main__")
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_convert_script_user_error_is_one_line_with_exit_code_2(tmp_path, monkeypatch, capsys):
    export = _ls_variant(tmp_path)
    code, _, err = _run_script("convert.py", ["--mapping", str(EXPORTS["labelstudio"][1]), "--export", str(export),
                                              "--images", str(IMAGES), "--out", str(tmp_path / "out")],
                               monkeypatch, capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"convert: {export} [task 101, region ")
    code, out, _ = _run_script("convert.py", ["--mapping", str(EXPORTS["labelstudio"][1]), "--export", str(export),
                                              "--images", str(IMAGES), "--out", str(tmp_path / "out"), "--lenient"],
                               monkeypatch, capsys)
    assert code == 0 and "unmappable items left out: 6:" in out and "unknown label 'doodle'" in out


def test_preview_counts_and_draws_synthetic_pages(synth_dir, tmp_path):
    summary = preview(synth_dir, tmp_path / "preview", pages=3)
    loaded = load_dataset(synth_dir)
    for level, lv in loaded.items():
        s = summary["levels"][level]
        assert s["records"] == len(lv.records) and s["problems"] == []
        assert s["groups"] == sum(len(r.groups) for r in lv.records) == sum(s["labels"].values())
    files = [Path(f) for f in summary["drawn"]["files"]]
    assert summary["drawn"]["level"] == "L3" and len(files) == 3 and all(f.is_file() for f in files)
    first = loaded["L3"].records[0]
    assert files[0].name == f"{first.record_id}.png" and Image.open(files[0]).size == (first.width, first.height)
    assert json.loads((tmp_path / "preview" / "summary.json").read_text())["levels"]["L3"]["records"] == 12
    (tmp_path / "preview" / "mine.png").write_bytes(b"the user's")  # not listed as drawn: kept
    again = preview(synth_dir, tmp_path / "preview", pages=1, level="L1")  # a rerun draws other records
    assert sorted(p.name for p in (tmp_path / "preview").glob("*.png")) == sorted(
        ["mine.png", *(Path(f).name for f in again["drawn"]["files"])])


def test_preview_draws_a_converted_page_and_lists_reader_problems(converted, tmp_path):
    data = tmp_path / "data"
    subprocess.run(["cp", "-r", str(converted["labelstudio"]), str(data)], check=True)
    summary = preview(data, tmp_path / "preview", pages=5, level="L2")
    assert [Path(f).name for f in summary["drawn"]["files"]] == [f"{r}.png" for r in L2_TRUTH]
    with Image.open(tmp_path / "preview" / "p1_0.png") as im:
        assert im.getpixel((150, 100)) == (0, 150, 0)  # the left edge of answer 1-1 (right): green
        assert im.getpixel((330, 100)) == (210, 0, 0)  # answer 1-2 (wrong): red
        assert im.getpixel((24, 100)) == (40, 90, 220)  # the question region: blue
    records = json.loads((data / "annotations" / "L3.json").read_text())
    records[1]["width"] = 500  # p2 no longer matches its image
    (data / "annotations" / "L3.json").write_text(json.dumps(records))
    lines = summary_lines(preview(data, tmp_path / "preview2", pages=1))
    assert any("L3.json [record p2]: image" in line and "annotation says 500x640" in line for line in lines)
    assert "L3: 1 records, 4 answer groups, 0 question regions, 1 records rejected" in lines


def test_preview_script(converted, tmp_path, monkeypatch, capsys):
    code, out, _ = _run_script("preview.py", ["--data", str(converted["coco"]), "--out", str(tmp_path / "p"),
                                              "--pages", "1"], monkeypatch, capsys)
    assert code == 0 and "L3: 2 records, 7 answer groups" in out and "drew 1 L3 records" in out
    assert "left out by the conversion: 0 items (see convert_report.json)" in out
    code, _, err = _run_script("preview.py", ["--data", str(tmp_path / "nothing"), "--out", str(tmp_path / "p")],
                               monkeypatch, capsys)
    assert code == 2 and err.startswith("preview: data directory not found") and err.count("\n") == 1


def test_embedded_labelme_image_data_is_used(tmp_path):
    """A labelme file may carry its image (imageData, base64) instead of a file beside it."""
    doc = json.loads((FIX / "labelme" / "p2.json").read_text())
    buf = io.BytesIO()
    Image.open(IMAGES / "p2.png").save(buf, format="PNG")
    doc.update(imagePath="gone/p2.png", imageData=base64.b64encode(buf.getvalue()).decode())
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "p2.json").write_text(json.dumps(doc))
    report = convert(tmp_path / "export" / "p2.json", load_mapping(EXPORTS["labelme"][1]), tmp_path / "out",
                     progress=False)
    assert report["records"]["L3"] == 1 and report["unmapped"] == []

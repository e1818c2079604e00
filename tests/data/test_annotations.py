import json

import pytest
from PIL import Image

from gbtrain.data.annotations import AnnotationError, load_dataset, load_level, write_level
from gbtrain.schema import HALF_RIGHT, RIGHT, UNANSWERED, UNKNOWN, WRONG


def make_data(root, records, level="L3", wrap=False, size=(200, 100)):
    """Write images for `records` and the annotation file; returns the data root."""
    for r in records:
        if isinstance(r, dict) and isinstance(r.get("image"), str) and ".." not in r["image"] \
                and not r["image"].startswith("/"):
            p = root / "images" / level / r["image"]
            p.parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", size, "white").save(p)
    ann = root / "annotations" / f"{level}.json"
    ann.parent.mkdir(parents=True, exist_ok=True)
    ann.write_text(json.dumps({"samples": records} if wrap else records, ensure_ascii=False), encoding="utf-8")
    return root


def rec(rid="p1", marks=None, image="Mathematics/p1.jpg", **kw):
    base = {"id": rid, "subject": "Mathematics", "level": "L3", "image": image, "width": 200, "height": 100,
            "marks": marks if marks is not None else [answer()]}
    base.update(kw)
    return base


def answer(label="right", mid="1-1", box=None, **attrs):
    a = {"id": mid, "hand": "12", "std": "12"}
    a.update(attrs)
    return {"bbox_2d": box or [[10, 10], [50, 10], [50, 30], [10, 30]], "markLabel": label, "attributes": a}


def test_chinese_keys_and_values(tmp_path):
    m = answer("正确", "3-2", **{"纬度1": "图表", "纬度2": "选择", "题目id": "3"})
    m["学段"] = "初中"
    ctx = {"bbox_2d": [0, 0, 100, 60], "markLabel": "整题", "attributes": {"id": "3", "题目id": "3"}}
    ld = load_level(make_data(tmp_path, [rec(marks=[m, ctx])]), "L3")
    r = ld.records[0]
    assert [g.group_id for g in r.groups] == ["3-2"]
    g = r.groups[0]
    assert (g.label, g.question_type, g.content_format, g.stage) == (RIGHT, "Multiple-choice", "Chart-based",
                                                                    "Junior_High")
    assert r.context_regions[0].as_list() == [0, 0, 100, 60]  # a flat box is read as its corners
    assert r.marks[1].question_id == "3"


@pytest.mark.parametrize(("raw", "label"), [("right", RIGHT), ("wrong", WRONG), ("错误", WRONG), ("半对", HALF_RIGHT),
                                            ("未作答", UNANSWERED), ("未知", UNKNOWN)])
def test_label_vocabulary(tmp_path, raw, label):
    ld = load_level(make_data(tmp_path, [rec(marks=[answer(raw)])]), "L3")
    assert ld.records[0].groups[0].label == label
    assert not ld.unknown_values and not ld.warnings


def test_unknown_label_is_one_line_naming_the_way_out(tmp_path):
    data = make_data(tmp_path, [rec(marks=[answer("correct"), answer("correct", "2")]),
                                rec("p2", marks=[answer("correct")], image="Mathematics/p2.jpg")])
    with pytest.raises(AnnotationError) as e:
        load_level(data, "L3")
    assert len(e.value.problems) == 1  # three marks, one value: one line
    line = str(e.value.problems[0])
    assert "[record p1]" in line and "'correct' on 3 mark(s)" in line
    assert "aliases.yaml" in line and "labels:" in line and "--lenient" in line


def test_lenient_takes_unknown_values_counted(tmp_path):
    m = answer("maybe", dimension2="Essay", dimension1="Table")
    m["educational_stage"] = "University"
    ld = load_level(make_data(tmp_path, [rec(marks=[m, answer("maybe", "2")])]), "L3", lenient=True)
    g = ld.records[0].groups
    assert [x.label for x in g] == [UNKNOWN, UNKNOWN]
    assert (g[0].question_type, g[0].content_format, g[0].stage) == ("Other", "Other", None)
    assert ld.unknown_values == {"markLabel 'maybe' -> unknown": 2, "dimension2 'Essay' -> Other": 1,
                                 "dimension1 'Table' -> Other": 1, "educational_stage 'University' -> Unknown": 1}
    assert len(ld.warnings) == 4 and all("--lenient" in str(w) for w in ld.warnings)


@pytest.mark.parametrize(("section", "where", "raw", "canonical"), [
    ("labels", "markLabel", "correct", RIGHT), ("stages", "educational_stage", "Grade 5", "Elementary"),
    ("question_types", "dimension2", "Essay", "Problem-Solving"), ("content_formats", "dimension1", "Table",
                                                                   "Chart-based")])
def test_aliases_file_maps_the_users_spellings(tmp_path, section, where, raw, canonical):
    m = answer(raw if where == "markLabel" else "right")
    if where == "educational_stage":
        m[where] = raw
    elif where != "markLabel":
        m["attributes"][where] = raw
    data = make_data(tmp_path, [rec(marks=[m])])
    (data / "annotations" / "aliases.yaml").write_text(f"{section}:\n  {raw}: {canonical}\n", encoding="utf-8")
    g = load_level(data, "L3").records[0].groups[0]
    assert {"labels": g.label, "stages": g.stage, "question_types": g.question_type,
            "content_formats": g.content_format}[section] == canonical


def test_aliases_file_refuses_unknown_targets_and_sections(tmp_path):
    data = make_data(tmp_path, [rec()])
    aliases = data / "annotations" / "aliases.yaml"
    aliases.write_text("labels: {correct: yes}\n", encoding="utf-8")
    with pytest.raises(AnnotationError, match=r"labels.correct: .*is not one of right, wrong"):
        load_level(data, "L3")
    aliases.write_text("label: {correct: right}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="label"):
        load_level(data, "L3")


def test_misspelled_keys_and_null_ids(tmp_path):
    data = make_data(tmp_path, [rec(page_Id="p1")])
    with pytest.raises(AnnotationError, match=r"unknown record key 'page_Id' \(did you mean 'page_id'\?\)"):
        load_level(data, "L3")
    kept = load_level(data, "L3", lenient=True)
    assert kept.records[0].extra == {"page_Id": "p1"} and kept.unknown_values == {
        "record key 'page_Id' kept as extra": 1}
    m = answer()
    m["markLable"] = "right"
    with pytest.raises(AnnotationError, match="unknown mark key 'markLable'"):
        load_level(make_data(tmp_path, [rec(marks=[m])]), "L3")
    with pytest.raises(AnnotationError, match=r"answer mark without attributes\.id"):
        load_level(make_data(tmp_path, [rec(marks=[answer(mid=None)])]), "L3")


def test_released_benchmark_values_are_known(tmp_path):
    """The release's normaliser writes Other for Chinese labels and stages it does not know, and keeps anno_result."""
    m = answer("Other", anno_result="right")
    m["educational_stage"] = "Other"
    ld = load_level(make_data(tmp_path, [rec(marks=[m])]), "L3")
    assert (ld.records[0].groups[0].label, ld.records[0].groups[0].stage) == (UNKNOWN, "Other")
    assert not ld.warnings and not ld.records[0].marks[0].extra_attributes


def test_legacy_english_values_and_samples_wrapper(tmp_path):
    m = answer("wrong", "5", dimension1="Chart", dimension2="True/False")
    m["educational_stage"] = "Primary"
    ld = load_level(make_data(tmp_path, [rec(marks=[m])], wrap=True), "L3")
    g = ld.records[0].groups[0]
    assert (g.group_id, g.parent_id, g.question_type, g.content_format, g.stage) == \
        ("5", "5", "True-False", "Chart-based", "Elementary")


def test_no_reference_placeholder(tmp_path):
    ld = load_level(make_data(tmp_path, [rec(marks=[answer(std="答案暂无")])]), "L3")
    assert ld.records[0].groups[0].std is None
    assert ld.records[0].marks[0].std == "答案暂无"  # kept as annotated for round trips


@pytest.mark.parametrize(("records", "message"), [
    ([rec(), rec()], "duplicate record id"),
    ([rec(marks=[answer(box=[[10, 10], [float("nan"), 30]])])], "non-finite"),
    ([rec(marks=[answer(box=[[10, 10], [260, 30]])])], "outside"),
    ([rec(image="../escape.jpg")], "without '..'"),
    ([rec(image="/etc/passwd")], "must be relative"),
    ([rec(width=0)], "positive integers"),
    ([rec(marks=[{"markLabel": "right"}])], "missing bbox_2d"),
    ([{"subject": "x"}], "missing key"),
])
def test_bad_records_name_file_and_record(tmp_path, records, message):
    data = make_data(tmp_path, records)
    with pytest.raises(AnnotationError) as e:
        load_level(data, "L3")
    text = str(e.value)
    assert message in text and "L3.json" in text
    assert "[record " in text


def test_missing_image_and_wrong_size(tmp_path):
    data = make_data(tmp_path, [rec("a", image="Mathematics/a.jpg"), rec("b", image="Mathematics/b.jpg")])
    (data / "images/L3/Mathematics/a.jpg").unlink()
    Image.new("RGB", (10, 10)).save(data / "images/L3/Mathematics/b.jpg")
    with pytest.raises(AnnotationError) as e:
        load_level(data, "L3")
    assert len(e.value.problems) == 2
    assert "record a" in str(e.value) and "not found" in str(e.value)
    assert "record b" in str(e.value) and "10x10" in str(e.value)


def test_damaged_images_are_named_with_their_record(tmp_path):
    """A truncated JPEG, a PNG with a broken chunk, a file that is no image and a decompression-bomb header
    are each one problem naming file and record (and are skipped under --lenient), not a later crash."""
    import struct
    import zlib

    names = ["cut", "png", "junk", "bomb"]
    data = make_data(tmp_path, [rec(n, image=f"Mathematics/{n}.jpg") for n in names])
    folder = data / "images/L3/Mathematics"
    jpeg = (folder / "cut.jpg").read_bytes()
    (folder / "cut.jpg").write_bytes(jpeg[:-100])  # the header is whole, the end is not
    buf = folder / "png.jpg"
    Image.new("RGB", (200, 100), "white").save(buf, format="PNG")
    raw = bytearray(buf.read_bytes())
    raw[-20] ^= 0xFF  # inside the image data: the chunk CRC no longer matches
    buf.write_bytes(bytes(raw))
    (folder / "junk.jpg").write_bytes(b"not an image at all")
    def png_chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    (folder / "bomb.jpg").write_bytes(b"\x89PNG\r\n\x1a\n"  # a header claiming 2e10 pixels
                                      + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 200000, 100000, 8, 2, 0, 0, 0))
                                      + png_chunk(b"IDAT", zlib.compress(b"")) + png_chunk(b"IEND", b""))
    with pytest.raises(AnnotationError) as e:
        load_level(data, "L3")
    text = str(e.value)
    assert len(e.value.problems) == 4
    for n in names:
        assert f"record {n}" in text and f"{n}.jpg" in text
    assert "truncated (no JPEG end marker)" in text and "decompression bomb" in text.lower()
    assert load_level(data, "L3", lenient=True).skipped
    # the scorer's check (it reads no pixel): each header's size only, so a file that is no image, or a bomb's
    # header, is still named; the cut JPEG and the broken PNG chunk are the evaluator's and the trainer's to find
    with pytest.raises(AnnotationError) as e:
        load_level(data, "L3", whole_images=False)
    assert sorted(p.record_id for p in e.value.problems) == ["bomb", "junk"]


def test_malformed_json(tmp_path):
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations/L1.json").write_text('[{"id": 1,,]')
    with pytest.raises(AnnotationError, match=r"L1\.json: malformed JSON"):
        load_level(tmp_path, "L1")


def test_lenient_skips_and_counts(tmp_path):
    data = make_data(tmp_path, [rec("good"), rec("bad", marks=[answer(box=[[0, 0], [999, 999]])]), rec("good")])
    ld = load_level(data, "L3", lenient=True)
    assert [r.record_id for r in ld.records] == ["good"]
    assert len(ld.skipped) == 2
    assert {p.record_id for p in ld.skipped} == {"bad", "good"}


def test_round_trip_is_exact(tmp_path):
    m = answer("半对", "2-1", **{"纬度1": "文本", "纬度2": "解答", "extra_key": [1, 2]})
    m["学段"] = "高中"
    m["custom"] = "kept"
    data = make_data(tmp_path, [rec(marks=[m, answer("正确", "2-2", std=None)], note="x", page_id="pg")])
    first = load_level(data, "L3", lenient=True).records  # lenient: keys outside the format kept as extras
    write_level(tmp_path, "L3", first)
    second = load_level(tmp_path, "L3", lenient=True).records
    assert first == second
    assert second[0].marks[0].extra_attributes == {"extra_key": [1, 2]}
    assert second[0].marks[0].extra == {"custom": "kept"}
    assert second[0].extra == {"note": "x"} and second[0].page_id == "pg"
    text = (tmp_path / "annotations/L3.json").read_text(encoding="utf-8")
    write_level(tmp_path, "L3", second)
    assert (tmp_path / "annotations/L3.json").read_text(encoding="utf-8") == text


def test_load_dataset_finds_levels(tmp_path):
    make_data(tmp_path, [rec()], level="L3")
    assert list(load_dataset(tmp_path)) == ["L3"]
    with pytest.raises(FileNotFoundError):
        load_dataset(tmp_path / "nope")


@pytest.mark.parametrize(("record", "message"), [
    (rec(id=None), "id must be"), (rec(id=["a"]), "id must be"), (rec(id=" "), "id must be"),
    (rec(id=True), "id must be"), (rec(marks=[answer(hand=["1", "2"])]), "attributes.hand must be text"),
    (rec(marks=[answer(std={"a": 1})]), "attributes.std must be text"),
])
def test_fields_of_the_wrong_type_are_named(tmp_path, record, message):
    data = make_data(tmp_path, [record])
    with pytest.raises(AnnotationError, match=message):
        load_level(data, "L3")


def test_aliases_are_hashed_with_the_annotations(tmp_path):
    from gbtrain.data.annotations import annotations_sha256

    data = make_data(tmp_path, [rec()])
    before = annotations_sha256(data)
    (data / "annotations" / "aliases.yaml").write_text("labels: {correct: right}\n", encoding="utf-8")
    assert annotations_sha256(data) != before


def test_points_are_typed_fields_and_round_trip_exactly(tmp_path):
    """full_score, score, score_2, rubric, rubric_version, comment and arbitration are read onto the marks (not kept
    as extras), taken by the group from whichever of its marks give them, and written back as annotated."""
    points = {"full_score": 6, "score": 4.5, "score_2": 5, "rubric": "R7: 3 points a step", "rubric_version": 2,
              "comment": "second step half right", "arbitration": "settled at 4.5 by the head of department"}
    marks = [answer("半对", "2-1", **points), answer("半对", "2-1", box=[[60, 10], [90, 30]], full_score=6),
             answer("正确", "2-2")]
    data = make_data(tmp_path, [rec(marks=marks)])
    first = load_level(data, "L3").records
    g = first[0].groups[0]
    assert (g.full_score, g.score, g.score_2, g.rubric, g.rubric_version, g.comment, g.arbitration) == \
        (6, 4.5, 5, "R7: 3 points a step", "2", "second step half right", "settled at 4.5 by the head of department")
    assert first[0].marks[0].extra_attributes == {} and first[0].groups[1].full_score is None
    write_level(tmp_path, "L3", first)
    written = json.loads((tmp_path / "annotations/L3.json").read_text(encoding="utf-8"))
    assert {k: written[0]["marks"][0]["attributes"][k] for k in points} == {**points, "rubric_version": "2"}
    assert "score" not in written[0]["marks"][1]["attributes"] and "full_score" not in written[0]["marks"][2][
        "attributes"]  # a mark's own points only: binary-only marks are written as before
    assert load_level(tmp_path, "L3").records == first


@pytest.mark.parametrize(("attrs", "message"), [
    ({"score": 3}, r"group 1-1: score without full_score: add full_score"),
    ({"score_2": 3}, r"group 1-1: score_2 without full_score"),
    ({"full_score": 5}, r"group 1-1: full_score 5 without the teacher's score: add score \(0\.\.5\)"),
    ({"full_score": 0, "score": 0}, r"group 1-1: full_score 0 must be above 0"),
    ({"full_score": 5, "score": 6}, r"group 1-1: score 6 is outside 0\.\.5"),
    ({"full_score": 5, "score": -1}, r"group 1-1: score -1 is outside 0\.\.5"),
    ({"full_score": 5, "score": 2, "score_2": 5.5}, r"group 1-1: score_2 5\.5 is outside 0\.\.5"),
    ({"full_score": 5, "score": "3"}, r"mark 0 attributes\.score must be a number of points, got str '3'"),
    ({"full_score": True, "score": 1}, r"attributes\.full_score must be a number of points, got bool"),
    ({"full_score": float("nan"), "score": 1}, r"attributes\.full_score must be a finite number of points, got nan"),
    ({"full_score": 5, "score": 10 ** 400}, r"attributes\.score must be a finite number of points"),
    ({"full_score": 5, "score": 1, "comment": ["a"]}, r"attributes\.comment must be text"),
])
def test_bad_points_are_one_line_naming_file_record_and_group(tmp_path, attrs, message):
    data = make_data(tmp_path, [rec(marks=[answer(**attrs)])])
    with pytest.raises(AnnotationError, match=message) as e:
        load_level(data, "L3")
    assert len(str(e.value).splitlines()) == 1 and "L3.json [record p1]" in str(e.value)
    assert load_level(data, "L3", lenient=True).skipped[0].record_id == "p1"  # lenient: the record is left out, listed


def test_a_groups_marks_must_agree_on_points_and_question_marks_carry_none(tmp_path):
    marks = [answer(full_score=10, score=4), answer(box=[[60, 10], [90, 30]], full_score=5, score=4)]
    with pytest.raises(AnnotationError, match=r"\[record p1\]: group 1-1: its marks disagree on full_score \(10, 5\)"):
        load_level(make_data(tmp_path, [rec(marks=marks)]), "L3")
    ctx = {"bbox_2d": [0, 0, 100, 60], "markLabel": "question", "attributes": {"id": "1", "full_score": 10}}
    with pytest.raises(AnnotationError, match=r"mark 1: points on a question mark"):
        load_level(make_data(tmp_path, [rec(marks=[answer(), ctx])]), "L3")

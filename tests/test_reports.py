from pathlib import Path

from gbtrain.text import safe_name


def test_ids_become_file_names_that_stay_in_their_folder(tmp_path):
    out = tmp_path / "overlays"
    hostile = ["x/../../../../tmp/f", "..", "/etc/passwd", "a\\b", "页 1", "", "a" * 500, "C:\\x"]
    names = [safe_name(i) for i in hostile]
    assert len(set(names)) == len(names)
    for name in names:
        path = (out / f"L3-af_{name}.png").resolve()
        assert path.parent == out.resolve() and "/" not in name and "\\" not in name and len(name) < 120
    assert safe_name("page-0001_L3") == "page-0001_L3"  # ordinary ids keep their name
    assert safe_name("a/b") != safe_name("a_b")
    assert Path(safe_name("x/../../../../tmp/f")).name == safe_name("x/../../../../tmp/f")


def _report(limit=2, judge="rule", groups=10, settings=("L1-af",)):
    meta = {"model": "m", "annotations_sha256": "abc", "limit": limit, "judge": judge, "scorer_sha256": "s"}
    setting = {"n_groups": groups, "n_records": 2, "accuracy": 0.1, "localized": 0.2, "recognized": 0.1,
               "reasoned": 0.1, "map_20_50": 1.0, "coverage": {"unparsable": 0}}
    return {"meta": meta, "settings": dict.fromkeys(settings, setting), "table2": {"Overall": 0.1}}


def test_gains_only_between_reports_of_the_same_records_and_scoring():
    import pytest

    from gbtrain.evaluation.reports import compare

    text, rows = compare(_report(), _report())
    assert "| L1-af |" in text and rows[0]["accuracy"]["gain"] == 0
    for other, what in ((_report(limit=4), "limit"), (_report(judge="vllm:x"), "judge"),
                        (_report(groups=12), "L1-af: 10 vs 12 groups"), (_report(settings=("L3-ab",)), "no setting")):
        with pytest.raises(ValueError, match=what):
            compare(_report(), other)

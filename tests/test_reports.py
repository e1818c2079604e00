from pathlib import Path

from gbtrain.reports import safe_name


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

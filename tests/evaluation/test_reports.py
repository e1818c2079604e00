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


def test_points_reach_the_report_and_the_gains_with_undefined_kappa_spelled_out():
    """The points figures of the scorer (gbtrain.metric.points) in report.md's table and the gains table: a base
    model that gives no score (worst scores: MAE 2 of full 2, 3) against a fine-tuned one that agrees exactly; a
    kappa that is 0/0 reads "undefined", never 0; other bands are refused."""
    import pytest

    from gbtrain.evaluation.reports import compare, markdown
    from gbtrain.metric.points import PointsOptions, Reference, points_report

    refs = [Reference(("r1", "1"), 2, 2), Reference(("r1", "2"), 3, 0), Reference(("r2", "1"), 2, 2)]
    base, sft = _report(), _report()
    base["settings"] = {"L1-af": {**base["settings"]["L1-af"], "points": points_report(refs, [], PointsOptions())}}
    sft["settings"] = {"L1-af": {**sft["settings"]["L1-af"], "points": points_report(
        refs, [(r.key, r.score) for r in refs], PointsOptions())}}
    base["table2"], base["three_turn"] = {"Overall": 0.1}, []
    text, _ = compare(base, sft)
    row = next(line for line in text.splitlines() if line.startswith("| L1-af | 3 |"))
    # base: worst scores 0, 3, 0 against 2, 0, 2: errors 2, 3, 2 -> MAE 7/3; normalised (1 + 1 + 1) / 3
    assert row.startswith("| L1-af | 3 | 2.333 → 0.000 | 1.000 → 0.000 | ")
    # kappa: bands (teacher -> base) 2->0, 0->2, 2->0: observed disagreement 1, chance 1 - (1*2 + 2*1)/9 = 5/9, so
    # 1 - 9/5 = -0.8 (quadratic the same: only bands 0 and 2 are used); the fine-tuned one agrees: 1
    assert row.endswith("| -0.800 → 1.000 | -0.800 → 1.000 |")
    report = {**base, "meta": {**base["meta"], "backend": "hf"}}
    report["settings"]["L1-af"].update(fn=0, fp=0, coverage={"unparsable": 0, "missing": 0})
    md = markdown(report)
    assert "## Points against the teacher" in md and "| L1-af | 3 | 2.333 | 1.000 | -0.333 | 3 | 3 |" in md
    one_band = [Reference(("r1", "1"), 2, 2)]
    report["settings"]["L1-af"]["points"] = points_report(one_band, [(("r1", "1"), 2)], PointsOptions())
    assert "| undefined | undefined |" in markdown(report)
    with pytest.raises(ValueError, match="point_bands"):
        compare(base, {**sft, "meta": {**sft["meta"], "point_bands": [0.5]}})


def test_report_md_shows_the_soft_scores_and_what_decided_the_answers():
    from gbtrain.evaluation.reports import soft_table

    settings = {"L1-af": {"soft_scores": {"text_f1": 0.5, "text_anls": 0.25, "answer_f1": 1.0, "answer_anls": None},
                          "answer_gate": {"by_rule": 3, "by_judge": 1, "undecided": 2, "no_reference": 1,
                                          "types": {}}},
                "L1-ab": {"soft_scores": {"text_f1": 1.0, "text_anls": 1.0, "answer_f1": 0.0, "answer_anls": 0.0},
                          "answer_gate": {"by_rule": 0, "by_judge": 0, "types": {}}},
                "L3-af": {"accuracy": 0.1}}  # a report from before soft scores: no row
    lines = soft_table(settings)
    assert "| L1-af | 50.0 | 25.0 | 100.0 | – | 3 / 1 / 2 | 1 |" in lines
    assert "| L1-ab | 100.0 | 100.0 | 0.0 | 0.0 | – | – |" in lines  # a report from before no_reference: –
    assert not any(line.startswith("| L3-af") for line in lines) and soft_table({"L3-af": {}}) == []

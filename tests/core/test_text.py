"""What leaves the program as text (gbtrain.text): file names from ids, CSV cells, text quoted in Markdown.
(redact: tests/inference/test_backends.py, where the backends that need it are.)"""

from gbtrain.text import brief, csv_cell, markdown_code, markdown_text, safe_name


def test_a_cell_that_would_start_a_formula_is_text():
    assert csv_cell("=HYPERLINK(\"http://x\", \"click\")") == "'=HYPERLINK(\"http://x\", \"click\")"
    assert [csv_cell(v) for v in ("+1+1", "@SUM(A1)", "-2+3", "\tx", "\r=1")] == [
        "'+1+1", "'@SUM(A1)", "'-2+3", "'\tx", "'\r=1"]
    assert [csv_cell(v) for v in ("-5", "+3.5", "-0,25", "x = 3", "", 7, None)] == [
        "-5", "+3.5", "-0,25", "x = 3", "", 7, None]


def test_quoted_text_is_shown_as_written_in_markdown():
    """The Markdown source; tests/evaluation/test_html_report.py renders it."""
    assert markdown_text("<img src=x onerror=alert(1)>") == "\\<img src=x onerror=alert(1)\\>"
    assert markdown_text("a|b `c`\nd &") == "a\\|b \\`c\\` d \\&"
    assert markdown_text("![t](u) my_exam _x_ __y__ # 1. x") == "!\\[t\\](u) my_exam \\_x\\_ \\_\\_y\\_\\_ # 1. x"
    assert markdown_text("# h") == "\\# h" and markdown_text("12. x") == "12\\. x"
    assert markdown_text(50176) == "50176"
    assert markdown_code("a`b <i>") == "``a`b <i>``" and markdown_code("`x") == "`` `x ``"


def test_safe_names_stay_in_their_folder_and_never_collide():
    assert safe_name("p1_q3") == "p1_q3"
    assert "/" not in safe_name("../../etc/passwd") and safe_name("../../etc/passwd").endswith(
        "etc_passwd-3754d6cb3a")
    assert safe_name("a/b") != safe_name("a_b")


def test_safe_names_keep_the_letters_of_every_script():
    """Page ids come from image names (期中试卷_03.jpg): letters, digits and marks of any script stay; separators,
    controls and symbols do not; a name that is not NFC, a Windows device name or one cut to length gets a hash."""
    assert [safe_name(n) for n in ("期中试卷_03", "Prüfung_é", "Ⅻ-①")] == ["期中试卷_03", "Prüfung_é", "Ⅻ-①"]
    decomposed = "Pru\u0308fung"  # as macOS's HFS+ stores names
    assert safe_name(decomposed).startswith("Prüfung-") and safe_name(decomposed) != safe_name("Prüfung")
    for hostile in ("期中/../试卷", "a\\b", "x\u200by", "C:x", 'a"b', "a<b>|?*", "tab\tname", "\ud800x"):
        name = safe_name(hostile)
        assert name != hostile and not any(c in name for c in '/\\:"<>|?*\t\u200b') and name.encode("utf-8")
    assert safe_name("CON") != "CON" and safe_name("com1.txt") != "com1.txt" and safe_name("CONTENT") == "CONTENT"
    long = safe_name("期" * 200)
    assert len(long.encode("utf-8")) <= 100 + 11 and long.startswith("期" * 33)


def test_brief_quotes_a_long_value_cut_with_its_closing_quote():
    assert brief("short") == "'short'" and brief(12) == "12"
    long = brief("/tmp/" + "x" * 200)
    assert len(long) == 80 and long.startswith("'/tmp/xx") and long.endswith("x…'")
    assert brief(list(range(100)), 20) == "[0, 1, 2, 3, 4, 5, …"

"""What leaves the program as text (gbtrain.text): file names from ids, CSV cells, text quoted in Markdown.
(redact: tests/test_backends.py, where the backends that need it are.)"""

from gbtrain.text import csv_cell, markdown_text, safe_name


def test_a_cell_that_would_start_a_formula_is_text():
    assert csv_cell("=HYPERLINK(\"http://x\", \"click\")") == "'=HYPERLINK(\"http://x\", \"click\")"
    assert [csv_cell(v) for v in ("+1+1", "@SUM(A1)", "-2+3", "\tx", "\r=1")] == [
        "'+1+1", "'@SUM(A1)", "'-2+3", "'\tx", "'\r=1"]
    assert [csv_cell(v) for v in ("-5", "+3.5", "-0,25", "x = 3", "", 7, None)] == [
        "-5", "+3.5", "-0,25", "x = 3", "", 7, None]


def test_quoted_text_is_shown_as_written_in_markdown():
    assert markdown_text("<img src=x onerror=alert(1)>") == "&lt;img src=x onerror=alert(1)&gt;"
    assert markdown_text("a|b `c`\nd &") == "a\\|b \\`c\\` d &amp;"
    assert markdown_text(50176) == "50176"


def test_safe_names_stay_in_their_folder_and_never_collide():
    assert safe_name("p1_q3") == "p1_q3"
    assert "/" not in safe_name("../../etc/passwd") and safe_name("../../etc/passwd").endswith(
        "etc_passwd-3754d6cb3a")
    assert safe_name("a/b") != safe_name("a_b")

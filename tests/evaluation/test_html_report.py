"""report.html and gains.html: built from a real run folder (synthetic pages, predictions made from their
ground truth with one fault per record, scored by the real scorer and written by the evaluator's own
report writer), checked as text and, after their JavaScript ran, in a real headless Chromium."""

import base64
import io
import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from gbtrain.coords import PixelBudget
from gbtrain.data.conversations import answer_items
from gbtrain.evaluation.engine import EvalOptions, Evaluator, Setting, merge_turns, parse_settings
from gbtrain.evaluation.html_report import OVERLAY_WIDTH, markdown_html, run_page
from gbtrain.evaluation.reports import OUTCOMES, outcome
from gbtrain.evaluation.run import write_reports
from gbtrain.metric.judges import RuleJudge

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ('</pre><script>document.title="pwned"</script><img src="x" onerror="document.title=\'pwned\'">'
           '<!-- & "quotes" -->')
SETTINGS = "L1-af,L3-af,L3-ab"
LIMIT = 6


def faulty_reply(record, index: int, faults: bool) -> str | None:
    """The record's ground-truth reply with one fault chosen by its index (None: no line at all)."""
    items = answer_items(record, "qwen25", PixelBudget())
    if not faults:
        return json.dumps(items[1:], ensure_ascii=False)  # the first group goes unanswered
    kind = index % LIMIT
    if kind == 1:
        items[0]["text"] = "zzzzzzzzzzzzzzzzzzzz"  # transcription fails
    elif kind == 2:
        items[0]["answer"] = "not the answer 98765"  # wrong answer (answer-free only)
    elif kind == 3:
        items[0]["correctness"] = not items[0]["correctness"]  # wrong judgment
    elif kind == 4:
        return HOSTILE  # unparsable: nothing localized
    elif kind == 5:
        return None  # missing
    return json.dumps(items, ensure_ascii=False)


def three_turns(reply: str) -> list[str]:
    """The reply as the three-turn decomposition's turns: locate + transcribe, solve, compare."""
    if reply == HOSTILE:
        return [HOSTILE, "[]", "[]"]
    items = json.loads(reply)
    return [json.dumps([{k: i[k] for k in keys} for i in items], ensure_ascii=False)
            for keys in (("bbox_2d", "text"), ("answer",), ("correctness",))]


def make_run(data, out: Path, faults: bool = True) -> dict:
    """A run folder as eval/run_eval.py leaves it, from predictions written the way the evaluator writes them."""
    ev = Evaluator(None, data, out, EvalOptions("qwen25", PixelBudget(), limit=LIMIT))
    settings = [*parse_settings(SETTINGS), Setting("L1", "answer-free", three_turn=True)]
    for s in settings:
        path = ev.predictions_path(s)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            for i, r in enumerate(ev.records(s.level)):
                reply = faulty_reply(r, i, faults)
                if reply is None:
                    continue
                row = {"id": r.record_id, "response": reply, "setting": s.name}
                if s.three_turn:
                    row |= {"turns": three_turns(reply), "response": merge_turns(three_turns(reply))}
                f.write(json.dumps(row) + "\n")
    scored = {s.name: ev.score(s, RuleJudge()) for s in settings}
    meta = {"model": "<b>tiny</b>" if faults else "base", "backend": "vllm", "coords": "qwen25", "judge": "rule",
            "min_pixels": 3136, "max_pixels": 1003520, "limit": LIMIT, "annotations_sha256": "a", "scorer_sha256": "s"}
    report = write_reports(ev, settings, scored, meta, None, overlays=3)
    return {"report": report, "groups": {n: r["groups"] for n, r in scored.items()}}


@pytest.fixture(scope="module")
def run(synth_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("html") / "sft"
    return make_run(synth_dir, out) | {"out": out}


# ----------------------------------------------------------------------------- a small DOM from HTML text
VOID = {"img", "meta", "br", "input", "link", "hr", "source", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict, parent=None):
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def all(self, tag: str | None = None, cls: str | None = None) -> list["Node"]:
        found = []
        for c in self.children:
            if isinstance(c, Node):
                if (tag is None or c.tag == tag) and (cls is None or cls in c.attrs.get("class", "").split()):
                    found.append(c)
                found += c.all(tag, cls)
        return found


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = self.node = Node("#root", {})

    def handle_starttag(self, tag, attrs):
        n = Node(tag, {k: v if v is not None else "" for k, v in attrs}, self.node)
        self.node.children.append(n)
        if tag not in VOID:
            self.node = n

    def handle_endtag(self, tag):
        n = self.node
        while n.parent is not None and n.tag != tag:
            n = n.parent
        if n.parent is not None:
            self.node = n.parent

    def handle_data(self, data):
        self.node.children.append(data)


def dom(text: str) -> Node:
    b = _Builder()
    b.feed(text)
    return b.root


def table_after(root: Node, heading: str) -> Node:
    """The first table after the heading that starts with `heading`."""
    seen = False
    for n in root.all():
        if n.tag in ("h1", "h2", "h3") and n.text().startswith(heading):
            seen = True
        elif seen and n.tag == "table":
            return n
    raise AssertionError(f"no table after {heading!r}")


def cells(table: Node) -> list[list[str]]:
    return [[c.text().strip() for c in tr.children if isinstance(c, Node)] for tr in table.all("tr")]


def expected_cards(run, setting=None, outcome_key=None, subject=None) -> set[tuple[str, str]]:
    keep = set()
    for name, groups in run["groups"].items():
        for g in groups:
            if ((setting is None or name == setting) and (subject is None or g["subject"] == subject)
                    and (outcome_key is None or outcome(g) == outcome_key)):
                keep.add((name, g["record_id"]))
    return keep


def card_keys(root: Node, visible: bool) -> set[tuple[str, str]]:
    return {(c.attrs["data-setting"], c.attrs["data-record"]) for c in root.all("article", "card")
            if ("hidden" in c.attrs) != visible}


# ----------------------------------------------------------------------------- the page as written
def test_run_folder_gets_a_self_contained_page(run):
    out, report = run["out"], run["report"]
    text = (out / "report.html").read_text(encoding="utf-8")
    root = dom(text)
    assert "groups" not in next(iter(json.loads((out / "report.json").read_text())["settings"].values()))
    # every scored (setting, record) has a card; every fault kind gave its outcome at least once
    assert card_keys(root, visible=True) == expected_cards(run)
    assert {outcome(g) for gs in run["groups"].values() for g in gs} == set(OUTCOMES)
    # self-contained: no file, network or CDN reference; images are data: URIs, overlays downscaled
    assert not [n for n in root.all() if n.tag in ("link", "iframe") or n.attrs.get("src", "data:").split(":")[0]
                not in ("data",)]
    assert "http://" not in text and "https://" not in text
    imgs = [n.attrs["src"] for n in root.all("img")]
    overlays = [Image.open(io.BytesIO(base64.b64decode(s.split(",", 1)[1]))) for s in imgs if "jpeg" in s]
    assert len(overlays) == len(list((out / "overlays").glob("*.png"))) == 3 * 3  # 3 per single-turn L1/L3 setting
    assert all(im.width <= OVERLAY_WIDTH for im in overlays) and max(im.width for im in overlays) == OVERLAY_WIDTH
    assert len(text) < 3_000_000
    # the hostile reply is text in its <pre>, and the page holds exactly one script (its own)
    assert len(root.all("script")) == 1 and not [n for n in root.all("img") if n.attrs.get("src") == "x"]
    assert any(HOSTILE in p.text() for p in root.all("pre", "reply"))
    assert "&lt;script&gt;document.title" in text and "<b>tiny</b>" not in text
    # a three-turn record shows its raw turns, then the merged reply that was scored
    card = next(c for c in root.all("article", "card") if c.attrs["data-setting"] == "L1-af-3t")
    first = json.loads((out / "predictions" / "L1-af-3t.jsonl").read_text().splitlines()[0])
    assert [p.text() for p in card.all("pre", "reply")] == [*first["turns"], first["response"]]
    assert [d.text().split(" (")[0] for d in card.all("summary")] == ["turn 1", "turn 2", "turn 3",
                                                                       "scored reply, merged from the turns"]
    # report.md's tables, figure for figure
    md = (out / "report.md").read_text(encoding="utf-8")
    assert cells(table_after(dom(markdown_html(md)), "Table 2")) == cells(table_after(root, "Table 2"))
    assert report["table2"]["L3"]["Acc-F"] is not None


def test_markdown_tables_and_escaping():
    md = "# Title `a<b`\n\n| x | y |\n|---|---:|\n| <i>1</i> | 2.0 |\n\nafter\n- item & more\n"
    root = dom(markdown_html(md))
    assert cells(root.all("table")[0]) == [["x", "y"], ["<i>1</i>", "2.0"]]
    assert root.all("td")[1].attrs["style"] == "text-align:right" and not root.all("i")
    assert root.all("code")[0].text() == "a<b" and root.all("li")[0].text() == "item & more"


HOSTILE_NAMES = ("<img src=x onerror=alert(1)>", "![t](http://tracker.example/p.png)", "[click](javascript:alert(1))",
                 "a|b", "my_exam *1* `x` ~~y~~", "# heading", "1. item", "- item", "back\\slash &amp; &lt;", "第8题 Q5")


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_quoted_text_renders_as_written_in_a_table_a_paragraph_and_a_code_span(name):
    """Issue 57: a name from a user's file (a folder, a teacher's reason) quoted by markdown_text in a table cell and
    a paragraph, or by markdown_code, shows letter for letter in the rendered page: no image, link, emphasis, HTML
    or extra cell."""
    from gbtrain.text import markdown_code, markdown_text

    md = (f"| name | n |\n|---|---:|\n| {markdown_text(name)} | 1 |\n\n{markdown_text(name)}\n\n"
          f"Folder {markdown_code(name)}.\n")
    root = dom(markdown_html(md))
    assert cells(root.all("table")[0]) == [["name", "n"], [" ".join(name.split()), "1"]]
    assert root.all("p")[0].text() == " ".join(name.split())
    assert root.all("code")[0].text() == " ".join(name.split())
    assert not [n for n in root.all() if n.tag in ("img", "a", "em", "strong", "del", "h1", "ol", "ul")]


def test_page_renders_without_predictions_or_overlays(run, tmp_path):
    """A folder whose predictions were moved away still renders: cards say there was no reply."""
    page = run_page(tmp_path, run["report"], run["groups"])
    root = dom(page)
    assert len(root.all("article", "card")) == len(expected_cards(run))
    assert all("no reply" in c.text() for c in root.all("article", "card"))


# ----------------------------------------------------------------------------- in a real browser
def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but chromium is not installed: scripts/setup_env.sh installs it when run as root")
        pytest.skip("chromium is not installed (as root: apt-get install chromium); only these browser tests need it")
    return exe


def browse(url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", f"--user-data-dir={profile}", *args, url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def rendered(path: Path, tmp_path: Path, fragment: str = "") -> Node:
    return dom(browse(path.as_uri() + fragment, tmp_path, "--dump-dom").stdout)


def not_blank(png: Path, size: tuple[int, int]) -> None:
    im = Image.open(png).convert("L")
    assert im.size == size
    hist = im.histogram()
    assert sum(hist[:200]) > 0.02 * size[0] * size[1]  # text, tables and images, not a white page
    assert len([h for h in hist if h]) > 20


def test_browser_shows_the_report_and_its_filters(run, tmp_path):
    page = run["out"] / "report.html"
    root = rendered(page, tmp_path)
    t2 = run["report"]["table2"]
    head, row = cells(table_after(root, "Table 2"))
    levels = [lvl for lvl in ("L1", "L2", "L3") if lvl in t2]
    expect = []
    for lvl in levels:
        r = t2[lvl]
        expect += [f"{r['mAP']:.1f}"] + ["–" if r[k] is None else f"{100 * r[k]:.1f}" for k in ("Acc-F", "Acc-B")]
    assert [c.split(" [")[0] for c in row] == [*expect, f"{100 * t2['Overall']:.1f}"] and head[-1] == "Overall"
    assert "[" in row[-2]  # L3 answer-based, on 6 pages, with its interval
    everything = expected_cards(run)
    assert card_keys(root, visible=True) == everything and not card_keys(root, visible=False)
    assert root.all("strong")[0].text() == f"{len(everything)} of {len(everything)} records shown"
    # the hostile reply stayed text after the scripts ran
    assert root.all("title")[0].text() != "pwned" and len(root.all("script")) == 1
    assert any(HOSTILE in p.text() for p in root.all("pre", "reply"))
    # a fragment preselects filters; the page shows only matching records
    for fragment, want in (("#outcome=cer", expected_cards(run, outcome_key="cer")),
                           ("#setting=L3-af&outcome=ans", expected_cards(run, "L3-af", "ans")),
                           ("#subject=English&outcome=PASS", expected_cards(run, None, "PASS", "English"))):
        root = rendered(page, tmp_path, fragment)
        assert want and want != everything, fragment
        assert card_keys(root, visible=True) == want, fragment
        assert card_keys(root, visible=False) == everything - want, fragment
        assert root.all("strong")[0].text() == f"{len(want)} of {len(everything)} records shown"
    shot = tmp_path / "report.png"
    browse(page.as_uri(), tmp_path, f"--screenshot={shot}", "--window-size=1280,1600", "--hide-scrollbars")
    not_blank(shot, (1280, 1600))


def test_browser_shows_the_comparison(run, synth_dir, tmp_path):
    base_out = tmp_path / "base"
    base = make_run(synth_dir, base_out, faults=False)["report"]
    gains = tmp_path / "cmp" / "gains.md"
    proc = subprocess.run([sys.executable, str(ROOT / "eval" / "compare.py"), str(base_out / "report.json"),
                           str(run["out"] / "report.json"), "--out", str(gains)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    page = gains.with_suffix(".html")
    assert page.is_file() and gains.with_suffix(".png").is_file()
    root = rendered(page, tmp_path)
    rows = cells(table_after(root, "Gains of"))
    sft = run["report"]
    assert [r[0] for r in rows[1:]] == sorted(sft["settings"])
    for r in rows[1:]:
        b, s = base["settings"][r[0]]["accuracy"], sft["settings"][r[0]]["accuracy"]
        # the gain, its paired interval (none for a setting on 1 page: said under the table) and McNemar's p
        assert r[1].startswith(f"{100 * b:.1f} → {100 * s:.1f} ({100 * (s - b):+.1f}") and ", p " in r[1]
        assert ("[" in r[1]) == (sft["settings"][r[0]]["intervals"]["undefined"] is None)
    funnel = cells(table_after(root, "Funnels, base"))
    assert funnel[1][0] == "L1-af" and funnel[1][-1].startswith(f"{100 * base['settings']['L1-af']['accuracy']:.1f} →")
    links = {a.attrs["href"] for a in root.all("a")}
    assert {(page.parent / h).resolve() for h in links} == {base_out / "report.html", run["out"] / "report.html"}
    assert len(root.all("img")) == 1 and root.all("img")[0].attrs["src"].startswith("data:image/png;base64,")
    shot = tmp_path / "gains.png"
    browse(page.as_uri(), tmp_path, f"--screenshot={shot}", "--window-size=1000,900", "--hide-scrollbars")
    not_blank(shot, (1000, 900))

"""Self-contained HTML pages for an evaluation run and for two runs compared: one file each, no server and
no network (images as data: URIs, CSS and JavaScript inline), so a report can be mailed or archived as is.

Every text that comes from a model, an annotation file or a command line is HTML-escaped: replies are
hostile input, and a reply holding `<script>` must show as text.
"""

from __future__ import annotations

import base64
import io
import json
import os
from html import escape
from pathlib import Path
from urllib.parse import urlencode

from markdown_it import MarkdownIt
from PIL import Image

from gbtrain.evaluation.reports import GATES, OUTCOMES, markdown, outcome
from gbtrain.metric.scoring import Predictions, read_predictions
from gbtrain.text import safe_name

OVERLAY_WIDTH = 900  # px: overlays are downscaled to this for the page (the PNGs beside it keep full size)
REPLY_CHARS = 4000  # a longer reply is cut on the page; the whole of it stays in predictions/<setting>.jsonl
FILTERS = (("setting", "setting"), ("outcome", "outcome"), ("subject", "subject"), ("stage", "stage"),
           ("qtype", "question type"))

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 40px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}h3{font-size:15px;margin:0 0 6px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 7px}th{background:#f3f3f3}
td.num,th.num{text-align:right}code{background:#f3f3f3;padding:0 3px}img.plot{max-width:100%;margin:6px 0}
.funnels{display:flex;flex-wrap:wrap;gap:14px}.funnel{border:1px solid #ddd;padding:8px;width:270px}
.gate{display:flex;align-items:center;gap:6px;font-size:12px}.gate span.name{width:78px}
.bar{background:#e4e4e4;height:12px;flex:1}.bar div{background:#3b7dd8;height:12px}
.pos{color:#1a7f37}.neg{color:#c62828}
.filters{position:sticky;top:0;background:#fff;padding:8px 0;border-bottom:1px solid #ddd;z-index:1}
.filters label{margin-right:12px}.card{border:1px solid #ccc;margin:12px 0;padding:10px}
.card img{max-width:100%;display:block;margin:6px 0}.noimg{color:#777;font-style:italic}
pre.reply{white-space:pre-wrap;word-break:break-all;background:#f8f8f8;padding:6px;max-height:320px;overflow:auto}
tr.dim{opacity:.35}.tag{font-size:12px;background:#fde2e1;padding:1px 5px;margin-left:6px}
.o-PASS{color:#1a7f37}.o-loc,.o-cer,.o-ans,.o-judg{color:#c62828}
"""

# Filters read and write the URL fragment (#outcome=cer&subject=English), so a filtered view is a link.
# A card is shown when its setting and subject match and one of its groups matches every group filter.
_JS = """
(function () {
  var keys = FILTER_KEYS;
  var cards = Array.prototype.slice.call(document.querySelectorAll("article.card"));
  var counter = document.getElementById("shown");
  function select(k) { return document.getElementById("f-" + k); }
  function fromUrl() {
    var p = new URLSearchParams(location.hash.slice(1) || location.search.slice(1));
    keys.forEach(function (k) {
      var v = p.get(k) || "", s = select(k);
      s.value = Array.prototype.some.call(s.options, function (o) { return o.value === v; }) ? v : "";
    });
  }
  function apply() {
    var f = {}, shown = 0;
    keys.forEach(function (k) { f[k] = select(k).value; });
    cards.forEach(function (c) {
      var rows = c.querySelectorAll("tr[data-outcome]"), any = !(f.outcome || f.stage || f.qtype);
      Array.prototype.forEach.call(rows, function (r) {
        var m = (!f.outcome || r.dataset.outcome === f.outcome) && (!f.stage || r.dataset.stage === f.stage)
          && (!f.qtype || r.dataset.qtype === f.qtype);
        r.classList.toggle("dim", !m);
        any = any || m;
      });
      var ok = any && (!f.setting || c.dataset.setting === f.setting)
        && (!f.subject || c.dataset.subject === f.subject);
      c.hidden = !ok;
      shown += ok ? 1 : 0;
    });
    counter.textContent = shown + " of " + cards.length + " records shown";
  }
  keys.forEach(function (k) {
    select(k).addEventListener("change", function () {
      var p = new URLSearchParams();
      keys.forEach(function (j) { if (select(j).value) p.set(j, select(j).value); });
      history.replaceState(null, "", "#" + p.toString());
      apply();
    });
  });
  window.addEventListener("hashchange", function () { fromUrl(); apply(); });
  fromUrl();
  apply();
})();
"""


def _e(value) -> str:
    return escape(str(value), quote=True)


def _page(title: str, body: str, script: str = "") -> str:
    js = f"<script>{script}</script>" if script else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title)}</title>'
            f"<style>{_CSS}</style></head><body>\n{body}\n{js}</body></html>\n")


def markdown_html(md: str) -> str:
    """The Markdown that gbtrain.evaluation.reports writes (headings, pipe tables, lists, paragraphs, code spans) as
    HTML by markdown-it-py (CommonMark with GFM tables; raw HTML off), so the page shows report.md's own tables as a
    Markdown viewer shows them, escapes included, rather than a second rendering of the numbers."""
    return _MARKDOWN.render(md)


_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def image_uri(path: Path, max_width: int | None = None) -> str:
    """A data: URI of an image; with max_width, a wider one is downscaled and sent as JPEG (an overlay page
    is megabytes as a full-size PNG)."""
    if max_width is None:
        return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    with Image.open(path) as im:
        img = im.convert("RGB")
    if img.width > max_width:
        img = img.resize((max_width, max(1, round(img.height * max_width / img.width))), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=82)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _plots(out: Path, names: tuple[str, ...]) -> str:
    return "".join(f'<img class="plot" alt="{_e(n)}" src="{image_uri(out / "plots" / n)}">' for n in names
                   if (out / "plots" / n).is_file())


def _bar(name: str, value: float) -> str:
    pct = max(0.0, min(100.0, 100 * value))
    return (f'<div class="gate"><span class="name">{_e(name)}</span><div class="bar"><div style="width:{pct:.1f}%">'
            f'</div></div><span>{pct:.1f}%</span></div>')


def _funnels(report: dict, groups: dict[str, list[dict]]) -> str:
    """Per setting: the share of groups passing each gate, then how many stopped at each gate (a link that
    filters the records below to them)."""
    boxes = []
    for name, s in sorted(report["settings"].items()):
        counts = dict.fromkeys(OUTCOMES, 0)
        for g in groups.get(name, []):
            counts[outcome(g)] += 1
        links = " · ".join(f'<a href="#{_e(urlencode({"setting": name, "outcome": k}))}">{_e(OUTCOMES[k])}: {n}</a>'
                           for k, n in counts.items())
        cov = s["coverage"]
        boxes.append(f'<div class="funnel" data-setting="{_e(name)}"><h3>{_e(name)}</h3>'
                     + "".join(_bar(g, s[g]) for g in GATES)
                     + f'<p>{s["n_groups"]} groups, {s["n_records"]} records; missing {cov["missing"]}, '
                       f'unparsable {cov["unparsable"]}</p><p>{links}</p></div>')
    return '<div class="funnels">' + "".join(boxes) + "</div>"


def _breakdowns(report: dict) -> str:
    """Accuracy by subject, stage and question type, per setting (report.json's breakdown)."""
    parts = []
    for key, title in (("subject", "subject"), ("stage", "stage"), ("question_type", "question type")):
        names = sorted(report["settings"])
        cats = sorted({c for n in names for c in report["settings"][n].get("breakdown", {}).get(key, {})})
        if not cats:
            continue
        rows = []
        for c in cats:
            cells = []
            for n in names:
                b = report["settings"][n].get("breakdown", {}).get(key, {}).get(c)
                cells.append(f'<td class="num">{100 * b["accuracy"]:.1f} ({b["correct"]}/{b["n"]})</td>' if b
                             else '<td class="num">–</td>')
            rows.append(f"<tr><td>{_e(c)}</td>{''.join(cells)}</tr>")
        parts.append(f"<h3>Accuracy % by {title}</h3><table><thead><tr><th>{title}</th>"
                     + "".join(f'<th class="num">{_e(n)}</th>' for n in names) + "</tr></thead><tbody>"
                     + "".join(rows) + "</tbody></table>")
    return "".join(parts)


def _reply(title: str, text: str, setting: str) -> str:
    cut = (f"\n… {len(text) - REPLY_CHARS} more characters in predictions/{setting}.jsonl"
           if len(text) > REPLY_CHARS else "")
    return (f"<details open><summary>{_e(title)} ({len(text)} characters)</summary>"
            f'<pre class="reply">{_e(text[:REPLY_CHARS] + cut)}</pre></details>')


def _card(out: Path, setting: str, rid: str, rows: list[dict], reply: str | None, error: str | None,
          unparsable: bool, turns: list[str]) -> str:
    subject = rows[0]["subject"] if rows else ""
    tags = []
    if reply is None:
        tags.append("no reply")
    elif unparsable:
        tags.append("unparsable")
    if error:
        tags.append(f"error: {error}")
    overlay = out / "overlays" / f"{setting}_{safe_name(rid)}.png"
    image = (f'<img alt="overlay of {_e(rid)}" src="{image_uri(overlay, OVERLAY_WIDTH)}">' if overlay.is_file() else
             '<p class="noimg">no overlay (eval/run_eval.py --overlays N draws the first N records of each '
             "single-turn L1/L3 setting)</p>")
    body = []
    for g in rows:
        o = outcome(g)
        judged = "–" if g.get("judged") is None else ("right" if g["judged"] else "wrong")
        cer = "–" if g.get("cer") is None else f"{g['cer']:.2f}"
        body.append(f'<tr data-outcome="{o}" data-stage="{_e(g["stage"])}" data-qtype="{_e(g["question_type"])}">'
                    f'<td>{_e(g["group_id"])}</td><td>{_e(g["label"])}</td><td>{_e(g["stage"])}</td>'
                    f'<td>{_e(g["question_type"])}</td><td class="o-{o}">{_e(OUTCOMES[o])}</td>'
                    f'<td class="num">{cer}</td><td>{judged}</td></tr>')
    replies = "".join(_reply(f"turn {k}", t, setting) for k, t in enumerate(turns, start=1))
    replies += _reply("scored reply, merged from the turns" if turns else "raw reply", reply or "", setting)
    return (f'<article class="card" data-setting="{_e(setting)}" data-subject="{_e(subject)}" data-record="{_e(rid)}">'
            f'<h3>{_e(setting)} · {_e(rid)} · {_e(subject)}'
            + "".join(f'<span class="tag">{_e(t)}</span>' for t in tags) + "</h3>" + image
            + '<table class="groups"><thead><tr><th>group</th><th>label</th><th>stage</th><th>question type</th>'
              '<th>outcome</th><th>CER</th><th>model judged</th></tr></thead><tbody>' + "".join(body)
            + f"</tbody></table>{replies}</article>")


def _records(out: Path, report: dict, groups: dict[str, list[dict]]) -> tuple[str, str]:
    """The filter bar and one card per (setting, record), in the scorer's record order."""
    cards, values = [], {k: set() for k, _ in FILTERS}
    for setting in sorted(groups):
        path = out / "predictions" / f"{setting}.jsonl"
        preds = read_predictions(path) if path.is_file() else Predictions({})
        unparsable = set(report["settings"].get(setting, {}).get("coverage", {}).get("ids", {}).get("unparsable", []))
        by_record: dict[str, list[dict]] = {}
        for g in groups[setting]:
            by_record.setdefault(g["record_id"], []).append(g)
        values["setting"].add(setting)
        for rid, rows in by_record.items():
            values["subject"].add(rows[0]["subject"])
            for g in rows:
                values["outcome"].add(outcome(g))
                values["stage"].add(g["stage"])
                values["qtype"].add(g["question_type"])
            cards.append(_card(out, setting, rid, rows, preds.responses.get(rid), preds.errors.get(rid),
                               rid in unparsable, preds.turns.get(rid, [])))
    selects = []
    for key, title in FILTERS:
        opts = [k for k in OUTCOMES if k in values["outcome"]] if key == "outcome" else sorted(values[key])
        label = OUTCOMES if key == "outcome" else {}
        selects.append(f'<label>{title} <select id="f-{key}"><option value="">all</option>'
                       + "".join(f'<option value="{_e(v)}">{_e(label.get(v, v))}</option>' for v in opts)
                       + "</select></label>")
    bar = f'<div class="filters">{"".join(selects)} <strong id="shown">{len(cards)} records</strong></div>'
    return bar, "\n".join(cards)


def run_page(out: str | Path, report: dict, groups: dict[str, list[dict]]) -> str:
    """The HTML of a run folder's report: report.md's tables, the plots, per-setting funnels and breakdowns,
    and every scored record (overlay when one was drawn, raw reply, each GT group's outcome), filterable.
    `groups`: each setting's scored groups (the `groups` of gbtrain.metric.scoring.score's report)."""
    out = Path(out)
    bar, cards = _records(out, report, groups)
    body = (markdown_html(markdown(report))
            + "<h2>Plots</h2>" + _plots(out, ("settings.png", "funnel.png", "selective.png"))
            + "<h2>Funnels per setting</h2>" + _funnels(report, groups) + _breakdowns(report)
            + f'<h2 id="records">Records</h2>{bar}<div id="cards">{cards}</div>')
    return _page(f"Evaluation: {report['meta'].get('model')}", body,
                 _JS.replace("FILTER_KEYS", json.dumps([k for k, _ in FILTERS])))


def write_run_page(out: str | Path, report: dict, groups: dict[str, list[dict]]) -> Path:
    """OUTDIR/report.html (see run_page)."""
    path = Path(out) / "report.html"
    path.write_text(run_page(out, report, groups), encoding="utf-8", errors="backslashreplace")
    return path


def _signed(v: float, scale: float) -> str:
    cls = "pos" if v > 0 else "neg" if v < 0 else ""
    return f'<span class="{cls}">{scale * v:+.1f}</span>'


def comparison_page(base: dict, sft: dict, gains_md: str, rows: list[dict], plot: Path | None,
                    links: tuple[str | None, str | None] = (None, None)) -> str:
    """The gains of SFT over base as HTML: gains.md's table, the accuracy plot, both runs' funnels side by side
    and accuracy by subject, stage and question type. `links`: each run's report.html, relative to the page."""
    parts = [markdown_html(gains_md)]
    if plot is not None and plot.is_file():
        parts.append(f'<img class="plot" alt="accuracy, base vs SFT" src="{image_uri(plot)}">')
    names = [r["setting"] for r in rows]
    parts.append("<h2>Funnels, base → SFT (% of groups passing)</h2><table><thead><tr><th>setting</th>"
                 + "".join(f'<th class="num">{g}</th>' for g in GATES) + "</tr></thead><tbody>")
    for n in names:
        b, s = base["settings"][n], sft["settings"][n]
        parts.append(f"<tr><td>{_e(n)}</td>" + "".join(
            f'<td class="num">{100 * b[g]:.1f} → {100 * s[g]:.1f} ({_signed(s[g] - b[g], 100)})</td>' for g in GATES)
            + "</tr>")
    parts.append("</tbody></table>")
    for key, title in (("subject", "subject"), ("stage", "stage"), ("question_type", "question type")):
        cats = sorted({c for n in names for rep in (base, sft)
                       for c in rep["settings"][n].get("breakdown", {}).get(key, {})})
        if not cats:
            continue
        parts.append(f"<h3>Accuracy % by {title}, base → SFT</h3><table><thead><tr><th>{title}</th>"
                     + "".join(f'<th class="num">{_e(n)}</th>' for n in names) + "</tr></thead><tbody>")
        for c in cats:
            cells = []
            for n in names:
                b = base["settings"][n].get("breakdown", {}).get(key, {}).get(c)
                s = sft["settings"][n].get("breakdown", {}).get(key, {}).get(c)
                cells.append(f'<td class="num">{100 * b["accuracy"]:.1f} → {100 * s["accuracy"]:.1f} '
                             f'({_signed(s["accuracy"] - b["accuracy"], 100)})</td>' if b and s else
                             '<td class="num">–</td>')
            parts.append(f"<tr><td>{_e(c)}</td>{''.join(cells)}</tr>")
        parts.append("</tbody></table>")
    for role, rep, link in (("base", base, links[0]), ("SFT", sft, links[1])):
        model = _e(rep["meta"].get("model"))
        parts.append(f'<p>{role}: <a href="{_e(link)}">{model}</a></p>' if link else f"<p>{role}: {model}</p>")
    return _page(f"Gains of {sft['meta'].get('model')} over {base['meta'].get('model')}", "\n".join(parts))


def write_comparison_page(path: str | Path, base: dict, sft: dict, gains_md: str, rows: list[dict], plot: Path,
                          reports: tuple[str | Path, str | Path]) -> Path:
    """gains.html (see comparison_page), linking each run's report.html when it sits beside its report.json."""
    path = Path(path)
    links = []
    for report in reports:
        page = Path(report).with_name("report.html")
        links.append(os.path.relpath(page.resolve(), path.resolve().parent) if page.is_file() else None)
    path.write_text(comparison_page(base, sft, gains_md, rows, plot, (links[0], links[1])), encoding="utf-8",
                    errors="backslashreplace")
    return path

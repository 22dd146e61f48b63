"""One self-contained HTML page: text escaped, Vega-Lite charts drawn by Vega's own JavaScript
inlined, nothing fetched at view time (it opens from a shared filesystem or an attachment).

The JavaScript (Vega, Vega-Lite, vega-embed) is the pages plugin's package data, fetched from npm
at build time and pinned in plugins/shardeval_pages/vega.lock.json (shardeval_pages.vendor). A
source tree that never fetched it has none: `vendor.javascript` raises `BundleMissing` and callers
write their Markdown only.
"""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from shardeval.api import atomic_write

import shardeval_pages.vendor as vendor


def draw(path: str, render: Callable[[], bytes]) -> str:
    """Write the page `render` makes to `path` and return ""; without the charts' JavaScript write
    nothing and return why, in words that name the fix (the core says which page was not written)."""
    try:
        vendor.javascript()  # asked first: without it, a page's data (7 % of an MMLU-sized merge) is not gathered
        page = render()
    except vendor.BundleMissing as missing:
        return str(missing)
    atomic_write(path, page)
    return ""


# C0 controls other than tab/newline/CR are drawn as their Unicode "control pictures" (NUL -> ␀),
# so a reply holding them stays visible and copyable instead of vanishing or breaking the page.
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def esc(value: Any) -> str:
    """Any value as HTML text: never markup, whatever it holds."""
    text = "" if value is None else str(value)
    return html.escape(_CONTROLS.sub(_picture, text), quote=True)


def _picture(match: re.Match[str]) -> str:
    code = ord(match.group())
    return chr(0x2421 if code == 0x7F else 0x2400 + code)


def json_for_script(data: Any) -> str:
    """JSON safe inside <script type="application/json">: no `</script>`, `<!--` or line
    separators can end or bend the element."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, sort_keys=False, separators=(",", ":"))
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def table(headers: list[str], rows: list[list[str]], *, cls: str = "") -> str:
    """A table from already-escaped cells (callers build cells with esc/cell)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def num(value: Any, key: str, digits: int = 4) -> str:
    """A numeric cell carrying the exact value in data-value (tests and readers compare it with
    the JSON files) and a rounded one as text."""
    if value is None or (isinstance(value, float) and value != value):
        return f'<td class="num" data-key="{esc(key)}" data-value="null">—</td>'
    shown = f"{value:.{digits}f}" if isinstance(value, float) else str(value)
    return f'<td class="num" data-key="{esc(key)}" data-value="{esc(json.dumps(value))}">{shown}</td>'


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def span(value: float, low: Any, high: Any) -> dict[str, float]:
    """A chart row's point and interval; a value without an interval is drawn as a point."""
    return {"value": value, "low": low if finite(low) else value, "high": high if finite(high) else value}


def p_cell(p: Any, key: str) -> str:
    """A p-value cell as people read it (`report.fmt_p`: 4 decimals, or <0.0001, never a bare
    0.0000); the exact value stays in data-value."""
    from shardeval.api import fmt_p

    cell = num(p, key)
    return cell.replace(f">{p:.4f}</td>", f">{esc(fmt_p(p))}</td>") if finite(p) else cell


@dataclass
class Page:
    """A page under construction: sections of HTML and the charts they place."""

    title: str
    parts: list[str] = field(default_factory=list)
    charts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, *html_parts: str) -> None:
        self.parts.extend(html_parts)

    def chart(self, chart_id: str, spec: dict[str, Any], caption: str = "") -> str:
        """Place a Vega-Lite chart; returns its container's HTML."""
        self.charts[chart_id] = spec
        note = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
        return f'<figure><div class="chart" id="{esc(chart_id)}"></div>{note}</figure>'

    def render(self) -> bytes:
        """The whole page. Raises vendor.BundleMissing when the charts' JavaScript is not installed."""
        bundle = vendor.javascript().replace("</script", "<\\/script")
        specs = json_for_script(self.charts)
        return document(self.title, "".join(self.parts) + f'\n<script type="application/json" id="chart-specs">{specs}</script>',
                        style=STYLE, scripts=(bundle, DRAW), head=CSP_META).encode()


def document(title: str, body: str, *, style: str, scripts: tuple[str, ...], head: str = "") -> str:
    """The skeleton every page shares, the saved ones and the live status page: one file, its style
    and scripts inline (nothing fetched), `head` for what one page adds (its policy, its icon)."""
    inline = "".join(f"<script>{script}</script>\n" for script in scripts)
    return ('<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"{head}<title>{esc(title)}</title>\n<style>{style}</style>\n</head><body>\n{body}\n{inline}</body></html>\n")


# A saved page's policy: no request of any kind (its scripts and style are inline).
CSP_META = ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline' "
            "'unsafe-eval'; style-src 'unsafe-inline'; img-src data:\">\n")


# Vega needs 'unsafe-eval' (it compiles expressions); the policy forbids every fetch, so a page
# that tried to load anything would fail loudly in the console instead of leaking a request.
DRAW = """(function () {
  var specs = JSON.parse(document.getElementById('chart-specs').textContent);
  var drawn = Object.keys(specs).map(function (id) {
    return vegaEmbed('#' + CSS.escape(id), specs[id], {renderer: 'svg', actions: false});
  });
  function openTarget() {  // a link to an item opens its folded <details>
    var el = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (el && el.tagName === 'DETAILS') { el.open = true; el.scrollIntoView(); }
  }
  window.addEventListener('hashchange', openTarget);
  openTarget();
  Promise.all(drawn).then(function () { document.body.dataset.charts = 'drawn'; },
    function (err) { document.body.dataset.charts = 'failed'; console.error('chart failed: ' + err); });
})();"""

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1200px;padding:0 24px 48px;color:#1d1d1f}
h1{font-size:22px;margin:24px 0 4px}h2{font-size:18px;margin:32px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:20px 0 6px}
.verdict{font-weight:600}.partial{color:#b35900}.complete{color:#1a7f37}.warn{color:#b35900}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #e3e3e3;padding:3px 8px;text-align:left;vertical-align:top;unicode-bidi:isolate}
th{background:#f6f6f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:8px 0 16px;display:block}figcaption{color:#666;font-size:12px}.chart{width:100%}
.text{white-space:pre-wrap;word-break:break-word;unicode-bidi:plaintext;font-family:ui-monospace,Menlo,monospace;font-size:12px;max-height:24em;overflow:auto;background:#fafafa;padding:6px;margin:4px 0}
details{margin:4px 0}summary{cursor:pointer}details.item{border-left:3px solid #ddd;padding-left:8px}.role{font-weight:600;color:#555}
.muted{color:#666}a{color:#0b5cad}
.thumbs{display:flex;flex-wrap:wrap;gap:10px;margin:6px 0}figure.thumb{margin:0;display:block;max-width:150px;font-size:11px}
figure.thumb img{display:block;max-width:96px;max-height:96px;object-fit:contain;border:1px solid #e3e3e3;background:#fff}
.thumb-missing{box-sizing:border-box;width:96px;min-height:64px;padding:4px;display:flex;align-items:center;justify-content:center;text-align:center;background:#f3f3f3;border:1px dashed #bbb;color:#666}
.thumb-name{white-space:pre-wrap;word-break:break-all;unicode-bidi:plaintext}.thumbs-more{align-self:center}
"""

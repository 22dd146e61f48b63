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
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from shardeval.api import atomic_write, finite_number, fmt

import shardeval_pages.vendor as vendor


CHART_FRAME = 60  # pixels a chart takes beyond its plot's height: its title and an axis


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
    shown = fmt(value, digits) if isinstance(value, float) else str(value)  # the one rounding rule (report.fmt)
    return f'<td class="num" data-key="{esc(key)}" data-value="{esc(json.dumps(value))}">{shown}</td>'


finite = finite_number  # a number a page may show as one (shardeval.numbers)


def span(value: float, low: Any, high: Any) -> dict[str, float]:
    """A chart row's point and interval; a value without an interval is drawn as a point."""
    return {"value": value, "low": low if finite(low) else value, "high": high if finite(high) else value}


def p_cell(p: Any, key: str) -> str:
    """A p-value cell as people read it (`report.fmt_p`: 4 decimals, or <0.0001, never a bare
    0.0000); the exact value stays in data-value."""
    from shardeval.api import fmt_p

    cell = num(p, key)
    return cell.replace(f">{fmt(p)}</td>", f">{esc(fmt_p(p))}</td>") if finite(p) else cell


@dataclass
class Page:
    """A page under construction: sections of HTML, the charts they place, and the datasets and
    paged tables the page's script draws from (each dataset embedded once, whatever reads it)."""

    title: str
    parts: list[str] = field(default_factory=list)
    charts: dict[str, dict[str, Any]] = field(default_factory=dict)
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, *html_parts: str) -> None:
        self.parts.extend(html_parts)

    def chart(self, chart_id: str, spec: dict[str, Any], caption: str = "") -> str:
        """Place a Vega-Lite chart, drawn when it scrolls into view; returns its container's HTML.
        A spec whose data is `{"name": <dataset>}` reads one of the page's datasets."""
        self.charts[chart_id] = spec
        note = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
        # the space a chart of known height will take, kept before it is drawn: charts drawn above
        # the place a reader scrolled to must not push it away
        height = spec.get("height")
        keep = f' style="min-height:{height + CHART_FRAME}px"' if isinstance(height, int) else ""
        return f'<figure><div class="chart" id="{esc(chart_id)}"{keep}></div>{note}</figure>'

    def dataset(self, name: str, fields: list[str], rows: list[list[Any]]) -> None:
        """Rows (lists in `fields` order) that charts and tables read by name: columns, not
        objects, so a field's name is not repeated in every row."""
        self.datasets[name] = {"fields": fields, "rows": rows}

    def paged_table(self, table_id: str, head: str, spec: dict[str, Any], *, cls: str, search: str) -> str:
        """A table the page's script fills from a dataset a page of rows at a time, with a filter
        box (`search` is its placeholder); `head` is the table's escaped <thead> HTML. The spec (read
        by pagedTable in DRAW): data, where, key, page, cells, and either keys and search (a row per
        record) or rows and cols (a row per `rows` value, a group of cells per `cols` value)."""
        self.tables[table_id] = spec
        return (f'<div class="paged" id="{esc(table_id)}"><input type="search" class="filter" placeholder="{esc(search)}" '
                f'aria-label="{esc(search)}"> <span class="pager"></span>'
                f'<table class="{esc(cls)}"><thead>{head}</thead><tbody></tbody></table>'
                "<noscript>This table is drawn by the page's script; the same numbers are in the JSON beside this page.</noscript></div>")

    def render(self) -> bytes:
        """The whole page. Raises vendor.BundleMissing when the charts' JavaScript is not installed."""
        bundle = vendor.javascript().replace("</script", "<\\/script")
        data = ""
        if self.datasets or self.tables:
            data = f'\n<script type="application/json" id="page-data">{json_for_script({"datasets": self.datasets, "tables": self.tables})}</script>'
        specs = json_for_script(self.charts)
        return document(self.title, "".join(self.parts) + f'\n<script type="application/json" id="chart-specs">{specs}</script>' + data,
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


# Four decimals by the one rounding rule of every output (shardeval.api.fmt): the number's shortest
# decimal form, a tie to even (443/800 is 0.5538, 1/32 is 0.0312; JavaScript's toFixed says 0.5537
# and 0.0313). ICU reads a double as that shortest form, so Intl's halfEven is the same rule. For
# every script of the pages that shows a number the Markdown shows too.
FOUR_DECIMALS = """var fourDecimals = (function () {
  var format = new Intl.NumberFormat('en-US', {minimumFractionDigits: 4, maximumFractionDigits: 4, useGrouping: false,
                                               roundingMode: 'halfEven'});
  return function (v) { return format.format(v); };
})();
"""

# Vega needs 'unsafe-eval' (it compiles expressions); the policy forbids every fetch, so a page
# that tried to load anything would fail loudly in the console instead of leaking a request.
#
# Charts are drawn one at a time: those in view (or about to be) first, then the rest while the
# page is idle, so a reader who scrolls anywhere waits for the charts there, not for every chart
# above them. Each chart's div says `data-state="drawn"`; the body says `data-charts="drawn"` when
# every chart is (tests and readers wait for it). A chart whose data is a named dataset gets that
# dataset's rows as objects of its own (Vega marks the objects it reads).
DRAW = FOUR_DECIMALS + """(function () {
  var specs = JSON.parse(document.getElementById('chart-specs').textContent);
  var dataEl = document.getElementById('page-data');
  var page = dataEl ? JSON.parse(dataEl.textContent) : {datasets: {}, tables: {}};
  var objects = {};
  function records(name) {
    if (!objects[name]) {
      var set = page.datasets[name];
      objects[name] = set.rows.map(function (row) {
        var o = {};
        set.fields.forEach(function (f, i) { o[f] = row[i]; });
        return o;
      });
    }
    return objects[name];
  }
  function withData(spec) {
    var name = spec.data && spec.data.name;
    if (!name || !page.datasets[name]) return spec;
    var copy = Object.assign({}, spec);
    copy.datasets = {};
    copy.datasets[name] = records(name).map(function (o) { return Object.assign({}, o); });
    return copy;
  }
  var order = Object.keys(specs), pending = new Set(order), inView = new Set(), busy = false, failed = [];
  function settle() {
    if (pending.size || busy) return;
    document.body.dataset.charts = failed.length ? 'failed' : 'drawn';
  }
  function pick() {
    for (var i = 0; i < order.length; i++) if (inView.has(order[i]) && pending.has(order[i])) return order[i];
    return pending.size ? order.find(function (id) { return pending.has(id); }) : null;
  }
  function drawNext() {
    if (busy) return;
    var id = pick();
    if (id === null) return settle();
    pending.delete(id);
    busy = true;
    var el = document.getElementById(id);
    vegaEmbed(el, withData(specs[id]), {renderer: 'svg', actions: false}).then(
      function () { el.dataset.state = 'drawn'; },
      function (err) { el.dataset.state = 'failed'; failed.push(id); console.error('chart ' + id + ' failed: ' + err); }
    ).then(function () {
      busy = false;
      // yield to the browser between charts: a scroll is seen before the next one is picked
      if (pick() !== null && !Array.from(inView).some(function (v) { return pending.has(v); }) && window.requestIdleCallback) {
        requestIdleCallback(drawNext, {timeout: 200});
      } else {
        setTimeout(drawNext, 0);
      }
    });
  }
  var watch = new IntersectionObserver(function (entries) {
    entries.forEach(function (e) { if (e.isIntersecting) inView.add(e.target.id); else inView.delete(e.target.id); });
    drawNext();
  }, {rootMargin: '400px 0px'});
  order.forEach(function (id) { watch.observe(document.getElementById(id)); });
  if (!order.length) settle();
""" + r"""
  // Paged tables: a dataset's rows, filtered by the box, a page at a time. Every number cell
  // carries its exact value in data-value and its key in data-key, as the static tables do.
  function fmt(v, kind) {
    if (v === null || v === undefined) return '\u2014';
    if (kind === 'num') return fourDecimals(v);
    if (kind === 'p') return v < 0.0001 ? '<0.0001' : fourDecimals(v);
    return String(v);
  }
  function cell(tr, row, c, key) {
    var td = tr.insertCell();
    var v = row[c.field];
    if (c.kind === 'text') {
      td.textContent = v === null || v === undefined ? '\u2014' : String(v);
    } else {
      td.className = 'num';
      td.dataset.key = key + '/' + c.field;
      td.dataset.value = JSON.stringify(v === undefined ? null : v);
      td.textContent = c.shown ? row[c.shown] : fmt(v, c.kind);
    }
    if (c.partial && row[c.partial] === false) td.classList.add('partial');
    if (c.cls) td.classList.add(c.cls);
  }
  function matches(row, fields, text) {
    return !text || fields.some(function (f) { return String(row[f]).toLowerCase().indexOf(text) >= 0; });
  }
  function pagedTable(id, spec) {
    var box = document.getElementById(id), input = box.querySelector('input.filter'), pager = box.querySelector('.pager');
    var body = box.querySelector('tbody');
    var all = records(spec.data).filter(function (r) {
      return Object.keys(spec.where || {}).every(function (f) { return r[f] === spec.where[f]; });
    });
    var lines;  // each line: [label, rows...]
    if (spec.rows) {
      var byRow = new Map(spec.rows.order.map(function (v) { return [v, new Map()]; }));
      all.forEach(function (r) { if (byRow.has(r[spec.rows.field])) byRow.get(r[spec.rows.field]).set(r[spec.cols.field], r); });
      lines = Array.from(byRow, function (kv) { return {label: kv[0], cells: kv[1]}; });
    } else {
      lines = all.map(function (r) { return {row: r}; });
    }
    var start = 0, shown = lines;
    function draw() {
      body.textContent = '';
      shown.slice(start, start + spec.page).forEach(function (line) {
        var tr = body.insertRow();
        if (spec.rows) {
          tr.insertCell().textContent = line.label;
          spec.cols.order.forEach(function (col) {
            var r = line.cells.get(col);
            if (!r) { var td = tr.insertCell(); td.className = 'muted'; td.colSpan = spec.cells.length; td.textContent = '\u2014'; return; }
            spec.cells.forEach(function (c) { cell(tr, r, c, [spec.key, line.label, col].join('/')); });
          });
        } else {
          var key = [spec.key].concat(spec.keys.map(function (f) { return line.row[f]; })).join('/');
          spec.cells.forEach(function (c) { cell(tr, line.row, c, key); });
        }
      });
      pager.textContent = '';
      var end = Math.min(start + spec.page, shown.length);
      var say = document.createElement('span');
      say.className = 'muted';
      say.textContent = shown.length ? (start + 1) + '\u2013' + end + ' of ' + shown.length + ' rows' : 'no row matches';
      if (shown.length > spec.page) {
        [['\u2039 previous', 'prev', Math.max(0, start - spec.page), start === 0],
         ['next \u203a', 'next', start + spec.page, end >= shown.length]].forEach(function (b) {
          var button = document.createElement('button');
          button.type = 'button'; button.textContent = b[0]; button.className = b[1]; button.disabled = b[3];
          button.addEventListener('click', function () { start = b[2]; draw(); });
          pager.appendChild(button);
          pager.appendChild(document.createTextNode(' '));
        });
      }
      pager.appendChild(say);
    }
    input.addEventListener('input', function () {
      var text = input.value.trim().toLowerCase();
      shown = lines.filter(function (line) {
        return spec.rows ? String(line.label).toLowerCase().indexOf(text) >= 0 : matches(line.row, spec.search, text);
      });
      start = 0;
      draw();
    });
    draw();
  }
  Object.keys(page.tables).forEach(function (id) { pagedTable(id, page.tables[id]); });
  function openTarget() {  // a link to an item opens its folded <details>
    var el = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (el && el.tagName === 'DETAILS') { el.open = true; el.scrollIntoView(); }
  }
  window.addEventListener('hashchange', openTarget);
  openTarget();
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
.paged{overflow-x:auto}td.method{white-space:nowrap}
.paged input.filter{font:inherit;padding:2px 6px;margin:4px 0;width:16em}.pager button{font:inherit;margin-right:2px}
.thumbs{display:flex;flex-wrap:wrap;gap:10px;margin:6px 0}figure.thumb{margin:0;display:block;max-width:150px;font-size:11px}
figure.thumb img{display:block;max-width:96px;max-height:96px;object-fit:contain;border:1px solid #e3e3e3;background:#fff}
.thumb-missing{box-sizing:border-box;width:96px;min-height:64px;padding:4px;display:flex;align-items:center;justify-content:center;text-align:center;background:#f3f3f3;border:1px dashed #bbb;color:#666}
.thumb-name{white-space:pre-wrap;word-break:break-all;unicode-bidi:plaintext}.thumbs-more{align-self:center}
.badge{display:inline-block;padding:0 6px;border-radius:8px;background:#f1f1f1}.badge.warn{background:#fff1e0}
.reply{margin:6px 0 10px}details.thinking{margin:2px 0 0 12px}details.thinking>summary{color:#555}
"""

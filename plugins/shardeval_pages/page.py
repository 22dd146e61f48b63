"""One self-contained HTML page: text escaped, Vega-Lite charts drawn by Vega's own JavaScript
inlined, nothing fetched at view time (it opens from a shared filesystem or an attachment).

The JavaScript (Vega, Vega-Lite, vega-embed) is the pages plugin's package data, fetched from npm
at build time and pinned in plugins/shardeval_pages/vega.lock.json (shardeval_pages.vendor). A
source tree that never fetched it has none: `javascript` raises `BundleMissing` and callers
write their Markdown only.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from collections.abc import Callable

import msgspec

from shardeval.api.records import atomic_write, finite_number, fmt

from shardeval_pages.vendor import BundleMissing, javascript


CHART_FRAME = 60  # pixels a chart takes beyond its plot's height: its title and an axis


def draw(path: str, render: Callable[[], bytes]) -> str:
    """Write the page `render` makes to `path` and return ""; without the charts' JavaScript write
    nothing and return why, in words that name the fix (the core says which page was not written)."""
    try:
        javascript()  # asked first: without it, a page's data (7 % of an MMLU-sized merge) is not gathered
        page = render()
    except BundleMissing as missing:
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


def _plain_scalar(value: Any) -> Any:
    """A numpy scalar (a metric a plugin computed with numpy) as the Python number it holds, as
    json.dumps took numpy's float64; anything else is refused as before."""
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    raise TypeError(f"a page's data holds a {type(value).__name__}, which is not JSON")


_SCRIPT_JSON = msgspec.json.Encoder(enc_hook=_plain_scalar)


def json_for_script(data: Any) -> str:
    """JSON safe inside <script type="application/json">: no `</script>`, `<!--` or line
    separators can end or bend the element. msgspec, not json.dumps: a sweep page's data is
    encoded at every watched checkpoint, and json.dumps took about 8 of its 40 ms at 50 models
    (a non-finite number becomes null, which JSON.parse reads, where json.dumps raised)."""
    text = _SCRIPT_JSON.encode(data).decode()
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def table(headers: list[str], rows: list[list[str]], *, cls: str = "") -> str:
    """A table from already-escaped cells (callers build cells with esc/cell)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


GATE_CLASS = {"GO": "complete", "NO-GO": "warn", "INCONCLUSIVE": "partial"}


def gate_cell(verdict: str | None) -> str:
    """A verdict as a marked cell (data-verdict: what tests and readers compare with sweep.json)."""
    shown = verdict or "—"
    return f'<td class="verdict {GATE_CLASS.get(shown, "muted")}" data-verdict="{esc(shown)}">{esc(shown)}</td>'


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
    from shardeval.api.records import fmt_p

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
        return (
            f'<div class="paged" id="{esc(table_id)}"><input type="search" class="filter" placeholder="{esc(search)}" '
            f'aria-label="{esc(search)}"> <span class="pager"></span>'
            f'<table class="{esc(cls)}"><thead>{head}</thead><tbody></tbody></table>'
            "<noscript>This table is drawn by the page's script; the same numbers are in the JSON beside this page.</noscript></div>"
        )

    def render(self) -> bytes:
        """The whole page. Raises BundleMissing when the charts' JavaScript is not installed."""
        bundle = javascript().replace("</script", "<\\/script")
        data = ""
        if self.datasets or self.tables:
            data = f'\n<script type="application/json" id="page-data">{json_for_script({"datasets": self.datasets, "tables": self.tables})}</script>'
        specs = json_for_script(self.charts)
        return document(
            self.title,
            "".join(self.parts) + f'\n<script type="application/json" id="chart-specs">{specs}</script>' + data,
            style=STYLE,
            scripts=(bundle, DRAW),
            head=CSP_META,
        ).encode()


def document(title: str, body: str, *, style: str, scripts: tuple[str, ...], head: str = "") -> str:
    """The skeleton every page shares, the saved ones and the live status page: one file, its style
    and scripts inline (nothing fetched), `head` for what one page adds (its policy, its icon)."""
    inline = "".join(f"<script>{script}</script>\n" for script in scripts)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"{head}<title>{esc(title)}</title>\n<style>{style}</style>\n</head><body>\n{body}\n{inline}</body></html>\n"
    )


# A saved page's policy: no request of any kind (its scripts and style are inline).
CSP_META = (
    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline' "
    "'unsafe-eval'; style-src 'unsafe-inline'; img-src data:\">\n"
)


def asset(name: str) -> str:
    """One of the pages' own scripts or styles (plugins/shardeval_pages/assets/, package data)."""
    return resources.files(__package__).joinpath("assets").joinpath(name).read_text(encoding="utf-8")


# Four decimals by the one rounding rule of every output (shardeval.api.fmt), for every script of
# the pages that shows a number the Markdown shows too (assets/four_decimals.js says how).
FOUR_DECIMALS = asset("four_decimals.js")

# The saved pages' script (assets/draw.js): charts drawn one at a time, those in view first, each
# div's `data-state` and the body's `data-charts` saying when they are drawn (tests and readers
# wait for it); the paged tables. Vega needs 'unsafe-eval' (it compiles expressions); the policy
# forbids every fetch, so a page that tried to load anything would fail loudly in the console
# instead of leaking a request.
DRAW = FOUR_DECIMALS + asset("draw.js")

STYLE = asset("page.css")

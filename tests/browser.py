"""Headless Debian chromium for the page tests, driven through Playwright's Python API.

Playwright's own browser download cannot run here; `executable_path` points it at Debian's
chromium (scripts/setup/chromium.sh installs it). A `Visit` records everything a page did while it
was open: console messages, uncaught exceptions and every request it made, so a test can assert
"no console errors, no network" as well as what the page shows.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

CHROMIUM = shutil.which("chromium")

# Every chart is a vega-embed view rendered as SVG; its marks are the shapes Vega draws for the
# data (children of `g.role-mark`: bars, rules, points, lines, text), not axes or legends.
COUNT_MARKS = """() => Array.from(document.querySelectorAll('.chart')).map(chart => ({
  id: chart.id,
  svgs: chart.querySelectorAll('svg').length,
  marks: chart.querySelectorAll('g.role-mark > *').length,
}))"""


# The charts a reader sees: every `.chart` in the viewport, each drawn (the page marks a drawn
# chart data-state="drawn"; it draws those in view first).
IN_VIEW_DRAWN = """() => {
  const seen = Array.from(document.querySelectorAll('.chart')).filter(c => {
    const r = c.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; });
  return seen.length > 0 && seen.every(c => c.dataset.state === 'drawn');
}"""
# Scroll the chart at `fraction` of the page's charts (0 the first, 1 the last) to the top of the view.
SCROLL_TO_CHART = """fraction => {
  const charts = document.querySelectorAll('.chart');
  const chart = charts[Math.round((charts.length - 1) * fraction)];
  chart.scrollIntoView();
  return chart.id;
}"""
# Every number a paged table holds: each page in turn (the pager's next button), as [key, value].
PAGED_NUMBERS = """async box => {
  const out = [];
  for (;;) {
    box.querySelectorAll('td[data-key]').forEach(td => out.push([td.dataset.key, td.dataset.value]));
    const next = box.querySelector('.pager button.next');
    if (!next || next.disabled) return out;
    next.click();
  }
}"""


@dataclass
class Visit:
    page: Any  # playwright.sync_api.Page
    url: str
    console: list[tuple[str, str]] = field(default_factory=list)  # (type, text)
    exceptions: list[str] = field(default_factory=list)  # uncaught errors in the page's scripts
    requests: list[str] = field(default_factory=list)  # every URL the page asked for, itself included

    def errors(self) -> list[str]:
        """Console errors and uncaught exceptions: a page that works has none."""
        return [text for kind, text in self.console if kind == "error"] + self.exceptions

    def foreign_requests(self) -> list[str]:
        """Requests that leave the page's own origin (for a file:// page: anything but itself
        and inline data/blob URLs)."""
        own = urlsplit(self.url)
        out = []
        for url in self.requests:
            u = urlsplit(url)
            if u.scheme in ("data", "blob", "about"):
                continue
            if own.scheme == "file" and url.split("#")[0] == self.url.split("#")[0]:
                continue
            if own.scheme != "file" and (u.scheme, u.netloc) == (own.scheme, own.netloc):
                continue
            out.append(url)
        return out

    def chart_marks(self) -> list[dict[str, Any]]:
        """[{id, svgs, marks}] for every `.chart` element on the page."""
        return self.page.evaluate(COUNT_MARKS)

    def jump_to_chart(self, fraction: float, timeout_ms: int = 30_000) -> str:
        """Scroll to the chart at `fraction` of the page's charts, as a reader would, and wait
        until every chart in view is drawn; returns that chart's id."""
        chart = self.page.evaluate(SCROLL_TO_CHART, fraction)
        self.page.wait_for_function(IN_VIEW_DRAWN, timeout=timeout_ms)
        return chart

    def table_numbers(self, selector: str) -> list[tuple[str, Any]]:
        """Every (data-key, value) of a paged table, read page by page through its pager."""
        box = self.page.query_selector(selector)
        assert box is not None, selector
        return [(key, json.loads(value)) for key, value in box.evaluate(PAGED_NUMBERS)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium per test module (starting one costs about a second). Not per
    session: while Playwright's sync API runs, its event loop is the thread's running loop, and
    every later test calling asyncio.run() would fail."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: run scripts/setup/chromium.sh (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        b = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


@contextmanager
def visit(
    browser: Any, url: str, *, ready: str | None = None, timeout_ms: int = 15_000, viewport: tuple[int, int] = (1280, 900)
) -> Iterator[Visit]:
    """Open `url` in a fresh context (no shared cache or storage), wait for the load event and,
    when given, for the JavaScript expression `ready` to be truthy; record what the page did."""
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    page = context.new_page()
    v = Visit(page, url)
    page.on("console", lambda m: v.console.append((m.type, m.text)))
    page.on("pageerror", lambda e: v.exceptions.append(str(e)))
    page.on("request", lambda r: v.requests.append(r.url))
    try:
        page.goto(url, wait_until="load", timeout=timeout_ms)
        if ready is not None:
            page.wait_for_function(ready, timeout=timeout_ms)
        yield v
    finally:
        context.close()

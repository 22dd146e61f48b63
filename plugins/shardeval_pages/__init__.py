"""The pages: report.html, sweep.html, compare's page and the live status page.

A built-in plugin like any other: the merge computes and calls the page hooks
(shardeval.hookspecs), and this plugin draws. Each page is one self-contained HTML file with the
charts' JavaScript inlined (page.py); the modules load when a page is drawn, so loading plugins
stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardeval.api.plugin import hookimpl

if TYPE_CHECKING:
    from shardeval.api.pages import BenchmarkMerge, SweepMerge
    from shardeval.api.records import MergeResult


@hookimpl
def draw_report_page(result: MergeResult, path: str, confidence: float) -> str:
    from shardeval_pages.page import draw
    from shardeval_pages.report_page import render_report_html

    return draw(path, lambda: render_report_html(result, confidence))


@hookimpl
def draw_sweep_page(sweep: SweepMerge, path: str, confidence: float, links: dict[str, str]) -> str:
    from shardeval_pages.page import draw
    from shardeval_pages.sweep_page import render_sweep_html

    return draw(path, lambda: render_sweep_html(sweep, confidence, links))


@hookimpl
def draw_compare_page(
    path: str,
    run_a: str,
    run_b: str,
    a: dict[str, BenchmarkMerge],
    b: dict[str, BenchmarkMerge],
    results: list[dict[str, Any]],
    confidence: float,
    errors_as_wrong: bool,
) -> str:
    from shardeval_pages.compare_page import render_compare_html
    from shardeval_pages.page import draw

    return draw(path, lambda: render_compare_html(run_a, run_b, a, b, results, confidence, errors_as_wrong))


@hookimpl
def serve_status(run_dir: str, host: str, port: int, interval: float) -> bool:
    from shardeval_pages.status_server import run_server

    run_server(run_dir, host, port, interval)
    return True

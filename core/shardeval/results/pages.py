"""The pages of a merge, drawn by whichever plugin answers the page hooks (the built-in
shardeval_pages): the merge computes, a plugin draws, and no page is imported here. A page that is
not drawn is one line that says why; everything else is written as usual."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from shardeval import plugins
from shardeval.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from shardeval.payloads import BenchmarkMergeView, Comparison, MergeResultView, SweepMergeView

NO_PAGES = "no plugin draws the pages (the built-in shardeval_pages is not loaded)"


def not_written(path: str, why: str) -> str:
    """The line for a page left out (and that a page already there is from an earlier merge)."""
    name = os.path.basename(path)
    stale = f"; the {name} there is from an earlier merge" if os.path.exists(path) else ""
    return f"{name} not written: {why}{stale}"


# The payloads are typed with the hooks' views (shardeval.payloads): mypy holds the classes passed
# here (MergeResult, SweepMerge, BenchmarkMerge) to them.


def report_page(result: MergeResultView, path: str, confidence: float) -> str:
    """Draw report.html of `result` (a MergeResult): "" when written, else why not."""
    return _answer(plugins.hooks().draw_report_page(result=result, path=path, confidence=confidence))


def sweep_page(sweep: SweepMergeView, path: str, confidence: float, links: dict[str, str]) -> str:
    """Draw sweep.html of `sweep` (a SweepMerge): "" when written, else why not."""
    return _answer(plugins.hooks().draw_sweep_page(sweep=sweep, path=path, confidence=confidence, links=links))


def compare_page(
    path: str,
    run_a: str,
    run_b: str,
    a: Mapping[str, BenchmarkMergeView],
    b: Mapping[str, BenchmarkMergeView],
    results: Sequence[Comparison],
    confidence: float,
    errors_as_wrong: bool,
) -> str | None:
    """Draw `compare --html`'s page: None when written, else the one line that says why not."""
    why = _answer(
        plugins.hooks().draw_compare_page(
            path=path, run_a=run_a, run_b=run_b, a=a, b=b, results=results, confidence=confidence, errors_as_wrong=errors_as_wrong
        )
    )
    return not_written(path, why) if why else None


def serve_status(run_dir: str, host: str, port: int, interval: float) -> None:
    """`status --serve`: the live page, from the plugin that serves it."""
    if plugins.hooks().serve_status(run_dir=run_dir, host=host, port=port, interval=interval) is None:
        raise UsageError(f"status --serve: {NO_PAGES}; load it, or run `shardeval status {run_dir}` for the text")


def _answer(why: str | None) -> str:
    return NO_PAGES if why is None else why

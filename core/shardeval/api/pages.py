"""shardeval.api.pages: what a plugin that draws the merge's pages reads (the built-in
shardeval_pages): the payloads of the page hooks and read-only views. The names and what each is for
are listed once in shardeval/api/roles.py (docs/plugins.md shows them); a name loads its core module
on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.roles import serve

if TYPE_CHECKING:  # made from shardeval/api/roles.py by scripts/dev/api_roles_rewrite.py --blocks
    from shardeval.results.merge import BenchmarkMerge as BenchmarkMerge
    from shardeval.results.sweep_merge import (
        SweepMerge as SweepMerge,
        NOT_COMPARED as NOT_COMPARED,
        not_compared_notes as not_compared_notes,
    )
    from shardeval.results.page_view import ReportView as ReportView, BenchmarkView as BenchmarkView, LiveStatus as LiveStatus
    from shardeval.results.pages import compare_page as compare_page
else:  # type checkers read the imports above; at run time each name is imported on first use
    __getattr__, __dir__, __all__ = serve("pages")

"""shardeval.api.metric: what a metric plugin (or a command over merged runs) needs: a number over a
benchmark's scores. The names and what each is for are listed once in shardeval/api/roles.py
(docs/plugins.md shows them); a name loads its core module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.roles import serve

if TYPE_CHECKING:  # made from shardeval/api/roles.py by scripts/dev/api_roles_rewrite.py --blocks
    from shardeval.results.metrics import (
        MetricOptions as MetricOptions,
        MetricValue as MetricValue,
        ScoreTable as ScoreTable,
        OK as OK,
        headline_metric as headline_metric,
    )
    from shardeval.identity import incomparable as incomparable
    from shardeval.store.records import GateRule as GateRule
else:  # type checkers read the imports above; at run time each name is imported on first use
    __getattr__, __dir__, __all__ = serve("metric")

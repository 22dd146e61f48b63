"""The metric API: what merge hands every metric plugin, and what a metric gives back.

Merge (stdlib only) reduces the shard files to one `ScoreTable` per benchmark: flat arrays over
(problem, repeat) cells in canonical order, after deduplication. Metric plugins (numpy lives
there, not in the core) view them with `numpy.frombuffer` and compute from per-problem
statistics; a metric never sees shards, so a mean of shard means cannot happen.

A metric is registered with `register(name, metric)` (hook `register_metrics`) where
`metric(table, options) -> dict[str, MetricValue]`: one plugin may return several named values
(`pass@k` returns pass@1 … pass@R).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Iterable

import msgspec

from shardeval.results.ci_methods import CI_METHODS  # noqa: F401  (re-exported)
from shardeval.store.standing import ERROR, MISSING, OK  # noqa: F401 - ScoreTable.status codes: a cell's standing

if TYPE_CHECKING:
    from shardeval.payloads import MetricOptionsView, MetricValueView, ScoreTableView
PAIRED_METRICS = ("accuracy", "mean")  # the metrics that are the mean of the cells' scores, which the pairing compares


@dataclass
class ScoreTable:
    """One benchmark's deduplicated outcome. Cell c = problem * repeats + repeat (row-major)."""

    benchmark: str
    n_problems: int
    repeats: int
    score: array  # 'd': the primary score; NaN where the cell has no valid sample (missing, error)
    status: bytearray  # MISSING | OK | ERROR per cell
    cluster: array | None = None  # 'i' per problem: index into cluster_names; -1 unknown
    cluster_names: list[str] = field(default_factory=list)
    extra: dict[str, array] = field(default_factory=dict)  # 'd' per cell: records' named `scores`
    predicted: array | None = None  # 'i' per cell: index into labels (classification); -1 none
    gold: array | None = None  # 'i' per cell
    labels: list[str] = field(default_factory=list)
    problem_ids: list[str] | None = None  # per problem, for paired comparison across runs

    @property
    def n_cells(self) -> int:
        return self.n_problems * self.repeats


class MetricValue(msgspec.Struct, kw_only=True):
    """One number and how sure it is. `details` holds what a careful reader needs besides."""

    value: float | None
    stderr: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    ci_method: str = "none"
    n: int = 0
    details: dict[str, Any] = {}


@dataclass(frozen=True)
class MetricOptions:
    confidence: float = 0.95
    bootstrap_samples: int = 1000
    seed: int = 0
    ci_method: str = "auto"  # one of CI_METHODS (`merge --ci-method`)


Metric = Callable[[ScoreTable, MetricOptions], dict[str, MetricValue]]


def headline_metric(names: Iterable[str], *, accuracy_from_pass_at_k: bool = False) -> str | None:
    """The one metric that says how a benchmark went (a sweep's paired differences, the live status
    page, compare's page): the mean of its cells' scores, `accuracy` (right/wrong scores) before
    `mean` (graded ones), when `names` holds one; else None.

    `accuracy_from_pass_at_k`: a benchmark that asked for pass@k alone is scored right/wrong too, so
    its accuracy can be computed though nobody asked for it. The live status page does so; a sweep
    and compare name only what merge computed (a sweep labels its pairing "score" then, compare's
    page leaves the run's own mean out), and keep doing so, so their files stay what they were.
    """
    names = set(names)
    found = next((n for n in PAIRED_METRICS if n in names), None)
    if found is None and accuracy_from_pass_at_k and "pass@k" in names:
        return "accuracy"
    return found


if TYPE_CHECKING:

    def _as_hook_payloads(
        table: ScoreTable, options: MetricOptions, value: MetricValue
    ) -> tuple[ScoreTableView, MetricOptionsView, MetricValueView]:
        """Never run: mypy holds these classes to the types the hooks name them by (shardeval.payloads)."""
        return table, options, value

"""Built-in plugin: the metrics `shardeval merge` computes, and the statistics of `shardeval compare`.

Registered through the `shardeval` entry-point group like any third-party metric package. Each
metric is f(table: ScoreTable, options: MetricOptions) -> {name: MetricValue}
(see shardeval.metrics). numpy lives only in the submodules, which load on a metric's first call,
so loading plugins (`shardeval --help`, `shardeval plugins`) never imports numpy.

    accuracy, mean   shardeval_metrics.metrics         per-problem means; CLT / Wilson / clustered
    pass@k           shardeval_metrics.metrics         unbiased pass@1 … pass@repeats
    perplexity       shardeval_metrics.metrics         exp(Σ nll / Σ tokens), token_nll; delta method
    classification   shardeval_metrics.classification  macro/weighted F1, macro P/R; bootstrap
    (compare)        shardeval_metrics.compare         compare_tables(a, b, options)
"""

from __future__ import annotations

import importlib

from shardeval.api import hookimpl


class _Lazy:
    """A metric whose module is imported on the first call."""

    def __init__(self, module: str, attr: str) -> None:
        self.module, self.attr = module, attr
        self.__name__ = attr

    def __call__(self, table, options):
        return getattr(importlib.import_module(self.module), self.attr)(table, options)

    def __repr__(self) -> str:
        return f"<metric {self.module}.{self.attr}>"


@hookimpl
def register_metrics(register):
    register("accuracy", _Lazy("shardeval_metrics.metrics", "accuracy"))
    register("mean", _Lazy("shardeval_metrics.metrics", "mean"))
    register("pass@k", _Lazy("shardeval_metrics.metrics", "pass_at_k"))
    register("perplexity", _Lazy("shardeval_metrics.metrics", "perplexity"))
    register("classification", _Lazy("shardeval_metrics.classification", "classification"))


@hookimpl
def register_commands(cli):
    from shardeval_metrics.command import compare_command

    cli.add_command(compare_command)

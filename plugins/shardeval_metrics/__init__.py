"""Built-in plugin: the metrics `shardeval merge` computes, and the statistics of `shardeval compare`.

Registered through the `shardeval` entry-point group like any third-party metric package. Each
metric is f(table: ScoreTable, options: MetricOptions) -> {name: MetricValue}
(see shardeval.results.metrics). numpy lives only in the submodules, which load on a metric's first call,
so loading plugins (`shardeval --help`, `shardeval plugins`) never imports numpy.

    accuracy, mean   shardeval_metrics.metrics         per-problem means; CLT / Wilson / clustered
    pass@k           shardeval_metrics.metrics         unbiased pass@1 … pass@repeats
    perplexity       shardeval_metrics.metrics         exp(Σ nll / Σ tokens), token_nll; delta method
    classification   shardeval_metrics.classification  macro/weighted F1, macro P/R; bootstrap
    (compare)        shardeval_metrics.compare         compare_tables(a, b, options)
    (sweep)          shardeval_metrics.paired          hook paired_differences(pairs, options)
"""

from __future__ import annotations

from shardeval.api.plugin import Lazy, hookimpl


@hookimpl
def register_metrics(register):
    register("accuracy", Lazy("shardeval_metrics.metrics:accuracy"))
    register("mean", Lazy("shardeval_metrics.metrics:mean"))
    register("pass@k", Lazy("shardeval_metrics.metrics:pass_at_k"))
    register("perplexity", Lazy("shardeval_metrics.metrics:perplexity"))
    register("classification", Lazy("shardeval_metrics.classification:classification"))


@hookimpl
def register_commands(cli):
    from shardeval_metrics.command import compare_command

    cli.add_command(compare_command)


@hookimpl
def paired_differences(pairs, options):
    from shardeval_metrics.paired import paired_differences as compute

    return compute(pairs, options)

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
    (gate, plan)     shardeval_metrics.decision        decide(base, cand, margin, alpha, power) -> GateResult's rows
    (sweep)          shardeval_metrics.paired          hook paired_differences(pairs, options)
    (sweep)          shardeval_metrics.paired          hook family_adjusted(p_values): Holm across the table
    (sweep)          shardeval_metrics.decide_command  hook gate_verdicts(pairs, ...): a model's gate (sweep.gate)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardeval.api.plugin import Lazy, hookimpl

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import click

    from shardeval.api.metric import GateRule, MetricOptions, ScoreTable
    from shardeval.api.plugin import Register


@hookimpl
def register_metrics(register: Register) -> None:
    register("accuracy", Lazy("shardeval_metrics.metrics:accuracy"))
    register("mean", Lazy("shardeval_metrics.metrics:mean"))
    register("pass@k", Lazy("shardeval_metrics.metrics:pass_at_k"))
    register("perplexity", Lazy("shardeval_metrics.metrics:perplexity"))
    register("classification", Lazy("shardeval_metrics.classification:classification"))


@hookimpl
def register_commands(cli: click.Group) -> None:
    from shardeval_metrics.command import compare_command
    from shardeval_metrics.decide_command import gate_command, plan_command

    cli.add_command(compare_command)
    cli.add_command(gate_command)
    cli.add_command(plan_command)


@hookimpl
def paired_differences(pairs: list[tuple[ScoreTable, ScoreTable]], options: MetricOptions) -> list[dict[str, Any]]:
    from shardeval_metrics.paired import paired_differences as compute

    return compute(pairs, options)


@hookimpl
def gate_verdicts(
    pairs: Sequence[tuple[ScoreTable, ScoreTable]],
    options: MetricOptions,
    rule: GateRule,
    benchmarks: Sequence[str],
    metrics: Sequence[str],
    not_compared: Mapping[str, str],
    baseline: str,
    candidate: str,
) -> dict[str, Any]:
    from shardeval_metrics.decide_command import gate_pairs

    return gate_pairs(list(pairs), rule, list(benchmarks), list(metrics), dict(not_compared), baseline, candidate)


@hookimpl
def family_adjusted(p_values: Sequence[float | None]) -> list[float | None]:
    from shardeval_metrics.paired import holm

    return holm(list(p_values))

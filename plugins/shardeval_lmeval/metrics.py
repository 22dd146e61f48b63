"""The `lm_eval` metric: shardeval's interval on every per-document metric lm-eval reports.

A record's `scores` hold each "metric,filter" lm-eval's process_results gave the document
(gsm8k: "exact_match,strict-match" and "exact_match,flexible-extract"). Each is summarised by
the registered `accuracy` metric (the mean with its interval, binomial where the values are 0/1)
and carries lm-eval's own stderr of the mean beside it (`details.lm_eval_stderr`: the sample
standard deviation over sqrt(n), lm-eval's `mean_stderr`). A corpus-level metric (wikitext's
word_perplexity, byte_perplexity, bits_per_byte; bleu) is no per-document number: each document
keeps its item's parts ("word_perplexity,none|weighted_perplexity|0" and "…|1") and the metric is
lm-eval's registered aggregation over them, the number lm-eval's own results file shows.
"""

from __future__ import annotations

import dataclasses
import math
from array import array

from shardeval.api.metric import MetricOptions, MetricValue, ScoreTable
from shardeval.api.plugin import registry


def lm_eval_metrics(table: ScoreTable, options: MetricOptions) -> dict[str, MetricValue]:
    accuracy = registry().get("metrics", "accuracy", where="metric lm_eval").factory
    out: dict[str, MetricValue] = {}
    corpus: dict[tuple[str, str], dict[int, array]] = {}  # ("metric,filter", aggregation) -> part j -> values
    for key, values in table.extra.items():
        if "," not in key:  # not an lm-eval "metric,filter" key
            continue
        if "|" in key:  # one part of a corpus-level metric's per-document item
            name, aggregation, j = key.rsplit("|", 2)
            corpus.setdefault((name, aggregation), {})[int(j)] = values
            continue
        (value,) = accuracy(dataclasses.replace(table, score=values, extra={}), options).values()
        value.details = {**value.details, "lm_eval_stderr": _mean_stderr(values)}
        out[key] = value
    for (name, aggregation), parts in corpus.items():
        out[name] = _corpus_metric(aggregation, [parts[j] for j in sorted(parts)])
    return out


def _corpus_metric(aggregation: str, parts: list[array]) -> MetricValue:
    """A corpus-level metric as lm-eval computes it: its registered aggregation over every scored
    document's item (word_perplexity: exp(-Σ loglikelihood / Σ words)). lm-eval gives no stderr
    for these (weighted_perplexity, bits_per_byte are not bootstrapped), and neither does shardeval."""
    import lm_eval.api.metrics  # noqa: F401  (registers lm-eval's aggregations)
    from lm_eval.api.registry import get_aggregation

    items = [tuple(x) for x in zip(*parts) if all(math.isfinite(v) for v in x)]
    value = float(get_aggregation(aggregation)(items)) if items else None
    return MetricValue(
        value=value,
        n=len(items),
        ci_method="none",
        details={"lm_eval_aggregation": aggregation, "corpus_level": True, "lm_eval_stderr": None},
    )


def _mean_stderr(values: array) -> float | None:
    """lm-eval's stderr of a mean: sample standard deviation (n - 1) over sqrt(n), of the valid cells."""
    from lm_eval.api.metrics import mean_stderr

    valid = [v for v in values if math.isfinite(v)]
    return float(mean_stderr(valid)) if len(valid) > 1 else None

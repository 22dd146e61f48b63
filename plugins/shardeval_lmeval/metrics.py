"""The `lm_eval` metric: shardeval's interval on every per-document metric lm-eval reports.

A record's `scores` hold each "metric,filter" lm-eval's process_results gave the document
(gsm8k: "exact_match,strict-match" and "exact_match,flexible-extract"). Each is summarised by
the registered `accuracy` metric (the mean with its interval, binomial where the values are 0/1)
and carries lm-eval's own stderr of the mean beside it (`details.lm_eval_stderr`: the sample
standard deviation over sqrt(n), lm-eval's `mean_stderr`). Corpus-level metrics (bleu, f1,
perplexities) are no per-document number: they are in lm-eval's results file (merged/lm_eval/).
"""

from __future__ import annotations

import dataclasses
import math
from array import array

from shardeval.api import MetricOptions, MetricValue, registry, ScoreTable


def lm_eval_metrics(table: ScoreTable, options: MetricOptions) -> dict[str, MetricValue]:
    accuracy = registry().get("metrics", "accuracy", where="metric lm_eval").factory
    out: dict[str, MetricValue] = {}
    for key, values in table.extra.items():
        if "," not in key:  # not an lm-eval "metric,filter" key
            continue
        (value,) = accuracy(dataclasses.replace(table, score=values, extra={}), options).values()
        value.details = {**value.details, "lm_eval_stderr": _mean_stderr(values)}
        out[key] = value
    return out


def _mean_stderr(values: array) -> float | None:
    """lm-eval's stderr of a mean: sample standard deviation (n - 1) over sqrt(n), of the valid cells."""
    from lm_eval.api.metrics import mean_stderr

    valid = [v for v in values if math.isfinite(v)]
    return float(mean_stderr(valid)) if len(valid) > 1 else None

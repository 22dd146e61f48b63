"""sweep.json, assembled from one part per model.

A model's part is what sweep.json holds about it against the baseline's merge: its cells, its
paired differences with the baseline (each p_holm still its own call's), what is not compared and
why, what is missing. It depends on that model's merge and the baseline's only, so a sweep that
grows by one checkpoint computes one part (`shardeval watch`); the one-shot merge builds every
part the same way, so both write the same bytes. `assemble` puts the parts in the plan's order
and adjusts every p across the whole table at once (Holm: the `family_adjusted` hook), the one
step that reads every row, and a cheap one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from shardeval import plugins
from shardeval.identity import incomparable
from shardeval.results.merge import BenchmarkMerge, MergeResult
from shardeval.results.metrics import MetricOptions, headline_metric
from shardeval.results.report import counts, reasoning_counts
from shardeval.store.records import GateRule, SweepPlan

NO_PAIRED = "no installed plugin computes paired differences (the built-in `metrics` plugin does)"
NO_GATE = "no installed plugin decides the gate (the built-in `metrics` plugin does): no verdicts"
NO_FAMILY = "no installed plugin adjusts the p-values across the table: p_holm is left empty (the built-in `metrics` plugin does it)"


@dataclass(frozen=True)
class ModelPart:
    """One model's share of sweep.json, against one merge of the baseline."""

    service: str
    cells: list[dict[str, Any]] = field(default_factory=list)
    vs_baseline: list[dict[str, Any]] = field(default_factory=list)  # p_holm: set for the whole table by `assemble`
    not_compared: list[dict[str, Any]] = field(default_factory=list)
    no_results: list[dict[str, Any]] = field(default_factory=list)  # the model's own `missing` entry, while it has no merge
    baseline_lacks: list[dict[str, Any]] = field(default_factory=list)  # its benchmarks the baseline has no results for
    unpaired: bool = False  # it has pairs, and no plugin computed them
    failed: list[dict[str, Any]] = field(default_factory=list)  # its shards that failed (a server that never loaded), and why
    gate: dict[str, Any] | None = None  # its verdict against the baseline (`sweep.gate`; the `gate_verdicts` hook)


def by_benchmark(result: MergeResult | None) -> dict[str, BenchmarkMerge]:
    """A merge's benchmarks by name (the baseline's: what each model's part is compared with)."""
    return {b.manifest.name: b for b in result.benchmarks} if result is not None else {}


def model_part(
    service: str,
    result: MergeResult | None,
    note: str | None,
    base: Mapping[str, BenchmarkMerge],
    baseline: str,
    options: MetricOptions,
    rule: GateRule | None = None,
) -> ModelPart:
    """The part of `service` (its merge `result`, or None and why) against the baseline's
    benchmarks `base`; its pairs go to the `paired_differences` hook in one call, and with a
    decision `rule` to the `gate_verdicts` hook in one more."""
    if result is None:
        return ModelPart(service, no_results=[{"service": service, "why": note}])
    cells, labels, pairs, apart, lacks = [], [], [], [], []
    for bench, b in by_benchmark(result).items():
        # other questions, or scored otherwise, than the baseline's: shown, marked, never paired with it
        why = incomparable(base[bench].manifest, b.manifest, baseline, service) if bench in base else None
        cells += _cells_of(service, bench, b, why)
        if why:
            apart.append({"service": service, "benchmark": bench, "why": f"not compared with {baseline}: {why}"})
        elif service != baseline and bench in base:
            metric = headline_metric(b.manifest.metrics) or "score"  # the pairing compares the cells' scores
            labels.append({"service": service, "benchmark": bench, "metric": metric})
            pairs.append((base[bench].table, b.table))
        if service != baseline and bench not in base:
            lacks.append({"service": service, "benchmark": bench, "why": "the baseline has no results for it"})
    found = plugins.hooks().paired_differences(pairs=pairs, options=options) if pairs else []
    vs = [{**label, **row} for label, row in zip(labels, found or [])]
    gate = None
    if rule is not None and service != baseline:
        apart_from_gate = {entry["benchmark"]: entry["why"] for entry in apart}
        gate = model_gate(service, baseline, pairs, labels, apart_from_gate, options, rule)
    return ModelPart(
        service, cells, vs, apart, [], lacks, unpaired=bool(pairs) and found is None, failed=failed_shards(service, result), gate=gate
    )


def model_gate(
    service: str,
    baseline: str,
    pairs: list[Any],
    labels: list[dict[str, Any]],
    apart: dict[str, str],
    options: MetricOptions,
    rule: GateRule,
) -> dict[str, Any]:
    """The model's verdict against the baseline (docs/decisions.md); with no benchmark paired,
    INCONCLUSIVE and why: a gate never passes a model it could not compare."""
    if not pairs:
        return {"service": service, "verdict": "INCONCLUSIVE", "benchmarks": [], "why": "no benchmark is paired with the baseline"}
    report = plugins.hooks().gate_verdicts(
        pairs=pairs,
        options=options,
        rule=rule,
        benchmarks=[label["benchmark"] for label in labels],
        metrics=[label["metric"] for label in labels],
        not_compared=apart,
        baseline=baseline,
        candidate=service,
    )
    if report is None:
        return {"service": service, "verdict": None, "benchmarks": [], "why": NO_GATE}
    return {"service": service, **report}


def failed_shards(service: str, result: MergeResult) -> list[dict[str, Any]]:
    """The model's shards whose manifest says `failed`, each with the first line of its reason: a
    checkpoint vLLM could not load is marked failed in the table, not only missing."""
    return [
        {"service": service, "shard": f"{m.shard_idx}/{m.total_shards}", "why": (m.reason or "no reason recorded").splitlines()[0]}
        for m in (shard.manifest for shard in result.run.shards)
        if m.state == "failed"
    ]


def _cells_of(service: str, bench: str, b: BenchmarkMerge, why: str | None) -> list[dict[str, Any]]:
    """One model × benchmark's cells of sweep.json, one per metric, each with the coverage behind
    it (and why it is not compared with the baseline, and what the answers thought, when so)."""
    c = counts(b)
    coverage = {
        "n_ok": c["n_ok"],
        "n_expected": c["n_expected"],
        "n_errors": c["n_errors"],
        "n_missing": c["n_missing"],
        "complete": c["n_ok"] == c["n_expected"],
    }
    coverage |= {"differs_from_baseline": why} if why else {}
    if (reasoning := reasoning_counts(b)) is not None:  # absent for a model that does not think
        coverage["reasoning"] = reasoning
    return [
        {
            "service": service,
            "benchmark": bench,
            "metric": name,
            "value": v.value,
            "ci_low": v.ci_low,
            "ci_high": v.ci_high,
            "n": v.n,
            "ci_method": v.ci_method,
            **coverage,
        }
        for name, v in b.metrics.items()
    ]


def family_adjusted(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """The rows with p_holm adjusted across all of them (one family), new dicts (a part's rows are
    reused by the next update); and whether a plugin adjusted them."""
    if not rows:
        return [], True
    adjusted = plugins.hooks().family_adjusted(p_values=[row.get("p_value") for row in rows])
    found = adjusted is not None
    return [{**row, "p_holm": p} for row, p in zip(rows, adjusted if found else [None] * len(rows))], found


def gate_section(rule: GateRule | None, parts: Sequence[ModelPart]) -> dict[str, Any]:
    """sweep.json's `gate`: the rule and each model's verdict; nothing without a rule."""
    if rule is None:
        return {}
    return {"gate": {"rule": msgspec.to_builtins(rule), "models": [part.gate for part in parts if part.gate is not None]}}


def assemble(plan: SweepPlan, parts: Sequence[ModelPart], partial: bool, options: MetricOptions, errors_as_wrong: bool) -> dict[str, Any]:
    """sweep.json from the models' parts, in the plan's order: the table's cells, the paired
    differences against the baseline (Holm across the table), what is missing."""
    vs, adjusted = family_adjusted([row for part in parts for row in part.vs_baseline])
    doc: dict[str, Any] = {
        "baseline": plan.baseline,
        "services": plan.services,
        "confidence": options.confidence,
        "errors_as_wrong": errors_as_wrong,
        "partial": partial,
        "cells": [cell for part in parts for cell in part.cells],
        "vs_baseline": vs,
        # the models with no results, then the benchmarks the baseline lacks
        "missing": [entry for part in parts for entry in part.no_results] + [entry for part in parts for entry in part.baseline_lacks],
    }
    if apart := [entry for part in parts for entry in part.not_compared]:  # absent when every pair is comparable
        doc["not_compared"] = apart
    if failed := [entry for part in parts for entry in part.failed]:  # absent when no shard failed
        doc["failed"] = failed
    doc |= gate_section(plan.gate, parts)
    if any(part.unpaired for part in parts):
        doc["vs_baseline_note"] = NO_PAIRED
    elif not adjusted:
        doc["vs_baseline_note"] = NO_FAMILY
    return doc

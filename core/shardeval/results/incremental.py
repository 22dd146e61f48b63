"""A sweep's merge kept between updates, for a sweep that grows a checkpoint at a time (`shardeval watch`).

`shardeval merge` of a sweep merges every model, then computes sweep.json from one part per model
(shardeval.results.sweep_parts). An `IncrementalSweep` keeps each model's merge and part between
updates: an update merges only the models that changed (and those not merged yet), computes only
their parts, and writes only their merged/. What reads every model is what must: Holm across the
table, and the three sweep files (sweep.json, sweep.md, sweep.html), whose cost per model is small
beside one model's merge. When the baseline's merge changes (or another model is the baseline),
every part is computed again, since each is a comparison with it. Since the parts and their
assembly are the one-shot merge's own, a watched sweep once finished equals `shardeval merge` of
it byte for byte (sweep.json, every model's scores.json).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable

import msgspec

from shardeval.results.merge import merge_run
from shardeval.results.metrics import MetricOptions
from shardeval.results.sweep_merge import (
    NOT_WRITTEN_YET,
    Merged,
    SweepMerge,
    SweepModel,
    sweep_merged,
    sweep_partial,
    write_models,
    write_sweep_files,
)
from shardeval.results.sweep_parts import ModelPart, assemble, by_benchmark, model_part
from shardeval.store.discover import MERGED_DIR, model_roots, naming_model, refuse_inside_shard
from shardeval.store.records import SweepPlan


class IncrementalSweep:
    """A sweep's merge kept between updates: each model merged once, again only when it changed."""

    def __init__(
        self,
        root: str,
        *,
        confidence: float = 0.95,
        errors_as_wrong: bool = False,
        options: MetricOptions | None = None,
        allow_mixed_models: bool = False,
    ) -> None:
        self.root = root
        self.out = os.path.join(root, MERGED_DIR)
        refuse_inside_shard(self.out, "-o")
        self.confidence = confidence
        self.errors_as_wrong = errors_as_wrong
        self.options = options or MetricOptions(confidence=confidence)
        self.allow_mixed_models = allow_mixed_models
        self._models: dict[str, SweepModel] = {}
        self._parts: dict[str, ModelPart] = {}
        self._reports: dict[str, str] = {}  # each written model's report.html
        self._unwritten: set[str] = set()  # merged here, its merged/ not written yet
        self._against: str | None = None  # the baseline the parts compare with

    def update(self, plan: SweepPlan, changed: Iterable[str] = ()) -> Merged:
        """Merge the models named in `changed` and those of `plan` not merged yet (a model no longer
        in it is dropped), then write their merged/ and the sweep's files; what `merge_any` returns
        for the sweep. A model's merge that refuses (mixed identities) raises as `shardeval merge`
        does, and this keeps what it had."""
        fresh = self._merge(plan, set(changed))
        if plan.baseline != self._against or plan.baseline in fresh:
            fresh = set(plan.services)  # every part is a comparison with the baseline's merge
        models = [self._models[name] for name in plan.services]
        base = by_benchmark(self._models[plan.baseline].result if plan.baseline in self._models else None)
        for m in models:
            if m.service in fresh:
                self._parts[m.service] = model_part(m.service, m.result, m.note, base, plan.baseline, self.options, plan.gate)
        self._against = plan.baseline
        document = assemble(plan, [self._parts[name] for name in plan.services], sweep_partial(models), self.options, self.errors_as_wrong)
        sweep = SweepMerge(self.root, plan, models, document)
        self._reports |= write_models([m for m in models if m.service in self._unwritten], None, self.confidence)
        self._unwritten.clear()
        write_sweep_files(sweep, self.out, {name: self._reports[name] for name in plan.services if name in self._reports}, self.confidence)
        merged = sweep_merged(sweep, self.out)
        # What is kept between updates (every model's merge: the 50th checkpoint's sweep holds 50) is
        # long-lived; frozen, the collector no longer walks it on every collection an update's
        # allocations trigger, which made an update's cost grow with the models before it.
        gc.freeze()
        return merged

    def _merge(self, plan: SweepPlan, changed: set[str]) -> set[str]:
        """Merge what is asked or new; the models whose merge is new (a model still without a
        shard is not, once known). Kept only when every merge succeeded."""
        for gone in set(self._models) - set(plan.services):
            del self._models[gone]
            self._parts.pop(gone, None)
            self._reports.pop(gone, None)
            self._unwritten.discard(gone)
        wanted = [name for name in plan.services if name in changed or name not in self._models or self._models[name].result is None]
        merged: dict[str, SweepModel] = {}
        for name, run_root in model_roots(self.root, msgspec.structs.replace(plan, services=wanted)):
            if run_root is None:
                if name not in self._models or self._models[name].result is not None:
                    merged[name] = SweepModel(name, None, NOT_WRITTEN_YET)
                continue
            with naming_model(name):
                result = merge_run(
                    run_root,
                    errors_as_wrong=self.errors_as_wrong,
                    options=self.options,
                    keep_ids=True,
                    allow_mixed_models=self.allow_mixed_models,
                )
            merged[name] = SweepModel(name, result)
        self._models |= merged
        self._unwritten |= {name for name, m in merged.items() if m.result is not None}
        return set(merged)

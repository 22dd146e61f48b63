"""What the hooks hand a plugin (shardeval.hookspecs), as named types.

The merge's results live high in the core (shardeval.results: they load plugins to compute
metrics), and the hooks low (shardeval.plugins loads them), so the hooks cannot name the merge's
classes without an import cycle. This room sits below both: each payload is a Protocol here, the
read-only face of a core class, which the core's class satisfies structurally. mypy holds each
class to its view where the core hands it over (shardeval.results.pages and .metrics,
shardeval.plugins.register), so a view cannot drift from what is passed.

A plugin may annotate a hook with the view (the surface every release keeps) or with the concrete
class from shardeval.api (MergeResult, SweepMerge, ...), which is what it is given. The core
imports this room for annotations only (stdlib at run time), so `shardeval --help` never loads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from array import array

    from shardeval.store.discover import Run
    from shardeval.store.records import BenchmarkManifest, SweepPlan

# One benchmark's row of `shardeval compare --json` (the metrics plugin's compare_tables): JSON
# values by name (docs/merge.md lists them), or {"benchmark", "not_compared"} for one not paired.
Comparison = Mapping[str, object]
# One (baseline, other) pair's paired difference, as sweep.json's `vs_baseline` holds it (diff,
# ci_low, ci_high, p_value, p_holm, n, test, ...; docs/merge.md): JSON values by name.
PairedDifference = Mapping[str, object]
# One model's decision against the baseline (`gate_verdicts`; docs/decisions.md): {"verdict": "GO" |
# "NO-GO" | "INCONCLUSIVE", "benchmarks": [one row per benchmark: its verdict and the numbers it
# rests on], ...}: JSON values by name, as gate.json and sweep.json's `gate` hold them.
GateReport = Mapping[str, object]


class RegisteredEntryView(Protocol):
    """One registration (shardeval.plugins.register.Entry): a name, what makes it, and who registered it."""

    @property
    def name(self) -> str: ...
    @property
    def factory(self) -> Callable[..., object]: ...
    @property
    def plugin(self) -> str: ...
    @property
    def config(self) -> type | None: ...


class RegisterCallback(Protocol):
    """The `register` argument of every `register_<kind>` hook (shardeval.plugins.register.Register):
    `register(name, factory, config=None)`; `registered` maps each name registered so far to its entry."""

    def __call__(self, name: str, factory: Callable[..., object], config: type | None = None) -> None: ...
    @property
    def registered(self) -> Mapping[str, RegisteredEntryView]: ...


class ScoreTableView(Protocol):
    """One benchmark's deduplicated outcome, what a metric reads (shardeval.results.metrics.ScoreTable):
    flat arrays over cells c = problem * repeats + repeat."""

    @property
    def benchmark(self) -> str: ...
    @property
    def n_problems(self) -> int: ...
    @property
    def repeats(self) -> int: ...
    @property
    def n_cells(self) -> int: ...
    @property
    def score(self) -> array[float]:
        """The primary score per cell; NaN where the cell has no valid sample (missing, error)."""

    @property
    def status(self) -> bytearray:
        """MISSING | OK | ERROR per cell (shardeval.store.standing)."""

    @property
    def cluster(self) -> array[int] | None:
        """Per problem: an index into cluster_names, -1 unknown; None without categories."""

    @property
    def cluster_names(self) -> list[str]: ...
    @property
    def extra(self) -> dict[str, array[float]]:
        """Per cell: the records' named `scores`."""

    @property
    def predicted(self) -> array[int] | None:
        """Per cell: an index into labels (classification), -1 none."""

    @property
    def gold(self) -> array[int] | None: ...
    @property
    def labels(self) -> list[str]: ...
    @property
    def problem_ids(self) -> list[str] | None:
        """Per problem, for pairing problems across runs."""


class MetricOptionsView(Protocol):
    """How metrics are computed (shardeval.results.metrics.MetricOptions)."""

    @property
    def confidence(self) -> float: ...
    @property
    def bootstrap_samples(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def ci_method(self) -> str:
        """One of shardeval.results.ci_methods.CI_METHODS (`merge --ci-method`)."""


class MetricValueView(Protocol):
    """One number and how sure it is (shardeval.results.metrics.MetricValue)."""

    @property
    def value(self) -> float | None: ...
    @property
    def stderr(self) -> float | None: ...
    @property
    def ci_low(self) -> float | None: ...
    @property
    def ci_high(self) -> float | None: ...
    @property
    def ci_method(self) -> str: ...
    @property
    def n(self) -> int: ...
    @property
    def details(self) -> dict[str, object]: ...


class ReasoningTallyView(Protocol):
    """What one benchmark's standing ok records say of their thinking (shardeval.results.merge.ReasoningTally)."""

    @property
    def n(self) -> int:
        """Ok records with any reasoning fact."""

    @property
    def truncated_reasoning(self) -> int: ...
    @property
    def truncated(self) -> int: ...
    @property
    def with_reasoning(self) -> int: ...
    @property
    def tokens(self) -> array[int]:
        """The thinking tokens of each ok record that counted them."""

    @property
    def outcomes(self) -> bytearray:
        """Beside `tokens`: that record's outcome (ReasoningTally.ANSWERED, TRUNCATED, TRUNCATED_REASONING)."""

    @property
    def cut_cells(self) -> array[int]:
        """The cells whose standing answer was cut off while thinking."""

    def sorted_tokens(self) -> list[int]: ...


class CellsView(Protocol):
    """Per cell of one benchmark, the standing record's numbers and where its lines are
    (shardeval.results.merge.Cells): flat arrays over cells c = problem * repeats + repeat."""

    @property
    def n_problems(self) -> int: ...
    @property
    def repeats(self) -> int: ...
    @property
    def status(self) -> bytearray:
        """MISSING | OK | ERROR per cell."""

    @property
    def score(self) -> array[float]: ...
    @property
    def error_kind(self) -> bytearray:
        """0 for no error, else 1 + the kind's code in `kinds`."""

    @property
    def kinds(self) -> dict[str, int]: ...
    @property
    def ttft(self) -> array[float]: ...
    @property
    def latency(self) -> array[float]: ...
    @property
    def tokens(self) -> array[int]: ...
    @property
    def cached(self) -> bytearray: ...
    @property
    def src(self) -> array[int]:
        """The standing record's shard (an index into run.shards), -1 none."""

    @property
    def offset(self) -> array[int]:
        """Where its line starts in that shard's results file."""

    @property
    def length(self) -> array[int]: ...
    @property
    def traj_offset(self) -> array[int]:
        """Where its trajectory's line starts, -1 none (known once the merge wrote its files)."""

    @property
    def traj_length(self) -> array[int]: ...
    @property
    def cluster(self) -> array[int]:
        """Per problem: an index into `clusters`' codes, -1 none."""

    @property
    def clusters(self) -> dict[str, int]: ...
    @property
    def reasoning(self) -> ReasoningTallyView: ...


class BenchmarkMergeView(Protocol):
    """One benchmark of a merged run (shardeval.results.merge.BenchmarkMerge)."""

    @property
    def manifest(self) -> BenchmarkManifest: ...
    @property
    def cells(self) -> CellsView: ...
    @property
    def table(self) -> ScoreTableView: ...
    @property
    def missing_by_shard(self) -> dict[int, int]: ...
    @property
    def metrics(self) -> Mapping[str, MetricValueView]: ...
    @property
    def metric_problems(self) -> list[str]:
        """Metrics not installed or failed, one line each."""

    @property
    def distributions(self) -> dict[str, list[float | None]] | None: ...


class MergeResultView(Protocol):
    """A merged run (shardeval.results.merge.MergeResult): what scores.json, report.md and the
    pages are made from."""

    @property
    def run(self) -> Run: ...
    @property
    def benchmarks(self) -> Sequence[BenchmarkMergeView]: ...
    @property
    def errors_as_wrong(self) -> bool: ...
    @property
    def verdict(self) -> str:
        """COMPLETE, PARTIAL or ERRORS."""

    @property
    def complete(self) -> bool: ...
    @property
    def partial(self) -> bool: ...
    def verdict_line(self) -> str: ...
    def error_cells(self) -> tuple[int, Mapping[str, int]]: ...
    def rerun_shards(self) -> list[int]: ...


class ModelMergeView(Protocol):
    """One model of a merged sweep (shardeval.results.sweep_merge.ModelMerge)."""

    @property
    def service(self) -> str | None:
        """The sweep's name of the model; None for a run that is not a sweep's."""

    @property
    def result(self) -> MergeResultView | None:
        """None: no shard of it has written yet (`note` says so)."""

    @property
    def note(self) -> str | None: ...


class SweepMergeView(Protocol):
    """A merged sweep (shardeval.results.sweep_merge.SweepMerge): every model's merge and sweep.json."""

    @property
    def root(self) -> str: ...
    @property
    def plan(self) -> SweepPlan: ...
    @property
    def models(self) -> Sequence[ModelMergeView]: ...
    @property
    def document(self) -> Mapping[str, object]:
        """sweep.json as written."""

    @property
    def verdict(self) -> str: ...
    @property
    def complete(self) -> bool: ...
    @property
    def partial(self) -> bool: ...
    def verdict_line(self) -> str: ...

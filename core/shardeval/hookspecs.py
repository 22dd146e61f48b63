"""The shardeval plugin hooks. Every built-in (plugins/shardeval_*) uses exactly these.

A plugin is a module (found through the `shardeval` entry-point group, the plugin directory, or
`SHARDEVAL_PLUGINS`) that defines any of the functions below decorated with `@hookimpl`
(`from shardeval.api import hookimpl`). Hooks are called through pluggy, so `tryfirst`,
`trylast` and wrappers (`wrapper=True`, `hookwrapper=True`) work as pluggy documents.

Registration hooks receive a `register` callback (a `shardeval.plugins.register.Register`; its
type here, shardeval.payloads.RegisterCallback): `register(name, factory, config=None)`. The core
attributes each registration to the calling plugin and reports a clash by name. Precedence (shardeval.plugins.register): a registration from a
`tryfirst` hook replaces a plain one on purpose, a plain one replaces a `trylast` one; otherwise
the plugin loaded first keeps the name and the other is named in a warning. `register.registered` maps each name registered so far to its Entry (a wrapper sees, after its
`yield`, what the others registered). Lifecycle hooks are named after events and receive plain values.

Every payload is a named type: the store's records (shardeval.store.records), or for what the merge
computes, a read-only view in shardeval.payloads that the core's class (shardeval.api.MergeResult,
SweepMerge, ...) satisfies; that room sits below the hooks, so they import it without a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import pluggy

if TYPE_CHECKING:  # annotations only: `--help` loads the hooks, and needs none of these
    import click

    from shardeval.payloads import (
        BenchmarkMergeView,
        Comparison,
        GateReport,
        MergeResultView,
        MetricOptionsView,
        PairedDifference,
        RegisterCallback,
        ScoreTableView,
        SweepMergeView,
    )
    from shardeval.store.records import GateRule, Manifest, ResultRecord

hookspec = pluggy.HookspecMarker("shardeval")
hookimpl = pluggy.HookimplMarker("shardeval")


@hookspec
def register_benchmarks(register: RegisterCallback) -> None:
    """Register benchmarks: `register(name, factory)`; factory(params: dict) -> shardeval.api.Benchmark."""


@hookspec
def register_solvers(register: RegisterCallback) -> None:
    """Register solvers: `register(type, factory)`; factory(SolverConfig, ServiceHandle) -> Solver."""


@hookspec
def register_services(register: RegisterCallback) -> None:
    """Register model services: `register(type, factory, config=ServiceConfig subclass)`.

    factory(name, config, ServiceContext) returns an async context manager yielding an Endpoint
    (with `process=` when it started a server here, so the shard watches it). Orchestrators never
    test the type: they ask the config's `managed()`, `served_model()`, `launch_line()`, `gpus()`,
    `port_override()` and `identity()` (shardeval.config.ServiceConfig documents each).
    """


@hookspec
def register_orchestrators(register: RegisterCallback) -> None:
    """Register cluster types: `register(type, factory, config=ClusterConfig subclass)`.

    factory: an `Orchestrator` subclass (shardeval.launch.lifecycle: the phases the core runs in
    order), made with the `LaunchRequest` when no shard is selected (shardeval.launch.orchestrator:
    the request carries the config and builds each shard's command line); or, the older form, a
    function(request) -> exit code that does the whole launch itself.
    """


@hookspec
def register_metrics(register: RegisterCallback) -> None:
    """Register metrics: `register(name, metric)`, metric(ScoreTable, MetricOptions) -> {name: MetricValue}; used by `shardeval merge`."""


@hookspec
def register_exporters(register: RegisterCallback) -> None:
    """Register export targets (`shardeval export RUN --to NAME`, a config's `export:` list):
    `register(name, factory, config=ExportConfig subclass)`; factory(config, TrackerExport) ->
    list of lines for the user. shardeval.results.trackers documents what a TrackerExport holds and
    the rules every target keeps (one tracker run per model and benchmark, found again by its key)."""


class AddExportFlag(Protocol):
    """The `add` callback of `export_flags` (shardeval.plugins.export_flags collects what it is given)."""

    def __call__(self, target: str, flag: str, key: str, help: str, metavar: str = "VALUE") -> None: ...


@hookspec
def export_flags(add: AddExportFlag) -> None:
    """Declare the command-line flags of your export targets, as pytest's `pytest_addoption` lets a
    plugin add its options: `add(target, flag, key, help, metavar="VALUE")` makes `shardeval export
    --to TARGET FLAG VALUE` set the target config's `key` (e.g. `add("mlflow", "--tracking-uri",
    "tracking_uri", "the tracking server or store", "URI")`). Stdlib only here: `--help` calls it.
    The core names no target; `-o` is the core's own and sets a target's `dir` key."""


@hookspec(firstresult=True)
def paired_differences(pairs: Sequence[tuple[ScoreTableView, ScoreTableView]], options: MetricOptionsView) -> list[PairedDifference] | None:
    """For each (baseline, other) pair of one benchmark's tables: the paired difference other − baseline on the (problem, repeat) cells valid in both, with interval, p-value and the Holm-adjusted p-value across all pairs given (one call = one family). None: no plugin computes it.

    The sweep merge calls it once per model (that model's pairs) and replaces each row's `p_holm`
    by `family_adjusted` over the whole table, so a watched sweep computes only a new model's pairs."""


@hookspec(firstresult=True)
def family_adjusted(p_values: Sequence[float | None]) -> list[float | None] | None:
    """The p-values of one family (every paired difference of a sweep's table, in its order)
    adjusted for multiple comparisons, in the same order: sweep.json's `p_holm` (the metrics
    plugin: Holm's step-down). None stays None and is not counted. None: no plugin adjusts them."""


@hookspec(firstresult=True)
def gate_verdicts(
    pairs: Sequence[tuple[ScoreTableView, ScoreTableView]],
    options: MetricOptionsView,
    rule: GateRule,
    benchmarks: Sequence[str],
    metrics: Sequence[str],
    not_compared: Mapping[str, str],
    baseline: str,
    candidate: str,
) -> GateReport | None:
    """One model's decision against the baseline under `rule` (docs/decisions.md): for each
    (baseline, candidate) pair of one benchmark's tables (its name in `benchmarks`, its headline
    metric in `metrics`, in order) a verdict GO / NO-GO / INCONCLUSIVE with the numbers it rests
    on, and the model's overall verdict: GO only when every benchmark is GO, so one the candidate
    could not be compared on (`not_compared`: benchmark -> why) keeps it from GO. The sweep merge
    calls it once per model when the sweep has a `gate`; `shardeval gate` makes the same report
    (gate.json's shape). None: no plugin decides."""


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add click commands to the `shardeval` group: `cli.add_command(...)` or `@cli.command()`."""


@hookspec
def run_status(run_dir: str) -> str | None:
    """Extra text for `shardeval status RUN_DIR`, e.g. the scheduler's view of the run's jobs (None: nothing to add)."""


@hookspec
def rerun_hint(run_dir: str, shards: list[int]) -> str | None:
    """How to rerun these shards of RUN_DIR with the orchestrator that launched them, for merge's
    report (e.g. SLURM's `sbatch --array=3,7 …/eval.sbatch`); None when this plugin did not launch
    the run. The report always adds the orchestrator-free way (`shardeval run … --shard I/N`)."""


@hookspec(firstresult=True)
def launch_pending(run_dir: str, service: str | None) -> bool | None:
    """Whether the scheduler this plugin submitted the latest launch of RUN_DIR to (of the sweep
    model `service`; of the whole run when None) still holds cells of it, queued or running. True:
    `shardeval watch` waits for them, never launching them again; False: it holds none now (the
    cells' files tell how they ended); None: this plugin did not launch it, or cannot tell now."""


@hookspec
def shard_started(manifest: Manifest, out_dir: str) -> None:
    """A shard begins (manifest state `running`). For loggers and exporters."""


@hookspec
def record_written(record: ResultRecord, out_dir: str) -> None:
    """A result record was appended and flushed. Called on the hot path: keep it cheap."""


@hookspec
def shard_finished(manifest: Manifest, out_dir: str) -> None:
    """A shard ended; `manifest.state` says how (complete, failed, interrupted)."""


@hookspec
def write_merged_outputs(result: MergeResultView, out_dir: str) -> list[str] | None:
    """A run's merge was written to `out_dir` (merged/<bench>/results.jsonl and the rest; `result`
    is its shardeval.api.MergeResult): write this plugin's own files beside them (lm-eval's
    results_*.json from an lm_eval run). Returns lines for the user, each a file it did not write and
    why (the merge prints them as notices), or None."""


# The pages. The merge computes and a plugin draws (the built-in shardeval_pages): the core never
# imports a page. A page hook returns "" when it wrote the page, or why it did not, in words that
# name the fix (the core then says "<page> not written: <why>" and writes everything else); the
# first plugin that answers draws it.


@hookspec(firstresult=True)
def draw_report_page(result: MergeResultView, path: str, confidence: float) -> str | None:
    """Write report.html of a run's merge to `path`: `result` is the shardeval.api.MergeResult that
    scores.json and report.md are made from."""


@hookspec(firstresult=True)
def draw_sweep_page(sweep: SweepMergeView, path: str, confidence: float, links: dict[str, str]) -> str | None:
    """Write sweep.html of a sweep's merge (`sweep`: a shardeval.api.SweepMerge) to `path`; `links`
    maps each model to its report.html, relative to it."""


@hookspec(firstresult=True)
def draw_compare_page(
    path: str,
    run_a: str,
    run_b: str,
    a: Mapping[str, BenchmarkMergeView],
    b: Mapping[str, BenchmarkMergeView],
    results: Sequence[Comparison],
    confidence: float,
    errors_as_wrong: bool,
) -> str | None:
    """Write `shardeval compare --html` of two runs to `path`: `a` and `b` map each benchmark to its
    merge, `results` are the comparisons `compare --json` prints."""


@hookspec(firstresult=True)
def serve_status(run_dir: str, host: str, port: int, interval: float) -> bool | None:
    """Serve `shardeval status RUN_DIR --serve`, the live page, until interrupted; True once served."""

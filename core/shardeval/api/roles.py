"""The SDK's names, by role: the one list each role module (shardeval.api.benchmark, ...) serves,
the flat `shardeval.api` form's deprecation table and docs/plugins.md's SDK table are made from.

A group is (module, names, doc): names of one core module that one need of the role calls for, with
one line saying what for. A name is published once, in the role of the plugin that needs it most;
any plugin imports from any role. tests/test_api_roles.py holds each role to its name budget, every
name to a user outside the core (a built-in plugin, the example plugin or a worked sample in docs/),
each role module's `if TYPE_CHECKING:` imports to this list, and docs/plugins.md's table to it.
Importing this module imports nothing.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, NamedTuple
from collections.abc import Callable


class Group(NamedTuple):
    module: str  # the core module the names load from, on first use
    names: tuple[str, ...]
    doc: str  # one line: what a plugin of the role uses them for (docs/plugins.md's table)


def group(module: str, names: str, doc: str) -> Group:
    return Group(module, tuple(names.split()), doc)


GROUPS: dict[str, tuple[Group, ...]] = {
    "plugin": (  # what every plugin needs, whatever its role
        group("shardeval.hookspecs", "hookimpl", "the mark of a hook implementation (pluggy; also `shardeval.api.hookimpl`)"),
        group(
            "shardeval.plugins.register",
            "Register Lazy",
            '`Register`: the `register` callback a registration hook is handed; `Lazy("module:attr")`: a factory '
            "imported on first call, so a plugin module stays light",
        ),
        group("shardeval.plugins", "registry", "`registry()`: every registration, by kind and name"),
        group(
            "shardeval.errors",
            "UsageError ShardError os_error library_call network_failure",
            "`UsageError`: a user's mistake, printed as one line, exit 2; `ShardError`: a shard that could not finish "
            "for a reason outside the input (exit 1); `os_error(exc, verb)`: a failed file operation as one of them; "
            "`library_call(library, subject)`: the one boundary around a call into another tool (lm-eval, Inspect, ...), "
            "whatever it raises one line naming `subject`; `network_failure(exc)`: whether an exception (its chain "
            "read) is the network's",
        ),
        group(
            "shardeval.config",
            "Count NonNegativeInt NonNegativeFloat Seconds NonNegativeSeconds Probability",
            "constrained numbers for params and config Structs",
        ),
        group(
            "shardeval.config.reading",
            "read_yaml parse_key_values",
            "`read_yaml(path)` (the config's reader: same errors, duplicate keys refused), "
            "`parse_key_values(pairs, flag, example)` (`KEY=VALUE` flags with YAML values)",
        ),
        group(
            "shardeval.redact",
            "is_secret redact_urls",
            "`is_secret(value)` (from 8 characters), `redact_urls(text)` (URL credentials and secret query values "
            "replaced by `***`; docs/guarantees.md H11)",
        ),
    ),
    "benchmark": (  # what it is, its params, its rows, and how an answer is read and scored
        group("shardeval.benchmark", "Benchmark Problem Score", "the benchmark, one problem it asks, the score of one answer"),
        group("shardeval.config", "BenchmarkConfig", "a `benchmarks:` entry of the config (name, params, ...)"),
        group(
            "shardeval.run.runner",
            "make_benchmark",
            "`make_benchmark(benchmark_config, where, registry)`: a benchmark as a shard builds it (a registered "
            "name, a data file or a BYO mapping)",
        ),
        group(
            "shardeval.benchmark.params",
            "ParamsStruct DataParams decode_params",
            "`ParamsStruct` (unknown keys refused), `DataParams` (path/url/hf/sha256/format), "
            '`decode_params(params, MyParams, source="benchmark x")`: a mistake is one line like the config\'s',
        ),
        group(
            "shardeval.benchmark.datasets",
            "RowsBenchmark Rows JsonlRows open_rows open_from_params package_data",
            "`RowsBenchmark` (problems from rows: set `self.rows`, write `row_problem`), `Rows`, `JsonlRows` (a JSONL "
            "file read by line offsets), `open_rows`, `open_from_params`, `package_data` (`pkg://PACKAGE/PATH` "
            "sources; docs/benchmarks.md)",
        ),
        group(
            "shardeval.benchmark.answers",
            "final_answer normalize normalize_text as_number extract_numeric numbers_equal extract_choice "
            "extract_choice_vlm normalize_vqa vqa_accuracy",
            "the answer helpers (the table above)",
        ),
        group("shardeval.benchmark.rubric", "Rubric", "a judge's rubric"),
        group(
            "shardeval.benchmark.downloads",
            "PrepareContext prepared_folder preparing PREPARE_HINT",
            "`Benchmark.prepare(ctx)` keeps what a shard needs offline in `ctx.folder(key)` (`shardeval prepare`); "
            "a prepared shard finds it with `prepared_folder(key)` (None: not prepared; docs/offline.md); "
            "`preparing()`: a run is being prepared now; `PREPARE_HINT`: what a fetch that failed tells a node without internet",
        ),
        group(
            "shardeval.benchmark.reasoning",
            "split_reply DEFAULT_TAGS",
            "`split_reply(content, reasoning, tags)`: the one rule that splits a reasoning model's reply (answer, "
            "reasoning, source, unfinished); `DEFAULT_TAGS` (docs/reasoning.md)",
        ),
        group(
            "shardeval.benchmark.images",
            "describe IMAGE_MARKER register_generator offer_image_bytes",
            "`describe(data, source, name)` (an image's ref, decoded in full as vLLM decodes it), `IMAGE_MARKER`, "
            "`register_generator(name, draw)` (`gen:NAME:SPEC` sources), `offer_image_bytes(ref, data)` (a drawn "
            "image's bytes, so the shard's store need not draw it again); docs/images.md",
        ),
        group(
            "shardeval.store.procfs",
            "processes read_process Proc",
            "the process table from /proc (`processes()`, `read_process(pid)`, `Proc`), to stop what a code benchmark's sandbox left",
        ),
        group("shardeval.run.process", "describe_exit", "`describe_exit(code)`: how a process ended, in words"),
    ),
    "service": (  # an endpoint to ask, a server process to start
        group(
            "shardeval.config",
            "ServiceConfig ReasoningConfig",
            "a service's config Struct (subclass it) and its generation's `reasoning:` (docs/reasoning.md)",
        ),
        group("shardeval.run.service", "Endpoint ServiceContext", "what a service factory returns (the URL to ask) and is handed"),
        group("shardeval.config.reading", "split_endpoint_url", "`split_endpoint_url(url)`: a URL and its API path"),
        group(
            "shardeval.run.process",
            "ServerProcess resolve_port self_command redact",
            "`ServerProcess` (a server a service started; the runner watches it), `resolve_port`, `self_command()` "
            "(how to start this shardeval again), `redact` (an argv with its secrets hidden)",
        ),
    ),
    "solver": (  # how a problem is asked
        group("shardeval.config", "SolverConfig", "a solver's config Struct (subclass it)"),
        group(
            "shardeval.run.solver",
            "Solver PairsSolver",
            "the base a solver derives from (it writes `solve(problem, seed)`), and the one for a solver that runs "
            "a shard's whole share itself (it writes `solve_pairs(pairs, settle)`: Inspect's eval loop)",
        ),
        group(
            "shardeval.run.solver",
            "SimpleSolver LoglikelihoodSolver ServiceHandle Attempt combine_completions check_logprobs",
            "the built-in solvers, the service a solver asks and one attempt of an answer; "
            "`combine_completions(parts, text, failure=None)` (one Completion for a problem asked in several "
            "requests), `check_logprobs(logprobs, used, tokens=None)` (finite numbers <= 0, else a ValueError)",
        ),
        group("shardeval.run.completion", "Completion", "one answer of the model, with its timing and usage"),
    ),
    "orchestrator": (  # the phases of a launch's lifecycle, the request it is given, one cell run in-process
        group(
            "shardeval.launch.orchestrator",
            "Orchestrator CellOutcome LaunchRequest Cell dump_yaml escape_dollars ENV_NAME",
            "`Orchestrator` (the phases of a launch a plugin fills: plan, dry_run, submit, wait, collect; the core "
            "runs them in order, docs/plugins.md's worked orchestrator), `CellOutcome(cell, exit_code, seconds)` "
            "(how one cell ended), `LaunchRequest`, `Cell` (one (model, shard) of a launch); the scripts an "
            "orchestrator writes: `dump_yaml`, `escape_dollars`, `ENV_NAME`",
        ),
        group(
            "shardeval.launch.lifecycle",
            "orchestrate load_request",
            "`orchestrate(factory, request)`: run a launch with an orchestrator (an `Orchestrator` through the "
            "lifecycle); `load_request(config_path, overrides, quick, output_dir, dry_run=, fresh=)`: the request of "
            "a launch the plugin's own command starts",
        ),
        group(
            "shardeval.launch.cell",
            "run_cell",
            "`run_cell(config, shard_idx, total, out_dir, fresh=, sweep=, source=, listeners=, on_start=)`: one cell "
            "evaluated in this process, as `shardeval run --shard I/N -o DIR` does (its exit code; `listeners`: "
            "objects with hook implementations for this cell only; `on_start(stop)`: a function that stops it as "
            "Ctrl-C would)",
        ),
        group("shardeval.config", "Config ClusterConfig", "a whole run's config, as `LaunchRequest` carries it"),
        group("shardeval.config.loading", "load_config", "`load_config(path, overrides, quick)`"),
        group("shardeval.launch", "setup_logging", "`setup_logging()`: the `shardeval:` log lines `run` prints"),
        group("shardeval.errors", "EXIT_WITH_ERRORS", "the exit code of a run that finished with errors"),
        group(
            "shardeval.command_line",
            "evaluation_options override_option run_cli",
            "`shardeval run`'s options and `run_cli(command, argv, prog_name)`, for a plugin's own entry point",
        ),
        group(
            "shardeval.run.process",
            "node_command die_with_parent",
            "`node_command()` (how to start this shardeval on a node), `die_with_parent`",
        ),
        group("shardeval.run.resume", "check_submission", "a resubmission's check: the shards under a root hold this run"),
        group("shardeval.store.shards", "shard_range", "`shard_range(n, idx, total)`: a shard's share of the problems"),
        group(
            "shardeval.store.standing",
            "nothing_to_ask",
            "`nothing_to_ask(shard_dir, manifest)`: every pair already ok, the task would start nothing",
        ),
        group("shardeval.identity", "config_hash", "`config_hash(config)`"),
        group(
            "shardeval.store.prepared",
            "portable_preparation PortablePreparation",
            "`portable_preparation(root)`: the run's preparation as a copy of the root elsewhere holds it (a "
            "`PortablePreparation`: its index, every file's path there and here), for an orchestrator whose nodes do "
            "not see this machine's files (a Kubernetes claim; docs/offline.md)",
        ),
    ),
    "exporter": (  # a merged run or sweep as tracker runs (MLflow, W&B, Inspect logs)
        group(
            "shardeval.config",
            "ExportConfig",
            "the base of a target's `export:` section: `to`, plus the plugin's keys; its `check()` runs in a launch's "
            "preflight, before any shard starts, and before `export --to` merges",
        ),
        group(
            "shardeval.results.trackers",
            "TrackerExport TrackerRun",
            "a merged run or sweep as one tracker run per model and benchmark: `key`, `step`, `params`, `tags`, "
            "`metrics`, `artifacts(folder)` (docs/export.md)",
        ),
        group(
            "shardeval.hookspecs",
            "AddExportFlag",
            "the `add(target, flag, key, help, metavar)` callback a plugin's `export_flags` hook is handed",
        ),
    ),
    "metric": (  # a number over a benchmark's scores
        group(
            "shardeval.results.metrics",
            "MetricOptions MetricValue ScoreTable OK headline_metric",
            "what a metric is handed (`ScoreTable`: scores and statuses, `OK` the status of an answered pair; "
            "`MetricOptions`) and returns (`MetricValue`); `headline_metric(names)` (the one metric that says how a "
            "benchmark went: `accuracy`, else `mean`, else None)",
        ),
        group("shardeval.identity", "incomparable", "`incomparable(a, b)`: why two runs' records may not be compared, or None"),
        group(
            "shardeval.store.records",
            "GateRule",
            "`GateRule`: a sweep's decision rule (`sweep.gate`: margin, alpha, power), handed to `gate_verdicts`",
        ),
    ),
    "records": (  # the files a run writes, read back; a command's own outputs
        group(
            "shardeval.store.records",
            "ResultRecord TrajectoryRecord ImageInfo ImageThumbnail SweepPlan RESULTS_FILE TRAJECTORIES_FILE read_manifest",
            "the records a shard writes (`ImageInfo`: a record's `images`; `ImageThumbnail`: a line of "
            "`<bench>/images.jsonl`), their file names, `read_manifest(shard_dir)`",
        ),
        group(
            "shardeval.results.merge",
            "MergeResult merge_run",
            "a run's merge (as scores.json and report.md are made from); `merge_run(...)`: a run's shards merged in "
            "memory, as compare does",
        ),
        group(
            "shardeval.results.gate_report",
            "scores_digest",
            "`scores_digest(tables, errors_as_wrong)`: the fingerprint of a run's answers as merged (a gate.json "
            "records it, so the run's report shows the verdict only while those answers stand)",
        ),
        group(
            "shardeval.results.export",
            "load_run",
            "`load_run(path)`: a run's (or sweep's) standing records, with `.to_pandas()` (docs/export.md)",
        ),
        group(
            "shardeval.store.regular",
            "open_regular read_regular",
            "only a regular file, opened without blocking (a FIFO or device raises an OSError; H14)",
        ),
        group(
            "shardeval.store.atomic",
            "atomic_write check_output",
            "`atomic_write` (a FIFO or device is written into, never replaced; H12); `check_output(path, flag)` "
            "(a path that cannot take a file: one line, exit 2, before any work)",
        ),
        group(
            "shardeval.store.discover",
            "refuse_inside_shard read_plan model_roots",
            "`refuse_inside_shard(path, flag)`: a command's output path inside a shard directory, refused (G5b); "
            "`read_plan(root)` (a sweep's models and baseline, None: no sweep), `model_roots(root, plan)` (each "
            "model's run directory, as merge walks a sweep)",
        ),
        group("shardeval.results.quoting", "md_text", "a name or path as inert one-line Markdown"),
        group(
            "shardeval.numbers",
            "percent finite_number",
            "percentages as every output writes them; `finite_number(x)` (what may be written as a score)",
        ),
        group(
            "shardeval.results.report",
            "fmt fmt_p",
            "numbers and p-values as every output writes them (the shortest decimal form, half to even)",
        ),
    ),
    "pages": (  # what a plugin that draws the merge's pages reads (the built-in shardeval_pages)
        group(
            "shardeval.results.merge",
            "BenchmarkMerge",
            "one merged benchmark, as the report page's hook hands it in `MergeResult.benchmarks`",
        ),
        group(
            "shardeval.results.sweep_merge",
            "SweepMerge NOT_COMPARED not_compared_notes",
            "a sweep's merge, as the sweep page's hook hands it; `NOT_COMPARED`, `not_compared_notes(doc)`",
        ),
        group(
            "shardeval.results.page_view",
            "ReportView BenchmarkView LiveStatus",
            "read-only views: `ReportView(result)` (notes, provenance, outcomes per shard, standing records, "
            "thumbnails), `BenchmarkView(merge)` (counts, timing, distributions, reasoning, problem scores), "
            "`LiveStatus(root)` (the live status page's data, followed between refreshes)",
        ),
        group(
            "shardeval.results.pages", "compare_page", "`compare_page(path, ...)`: compare's page, drawn by whichever plugin draws pages"
        ),
    ),
}

# role -> {name: its core module}: what each role module serves
ROLES: dict[str, dict[str, str]] = {role: {name: g.module for g in groups for name in g.names} for role, groups in GROUPS.items()}

# name -> its role, for the flat form's deprecation
HOME: dict[str, str] = {name: role for role, names in ROLES.items() for name in names}

# The flat form's names that no role publishes (no user outside the core): served for one release
# with a warning that they are internal, then gone. name -> its core module.
RETIRED: dict[str, str] = {
    **dict.fromkeys(("Generation",), "shardeval.config"),
    "Entry": "shardeval.plugins.register",
    **dict.fromkeys(("BenchmarkFactory",), "shardeval.benchmark"),
    **dict.fromkeys(("FORMATS", "SOURCE_PARAMS", "downloads_dir"), "shardeval.benchmark.datasets"),
    **dict.fromkeys(("NUMERIC_METHODS", "first_number", "last_number"), "shardeval.benchmark.answers"),
    **dict.fromkeys(("ReplySplit", "reply_outcome"), "shardeval.benchmark.reasoning"),
    **dict.fromkeys(
        ("ImageRef", "read_source", "resolve_path", "RowImages", "check_markers", "split_prompt"), "shardeval.benchmark.images"
    ),
    "ServiceFactory": "shardeval.run.service",
    **dict.fromkeys(("SolverFactory",), "shardeval.run.solver"),
    **dict.fromkeys(("merge_and_report",), "shardeval.launch.orchestrator"),  # the lifecycle merges; the older form's
    "set_aside_shards": "shardeval.run.resume",  # the lifecycle sets aside on --fresh
    "plan_sweep": "shardeval.config.sweep",  # load_request plans the sweep
    "plugin_manager": "shardeval.plugins",  # run_cell's listeners join it
    "ShardRun": "shardeval.run.runner",  # run_cell runs it
    **dict.fromkeys(("ShardSpec", "shard_indices"), "shardeval.store.shards"),
    **dict.fromkeys(("checkpoint_step", "metric_name"), "shardeval.results.trackers"),
    **dict.fromkeys(("ERROR", "MISSING", "Metric"), "shardeval.results.metrics"),
    **dict.fromkeys(("BenchmarkManifest", "IMAGES_FILE", "Manifest", "Message"), "shardeval.store.records"),
    "read_winners": "shardeval.results.merge",
    **dict.fromkeys(
        (
            "counts",
            "DISTRIBUTION_QUANTILES",
            "provenance_facts",
            "ReasoningCounts",
            "reasoning_counts",
            "ReasoningTokens",
            "run_notes",
            "timing",
        ),
        "shardeval.results.report",
    ),
    "read_thumbnails": "shardeval.results.images",
    "Followed": "shardeval.results.follow",
    **dict.fromkeys(("collect_or_nothing", "NOTHING_YET", "plugin_status", "SweepStatus"), "shardeval.results.status"),
}


def serve(role: str) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """(__getattr__, __dir__, __all__) of a role module (PEP 562): a name loads its core module on
    first use and is kept in the role module's namespace, so later lookups skip the function."""
    served = ROLES[role]
    module_name = f"shardeval.api.{role}"

    def __getattr__(name: str) -> Any:
        core = served.get(name)
        if core is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(core), name)
        setattr(sys.modules[module_name], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(served)

    return __getattr__, __dir__, list(served)

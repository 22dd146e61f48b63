"""shardeval's public SDK: the one module a plugin imports (`from shardeval.api import ...`).

It is cheap to import (it imports nothing): every name, `hookimpl` included, loads its module on
first use through the module `__getattr__` (PEP 562), so a plugin module can import it at top
level, `shardeval --help` stays fast, and a module that runs without shardeval's dependencies (the
code sandbox under a bare Python) can take the stdlib-only tools it needs from here. The names
are grouped by the role that needs them (benchmark, service, orchestrator, metric, records and
results); docs/plugins.md says what each is for, and the hooks are in shardeval.hookspecs. A name
is here because a plugin of its role needs it: the built-in plugins import nothing else of
shardeval, so each is a template a third party can copy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shardeval.hookspecs import hookimpl
    # Every plugin: errors a user sees as one line, the config it is handed, the registry
    from shardeval.errors import EXIT_WITH_ERRORS, library_call, network_failure, os_error, ShardError, UsageError
    from shardeval.config import (BenchmarkConfig, ClusterConfig, Config, Count, ExportConfig, Generation, NonNegativeFloat,
                                  NonNegativeInt, NonNegativeSeconds, Probability, ReasoningConfig, Seconds, ServiceConfig,
                                  SolverConfig)
    from shardeval.config.loading import load_config
    from shardeval.config.reading import parse_key_values, read_yaml
    from shardeval.plugins import plugin_manager, registry
    from shardeval.plugins.register import Entry, Lazy, Register
    from shardeval.command_line import evaluation_options, override_option, run_cli
    # Benchmark: what it is, its params, its rows, and how an answer is read and scored
    from shardeval.benchmark import Benchmark, BenchmarkFactory, Problem, Score
    from shardeval.benchmark.params import DataParams, ParamsStruct, decode_params
    from shardeval.benchmark.datasets import (FORMATS, JsonlRows, SOURCE_PARAMS, Rows, RowsBenchmark, downloads_dir,
                                              open_from_params, open_rows, package_data)
    from shardeval.benchmark.answers import (NUMERIC_METHODS, as_number, extract_choice, extract_numeric, final_answer,
                                             first_number, last_number, normalize, normalize_text, normalize_vqa, numbers_equal,
                                             extract_choice_vlm, vqa_accuracy)
    from shardeval.benchmark.rubric import Rubric
    from shardeval.benchmark.reasoning import DEFAULT_TAGS, ReplySplit, reply_outcome, split_reply
    from shardeval.benchmark.images import (describe, IMAGE_MARKER, ImageRef, offer_image_bytes, read_source, register_generator, RowImages, check_markers,
                                            resolve_path, split_prompt)
    from shardeval.run.runner import make_benchmark
    # Service and solver: an endpoint to ask, a server process to start, how a problem is asked
    from shardeval.run.service import Endpoint, ServiceContext, ServiceFactory
    from shardeval.run.solver import (Attempt, check_logprobs, combine_completions, LoglikelihoodSolver, PairsSolver, ServiceHandle, SimpleSolver, Solver,
                                      SolverFactory)
    from shardeval.run.completion import Completion
    from shardeval.config.reading import split_endpoint_url
    from shardeval.run.process import (describe_exit, die_with_parent, node_command, redact, resolve_port, self_command,
                                       ServerProcess)
    from shardeval.store.procfs import Proc, processes, read_process
    from shardeval.redact import is_secret, redact_urls
    # Orchestrator: the phases of a launch's lifecycle, the request it is given, one cell run in-process
    from shardeval.launch import setup_logging
    from shardeval.launch.orchestrator import (Cell, CellOutcome, dump_yaml, ENV_NAME, escape_dollars, LaunchRequest,
                                               merge_and_report, Orchestrator)
    from shardeval.launch.lifecycle import load_request, orchestrate
    from shardeval.launch.cell import run_cell
    from shardeval.run.resume import check_submission, set_aside_shards
    from shardeval.store.shards import shard_range
    from shardeval.store.standing import nothing_to_ask
    from shardeval.identity import config_hash, incomparable
    # Exporter: a merged run or sweep as tracker runs (MLflow, W&B, Inspect logs), one per model and benchmark
    from shardeval.results.trackers import checkpoint_step, metric_name, TrackerExport, TrackerRun
    # Metric: a number over a benchmark's scores
    from shardeval.results.metrics import (ERROR, headline_metric, MISSING, OK, Metric, MetricOptions, MetricValue,
                                           ScoreTable)
    # Records and results: the files a run writes, read back; a command's own outputs
    from shardeval.store.records import (BenchmarkManifest, ImageInfo, ImageThumbnail, IMAGES_FILE, Manifest, Message, read_manifest, ResultRecord,
                                         RESULTS_FILE, SweepPlan, TRAJECTORIES_FILE, TrajectoryRecord)
    from shardeval.store.regular import open_regular, read_regular
    from shardeval.store.atomic import atomic_write, check_output
    from shardeval.store.discover import refuse_inside_shard
    from shardeval.results.export import load_run
    from shardeval.results.merge import BenchmarkMerge, merge_run, MergeResult, read_winners
    from shardeval.numbers import finite_number, percent
    from shardeval.results.report import (counts, DISTRIBUTION_QUANTILES, fmt, fmt_p, provenance_facts, ReasoningCounts,
                                          reasoning_counts, ReasoningTokens, run_notes, timing)
    from shardeval.results.quoting import md_text
    # Pages: what a plugin that draws the merge's pages reads (the built-in shardeval_pages)
    from shardeval.results.pages import compare_page
    from shardeval.results.images import read_thumbnails
    from shardeval.results.follow import Followed
    from shardeval.results.status import collect_or_nothing, NOTHING_YET, plugin_status, SweepStatus
    from shardeval.results.sweep_merge import not_compared_notes, NOT_COMPARED, SweepMerge

# (module, names): one module's names of one role; a name loads its module on first use.
_LAZY: tuple[tuple[str, str], ...] = (
    ("shardeval.hookspecs", "hookimpl"),  # the mark of a hook implementation (pluggy)
    # Every plugin: errors a user sees as one line, the config it is handed, the registry
    ("shardeval.errors", "EXIT_WITH_ERRORS library_call network_failure os_error ShardError UsageError"),
    ("shardeval.config", "BenchmarkConfig ClusterConfig Config Count ExportConfig Generation NonNegativeFloat NonNegativeInt "
     "NonNegativeSeconds Probability ReasoningConfig Seconds ServiceConfig SolverConfig"),
    ("shardeval.config.loading", "load_config"),
    ("shardeval.config.reading", "parse_key_values read_yaml"),
    ("shardeval.plugins", "plugin_manager registry"),
    ("shardeval.plugins.register", "Entry Lazy Register"),
    ("shardeval.command_line", "evaluation_options override_option run_cli"),
    # Benchmark: what it is, its params, its rows, and how an answer is read and scored
    ("shardeval.benchmark", "Benchmark BenchmarkFactory Problem Score"),
    ("shardeval.benchmark.params", "DataParams ParamsStruct decode_params"),
    ("shardeval.benchmark.datasets", "FORMATS JsonlRows SOURCE_PARAMS Rows RowsBenchmark downloads_dir open_from_params open_rows "
     "package_data"),
    ("shardeval.benchmark.answers", "NUMERIC_METHODS as_number extract_choice extract_numeric final_answer first_number last_number "
     "normalize normalize_text normalize_vqa numbers_equal extract_choice_vlm vqa_accuracy"),
    ("shardeval.benchmark.rubric", "Rubric"),
    ("shardeval.benchmark.reasoning", "DEFAULT_TAGS ReplySplit reply_outcome split_reply"),
    ("shardeval.benchmark.images", "describe IMAGE_MARKER ImageRef offer_image_bytes read_source register_generator resolve_path RowImages check_markers "
     "split_prompt"),
    ("shardeval.run.runner", "make_benchmark"),
    # Service and solver: an endpoint to ask, a server process to start, how a problem is asked
    ("shardeval.run.service", "Endpoint ServiceContext ServiceFactory"),
    ("shardeval.run.solver", "Attempt check_logprobs combine_completions LoglikelihoodSolver PairsSolver ServiceHandle SimpleSolver Solver "
     "SolverFactory"),
    ("shardeval.run.completion", "Completion"),
    ("shardeval.config.reading", "split_endpoint_url"),
    ("shardeval.run.process", "describe_exit die_with_parent node_command redact resolve_port self_command ServerProcess"),
    ("shardeval.store.procfs", "Proc processes read_process"),
    ("shardeval.redact", "is_secret redact_urls"),
    # Orchestrator: the phases of a launch's lifecycle, the request it is given, one cell run in-process
    ("shardeval.launch", "setup_logging"),
    ("shardeval.launch.orchestrator", "Cell CellOutcome dump_yaml ENV_NAME escape_dollars LaunchRequest merge_and_report "
     "Orchestrator"),
    ("shardeval.launch.lifecycle", "load_request orchestrate"),
    ("shardeval.launch.cell", "run_cell"),
    ("shardeval.run.resume", "check_submission set_aside_shards"),
    ("shardeval.store.shards", "shard_range"),
    ("shardeval.store.standing", "nothing_to_ask"),
    ("shardeval.identity", "config_hash incomparable"),
    # Metric: a number over a benchmark's scores
    # Exporter: a merged run or sweep as tracker runs (MLflow, W&B, Inspect logs), one per model and benchmark
    ("shardeval.results.trackers", "checkpoint_step metric_name TrackerExport TrackerRun"),
    ("shardeval.results.metrics", "ERROR headline_metric MISSING OK Metric MetricOptions MetricValue ScoreTable"),
    # Records and results: the files a run writes, read back; a command's own outputs
    ("shardeval.store.records", "BenchmarkManifest ImageInfo ImageThumbnail IMAGES_FILE Manifest Message read_manifest "
     "ResultRecord RESULTS_FILE SweepPlan TRAJECTORIES_FILE TrajectoryRecord"),
    ("shardeval.store.regular", "open_regular read_regular"),
    ("shardeval.store.atomic", "atomic_write check_output"),
    ("shardeval.store.discover", "refuse_inside_shard"),
    ("shardeval.results.export", "load_run"),
    ("shardeval.results.merge", "BenchmarkMerge merge_run MergeResult read_winners"),
    ("shardeval.numbers", "finite_number percent"),
    ("shardeval.results.report", "counts DISTRIBUTION_QUANTILES fmt fmt_p provenance_facts ReasoningCounts reasoning_counts "
     "ReasoningTokens run_notes timing"),
    ("shardeval.results.quoting", "md_text"),
    # Pages: what a plugin that draws the merge's pages reads (the built-in shardeval_pages)
    ("shardeval.results.pages", "compare_page"),
    ("shardeval.results.images", "read_thumbnails"),
    ("shardeval.results.follow", "Followed"),
    ("shardeval.results.status", "collect_or_nothing NOTHING_YET plugin_status SweepStatus"),
    ("shardeval.results.sweep_merge", "not_compared_notes NOT_COMPARED SweepMerge"),
)
_WHERE = {name: module for module, names in _LAZY for name in names.split()}

__all__ = list(_WHERE)  # in role order, as above


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'shardeval.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

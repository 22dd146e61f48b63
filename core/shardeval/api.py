"""shardeval's public SDK: the one module a plugin imports (`from shardeval.api import ...`).

It is cheap to import (only pluggy, for `hookimpl`): everything else loads on first use through
the module `__getattr__` (PEP 562), so a plugin module can import it at top level and
`shardeval --help` stays fast. docs/plugins.md says what each group is for; the hooks are in
shardeval.hookspecs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from shardeval.hookspecs import hookimpl

if TYPE_CHECKING:
    from shardeval.benchmark.answers import (NUMERIC_METHODS, as_number, extract_choice, extract_numeric, final_answer,
                                   first_number, last_number, normalize, normalize_text, numbers_equal)
    from shardeval.store.atomic import atomic_write, check_output
    from shardeval.benchmark import Benchmark, BenchmarkFactory, Problem, Score
    from shardeval.run.completion import Completion
    from shardeval.config import (ClusterConfig, Config, Count, Generation, NonNegativeFloat, NonNegativeInt,
                                  NonNegativeSeconds, Probability, Seconds, ServiceConfig, SolverConfig)
    from shardeval.config.loading import load_config
    from shardeval.config.reading import parse_key_values, read_yaml, split_endpoint_url
    from shardeval.benchmark.datasets import (FORMATS, SOURCE_PARAMS, Rows, RowsBenchmark, canonical_row, downloads_dir,
                                    open_from_params, open_rows, package_data)
    from shardeval.store.discover import refuse_inside_shard
    from shardeval.errors import EXIT_WITH_ERRORS, os_error, ShardError, UsageError
    from shardeval.results.export import load_run
    from shardeval.identity import config_hash, incomparable
    from shardeval.results.metrics import (ERROR, headline_metric, MISSING, OK, Metric, MetricOptions, MetricValue,
                                           PAIRED_METRICS, ScoreTable)
    from shardeval.launch.orchestrator import dump_yaml, ENV_NAME, escape_dollars, LaunchRequest, Orchestrator, merge_and_report
    from shardeval.benchmark.params import DataParams, ParamsStruct, decode_params
    from shardeval.benchmark.rubric import Rubric
    from shardeval.results.quoting import md_text, plain_text
    from shardeval.run.process import (die_with_parent, node_command, redact, resolve_port, self_command,
                                   ServerProcess)
    from shardeval.redact import is_secret, MIN_SECRET_CHARS, redact_urls
    from shardeval.store.regular import open_regular, read_regular
    from shardeval.store.records import (BenchmarkManifest, Manifest, Message, read_manifest, ResultRecord,
                                   RESULTS_FILE, TRAJECTORIES_FILE, TrajectoryRecord)
    from shardeval.plugins.register import Entry, Lazy, Register
    from shardeval.run.resume import check_submission, set_aside_shards
    from shardeval.run.service import Endpoint, ServiceContext, ServiceFactory
    from shardeval.store.shards import shard_indices, shard_range, ShardSpec
    from shardeval.run.solver import Attempt, ServiceHandle, Solver, SolverFactory
    from shardeval.store.standing import nothing_to_ask
    # results, for a plugin that draws or exports them (the pages plugin)
    from shardeval.results.merge import BenchmarkMerge, MergeResult, read_winners
    from shardeval.results.pages import compare_page
    from shardeval.results.report import counts, DISTRIBUTION_QUANTILES, fmt_p, provenance_facts, run_notes, timing
    from shardeval.results.status import collect_or_nothing, NOTHING_YET, plugin_status, SweepStatus
    from shardeval.results.sweep_merge import not_compared_notes, NOT_COMPARED, SweepMerge

_LAZY = {
    "shardeval.benchmark.answers": "NUMERIC_METHODS as_number extract_choice extract_numeric final_answer "
    "first_number last_number normalize normalize_text numbers_equal",
    "shardeval.store.atomic": "atomic_write check_output",
    "shardeval.benchmark": "Benchmark BenchmarkFactory Problem Score",
    "shardeval.run.completion": "Completion",
    "shardeval.config": "ClusterConfig Config Count Generation NonNegativeFloat NonNegativeInt NonNegativeSeconds "
    "Probability Seconds ServiceConfig SolverConfig",
    "shardeval.config.loading": "load_config",
    "shardeval.config.reading": "parse_key_values read_yaml split_endpoint_url",
    "shardeval.benchmark.datasets": "FORMATS SOURCE_PARAMS Rows RowsBenchmark canonical_row downloads_dir "
    "open_from_params open_rows package_data",
    "shardeval.store.discover": "refuse_inside_shard",
    "shardeval.errors": "EXIT_WITH_ERRORS os_error ShardError UsageError",
    "shardeval.results.export": "load_run",
    "shardeval.identity": "config_hash incomparable",
    "shardeval.results.metrics": "ERROR headline_metric MISSING OK Metric MetricOptions MetricValue PAIRED_METRICS ScoreTable",
    "shardeval.launch.orchestrator": "dump_yaml ENV_NAME escape_dollars LaunchRequest Orchestrator merge_and_report",
    "shardeval.benchmark.rubric": "Rubric",
    "shardeval.benchmark.params": "DataParams ParamsStruct decode_params",
    "shardeval.results.quoting": "md_text plain_text",
    "shardeval.run.process": "die_with_parent node_command redact resolve_port self_command ServerProcess",
    "shardeval.store.records": "BenchmarkManifest Manifest Message read_manifest ResultRecord RESULTS_FILE "
    "TRAJECTORIES_FILE TrajectoryRecord",
    "shardeval.redact": "is_secret MIN_SECRET_CHARS redact_urls",
    "shardeval.store.regular": "open_regular read_regular",
    "shardeval.plugins.register": "Entry Lazy Register",
    "shardeval.run.resume": "check_submission set_aside_shards",
    "shardeval.run.service": "Endpoint ServiceContext ServiceFactory",
    "shardeval.store.shards": "shard_indices shard_range ShardSpec",
    "shardeval.run.solver": "Attempt ServiceHandle Solver SolverFactory",
    "shardeval.store.standing": "nothing_to_ask",
    # results, for a plugin that draws or exports them (the pages plugin)
    "shardeval.results.merge": "BenchmarkMerge MergeResult read_winners",
    "shardeval.results.pages": "compare_page",
    "shardeval.results.report": "counts DISTRIBUTION_QUANTILES fmt_p provenance_facts run_notes timing",
    "shardeval.results.status": "collect_or_nothing NOTHING_YET plugin_status SweepStatus",
    "shardeval.results.sweep_merge": "not_compared_notes NOT_COMPARED SweepMerge",
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names.split()}

__all__ = ["hookimpl", *_WHERE]  # docs/plugins.md groups them by what they are for


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'shardeval.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

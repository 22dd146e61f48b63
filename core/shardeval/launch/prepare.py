"""Prepare a run once, where the network is; a shard reads what was prepared (docs/offline.md).

`prepare_run` builds every benchmark as a shard would, with the download cache pointed into the
preparation: reading the data (a URL, a package's data) and building every problem (its images)
fetches everything a shard would fetch, once. Each benchmark's `prepare` adds its own (an
lm-eval task's datasets, tokenizer and plan). Then every file is checksummed and the plan written.

`activate` is a shard's side: a preparation found beside its output makes the shard offline by
construction (the Hugging Face libraries told so, the download cache pointed at the prepared
files, each verified); the shard then refuses to plan otherwise than the preparation did
(shardeval.store.prepared.planned_otherwise, checked by the runner).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from shardeval import __version__
from shardeval.benchmark.downloads import DOWNLOADS_ENV, PREPARED_ENV, PREPARING_ENV, PrepareContext
from shardeval.config.loading import load_config
from shardeval.config.schema import Config
from shardeval.config.sweep import model_config
from shardeval.errors import UsageError
from shardeval.identity import config_hash
from shardeval.launch import log, setup_logging
from shardeval.store.prepared import (
    HOW,
    OFFLINE_ENV,
    PreparedBenchmark,
    Preparation,
    list_files,
    new_preparation,
    preparation_dir,
    read_preparation,
    verify,
    write_preparation,
)
from shardeval.store.shards import ShardSpec

if TYPE_CHECKING:  # what plans (the runner, its HTTP client) is imported when a run is prepared: a merge needs none of it
    from shardeval.run.runner import BenchmarkPlan


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_configs(config: Config) -> list[Config]:
    """The config whose benchmarks a shard builds: the run's, or one sweep model's. Every model of
    a sweep asks the same benchmarks (only the service differs), so building them once per model
    would read and fetch the same data again for each checkpoint."""
    if config.sweep is None:
        return [config]
    return [model_config(config, name) for name in config.sweep.services[:1]]


def prepare_run(config: Config, root: str) -> Preparation:
    """Fetch and plan every benchmark of the run at `root`; write <root>/prepared/preparation.json."""
    from shardeval.run.runner import plan_benchmarks

    cache_dir = os.path.abspath(
        config.prepare.cache_dir if config.prepare and config.prepare.cache_dir else os.path.join(preparation_dir(root), "cache")
    )
    os.makedirs(cache_dir, exist_ok=True)
    preparation = new_preparation(__version__, socket.gethostname(), cache_dir, config_hash(config), root)
    planned: dict[str, PreparedBenchmark] = {}
    with _environment({DOWNLOADS_ENV: cache_dir, PREPARING_ENV: "1"}):
        for run in run_configs(config):
            for plan in plan_benchmarks(run, ShardSpec(0, 1, "shardeval prepare: every problem")):
                if plan.name not in planned:
                    planned[plan.name] = _prepare_benchmark(plan, PrepareContext(cache_dir))
    preparation.benchmarks = list(planned.values())
    preparation.files = list_files(cache_dir)
    write_preparation(root, preparation)
    return preparation


def _prepare_benchmark(plan: BenchmarkPlan, ctx: PrepareContext) -> PreparedBenchmark:
    """Every problem built (its images fetched into the cache), then the benchmark's own preparation."""
    benchmark = plan.benchmark
    if benchmark.has_images:
        for _ in benchmark.problems(range(plan.n_problems)):
            pass
    own = benchmark.prepare(ctx)
    log.info("prepared %s: %d problems, data %s", plan.name, plan.n_problems, plan.fingerprint)
    return PreparedBenchmark(
        name=plan.name,
        n_problems=plan.n_problems,
        dataset_fingerprint=plan.fingerprint,
        prompt_fingerprint=plan.prompt_fingerprint,
        plan=own,
    )


def describe(preparation: Preparation, root: str) -> str:
    """The lines `shardeval prepare` ends with."""
    mib = preparation.bytes / (1 << 20)
    lines = [f"prepared {len(preparation.benchmarks)} benchmark(s) into {preparation_dir(root)}"]
    lines += [f"  {b.name}: {b.n_problems} problems, data {b.dataset_fingerprint}" for b in preparation.benchmarks]
    lines.append(f"  {len(preparation.files)} file(s), {mib:.1f} MiB, in {preparation.cache_dir}")
    lines.append(f"shards run with -o {root} (or its shard_<i>/) read it and ask nothing but their model")
    return "\n".join(lines)


def find_preparation(candidates: list[str]) -> tuple[str, Preparation] | None:
    """The preparation of the first of `candidates` (a shard's -o, its parent) that has one."""
    for root in candidates:
        if (found := read_preparation(root)) is not None:
            return root, found
    return None


def use_preparation(roots: list[str]) -> Preparation | None:
    """The preparation of the first of `roots` (a shard's -o and its parent, or output.dir) that
    has one, activated; None when the run was not prepared."""
    found = find_preparation(roots)
    if found is not None:
        activate(*found)
    return found[1] if found is not None else None


def activate(root: str, preparation: Preparation) -> None:
    """This shard reads the preparation: offline for the Hugging Face libraries, the download cache
    the prepared one, every prepared file verified (one line, exit 2, when one is not)."""
    if (why := verify(preparation)) is not None:
        raise UsageError(f"the run's preparation ({preparation_dir(root)}) cannot be used here: {why}; {HOW} again")
    os.environ.update({**OFFLINE_ENV, DOWNLOADS_ENV: preparation.cache_dir, PREPARED_ENV: preparation.cache_dir})
    # said by the shard (its log) once it plans, not here: a launcher's mistake stays one line


def use_preparation_to_merge(run_dir: str) -> str | None:
    """`shardeval merge` of a prepared run (a SLURM or Kubernetes merge job, on a node without
    internet): what a plugin's merged outputs read (lm-eval's tasks, to write its own files) comes
    from the preparation, offline. The merge itself reads records and manifests only, so a
    preparation that cannot be used here is a warning, never a refusal. The line to say, or None
    when the run was not prepared."""
    found = find_preparation([run_dir, os.path.dirname(os.path.abspath(run_dir))])
    if found is None:
        return None
    root, preparation = found
    if (why := verify(preparation)) is not None:
        return f"warning: merging without the run's preparation ({preparation_dir(root)}): {why}"
    os.environ.update({**OFFLINE_ENV, DOWNLOADS_ENV: preparation.cache_dir, PREPARED_ENV: preparation.cache_dir})
    return f"prepared run: the merge reads {len(preparation.files)} prepared file(s) from {preparation.cache_dir}; offline"


def prepare_if_needed(config: Config, root: str) -> None:
    """A cluster launch prepares on the submitting host first, unless the run is prepared already
    (for this very config: a changed config is prepared again)."""
    found = read_preparation(root)
    if found is not None and found.config_hash == config_hash(config):
        log.info("prepared run: %s (%d file(s)); nothing to fetch", preparation_dir(root), len(found.files))
        return
    preparation = prepare_run(config, root)
    log.info(
        "prepared the run for nodes without internet: %d benchmark(s), %d file(s) in %s",
        len(preparation.benchmarks),
        len(preparation.files),
        preparation.cache_dir,
    )


def prepare_command(config_path: str | None, overrides: list[str], output_dir: str | None) -> int:
    """`shardeval prepare CONFIG -o OUT`."""
    setup_logging()
    config = load_config(config_path, overrides, {})
    root = output_dir or config.output.dir
    preparation = prepare_run(config, root)
    print(describe(preparation, root))
    print(f"shardeval: wrote {os.path.join(preparation_dir(root), 'preparation.json')}", file=sys.stderr)
    return 0

"""What `shardeval run` does: load the config, pick the shard, then run it or hand off.

Inside a shard (--shard, or any shard variable set) this evaluates that shard whatever
`cluster.type` says, so scripts that orchestrators generate never re-submit the run. Outside a
shard, the orchestrator plugin named by `cluster.type` takes over.
"""

from __future__ import annotations

import asyncio
import os
import sys
from functools import partial
from typing import Any

import msgspec

from shardeval import plugins
from shardeval.config.loading import load_config
from shardeval.config.sampling import describe, greedy_repeats
from shardeval.config.sweep import SWEEP_FLAG, model_config, plan_sweep
from shardeval.errors import ShardError, UsageError
from shardeval.identity import config_hash
from shardeval.launch import log, setup_logging
from shardeval.launch.lifecycle import orchestrate
from shardeval.launch.orchestrator import LaunchRequest
from shardeval.launch.preflight import preflight
from shardeval.launch.prepare import prepare_if_needed, use_preparation
from shardeval.run.runner import ShardRun, plan_benchmarks
from shardeval.store.discover import write_export_list
from shardeval.store.shards import ShardSpec, detect_shard


def launch(
    config_path: str | None,
    quick: dict[str, Any],
    overrides: list[str],
    *,
    shard_flag: str | None,
    fresh: bool,
    dry_run: bool,
    sweep_services: str | None = None,
    merge: bool = True,
) -> int:
    setup_logging()
    output_dir = quick.pop("output_dir", None)
    if quick.pop("no_cache", False):  # as an override, so it travels to the shards an orchestrator starts
        quick.pop("cache_dir", None)
        overrides = [*overrides, "cache=null"]
    # a prepared run (docs/offline.md) is read before the config is: reading it may load a task, offline then
    prepared = use_preparation(shard_roots(output_dir, overrides))
    config = load_config(config_path, overrides, quick)
    if prepared is None and output_dir is None:
        prepared = use_preparation([config.output.dir])
    if sweep_services is not None and config.sweep is None:
        raise UsageError(f"{SWEEP_FLAG} {sweep_services}: {config_path or 'the config'} has no `sweep:` section; drop the flag")
    sweep = plan_sweep(config, sweep_services) if config.sweep is not None else None
    shard = detect_shard(shard_flag, os.environ, sweep.n_cells if sweep else config.cluster.shards)
    if shard is None and sweep is None and config.cluster.runs_in_process():
        shard = ShardSpec(0, 1, "the whole run: no shard variables set and cluster.shards unset")
    if shard is None:
        request = LaunchRequest.create(
            config, config_path, overrides, quick, output_dir, dry_run=dry_run, fresh=fresh, sweep=sweep, merge=merge
        )
        return hand_off(request)
    plan, unavailable = None, None
    if sweep is not None:  # -o is the sweep's root: the cell writes <root>/<service>/shard_<i>/
        name, shard = sweep.select(shard)
        config, plan = sweep.configs[name], sweep.plan(name)
        unavailable = sweep.gone(name)  # a checkpoint deleted since the launch: its pairs end in errors naming it
        out_dir = os.path.join(output_dir or config.output.dir, name, f"shard_{shard.idx}")
    else:
        out_dir = output_dir or os.path.join(config.output.dir, f"shard_{shard.idx}")
    log.info("%s", shard.describe())
    warn_greedy_repeats(config)
    if dry_run:
        print_plan(config, shard, out_dir)
        print_identity(config)
        return 0
    try:  # the shard opens its own logs/shard.log once its directory is ready
        return asyncio.run(ShardRun(config, shard, out_dir, fresh=fresh, sweep=plan, unavailable=unavailable, preparation=prepared).run())
    except ShardError as exc:  # already logged by the shard, in its log too
        return exc.exit_code


def shard_roots(output_dir: str | None, overrides: list[str]) -> list[str]:
    """Where a shard looks for its run's preparation before reading the config: -o and its parent
    (-o is a shard's folder, or a sweep's root), else an `-O output.dir=…` (a Compose container)."""
    if output_dir:
        return [output_dir, os.path.dirname(os.path.normpath(output_dir))]
    given = [o.partition("=")[2].strip() for o in overrides if o.partition("=")[0].strip() == "output.dir"]
    return [given[-1]] if given and given[-1] else []


def hand_off(request: LaunchRequest) -> int:
    """No shard selected: check once, write what the launch's merge reads, then the orchestrator
    that `cluster.type` names runs the launch (shardeval.launch.lifecycle)."""
    config = request.config
    preflight(request)  # once, before any shard starts: one line, exit 2, nothing started or moved
    if request.sweep is not None and not request.dry_run:
        request.sweep.write_plan(request.output_root)
    if not request.dry_run:  # the merge that ends the launch (maybe another process: SLURM's merge job) reads it
        write_export_list(request.output_root, msgspec.to_builtins(config.export))
    warn_greedy_repeats(config)
    # the nodes may have no internet: they read what is fetched here, once the orchestrator checked the launch
    prepare = None if config.cluster.shards_read_local_files() else partial(prepare_if_needed, config, request.output_root)
    code = orchestrate(plugins.registry().get("orchestrators", config.cluster.type, "cluster.type").factory, request, prepare)
    if request.dry_run and code == 0:
        print_identity(config)
    return code


def warn_greedy_repeats(config) -> None:
    """Once the launch is checked (a mistake stays one line): repeats asked greedily, as written."""
    for warning in greedy_repeats(config, plugins.registry()):
        log.warning("warning: %s", warning)


def print_identity(config) -> None:
    """--dry-run: the sampling each benchmark's requests carry, and the run's identity, so two
    configs can be told the same run (or not) up front (a sweep: each model's run). Printed last,
    once the dry run succeeded: a mistake stays one line."""
    # stderr: a dry run's stdout is the rendered script or manifest (`… --dry-run | kubectl apply -f -`)
    for line in describe(config, plugins.registry()):  # what every request carries, so no key is left to a server
        print(f"shardeval: {line}", file=sys.stderr)
    runs = {f" of {name}": model_config(config, name) for name in config.sweep.services} if config.sweep else {"": config}
    for label, run in runs.items():
        print(f"shardeval: run identity{label}: {config_hash(run)} (a resume or merge needs the same identity)", file=sys.stderr)


def print_plan(config, shard, out_dir: str) -> None:
    """--dry-run inside a shard: which problems this shard would ask, where it would write, and the
    fingerprints its manifest would carry."""
    for plan in plan_benchmarks(config, shard):
        lo, hi = plan.manifest().range
        print(
            f"shard {shard.idx}/{shard.total} {plan.name}: problems [{lo}, {hi}) of {plan.n_problems} "
            f"x {plan.config.repeats} repeats -> {os.path.join(out_dir, plan.name)}"
        )
        print(f"  data {plan.fingerprint}, prompts {plan.prompt_fingerprint}, scorer {plan.scorer_fingerprint}")

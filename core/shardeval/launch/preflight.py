"""What `shardeval run` checks once, in the launching process, before any shard starts.

Each of these would otherwise be found by every shard after it started (and queued, on a
cluster), while the merge after them reported whatever the output directory held from before:

- the output's shard directories hold this run, or none: another run (another config, shard
  count) is refused naming what changed key by key (shardeval.identity.identity_changes), with --fresh or
  another -o;
- with --fresh, everything the move aside needs (no live writer holds a shard directory, each
  one's superseded/ can be made), before any shard moves anything;
- the output root holds nothing of the other kind (a sweep's root for a run, a run's shards for
  a sweep), and can be made and written (`-o`);
- the response cache directory can be used;
- every `export:` target passes its own `ExportConfig.check()` (its library installed, a store it
  can open), which the merge at the end would otherwise find after every shard ran;
- every benchmark builds (its data is there and reads), passes its own `Benchmark.preflight`
  (images, task names) and, judged, has a rubric its mode can read: where the shards read this
  machine's files (`ClusterConfig.shards_read_local_files`), since a cluster's data may live on
  its nodes alone.

Benchmarks and export targets first (they only read), then the output directory, then the cache. Each failure is one
line, exit 2 (UsageError). A dry run writes nothing and probes no directory: it checks only the
benchmarks (an orchestrator that renders files warns about another run in -o itself).
"""

from __future__ import annotations

import logging
import os
import tempfile

from shardeval import plugins
from shardeval.errors import UsageError, os_error
from shardeval.identity import config_hash
from shardeval.launch.orchestrator import LaunchRequest
from shardeval.run.response_cache import check_usable
from shardeval.run.resume import check_set_aside, check_submission, shard_dirs
from shardeval.run.runner import build_benchmark
from shardeval.store.discover import PLAN_FILE
from shardeval.store.liveness import ShardLease

log = logging.getLogger("shardeval")


def preflight(request: LaunchRequest) -> None:
    """Every check above, in that order; the first failure raises."""
    runs, total = request.runs(), request.total
    if request.config.cluster.shards_read_local_files():
        check_benchmarks(runs[0].config)  # a sweep's models share the benchmarks: their services differ
    if request.dry_run:  # it writes nothing; an orchestrator that renders files says what it would refuse
        return
    check_exports(request)
    check_same_kind(request.output_root, request.sweep is not None)
    for run in runs:
        if not request.fresh:
            check_submission(
                run.root, config_hash(run.config), total, run.config, started="nothing submitted or started (each shard would refuse it)"
            )
            continue
        for _, shard in shard_dirs(run.root):  # those past this run's count too: they are set aside as well
            ShardLease(shard).check_free()
            check_set_aside(shard)
    check_output_root(request.output_root)
    if request.config.cache is not None:
        check_usable(request.config.cache.dir)


def check_exports(request: LaunchRequest) -> None:
    """Each `export:` target's own check, as `shardeval export --to` runs it before any merge."""
    for i, target in enumerate(request.config.export):
        try:
            target.check()
        except UsageError as exc:
            raise UsageError(f"{request.config_path or 'the config'}: export[{i}] (to {target.to}): {exc}; nothing started") from None


def check_same_kind(root: str, sweep: bool) -> None:
    """-o holds nothing of the other kind: a run launched into a sweep's root would be merged as
    that sweep, printing the sweep's old results as this run's; a sweep launched into a run's root
    would leave that run's shards beside its models and replace its merged report."""
    if not sweep and os.path.lexists(plan := os.path.join(root, PLAN_FILE)):
        raise UsageError(
            f"-o {root} holds a sweep ({plan}), and this run is not one: its merge would report the sweep's "
            "results as this run's; choose another -o"
        )
    if sweep and (shards := shard_dirs(root)):
        raise UsageError(
            f"-o {root} holds the shards of a run that is not a sweep ({shards[0][1]}), and this is a sweep: "
            "its models would be merged beside them; choose another -o"
        )


def check_output_root(root: str) -> None:
    """-o can be made and written: not a file, not under one, not read-only."""
    if os.path.exists(root) and not os.path.isdir(root):
        raise UsageError(f"-o {root}: exists and is not a directory; choose a directory path")
    try:
        os.makedirs(root, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(dir=root, prefix=".preflight-"))
    except OSError as exc:
        raise os_error(exc, "write the results into", alternative="choose another -o") from None


def check_benchmarks(config) -> None:
    """Build and check every benchmark as a shard would (shardeval.run.runner.build_benchmark)."""
    registry = plugins.registry()
    for i in range(len(config.benchmarks)):
        build_benchmark(config, i, registry)

"""One cell of a launch evaluated in this process: what an orchestrator whose workers are Python
calls (a Ray task), instead of starting `shardeval run --shard I/N` as a process.

It does exactly what that command does inside a shard (the same shard run, the same files), so
`shardeval merge` and `shardeval status` work unchanged and a cell can be continued by either.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import TYPE_CHECKING
from collections.abc import Callable, Sequence

from shardeval import plugins
from shardeval.launch import log, setup_logging
from shardeval.launch.prepare import use_preparation
from shardeval.run.runner import ShardRun
from shardeval.store.shards import ShardSpec

if TYPE_CHECKING:
    from shardeval.config import Config
    from shardeval.store.records import SweepPlan


def run_cell(
    config: Config,
    shard_idx: int,
    total: int,
    out_dir: str,
    *,
    fresh: bool = False,
    sweep: SweepPlan | None = None,
    source: str = "run_cell",
    listeners: Sequence[object] = (),
    on_start: Callable[[Callable[[], None]], None] | None = None,
) -> int:
    """Evaluate shard `shard_idx` of `total` of `config` into `out_dir` (its `shard_<i>` directory)
    and return the shard's exit code (0, 3 with errors, 130 / 143 after a stop signal); a user's
    mistake raises UsageError, a shard that could not finish ShardError.

    `sweep`: the sweep this cell belongs to (its model's plan, recorded in the manifest);
    `source`: where the shard number came from, for the log line that names the shard;
    `listeners`: objects with hook implementations (`record_written`, ...) that take part in this
    cell's run only; `on_start`: called, before the cell starts, with a function that stops it as
    Ctrl-C stops a shard (no new requests, those in flight drain, the manifest says interrupted,
    exit 130), for a listener that must end the cell early where no signal reaches it (a Ray
    worker blocks them). The shard installs its stop-signal handlers only on the main thread and
    removes them when it ends; its log lines go to `out_dir/logs/shard.log` as a process's do.
    """
    shard = ShardSpec(shard_idx, total, source)
    setup_logging()
    log.info("%s", shard.describe())
    manager = plugins.plugin_manager()
    joined = [manager.register(listener, name=f"shardeval_cell_listener_{id(listener)}") for listener in listeners]
    try:
        # a prepared run (docs/offline.md): the run's root is the cell's parent, a sweep's its grandparent
        parent = os.path.dirname(os.path.normpath(out_dir))
        prepared = use_preparation([parent, os.path.dirname(parent)])
        run = ShardRun(config, shard, out_dir, fresh=fresh, sweep=sweep, preparation=prepared)
        if on_start is not None:
            on_start(lambda: run._on_signal(signal.SIGINT))  # what SIGINT's handler does, called in the cell's loop
        return asyncio.run(run.run())
    finally:
        for name in joined:
            if name is not None:
                manager.unregister(name=name)

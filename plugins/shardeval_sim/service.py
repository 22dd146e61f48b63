"""The `sim` service: launch `shardeval sim` on a free local port for the shard, stop it after.

The simulator runs as a child process (like a real model server would), so the shard's client
and the server never share an event loop or a CPU core's time slices by accident.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from collections.abc import AsyncIterator

from shardeval.api.service import Endpoint, ServerProcess, ServiceContext
from shardeval_sim.config import SimServiceConfig, sim_argv

READY_LINE = r"shardeval sim listening on (http://\S+/v1)"


@asynccontextmanager
async def sim_service(name: str, config: SimServiceConfig, ctx: ServiceContext) -> AsyncIterator[Endpoint]:
    log_path = ctx.log_path("sim", name)
    async with ServerProcess(sim_argv(config), name=f"service {name!r} (sim)", log_path=log_path, stop_grace_s=5.0) as proc:
        match = await proc.wait_log_line(READY_LINE, timeout_s=config.startup_timeout_s)
        yield Endpoint(base_url=match.group(1), model=config.model, protocol=config.protocol, api_key_env=config.api_key_env, process=proc)

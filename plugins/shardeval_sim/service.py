"""The `sim` service: launch `shardeval sim` on a free local port for the shard, stop it after.

The simulator runs as a child process (like a real model server would), so the shard's client
and the server never share an event loop or a CPU core's time slices by accident.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import AsyncIterator

from shardeval.api import Endpoint, self_command, ServerProcess, ServiceContext
from shardeval_sim.config import SimServiceConfig
from shardeval_sim.settings import BEHAVIOUR_KEYS, SIM_DEFAULTS

# Knobs passed only when they differ from the default, so the command line of a sim that does not
# judge is what it was, and a node with an older shardeval still starts it.
ONLY_WHEN_SET = ("judge_quality", "judge_garbage")

READY_LINE = r"shardeval sim listening on (http://\S+/v1)"


def sim_argv(config: SimServiceConfig, command: list[str] | None = None) -> list[str]:
    """The `shardeval sim` command line that realises a service config (always port 0), run as
    `command` (default: this process's own command)."""
    argv = [*(command or self_command()), "sim", "--host", "127.0.0.1", "--port", "0"]
    for key in BEHAVIOUR_KEYS:
        value = getattr(config, key)
        if key == "bench_params":
            for k, v in sorted(value.items()):
                argv += ["--bench-param", f"{k}={json.dumps(v)}"]  # JSON is YAML: the type survives
        elif value is not None and not (key in ONLY_WHEN_SET and value == getattr(SIM_DEFAULTS, key)):
            argv += ["--" + key.replace("_", "-"), str(value)]
    return argv


@asynccontextmanager
async def sim_service(name: str, config: SimServiceConfig, ctx: ServiceContext) -> AsyncIterator[Endpoint]:
    log_path = ctx.log_path("sim", name)
    async with ServerProcess(sim_argv(config), name=f"service {name!r} (sim)", log_path=log_path, stop_grace_s=5.0) as proc:
        match = await proc.wait_log_line(READY_LINE, timeout_s=config.startup_timeout_s)
        yield Endpoint(
            base_url=match.group(1), model=config.model, protocol=config.protocol, api_key_env=config.api_key_env, process=proc
        )

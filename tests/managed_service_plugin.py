"""A third-party managed service, loaded through SHARDEVAL_PLUGINS: it starts its server with
shardeval.run.process.ServerProcess and yields an Endpoint carrying it, so the runner watches it as it
watches the built-in `vllm` service (tests/test_vllm_lifecycle.py kills both mid-run)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any

from shardeval.config import ServiceConfig
from shardeval.hookspecs import hookimpl
from shardeval.run.process import ServerProcess
from shardeval.run.service import Endpoint


class WrappedConfig(ServiceConfig, kw_only=True, forbid_unknown_fields=True):
    argv: list[str]  # a `shardeval sim` command line
    model: str = "sim"

    def identity(self) -> dict[str, Any]:
        return {"model": self.model}

    def managed(self) -> bool:
        return True


@asynccontextmanager
async def wrapped_service(name, config, ctx):
    what, log_path = f"service {name!r} (wrapped)", ctx.log_path("wrapped", name)
    async with ServerProcess(config.argv, name=what, log_path=log_path, stop_grace_s=5.0) as proc:
        match = await proc.wait_log_line(r"shardeval sim listening on (http://\S+/v1)", timeout_s=60)
        yield Endpoint(base_url=match.group(1), model=config.model, protocol=config.protocol, process=proc)


@hookimpl
def register_services(register):
    register("wrapped", wrapped_service, config=WrappedConfig)

"""The `vllm` service: start `vllm serve` for the shard, wait for /health, stop it on every exit.

Its log goes to the shard's logs/ (`vllm.log`, or `vllm-<name>.log` for a service not named
`model`); a crash or a start-up past `startup_timeout_s` fails the shard quoting that log.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from collections.abc import AsyncIterator

from shardeval.api.plugin import UsageError
from shardeval.api.service import Endpoint, resolve_port, ServerProcess, ServiceContext
from shardeval_vllm.config import check_media_path, VllmServiceConfig, vllm_argv

_ANY_ADDRESS = ("", "0.0.0.0", "::")


def connect_host(host: str) -> str:
    """Where the client connects: a server bound to every address is reached on loopback."""
    if host in _ANY_ADDRESS:
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


@asynccontextmanager
async def vllm_service(name: str, config: VllmServiceConfig, ctx: ServiceContext) -> AsyncIterator[Endpoint]:
    what = f"service {name!r} (vllm)"
    config.check()  # as when the config was read: a config built in code is held to it too
    check_media_path(name, config)  # vLLM would start, then fail every image request (its connector checks it per request)
    env = dict(config.env)
    if config.api_key_env:  # the API key travels in the server's environment, never on argv
        key = os.environ.get(config.api_key_env)
        if not key:
            raise UsageError(
                f"services.{name}.api_key_env: the environment variable {config.api_key_env} is not set "
                "(it holds the key the server will require)"
            )
        env["VLLM_API_KEY"] = key
    port = resolve_port(
        config.host if config.host not in _ANY_ADDRESS else "0.0.0.0", config.port, on_conflict=config.port_conflict, what=what
    )
    base = f"http://{connect_host(config.host)}:{port}"
    log_path = ctx.log_path("vllm", name)
    proc = ServerProcess(vllm_argv(config, port), name=what, log_path=log_path, env=env, stop_grace_s=config.stop_timeout_s)
    async with proc:
        await proc.wait_http(f"{base}{config.health_path}", timeout_s=config.startup_timeout_s, interval_s=1.0)
        yield Endpoint(f"{base}/v1", config.served_model(), config.protocol, config.api_key_env, process=proc)

"""The model-service API: a service plugin turns its config into a reachable Endpoint.

A service factory returns an async context manager: entering it starts (or just locates) the
server and waits until it is healthy; leaving it stops whatever it started, on every exit path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING
from collections.abc import Callable

from shardeval.config import Protocol, ServiceConfig

if TYPE_CHECKING:
    from shardeval.run.process import ServerProcess


@dataclass(frozen=True)
class Endpoint:
    """Where requests go. `api_key_env` names a variable; the client reads the key from it, and
    the key itself is never stored in a config, record or log. `process`: the server this shard
    started for it, if any; the runner watches it and fails the shard fast when it dies."""

    base_url: str  # ends in /v1
    model: str
    protocol: Protocol
    api_key_env: str | None = None
    process: ServerProcess | None = field(default=None, compare=False, repr=False)

    def url(self) -> str:
        path = "/chat/completions" if self.protocol == "chat_completions" else "/completions"
        return self.base_url.rstrip("/") + path


@dataclass(frozen=True)
class ServiceContext:
    """What a service may use on the node: where its logs go and which shard it serves."""

    logs_dir: str
    shard_idx: int
    total_shards: int

    def log_path(self, service_type: str, name: str) -> str:
        """Where a server this shard starts logs: `<type>.log` for the usual service name
        `model`, `<type>-<name>.log` for any other."""
        return os.path.join(self.logs_dir, f"{service_type}.log" if name == "model" else f"{service_type}-{name}.log")


ServiceFactory = Callable[[str, ServiceConfig, ServiceContext], AbstractAsyncContextManager[Endpoint]]

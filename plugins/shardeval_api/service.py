"""The `api` service: a server someone else runs. Nothing to start; just say where it is."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any
from collections.abc import AsyncIterator

from shardeval.api.plugin import UsageError
from shardeval.api.service import Endpoint, ServiceConfig, ServiceContext, split_endpoint_url


class ApiServiceConfig(ServiceConfig, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    url: str
    model: str

    def identity(self) -> dict[str, Any]:
        """Only the model name: where it is served (the URL) never changes an answer. What the
        server says it runs (/v1/models) is checked apart, at every shard start."""
        return {"model": self.model}

    def served_model(self) -> str:
        return self.model

    def launch_line(self, command: list[str]) -> str:
        return f"nothing to start; requests go to {self.url}"

    def check(self) -> None:
        """The URL is http(s), when the config is read (ServiceConfig.check)."""
        if not self.url.startswith(("http://", "https://")):
            raise UsageError(f"url: {self.url!r} is not an http(s) URL; give the base URL ending in /v1, e.g. http://node17:8000/v1")


@asynccontextmanager
async def api_service(name: str, config: ApiServiceConfig, ctx: ServiceContext) -> AsyncIterator[Endpoint]:
    config.check()  # as when the config was read: a config built in code is held to it too
    base_url, protocol = split_endpoint_url(config.url)
    yield Endpoint(base_url=base_url, model=config.model, protocol=protocol or config.protocol, api_key_env=config.api_key_env)

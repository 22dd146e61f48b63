"""shardeval.api.service: what a service plugin needs: an endpoint to ask, a server process to start
and watch. The names and what each is for are listed once in shardeval/api/roles.py (docs/plugins.md
shows them); a name loads its core module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.roles import serve

if TYPE_CHECKING:  # made from shardeval/api/roles.py by scripts/dev/api_roles_rewrite.py --blocks
    from shardeval.config import ServiceConfig as ServiceConfig, ReasoningConfig as ReasoningConfig
    from shardeval.run.service import Endpoint as Endpoint, ServiceContext as ServiceContext
    from shardeval.config.reading import split_endpoint_url as split_endpoint_url
    from shardeval.run.process import (
        ServerProcess as ServerProcess,
        resolve_port as resolve_port,
        self_command as self_command,
        redact as redact,
    )
else:  # type checkers read the imports above; at run time each name is imported on first use
    __getattr__, __dir__, __all__ = serve("service")

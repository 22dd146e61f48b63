"""Built-in plugin: the `compose` orchestrator (`cluster.type: compose`).

`shardeval run compose.yaml` renders a Docker Compose file whose `eval-shard` service (profile
`sharded`) evaluates the shard named by NEL_SHARD_IDX / NEL_TOTAL_SHARDS from the caller's
environment, and whose `eval-merge` service (profile `merge`) runs `shardeval merge /results`.
It prints the commands to run; it never drives Docker itself. Registered through the
`shardeval` entry-point group like any third-party plugin; msgspec and PyYAML load in the hook.
"""

from __future__ import annotations

from shardeval.api import hookimpl


@hookimpl
def register_orchestrators(register):
    from shardeval.api import Lazy
    from shardeval_compose.config import ComposeClusterConfig

    register("compose", Lazy("shardeval_compose.orchestrator:submit"), config=ComposeClusterConfig)

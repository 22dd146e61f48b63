"""Built-in plugin: the `compose` orchestrator (`cluster.type: compose`; orchestrator.py says what
it writes). Registered through the `shardeval` entry-point group like any third-party plugin;
msgspec and PyYAML load in the hook.
"""

from __future__ import annotations

from shardeval.api.plugin import hookimpl


@hookimpl
def register_orchestrators(register):
    from shardeval.api.plugin import Lazy
    from shardeval_compose.config import ComposeClusterConfig

    register("compose", Lazy("shardeval_compose.orchestrator:ComposeOrchestrator"), config=ComposeClusterConfig)

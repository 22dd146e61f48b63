"""Built-in plugin: the `compose` orchestrator (`cluster.type: compose`; orchestrator.py says what
it writes). Registered through the `shardeval` entry-point group like any third-party plugin;
msgspec and PyYAML load in the hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.plugin import hookimpl

if TYPE_CHECKING:
    from shardeval.api.plugin import Register


@hookimpl
def register_orchestrators(register: Register) -> None:
    from shardeval.api.plugin import Lazy
    from shardeval_compose.config import ComposeClusterConfig

    register("compose", Lazy("shardeval_compose.orchestrator:ComposeOrchestrator"), config=ComposeClusterConfig)

"""Built-in plugin: `cluster.type: local`, every shard as a process on this machine.

The smallest complete orchestrator: it fills the core's lifecycle (shardeval.api.Orchestrator) by
running `shardeval run … --shard i/N` once per shard, exactly the command a SLURM array task or an
Indexed Job pod runs, so it is also the template to copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.plugin import hookimpl

if TYPE_CHECKING:
    from shardeval.api.plugin import Register


@hookimpl
def register_orchestrators(register: Register) -> None:
    from shardeval_local.orchestrator import LocalClusterConfig, LocalOrchestrator

    register("local", LocalOrchestrator, config=LocalClusterConfig)

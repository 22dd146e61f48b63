"""Built-in plugin: the `slurm` orchestrator (`cluster.type: slurm`).

Registered through the `shardeval` entry-point group like any third-party plugin. Heavy imports
(msgspec via the config Struct) happen inside the hook, so loading plugins for `--help` stays cheap.
Each array task runs `shardeval run … --shard I/N` (or reads NEL_SHARD_IDX / SLURM_ARRAY_TASK_ID),
so a task never re-submits the array.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.hookspecs import hookimpl

if TYPE_CHECKING:
    from shardeval.orchestrator import LaunchRequest


@hookimpl
def register_orchestrators(register):
    from shardeval_slurm.config import SlurmClusterConfig

    register("slurm", submit, config=SlurmClusterConfig)


def submit(request: LaunchRequest) -> int:
    """Submit the whole run as one SLURM array (not yet: the shards can already run by hand)."""
    from shardeval.errors import ShardError

    raise ShardError(
        "cluster.type slurm: array submission is not available yet in this version; "
        "run shards directly with --shard I/N or NEL_SHARD_IDX/NEL_TOTAL_SHARDS"
    )

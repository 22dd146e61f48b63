"""The `cluster:` keys of `type: slurm`: one array job, one task per shard.

Every key maps onto an `#SBATCH` line or the script around `shardeval run`; anything not modelled
here goes through `sbatch_extra_flags` verbatim.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from shardeval.config import ClusterConfig

Positive = Annotated[int, msgspec.Meta(ge=1)]


class NodePool(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """The resources one array task asks for; a service names its pool with `node_pool:`."""

    partition: str | None = None  # --partition; falls back to cluster.partition
    nodes: Positive = 1  # --nodes
    ntasks_per_node: Positive = 1  # --ntasks-per-node
    gres: str | None = None  # --gres, e.g. "gpu:4"
    gpus_per_node: int | None = None  # --gpus-per-node
    cpus_per_task: int | None = None  # --cpus-per-task
    mem: str | None = None  # --mem, e.g. "200G"
    constraint: str | None = None  # --constraint
    exclusive: bool = False  # --exclusive


class SlurmClusterConfig(ClusterConfig, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`cluster:` for SLURM. `shards` (inherited) is the array size: `#SBATCH --array=0-<shards-1>`."""

    type: str = "slurm"
    walltime: str  # --time, any SLURM form: "MM", "HH:MM:SS", "D-HH:MM:SS" (quote it in YAML)
    partition: str | None = None  # --partition for pools that name none
    account: str | None = None  # --account
    qos: str | None = None  # --qos
    job_name: str = "shardeval"  # --job-name
    node_pools: dict[str, NodePool] = {}
    sbatch_extra_flags: list[str] = []  # extra `#SBATCH` flags, verbatim, e.g. ["--mail-type=END"]
    max_parallel: Positive | None = None  # at most this many tasks at once: --array=0-15%max_parallel
    setup: list[str] = []  # shell lines run before `shardeval run` (module load, conda activate, …)
    env: dict[str, str] = {}  # exported in the batch script; never secrets (name them with api_key_env)
    shardeval_command: str = "shardeval"  # how nodes invoke shardeval, e.g. the zipapp's path
    merge: bool = True  # submit a dependent `shardeval merge` job after the array

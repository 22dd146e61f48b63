"""The `cluster:` keys of `type: slurm`: one array job, one task per shard, then a merge job.

Every key maps onto an `#SBATCH` line or the script around `shardeval run`; anything not modelled
here goes through `sbatch_extra_flags` verbatim. See docs/slurm.md for the generated scripts.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from shardeval.api.orchestrator import ClusterConfig

Positive = Annotated[int, msgspec.Meta(ge=1)]
Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]


class NodePool(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """The resources one array task asks for; a service names its pool with `node_pool:`."""

    partition: str | None = None  # --partition; falls back to cluster.partition
    nodes: Positive = 1  # --nodes
    ntasks_per_node: Positive = 1  # --ntasks-per-node
    gres: str | None = None  # --gres, e.g. "gpu:4"
    gpus_per_node: Annotated[int, msgspec.Meta(ge=0)] | None = None  # --gpus-per-node
    cpus_per_task: Positive | None = None  # --cpus-per-task
    mem: str | None = None  # --mem, e.g. "200G"
    # Per GPU, for a task that asks for GPUs: without them a site's default (often 1 CPU and a few
    # GB under cgroups) starves a model server. Used when cpus_per_task / mem are not set.
    cpus_per_gpu: Positive = 8  # --cpus-per-gpu
    mem_per_gpu: str = "64G"  # --mem-per-gpu
    constraint: str | None = None  # --constraint
    exclusive: bool = False  # --exclusive


class SlurmClusterConfig(ClusterConfig, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`cluster:` for SLURM. `shards` (inherited) is the array size, `#SBATCH --array=0-<shards-1>`;
    in a sweep, shards per model: the array has models × shards tasks."""

    type: str = "slurm"
    walltime: str  # --time, any SLURM form: "MM", "HH:MM:SS", "D-HH:MM:SS" (quote it in YAML)
    partition: str | None = None  # --partition for pools that name none (and for the merge job)
    account: str | None = None  # --account
    qos: str | None = None  # --qos
    job_name: str = "shardeval"  # --job-name (the merge job gets "<job_name>-merge")
    node_pools: dict[str, NodePool] = {}
    sbatch_extra_flags: list[str] = []  # extra `#SBATCH` flags of the array job, verbatim, e.g. ["--mail-type=END"]
    max_parallel: Positive | None = None  # at most this many tasks at once: --array=0-15%max_parallel
    requeue: bool = True  # --requeue: a preempted or failed-node task runs again (and resumes)
    # The time limit: SLURM signals every process of a task at the limit, the model server too, so
    # the batch shell asks for USR1 this long plus output.drain_timeout_s before it
    # (--signal=B:USR1@…), stops the shard (it drains, then stops its own service) and exits
    # 143. The margin covers stopping the service and writing the manifest.
    stop_margin_s: Annotated[int, msgspec.Meta(ge=0)] = 60
    # Opt-in: a task stopped by that early signal puts itself back in the queue (scontrol requeue;
    # it resumes) at most this many times, counted by SLURM_RESTART_COUNT. 0: never.
    requeue_on_timeout: Annotated[int, msgspec.Meta(ge=0)] = 0
    setup: list[str] = []  # shell lines run before `shardeval` (module load, conda activate, …)
    env: dict[str, str] = {}  # exported in the batch scripts; never secrets (name them with api_key_env)
    # How a node invokes shardeval, e.g. ["python3", "/shared/shardeval.pyz"] or ["shardeval"].
    # Default: this very shardeval (its interpreter's absolute path), right on a one-node cluster.
    command: list[str] | None = None
    merge: bool = True  # submit a dependent `shardeval merge` job (afterany: the array job)
    merge_walltime: str = "01:00:00"  # --time of the merge job
    merge_partition: str | None = None  # default: cluster.partition, else the array's partition
    # Ray on SLURM: one job over `nodes` of the pool; Ray head on the first node, workers on the
    # rest, then the Ray launcher runs every shard as a Ray task (see shardeval_slurm.ray_template).
    ray: bool = False
    ray_port: Port = 6379  # the head's GCS port
    ray_command: list[str] | None = None  # the `ray` CLI on the nodes; default: beside this Python, else `ray`
    ray_launcher: list[str] | None = None  # default: [<python>, "-m", "shardeval_ray"]
    ray_start_timeout_s: Positive = 300  # how long the script waits for every node to join

"""`cluster.type: ray`: the keys of the Ray orchestrator's section of the config."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from shardeval.api.orchestrator import ClusterConfig

NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class RayClusterConfig(ClusterConfig, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """One Ray task per shard; every key but `shards` and `merge` is passed to Ray as it is.

    address: where the Ray cluster is. Unset: RAY_ADDRESS when set (as under `ray job submit`),
        else a cluster started with `ray start` on this machine, else a new local Ray that listens
        on 127.0.0.1 only and is stopped at the end. `auto`: an existing cluster, never a new one;
        `local`: always a new local one; `HOST:PORT` or `ray://HOST:PORT`: that cluster.
    node_ip_address: this node's IP for a Ray the launcher starts (default 127.0.0.1, or
        RAY_NODE_IP_ADDRESS); when connecting, only passed when set.
    num_cpus, num_gpus, memory, resources: what each shard task reserves (`resources` holds
        custom resources, e.g. {vllm_node: 1}); a shard is I/O-bound unless it launches vLLM.
    max_retries: attempts after a worker or node dies (-1: forever); retry_exceptions: also
        retry after the shard raised (a usage error, such as a changed config, never is).
    runtime_env: Ray's runtime_env for every task, as written (env_vars, pip, working_dir, ...).
    merge: merge the shard directories in the driver at the end (needs them on storage the
        driver sees: one machine, or a shared filesystem).
    """

    address: str | None = None
    node_ip_address: str | None = None
    num_cpus: NonNegative = 1.0
    num_gpus: NonNegative = 0.0
    memory: Annotated[int, msgspec.Meta(ge=0)] | None = None
    resources: dict[str, NonNegative] = {}
    max_retries: Annotated[int, msgspec.Meta(ge=-1)] = 3
    retry_exceptions: bool = True
    runtime_env: dict[str, Any] = {}
    merge: bool = True

"""The `cluster:` keys of `type: compose`: one `eval-shard` service run once per shard, one `eval-merge`."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from shardeval.api.orchestrator import ClusterConfig

NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class ComposeClusterConfig(ClusterConfig, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """`cluster:` for Docker Compose. `shards` (inherited, default 1) is NEL_TOTAL_SHARDS's default."""

    type: str = "compose"
    image: str | None = None  # default: shardeval:<version>, built from build/Dockerfile
    entrypoint: list[str] = msgspec.field(default_factory=lambda: ["shardeval"])  # how the image runs shardeval
    results_volume: str | None = None  # None: bind-mount the output root at /results; a name: a named volume
    env: dict[str, str] = {}  # plain variables for both services; never secrets
    pass_env: list[str] = []  # further variables passed through by name from the caller's environment
    gpus: NonNegative | Literal["all"] | None = None  # device reservation for eval-shard
    gpu_driver: str = "nvidia"
    network_mode: str | None = None  # e.g. "host" to reach an endpoint on the Docker host's localhost
    shm_size: str | None = None  # e.g. "16gb" for a vllm service inside the shard container
    user: str | None = None  # e.g. "1000:1000", so files on a bind-mounted output root are yours
    read_only: bool = False  # a read-only root file system for both services (the image writes nothing at start)

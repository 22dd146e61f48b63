"""Built-in plugin: the `kubernetes` orchestrator (`cluster.type: kubernetes`).

`shardeval run k8s.yaml` renders, from the same config, one Indexed Job (a pod per shard; each
pod's NEL_SHARD_IDX comes from its completion index) and a merge Job that waits for the Indexed
Job's `Complete` condition, then applies them with `kubectl` (`--dry-run`: writes and prints only).
Registered through the `shardeval` entry-point group like any third-party plugin; msgspec and
PyYAML are imported inside the hook and the orchestrator, so loading plugins stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.plugin import hookimpl

if TYPE_CHECKING:
    from shardeval.api.plugin import Register


@hookimpl
def register_orchestrators(register: Register) -> None:
    from shardeval.api.plugin import Lazy
    from shardeval_kubernetes.config import KubernetesClusterConfig

    register("kubernetes", Lazy("shardeval_kubernetes.orchestrator:KubernetesOrchestrator"), config=KubernetesClusterConfig)

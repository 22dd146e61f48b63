"""Built-in plugin: the `ray` orchestrator (`cluster.type: ray`) and `python -m shardeval_ray`.

Every shard is one `@ray.remote` task (tasks.py: the same `<output-dir>/shard_<i>/` a SLURM array
task writes, resumed by a retry); the driver then merges in-process (orchestrator.py).

This module stays light: Ray (a heavy, optional extra) and msgspec are imported only when a Ray run
starts or when `run_shard` is first looked up:

    import ray
    from shardeval_ray import run_shard
    futures = [run_shard.remote("gsm8k", i, 8, model_url=URL, model_id="m", output_dir="/shared/out")
               for i in range(8)]
    summaries = ray.get(futures)
"""

from __future__ import annotations

import importlib
from typing import Any, TYPE_CHECKING

from shardeval.api.plugin import hookimpl

if TYPE_CHECKING:
    from shardeval.api.plugin import Register

__all__ = ["run_shard", "evaluate_shard", "run_ray"]


@hookimpl
def register_orchestrators(register: Register) -> None:
    from shardeval.api.plugin import Lazy
    from shardeval_ray.config import RayClusterConfig

    # `cluster.type: ray`: every shard a Ray task; the core's lifecycle merges (see orchestrator.py)
    register("ray", Lazy("shardeval_ray.orchestrator:RayOrchestrator"), config=RayClusterConfig)


def __getattr__(name: str) -> Any:
    """`run_shard` (the Ray remote function) and `evaluate_shard` import Ray only when asked for;
    `run_ray`, the orchestrator, on first use too."""
    if name in __all__:
        module = "orchestrator" if name == "run_ray" else "tasks"
        return getattr(importlib.import_module(f"shardeval_ray.{module}"), name)
    raise AttributeError(f"module 'shardeval_ray' has no attribute {name!r}")

"""`python -m shardeval_ray`: run every shard of an evaluation as a Ray task, then merge.

    python -m shardeval_ray --bench gsm8k --shards 8 --repeats 5 --output-dir ./eval_results/ray
    ray job submit --working-dir . -- python -m shardeval_ray --bench gsm8k --shards 8 ...

The same evaluation as `shardeval run` with `cluster.type: ray`: a CONFIG.yaml and/or the quick
mode flags, `-O` overrides, and the Ray keys as flags (they beat the file's `cluster:` section).
A config written for another orchestrator runs too: its `cluster:` section is replaced by Ray's.
This command always orchestrates: shard variables (NEL_SHARD_IDX, …) in its environment are
ignored, with a warning; `shardeval run --shard I/N` is the way to run one shard by hand.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

import click

from shardeval.api.orchestrator import evaluation_options, override_option

log = logging.getLogger("shardeval")

SHARD_VARIABLES = ("NEL_SHARD_IDX", "NEL_TOTAL_SHARDS", "SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX")
RAY_FLAGS = ("shards", "address", "node_ip_address", "num_cpus", "num_gpus", "max_retries")  # cluster.<flag>


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@evaluation_options  # `shardeval run`'s config argument and quick-mode flags
@click.option("-o", "--output-dir", help="The run's root: shard_<i>/ and merged/ go under it (default: output.dir).")
@click.option("--shards", type=int, help="Number of shards, one Ray task each (cluster.shards; default 1).")
@click.option("--address", help="Ray address: HOST:PORT, ray://HOST:PORT, auto, or local (default: see docs/ray.md).")
@click.option("--node-ip-address", help="This node's IP for a Ray started here (default 127.0.0.1: loopback only).")
@click.option("--num-cpus", type=float, help="CPUs each shard task reserves (default 1).")
@click.option("--num-gpus", type=float, help="GPUs each shard task reserves (default 0).")
@click.option("--max-retries", type=int, help="Retries of a shard task whose worker died or that failed (default 3).")
@click.option("--no-merge", is_flag=True, help="Do not merge at the end (run `shardeval merge` later).")
@click.option("--fresh", is_flag=True, help="Start over: move earlier results of every shard aside first.")
@override_option
@click.option("--dry-run", is_flag=True, help="Show which Ray and which tasks would run; start nothing.")
def main(config_path: str | None, overrides: tuple[str, ...], no_merge: bool, fresh: bool, dry_run: bool, **quick: Any) -> None:
    """Run every shard of an evaluation as a Ray task, then merge the shard directories."""
    from shardeval.api.orchestrator import load_request, setup_logging
    from shardeval_ray.orchestrator import run_ray

    setup_logging()
    ignored = [name for name in SHARD_VARIABLES if os.environ.get(name)]
    if ignored:
        log.warning("ignoring %s: python -m shardeval_ray runs every shard itself", ", ".join(ignored))
    flags = {key: quick.pop(key) for key in RAY_FLAGS} | {"merge": False if no_merge else None}  # the rest: quick mode
    cluster_overrides = [f"cluster.{key}={_yaml(value)}" for key, value in flags.items() if value is not None]
    all_overrides = [*_ray_cluster(config_path), *overrides, *cluster_overrides]
    output_dir = quick.pop("output_dir", None)
    request = load_request(config_path, all_overrides, quick, output_dir, dry_run=dry_run, fresh=fresh)
    if request.sweep is not None and not dry_run:  # a sweep: one task per (model, shard)
        request.sweep.write_plan(request.output_root)
    sys.exit(run_ray(request))


def _yaml(value: Any) -> str:
    """A flag's value as the YAML an -O override takes (strings quoted: an address has colons)."""
    return json.dumps(value) if isinstance(value, (str, bool)) else str(value)


def _ray_cluster(config_path: str | None) -> list[str]:
    """Make the run `cluster.type: ray`, keeping the file's ray keys and dropping another type's."""
    if config_path is None:
        return ["cluster.type=ray"]
    try:
        import yaml

        with open(config_path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
        cluster = data.get("cluster") if isinstance(data, dict) else None
        kind = cluster.get("type", "local") if isinstance(cluster, dict) else None
    except Exception:  # unreadable or invalid: load_config says why, in one line
        return ["cluster.type=ray"]
    if kind in (None, "ray") or not isinstance(cluster, dict):
        return ["cluster.type=ray"]
    keep = {k: cluster[k] for k in ("shards",) if k in cluster}
    log.info("%s: its cluster section (type %s) is replaced by type ray for this run", config_path, kind)
    return ["cluster={type: ray" + "".join(f", {k}: {v}" for k, v in keep.items()) + "}"]


def cli(argv: list[str] | None = None) -> None:
    """Entry point: user mistakes are one line and exit 2, as in `shardeval`."""
    from shardeval.api.orchestrator import run_cli

    run_cli(main, argv, "python -m shardeval_ray")


if __name__ == "__main__":
    cli()

"""The orchestrator API: what a `cluster.type` plugin receives when no shard is selected.

An orchestrator turns one `shardeval run` into N shard runs (local processes, a SLURM array, an
Indexed Job, Ray tasks, Compose services). Each of those runs `shard_argv(...)`: the same command
with `--shard I/N` and its own output directory, so a shard never re-submits the run.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from shardeval.config import Config
from shardeval.process import self_command  # noqa: F401  (orchestrators build shard commands with it)


@dataclass(frozen=True)
class LaunchRequest:
    config: Config
    config_path: str | None
    overrides: list[str]
    quick: dict[str, Any] = field(default_factory=dict)
    output_root: str = "./eval_results"
    dry_run: bool = False
    fresh: bool = False

    def shard_dir(self, idx: int) -> str:
        return os.path.join(self.output_root, f"shard_{idx}")

    def config_text(self) -> str | None:
        """The config file as written, for orchestrators that ship it to their nodes (its ${VAR}s
        expand there); None in quick mode, where the flags travel in the shard's arguments."""
        if not self.config_path:
            return None
        with open(self.config_path, encoding="utf-8") as f:
            return f.read()

    def run_args(self, config_path: str | None = None, escape: Callable[[str], str] = str) -> list[str]:
        """Arguments after `shardeval run` that repeat this run: the config file (`config_path`:
        where the node sees it), the quick flags, the -O overrides and --fresh; `escape` makes each
        value literal for the file the arguments are written into (Compose, Kubernetes)."""
        args = [config_path or self.config_path] if self.config_path else []
        for flag, value in self.quick.items():
            if value is not None:
                args += [f"--{flag.replace('_', '-')}", escape(str(value))]
        for override in self.overrides:
            args += ["-O", escape(override)]
        return args + (["--fresh"] if self.fresh else [])

    def shard_args(self, idx: int | str, total: int, output_dir: str | None = None) -> list[str]:
        """Arguments after `shardeval run` that make a node run exactly shard idx of total."""
        return [*self.run_args(), "--shard", f"{idx}/{total}", "-o", output_dir or self.shard_dir(int(idx))]


Orchestrator = Callable[[LaunchRequest], int]


def merge_and_report(root: str) -> None:
    """The step an orchestrator that waits for its shards ends with: merge what they wrote (also
    after a failure: the report then says what is missing) and print the report."""
    from shardeval.errors import UsageError
    from shardeval.merge import merge_run, write_merged
    from shardeval.report import render_report

    try:
        result = merge_run(root)
    except UsageError as exc:
        print(f"shardeval: nothing to merge: {exc}", file=sys.stderr)
        return
    out = write_merged(result)
    print(render_report(result), end="")
    print(f"\nmerged into {out}/ — `shardeval merge {root}` redoes it, `shardeval status {root}` shows progress")

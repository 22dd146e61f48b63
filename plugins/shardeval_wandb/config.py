"""The keys of an `export: [{to: wandb, ...}]` entry and of `export --to wandb`'s flags."""

from __future__ import annotations

import importlib.util

from shardeval.api import ExportConfig, UsageError

EXTRA = "pip install 'shardeval[wandb]' (the one file: shardeval plugins install wandb)"


class WandbExportConfig(ExportConfig):
    project: str | None = None  # default: WANDB_PROJECT, else the run directory's name
    entity: str | None = None  # default: WANDB_ENTITY, else the account's default

    def check(self) -> None:
        """Before any merge: wandb is installed."""
        if importlib.util.find_spec("wandb") is None:
            raise UsageError(f"--to wandb needs wandb, which is not installed: {EXTRA}")

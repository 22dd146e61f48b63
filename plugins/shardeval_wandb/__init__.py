"""Built-in plugin: `shardeval export RUN --to wandb` and `export: [{to: wandb, ...}]` (docs/export.md).

One W&B run per (model, benchmark) of a merged run or sweep, with a run id derived from its
`shardeval.key`, so exporting again resumes and updates that run. Honours WANDB_MODE=offline.
wandb is the optional extra `shardeval[wandb]`, imported only when an export runs. Written against
shardeval.api alone.
"""

from __future__ import annotations

from shardeval.api.plugin import hookimpl, Lazy


@hookimpl
def register_exporters(register):
    from shardeval_wandb.config import WandbExportConfig  # not at the top: --help loads plugins, and a config loads msgspec

    register("wandb", Lazy("shardeval_wandb.exporter:export_wandb"), config=WandbExportConfig)


@hookimpl
def export_flags(add):
    add("wandb", "--project", "project", "the project (default: WANDB_PROJECT, else the run directory's name).", "P")
    add("wandb", "--entity", "entity", "the entity (default: WANDB_ENTITY, else your default).", "E")

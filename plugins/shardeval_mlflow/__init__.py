"""Built-in plugin: `shardeval export RUN --to mlflow` and `export: [{to: mlflow, ...}]` (docs/export.md).

One MLflow run per (model, benchmark) of a merged run or sweep, found again by its `shardeval.key`
tag and updated on every export. MLflow's skinny client is the optional extra `shardeval[mlflow]`,
imported only when an export runs. Written against shardeval.api alone.
"""

from __future__ import annotations

from shardeval.api import hookimpl, Lazy


@hookimpl
def register_exporters(register):
    from shardeval_mlflow.config import MlflowExportConfig  # not at the top: --help loads plugins, and a config loads msgspec

    register("mlflow", Lazy("shardeval_mlflow.exporter:export_mlflow"), config=MlflowExportConfig)

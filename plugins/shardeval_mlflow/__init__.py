"""Built-in plugin: `shardeval export RUN --to mlflow` and `export: [{to: mlflow, ...}]` (docs/export.md).

One MLflow run per (model, benchmark) of a merged run or sweep, found again by its `shardeval.key`
tag and updated on every export. MLflow's skinny client is the optional extra `shardeval[mlflow]`,
imported only when an export runs. Written against shardeval.api alone.
"""

from __future__ import annotations

from shardeval.api.plugin import hookimpl, Lazy


@hookimpl
def register_exporters(register):
    from shardeval_mlflow.config import MlflowExportConfig  # not at the top: --help loads plugins, and a config loads msgspec

    register("mlflow", Lazy("shardeval_mlflow.exporter:export_mlflow"), config=MlflowExportConfig)


@hookimpl
def export_flags(add):
    add("mlflow", "--tracking-uri", "tracking_uri", "the tracking server or store (default: MLFLOW_TRACKING_URI).", "URI")
    add("mlflow", "--experiment", "experiment", "the experiment (default: the run directory's name).", "NAME")

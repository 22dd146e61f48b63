"""The keys of an `export: [{to: mlflow, ...}]` entry and of `export --to mlflow`'s flags."""

from __future__ import annotations

import importlib.util

from shardeval.api import ExportConfig, UsageError

EXTRA = "pip install 'shardeval[mlflow]' (the one file: shardeval plugins install mlflow-skinny)"


class MlflowExportConfig(ExportConfig):
    tracking_uri: str | None = None  # default: MLFLOW_TRACKING_URI, else MLflow's own default (./mlruns)
    experiment: str | None = None  # default: the run directory's name

    def check(self) -> None:
        """Before any merge: MLflow is installed."""
        if importlib.util.find_spec("mlflow") is None:
            raise UsageError(f"--to mlflow needs MLflow, which is not installed: {EXTRA}")

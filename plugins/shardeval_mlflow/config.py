"""The keys of an `export: [{to: mlflow, ...}]` entry and of `export --to mlflow`'s flags."""

from __future__ import annotations

import importlib.util
import os
import re

from shardeval.api import ExportConfig, UsageError, redact_urls

EXTRA = "pip install 'shardeval[mlflow]' (the one file: shardeval plugins install mlflow-skinny)"
CREDENTIALS = ("put credentials in the environment instead: MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and "
               "MLFLOW_TRACKING_PASSWORD")
_USERINFO = re.compile(r"^[a-z][a-z0-9+.-]*://[^/?#@]*@", re.I)


class MlflowExportConfig(ExportConfig):
    tracking_uri: str | None = None  # default: MLFLOW_TRACKING_URI, else MLflow's own default (./mlruns)
    experiment: str | None = None  # default: the run directory's name

    def check(self) -> None:
        """Before any merge: MLflow is installed, and the tracking URI holds no credentials (they
        come from MLflow's environment variables only, and would otherwise land in logs)."""
        if importlib.util.find_spec("mlflow") is None:
            raise UsageError(f"--to mlflow needs MLflow, which is not installed: {EXTRA}")
        name, uri = ("tracking_uri", self.tracking_uri) if self.tracking_uri else ("MLFLOW_TRACKING_URI", os.environ.get("MLFLOW_TRACKING_URI"))
        if uri and (_USERINFO.match(uri) or redact_urls(uri) != uri):
            raise UsageError(f"{name} {redact_urls(uri)}: the URI holds credentials; {CREDENTIALS}")

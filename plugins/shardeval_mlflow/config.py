"""The keys of an `export: [{to: mlflow, ...}]` entry and of `export --to mlflow`'s flags."""

from __future__ import annotations

import importlib.util
import os
import re
from urllib.parse import urlparse

from shardeval.api.exporter import ExportConfig
from shardeval.api.plugin import UsageError, redact_urls

EXTRA = "pip install 'shardeval[mlflow]' (the one file: shardeval plugins install mlflow-skinny sqlalchemy alembic)"
CREDENTIALS = "put credentials in the environment instead: MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
ELSEWHERE = "give a server (--tracking-uri http://HOST:5000), or a folder (file:///PATH/mlruns with MLFLOW_ALLOW_FILE_STORE=true)"
DATABASES = {"sqlite", "postgresql", "mysql", "mssql"}  # MLflow's SQLAlchemy stores, `sqlite+driver` alike
# What MLflow needs to open one (its own migrations run on a new database), which mlflow-skinny leaves out:
# the extra brings both, so MLflow 3's default store (sqlite:///mlflow.db) opens as installed.
DATABASE_MODULES = ("sqlalchemy", "alembic")
_USERINFO = re.compile(r"^[a-z][a-z0-9+.-]*://[^/?#@]*@", re.I)


class MlflowExportConfig(ExportConfig):
    tracking_uri: str | None = (
        None  # default: MLFLOW_TRACKING_URI, else MLflow's own default (sqlite:///mlflow.db, or ./mlruns where one exists)
    )
    experiment: str | None = None  # default: the run directory's name

    def check(self) -> None:
        """Before any merge: MLflow is installed, the tracking URI holds no credentials (they come
        from MLflow's environment variables only, and would otherwise land in logs), and its store
        can be opened by the MLflow installed (a folder store, a database)."""
        if importlib.util.find_spec("mlflow") is None:
            raise UsageError(f"--to mlflow needs MLflow, which is not installed: {EXTRA}")
        source, uri = tracking_uri(self)
        check_store(source, uri)


def tracking_uri(config: MlflowExportConfig) -> tuple[str, str]:
    """(where it came from, the tracking URI): `tracking_uri`, else MLFLOW_TRACKING_URI, else
    MLflow's default as MLflow resolves it. A URI holding credentials is refused, never shown."""
    source, uri = (
        ("tracking_uri", config.tracking_uri) if config.tracking_uri else ("MLFLOW_TRACKING_URI", os.environ.get("MLFLOW_TRACKING_URI"))
    )
    if uri and (_USERINFO.match(uri) or redact_urls(uri) != uri):
        # quoted: the line is redacted once more when printed, and `***:` would lose its colon
        raise UsageError(f"{source} '{redact_urls(uri)}' holds credentials; {CREDENTIALS}")
    if uri:
        return source, uri
    import mlflow  # its default: ./mlruns where one exists, else sqlite:///mlflow.db (MLflow 3)

    return "no tracking URI given (--tracking-uri, MLFLOW_TRACKING_URI), and MLflow's default", mlflow.get_tracking_uri()


def check_store(source: str, uri: str) -> None:
    """A store this MLflow refuses is one line with the fix, not MLflow's paragraph: a folder
    without MLFLOW_ALLOW_FILE_STORE (MLflow 3), a database without SQLAlchemy or Alembic (mlflow-skinny
    installed alone)."""
    scheme = urlparse(uri).scheme.lower() if "://" in uri or uri.startswith("file:") else ""
    if scheme in ("", "file") and uri not in ("databricks", "databricks-uc", "uc"):
        from mlflow import environment_variables

        allowed = getattr(environment_variables, "MLFLOW_ALLOW_FILE_STORE", None)
        if allowed is not None and not allowed.get():
            raise UsageError(
                f"{source} '{uri}' is a folder store, which MLflow 3 opens only with "
                f"MLFLOW_ALLOW_FILE_STORE=true: set it, or give a server (--tracking-uri http://HOST:5000)"
            )
    elif scheme.split("+")[0] in DATABASES and (missing := [m for m in DATABASE_MODULES if importlib.util.find_spec(m) is None]):
        raise UsageError(
            f"{source} '{redact_urls(uri)}' is a database store, which MLflow opens with {' and '.join(DATABASE_MODULES)} "
            f"({', '.join(missing)} not installed; the extra brings them): {EXTRA}, or {ELSEWHERE}"
        )

"""A merged run or sweep as MLflow runs: one per (model, benchmark), found again by its key.

Each TrackerRun is the MLflow run of its experiment whose tag `shardeval.key` is the run's key:
the first export creates it, a later one (the run completed, a sweep grown by a checkpoint)
finds it and updates it, never a second one. What it holds:

- params: the identity (shardeval.TrackerRun.params). MLflow never changes a logged param, so a
  param logged once stays; should a later export see another value (a resumed shard ran on
  another host), it goes to the tag `shardeval.param.<name>` and the export says so;
- tags: shardeval's (status, step, who exported), replaced on each export;
- metrics: every metric at the run's step (a sweep's checkpoint). Only a value that differs from
  the one MLflow holds is logged again, so exporting twice adds no point to any history, and a run
  completed since its last export gets its new values at the same step (MLflow shows the latest);
- artifacts: the per-sample table, scores.json and report.html, replaced on each export.

The client talks to the tracking URI given (`tracking_uri`, else MLFLOW_TRACKING_URI, else MLflow's
default), with credentials only from MLflow's own environment variables. MLflow retries an HTTP
server for minutes by default; an export asks with few retries and a short timeout unless the
user set MLFLOW_HTTP_REQUEST_MAX_RETRIES / MLFLOW_HTTP_REQUEST_TIMEOUT, so an unreachable server
is one line in seconds.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from typing import TYPE_CHECKING, Any
from collections.abc import Iterator

from shardeval.api.exporter import TrackerExport, TrackerRun
from shardeval.api.plugin import network_failure, ShardError, UsageError, redact_urls
from shardeval_mlflow.config import EXTRA, MlflowExportConfig, tracking_uri

if TYPE_CHECKING:
    import mlflow
    from mlflow.entities import Experiment, Run

KEY_TAG = "shardeval.key"
PARAM_TAG = "shardeval.param."
# MLflow's limits per log_batch call, and on a param's value.
MAX_METRICS, MAX_PARAMS, MAX_TAGS, MAX_PARAM_CHARS = 1000, 100, 100, 6000
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}


def export_mlflow(config: MlflowExportConfig, export: TrackerExport) -> list[str]:
    """Export every tracker run of `export` to MLflow; the lines to show the user."""
    try:
        from mlflow import MlflowClient
    except ImportError:
        raise UsageError(f"--to mlflow needs MLflow, which is not installed: {EXTRA}") from None
    with _http_defaults():
        return _export(MlflowClient, config, export)


@contextlib.contextmanager
def _http_defaults() -> Iterator[None]:
    """HTTP_DEFAULTS in the environment while the export runs (MLflow's REST client reads them on
    each request), the user's own values kept; the process's environment left as it was."""
    added = [name for name in HTTP_DEFAULTS if name not in os.environ]
    os.environ.update({name: HTTP_DEFAULTS[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def _export(MlflowClient: type[mlflow.MlflowClient], config: MlflowExportConfig, export: TrackerExport) -> list[str]:
    uri = tracking_uri(config)[1]  # the default resolved here, so that the line names the store written
    experiment_name = config.experiment or os.path.basename(export.root.rstrip(os.sep)) or "shardeval"
    with _local_store_lock(uri):
        return _export_locked(MlflowClient, uri, experiment_name, export)


def _export_locked(MlflowClient: type[mlflow.MlflowClient], uri: str, experiment_name: str, export: TrackerExport) -> list[str]:
    shown = redact_urls(uri)
    try:
        client = MlflowClient(tracking_uri=uri)
        experiment, made = _create_or_get(client, experiment_name)
        experiment_id = experiment.experiment_id
        existing = {} if made else _runs_by_key(client, experiment_id)
    except (UsageError, ShardError):
        raise
    except Exception as exc:
        raise ShardError(_store_failure(exc, shown)) from None
    if experiment.lifecycle_stage == "deleted":
        raise UsageError(
            f"mlflow: experiment '{experiment_name}' at {shown} is deleted: restore it (`mlflow experiments "
            f"restore --experiment-id {experiment_id}`) or export to another (--experiment NAME)"
        )
    created, notes = 0, []
    for i, run in enumerate(export.runs):
        try:
            made, changed = _export_run(client, experiment_id, run, existing.get(run.key))
        except (UsageError, ShardError):
            raise
        except Exception as exc:
            so_far = f" ({i} of {len(export.runs)} runs exported before)" if i else ""
            raise ShardError(f"mlflow: exporting {run.name} to {shown} failed{so_far}: {_one_line(exc)}") from None
        created += made
        notes += [
            f"mlflow: {run.name}: param {name} stays {old!r} (MLflow never changes a param); the new value "
            f"{new!r} is the tag {PARAM_TAG}{name}"
            for name, old, new in changed
        ]
    n = len(export.runs)
    runs = f"{n} run" + ("s" if n != 1 else "")
    line = f"mlflow: {runs} in experiment '{experiment_name}' at {shown} ({created} created, {n - created} updated)"
    if uri.startswith(("file:", "sqlite:")) or ("://" not in uri and not uri.startswith(("databricks", "uc"))):
        line += f"; look with `mlflow ui --backend-store-uri {shown}`"
    elif uri.startswith(("http://", "https://")):
        line += f"; open {shown.rstrip('/')}/#/experiments/{experiment_id}"
    return [line, *notes]


@contextlib.contextmanager
def _local_store_lock(uri: str) -> Iterator[None]:
    """For a store on this machine's disks (a folder, or a SQLite file), an exclusive flock on its
    folder for the whole export: exports into one store at once take turns. MLflow's folder store is
    safe for one writer at a time only: it checks a name, then makes a new folder (two exporters at
    once made two experiments of one name); it makes a metric's file, then writes it (another
    exporter's search read the empty file: "Metric ... is malformed"). On any store, two exports of
    one run each found none and made one, and four exports into a new SQLite file each began
    making its tables. A server has its own transactions (and the create-or-get below) and is not
    locked; no file is made for the lock."""
    folder = _local_store_folder(uri)
    if folder is None:
        yield
        return
    if uri.startswith("sqlite:") and not os.path.isdir(folder):
        raise UsageError(
            f"mlflow: tracking_uri {redact_urls(uri)!r} names a SQLite file in {folder}, which does not exist "
            "(SQLite makes the file, not its folder): make the folder, or give another --tracking-uri"
        )
    try:
        if not uri.startswith("sqlite:"):
            os.makedirs(folder, exist_ok=True)  # MLflow makes a folder store on its first write anyway
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ShardError(_store_failure(exc, redact_urls(uri))) from None
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _local_store_folder(uri: str) -> str | None:
    """The folder to lock for a store on this machine: a folder store's own folder, a SQLite file's
    folder (SQLAlchemy's `sqlite:///relative.db`, `sqlite:////absolute.db`); None for a server, a
    managed store or SQLite in memory."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(uri)
    if parsed.scheme == "sqlite":
        path = unquote(parsed.path)[1:]  # the one slash after the empty host
        return os.path.dirname(os.path.abspath(path)) if path and path != ":memory:" else None
    if parsed.scheme not in ("", "file") or uri.startswith(("databricks", "uc")):
        return None
    return unquote(parsed.path) if parsed.scheme else uri


def _create_or_get(client: mlflow.MlflowClient, name: str) -> tuple[Experiment, bool]:
    """(the experiment named `name`, whether this call made it). A lookup, then a create, is a race
    with any other exporter doing the same (four exports into a new experiment at once): the
    creator that loses is told it already exists, and takes the one the winner made."""
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment, False
    try:
        return client.get_experiment(client.create_experiment(name)), True
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS" or (experiment := client.get_experiment_by_name(name)) is None:
            raise
        return experiment, False


def _store_failure(exc: BaseException, shown: str) -> str:
    """The one line for a failure to open the tracking store, naming its true cause: the store
    refused the credentials, it cannot be reached (the network), or it answered with an error of
    its own (said as it is: never "check the network" by default)."""
    reason = _one_line(exc)
    fix = "check --tracking-uri / MLFLOW_TRACKING_URI"
    if any(f"error code {code}" in reason for code in (401, 403)):
        return (
            f"mlflow: the tracking store refused us at {shown}: {reason}; {fix} and the credentials "
            "(MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD)"
        )
    if network_failure(exc):
        return f"mlflow: cannot reach the tracking store at {shown}: {reason}; {fix} and the network"
    return f"mlflow: the tracking store at {shown} failed: {reason}"


def _runs_by_key(client: mlflow.MlflowClient, experiment_id: str) -> dict[str, Run]:
    """The experiment's active runs that shardeval exported, by their key: one search, paged,
    not one per tracker run (a folder store reads every run of the experiment on each search)."""
    found: dict[str, Run] = {}
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string=f"tags.`{KEY_TAG}` LIKE '%'", max_results=1000, page_token=token)
        for current in page:
            found.setdefault(current.data.tags[KEY_TAG], current)  # newest first: a copy made by hand loses
        token = page.token
        if not token:
            return found


def _export_run(
    client: mlflow.MlflowClient, experiment_id: str, run: TrackerRun, current: Run | None
) -> tuple[bool, list[tuple[str, str, str]]]:
    """One tracker run written, `current` its MLflow run if it has one; (whether it was created,
    the params that could not change)."""
    from mlflow.entities import Metric, Param, RunTag

    params = {name: value[:MAX_PARAM_CHARS] for name, value in run.params.items()}
    if current is not None:
        run_id, held_params, held_metrics = current.info.run_id, current.data.params, current.data.metrics
        if current.info.status != "RUNNING":
            client.update_run(run_id, status="RUNNING")  # reopened while it is updated
    else:
        run_id = client.create_run(experiment_id, run_name=run.name, tags=run.tags).info.run_id
        held_params, held_metrics = {}, {}
    changed = [(name, held_params[name], value) for name, value in params.items() if name in held_params and held_params[name] != value]
    tags = {**run.tags, **{f"{PARAM_TAG}{name}": new[:MAX_PARAM_CHARS] for name, _, new in changed}}
    now = int(time.time() * 1000)
    metrics = [Metric(name, value, now, run.step) for name, value in run.metrics.items() if held_metrics.get(name) != value]
    new_params = [Param(name, value) for name, value in params.items() if name not in held_params]
    tag_list = [RunTag(name, value) for name, value in tags.items()]
    for chunk in _chunks(metrics, MAX_METRICS):
        client.log_batch(run_id, metrics=chunk)
    for chunk in _chunks(new_params, MAX_PARAMS):
        client.log_batch(run_id, params=chunk)
    for chunk in _chunks(tag_list, MAX_TAGS):
        client.log_batch(run_id, tags=chunk)
    with tempfile.TemporaryDirectory(prefix="shardeval-mlflow-") as tmp:
        for path in run.artifacts(tmp):
            client.log_artifact(run_id, path)
    client.set_terminated(run_id, status="FINISHED")
    return current is None, changed


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _one_line(exc: BaseException) -> str:
    """A library's error as one line, URL credentials and MLflow's token kept out of it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = redact_urls("; ".join(lines)[:400]) or type(exc).__name__
    for name in ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD"):
        secret = os.environ.get(name)
        if secret:
            text = text.replace(secret, "***")
    return f"{type(exc).__name__}: {text}"

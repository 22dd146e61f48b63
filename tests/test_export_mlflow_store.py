"""`--to mlflow` against a store this MLflow cannot use, or one that says no: one line with the
fix, exit 2 before any merge (a folder store without MLFLOW_ALLOW_FILE_STORE, a database without
SQLAlchemy, MLflow's default when it is one of those, credentials in the URI), or exit 1 naming the
server (refusing the credentials); a deleted experiment is named with how to restore it. No run is
needed: the checks come before any tracker run is touched (docs/export.md)."""

from __future__ import annotations

import importlib.util
import os
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from collections.abc import Iterator

import pytest

pytest.importorskip("mlflow")
from mlflow import MlflowClient

from shardeval.api.exporter import TrackerExport
from shardeval.api.plugin import ShardError, UsageError
from shardeval_mlflow.config import MlflowExportConfig
from shardeval_mlflow.exporter import export_mlflow

pytestmark = pytest.mark.timeout(60)
TOKEN = "mlflow-store-test-token-0123456789"


def nothing_to_export(root: Path) -> TrackerExport:
    return TrackerExport(root=str(root), sweep=False, baseline=None, runs=[], verdict="COMPLETE")


def without(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))


def test_a_folder_store_without_mlflow_allow_file_store_says_to_set_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(UsageError, match=r"^tracking_uri 'file:///.*' is a folder store.*MLFLOW_ALLOW_FILE_STORE=true"):
        MlflowExportConfig(to="mlflow", tracking_uri=(tmp_path / "mlruns").as_uri()).check()
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    MlflowExportConfig(to="mlflow", tracking_uri=(tmp_path / "mlruns").as_uri()).check()
    assert not (tmp_path / "mlruns").exists()  # a check writes nothing


@pytest.mark.parametrize("module", ["sqlalchemy", "alembic"])
def test_a_database_store_without_sqlalchemy_and_the_default_one_say_what_to_give(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, module: str
) -> None:
    """mlflow-skinny alone opens no database, MLflow 3's default store included; the extra brings what
    it needs (tests/test_extras_alone.py opens the default store from a venv with only the extra)."""
    without(monkeypatch, module)
    with pytest.raises(
        UsageError,
        match=rf"^tracking_uri 'sqlite:///x.db' is a database store.*\({module} not installed.*"
        r"pip install 'shardeval\[mlflow\]'",
    ):
        MlflowExportConfig(to="mlflow", tracking_uri="sqlite:///x.db").check()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "postgresql+psycopg2://db.example/mlflow")
    with pytest.raises(UsageError, match=r"^MLFLOW_TRACKING_URI 'postgresql\+psycopg2://db.example/mlflow' is a database"):
        MlflowExportConfig(to="mlflow").check()
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.chdir(tmp_path)  # MLflow 3's default: sqlite:///mlflow.db here (./mlruns only where one exists)
    with pytest.raises(UsageError, match=r"^no tracking URI given .*MLflow's default 'sqlite:///.*mlflow.db' is a database store"):
        MlflowExportConfig(to="mlflow").check()
    assert list(tmp_path.iterdir()) == []
    MlflowExportConfig(to="mlflow", tracking_uri="databricks").check()  # Databricks' profile: no local store to check


def test_credentials_in_the_uri_are_refused_and_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "s3cr3t-value-in-a-query"
    for uri in (f"https://mlflow.example/?token={secret}", f"https://bob:{secret}@mlflow.example"):
        with pytest.raises(UsageError) as refused:
            MlflowExportConfig(to="mlflow", tracking_uri=uri).check()
        line = str(refused.value)
        assert secret not in line and "' holds credentials; " in line and "MLFLOW_TRACKING_TOKEN" in line, line


@pytest.fixture
def refusing_server() -> Iterator[str]:
    """A tracking server that answers every request 401, as one given no or a wrong token does."""

    class Refuse(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(401)
            self.send_header("Content-Length", "12")
            self.end_headers()
            self.wfile.write(b"Unauthorized")

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(5)


def test_a_server_refusing_the_credentials_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, refusing_server: str, tmp_path: Path
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", TOKEN)
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    with pytest.raises(ShardError) as refused:
        export_mlflow(MlflowExportConfig(to="mlflow", tracking_uri=refusing_server), nothing_to_export(tmp_path / "out"))
    line = str(refused.value)
    assert line.startswith(f"mlflow: the tracking store refused us at {refusing_server}: ") and "401" in line, line
    assert "\n" not in line and TOKEN not in line
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ  # its few retries were for the export only


def test_a_deleted_experiment_is_named_with_how_to_restore_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = (tmp_path / "mlruns").as_uri()
    client = MlflowClient(tracking_uri=store)
    client.delete_experiment(client.create_experiment("out"))
    with pytest.raises(UsageError, match=r"experiment 'out' at file:///.* is deleted: restore it \(`mlflow experiments restore"):
        export_mlflow(MlflowExportConfig(to="mlflow", tracking_uri=store), nothing_to_export(tmp_path / "out"))
    lines = export_mlflow(MlflowExportConfig(to="mlflow", tracking_uri=store, experiment="other"), nothing_to_export(tmp_path / "out"))
    assert lines[0].startswith("mlflow: 0 runs in experiment 'other' at file:///") and "mlflow ui --backend-store-uri" in lines[0]


def test_existing_runs_are_found_by_key_in_one_paged_search(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One search per export, not one per tracker run: a folder store reads every run on each."""
    from shardeval_mlflow.exporter import _runs_by_key

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    experiment = client.create_experiment("out")
    made = {f"abc{i:09d}/arith": client.create_run(experiment, tags={"shardeval.key": f"abc{i:09d}/arith"}).info.run_id for i in range(7)}
    client.create_run(experiment, run_name="by hand")  # not shardeval's: never taken for one
    client.delete_run(client.create_run(experiment, tags={"shardeval.key": "deleted/arith"}).info.run_id)
    pages: list[str | None] = []
    search = client.search_runs

    def three_a_page(ids: list[str], filter_string: str, max_results: int, page_token: str | None) -> object:
        pages.append(page_token)
        return search(ids, filter_string=filter_string, max_results=3, page_token=page_token)

    monkeypatch.setattr(client, "search_runs", three_a_page)
    found = _runs_by_key(client, experiment)
    assert {key: run.info.run_id for key, run in found.items()} == made and len(pages) == 3


@pytest.mark.parametrize(
    "status, body, said",
    [
        (500, b'{"error_code": "INTERNAL_ERROR", "message": "database is locked"}', "database is locked"),
        (400, b'{"error_code": "INVALID_PARAMETER_VALUE", "message": "experiment name too long"}', "experiment name too long"),
    ],
)
def test_a_store_that_answers_with_an_error_is_named_for_it_never_the_network(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, status: int, body: bytes, said: str
) -> None:
    """Issue 40, point 6: every failure of the store was "cannot reach the tracking store ... check
    the network", an `experiment already exists` as well. A store that answers says its own words;
    only a store that cannot be reached is the network (the unreachable case: test_export_mlflow)."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    try:
        with pytest.raises(ShardError) as failed:
            export_mlflow(MlflowExportConfig(to="mlflow", tracking_uri=url), nothing_to_export(tmp_path / "out"))
    finally:
        server.shutdown()
    line = str(failed.value)
    assert line.startswith(f"mlflow: the tracking store at {url} failed: ") and said in line, line
    assert "network" not in line and "cannot reach" not in line and "\n" not in line

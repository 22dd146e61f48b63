"""`shardeval export --to mlflow` against real MLflow with a local file store (no server, no
network), read back with MlflowClient: metrics equal scores.json to the last digit, params hold the
identity, artifacts are there; exporting again updates the same runs and adds no history; a sweep's
runs carry their checkpoint steps and a new checkpoint adds only its runs; a PARTIAL run later
completed updates the same run; failures are one line (docs/export.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import shardeval_cmd
from test_export_targets import config

mlflow = pytest.importorskip("mlflow")
from mlflow import MlflowClient  # noqa: E402

pytestmark = pytest.mark.timeout(240)
TOKEN = "mlflow-test-token-abcdef0123456789"


@pytest.fixture(autouse=True)
def file_store_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # reading back here, as the exports do


def env(store: Path) -> dict[str, str]:
    return {"MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_TRACKING_TOKEN": TOKEN, "MLFLOW_TRACKING_URI": store.as_uri()}


def runs(store: Path, experiment: str) -> dict[str, object]:
    client = MlflowClient(tracking_uri=store.as_uri())
    found = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], max_results=1000)
    return {r.info.run_name: r for r in found}


def export(root: Path, store: Path, *args: str) -> str:
    done = shardeval_cmd("export", str(root), "--to", "mlflow", *args, env=env(store))
    assert done.returncode == 0, done.stderr
    assert TOKEN not in done.stdout + done.stderr
    return done.stdout


def assert_equals_scores(run, scores: dict) -> None:
    for name, m in scores["metrics"].items():
        safe = name.replace("@", "_at_")
        got = run.data.metrics
        assert (got[safe], got[f"{safe}_ci_low"], got[f"{safe}_ci_high"], got[f"{safe}_n"]) == (
            m["value"],
            m["ci_low"],
            m["ci_high"],
            m["n"],
        ), name
    assert (run.data.metrics["n_ok"], run.data.metrics["n_missing"]) == (scores["n_ok"], scores["n_missing"])


def test_a_run_is_one_mlflow_run_per_benchmark_equal_to_scores_json_and_exporting_again_updates_it(tmp_path: Path) -> None:
    out, store = tmp_path / "out", tmp_path / "mlruns"
    cfg = config(tmp_path)
    half = shardeval_cmd("run", str(cfg), "--shard", "0/2", "-o", str(out / "shard_0"))
    assert half.returncode == 0, half.stderr
    said = export(out, store, "--experiment", "exp")
    assert "mlflow: 2 runs in experiment 'exp'" in said and "(2 created, 0 updated)" in said
    partial = runs(store, "exp")
    assert set(partial) == {"model/arith", "model/arith_b"}
    assert {r.data.tags["shardeval.status"] for r in partial.values()} == {"PARTIAL"}
    assert_equals_scores(partial["model/arith"], json.loads((out / "merged" / "scores.json").read_text())["arith"])

    rest = shardeval_cmd("run", str(cfg), "--shard", "1/2", "-o", str(out / "shard_1"))
    assert rest.returncode == 0, rest.stderr
    assert "(0 created, 2 updated)" in export(out, store, "--experiment", "exp")
    assert "(0 created, 2 updated)" in export(out, store, "--experiment", "exp")  # twice: nothing new anywhere
    complete = runs(store, "exp")
    assert {k: r.info.run_id for k, r in complete.items()} == {k: r.info.run_id for k, r in partial.items()}
    scores = json.loads((out / "merged" / "scores.json").read_text())
    client = MlflowClient(tracking_uri=store.as_uri())
    manifest = json.loads((out / "shard_0" / "manifest.json").read_text())
    for name, run in complete.items():
        bench = name.split("/")[1]
        assert_equals_scores(run, scores[bench])
        assert (run.data.tags["shardeval.status"], run.data.tags["shardeval.partial"], run.info.status) == ("COMPLETE", "false", "FINISHED")
        key = f"{manifest['config_hash'].split(':')[1][:12]}/{bench}"
        assert run.data.tags["shardeval.key"] == key and run.data.tags["shardeval.step"] == "0"
        p = run.data.params
        assert (p["config_hash"], p["model"], p["benchmark"], p["weights"], p["served_model"]) == (
            manifest["config_hash"],
            "model",
            bench,
            "sim",
            "sim",
        )
        assert p["shardeval_version"] == manifest["provenance"]["shardeval"] and p["host"]
        # the partial value and the complete one at the same step, never a copy of either
        history = client.get_metric_history(run.info.run_id, "accuracy")
        assert [h.step for h in history] == [0, 0] and history[-1].value == scores[bench]["metrics"]["accuracy"]["value"]
        assert sorted(a.path for a in client.list_artifacts(run.info.run_id)) == ["report.html", "samples.parquet", "scores.json"]
        local = Path(client.download_artifacts(run.info.run_id, "scores.json", str(tmp_path / name.replace("/", "_"))))
        assert json.loads(local.read_text()) == scores
    written = [p for p in store.rglob("*") if p.is_file()] + [p for p in out.rglob("*") if p.is_file()]
    assert not [p for p in written if TOKEN.encode() in p.read_bytes()]


def test_a_sweep_logs_each_model_at_its_checkpoint_and_a_new_checkpoint_adds_only_its_runs(tmp_path: Path) -> None:
    out, store = tmp_path / "out", tmp_path / "mlruns"
    done = shardeval_cmd("run", str(config(tmp_path, sweep=["base", "step1000"], n=8)), "-o", str(out))
    assert done.returncode == 0, done.stderr
    export(out, store)
    first = runs(store, "out")  # the experiment defaults to the directory's name
    assert set(first) == {f"{m}/{b}" for m in ("base", "step1000") for b in ("arith", "arith_b")}
    client = MlflowClient(tracking_uri=store.as_uri())
    doc = json.loads((out / "merged" / "sweep.json").read_text())
    for name, run in first.items():
        model, bench = name.split("/")
        step = {"base": 0, "step1000": 1000}[model]
        assert [h.step for h in client.get_metric_history(run.info.run_id, "accuracy")] == [step]
        vs = [r for r in doc["vs_baseline"] if (r["service"], r["benchmark"]) == (model, bench)]
        assert ("vs_baseline/accuracy/diff" in run.data.metrics) == (model != "base") == bool(vs)
        if vs:
            assert run.data.metrics["vs_baseline/accuracy/diff"] == vs[0]["diff"]
            assert run.data.metrics["vs_baseline/accuracy/p_holm"] == vs[0]["p_holm"]
            assert run.data.tags["shardeval.baseline"] == "base"

    grown = shardeval_cmd("run", str(config(tmp_path, "grown.yaml", sweep=["base", "step1000", "step2000"], n=8)), "-o", str(out))
    assert grown.returncode == 0, grown.stderr
    assert "(2 created, 4 updated)" in export(out, store)
    second = runs(store, "out")
    assert set(second) - set(first) == {"step2000/arith", "step2000/arith_b"}
    assert {k: second[k].info.run_id for k in first} == {k: r.info.run_id for k, r in first.items()}


def test_a_param_that_changed_is_kept_and_its_new_value_is_a_tag(tmp_path: Path) -> None:
    out, store = tmp_path / "out", tmp_path / "mlruns"
    assert shardeval_cmd("run", str(config(tmp_path, n=4)), "-o", str(out)).returncode == 0
    export(out, store)
    path = out / "shard_1" / "manifest.json"  # as if shard 1 had been resumed on another host
    manifest = json.loads(path.read_text())
    manifest["provenance"]["host"] = "node-b"
    path.write_text(json.dumps(manifest))
    said = export(out, store)
    assert "param host stays" in said and "shardeval.param.host" in said
    for run in runs(store, "out").values():
        assert run.data.params["host"] != run.data.tags["shardeval.param.host"]
        assert "node-b" in run.data.tags["shardeval.param.host"]


def test_failures_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, store = tmp_path / "out", tmp_path / "mlruns"
    assert shardeval_cmd("run", str(config(tmp_path, n=4)), "-o", str(out)).returncode == 0
    start = time.monotonic()
    done = shardeval_cmd("export", str(out), "--to", "mlflow", "--tracking-uri", "http://127.0.0.1:9", env=env(store))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "cannot reach the tracking store at http://127.0.0.1:9" in lines[0] and lines[0].endswith("and the network")
    assert TOKEN not in done.stderr
    assert time.monotonic() - start < 60
    secret = "hunter2-password-value"
    done = shardeval_cmd("export", str(out), "--to", "mlflow", "--tracking-uri", f"https://bob:{secret}@mlflow.example", env=env(store))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "holds credentials" in lines[0] and "MLFLOW_TRACKING_TOKEN" in lines[0]
    assert secret not in done.stderr + done.stdout
    # a SQLite file in a folder that does not exist: the user's to make (SQLite makes only the file)
    missing = tmp_path / "no-such-folder"
    done = shardeval_cmd("export", str(out), "--to", "mlflow", "--tracking-uri", f"sqlite:///{missing}/mlflow.db", env=env(store))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(missing) in lines[0] and "make the folder" in lines[0] and not missing.exists()
    # MLflow not installed: `check()` says which extra, before any merge
    import importlib.util

    from shardeval_mlflow.config import MlflowExportConfig
    from shardeval.api.plugin import UsageError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(UsageError, match=r"pip install 'shardeval\[mlflow\]'"):
        MlflowExportConfig(to="mlflow").check()


def test_config_export_runs_at_the_end_of_a_local_launch(tmp_path: Path) -> None:
    out, store = tmp_path / "out", tmp_path / "mlruns"
    cfg = config(tmp_path, n=4, export=[{"to": "mlflow", "tracking_uri": "${SHARDEVAL_TEST_STORE}", "experiment": "launch"}])
    done = shardeval_cmd("run", str(cfg), "-o", str(out), env={**env(store), "SHARDEVAL_TEST_STORE": store.as_uri()})
    assert done.returncode == 0 and "mlflow: 2 runs in experiment 'launch'" in done.stdout, done.stderr
    scores = json.loads((out / "merged" / "scores.json").read_text())
    for name, run in runs(store, "launch").items():
        assert_equals_scores(run, scores[name.split("/")[1]])


@pytest.mark.parametrize("kind", ["folder", "sqlite"])
def test_concurrent_exports_into_one_local_store_all_land_once(tmp_path: Path, kind: str) -> None:
    """Four `export --to mlflow` into one new experiment of one store on this machine at once: three
    runs, and the first of them twice. Each race was seen: two creators of one experiment (issue 40,
    point 6: the loser failed as "cannot reach the tracking store"); in a folder store, a search that
    read another exporter's metric file between its making and its writing (CI, stop 49: "Metric
    'accuracy_ci_high' is malformed"); two exports of one run that each found none and made one;
    into a new SQLite file, four makers of its tables. All land, each benchmark of each run once.
    Three rounds, each into a new experiment, bounded in time."""
    import os
    import subprocess
    import sys

    roots = [tmp_path / f"run{i}" for i in range(3)]
    for i, root in enumerate(roots):  # three runs (three sizes: three run ids), so exports of their own
        done = shardeval_cmd("run", str(config(tmp_path, f"c{i}.yaml", n=8 + i)), "-o", str(root))
        assert done.returncode == 0, done.stderr
    uri = (tmp_path / "mlruns").as_uri() if kind == "folder" else f"sqlite:///{tmp_path / 'mlflow.db'}"
    for round_ in range(3):
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "shardeval", "export", str(root), "--to", "mlflow", "--experiment", f"race{round_}"],
                env={**os.environ, **env(tmp_path), "MLFLOW_TRACKING_URI": uri},
                cwd=tmp_path,  # a SQLite store's artifacts go to ./mlruns (MLflow's default): here, not the checkout
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for root in [*roots, roots[0]]
        ]
        results = [p.communicate(timeout=180) for p in procs]
        for p, (stdout, stderr) in zip(procs, results):
            assert p.returncode == 0, stderr
            assert f"in experiment 'race{round_}'" in stdout
        client = MlflowClient(tracking_uri=uri)
        (experiment,) = [e for e in client.search_experiments() if e.name == f"race{round_}"]
        found = client.search_runs([experiment.experiment_id])
        keys = [r.data.tags["shardeval.key"] for r in found]
        assert len(keys) == len(set(keys)) == 6, sorted(keys)  # two benchmarks of each of the three runs, once
        assert experiment.artifact_location.removeprefix("file://").startswith(str(tmp_path / "mlruns")), experiment.artifact_location

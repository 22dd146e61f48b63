"""docs/plugins.md's worked exporter (`csv`, with its own flag `--csv-file`) is real code: taken out
of the page, loaded through SHARDEVAL_PLUGINS, it exports a real merged run from the command line
and from a config's `export:` at the end of a local launch; its flag and its check() behave as the
page says. It touches no core file: the core's command line learns the flag from the plugin."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from conftest import shardeval_cmd
from test_plugin_docs import worked_plugin

pytestmark = pytest.mark.timeout(180)
SIM = {"type": "sim", "bench": "arith", "accuracy": 0.7, "ttft_ms": 0, "itl_ms": 0, "output_tokens": 8}


@pytest.fixture
def plugin_env(tmp_path: Path) -> dict[str, str]:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "shardeval_csvlog.py").write_text(worked_plugin("shardeval_csvlog.py"), encoding="utf-8")
    return {"SHARDEVAL_PLUGINS": "shardeval_csvlog", "PYTHONPATH": os.pathsep.join([str(modules), os.environ.get("PYTHONPATH", "")])}


def config(tmp: Path, export: list[dict[str, str]] | None = None) -> Path:
    data = {
        "services": {"model": SIM},
        "benchmarks": [{"name": "arith", "params": {"n": 10}}],
        "cluster": {"type": "local", "shards": 2},
        "output": {"progress_interval_s": 0},
        **({"export": export} if export is not None else {}),
    }
    path = tmp / "run.yaml"
    path.write_text(json.dumps(data))
    return path


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def one_line_error(done) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, (done.returncode, done.stderr)
    return lines[0]


def test_the_worked_exporter_exports_a_merged_run_with_its_own_flag(tmp_path: Path, plugin_env: dict[str, str]) -> None:
    out = tmp_path / "out"
    launched = shardeval_cmd("run", str(config(tmp_path)), "-o", str(out), env=plugin_env)
    assert launched.returncode == 0, launched.stderr
    scores = json.loads((out / "merged" / "scores.json").read_text())

    target = tmp_path / "metrics.csv"
    done = shardeval_cmd("export", str(out), "--to", "csv", "--csv-file", str(target), env=plugin_env)
    assert done.returncode == 0, done.stderr
    assert f"csv: 1 run(s) appended to {target}" in done.stdout + done.stderr
    lines = rows(target)
    accuracy = [r for r in lines if r["metric"] == "accuracy"]
    assert len(accuracy) == 1 and accuracy[0]["model"] == "model" and accuracy[0]["benchmark"] == "arith"
    assert accuracy[0]["status"] == "COMPLETE"
    assert float(accuracy[0]["value"]) == pytest.approx(scores["arith"]["metrics"]["accuracy"]["value"])

    # Appended, header once: the same key twice, as a tracker would find it again.
    again = shardeval_cmd("export", str(out), "--to", "csv", "--csv-file", str(target), env=plugin_env)
    assert again.returncode == 0, again.stderr
    assert target.read_text().count("key,model,benchmark") == 1
    assert [r["key"] for r in rows(target) if r["metric"] == "accuracy"] == [accuracy[0]["key"]] * 2

    # The plugin's flag, as the page says: refused without --to csv, and check() before any merge.
    assert "--to csv" in one_line_error(shardeval_cmd("export", str(out), "--csv-file", str(target), env=plugin_env))
    missing = tmp_path / "nowhere" / "m.csv"
    line = one_line_error(shardeval_cmd("export", str(out), "--to", "csv", "--csv-file", str(missing), env=plugin_env))
    assert str(missing) in line and "is not a folder" in line
    help_text = shardeval_cmd("export", "--help", env=plugin_env)
    assert help_text.returncode == 0 and "--csv-file" in help_text.stdout


def test_the_worked_exporter_runs_from_a_configs_export_list_at_the_end_of_a_launch(tmp_path: Path, plugin_env: dict[str, str]) -> None:
    target = tmp_path / "from_config.csv"
    done = shardeval_cmd("run", str(config(tmp_path, [{"to": "csv", "file": str(target)}])), "-o", str(tmp_path / "out"), env=plugin_env)
    assert done.returncode == 0, done.stderr
    assert {r["metric"] for r in rows(target)} >= {"accuracy"}
    # check() runs in the launch's preflight: one line, exit 2, nothing started
    bad = config(tmp_path, [{"to": "csv", "file": str(tmp_path / "nowhere" / "m.csv")}])
    line = one_line_error(shardeval_cmd("run", str(bad), "-o", str(tmp_path / "out2"), env=plugin_env))
    assert "is not a folder" in line
    assert not (tmp_path / "out2").exists()
